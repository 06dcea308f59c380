"""A model API of the test's own, for one agent CLI: `mock_api.py KIND IP PORT LOG COMMAND`.

KIND is the protocol the CLI speaks (`anthropic`: the Messages API). The
first request that offers a shell tool gets a reply that calls it with
COMMAND; the request that carries that call's result gets a final text
reply, FINISHED; every other request (titles, quota checks) a short text.
Each request is logged to LOG as one JSON line: method, path, Host, and
what the model was given back of the tool (its output, as the agent saw it).
"""
import http.server
import json
import sys

KIND, IP, PORT, LOG, COMMAND = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
FINISHED = "lockrun-agent-test: finished"


def log(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def sse(events):
    return "".join("event: %s\ndata: %s\n\n" % (e["type"], json.dumps(e)) for e in events).encode()


# --- Anthropic Messages API -------------------------------------------------

def anthropic_tool_result(body):
    """The text of the tool_result blocks in the last user message, if any."""
    msgs = body.get("messages") or []
    if not msgs or msgs[-1].get("role") != "user":
        return None
    content = msgs[-1].get("content")
    if not isinstance(content, list):
        return None
    out = None
    for block in content:
        if block.get("type") == "tool_result":
            c = block.get("content")
            if isinstance(c, list):
                c = "".join(b.get("text", "") for b in c if isinstance(b, dict))
            out = (out or "") + str(c)
    return out


def anthropic_reply(body):
    """(log entry, content blocks, stop reason) for one request."""
    tools = [t.get("name") for t in body.get("tools") or []]
    result = anthropic_tool_result(body)
    if result is not None:
        return {"turn": "final", "tool_output": result}, [{"type": "text", "text": FINISHED}], "end_turn"
    if "Bash" in tools:
        call = {"type": "tool_use", "id": "toolu_lockrun_1", "name": "Bash",
                "input": {"command": COMMAND, "description": "lockrun agent test"}}
        return {"turn": "tool_call"}, [call], "tool_use"
    return {"turn": "other"}, [{"type": "text", "text": "ok"}], "end_turn"


def anthropic_stream(blocks, stop, model):
    events = [{"type": "message_start", "message": {
        "id": "msg_lockrun", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append({"type": "content_block_start", "index": i,
                           "content_block": {"type": "text", "text": ""}})
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "text_delta", "text": b["text"]}})
        else:
            events.append({"type": "content_block_start", "index": i,
                           "content_block": dict(b, input={})})
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta",
                                     "partial_json": json.dumps(b["input"])}})
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": 5}})
    events.append({"type": "message_stop"})
    return sse(events)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, ctype, data):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"method": "GET", "path": self.path, "host": self.headers.get("Host")})
        self.send(404, "application/json", b'{"error":"not here"}')

    def do_HEAD(self):
        log({"method": "HEAD", "path": self.path, "host": self.headers.get("Host")})
        self.send(200, "text/plain", b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        entry = {"method": "POST", "path": self.path, "host": self.headers.get("Host")}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if KIND == "anthropic" and self.path.split("?")[0].endswith("/v1/messages"):
            said, blocks, stop = anthropic_reply(body)
            entry.update(said)
            log(entry)
            model = body.get("model", "claude-test")
            if body.get("stream"):
                self.send(200, "text/event-stream", anthropic_stream(blocks, stop, model))
            else:
                msg = {"id": "msg_lockrun", "type": "message", "role": "assistant", "model": model,
                       "content": blocks, "stop_reason": stop, "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}
                self.send(200, "application/json", json.dumps(msg).encode())
            return
        if KIND == "anthropic" and "count_tokens" in self.path:
            log(entry)
            self.send(200, "application/json", b'{"input_tokens": 10}')
            return
        log(entry)
        self.send(404, "application/json", b'{"error":"not here"}')


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer((IP, PORT), Handler).serve_forever()
