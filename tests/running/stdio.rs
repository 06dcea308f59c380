//! The caller's stdin, stdout and stderr as the command gets them
//! (`lockrun::stdio`): the same files, on no mount of the machine's that
//! can be written. A device or a file read is opened again on a read-only
//! mount of its own; a file written is relayed by lockrun. Judged from
//! outside: a device node's and a log's mode, what the log holds and in
//! which order, where the caller's offset is; each beside a control.

use std::io::{Seek as _, SeekFrom};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;

use crate::support::python::python3;
use crate::support::world::{self, s, stdout_lines, World, BIN};

/// A device node like `/dev/null` (1:3), of mode 0666, made by the test
/// in its own dir (removed with it), so that a change to it cannot break
/// the machine's.
fn null_device(at: &Path) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    mknod(
        at,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 3),
    )
    .unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// Stdin `/dev/null`, as CI gives it: the command can neither `fchmod(0)`
/// nor `chmod /proc/self/fd/0` it (refused, `EROFS` by the kernel or
/// `EPERM` by lockrun's supervisor), since its fd 0 lies on a read-only
/// mount (`fstatvfs`), and it still reads end of file there. Judged from
/// outside: the node's mode. Control: outside, the same calls on a node of
/// its own change it, on a writable mount.
#[test]
fn stdin_a_device_is_handed_on_a_read_only_mount() {
    let w = World::new("stdio-dev");
    let (dev, control) = (w.root.join("null"), w.root.join("null-control"));
    null_device(&dev);
    null_device(&control);
    let before = std::fs::symlink_metadata(&dev).unwrap();
    let ops: &[&[&str]] = &[
        &["fd_mount", "0"],
        &["fchmod_fd", "0", "0"],
        &["chmod_mode", "/proc/self/fd/0", "0"],
        &["read_fd", "0", "16"],
    ];
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .unwrap()
    };
    let argv = world::probe_argv(ops);
    let outside = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(open(&control))
        .output()
        .unwrap();
    assert_eq!(
        stdout_lines(&outside),
        ["mount=rw", "ok", "ok", "read=b''"],
        "control"
    );
    assert_eq!(
        std::fs::symlink_metadata(&control).unwrap().mode() & 0o7777,
        0,
        "control: the node outside changed"
    );
    let out = w.cmd(&[], &argv).stdin(open(&dev)).output().unwrap();
    let r = stdout_lines(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(r.len(), ops.len(), "{r:?}");
    assert_eq!(r[0], "mount=ro", "{r:?}");
    for (op, got) in ops[1..3].iter().zip(&r[1..3]) {
        assert!(
            ["errno=EROFS", "errno=EPERM"].contains(&got.as_str()),
            "{op:?}: {got}"
        );
    }
    assert_eq!(r[3], "read=b''");
    let after = std::fs::symlink_metadata(&dev).unwrap();
    assert!(after.file_type().is_char_device());
    assert_eq!(
        (after.mode(), after.rdev(), after.uid()),
        (before.mode(), before.rdev(), before.uid()),
        "the device node changed"
    );
    w.assert_no_run_dirs();
}

/// lockrun started in a mount namespace of its own (`unshare -m`, or a
/// service manager's) after its stdin was opened: the mount that stdin is
/// on is another namespace's, but the same device under the same name is
/// in lockrun's (the new namespace holds copies of the mounts it was made
/// from), and it is that copy the command gets, read-only. Judged from
/// outside: the node's mode. (A name that leads elsewhere refuses the run:
/// the last test.)
#[test]
fn stdin_opened_before_lockrun_entered_a_mount_namespace_of_its_own() {
    let w = World::new("stdio-ns");
    let dev = w.root.join("null");
    null_device(&dev);
    let before = std::fs::symlink_metadata(&dev).unwrap();
    let ops: &[&[&str]] = &[
        &["fd_mount", "0"],
        &["fchmod_fd", "0", "0"],
        &["read_fd", "0", "16"],
    ];
    let unshare = ["unshare", "--mount", "--propagation", "private"];
    let stdin = std::fs::File::open(&dev).unwrap();
    let out = w
        .cmd_under(&unshare, &[], &world::probe_argv(ops))
        .stdin(stdin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = stdout_lines(&out);
    assert_eq!(r.len(), ops.len(), "{r:?}");
    assert_eq!([r[0].as_str(), r[2].as_str()], ["mount=ro", "read=b''"]);
    assert!(
        ["errno=EROFS", "errno=EPERM"].contains(&r[1].as_str()),
        "{r:?}"
    );
    let after = std::fs::symlink_metadata(&dev).unwrap();
    assert_eq!((after.mode(), after.rdev()), (before.mode(), before.rdev()));
    w.assert_no_run_dirs();
}

/// Stdout and stderr one log file (`>> log 2>&1`): what the command
/// writes lands in it after what it held, stdout's and stderr's lines in
/// the order written; lockrun's own end-of-run lines come after all of
/// it, and the shell's next write after them
/// (`{ lockrun …; echo done; } > log`: nothing overwritten). Control: the
/// same group without lockrun.
#[test]
fn stdout_a_file_gets_the_runs_output_in_order_then_the_callers() {
    let w = World::new("stdio-log");
    let refused = w.data.join("refused");
    let script = format!(
        "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; echo x > {}",
        s(&refused)
    );
    let run = w.cmd(&[], &["sh", "-c", &script]);
    let lockrun: Vec<&std::ffi::OsStr> = std::iter::once(run.get_program())
        .chain(run.get_args())
        .collect();
    // GROUP LOG COMMAND…: the command, then `done`, into LOG (`>` or `>>`).
    let group = |redirect: &str, log: &Path, command: &[&std::ffi::OsStr]| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{{ \"$@\"; echo done; }} {redirect} \"$0\" 2>&1"))
            .arg(log)
            .args(command)
            .env("HOME", &w.home)
            .current_dir(&w.wt)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .filter(|l| !world::is_crowding(l))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let ran: Vec<String> = (1..=5)
        .flat_map(|i| [format!("out{i}"), format!("err{i}")])
        .collect();
    for redirect in [">", ">>"] {
        let log = w.root.join("log");
        std::fs::write(&log, "before\n").unwrap();
        let before = usize::from(redirect == ">>");
        let control = group(
            redirect,
            &log,
            &["sh".as_ref(), "-c".as_ref(), script.as_ref()],
        );
        assert_eq!(control[before..before + 10], ran, "control: {control:?}");
        assert_eq!(control.last().map(String::as_str), Some("done"));
        std::fs::remove_file(&refused).unwrap();
        std::fs::write(&log, "before\n").unwrap();
        let lines = group(redirect, &log, &lockrun);
        if redirect == ">>" {
            assert_eq!(lines[0], "before", "{lines:?}");
        }
        assert_eq!(lines[before..before + 10], ran, "{redirect}: {lines:?}");
        // Then sh's own refusal, lockrun's summary of it, and `done`.
        let rest = &lines[before + 10..];
        assert!(rest[0].contains("Read-only file system"), "{lines:?}");
        assert!(
            rest[1].starts_with("lockrun: 1 filesystem access refused: "),
            "{lines:?}"
        );
        assert!(rest[1..rest.len() - 1]
            .iter()
            .all(|l| l.starts_with("lockrun: ")));
        assert_eq!(rest.last().map(String::as_str), Some("done"), "{lines:?}");
    }
    world::assert_absent(&refused);
    w.assert_no_run_dirs();
}

/// `fchmod(1)` inside reaches no file of the caller's: the command's
/// stdout is lockrun's relay, a pipe, whose mode is the command's own to
/// change. Judged from outside: the log's mode, and what it got. Control:
/// outside, the same probe changes its log's mode.
#[test]
fn the_mode_of_the_callers_stdout_file_is_out_of_reach() {
    let w = World::new("stdio-mode");
    let ops: &[&[&str]] = &[&["fchmod_fd", "1", "777"], &["fd_kind", "1"]];
    let argv = world::probe_argv(ops);
    let log = |name: &str| {
        let p = w.root.join(name);
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        (p, f)
    };
    let (control, f) = log("control");
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(f)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&control).unwrap(),
        "ok\nkind=file\n"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&control), 0o777, "control");
    let (inside, f) = log("inside");
    let out = w.cmd(&[], &argv).stdout(f).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "ok\nkind=fifo\n");
    assert_eq!(mode(&inside), 0o640, "the caller's stdout file changed");
}

/// A write into the caller's file that fails (here `EFBIG`, beyond the
/// caller's `RLIMIT_FSIZE`) is said once, naming the file; the pipe is
/// closed, so the command's next write fails (`SIGPIPE`: exit 141) rather
/// than be lost unseen. Control: without the limit, all of it lands.
#[test]
fn a_write_into_the_callers_file_that_fails_is_said_and_ends_the_commands_writes() {
    const LIMITED: &str = "import os, resource, sys\n\
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n\
        os.execv(sys.argv[1], sys.argv[1:])\n";
    let w = World::new("stdio-efbig");
    let argv = ["head", "-c", "1000000", "/dev/zero"];
    let log = w.root.join("log");
    let run = |limited: bool| {
        let f = std::fs::File::create(&log).unwrap();
        let mut c = if limited {
            w.cmd_under(&[python3(), "-c", LIMITED], &[], &argv)
        } else {
            w.cmd(&[], &argv)
        };
        let out = c.stdout(f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            out.status.code(),
            std::fs::metadata(&log).unwrap().len(),
            err,
        )
    };
    let (code, len, err) = run(false);
    assert_eq!((code, len), (Some(0), 1_000_000), "control: {err}");
    let (code, len, err) = run(true);
    assert_eq!((code, len), (Some(128 + 13), 4096), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("lockrun: ") && !world::is_crowding(l))
        .collect();
    assert_eq!(
        said,
        [format!(
            "lockrun: the command's stdout could not all be written into {}: write: File too \
             large (os error 27); 4096 bytes were, what came after them is lost, and the \
             command's writes after that failed (EPIPE)",
            log.display()
        )],
        "{err}"
    );
    w.assert_no_run_dirs();
}

/// Stdin a file: the command reads it from where the caller's offset is,
/// on a read-only mount, and the caller's offset then follows what it
/// read, so a loop that hands each run the rest of a list goes on after
/// what the run took (`while read x; do lockrun …; done < list`). Control:
/// a run that reads nothing leaves the offset where it was.
#[test]
fn stdin_a_file_is_read_from_the_callers_offset_which_then_follows_the_run() {
    let w = World::new("stdio-stdin");
    let list = w.root.join("list");
    std::fs::write(&list, "line1\nline2\nline3\n").unwrap();
    let at = |ops: &[&[&str]]| {
        let mut f = std::fs::File::open(&list).unwrap();
        f.seek(SeekFrom::Start(6)).unwrap();
        let out = w
            .cmd(&[], &world::probe_argv(ops))
            .stdin(f.try_clone().unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (stdout_lines(&out), f.stream_position().unwrap())
    };
    assert_eq!(at(&[&["fd_mount", "0"]]), (vec!["mount=ro".to_owned()], 6));
    assert_eq!(
        at(&[&["read_fd", "0", "6"], &["fd_mount", "0"]]),
        (
            vec!["read=b'line2\\n'".to_owned(), "mount=ro".to_owned()],
            12
        )
    );
    // The loop: each run reads one line more than the shell's `read` did.
    let out = Command::new("sh")
        .arg("-c")
        .arg("while read x; do \"$@\" \"$x\"; done < \"$0\"")
        .arg(&list)
        .arg(BIN)
        .args(["--worktree", s(&w.wt), "--state-dir", s(&w.state), "--"])
        .args(["sh", "-c", "read y; echo \"$0-$y\""])
        .env("HOME", &w.home)
        .current_dir(&w.wt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout_lines(&out), ["line1-line2", "line3-"]);
    w.assert_no_run_dirs();
}

/// What cannot be handed on off the machine's writable mounts refuses the
/// run (exit 125, one line naming the descriptor and why; nothing runs): a
/// file open for writing as stdin (`<> file`), a pseudo-terminal's master
/// (opened again, another terminal), a file on a mount of another mount
/// namespace, reached through `/proc/PID/root` (no clone of it can be made
/// here). Control: files of this namespace, read-only, run (the tests
/// above).
#[test]
fn stdio_that_cannot_be_handed_on_refuses_the_run() {
    let w = World::new("stdio-refused");
    let side = w.wt.join("side-effect");
    let refused = |stdin: std::process::Stdio| {
        let out = w
            .cmd(&[], &["touch", s(&side)])
            .stdin(stdin)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let said: Vec<&str> = err.lines().filter(|l| !world::is_crowding(l)).collect();
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert_eq!(said.len(), 1, "{err}");
        world::assert_absent(&side);
        said[0].to_owned()
    };
    let written = w.root.join("written");
    std::fs::write(&written, "").unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&written)
        .unwrap();
    let said = refused(f.into());
    assert!(
        said.starts_with(&format!(
            "lockrun: the command's stdin, stdout and stderr: stdin ({}): it is a regular file \
             open for writing",
            written.display()
        )),
        "{said}"
    );
    let pty = nix::pty::openpty(None, None).unwrap();
    let said = refused(std::fs::File::from(pty.master).into());
    assert!(
        said.contains(": it is a pseudo-terminal's master"),
        "{said}"
    );
    // A tmpfs of a mount namespace of its own, held by a sleeping process.
    let theirs = w.root.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let mut ns = Command::new("unshare");
    ns.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none \"$0\" && echo x > \"$0/f\" && echo ready && exec sleep 60")
        .arg(&theirs);
    let (held, _, _) = world::Background::until_ready(ns);
    let through = format!("/proc/{}/root{}/f", held.0.id(), s(&theirs));
    let said = refused(std::fs::File::open(&through).unwrap().into());
    let clone = format!(
        "stdin ({}): a read-only clone of its mount, for the command: open_tree: ",
        theirs.join("f").display()
    );
    assert!(said.contains(&clone), "{said}");
    w.assert_no_run_dirs();
}
