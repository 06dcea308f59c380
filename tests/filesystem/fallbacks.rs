//! The filesystem promises an older kernel holds by another mechanism than
//! Landlock's own right, each tried on this kernel at the Landlock ABI that
//! lacks it (the test build's `LOCKRUN_TEST_LANDLOCK_ABI`) and at the
//! kernel's own, with the same answers expected of both:
//!
//! - **no file outside the writable roots truncated** (Landlock's truncate
//!   right, ABI 3): below it the seccomp supervisor truncates, or opens with
//!   `O_TRUNC`, only beneath a writable root, and refuses the rest
//!   (`EACCES`, recorded);
//! - **no ioctl on a device outside the writable roots but a terminal's and
//!   those of null, zero, full** (the device ioctl right, ABI 5): below it
//!   the run opens device files only under `/dev`, every other mount being
//!   `nodev` in its mount namespace.
//!
//! Each escape is judged from outside (the canary's bytes, the terminal's
//! window size) beside a control that must succeed the same way (a
//! truncation in the worktree, an ioctl on the caller's terminal). The
//! run's other gaps at the lowered ABI (scoping, denial logging) are
//! accepted by name, as the refusal lists them; the promises tried here
//! must not be among them.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{python, world};
use python::python3;
use world::{assert_canary, s, World};

/// The ops the tests try inside, a result line each (`ok`, `errno=E`).
/// `open_trunc PATH MODE [PERM]`: an open with `O_TRUNC`, the access mode
/// MODE and the permission bits PERM (octal, 0644 unless given); `ok
/// size=N mode=M cloexec=C` tells what descriptor it gave.
/// `winsize PATH ROWS`: open PATH read-only and set its terminal's rows
/// (`open errno=E` or `ioctl errno=E` says which step was refused).
const PROBE: &str = r#"
import ctypes, errno, fcntl, os, struct, sys, termios
libc = ctypes.CDLL(None, use_errno=True)
MODES = {"rdonly": os.O_RDONLY, "wronly": os.O_WRONLY, "rdwr": os.O_RDWR, "none": 3,
         "creat": os.O_RDONLY | os.O_CREAT, "cloexec": os.O_RDONLY | os.O_CLOEXEC}
def err(e):
    return "errno=" + errno.errorcode.get(e.errno, str(e.errno))
def op(name, a):
    if name == "truncate":
        os.truncate(a[0], 0)
    elif name == "fd_truncate":
        # By its /proc/self/fd name, opened read-only.
        fd = os.open(a[0], os.O_RDONLY)
        os.truncate("/proc/self/fd/%d" % fd, 0)
    elif name == "open_trunc":
        # libc's open, which adds no O_CLOEXEC (Python's os.open does).
        perm = int(a[2], 8) if len(a) > 2 else 0o644
        fd = libc.open(a[0].encode(), MODES[a[1]] | os.O_TRUNC, perm)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open")
        size = os.fstat(fd).st_size
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & 3
        cloexec = fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        os.close(fd)
        return "ok size=%d mode=%d cloexec=%d" % (size, mode, cloexec)
    elif name == "symlink":
        os.symlink(a[0], a[1])
    elif name == "winsize":
        try:
            fd = os.open(a[0], os.O_RDONLY | os.O_NOCTTY)
        except OSError as e:
            return "open " + err(e)
        try:
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(a[1]), 80, 0, 0))
        except OSError as e:
            return "ioctl " + err(e)
        finally:
            os.close(fd)
    else:
        raise SystemExit("unknown op " + name)
    return "ok"
args = sys.argv[1:]
while args:
    cur = args[:args.index(";")] if ";" in args else args
    args = args[len(cur) + 1:]
    try:
        print(op(cur[0], cur[1:]))
    except OSError as e:
        print(err(e))
    sys.stdout.flush()
"#;

/// The probe's argv for `ops`.
fn probe(ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python3().to_owned(), "-c".to_owned(), PROBE.to_owned()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".to_owned());
        }
        v.extend(op.iter().map(|s| (*s).to_owned()));
    }
    v
}

/// `c` at the Landlock ABI `abi` (`None`: the kernel's own).
fn at_abi(mut c: Command, abi: Option<&str>) -> Command {
    if let Some(abi) = abi {
        c.env("LOCKRUN_TEST_LANDLOCK_ABI", abi);
    }
    c
}

/// The Landlock ABI a run at `abi` uses: the lower of it and the kernel's.
fn abi_in_use(abi: Option<&str>) -> u8 {
    let own = lockrun::kernel::Features::get().landlock_abi();
    abi.map_or(own, |a| a.parse::<u8>().unwrap().min(own))
}

/// The `--accept-gap` flags a run at `abi` needs for the gaps it has; none
/// may be `ours`, the promise a test tries.
fn other_gaps(w: &World, abi: Option<&str>, ours: &str) -> Vec<String> {
    let out = at_abi(w.cmd(&[], &["true"]), abi).output().unwrap();
    if out.status.success() {
        return Vec::new();
    }
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{err}");
    let list = err
        .split("run.accept_gaps = [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap_or_else(|| panic!("no gaps to accept in: {err}"));
    let names: Vec<String> = list
        .split(", ")
        .map(|n| n.trim_matches('"').to_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n == ours),
        "at ABI {abi:?} the kernel leaves {ours} a gap: {err}"
    );
    names
        .into_iter()
        .flat_map(|n| ["--accept-gap".to_owned(), n])
        .collect()
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The paths of the audit log's filesystem refusals of `access`.
fn refused(log: &Path, access: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Filesystem(fs),
                ..
            } if fs.access.iter().any(|a| a == access) => fs.path,
            _ => None,
        })
        .collect()
}

/// Truncation outside the writable roots, every way a run may ask for it
/// without a write right: `truncate(2)` by path, through a symlink in the
/// worktree and through `/proc/self/fd/N`, and opens with `O_TRUNC` and
/// access mode `O_RDONLY` (with and without `O_CREAT`) or 3. Each is
/// refused, and the canaries keep their bytes, judged from outside; an
/// `O_WRONLY` open is refused as every write there. Controls: each way in
/// the worktree truncates (length 0 from outside), the opens giving the
/// descriptor they asked for. Three ways: at ABI 2 (Debian 12's 6.1) the
/// read-only mounts outside the writable roots refuse (`EROFS`) and
/// lockrun's recorder sees each refusal (`fs.truncate`); at ABI 2 where
/// the mounts cannot be used (`LOCKRUN_TEST_NO_READ_ONLY_MOUNTS`), the
/// seccomp supervisor (`EACCES`, as Landlock's truncate right answers),
/// its refusals in the summary and the audit log by the file it held; at
/// the kernel's own ABI, the mounts or Landlock, whichever the kernel asks
/// first.
#[test]
fn no_file_outside_is_truncated_without_landlocks_truncate_right() {
    for (abi, supervised) in [(Some("2"), false), (Some("2"), true), (None, false)] {
        let name = format!(
            "fb-truncate-{}{}",
            abi.unwrap_or("own"),
            if supervised { "-supervised" } else { "" }
        );
        let w = World::new(&name);
        let outside: Vec<_> = ["path", "link", "fd", "rdonly", "creat", "none", "wronly"]
            .iter()
            .map(|n| w.canary(&w.data.join(n)))
            .collect();
        let mine: Vec<_> = ["path", "fd", "rdonly", "none", "cloexec"]
            .iter()
            .map(|n| w.canary(&w.wt.join(n)))
            .collect();
        // Asked with a set-id mode: the seccomp deny list's refusal, which
        // the supervisor answers before any truncation.
        let set_id = w.canary(&w.wt.join("set-id"));
        let link = w.wt.join("to-outside");
        let log = w.root.join("audit.jsonl");
        let mut flags = vec!["--audit-log".to_owned(), s(&log).to_owned()];
        flags.extend(other_gaps(&w, abi, "truncate"));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (o, m) = (|i: usize| s(&outside[i]), |i: usize| s(&mine[i]));
        let ops: &[&[&str]] = &[
            &["truncate", o(0)],
            &["symlink", o(1), s(&link)],
            &["truncate", s(&link)],
            &["fd_truncate", o(2)],
            &["open_trunc", o(3), "rdonly"],
            &["open_trunc", o(4), "creat"],
            &["open_trunc", o(5), "none"],
            &["open_trunc", o(6), "wronly"],
            // Controls.
            &["truncate", m(0)],
            &["fd_truncate", m(1)],
            &["open_trunc", m(2), "rdonly"],
            &["open_trunc", m(3), "none"],
            &["open_trunc", m(4), "cloexec"],
            &["open_trunc", s(&set_id), "creat", "4755"],
        ];
        let mut cmd = at_abi(w.cmd(&flags, &probe(ops)), abi);
        if supervised {
            cmd.env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1");
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "ABI {abi:?}: {stderr}");
        // From outside first: the canaries keep their bytes, mine are empty.
        for f in outside.iter().chain([&set_id]) {
            assert_canary(f);
        }
        for f in &mine {
            assert_eq!(std::fs::metadata(f).unwrap().len(), 0, "{}", f.display());
        }
        // The supervisor refuses what truncates as Landlock would
        // (EACCES), and Landlock the write; else the read-only mount
        // outside the writable roots refuses first (EROFS), as it does
        // every open for writing there.
        let (no, write) = if supervised {
            ("errno=EACCES", "errno=EACCES")
        } else {
            ("errno=EROFS", "errno=EROFS")
        };
        assert_eq!(
            stdout_lines(&out),
            [
                no,
                "ok",
                no,
                no,
                no,
                no,
                no,
                write,
                "ok",
                "ok",
                "ok size=0 mode=0 cloexec=0",
                "ok size=0 mode=3 cloexec=0",
                "ok size=0 mode=0 cloexec=1",
                "errno=EPERM",
            ],
            "ABI {abi:?}: {stderr}"
        );
        if abi_in_use(abi) < 3 {
            assert_truncations_seen(&log, &outside, &link, &stderr);
        }
        w.assert_no_run_dirs();
    }
}

/// Below ABI 3, each refused truncation of the `outside` files is seen,
/// in the log and the summary (`stderr`), by the file's own name: by the
/// supervisor, the file it held; by the mounts' recorder, the ones
/// reached through the symlink `link` and `/proc/self/fd/N` too (as
/// Landlock names what it refuses), never by the name given.
fn assert_truncations_seen(log: &Path, outside: &[std::path::PathBuf], link: &Path, stderr: &str) {
    let recorded = refused(log, "fs.truncate");
    // On failure, every filesystem refusal the log holds and the summary.
    let all = || {
        let log = std::fs::read_to_string(log).unwrap();
        let fs: Vec<_> = log
            .lines()
            .filter(|l| l.contains("\"filesystem\"") || l.contains("lost"))
            .collect();
        format!(
            "{recorded:?}\nthe log's filesystem refusals:\n{}\n{stderr}",
            fs.join("\n")
        )
    };
    for f in &outside[..6] {
        let f = s(f);
        assert!(
            recorded.iter().any(|p| p == f),
            "{f} not recorded: {}",
            all()
        );
        assert!(stderr.contains(&format!("truncate {f}")), "{f}: {}", all());
    }
    assert!(
        !recorded
            .iter()
            .any(|p| p == s(link) || p.starts_with("/proc/")),
        "named by a name given, not by the file: {}",
        all()
    );
}

/// Run `argv` (lockrun) on a fresh pty, its controlling terminal and
/// stdin, whose window the test sets to 10 rows first; print, after,
/// `exit=N rows=R` as seen from here.
const ON_A_PTY: &str = "import fcntl, os, struct, sys, termios\n\
    m, s = os.openpty()\n\
    fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack('HHHH', 10, 80, 0, 0))\n\
    pid = os.fork()\n\
    if pid == 0:\n    \
        os.setsid()\n    \
        fcntl.ioctl(s, termios.TIOCSCTTY, 0)\n    \
        os.dup2(s, 0)\n    \
        os.execv(sys.argv[1], sys.argv[1:])\n\
    st = os.waitpid(pid, 0)[1]\n\
    rows = struct.unpack('HHHH', fcntl.ioctl(m, termios.TIOCGWINSZ, bytes(8)))[0]\n\
    print('exit=%d rows=%d' % (os.waitstatus_to_exitcode(st), rows), flush=True)\n";

/// A device file outside `/dev` that the run may read takes no ioctl: a
/// node of `/dev/tty` (5, 0) made outside the worktree, which opens the
/// caller's terminal, its rows set through it. Where Landlock has the
/// device ioctl right (ABI ≥ 5) the ioctl is refused (`EACCES`); below
/// (ABI 4 here), the open, the node being on a `nodev` mount in the run's
/// namespace (`EACCES`). Judged from outside: the terminal keeps the rows
/// the control set. Control: the same terminal through `/dev/tty`, which a
/// run may drive, takes the rows. A node in the worktree takes its ioctls
/// where Landlock judges them, and cannot be opened below (stricter, and
/// said so in `Kernel::devices_only_in_dev`).
#[test]
fn no_device_outside_dev_takes_an_ioctl_without_landlocks_device_ioctl_right() {
    const T: &str = "no_device_outside_dev_takes_an_ioctl_without_landlocks_device_ioctl_right";
    for abi in [Some("4"), None] {
        let w = World::new(&format!("fb-ioctl-{}", abi.unwrap_or("own")));
        let nodev = nix::sys::statvfs::statvfs(&w.data)
            .unwrap()
            .flags()
            .contains(nix::sys::statvfs::FsFlags::ST_NODEV);
        if nodev {
            // A device there cannot be opened anyway: the test could not fail.
            world::skip(T, "the test's dirs are on a nodev mount");
            return;
        }
        let tty = nix::sys::stat::makedev(5, 0);
        let (stray, mine) = (w.data.join("tty"), w.wt.join("tty"));
        for node in [&stray, &mine] {
            nix::sys::stat::mknod(
                node,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                tty,
            )
            .unwrap();
        }
        let flags = other_gaps(&w, abi, "device_ioctl");
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let ops: &[&[&str]] = &[
            &["winsize", s(&mine), "41"],
            // Control: the caller's terminal, as a run may reach it.
            &["winsize", "/dev/tty", "21"],
            &["winsize", s(&stray), "31"],
        ];
        let out = at_abi(
            w.cmd_under(&[python3(), "-c", ON_A_PTY], &flags, &probe(ops)),
            abi,
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let (mine_got, stray_got) = if abi_in_use(abi) < 5 {
            ("open errno=EACCES", "open errno=EACCES")
        } else {
            ("ok", "ioctl errno=EACCES")
        };
        assert_eq!(
            stdout_lines(&out),
            [mine_got, "ok", stray_got, "exit=0 rows=21"],
            "ABI {abi:?}: {stderr}"
        );
        w.assert_no_run_dirs();
    }
}

/// `lockrun policy show` says what stands in for each right the ABI in use
/// lacks, and nothing of it where the ABI has the right.
#[test]
fn policy_show_names_what_stands_in_for_each_missing_right() {
    let truncate = "supervised: truncate, and ";
    let devices = "device files anywhere but /dev, opened for nothing";
    let mounts = "on mounts read-only outside the run's writable roots";
    for (abi, supervised) in [("2", false), ("2", true), ("4", false), ("7", false)] {
        let w = World::new(&format!("fb-show-{abi}-{supervised}"));
        let mut cmd = at_abi(Command::new(world::BIN), Some(abi));
        if supervised {
            cmd.env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1");
        }
        let out = cmd
            .args(["policy", "show", "--worktree", s(&w.wt), "--state-dir"])
            .arg(&w.state)
            .env("HOME", &w.home)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "ABI {abi}: {out:?}");
        let in_use = abi_in_use(Some(abi));
        // The mounts hold truncation where they hold metadata; the
        // supervisor only where they cannot.
        assert_eq!(text.contains(mounts), !supervised, "ABI {in_use}: {text}");
        assert_eq!(
            text.contains(truncate),
            in_use < 3 && supervised,
            "ABI {in_use}: {text}"
        );
        assert_eq!(text.contains(devices), in_use < 5, "ABI {in_use}: {text}");
    }
}
