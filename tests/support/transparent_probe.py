"""Clients inside a run without proxy variables (tests/proxy_e2e/transparent.rs).

Each op prints one line: what happened, named exactly (`ok <status line>`,
`gaierror <errno>`, `oserror <ERRNO NAME>`, `rcode <n> from <addr>`).
"""
import errno
import socket
import ssl
import struct
import sys


def named(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def http_get(host, port, path="/hello.txt", header_host=None):
    """GET by name with socket.create_connection; the status line."""
    try:
        s = socket.create_connection((host, int(port)), timeout=10)
    except socket.gaierror as e:
        return "gaierror %d" % e.errno
    except OSError as e:
        return "oserror " + named(e)
    try:
        hh = header_host or host
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, hh)).encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        if not data:
            return "closed"
        return "ok " + data.split(b"\r\n")[0].decode()
    except OSError as e:
        return "oserror " + named(e)


def tls_hello(host, port, sni):
    """A TLS handshake to host:port naming `sni`: how it ended."""
    try:
        s = socket.create_connection((host, int(port)), timeout=10)
    except OSError as e:
        return "oserror " + named(e)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        ctx.wrap_socket(s, server_hostname=sni)
        return "handshake"
    except ssl.SSLError as e:
        # The test host is no TLS server: it answers the hello with text.
        return "sslerror"
    except OSError as e:
        return "oserror " + named(e)


def query(name, qtype=1):
    q = struct.pack(">HHHHHH", 0x5959, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", qtype, 1)


def dns_udp(server, name):
    """A raw query over UDP to server:53: the answer's rcode, and from where."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        s.sendto(query(name), (server, 53))
        data, frm = s.recvfrom(512)
    except OSError as e:
        return "oserror " + named(e)
    return "rcode %d from %s:%d answers %d" % (data[3] & 15, frm[0], frm[1], data[7])


def dns_tcp(server, name):
    """The same over TCP (length-prefixed)."""
    try:
        s = socket.create_connection((server, 53), timeout=5)
        m = query(name)
        s.sendall(struct.pack(">H", len(m)) + m)
        n = struct.unpack(">H", s.recv(2))[0]
        data = s.recv(n)
    except OSError as e:
        return "oserror " + named(e)
    return "rcode %d answers %d" % (data[3] & 15, data[7])


def resolve(name):
    try:
        return "addr " + socket.gethostbyname(name)
    except socket.gaierror as e:
        return "gaierror %d" % e.errno


OPS = {"get": http_get, "tls": tls_hello, "udp": dns_udp, "tcp": dns_tcp, "resolve": resolve}

for spec in sys.argv[1:]:
    op, *args = spec.split(",")
    print("%s=%s" % (spec, OPS[op](*args)), flush=True)
