"""A model API of the test's own, for one agent CLI: `mock_api.py KIND IP PORT LOG COMMAND`.

KIND is the protocol the CLI speaks: `anthropic` (the Messages API),
`openai` (the Responses API), `chat` (OpenAI's Chat Completions),
`gemini` (generateContent). The
first request that offers a shell tool gets a reply that calls it with
COMMAND (Codex 0.171 offers it only inside its JavaScript `exec` tool); the request that carries that call's result gets a final text
reply, FINISHED; every other request (titles, quota checks) a short text.
Each request is logged to LOG as one JSON line: method, path, Host, the
credentials it carried (`auth`: its x-api-key, Authorization and
x-goog-api-key headers), and what the model was given back of the tool
(its output, as the agent saw it).
"""
import http.server
import json
import subprocess
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
    shell = next((t for t in tools if t in ("Bash", "bash")), None)
    if shell:
        call = {"type": "tool_use", "id": "toolu_lockrun_1", "name": shell,
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


# --- OpenAI Responses API ---------------------------------------------------

def openai_tool_output(body):
    """The output of the tool calls handed back in the request's input, if any."""
    out = None
    for item in body.get("input") or []:
        if not isinstance(item, dict) or not item.get("type", "").endswith("_call_output"):
            continue
        o = item.get("output")
        if isinstance(o, dict):
            o = o.get("content") or json.dumps(o)
        if isinstance(o, list):
            o = "".join(x.get("text", "") for x in o if isinstance(x, dict))
        out = (out or "") + str(o)
    return out


# The shell tools of Codex versions, and their arguments.
OPENAI_SHELLS = {
    "shell_command": lambda c: {"command": c},
    "exec_command": lambda c: {"cmd": c},
    "shell": lambda c: {"command": ["bash", "-lc", c]},
}


def openai_tools(tools, prefix=""):
    """The names of `tools`, a namespace's tools named `namespace.name`."""
    names = []
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            names += openai_tools(t.get("tools"), prefix + t.get("name", "") + ".")
        elif t.get("name"):
            names.append(prefix + t["name"])
    return names


def openai_reply(body):
    """(log entry, output items) for one request."""
    # Codex 0.171 offers its tools in an `additional_tools` input item.
    offered = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            offered += item.get("tools") or []
    tools = openai_tools(offered)
    result = openai_tool_output(body)
    if result is not None:
        msg = {"type": "message", "role": "assistant", "id": "msg_lockrun_2",
               "content": [{"type": "output_text", "text": FINISHED, "annotations": []}]}
        return {"turn": "final", "tool_output": result}, [msg]
    if "functions.exec" in tools:
        # Code mode: the model writes JavaScript that calls the shell tool.
        js = "const r = await tools.exec_command({cmd: %s});\ntext(r);\n" % json.dumps(COMMAND)
        call = {"type": "custom_tool_call", "id": "ctc_lockrun_1", "call_id": "call_lockrun_1",
                "name": "exec", "input": js}
        return {"turn": "tool_call", "tools": tools}, [call]
    for name, args in OPENAI_SHELLS.items():
        if name in tools:
            call = {"type": "function_call", "id": "fc_lockrun_1", "call_id": "call_lockrun_1",
                    "name": name, "arguments": json.dumps(args(COMMAND))}
            return {"turn": "tool_call", "tools": tools}, [call]
    msg = {"type": "message", "role": "assistant", "id": "msg_lockrun_1",
           "content": [{"type": "output_text", "text": "ok", "annotations": []}]}
    return {"turn": "other", "tools": tools}, [msg]


def openai_stream(items):
    resp = {"id": "resp_lockrun", "object": "response", "status": "in_progress", "output": []}
    events = [{"type": "response.created", "response": resp}]
    for i, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": i, "item": item})
        if item["type"] == "message":
            events.append({"type": "response.output_text.delta", "output_index": i,
                           "item_id": item["id"], "content_index": 0,
                           "delta": item["content"][0]["text"]})
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    done = dict(resp, status="completed", output=items,
                usage={"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": 15})
    events.append({"type": "response.completed", "response": done})
    return sse(events)


# --- OpenAI Chat Completions -------------------------------------------------

def chat_tool_output(body):
    """The content of the tool messages after the last assistant message, if any."""
    out = None
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict) or m.get("role") != "tool":
            break
        c = m.get("content")
        if isinstance(c, list):
            c = "".join(x.get("text", "") for x in c if isinstance(x, dict))
        out = str(c) + (out or "")
    return out


def chat_reply(body):
    """(log entry, assistant message, finish reason) for one request."""
    tools = [(t.get("function") or {}).get("name") for t in body.get("tools") or []
             if isinstance(t, dict)]
    result = chat_tool_output(body)
    if result is not None:
        return {"turn": "final", "tool_output": result}, {"content": FINISHED}, "stop"
    if (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        text = json.dumps({"reasoning": "the task is done", "next_speaker": "user"})
        return {"turn": "json"}, {"content": text}, "stop"
    if "run_shell_command" in tools:
        args = {"command": COMMAND, "description": "lockrun agent test"}
        call = {"index": 0, "id": "call_lockrun_1", "type": "function",
                "function": {"name": "run_shell_command", "arguments": json.dumps(args)}}
        return {"turn": "tool_call", "tools": tools}, {"tool_calls": [call]}, "tool_calls"
    return {"turn": "other", "tools": tools}, {"content": "ok"}, "stop"


def chat_body(message, finish, model, stream):
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    head = {"id": "chatcmpl-lockrun", "created": 0, "model": model}
    if not stream:
        msg = dict({"role": "assistant", "content": None}, **message)
        for c in msg.get("tool_calls") or []:
            c.pop("index", None)
        return "application/json", json.dumps(dict(head, object="chat.completion", usage=usage, choices=[
            {"index": 0, "message": msg, "finish_reason": finish}])).encode()
    chunk = dict(head, object="chat.completion.chunk")
    events = [dict(chunk, choices=[{"index": 0, "delta": dict({"role": "assistant"}, **message),
                                    "finish_reason": None}]),
              dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
              dict(chunk, choices=[], usage=usage)]
    data = "".join("data: %s\n\n" % json.dumps(e) for e in events) + "data: [DONE]\n\n"
    return "text/event-stream", data.encode()


# --- Gemini generateContent -------------------------------------------------

def gemini_tool_output(body):
    out = None
    contents = body.get("contents") or []
    if contents:
        for part in contents[-1].get("parts") or []:
            fr = part.get("functionResponse") if isinstance(part, dict) else None
            if fr:
                out = (out or "") + json.dumps(fr.get("response"))
    return out


def gemini_reply(body):
    """(log entry, parts) for one request."""
    tools = [f.get("name") for t in body.get("tools") or [] for f in t.get("functionDeclarations") or []]
    config = body.get("generationConfig") or body.get("config") or {}
    if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema") \
            or config.get("responseSchema"):
        text = json.dumps({"reasoning": "the task is done", "next_speaker": "user"})
        return {"turn": "json"}, [{"text": text}]
    result = gemini_tool_output(body)
    if result is not None:
        return {"turn": "final", "tool_output": result}, [{"text": FINISHED}]
    if "run_shell_command" in tools:
        call = {"functionCall": {"name": "run_shell_command",
                                 "args": {"command": COMMAND, "description": "lockrun agent test"}}}
        return {"turn": "tool_call", "tools": tools}, [call]
    return {"turn": "other", "tools": tools}, [{"text": "ok"}]


def gemini_response(parts):
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "modelVersion": "gemini-test"}


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

    def auth(self):
        return " ".join(self.headers.get(h) or "" for h in ("x-api-key", "authorization", "x-goog-api-key")).strip()

    def do_GET(self):
        log({"method": "GET", "path": self.path, "host": self.headers.get("Host"), "auth": self.auth()})
        if self.path.split("?")[0].endswith("/models"):
            self.send(200, "application/json", b'{"object":"list","data":[],"models":[]}')
            return
        self.send(404, "application/json", b'{"error":"not here"}')

    def do_HEAD(self):
        log({"method": "HEAD", "path": self.path, "host": self.headers.get("Host"), "auth": self.auth()})
        self.send(200, "text/plain", b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        entry = {"method": "POST", "path": self.path, "host": self.headers.get("Host"), "auth": self.auth()}
        encoding = self.headers.get("Content-Encoding")
        if encoding:
            # Codex sends its requests zstd-compressed.
            entry["encoding"] = encoding
            if encoding == "zstd":
                raw = subprocess.run(["zstd", "-dc"], input=raw, capture_output=True).stdout
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
            entry["undecoded"] = raw[:200].hex()
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
        path = self.path.split("?")[0]
        if KIND == "openai" and path.endswith("/responses"):
            said, items = openai_reply(body)
            entry.update(said)
            log(entry)
            self.send(200, "text/event-stream", openai_stream(items))
            return
        if KIND == "chat" and path.endswith("/chat/completions"):
            said, message, finish = chat_reply(body)
            entry.update(said)
            log(entry)
            self.send(200, *chat_body(message, finish, body.get("model", "chat-test"),
                                      bool(body.get("stream"))))
            return
        if KIND == "gemini" and (":generateContent" in path or ":streamGenerateContent" in path):
            said, parts = gemini_reply(body)
            entry.update(said)
            log(entry)
            reply = json.dumps(gemini_response(parts))
            if ":streamGenerateContent" in path:
                self.send(200, "text/event-stream", ("data: %s\r\n\r\n" % reply).encode())
            else:
                self.send(200, "application/json", reply.encode())
            return
        if KIND == "gemini" and ":countTokens" in path:
            log(entry)
            self.send(200, "application/json", b'{"totalTokens": 10}')
            return
        if KIND == "anthropic" and "count_tokens" in self.path:
            log(entry)
            self.send(200, "application/json", b'{"input_tokens": 10}')
            return
        log(entry)
        self.send(404, "application/json", b'{"error":"not here"}')


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer((IP, PORT), Handler).serve_forever()
