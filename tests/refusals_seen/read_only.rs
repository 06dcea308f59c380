//! A call a read-only mount refuses (`EROFS`) is seen: the kernel refuses
//! it before Landlock or kernel audit's rules are asked, and lockrun's
//! `sys_exit` recorder ([`lockrun::bpf::read_only`]) records it as the
//! filesystem refusal Landlock would have logged.
//!
//! Until lockrun mounts the run's filesystems read-only outside its
//! writable roots, the test makes such a mount itself: a directory of its
//! own, bound read-only at `<worktree>/ro` (a mount's own read-only flag,
//! as lockrun's would be), made before the run and removed after it on
//! every path. The run writes a file there, makes a directory, and changes
//! a file's mode by name and by descriptor; each is refused, and each is
//! judged from outside (the mount's source is unchanged) and in the run's
//! audit log, by its path and access; a write elsewhere in the worktree,
//! the control, works and is not in the log.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lockrun::audit::{Event, FsErrno, Record};

use crate::support::{python, world};
use world::{s, skip, wait_for, Background, World};

/// The read-only bind mount at `at`, removed when dropped.
struct ReadOnlyBind(PathBuf);

impl ReadOnlyBind {
    /// Bind `from` at `at` and make that mount read-only; `Err` with what
    /// `mount` said.
    fn new(from: &Path, at: &Path) -> Result<Self, String> {
        let mount = |args: &[&str]| {
            let out = Command::new("mount").args(args).output().unwrap();
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        };
        mount(&["--bind", s(from), s(at)])?;
        let bound = Self(at.to_path_buf());
        mount(&["-o", "remount,bind,ro", s(at)])?;
        Ok(bound)
    }
}

impl Drop for ReadOnlyBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The run's probe: each refused call and what it got, the descriptor it
/// changed the mode of, the control; then it waits, its descriptor and
/// working directory still there, until the test has seen the refusals in
/// the log (the file `go`), so that lockrun finds what its relative names
/// and its descriptor were.
const PROBE: &str = r#"
import errno, os, sys, time
ro = sys.argv[1]
def t(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
t("write", lambda: os.close(os.open(ro + "/f", os.O_WRONLY)))
t("mkdir", lambda: os.mkdir("ro/d"))
t("chmod", lambda: os.chmod("ro/f", 0o600))
fd = os.open("ro/f", os.O_RDONLY)
t("fchmod", lambda: os.fchmod(fd, 0o600))
print("fd", fd)
with open("inside.txt", "w") as f:
    f.write("in")
print("control ok", flush=True)
for _ in range(1200):
    if os.path.exists("go"):
        break
    time.sleep(0.05)
"#;

/// A filesystem refusal of the log: (path, access, errno).
type Seen = (String, Vec<String>, Option<FsErrno>);

/// The filesystem refusals of the log at `log` so far, and the processes
/// that made them.
fn refusals(log: &Path) -> (BTreeSet<Seen>, BTreeSet<String>) {
    let mut seen = BTreeSet::new();
    let mut comms = BTreeSet::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Ok(Record { event, .. }) = serde_json::from_str(line) else {
            continue;
        };
        if let Event::Filesystem(f) = event {
            assert!(f.pid > 0, "{f:?}");
            comms.insert(f.comm);
            seen.insert((f.path.unwrap_or_default(), f.access, f.errno));
        }
    }
    (seen, comms)
}

fn one(path: &str, access: &str) -> Seen {
    (
        path.to_owned(),
        vec![access.to_owned()],
        Some(FsErrno::ReadOnly),
    )
}

/// Run [`PROBE`] with the audit log `log`, until it exits; its stdout and
/// lockrun's stderr. The descriptor's refusal is named while the probe
/// holds it: the probe waits for `go`, written once the log has the four
/// refusals (or the run is over).
fn run_probe(w: &World, ro: &Path, log: &Path) -> (String, String) {
    let (out_file, err_file) = (w.root.join("stdout"), w.root.join("stderr"));
    let mut run = Background(
        w.cmd(
            &["--audit-log", s(log)],
            &[python::python3(), "-c", PROBE, s(ro)],
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap(),
    );
    wait_for("the four refusals in the audit log", || {
        refusals(log).0.len() >= 4 || run.0.try_wait().unwrap().is_some()
    });
    std::fs::write(w.wt.join("go"), b"").unwrap();
    let status = run.wait();
    let stdout = std::fs::read_to_string(&out_file).unwrap();
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn each_call_a_read_only_mount_refuses_is_seen_with_its_path_and_access() {
    const TEST: &str = "each_call_a_read_only_mount_refuses_is_seen_with_its_path_and_access";
    if !nix::unistd::geteuid().is_root() {
        skip(TEST, "needs root (a mount of its own, the eBPF recorder)");
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        // The recorder is x86_64's; elsewhere doctor says why (its own test).
        skip(TEST, "lockrun's sys_exit recorder reads x86_64's registers");
        return;
    }
    let w = World::new("read-only");
    let source = w.root.join("ro-source");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("f"), b"canary").unwrap();
    std::fs::set_permissions(source.join("f"), PermissionsExt::from_mode(0o644)).unwrap();
    let ro = w.wt.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let _bound = match ReadOnlyBind::new(&source, &ro) {
        Ok(b) => b,
        Err(why) => {
            skip(TEST, &format!("cannot bind a read-only mount: {why}"));
            return;
        }
    };
    // The mount is read-only from here: the test's own write is refused.
    let e = std::fs::write(ro.join("f"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");

    let log = w.root.join("audit.jsonl");
    let (stdout, stderr) = run_probe(&w, &ro, &log);
    let ro_s = s(&ro).to_owned();

    // Each call got EROFS; the control worked.
    let lines: Vec<&str> = stdout.lines().collect();
    let fd = lines
        .iter()
        .find_map(|l| l.strip_prefix("fd "))
        .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    assert_eq!(
        lines,
        [
            "write EROFS",
            "mkdir EROFS",
            "chmod EROFS",
            "fchmod EROFS",
            &format!("fd {fd}"),
            "control ok"
        ],
        "{stderr}"
    );

    // From outside: nothing on the mount's source changed; the control's
    // file is there.
    assert_eq!(std::fs::read(source.join("f")).unwrap(), b"canary");
    assert_eq!(
        std::fs::metadata(source.join("f"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o644
    );
    assert!(!source.join("d").exists());
    assert_eq!(std::fs::read(w.wt.join("inside.txt")).unwrap(), b"in");

    // In the log: exactly the four, with their paths and accesses in
    // Landlock's words (what is made, by its directory) and the error;
    // the control is not there.
    let (seen, comms) = refusals(&log);
    let want: BTreeSet<Seen> = [
        one(&format!("{ro_s}/f"), "fs.write_file"),
        one(&ro_s, "fs.make_dir"),
        one(&format!("{ro_s}/f"), "metadata.chmod"),
        one(&format!("fd {fd} ({ro_s}/f)"), "metadata.chmod"),
    ]
    .into();
    assert_eq!(seen, want, "{stderr}");
    let python = Path::new(python::python3()).file_name().unwrap();
    let comm: String = python.to_string_lossy().chars().take(15).collect();
    assert_eq!(comms, BTreeSet::from([comm.clone()]), "{stderr}");
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text
        .lines()
        .filter(|l| l.contains(r#""event":"filesystem""#))
    {
        assert!(!line.contains("inside.txt"), "{line}");
        assert!(line.contains("lockrun's sys_exit recorder"), "{line}");
    }

    // And in the summary.
    for said in [
        format!("write {ro_s}/f ({comm})"),
        format!("make a dir in {ro_s} ({comm})"),
        format!("chmod {ro_s}/f ({comm})"),
        format!("chmod fd {fd} ({ro_s}/f) ({comm})"),
    ] {
        assert!(stderr.contains(&said), "{said} not in: {stderr}");
    }
    assert!(
        stderr.contains("lockrun: 4 filesystem accesses refused: "),
        "{stderr}"
    );
}
