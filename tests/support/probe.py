# The probe run inside (and, for controls, outside) the sandbox.
# usage: python3 -c "$PROBE" OP ARGS... [; OP ARGS...]
# Prints one line per op: "ok" or "errno=<NAME>".
import ctypes, errno, os, socket, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r < 0:
        raise OSError(ctypes.get_errno(), "syscall")
    return r

NR = dict(bpf=321, unshare=272, mount=165, ptrace=101, io_uring_setup=425, clone=56, clone3=435)

def uring_socket(family):
    """IORING_OP_SOCKET: the kernel creates the socket; seccomp never sees socket()."""
    import mmap, struct
    params = ctypes.create_string_buffer(120)
    fd = sc(NR["io_uring_setup"], 4, ctypes.addressof(params))
    p = params.raw
    sq_entries, cq_entries = struct.unpack_from("II", p, 0)
    sq_head, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("7I", p, 40)
    cq_head, cq_tail, cq_mask, _, _, cqes = struct.unpack_from("6I", p, 80)
    size = max(sq_array + sq_entries * 4, cqes + cq_entries * 16)
    ring = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    sqes = mmap.mmap(fd, sq_entries * 64, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0x10000000)
    typ = 3 if family == 17 else 1
    sqe = bytearray(64)
    struct.pack_into("BBHiQQII", sqe, 0, 45, 0, 0, family, typ, 0, 0, 0)  # IORING_OP_SOCKET
    sqes[0:64] = bytes(sqe)
    tail = struct.unpack_from("I", ring, sq_tail)[0]
    struct.pack_into("I", ring, sq_array + (tail & struct.unpack_from("I", ring, sq_mask)[0]) * 4, 0)
    struct.pack_into("I", ring, sq_tail, tail + 1)
    sc(426, fd, 1, 1, 1, 0, 0)  # io_uring_enter(to_submit=1, min_complete=1, GETEVENTS)
    head = struct.unpack_from("I", ring, cq_head)[0]
    mask = struct.unpack_from("I", ring, cq_mask)[0]
    res = struct.unpack_from("i", ring, cqes + (head & mask) * 16 + 8)[0]
    if res < 0:
        raise OSError(-res, "IORING_OP_SOCKET")
    os.close(res)

IOPRIO_SET, IOPRIO_GET, IOPRIO_WHO_PROCESS, IOPRIO_IDLE = 251, 252, 1, 3 << 13

def lower_scheduling(op, pid):
    if op == "nice":
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    elif op == "affinity":
        os.sched_setaffinity(pid, {0})
    elif op == "sched_idle":
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    else:
        sc(IOPRIO_SET, IOPRIO_WHO_PROCESS, pid, IOPRIO_IDLE)

def scheduling(pid):
    """nice, CPU affinity, policy and I/O priority of task `pid`."""
    return (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getaffinity(pid),
            os.sched_getscheduler(pid), sc(IOPRIO_GET, IOPRIO_WHO_PROCESS, pid))

def sysv(call, *args):
    """A SysV IPC call through libc; OSError with its errno on failure."""
    f = getattr(libc, call)
    if call == "shmat":
        f.restype = ctypes.c_void_p
    r = f(*args)
    if r in (-1, None) or (call == "shmat" and r == ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), call)
    return r

def sysv_id(kind, how, n):
    """The IPC object `n` names: by key (looked up, which may fail) or by id."""
    return sysv(kind + "get", int(n), 0, 0) if how == "key" else int(n)

class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 16)]

def sysv_own():
    """Make a shared memory segment, a message queue and a semaphore of our
    own (IPC_PRIVATE), and use each: what programs inside a run may do."""
    shm = sysv("shmget", 0, 4096, 0o600)
    p = sysv("shmat", shm, None, 0)
    ctypes.memmove(p, b"mine", 4)
    assert ctypes.string_at(p, 4) == b"mine"
    libc.shmdt(ctypes.c_void_p(p)); libc.shmctl(shm, 0, None)
    q = sysv("msgget", 0, 0o600)
    sysv("msgsnd", q, ctypes.byref(Msg(1, b"mine")), 4, 0)
    m = Msg()
    sysv("msgrcv", q, ctypes.byref(m), 16, 0, 0o4000)  # IPC_NOWAIT
    assert m.mtext == b"mine"
    libc.msgctl(q, 0, None)
    sem = sysv("semget", 0, 1, 0o600)
    sysv("semop", sem, (ctypes.c_short * 3)(0, 1, 0o4000), 1)
    assert libc.semctl(sem, 0, 12) == 1  # GETVAL
    libc.semctl(sem, 0, 0)

class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long),
                ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]

def mq(call, *args):
    """A POSIX message queue call through libc; OSError with its errno on failure."""
    r = getattr(libc, call)(*args)
    if r < 0:
        raise OSError(ctypes.get_errno(), call)
    return r

def mq_receive(q):
    buf = ctypes.create_string_buffer(64)
    n = mq("mq_receive", q, buf, 64, None)
    return buf.raw[:n]

# Sockets the probe keeps open until it ends.
HELD = []

def op(name, a):
    if name == "write":
        with open(a[0], "w") as f: f.write("pwned")
    elif name == "append":
        with open(a[0], "a") as f: f.write("pwned")
    elif name == "read":
        with open(a[0], "rb") as f: f.read(1)
    elif name == "copy":
        with open(a[0], "rb") as f: data = f.read()
        with open(a[1], "wb") as f: f.write(data)
    elif name == "exec":
        # Run a[0] (no arguments) and wait for it; the exec's errno if refused.
        os.waitpid(os.posix_spawn(a[0], [a[0]], {}), 0)
    elif name == "readlink":
        os.readlink(a[0])
    elif name == "listdir":
        os.listdir(a[0])
    elif name == "klog_copy":
        # The kernel log through syslog(2) (SYSLOG_ACTION_READ_ALL), into a[0].
        buf = ctypes.create_string_buffer(1 << 20)
        n = libc.klogctl(3, buf, len(buf))
        if n < 0:
            raise OSError(ctypes.get_errno(), "syslog")
        with open(a[0], "wb") as f: f.write(buf.raw[:n])
    elif name == "lists":
        # Whether the dir a[0] lists the entry a[1] (ENOENT if not).
        if a[1] not in os.listdir(a[0]):
            raise OSError(errno.ENOENT, a[1])
    elif name == "open_read":
        # Open only: a terminal or the kernel log would block a read.
        os.close(os.open(a[0], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
    elif name == "link":
        os.link(a[0], a[1])
    elif name == "rename":
        os.rename(a[0], a[1])
    elif name == "symlink":
        os.symlink(a[0], a[1])
    elif name == "truncate":
        os.truncate(a[0], 0)
    elif name == "chmod":
        os.chmod(a[0], 0o777)
    elif name == "chmod_mode":
        os.chmod(a[0], int(a[1], 8))
    elif name == "open_raw":
        # openat(AT_FDCWD, path, flags, mode) as a raw syscall, as jemalloc
        # calls open: the mode is whatever the register holds.
        path = ctypes.create_string_buffer(a[0].encode())
        os.close(sc(257, -100, ctypes.addressof(path), int(a[1], 8), int(a[2], 8)))
    elif name == "create_mode":
        os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, int(a[1], 8)))
    elif name == "chown":
        os.chown(a[0], 0, 0)
    elif name == "utime":
        os.utime(a[0], (1, 1))
    elif name == "setxattr":
        os.setxattr(a[0], "user.pwned", b"1")
    elif name == "setfcap":
        # security.capability, vfs_cap_data revision 2: effective, and
        # CAP_SETUID (7) permitted; what `setcap cap_setuid+ep` writes.
        import struct
        os.setxattr(a[0], "security.capability", struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0))
    elif name == "mknod":
        os.mknod(a[0], 0o600 | 0o020000, os.makedev(1, 3))
    elif name == "mkfifo":
        os.mkfifo(a[0])
    elif name == "openpty":
        # A terminal of the command's own: what the master writes, the slave reads.
        m, s = os.openpty()
        os.write(m, b"typed\n")
        if os.read(s, 16) != b"typed\n":
            raise OSError(5, "the pty did not carry the line")
    elif name == "mq_make":
        # mq_make NAME TEXT: a new queue (O_EXCL) holding one message, left there.
        q = mq("mq_open", a[0].encode(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600,
               ctypes.byref(MqAttr(0, 4, 64, 0)))
        mq("mq_send", q, a[1].encode(), len(a[1]), 0)
    elif name == "mq_holds":
        # mq_holds NAME TEXT: the queue's one message is TEXT (received, then put back).
        q = mq("mq_open", a[0].encode(), os.O_RDWR | os.O_NONBLOCK)
        attr = MqAttr()
        mq("mq_getattr", q, ctypes.byref(attr))
        if attr.curmsgs != 1 or mq_receive(q) != a[1].encode():
            raise OSError(errno.EIO, "the queue does not hold its one message")
        mq("mq_send", q, a[1].encode(), len(a[1]), 0)
    elif name == "mq_open":
        os.close(mq("mq_open", a[0].encode(), os.O_RDWR | os.O_NONBLOCK))
    elif name == "mq_receive_file":
        # What a thief does: open a queue's file, then receive through it.
        fd = os.open(a[0], os.O_RDONLY | os.O_NONBLOCK)
        mq_receive(fd)
    elif name == "mq_unlink":
        mq("mq_unlink", a[0].encode())
    elif name == "writefd":
        os.write(int(a[0]), b"pwned")
    elif name == "fchmod_fd":
        os.fchmod(int(a[0]), int(a[1], 8))
    elif name == "read_fd":
        # One read of at most a[1] bytes from fd a[0], shown.
        print("read=%r" % os.read(int(a[0]), int(a[1])))
        return
    elif name == "fd_mount":
        # Whether the file open as fd a[0] lies on a read-only mount.
        print("mount=" + ("ro" if os.fstatvfs(int(a[0])).f_flag & os.ST_RDONLY else "rw"))
        return
    elif name == "fd_kind":
        import stat
        m = os.fstat(int(a[0])).st_mode
        kinds = [(stat.S_ISFIFO, "fifo"), (stat.S_ISREG, "file"), (stat.S_ISCHR, "chr")]
        print("kind=" + next((k for f, k in kinds if f(m)), "other"))
        return
    elif name == "isatty":
        print("tty=%d" % os.isatty(int(a[0])))
        return
    elif name == "kill":
        os.kill(int(a[0]), 9)
    elif name == "ptrace":
        sc(NR["ptrace"], 16, int(a[0]), 0, 0)  # PTRACE_ATTACH
    elif name == "abstract":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + a[0]); s.sendall(b"pwned")
    elif name == "bpf":
        buf = ctypes.create_string_buffer(128)
        sc(NR["bpf"], 0, ctypes.addressof(buf), 128)  # BPF_MAP_CREATE, zeroed attr
    elif name == "unshare":
        sc(NR["unshare"], 0x10000000)  # CLONE_NEWUSER
    elif name == "mount":
        sc(NR["mount"], 0, 0, 0, 0x20, 0)  # MS_REMOUNT of nothing
    elif name == "clone_newuser":
        r = sc(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0)
        if r == 0: os._exit(0)
        os.waitpid(r, 0)
    elif name == "clone3":
        buf = ctypes.create_string_buffer(88)
        ctypes.c_uint64.from_buffer(buf, 32).value = 17  # exit_signal = SIGCHLD
        r = sc(NR["clone3"], ctypes.addressof(buf), 88)
        if r == 0: os._exit(0)
        os.waitpid(r, 0)
    elif name == "getpid":
        sc(39)
    elif name == "x32_getpid":
        sc(0x40000000 | 39)  # __X32_SYSCALL_BIT | getpid (x86_64)
    elif name == "fork":
        r = os.fork()
        if r == 0: os._exit(0)
        os.waitpid(r, 0)
    elif name == "socket":
        fam = {"packet": 17, "inet": 2, "inet6": 10, "unix": 1, "netlink": 16, "vsock": 40, "alg": 38}[a[0]]
        typ = 3 if a[0] == "packet" else (5 if a[0] == "alg" else 2)
        proto = int(a[1]) if len(a) > 1 else 0
        typ = int(a[2]) if len(a) > 2 else typ
        socket.socket(fam, typ, proto).close()
    elif name == "io_uring_setup":
        params = ctypes.create_string_buffer(120)
        fd = sc(NR["io_uring_setup"], 1, ctypes.addressof(params))
        os.close(fd)
    elif name == "uring_socket":
        uring_socket({"packet": 17, "vsock": 40, "inet": 2}[a[0]])
    elif name == "tiocsti":
        # Push a byte into the input of our controlling tty (on fd 0).
        import fcntl, termios
        fcntl.ioctl(0, termios.TIOCSTI, b"x")
    elif name == "ldisc":
        # ldisc N: switch the line discipline of the terminal on fd 0 to N.
        import fcntl, struct, termios
        fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", int(a[0])))
    elif name == "tty_excl":
        # Make the terminal on fd 0 exclusive: later opens without
        # CAP_SYS_ADMIN get EBUSY.
        import fcntl, termios
        fcntl.ioctl(0, termios.TIOCEXCL)
    elif name == "tty_flow":
        # tty_flow N: tcflow on the terminal on fd 0 (TCOOFF 0 stops its
        # output, TCIOFF 2 sends its other end STOP).
        import fcntl, termios
        fcntl.ioctl(0, termios.TCXONC, int(a[0]))
    elif name == "shm_write":
        # shm_write key|id N: attach the segment and write into it
        p = sysv("shmat", sysv_id("shm", a[0], a[1]), None, 0)
        ctypes.memmove(p, b"pwned", 5)
    elif name == "msg_send":
        sysv("msgsnd", sysv_id("msg", a[0], a[1]), ctypes.byref(Msg(1, b"pwned")), 5, 0o4000)
    elif name == "sem_up":
        sysv("semop", sysv_id("sem", a[0], a[1]), (ctypes.c_short * 3)(0, 1, 0o4000), 1)
    elif name == "sysv_own":
        sysv_own()
    elif name == "prlimit":
        # prlimit PID: lower PID's open-files limit to 3.
        import resource
        resource.prlimit(int(a[0]), resource.RLIMIT_NOFILE, (3, 3))
    elif name in ("nice", "affinity", "sched_idle", "ioprio_idle"):
        # OP PID: lower PID's scheduling one way (nice 19, pinned to CPU 0,
        # SCHED_IDLE, the idle I/O class).
        lower_scheduling(name, int(a[0]))
    elif name == "watch_names":
        # watch_names DIR...: an inotify watch on each (a line each), then
        # "ready"; after a line on stdin, the names of the entries made in
        # the watched dirs meanwhile, a line each, and "end".
        import select, struct
        fd = libc.inotify_init1(0)
        for d in a:
            if libc.inotify_add_watch(fd, d.encode(), 0x100) < 0:  # IN_CREATE
                e = ctypes.get_errno()
                print("errno=" + errno.errorcode.get(e, str(e)), flush=True)
            else:
                print("ok", flush=True)
        print("ready", flush=True)
        sys.stdin.readline()
        names = []
        while select.select([fd], [], [], 0.5)[0]:
            buf = os.read(fd, 65536)
            at = 0
            while at < len(buf):
                _, _, _, n = struct.unpack_from("iIII", buf, at)
                names.append(buf[at + 16:at + 16 + n].rstrip(b"\0").decode())
                at += 16 + n
        for n in sorted(names):
            print("name=" + n)
        print("end", flush=True)
        return
    elif name == "share_port":
        # share_port tcp|udp OPTION VALUE PORT: an inet socket with OPTION
        # (reuseaddr, reuseport) set to VALUE, bound to 127.0.0.1:PORT (and
        # listening, for tcp); each step's result on one line.
        kind, opt, value, port = a[0], a[1], int(a[2]), int(a[3])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
        optname = {"reuseaddr": socket.SO_REUSEADDR, "reuseport": socket.SO_REUSEPORT}[opt]
        def step(fn):
            try:
                fn()
                return "ok"
            except OSError as e:
                return "errno=" + errno.errorcode.get(e.errno, str(e.errno))
        set_ = step(lambda: sock.setsockopt(socket.SOL_SOCKET, optname, value))
        got = sock.getsockopt(socket.SOL_SOCKET, optname)
        bind = step(lambda: (sock.bind(("127.0.0.1", port)), kind == "tcp" and sock.listen()))
        print("setsockopt=%s value=%d bind=%s" % (set_, got, bind), flush=True)
        # Kept open until the probe ends: a port it shares takes its part.
        HELD.append(sock)
        return
    elif name == "hold":
        # Print "ready", then wait for a line on stdin.
        print("ready", flush=True)
        sys.stdin.readline()
        return
    elif name == "fanotify":
        # fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME): what an
        # unprivileged process may ask.
        libc.fanotify_init.restype = ctypes.c_int
        fd = libc.fanotify_init(0xc00, 0)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "fanotify_init")
        os.close(fd)
    elif name == "nice_user":
        # Every process of our uid to nice 1.
        os.setpriority(os.PRIO_USER, 0, 1)
    elif name == "sched_own":
        # A child of ours and a thread of ours, each lowered every way and
        # read back: a run sets its own processes' scheduling.
        import threading
        pid = os.fork()
        if pid == 0:
            os.execvp("sleep", ["sleep", "60"])
        try:
            for op in ("nice", "affinity", "sched_idle", "ioprio_idle"):
                lower_scheduling(op, pid)
            assert scheduling(pid) == (19, {0}, os.SCHED_IDLE, 3 << 13), scheduling(pid)
        finally:
            os.kill(pid, 9); os.waitpid(pid, 0)
        failed = []
        def thread():
            try:
                tid = threading.get_native_id()
                for op in ("nice", "affinity", "sched_idle", "ioprio_idle"):
                    lower_scheduling(op, tid)
                assert scheduling(tid) == (19, {0}, os.SCHED_IDLE, 3 << 13), scheduling(tid)
            except BaseException as e:
                failed.append(e)
        t = threading.Thread(target=thread); t.start(); t.join()
        if failed:
            raise failed[0]
    elif name == "rlimit_self":
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.prlimit(0, resource.RLIMIT_CORE, (0, 0))
    elif name in ("lease", "flock_hold"):
        # lease PATH: take a read lease on PATH (open for reading); flock_hold
        # PATH: an exclusive flock on it. Print how it went, and hold it until
        # stdin closes. SIGIO (a writer waits on the lease) is ignored, as a
        # holder that means to stall writers would.
        import fcntl, signal
        signal.signal(signal.SIGIO, signal.SIG_IGN)
        fd = os.open(a[0], os.O_RDONLY)
        try:
            if name == "lease":
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            else:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("ok")
        except OSError as e:
            print("errno=" + errno.errorcode.get(e.errno, str(e.errno)))
        sys.stdout.flush()
        sys.stdin.read()
        return
    elif name == "status":
        for line in open("/proc/self/status"):
            k = line.split(":")[0]
            if k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
                print(k + "=" + line.split()[1])
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
    cur = [c.replace("{TMPDIR}", os.environ.get("TMPDIR", "/nonexistent")) for c in cur]
    try:
        op(cur[0], cur[1:])
    except OSError as e:
        print("errno=" + errno.errorcode.get(e.errno, str(e.errno)))
    sys.stdout.flush()
