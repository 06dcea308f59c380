"""Network probe for tests/net_e2e.rs, run inside the real `lockrun`.

usage: python3 net_e2e.py OP ARGS... [; OP ARGS...]
Prints one line per op: `ok`, `errno <n> <NAME>`, or (for `cgroup` and
`exec`) what the op reports. It never judges itself: the test judges from
outside (its listeners, files and cgroups) and from these lines."""
import ctypes
import errno
import os
import socket
import subprocess
import sys


def err(e):
    if e.errno is None:
        return "error %s" % e
    return "errno %d %s" % (e.errno, errno.errorcode.get(e.errno, "?"))


def fam(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def tcp(host, port):
    """Every address the name resolves to; `ok` if any got through, else the last errno."""
    last = None
    for af, typ, proto, _, sa in socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM):
        s = socket.socket(af, typ, proto)
        try:
            s.settimeout(3)
            s.connect(sa)
            s.sendall(b"escaped\n")
            return "ok"
        except OSError as e:
            last = e
        finally:
            s.close()
    raise last


def mptcp(host, port):
    s = socket.socket(fam(host), socket.SOCK_STREAM, 262)  # IPPROTO_MPTCP
    s.settimeout(3)
    s.connect((host, int(port)))
    s.sendall(b"escaped\n")
    s.close()


def tfo(host, port):
    # Blocking on purpose: on a non-blocking socket sendto(MSG_FASTOPEN)
    # returns EINPROGRESS before the hook's verdict shows.
    s = socket.socket(fam(host), socket.SOCK_STREAM)
    s.sendto(b"escaped\n", socket.MSG_FASTOPEN, (host, int(port)))
    s.close()


def udp_sendto(host, port):
    s = socket.socket(fam(host), socket.SOCK_DGRAM)
    s.sendto(b"escaped\n", (host, int(port)))
    s.close()


def udp_connect(host, port):
    s = socket.socket(fam(host), socket.SOCK_DGRAM)
    s.connect((host, int(port)))
    s.send(b"escaped\n")
    s.close()


def udplite(how, host, port):
    s = socket.socket(fam(host), socket.SOCK_DGRAM, 136)  # IPPROTO_UDPLITE
    if how == "connect":
        s.connect((host, int(port)))
        s.send(b"escaped-connect")
    else:
        s.sendto(b"escaped-sendto", (host, int(port)))
    s.close()


def dns(host, port):
    # A query for example.com A: header + question.
    q = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
         b"\x07example\x03com\x00\x00\x01\x00\x01")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(q, (host, int(port)))
    s.close()


def ping(host, token):
    """An ICMP echo on a ping socket; the test looks for the token in the packet."""
    v6 = ":" in host
    s = socket.socket(fam(host), socket.SOCK_DGRAM,
                      socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
    echo = (b"\x80" if v6 else b"\x08") + b"\x00\x00\x00\x00\x01\x00\x01"
    s.sendto(echo + b"lockrun-e2e-ping-" + token.encode(), (host, 0))
    s.close()


def raw(kind):
    if kind == "inet":
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    elif kind == "inet6":
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    elif kind == "packet":
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
    elif kind == "packet_dgram":
        s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3))
    else:
        raise ValueError(kind)
    s.close()


def unix_stream(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    s.sendall(b"escaped\n")
    s.close()


def unix_abstract(name):
    unix_stream("\0" + name)


def unix_pair_in(directory):
    """Server and client both here: bind, connect, exchange, clean up."""
    path = os.path.join(os.path.expandvars(directory), "e2e-%d.sock" % os.getpid())
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    try:
        srv.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(3)
        c.connect(path)
        a, _ = srv.accept()
        c.sendall(b"hi")
        if a.recv(2) != b"hi":
            raise OSError(errno.EIO, "the unix socket did not deliver")
    finally:
        os.unlink(path)


def cgroup_move(procs):
    """Write our own pid into another cgroup's cgroup.procs."""
    with open(procs, "w") as f:
        f.write(str(os.getpid()))


def cgroup():
    """Our cgroup v2 path and its id (the directory's inode): `<path> <id>`."""
    with open("/proc/self/cgroup") as f:
        path = [l.split(":", 2)[2].strip() for l in f if l.startswith("0::")][0]
    with open("/proc/self/mountinfo") as f:
        root = [l.split()[4] for l in f if l.split(" - ")[1].startswith("cgroup2 ")][0]
    return "%s %d" % (path, os.stat(root + path).st_ino)


def bpf():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(128)
    # BPF_MAP_CREATE of nothing: any cmd will do, the syscall itself is refused.
    if libc.syscall(ctypes.c_long(321), ctypes.c_long(0), attr, ctypes.c_long(128)) < 0:
        raise OSError(ctypes.get_errno(), "bpf")


def exec_(*argv):
    """A helper binary that waits for "go" and prints its own one-line result."""
    out = subprocess.run(list(argv), input=b"go\n", stdout=subprocess.PIPE, timeout=10)
    return out.stdout.decode().strip()


def grandchild(*rest):
    """Double fork + setsid: the reparented grandchild runs the op."""
    before = os.getsid(0)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            os.write(w, ("newsid=%d " % (os.getsid(0) != before)).encode() + one(list(rest)).encode())
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
    return out.decode()


OPS = {
    "tcp": tcp, "mptcp": mptcp, "tfo": tfo, "udp_sendto": udp_sendto,
    "udp_connect": udp_connect, "udplite": udplite, "dns": dns, "ping": ping, "raw": raw,
    "unix_stream": unix_stream, "unix_abstract": unix_abstract,
    "unix_pair_in": unix_pair_in, "cgroup_move": cgroup_move, "cgroup": cgroup,
    "bpf": bpf, "exec": exec_, "grandchild": grandchild,
}


def one(op):
    try:
        r = OPS[op[0]](*op[1:])
        return r if isinstance(r, str) else "ok"
    except OSError as e:
        return err(e)


def main():
    ops, cur = [], []
    for a in sys.argv[1:]:
        if a == ";":
            ops.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        ops.append(cur)
    for op in ops:
        print(one(op), flush=True)


main()
