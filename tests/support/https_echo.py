# An HTTPS test host: echoes what it got (path, x-api-key, authorization, the
# body's length), streams server-sent events at /sse (one event every
# 0.6 s, chunked), takes a WebSocket handshake at /ws and then echoes each
# line it gets as `echo:<line>` (the bytes after the 101, no framing: the
# tunnel is what is tested), and logs one line per request: the client's port, the
# method, the path and the x-api-key header, so that a test can tell a kept
# upstream connection (same port) and what arrived.
# argv: port cert key log
import base64, hashlib, http.server, ssl, sys, time

port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = open(log, "a", buffering=1)


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def note(self):
        out.write("%d %s %s %s\n" % (self.client_address[1], self.command, self.path,
                                      self.headers.get("x-api-key")))

    def answer(self, body):
        body = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.note()
        if self.path == "/ws" and (self.headers.get("upgrade") or "").lower() == "websocket":
            key = self.headers.get("sec-websocket-key", "")
            accept = base64.b64encode(hashlib.sha1(
                (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            for line in self.rfile:
                self.wfile.write(b"echo:" + line)
                self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = ("data: event %d\n\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.6)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        self.answer("path=%s\nkey=%s\nauth=%s\n" % (self.path, self.headers.get("x-api-key"),
                                                   self.headers.get("authorization")))

    def do_POST(self):
        self.note()
        n = int(self.headers.get("content-length") or 0)
        got = self.rfile.read(n)
        self.answer("path=%s\nkey=%s\nbody=%d %s\n" % (self.path, self.headers.get("x-api-key"),
                                                      len(got), got.decode(errors="replace")))


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
