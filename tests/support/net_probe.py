"""Network probe for tests/net.rs: waits for "go" on stdin (the test moves it
into the run cgroup first), tries ONE way out, and prints one line:
`ok` or `errno <n> <name>`. It never judges itself; the test judges from
outside (its listener) and from this line (the errno)."""
import errno
import os
import socket
import sys


def result(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return "errno %d %s" % (e.errno, errno.errorcode.get(e.errno, "?"))


def fam(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def tcp(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect((host, port))
        s.sendall(b"escaped\n")
        s.close()
    return go


def mptcp(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_STREAM, 262)  # IPPROTO_MPTCP
        s.settimeout(3)
        s.connect((host, port))
        s.sendall(b"escaped\n")
        s.close()
    return go


def tfo(host, port):
    def go():
        # Blocking on purpose: a timeout makes the socket non-blocking and
        # sendto(MSG_FASTOPEN) would return EINPROGRESS before the hook's verdict matters.
        s = socket.socket(fam(host), socket.SOCK_STREAM)
        s.sendto(b"escaped\n", socket.MSG_FASTOPEN, (host, port))
        s.close()
    return go


def udp_sendto(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM)
        s.sendto(b"escaped\n", (host, port))
        s.close()
    return go


def udp_connect(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM)
        s.connect((host, port))
        s.send(b"escaped\n")
        s.close()
    return go


def udplite_sendto(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM, 136)  # IPPROTO_UDPLITE
        s.sendto(b"escaped-sendto", (host, port))
        s.close()
    return go


def udplite_connect(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM, 136)
        s.connect((host, port))
        s.send(b"escaped-connect")
        s.close()
    return go


def dns(host, port):
    # A minimal query for example.com A: header + question.
    q = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
         b"\x07example\x03com\x00\x00\x01\x00\x01")

    def go():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(q, (host, port))
        s.close()
    return go


def ping(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM,
                          socket.IPPROTO_ICMP if fam(host) == socket.AF_INET else socket.IPPROTO_ICMPV6)
        # The "port" argument is a token the test looks for in the packet.
        echo = b"\x08\x00\x00\x00\x00\x01\x00\x01lockrun-ping-%d" % port
        s.sendto(echo, (host, 0))
        s.close()
    return go


def ping_connect(host, port):
    def go():
        s = socket.socket(fam(host), socket.SOCK_DGRAM,
                          socket.IPPROTO_ICMP if fam(host) == socket.AF_INET else socket.IPPROTO_ICMPV6)
        s.connect((host, 0))
        s.close()
    return go


def unix_stream(path, _port):
    def go():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(path)
        s.sendall(b"escaped\n")
        s.close()
    return go


def unix_dgram(path, _port):
    def go():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"escaped\n", path)
        s.close()
    return go


def unix_abstract(name, _port):
    """Listen on an abstract name ourselves and connect to it: inside the run, it must work."""
    def go():
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind("\0" + name)
        srv.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect("\0" + name)
        a, _ = srv.accept()
        c.sendall(b"hi")
        if a.recv(2) != b"hi":
            raise OSError(errno.EIO, "abstract socket did not deliver")
    return go


def unix_socketpair(_a, _b):
    def go():
        a, b = socket.socketpair()
        a.sendall(b"hi")
        if b.recv(2) != b"hi":
            raise OSError(errno.EIO, "socketpair did not deliver")
    return go


def flood(host, port):
    """Many refused datagrams in a row: more than the ring buffer holds."""
    def go():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        refused = 0
        for _ in range(3000):
            try:
                s.sendto(b"x", (host, port))
            except PermissionError:
                refused += 1
        if refused != 3000:
            raise OSError(errno.EIO, "only %d refused" % refused)
    return go


PROBES = {
    "flood": flood,
    "tcp": tcp, "mptcp": mptcp, "tfo": tfo, "udp_sendto": udp_sendto,
    "udp_connect": udp_connect, "udplite_sendto": udplite_sendto,
    "udplite_connect": udplite_connect, "dns": dns, "ping": ping, "ping_connect": ping_connect,
    "unix_stream": unix_stream, "unix_dgram": unix_dgram,
    "unix_abstract": unix_abstract, "unix_socketpair": unix_socketpair,
}


def main():
    kind, target = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    cwd = sys.argv[4] if len(sys.argv) > 4 else None
    nested = os.environ.get("PROBE_NESTED") == "1"
    if sys.stdin.readline().strip() != "go":
        print("no go")
        return 2
    if cwd:
        os.chdir(cwd)
    fn = PROBES[kind](target, port)
    if not nested:
        print(result(fn), flush=True)
        return 0
    # Double fork + setsid: the grandchild, reparented away from us, tries.
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            os.write(w, result(fn).encode())
            os._exit(0)
        os._exit(0)
    os.close(w)
    os.wait()
    out = b""
    while True:
        chunk = os.read(r, 100)
        if not chunk:
            break
        out += chunk
    print(out.decode(), flush=True)
    return 0


sys.exit(main())
