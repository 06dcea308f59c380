# The probe of tests/processes/scope.rs, tests/refusals_seen/scope.rs and
# tests/unix_guard.rs, run inside (and, for controls, outside) the sandbox:
# signals, abstract and pathname unix sockets, a file copied, a link read, a
# directory listed, a datagram sent.
# usage: python3 -c "$PROBE" OP ARGS... [; OP ARGS...]
# Prints one line per op: "ok" or "errno=<NAME>".
import ctypes, errno, os, platform, signal, socket, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r < 0:
        raise OSError(ctypes.get_errno(), "syscall")
    return r

ARM = platform.machine() == "aarch64"
NR = dict(tkill=130 if ARM else 200, tgkill=131 if ARM else 234,
          rt_sigqueueinfo=138 if ARM else 129, rt_tgsigqueueinfo=240 if ARM else 297)
F_SETOWN, F_SETOWN_EX, F_SETFL = 8, 15, 4
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902

def queued_info(sig):
    """A siginfo_t as sigqueue(3) makes it: SI_QUEUE, the sender's pid and uid."""
    info = ctypes.create_string_buffer(128)
    struct.pack_into("iiiII", info, 0, sig, 0, -1, os.getpid(), os.getuid())
    return info

def send_signal(call, pid, sig):
    if call == "kill":
        os.kill(pid, sig)
    elif call == "tkill":
        sc(NR["tkill"], pid, sig)
    elif call == "tgkill":
        sc(NR["tgkill"], pid, pid, sig)
    elif call == "sigqueue":
        sc(NR["rt_sigqueueinfo"], pid, sig, ctypes.addressof(queued_info(sig)))
    elif call == "tgsigqueue":
        sc(NR["rt_tgsigqueueinfo"], pid, pid, sig, ctypes.addressof(queued_info(sig)))
    elif call == "pidfd":
        fd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(fd, sig)
        finally:
            os.close(fd)
    else:
        raise SystemExit("unknown signal call " + call)

def sigio(how, pid):
    """Make `pid` (a process; negative: a group) the owner of a socket's
    SIGIO, then make the socket readable: the owner gets SIGIO."""
    a, b = socket.socketpair()
    if how == "setown":
        if libc.fcntl(a.fileno(), F_SETOWN, pid) < 0:
            raise OSError(ctypes.get_errno(), "F_SETOWN")
    elif how == "setown_ex":
        ex = struct.pack("ii", 2 if pid < 0 else 1, abs(pid))
        buf = ctypes.create_string_buffer(ex, 8)
        if libc.fcntl(a.fileno(), F_SETOWN_EX, buf) < 0:
            raise OSError(ctypes.get_errno(), "F_SETOWN_EX")
    else:
        v = ctypes.c_int(pid)
        if libc.ioctl(a.fileno(), FIOSETOWN if how == "fiosetown" else SIOCSPGRP, ctypes.byref(v)) < 0:
            raise OSError(ctypes.get_errno(), how)
    flags = libc.fcntl(a.fileno(), 3, 0)  # F_GETFL
    libc.fcntl(a.fileno(), F_SETFL, flags | 0o20000)  # O_ASYNC
    b.send(b"x")
    HELD.append((a, b))

def abstract_addr(name):
    return b"\0" + name.encode()

# Sockets kept open until the probe ends.
HELD = []

def op(name, a):
    if name == "signal":
        # signal CALL PID SIG
        send_signal(a[0], int(a[1]), int(a[2]))
    elif name == "ignore":
        # ignore SIG: this process ignores it from here on.
        signal.signal(int(a[0]), signal.SIG_IGN)
    elif name == "killpg":
        os.kill(-int(a[0]), int(a[1]))
    elif name == "kill0":
        os.kill(0, int(a[0]))
    elif name == "kill_every":
        os.kill(-1, int(a[0]))
    elif name == "sigio":
        # sigio HOW PID (HOW: setown, setown_ex, fiosetown, siocspgrp)
        sigio(a[0], int(a[1]))
    elif name == "abstract_connect":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(abstract_addr(a[0])); s.sendall(b"pwned")
        HELD.append(s)
    elif name == "abstract_sendto":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"pwned", abstract_addr(a[0]))
    elif name == "abstract_sendmsg":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendmsg([b"pwned"], [], 0, abstract_addr(a[0]))
    elif name == "abstract_own":
        # A stream listener and a datagram socket the run binds itself, each
        # reached by a socket of the run by its name.
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(abstract_addr(a[0])); srv.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(abstract_addr(a[0])); c.sendall(b"own")
        conn, _ = srv.accept()
        assert conn.recv(3) == b"own"
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        d.bind(abstract_addr(a[0] + "-dgram"))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"own", abstract_addr(a[0] + "-dgram"))
        assert d.recv(3) == b"own"
        # Autobind: the name the kernel chose, reached by it.
        e = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        e.bind(b"")
        s.sendto(b"auto", e.getsockname())
        assert e.recv(4) == b"auto"
        HELD.extend([srv, c, conn, d, s, e])
    elif name == "unix_connect":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(a[0]); s.sendall(b"pwned")
        HELD.append(s)
    elif name == "unix_sendto":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"pwned", a[0])
    elif name == "unix_sendmsg":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendmsg([b"pwned"], [], 0, a[0])
    elif name == "unix_own":
        # A listener the run binds in its worktree, reached by its path.
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(a[0]); srv.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(a[0]); c.sendall(b"own")
        conn, _ = srv.accept()
        assert conn.recv(3) == b"own"
        HELD.extend([srv, c, conn])
    elif name == "unix_dgram_own":
        # A datagram socket the run binds in its worktree, reached by a socket
        # connected to it (the supervisor connects) that then sends to its peer.
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        d.bind(a[0])
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.connect(a[0]); s.send(b"own"); s.sendmsg([b"msg"])
        assert d.recv(3) == b"own" and d.recv(3) == b"msg"
        HELD.extend([d, s])
    elif name == "copy":
        # copy SRC DST: read SRC whole and write it to DST.
        with open(a[0], "rb") as f:
            data = f.read()
        with open(a[1], "wb") as f:
            f.write(data)
    elif name == "readlink":
        os.readlink(a[0])
    elif name == "lists":
        # lists DIR NAME: whether DIR lists NAME (ENOENT if not).
        if a[1] not in os.listdir(a[0]):
            raise OSError(errno.ENOENT, a[1])
    elif name == "inet_sendto":
        # inet_sendto ADDR PORT: one UDP datagram.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"pwned", (a[0], int(a[1])))
    elif name == "swap_race":
        # swap_race PATH SECONDS: a thread connects descriptor N, an inet UDP
        # socket, with a 110-byte buffer holding an inet address (the
        # supervisor, seeing an inet socket, lets the call go on), while
        # another puts a unix socket under N and a pathname in the buffer,
        # and back, again and again. Prints the tries and the connects that
        # succeeded: only a unix one can (the inet hooks refuse 127.0.0.1:1).
        import threading, time
        n, size = 100, 110
        un = struct.pack("H", socket.AF_UNIX) + a[0].encode()
        un += b"\0" * (size - len(un))
        inet = struct.pack("=HH4s", socket.AF_INET, socket.htons(1), socket.inet_aton("127.0.0.1"))
        inet += b"\0" * (size - len(inet))
        buf = ctypes.create_string_buffer(inet, size)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        os.dup2(udp.fileno(), n)
        stop = []
        def flip():
            while not stop:
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                for _ in range(200):
                    os.dup2(u.fileno(), n); ctypes.memmove(buf, un, size)
                    os.dup2(udp.fileno(), n); ctypes.memmove(buf, inet, size)
                u.close()
        t = threading.Thread(target=flip); t.start()
        tries = connected = 0
        end = time.time() + float(a[1])
        while time.time() < end:
            tries += 1
            if libc.connect(n, buf, size) == 0:
                connected += 1
        stop.append(1); t.join()
        print("tries=%d connected=%d" % (tries, connected))
        return
    else:
        raise SystemExit("unknown op " + name)
    print("ok")

args = sys.argv[1:]
while args:
    if ";" in args:
        i = args.index(";"); cur, args = args[:i], args[i + 1:]
    else:
        cur, args = args, []
    try:
        op(cur[0], cur[1:])
    except OSError as e:
        print("errno=" + errno.errorcode.get(e.errno, str(e.errno)))
    sys.stdout.flush()
