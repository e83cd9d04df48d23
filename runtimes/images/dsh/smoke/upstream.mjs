// A scripted DeepSeek-compatible upstream for the dsh smoke (Node stdlib only).
// Serves POST /v1/chat/completions on 127.0.0.1:PORT inside the network-less container, streaming
// SSE like the real API: the first tool-offering request gets a `write` tool call, the next one a
// final text answer; a request without tools (the session-title call) gets a short title. Every
// stream ends with a usage-only chunk whose numbers are also appended to the ledger, one JSON line
// per call with the request's headers (minus authorization) and top-level fields (minus messages
// and tool bodies), so the smoke can compare the Harness's own accounting and summarise the wire.
import { createServer } from 'node:http';
import { appendFileSync } from 'node:fs';

const [port, ledger] = process.argv.slice(2);
let calls = 0;
let toolTurns = 0;

createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => { raw += c; });
  req.on('end', () => {
    const body = raw ? JSON.parse(raw) : {};
    const n = calls++;
    const tools = (body.tools || []).map((t) => t.function?.name);
    const chunks = [];
    const base = { id: `chatcmpl-scripted-${n}`, object: 'chat.completion.chunk', created: 0, model: body.model };
    let kind;
    if (tools.length === 0) {
      kind = 'title';
      chunks.push({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'Smoke task' }, finish_reason: 'stop' }] });
    } else if (toolTurns++ === 0) {
      kind = 'tool_call';
      const args = JSON.stringify({ file_path: '/workspace/hello.txt', content: 'hello from dsh\n' });
      chunks.push({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '', tool_calls: [
        { index: 0, id: 'call_write_0', type: 'function', function: { name: 'write', arguments: args } }] }, finish_reason: null }] });
      chunks.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
    } else {
      kind = 'answer';
      chunks.push({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'Wrote /workspace/hello.txt.' }, finish_reason: 'stop' }] });
    }
    // Call-dependent numbers, so a dropped or double-counted call shows up in the comparison.
    const usage = { prompt_tokens: 1000 + 31 * n + (body.messages || []).length, completion_tokens: 11 + 5 * n };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    chunks.push({ ...base, choices: [], usage });
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== 'authorization'));
    const request = Object.fromEntries(Object.entries(body).filter(([k]) => k !== 'messages' && k !== 'tools'));
    appendFileSync(ledger, JSON.stringify({ call: n, kind, path: req.url, usage, headers, request, tools }) + '\n');
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (const c of chunks) res.write(`data: ${JSON.stringify(c)}\n\n`);
    res.end('data: [DONE]\n\n');
  });
}).listen(Number(port), '127.0.0.1');
