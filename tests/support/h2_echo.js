// An HTTP/2-only test host (TLS, ALPN h2): answers each stream with what it
// got (path, x-api-key, the body's length, the protocol), streams three
// server-sent events 0.6 s apart at /sse, and logs one line per stream: the
// connection's client port, the method, the path, the protocol and the
// x-api-key header, so that a test can tell streams of one upstream
// connection (same port) and what arrived.
// argv: port cert key log
const fs = require("node:fs");
const http2 = require("node:http2");

const [port, cert, key, log] = process.argv.slice(2);
const out = fs.openSync(log, "a");
const server = http2.createSecureServer({
  cert: fs.readFileSync(cert),
  key: fs.readFileSync(key),
  allowHTTP1: false,
});
server.on("stream", (stream, headers) => {
  const path = headers[":path"];
  const key = headers["x-api-key"];
  const from = stream.session.socket.remotePort;
  fs.writeSync(out, `${from} ${headers[":method"]} ${path} h2 ${key}\n`);
  if (path === "/sse") {
    stream.respond({ ":status": 200, "content-type": "text/event-stream" });
    let i = 0;
    const tick = setInterval(() => {
      stream.write(`data: event ${i}\n\n`);
      if (++i === 3) {
        clearInterval(tick);
        stream.end();
      }
    }, 600);
    return;
  }
  let n = 0;
  stream.on("data", (c) => (n += c.length));
  stream.on("end", () => {
    stream.respond({ ":status": 200, "content-type": "text/plain" });
    stream.end(`path=${path}\nkey=${key}\nbody=${n}\nproto=h2\n`);
  });
});
server.listen(Number(port), "0.0.0.0");
