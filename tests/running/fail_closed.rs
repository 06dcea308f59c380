//! Nothing runs unconfined by accident: a setup lockrun cannot complete (an
//! old kernel, no temp dir, no root, no IPC namespace, no deny list, a
//! lockrun inside a run) refuses the run, saying why.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::python::python3;
use crate::support::world;
use crate::support::world::{assert_absent, s, World, BIN};

#[test]
fn a_kernel_below_the_policy_abi_refuses_the_run() {
    let w = World::new("abi99");
    let policy = w.root.join("p.toml");
    std::fs::write(&policy, "[run]\nlandlock_abi = 99\n").unwrap();
    let side = w.wt.join("side-effect");
    let out = w.run(&["--policy", s(&policy)], &["touch", s(&side)]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("lockrun: ") && err.contains("Landlock ABI is") && err.contains("99"),
        "{err}"
    );
    assert_absent(&side);
    w.assert_no_run_dirs();
}

#[test]
fn a_temp_dir_that_cannot_be_created_refuses_the_run() {
    let w = World::new("notmp");
    let file = w.canary(&w.root.join("plainfile"));
    let side = w.wt.join("side-effect");
    let out = Command::new(BIN)
        .arg("--worktree")
        .arg(&w.wt)
        .arg("--state-dir")
        .arg(file.join("state"))
        .args(["--", "touch", s(&side)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("lockrun: creating run dir"), "{err}");
    assert_absent(&side);
}

#[test]
fn an_unprivileged_caller_is_refused_before_anything_runs() {
    let w = World::new("unpriv");
    if Command::new("setpriv").arg("--version").output().is_err() {
        world::skip(
            "an_unprivileged_caller_is_refused_before_anything_runs",
            "setpriv not installed",
        );
        return;
    }
    // Everything owned by nobody: the filesystem would be no obstacle. The
    // network layer (a cgroup of its own, eBPF hooks) needs privileges that
    // nobody lacks, so the run is refused whole — never run without hooks.
    for d in [&w.root, &w.wt, &w.state, &w.home, &w.data] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    // As on this kernel, as below Landlock ABI 7, where lockrun also asks
    // kernel audit, and as on 6.1 (ABI 2, no unix hooks), where it loads its
    // unix guard: each refuses nobody; still the privileges named, not a
    // kernel's gap.
    for (abi, no_unix_hooks) in [(None, false), (Some("6"), false), (Some("2"), true)] {
        let mut cmd = w.cmd_under(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &[],
            &world::probe_argv(&[&["write", s(&w.wt.join("ran"))]]),
        );
        if let Some(abi) = abi {
            cmd.env("LOCKRUN_TEST_LANDLOCK_ABI", abi);
        }
        if no_unix_hooks {
            cmd.env("LOCKRUN_TEST_NO_UNIX_HOOKS", "1");
        }
        let out = cmd.current_dir("/").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "ABI {abi:?}: {out:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("cgroup") && err.contains("Permission denied"),
            "ABI {abi:?}: {err}"
        );
        assert_absent(&w.wt.join("ran"));
        w.assert_no_run_dirs();
    }
}

/// Runs `argv` under a seccomp filter of its own that answers `unshare`
/// with `EINVAL` (`deny`), as a kernel without IPC namespaces would, or
/// allows everything (`allow`, the control).
const NO_UNSHARE: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
prog = [(0x20, 0, 0, 0)]  # ld the call's number
if sys.argv[1] == "deny":
    prog += [(0x15, 0, 1, 272), (0x06, 0, 0, 0x00050000 | 22)]  # unshare: ERRNO(EINVAL)
prog += [(0x06, 0, 0, 0x7FFF0000)]  # allow
filt = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(filt)))
assert libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
os.execv(sys.argv[2], sys.argv[2:])
"#;

/// Fail closed: without an IPC namespace of its own, a run could write
/// into other processes' System V shared memory, so a kernel that refuses
/// one refuses the run: exit 125, one line, the command's side effect
/// absent, no run dir left. Control: the same wrapper allowing `unshare`.
#[test]
fn a_run_without_an_ipc_namespace_of_its_own_is_refused() {
    let w = World::new("noipcns");
    let side = w.wt.join("side-effect");
    let run = |mode: &str| {
        w.cmd_under(
            &[python3(), "-c", NO_UNSHARE, mode],
            &[],
            &["touch", s(&side)],
        )
        .output()
        .unwrap()
    };

    let out = run("deny");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "lockrun: an IPC namespace of the run's own: unshare(CLONE_NEWIPC): Invalid argument"
        ),
        "{err}"
    );
    assert_absent(&side);
    w.assert_no_run_dirs();

    let out = run("allow");
    assert!(out.status.success(), "{out:?}");
    assert!(side.exists());
    w.assert_no_run_dirs();
}

#[test]
fn a_deny_list_that_cannot_be_built_refuses_the_run() {
    let w = World::new("unlistable");
    if Command::new("setpriv").arg("--version").output().is_err() {
        world::skip(
            "a_deny_list_that_cannot_be_built_refuses_the_run",
            "setpriv not installed",
        );
        return;
    }
    for d in [&w.root, &w.wt, &w.state, &w.home] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    // A root-only dir holding a denied path: uid 65534 cannot list it, so the
    // siblings to grant are unknown; the run must be refused, not left open.
    let locked = w.root.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o711)).unwrap();
    let side = w.wt.join("side-effect");
    // As on this kernel, below Landlock ABI 7 and as on 6.1 (where kernel
    // audit and the unix guard's load refuse nobody: not the refusal told).
    for (abi, no_unix_hooks) in [(None, false), (Some("6"), false), (Some("2"), true)] {
        let mut cmd = w.cmd_under(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &["--deny-read", s(&locked.join("secret"))],
            &["touch", s(&side)],
        );
        if let Some(abi) = abi {
            cmd.env("LOCKRUN_TEST_LANDLOCK_ABI", abi);
        }
        if no_unix_hooks {
            cmd.env("LOCKRUN_TEST_NO_UNIX_HOOKS", "1");
        }
        let out = cmd.current_dir("/").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "ABI {abi:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("listing") && err.contains("locked"),
            "ABI {abi:?}: {err}"
        );
        assert_absent(&side);
    }
}

/// A lockrun started inside a run (a project's tests that use lockrun, a
/// nested agent) cannot build a sandbox there: it refuses in one line that
/// names the run it is in, and its command never runs — also when the
/// variable naming the run was dropped (then it fails closed on the first
/// step the outer run refuses). Judged from outside: the inner commands'
/// files do not exist, the outer run's control file does. A variable copied
/// into an unconfined process is not believed.
#[test]
fn a_lockrun_inside_a_run_is_refused_naming_the_run() {
    let w = World::new("nested");
    let audit = w.root.join("audit.jsonl");
    // $1 the binary, $2 the worktree, $3 the state dir
    let script = r#"
        printf %s "$LOCKRUN_RUN_ID" > "$2/id"
        "$1" --worktree "$2" --state-dir "$3" -- touch "$2/inner" 2> "$2/inner.err"
        echo $? > "$2/inner.rc"
        "$1" doctor > /dev/null 2> "$2/doctor.err"
        echo $? > "$2/doctor.rc"
        env -u LOCKRUN_RUN_ID "$1" --worktree "$2" --state-dir "$3" -- touch "$2/unnamed" 2> "$2/unnamed.err"
        echo $? > "$2/unnamed.rc"
        echo outer > "$2/outer"
    "#;
    let out = w.run(
        &["--audit-log", s(&audit)],
        &["sh", "-c", script, "sh", BIN, s(&w.wt), s(&w.state)],
    );
    assert!(out.status.success(), "{out:?}");
    let read = |name: &str| std::fs::read_to_string(w.wt.join(name)).unwrap();
    // control: the outer run ran its command to the end
    assert_eq!(read("outer"), "outer\n");

    let log = std::fs::read_to_string(&audit).unwrap();
    let id = read("id");
    assert!(
        !id.is_empty() && log.contains(&format!("\"run_id\":\"{id}\"")),
        "the command was told a run id the audit log does not name: {id:?}\n{log}"
    );
    let refusal = format!(
        "lockrun: this process is already confined by lockrun run {id}: a sandbox cannot be \
         started inside it (the outer run refuses the cgroups, BPF and kernel audit a run \
         needs); run the command directly, it is confined by run {id}\n"
    );
    assert_eq!(read("inner.rc"), "125\n");
    assert_eq!(read("inner.err"), refusal);
    assert_absent(&w.wt.join("inner"));
    assert_eq!(read("doctor.rc"), "125\n");
    assert_eq!(read("doctor.err"), refusal);
    // Without the name: still refused, nothing ran.
    assert_eq!(read("unnamed.rc"), "125\n");
    assert!(
        read("unnamed.err").starts_with("lockrun: "),
        "{}",
        read("unnamed.err")
    );
    assert_absent(&w.wt.join("unnamed"));

    // Outside any run, a copied variable is not believed, and the command
    // is told its own run's id.
    let copied = w
        .cmd(&[], &["sh", "-c", "printf %s \"$LOCKRUN_RUN_ID\" > own"])
        .env("LOCKRUN_RUN_ID", &id)
        .output()
        .unwrap();
    assert!(copied.status.success(), "{copied:?}");
    let own = read("own");
    assert!(!own.is_empty() && own != id, "{own:?}");
    w.assert_no_run_dirs();
}
