//! No other process's IPC: abstract unix sockets, System V objects and
//! shared memory outside are unreachable; the run's are its own.

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::process::Command;

use crate::support::python::python3;
use crate::support::world;
use crate::support::world::{
    assert_absent, assert_canary, s, Background, Outside, RemovedAtEnd, World, BIN,
};

#[test]
fn abstract_unix_socket_outside_is_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new("abstract");
    let name = format!("lockrun-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = w.run(&[], &world::probe_argv(&[&["abstract", &name]]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno=EPERM");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("abstract unix socket @{name} (python3)")),
        "stderr: {err}"
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the listener got a connection"
    );
    // Control: the same probe outside reaches it.
    assert_eq!(w.probe_outside(&[&["abstract", &name]]), ["ok"]);
    listener.set_nonblocking(false).unwrap();
    let (mut c, _) = listener.accept().unwrap();
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"pwned");
}

/// System V IPC objects of a process outside, by a key of this test's: a
/// shared memory segment holding `canary`, a message queue and a
/// semaphore (0600, root's, like the command). `make KEY` prints their ids;
/// `state KEY` prints the segment's first five bytes, the queue's messages
/// and the semaphore's value; `rm KEY` removes them.
const SYSV: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
op, key = sys.argv[1], int(sys.argv[2])
ids = [libc.shmget(key, 4096, 0o1600 if op == "make" else 0),
       libc.msgget(key + 1, 0o1600 if op == "make" else 0),
       libc.semget(key + 2, 1, 0o1600 if op == "make" else 0)]
assert min(ids) >= 0, (op, ids, ctypes.get_errno())
if op == "make":
    p = libc.shmat(ids[0], None, 0)
    ctypes.memmove(p, b"canary", 6)
    print(*ids)
elif op == "state":
    p = libc.shmat(ids[0], None, 0o10000)  # SHM_RDONLY
    qnum = next(int(l.split()[4]) for l in open("/proc/sysvipc/msg") if l.split()[1] == str(ids[1]))
    print(ctypes.string_at(p, 5).decode(), qnum, libc.semctl(ids[2], 0, 12))  # GETVAL
else:
    libc.shmctl(ids[0], 0, None); libc.msgctl(ids[1], 0, None); libc.semctl(ids[2], 0, 0)  # IPC_RMID
"#;

/// The objects [`SYSV`] makes, removed when dropped.
struct SysvObjects {
    key: String,
    ids: Vec<String>,
}

impl SysvObjects {
    fn sysv(op: &str, key: &str) -> String {
        let out = Command::new(python3())
            .args(["-c", SYSV, op, key])
            .output()
            .unwrap();
        assert!(out.status.success(), "{op}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
    fn make(key: i32) -> Self {
        let key = key.to_string();
        let ids = Self::sysv("make", &key)
            .split(' ')
            .map(str::to_owned)
            .collect();
        Self { key, ids }
    }
    fn state(&self) -> String {
        Self::sysv("state", &self.key)
    }
}

impl Drop for SysvObjects {
    fn drop(&mut self) {
        Self::sysv("rm", &self.key);
    }
}

/// System V IPC objects are not files: Landlock does not see them, and a
/// command, uid 0 like their owner, could attach another process's shared
/// memory and write into it, send to its queue, or move its semaphore. The
/// run has an IPC namespace of its own: by key, those outside are not
/// found (`ENOENT`); by id, not there (`EINVAL`). Judged from outside: the
/// segment still holds its canary, the queue is empty, the semaphore at 0.
/// Controls: the command makes and uses objects of its own; the same probe
/// outside reaches each outside object, by key and by id.
#[test]
fn sysv_ipc_objects_outside_are_unreachable() {
    let w = World::new("sysvipc");
    let objects = SysvObjects::make(0x4c52_0000 + (std::process::id() & 0xfff) as i32 * 4);
    let key = |i: i32| (objects.key.parse::<i32>().unwrap() + i).to_string();
    let (segment_key, queue_key, semaphore_key) = (key(0), key(1), key(2));
    let (segment, queue, semaphore) = (&objects.ids[0], &objects.ids[1], &objects.ids[2]);
    let ops: [&[&str]; 7] = [
        &["shm_write", "key", &segment_key],
        &["shm_write", "id", segment],
        &["msg_send", "key", &queue_key],
        &["msg_send", "id", queue],
        &["sem_up", "key", &semaphore_key],
        &["sem_up", "id", semaphore],
        &["sysv_own"],
    ];
    let inside = w.probe(&[], &ops);
    assert_eq!(
        inside,
        [
            "errno=ENOENT",
            "errno=EINVAL",
            "errno=ENOENT",
            "errno=EINVAL",
            "errno=ENOENT",
            "errno=EINVAL",
            "ok"
        ]
    );
    assert_eq!(objects.state(), "canar 0 0");

    // Control: outside the run, the same probe reaches all three, twice.
    assert_eq!(w.probe_outside(&ops), ["ok"; 7]);
    assert_eq!(objects.state(), "pwned 2 2");
}

/// Each op on a path, as the errno name it got (or `ok`), a line each; the
/// names in /dev/shm first; then a multiprocessing pool's sum.
const SHM_PROBE: &str = r"
import errno, os, sys, multiprocessing as m
def t(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
print(sorted(os.listdir('/dev/shm')))
for p in sys.argv[1:]:
    if p.startswith('w:'):
        print(t(lambda: open(p[2:], 'w').write('x')))
    else:
        print(t(lambda: open(p).read()))
try:
    print('sum', sum(m.Pool(2).map(abs, [-1, -2])))
except OSError as e:
    print('pool', errno.errorcode[e.errno])
";

/// A run gets a /dev/shm of its own, a tmpfs in a mount namespace of its
/// own: Python's multiprocessing (whose locks are named semaphores there)
/// works, what a run makes there is seen neither by the machine nor by
/// another run, and the machine's /dev/shm is out of the run's sight, also
/// through `/proc/<pid>/root` of a process outside. Judged from outside while the first run still
/// holds its file. Control: `--allow-write /dev/shm` asks for the
/// machine's, shared, and a file made there is then seen outside.
#[test]
fn a_run_has_shared_memory_of_its_own_that_nothing_outside_shares() {
    use std::io::Read as _;
    let w = World::new("shm");
    let tag = format!("/dev/shm/lockrun-shm-{}", std::process::id());
    let [held, canary_at, other, shared] =
        ["a", "canary", "b", "shared"].map(|n| format!("{tag}-{n}"));
    let _end = RemovedAtEnd(
        [&held, &canary_at, &other, &shared]
            .map(std::path::PathBuf::from)
            .to_vec(),
    );
    let canary = w.canary(std::path::Path::new(&canary_at));
    // Control: outside, the canary is there to read.
    assert_eq!(w.probe_outside(&[&["read", s(&canary)]]), ["ok"]);

    // Run A writes its file, then holds on until its stdin is closed.
    let holder = "import sys\nopen(sys.argv[1], 'w').write('mine')\nprint('ready', flush=True)\n\
                  sys.stdin.read()\nprint(open(sys.argv[1]).read())\n";
    let (mut a, mut a_out, said) =
        Background::until_ready(w.cmd(&[], &[python3(), "-c", holder, &held]));
    assert_eq!(said, ["ready"]);
    // The machine does not see it,
    assert_absent(std::path::Path::new(&held));
    // nor does run B, whose /dev/shm is empty and its own; the machine's
    // is not reachable through /proc/<pid>/root either.
    let outside = Outside::sleep();
    let proc_canary = format!("/proc/{}/root{canary_at}", outside.pid());
    let proc_other = format!("w:/proc/{}/root{other}", outside.pid());
    // Control: outside, that path reaches the canary.
    assert_eq!(w.probe_outside(&[&["read", &proc_canary]]), ["ok"]);
    let out = w.run(
        &[],
        &[
            python3(),
            "-c",
            SHM_PROBE,
            &held,
            &canary_at,
            &proc_canary,
            &proc_other,
            &format!("w:{other}"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["[]", "ENOENT", "ENOENT", "ENOENT", "ENOENT", "ok", "sum 3"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    assert_absent(std::path::Path::new(&other));
    assert_absent(std::path::Path::new(&held));
    assert_canary(&canary);
    // Run A still has its own file, and its run leaves nothing outside.
    drop(a.0.stdin.take());
    assert!(a.wait().success());
    let mut rest = String::new();
    a_out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest.trim(), "mine");
    assert_absent(std::path::Path::new(&held));

    // Control: asked for, the machine's /dev/shm is shared.
    let r = w.probe(
        &["--allow-write", "/dev/shm"],
        &[&["write", &shared], &["read", s(&canary)]],
    );
    assert_eq!(r, ["ok", "ok"]);
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "pwned");
}

/// A worktree on the machine's /dev/shm would be hidden by a /dev/shm of
/// the run's own, so such a run keeps the machine's, writable only in the
/// worktree: POSIX shared memory fails there with EROFS (the machine's
/// /dev/shm is a read-only mount in the run's namespace), and `lockrun
/// audit` says why it does not suggest opening /dev/shm. Control: the
/// worktree itself is written.
#[test]
fn a_worktree_on_the_machines_shared_memory_keeps_it_and_audit_explains() {
    let w = World::new("shm-wt");
    let wt = std::path::PathBuf::from(format!("/dev/shm/lockrun-wt-{}", std::process::id()));
    let _end = RemovedAtEnd(vec![wt.clone()]);
    std::fs::create_dir_all(&wt).unwrap();
    let log = w.root.join("audit.jsonl");
    let out = Command::new(BIN)
        .arg("--worktree")
        .arg(&wt)
        .arg("--state-dir")
        .arg(&w.state)
        .arg("--audit-log")
        .arg(&log)
        .arg("--")
        .args([
            python3(),
            "-c",
            SHM_PROBE,
            &format!("w:{}", wt.join("f").display()),
        ])
        .env("HOME", &w.home)
        .current_dir(&wt)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().skip(1).collect::<Vec<_>>(),
        ["ok", "pool EROFS"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(wt.join("f")).unwrap(), "x");
    let audit = Command::new(BIN).arg("audit").arg(&log).output().unwrap();
    let text = String::from_utf8_lossy(&audit.stdout);
    assert!(
        text.contains("/dev/shm — create a file in (fs.make_reg; EROFS")
            && text.contains("not suggested: /dev/shm is shared by every process on this machine")
            && !text.contains("allow with:"),
        "{text}"
    );
}
