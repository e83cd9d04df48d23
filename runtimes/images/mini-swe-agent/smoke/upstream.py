"""A scripted OpenAI-compatible upstream for the mini-swe-agent smoke (stdlib only).

Serves POST /v1/chat/completions on 127.0.0.1:PORT inside the network-less container. Each request
gets the next scripted reply: bash tool calls that write and check a file, then the submit command.
Every reply carries a usage block whose numbers the server also appends to its own ledger
(one JSON line per call), so the smoke can compare the harness's trajectory against the
upstream's count. Requests are logged (headers minus authorization, body) for the wire summary.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
LEDGER = sys.argv[2]

SCRIPT = [
    "printf 'hello from mini-swe-agent\\n' > /workspace/hello.txt",
    "cat /workspace/hello.txt && wc -c /workspace/hello.txt",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
]


class Handler(BaseHTTPRequestHandler):
    calls = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        n = Handler.calls
        Handler.calls += 1
        command = SCRIPT[min(n, len(SCRIPT) - 1)]
        # Distinct, call-dependent numbers so a harness that drops or double-counts a call is caught.
        usage = {"prompt_tokens": 100 + 17 * n + len(body.get("messages", [])),
                 "completion_tokens": 7 + 3 * n}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        reply = {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": f"Step {n + 1}.",
                    "tool_calls": [{
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                    }],
                },
            }],
            "usage": usage,
        }
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}
        with open(LEDGER, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({
                "call": n, "path": self.path, "usage": usage, "headers": headers,
                "request": {k: body[k] for k in sorted(body) if k != "messages"},
                "n_messages": len(body.get("messages", [])),
            }) + "\n")
        out = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
