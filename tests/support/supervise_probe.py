"""Probe for tests/supervise.rs: the metadata calls and unix connects the
seccomp supervisor answers. usage: python3 supervise_probe.py OP ARGS... [; OP ARGS...]
Prints one line per op: "ok" or "errno=<NAME>" (to stdout, or to the file
$PROBE_OUT names when stdout itself is the canary). It never judges itself;
the test judges from outside (metadata, listeners) and from these lines."""
import errno
import os
import socket
import sys

OUT = b"escaped\n"


def ro(path):
    return os.open(path, os.O_RDONLY)


def dirfd(d):
    return os.open(d, os.O_RDONLY | os.O_DIRECTORY)


def wo(path):
    """Open for writing without changing the file (no truncation, no write)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def stream_connect(path, nonblock=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if nonblock:
        s.setblocking(False)
    s.connect(path)
    s.setblocking(True)
    s.sendall(OUT)
    s.close()


def serve_stream(path, nonblock=False):
    """A server and a client of our own, at `path` (absolute or relative)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if nonblock:
        c.setblocking(False)
    c.connect(path)
    c.setblocking(True)
    c.sendall(b"ping")
    conn, _ = srv.accept()
    got = conn.recv(4)
    conn.sendall(b"pong")
    back = c.recv(4)
    for x in (c, conn, srv):
        x.close()
    os.unlink(path)
    if (got, back) != (b"ping", b"pong"):
        raise SystemExit("roundtrip failed: %r %r" % (got, back))


def serve_dgram(path, connect):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if connect:
        c.connect(path)
        c.send(b"ping")
    else:
        c.sendto(b"ping", path)
    got = srv.recv(4)
    c.close()
    srv.close()
    os.unlink(path)
    if got != b"ping":
        raise SystemExit("datagram lost: %r" % got)


def dgram_sendto(path):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.sendto(OUT, path)
    c.close()


def dgram_connect(path):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.connect(path)
    c.send(OUT)
    c.close()


FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_NODUMP_FL = 0x80086601, 0x40086602, 0x40
FS_IOC_ENABLE_VERITY = 0x40806685


def chattr_nodump(path):
    import fcntl, struct
    fd = ro(path)
    flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))[0]
    fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags | FS_NODUMP_FL))


def op(name, a):
    if name == "cd":
        os.chdir(a[0])
    elif name == "dumpable":
        # prctl(PR_GET_DUMPABLE): 0 after running a program it cannot read.
        import ctypes
        v = ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0)
        print("dumpable=%d" % v, file=RESULTS)
        return
    elif name == "chmod":
        os.chmod(a[0], int(a[1], 8))
    elif name == "chmod_dirfd":
        os.chmod(a[1], int(a[2], 8), dir_fd=dirfd(a[0]))
    elif name == "fchmod_ro":
        os.fchmod(ro(a[0]), int(a[1], 8))
    elif name == "fchmod_fd":
        os.fchmod(int(a[0]), int(a[1], 8))
    elif name == "fchmod_w":
        os.fchmod(wo(a[0]), int(a[1], 8))
    elif name == "fchmod_acc3":
        # Access mode 3: neither read nor write, for ioctls; the kernel checks
        # both permissions, Landlock neither.
        os.fchmod(os.open(a[0], os.O_WRONLY | os.O_RDWR), int(a[1], 8))
    elif name == "fchown_fd":
        os.fchown(int(a[0]), int(a[1]), int(a[2]))
    elif name == "fchown_w":
        os.fchown(wo(a[0]), int(a[1]), int(a[2]))
    elif name == "futime_fd":
        os.utime(int(a[0]), (1, 1))
    elif name == "futime_w":
        os.utime(wo(a[0]), (1, 1))
    elif name == "fsetxattr_fd":
        os.setxattr(int(a[0]), "user.pwned", b"1")
    elif name == "fsetxattr_w":
        os.setxattr(wo(a[0]), "user.pwned", b"1")
    elif name == "fchmod_tmpfile":
        os.fchmod(os.open(a[0], os.O_TMPFILE | os.O_WRONLY, 0o600), int(a[1], 8))
    elif name == "fchmod_memfd":
        os.fchmod(os.memfd_create("x"), int(a[0], 8))
    elif name == "chattr_nodump":
        chattr_nodump(a[0])
    elif name == "enable_verity":
        import fcntl
        fcntl.ioctl(ro(a[0]), FS_IOC_ENABLE_VERITY, b"\1" + b"\0" * 127)
    elif name == "chown":
        os.chown(a[0], int(a[1]), int(a[2]))
    elif name == "lchown":
        os.lchown(a[0], int(a[1]), int(a[2]))
    elif name == "chown_dirfd":
        os.chown(a[1], int(a[2]), int(a[3]), dir_fd=dirfd(a[0]))
    elif name == "fchown_ro":
        os.fchown(ro(a[0]), int(a[1]), int(a[2]))
    elif name == "utime":
        os.utime(a[0], (1, 1))
    elif name == "utime_now":
        os.utime(a[0], None)
    elif name == "utime_dirfd":
        os.utime(a[1], (1, 1), dir_fd=dirfd(a[0]))
    elif name == "futime_ro":
        os.utime(ro(a[0]), (1, 1))
    elif name == "setxattr":
        os.setxattr(a[0], "user.pwned", b"1")
    elif name == "lsetxattr":
        os.setxattr(a[0], "user.pwned", b"1", follow_symlinks=False)
    elif name == "fsetxattr_ro":
        os.setxattr(ro(a[0]), "user.pwned", b"1")
    elif name == "removexattr":
        os.removexattr(a[0], a[1])
    elif name == "fremovexattr_ro":
        os.removexattr(ro(a[0]), a[1])
    elif name == "tcp":
        host, port = a[0].rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=3).close()
    elif name == "unix_stream":
        stream_connect(a[0])
    elif name == "unix_stream_nonblock":
        stream_connect(a[0], nonblock=True)
    elif name == "unix_dgram":
        dgram_sendto(a[0])
    elif name == "unix_dgram_connect":
        dgram_connect(a[0])
    elif name == "serve_stream":
        serve_stream(a[0])
    elif name == "serve_stream_nonblock":
        serve_stream(a[0], nonblock=True)
    elif name == "serve_dgram":
        serve_dgram(a[0], connect=False)
    elif name == "serve_dgram_connect":
        serve_dgram(a[0], connect=True)
    else:
        raise SystemExit("unknown op " + name)
    print("ok", file=RESULTS)


RESULTS = open(os.environ["PROBE_OUT"], "w") if "PROBE_OUT" in os.environ else sys.stdout
args = sys.argv[1:]
while args:
    if ";" in args:
        i = args.index(";")
        cur, args = args[:i], args[i + 1:]
    else:
        cur, args = args, []
    cur = [c.replace("{TMPDIR}", os.environ.get("TMPDIR", "/nonexistent")) for c in cur]
    try:
        op(cur[0], cur[1:])
    except OSError as e:
        print("errno=" + errno.errorcode.get(e.errno, str(e.errno)), file=RESULTS)
    RESULTS.flush()
