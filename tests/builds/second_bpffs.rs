//! Two lockruns of one build that see different bpf filesystems never break
//! each other (`lockrun::bpf`, issue 55 item 6). A lockrun in a mount
//! namespace of its own, with a bpffs of its own mounted at `/sys/fs/bpf`,
//! finds none of the build's pins; it once attached a second set of
//! programs to the build's parent cgroup, whose maps know none of the other
//! runs, and every run of the first set was refused its own proxy while it
//! lived. It is now refused (exit 125, one line saying why), and attaches
//! nothing.
//!
//! A build of the test's own (`LOCKRUN_TEST_BUILD_ID`, [`TestBuild`]): the
//! shared build's parent is untouched. Judged from outside: what the run of
//! the main namespace got from each connect to its allowed endpoint, the
//! endpoint's own count of connections, the second lockrun's exit status and
//! line, the programs attached to the parent, and what is left after.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::world::wait_for;
use crate::support::{build, python, skip};
use build::TestBuild;

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// Inside the main namespace's run: a connect to its allowed endpoint
/// (`PORT`) every 20 ms, each result a line of `$WT/connects` (`ok` or the
/// errno's name), until `$WT/stop`.
const CONNECTS: &str = r#"
import errno, os, socket, time
wt, port = os.environ["WT"], int(os.environ["PORT"])
log = open(wt + "/connects", "a", buffering=1)
deadline = time.time() + 60
while not os.path.exists(wt + "/stop") and time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        log.write("ok\n")
    except OSError as e:
        log.write(errno.errorcode.get(e.errno, str(e.errno)) + "\n")
    time.sleep(0.02)
"#;

/// One lockrun's world: worktree, state dir and home, removed when dropped.
struct World(PathBuf);

impl World {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("lockrun-bpffs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["wt", "state"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        Self(dir)
    }

    fn wt(&self) -> PathBuf {
        self.0.join("wt")
    }

    /// The arguments of `lockrun` for a run here, up to the command.
    fn args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--worktree".into(),
            self.wt().into(),
            "--state-dir".into(),
            self.0.join("state").into(),
        ]
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A lockrun in the background; ended (SIGTERM, which it passes on) and
/// waited for if the test fails first.
struct Background(Option<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
    }
}

/// The bpf filesystems mounted in this mount namespace.
fn bpf_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split_once(" - ")
                .is_some_and(|(_, r)| r.starts_with("bpf "))
        })
        .map(str::to_owned)
        .collect()
}

/// The run cgroups in `parent` (its child directories).
fn run_cgroups(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `lockrun -- sh -c 'touch "$WT/running"; sleep 3'` in `world`, with the
/// test's build, in a mount namespace of its own with a bpffs of its own at
/// `/sys/fs/bpf`; its output once it ends.
fn with_a_bpffs_of_its_own(build: &TestBuild, world: &World) -> std::process::Output {
    let inner: Vec<String> = std::iter::once(BIN.to_owned())
        .chain(
            world
                .args()
                .iter()
                .map(|a| a.to_string_lossy().into_owned()),
        )
        .chain(
            ["--", "sh", "-c", "touch \"$WT/running\"; sleep 3"]
                .iter()
                .map(|s| (*s).to_owned()),
        )
        .collect();
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t bpf bpf /sys/fs/bpf && exec "$@""#)
        .arg("sh")
        .args(&inner)
        .env("LOCKRUN_TEST_BUILD_ID", &build.0)
        .env("WT", world.wt())
        .env("HOME", &world.0)
        .current_dir(world.wt())
        .output()
        .unwrap()
}

#[test]
fn a_lockrun_with_a_bpffs_of_its_own_breaks_no_other_run() {
    const T: &str = "a_lockrun_with_a_bpffs_of_its_own_breaks_no_other_run";
    if !nix::unistd::Uid::effective().is_root() {
        skip::skip(T, "needs root (mount namespaces, cgroup v2, bpf)");
        return;
    }
    let unshare_works = Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        skip::skip(T, "`unshare -m` is not available");
        return;
    }
    let mounts_before = bpf_mounts();
    // Dropped last: the runs below are gone by then.
    let build = TestBuild::new("bpffs");

    // The allowed endpoint of the main namespace's run, outside it,
    // counting the connections it accepts.
    let endpoint = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = endpoint.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    {
        let accepted = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for _ in endpoint.incoming().flatten() {
                accepted.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    // The main namespace's run: connects to its endpoint until told to stop.
    let main = World::new("main");
    std::fs::write(main.wt().join("connects.py"), CONNECTS).unwrap();
    let mut run = Background(Some(
        Command::new(BIN)
            .args(main.args())
            .args(["--allow-local", &format!("127.0.0.1:{port}")])
            .args(["--", python::python3()])
            .arg(main.wt().join("connects.py"))
            .env("LOCKRUN_TEST_BUILD_ID", &build.0)
            .env("WT", main.wt())
            .env("PORT", port.to_string())
            .env("HOME", &main.0)
            .current_dir(main.wt())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let connects = || std::fs::read_to_string(main.wt().join("connects")).unwrap_or_default();
    wait_for("the main run's first connect", || !connects().is_empty());
    let attached = lockrun::bpf::attach::programs_attached_to(&build.parent()).unwrap();

    // The other lockrun: a mount namespace of its own, its own bpffs.
    let other = World::new("other");
    let out = with_a_bpffs_of_its_own(&build, &other);
    let stderr = String::from_utf8_lossy(&out.stderr);

    // Meanwhile, and after, every connect of the main run got through.
    let seen = connects().lines().count();
    wait_for("more connects of the main run", || {
        connects().lines().count() >= seen + 5
    });
    let programs_after = lockrun::bpf::attach::programs_attached_to(&build.parent()).unwrap();
    std::fs::write(main.wt().join("stop"), "").unwrap();
    let main_out = run.0.take().unwrap().wait_with_output().unwrap();
    let main_err = String::from_utf8_lossy(&main_out.stderr);
    let results = connects();
    assert!(
        results.lines().all(|l| l == "ok"),
        "the main run's connects to its allowed endpoint, while the other lockrun lived: {:?}\n\
         the other lockrun: {:?} {stderr}\nthe main run: {main_err}",
        results.lines().collect::<Vec<_>>(),
        out.status.code()
    );
    assert_eq!(main_out.status.code(), Some(0), "{main_err}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        results.lines().count(),
        "the endpoint accepted each connect"
    );
    assert!(!main_err.contains("refused"), "{main_err}");

    // The other lockrun was refused, in one line, and ran nothing.
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("lockrun: ")
            && lines[0].contains("sees another bpf filesystem"),
        "{stderr}"
    );
    assert!(!other.wt().join("running").exists(), "the command ran");
    assert_eq!(
        programs_after, attached,
        "no program was attached to the parent, nor taken away"
    );

    // Nothing left: no run cgroup, no mount; the pins go with the build.
    assert_eq!(run_cgroups(&build.parent()), Vec::<String>::new());
    assert_eq!(bpf_mounts(), mounts_before);
}
