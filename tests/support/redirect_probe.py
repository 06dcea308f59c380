"""Probe for tests/redirect.rs: waits for "go" on stdin (the test moves it
into the run cgroup first), makes ONE connection or DNS exchange, and
prints one line: what the client saw (`ok <peer address> <peer port>
[<reply>]`), or `errno <n> <name>`. It never judges itself."""
import errno
import socket
import sys


def fam(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def tcp_peer(host, port):
    """Connect, say which peer getpeername names, send a line."""
    s = socket.socket(fam(host), socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect((host, port))
    peer = s.getpeername()
    s.sendall(b"hello\n")
    s.close()
    return "ok %s %d" % (peer[0], peer[1])


QUERY = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
         b"\x07example\x03com\x00\x00\x01\x00\x01")


def dns_sendto(host, port):
    """An unconnected UDP query: the source the reply shows."""
    s = socket.socket(fam(host), socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(QUERY, (host, port))
    data, src = s.recvfrom(512)
    return "ok %s %d %s" % (src[0], src[1], data.decode(errors="replace"))


def dns_connect(host, port):
    """A connected UDP query (glibc's way): the peer and the reply's source."""
    s = socket.socket(fam(host), socket.SOCK_DGRAM)
    s.settimeout(3)
    s.connect((host, port))
    peer = s.getpeername()
    s.send(QUERY)
    data, src = s.recvfrom(512)
    if src[:2] != peer[:2]:
        return "mismatch peer %s %d source %s %d" % (peer[0], peer[1], src[0], src[1])
    return "ok %s %d %s" % (src[0], src[1], data.decode(errors="replace"))


PROBES = {"tcp_peer": tcp_peer, "dns_sendto": dns_sendto, "dns_connect": dns_connect}


def main():
    kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if sys.stdin.readline().strip() != "go":
        print("no go")
        return 2
    try:
        out = PROBES[kind](host, port)
    except OSError as e:
        out = "errno %d %s" % (e.errno, errno.errorcode.get(e.errno, "?"))
    print(out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
