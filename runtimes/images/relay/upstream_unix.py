"""A scripted upstream on a Unix socket, the way eval serves an attempt: the container reaches it
only through eval-shim's loopback relay (127.0.0.1:PORT -> the socket mounted at /run/eval).

Answers `POST /_eval/attest` with {"ok": true} (recording the shim's report) and
`POST /v1/chat/completions` with a scripted reply in the dialect the harness speaks:
- a request with `"stream": true` (the DeepSeek Harness): SSE chunks, a `write` tool call, then a
  text answer; a request without tools (its session-title call) gets a title;
- otherwise (mini-swe-agent via litellm): a JSON completion with `bash` tool calls that write and
  check a file, then the submit command.
Every reply's usage is appended to LEDGER with the request's headers (minus authorization) and
top-level fields (minus messages and tool bodies). Usage: upstream_unix.py SOCKET LEDGER ATTEST_OUT
"""

import json
import os
import socketserver
import sys
from http.server import BaseHTTPRequestHandler

SOCKET, LEDGER, ATTEST_OUT = sys.argv[1:4]
BASH_SCRIPT = [
    "printf 'hello through the relay\\n' > /workspace/hello.txt",
    "cat /workspace/hello.txt",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]
state = {"calls": 0, "tool_turns": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def address_string(self):
        return "unix"

    def reply(self, status, ctype, body):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/_eval/attest":
            with open(ATTEST_OUT, "wb") as f:
                f.write(raw)
            return self.reply(200, "application/json", b'{"ok":true}')
        body = json.loads(raw or b"{}")
        n = state["calls"]
        state["calls"] += 1
        tools = [t.get("function", {}).get("name") for t in body.get("tools", [])]
        usage = {"prompt_tokens": 500 + 23 * n + len(body.get("messages", [])),
                 "completion_tokens": 9 + 4 * n}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        base = {"id": f"chatcmpl-relay-{n}", "created": 0, "model": body.get("model")}
        if body.get("stream"):
            if not tools:
                kind, delta, finish = "title", {"role": "assistant", "content": "Relay smoke"}, "stop"
            elif state["tool_turns"] == 0:
                state["tool_turns"] += 1
                args = json.dumps({"file_path": "/workspace/hello.txt", "content": "hello through the relay\n"})
                kind, finish = "tool_call", "tool_calls"
                delta = {"role": "assistant", "content": "", "tool_calls": [
                    {"index": 0, "id": "call_write_0", "type": "function",
                     "function": {"name": "write", "arguments": args}}]}
            else:
                kind, delta, finish = "answer", {"role": "assistant", "content": "Wrote /workspace/hello.txt."}, "stop"
            chunks = [dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
                      dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
                      dict(base, object="chat.completion.chunk", choices=[], usage=usage)]
            out = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            ctype = "text/event-stream"
        else:
            kind = "tool_call"
            command = BASH_SCRIPT[min(n, len(BASH_SCRIPT) - 1)]
            out = json.dumps(dict(base, object="chat.completion", usage=usage, choices=[{
                "index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": f"Step {n + 1}.", "tool_calls": [{
                    "id": f"call_{n}", "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}}]))
            ctype = "application/json"
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}
        with open(LEDGER, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"call": n, "kind": kind, "path": self.path, "usage": usage,
                                     "headers": headers, "tools": tools,
                                     "request": {k: body[k] for k in sorted(body) if k not in ("messages", "tools")}}) + "\n")
        self.reply(200, ctype, out.encode())


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


if os.path.exists(SOCKET):
    os.unlink(SOCKET)
server = Server(SOCKET, Handler)
# The container runs as 65532 and connects to the socket; nobody else may.
os.chown(SOCKET, 65532, 65532)
os.chmod(SOCKET, 0o600)
print("listening", flush=True)
server.serve_forever()
