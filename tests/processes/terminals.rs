//! The caller's terminal as it was when the run ends: typing into it is
//! refused, its settings are put back, and the run has terminals of its own.

use std::process::Command;

use crate::support::python::python3;
use crate::support::world;
use crate::support::world::{assert_absent, s, stdout_lines, World};

/// Whether this process has `CAP_SYS_ADMIN` in its effective set.
fn has_cap_sys_admin() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    // CAP_SYS_ADMIN: 21 (linux/capability.h).
    eff & (1 << 21) != 0
}

#[test]
fn typing_into_the_callers_terminal_is_refused() {
    let w = World::new("tiocsti");
    let pty = include_str!("../support/pty.py");
    let tiocsti = world::probe_argv(&[&["tiocsti"], &["write", "/dev/tty"]]);
    // Control: outside, TIOCSTI on the controlling tty works (the byte is echoed).
    let out = Command::new(python3())
        .args(["-c", pty])
        .args(&tiocsti)
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&out.stdout);
    // Where `dev.tty.legacy_tiocsti` is 0 (Debian's kernels), the kernel
    // itself refuses TIOCSTI (`EIO`) to a caller without CAP_SYS_ADMIN, and
    // lets one with it through (the test, as root). The run has none, so
    // there the filter is a second wall; its refusal, `EPERM` and named in
    // the summary, is told apart from the kernel's below.
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map_or(true, |v| v.trim() != "0");
    if legacy || has_cap_sys_admin() {
        assert!(control.starts_with("xok"), "control: {control:?}");
    } else {
        assert!(control.starts_with("errno=EIO"), "control: {control:?}");
    }
    // Inside: refused; the pty in use stays writable.
    let out = w
        .cmd_under(&[python3(), "-c", pty], &[], &tiocsti)
        .output()
        .unwrap();
    // The pty carries lockrun's stderr too.
    let inside = String::from_utf8_lossy(&out.stdout);
    let (summary, inside): (Vec<&str>, Vec<&str>) = inside
        .lines()
        .filter(|l| !world::is_crowding(l))
        .partition(|l| l.starts_with("lockrun: "));
    assert_eq!(inside, ["errno=EPERM", "pwnedok"]);
    // Seen, not silent.
    assert_eq!(
        summary,
        [
            "lockrun: 1 system call refused (seccomp: calls that would widen the sandbox, which no policy allows): ioctl TIOCSTI (python3)",
            "lockrun: for details and the policy lines that would allow them, run it again with --audit-log FILE, then: lockrun audit FILE",
        ]
    );
    w.assert_no_run_dirs();
}

/// The terminal a run is given is the caller's, and three switches made on
/// it stay after the run: a line discipline (`TIOCSETD`; `n_null`, built
/// into this kernel, swallows all that is typed and shown, and where
/// modules load the kernel loads a discipline's module as root on the
/// request, `dev.tty.ldisc_autoload`), exclusive mode (`TIOCEXCL`: every
/// later open of it by a process without `CAP_SYS_ADMIN` gets `EBUSY`), and
/// stopped output (`tcflow(TCOOFF)`: the shell's next write to it blocks;
/// `TCIOFF` sends its other end STOP). All refused (`EPERM`) and shown.
/// Judged from outside: the terminal's discipline, exclusivity, whether a
/// write to it goes through, and what its other end got, after the run.
/// Control: the same probes outside switch them.
#[test]
fn the_callers_terminal_keeps_its_line_discipline_stays_shared_and_flows() {
    const T: &str = "the_callers_terminal_keeps_its_line_discipline_stays_shared_and_flows";
    // Run argv with a fresh pty on its stdin; then print, as seen from
    // here, what the pty's other end got during the run, its line
    // discipline, its exclusivity (TIOCGEXCL), and whether a write to it
    // goes through.
    const ON_A_PTY: &str = "import errno, fcntl, os, select, struct, subprocess, sys, termios\n\
        master, slave = os.openpty()\n\
        code = subprocess.call(sys.argv[1:], stdin=slave)\n\
        def got():\n    \
            return os.read(master, 64) if select.select([master], [], [], 0.2)[0] else b''\n\
        sent = got()\n\
        d = struct.unpack('i', fcntl.ioctl(slave, termios.TIOCGETD, bytes(4)))[0]\n\
        x = struct.unpack('i', fcntl.ioctl(slave, 0x80045440, bytes(4)))[0]\n\
        os.set_blocking(slave, False)\n\
        try:\n    \
            os.write(slave, b'w')\n    \
            flow = got()\n\
        except OSError as e:\n    \
            flow = 'stopped' if e.errno == errno.EAGAIN else errno.errorcode[e.errno]\n\
        print(f'exit={code} sent={sent} ldisc={d} excl={x} write={flow}')\n";
    // A discipline other than n_tty (0) that this kernel has.
    let ldiscs = std::fs::read_to_string("/proc/tty/ldiscs").unwrap();
    let Some(other) = ldiscs
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .find(|n| *n != "0")
    else {
        world::skip(T, "the kernel has no line discipline but n_tty");
        return;
    };
    let w = World::new("tiocsetd");
    let switches: &[&[&str]] = &[&["ldisc", other], &["tty_excl"]];
    // TCIOFF (2), then TCOOFF (0): a STOP sent, then the output stopped.
    let flow: &[&[&str]] = &[&["tty_flow", "2"], &["tty_flow", "0"]];
    // Controls: outside, each switches the terminal. Apart: a discipline
    // but n_tty may not know tcflow (n_null: EINVAL), nor take a write.
    let control = |probe: &[&[&str]]| {
        let out = Command::new(python3())
            .args(["-c", ON_A_PTY])
            .args(world::probe_argv(probe))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // (What a write then does is the discipline's: n_null refuses it.)
    let after = control(switches);
    assert!(
        after.starts_with(&format!(
            "ok\nok\nexit=0 sent=b'' ldisc={other} excl=1 write="
        )),
        "control: {after}"
    );
    assert_eq!(
        control(flow),
        "ok\nok\nexit=0 sent=b'\\x13' ldisc=0 excl=0 write=stopped\n",
    );
    let probe = world::probe_argv(&[switches, flow].concat());
    let out = w
        .cmd_under(&[python3(), "-c", ON_A_PTY], &[], &probe)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "errno=EPERM\nerrno=EPERM\nerrno=EPERM\nerrno=EPERM\n\
         exit=0 sent=b'' ldisc=0 excl=0 write=b'w'\n",
        "{out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "lockrun: 4 system calls refused (seccomp: calls that would widen the sandbox, \
             which no policy allows): ioctl TCXONC TCIOFF (python3), ioctl TCXONC TCOOFF \
             (python3), ioctl TIOCEXCL (python3), ioctl TIOCSETD (python3)\n"
        ),
        "{stderr}"
    );
    w.assert_no_run_dirs();
}

/// A terminal's settings outlive the process that set them: a full-screen
/// program that does not get to clean up leaves the caller's shell without
/// echo, in raw mode. lockrun puts back the settings of the terminal it was
/// started from once the run is over, whether the terminal is only the
/// run's stdin or lockrun's controlling terminal too (in its foreground),
/// and says so; settings the command put back itself draw no notice. In
/// the background, the terminal is the foreground job's: lockrun leaves it
/// alone (and is not stopped for touching it, `SIGTTOU`). Judged from
/// outside: the pty's echo and canonical mode after the run. Control: the
/// same command outside leaves them off.
#[test]
fn the_callers_terminal_settings_are_put_back_after_the_run() {
    // ON_A_PTY stdin|ctty|background ARGV: run ARGV with a fresh pty on its
    // stdin (ctty: the controlling terminal of a session of its own, ARGV
    // in its foreground; background: ARGV in a process group of its own
    // there), then print the pty's echo and canonical mode as seen from
    // here.
    const ON_A_PTY: &str = "import fcntl, os, subprocess, sys, termios\n\
        mode = sys.argv[1]\n\
        master, slave = os.openpty()\n\
        if mode != 'stdin':\n    \
            if os.fork():\n        \
                sys.exit(os.waitstatus_to_exitcode(os.wait()[1]))\n    \
            os.setsid()\n    \
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)\n\
        p = subprocess.Popen(sys.argv[2:], stdin=slave, process_group=0 if mode == 'background' else None)\n\
        try:\n    \
            code = p.wait(timeout=30)\n\
        except subprocess.TimeoutExpired:\n    \
            code = 'stopped'\n    \
            p.kill()\n\
        l = termios.tcgetattr(slave)[3]\n\
        print(f'exit={code} echo={int(bool(l & termios.ECHO))} icanon={int(bool(l & termios.ICANON))}', flush=True)\n";
    let w = World::new("termios");
    let on_a_pty = |mode: &str, under: bool, script: &str| {
        let argv = ["sh", "-c", script];
        let mut c = if under {
            w.cmd_under(&[python3(), "-c", ON_A_PTY, mode], &[], &argv)
        } else {
            let mut c = Command::new(python3());
            c.args(["-c", ON_A_PTY, mode]).args(argv);
            c
        };
        let out = c.output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let raw = "stty -echo -icanon";
    for mode in ["stdin", "ctty"] {
        // Control: outside, the settings stay changed.
        let (control, _) = on_a_pty(mode, false, raw);
        assert_eq!(control, "exit=0 echo=0 icanon=0\n", "control, {mode}");
        let (out, stderr) = on_a_pty(mode, true, raw);
        assert_eq!(out, "exit=0 echo=1 icanon=1\n", "{mode}: {stderr}");
        let notice = stderr
            .lines()
            .find(|l| l.starts_with("lockrun: the run left the settings of /dev/pts/"))
            .unwrap_or_else(|| panic!("{mode}: no notice: {stderr}"));
        assert!(
            notice.ends_with(" changed (echo off, line editing off); put back as they were"),
            "{mode}: {notice}"
        );
        // Put back by the command itself: nothing to say.
        let (out, stderr) = on_a_pty(mode, true, &format!("{raw}; stty echo icanon"));
        assert_eq!(out, "exit=0 echo=1 icanon=1\n", "{mode}: {stderr}");
        assert!(!stderr.contains("the run left"), "{mode}: {stderr}");
    }
    // In the background (the command ignoring SIGTTOU, as it must to
    // change them from there): left as the run left them, lockrun not
    // stopped.
    let from_background = format!("trap '' TTOU; {raw}");
    let (control, _) = on_a_pty("background", false, &from_background);
    assert_eq!(control, "exit=0 echo=0 icanon=0\n", "control, background");
    let (out, stderr) = on_a_pty("background", true, &from_background);
    assert_eq!(out, "exit=0 echo=0 icanon=0\n", "background: {stderr}");
    assert!(!stderr.contains("the run left"), "background: {stderr}");
    w.assert_no_run_dirs();
}

/// A run gets terminals of its own: `/dev/pts` is a devpts instance of the
/// run's mount namespace, where `/dev/ptmx` allocates, so `openpty` works
/// inside (Python's pty, `script`, tmux, a tool runner driving commands
/// through a pty), and no terminal of another process is there to open. A
/// run is uid 0, which owns root's terminals, and one opened for reading
/// would take the keystrokes typed into it. Judged from outside: a line
/// typed into the outside terminal before the run tried to read it is still
/// whole for its own reader afterwards. Control: outside, the same opens of
/// the outside terminal succeed.
#[test]
fn a_run_has_terminals_of_its_own_and_cannot_open_another_processs() {
    use std::os::fd::AsRawFd as _;
    let w = World::new("pts");
    let pty = nix::pty::openpty(None, None).unwrap();
    let name = nix::unistd::ttyname(&pty.slave).unwrap();
    let by_fd = format!("/proc/{}/fd/{}", std::process::id(), pty.slave.as_raw_fd());
    assert_eq!(
        w.probe_outside(&[&["open_read", s(&name)], &["open_read", &by_fd]]),
        ["ok", "ok"]
    );
    // Typed: a line waits in the terminal's input, as a password would.
    assert_eq!(nix::unistd::write(&pty.master, b"typed\n"), Ok(6));
    let r = w.probe(&[], &[&["read", s(&name)], &["read", &by_fd], &["openpty"]]);
    // Not in the run's /dev/pts (ENOENT); not through the process holding
    // it either: the run's /proc shows no process outside (ENOENT).
    assert_eq!(r, ["errno=ENOENT", "errno=ENOENT", "ok"]);
    // The line is whole for the terminal's own reader.
    let flags = nix::fcntl::fcntl(pty.slave.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(pty.slave.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    let mut got = [0u8; 16];
    let read = nix::unistd::read(pty.slave.as_raw_fd(), &mut got).map(|n| got[..n].to_vec());
    assert_eq!(read, Ok(b"typed\n".to_vec()), "the typed line was taken");
}

/// The terminal lockrun is started on lies on the machine's /dev/pts, out
/// of the run's sight: inside it is named /dev/console (as bubblewrap names
/// it), so `tty` and `ttyname` find it, and what is written there reaches
/// it. Control: outside, `tty` names it in /dev/pts.
#[test]
fn the_callers_terminal_keeps_a_name_inside() {
    let w = World::new("console");
    let pty = include_str!("../support/pty.py");
    let script = "tty; echo via-console > /dev/console";
    let out = Command::new(python3())
        .args(["-c", pty, "sh", "-c", script])
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&out.stdout);
    assert!(control.starts_with("/dev/pts/"), "control: {control:?}");
    let out = w
        .cmd_under(&[python3(), "-c", pty], &[], &["sh", "-c", script])
        .output()
        .unwrap();
    let inside = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = inside.lines().filter(|l| !world::is_crowding(l)).collect();
    assert_eq!(lines, ["/dev/console", "via-console"], "{inside}");
    w.assert_no_run_dirs();
}

/// A CI runner sends a run's output to a log file; tools reopen it as
/// `/dev/stdout` or `/dev/stderr` (`> /dev/stderr`, `tee /dev/stderr`).
/// The command's stderr is then lockrun's relay into that file, a pipe:
/// the reopen reaches the pipe, and what is written there lands in the
/// log after what it held (`>` truncates no pipe, so no earlier line is
/// lost), while the file itself is reached no other way: not read (here
/// it lies in a denied dir), not the dir around it.
#[test]
fn the_callers_stderr_file_is_written_through_dev_stderr_and_reached_no_other_way() {
    let w = World::new("stdio");
    let log = w.data.join("err.log");
    std::fs::write(&log, "before\n").unwrap();
    let stderr = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let sibling = w.data.join("sibling");
    let moved = w.data.join("moved");
    let out = w
        .cmd(
            &["--deny-read", s(&w.data)],
            &world::probe_argv(&[
                &["write", "/dev/stderr"],
                &["append", "/dev/stderr"],
                &["read", s(&log)],
                &["write", s(&sibling)],
                &["rename", s(&log), s(&moved)],
            ]),
        )
        .stderr(stderr)
        .output()
        .unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "{:?}: {said}", out.status);
    assert_eq!(
        stdout_lines(&out),
        // Read: Landlock's denial; written or renamed: the read-only mount.
        ["ok", "ok", "errno=EACCES", "errno=EROFS", "errno=EROFS"],
        "{said}"
    );
    // After what it held, what the command wrote; then lockrun's own
    // summary of the three refusals. The reopen itself is no refusal.
    let said: Vec<&str> = said.lines().filter(|l| !world::is_crowding(l)).collect();
    assert_eq!(said[0], "before");
    assert!(
        said[1].starts_with("pwnedpwnedlockrun: 3 filesystem accesses refused: "),
        "{said:?}"
    );
    assert!(!said.iter().any(|l| l.contains("/proc/")), "{said:?}");
    assert_absent(&sibling);
    assert_absent(&moved);
}

/// The caller's terminal as the run's stdin and stdout (an agent started
/// from a shell): the same terminal inside (`isatty`, what is written
/// reaches its other end), on a read-only mount of its own, so that its
/// mode cannot be changed (`fchmod(0, 0666)` refused: `EROFS` by the
/// kernel, or `EPERM` by lockrun's supervisor). Judged from outside: the
/// terminal's mode, and what its master read. Control: outside, the same
/// probe on a terminal of its own changes that one's mode.
#[test]
fn the_callers_terminal_is_handed_on_a_read_only_mount() {
    use std::os::unix::fs::PermissionsExt as _;
    let w = World::new("stdio-pty");
    let ops: &[&[&str]] = &[
        &["isatty", "0"],
        &["isatty", "1"],
        &["fd_mount", "0"],
        &["fchmod_fd", "0", "666"],
        &["writefd", "1"],
    ];
    let argv = world::probe_argv(ops);
    // What the pty's master got, with the terminal's CR LF as LF; and the
    // mode of its slave.
    let on_a_pty = |command: &mut Command| {
        let pty = nix::pty::openpty(None, None).unwrap();
        let name = nix::unistd::ttyname(&pty.slave).unwrap();
        let before = std::fs::metadata(&name).unwrap().permissions().mode();
        let slave = || std::fs::File::from(pty.slave.try_clone().unwrap());
        let out = command.stdin(slave()).stdout(slave()).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let mut fds = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&pty.master),
                nix::poll::PollFlags::POLLIN,
            )];
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u8)) != Ok(1) {
                break;
            }
            match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&pty.master), &mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let after = std::fs::metadata(&name).unwrap().permissions().mode();
        let got = String::from_utf8_lossy(&got).replace("\r\n", "\n");
        (got, before, after)
    };
    let (control, before, after) = on_a_pty(Command::new(&argv[0]).args(&argv[1..]));
    assert_eq!(control, "tty=1\ntty=1\nmount=rw\nok\npwnedok\n", "control");
    assert_ne!(before & 0o777, 0o666, "control: a fresh pty is not 0666");
    assert_eq!(after & 0o777, 0o666, "control: its mode changed");
    let (inside, before, after) = on_a_pty(&mut w.cmd(&[], &argv));
    let lines: Vec<&str> = inside.lines().collect();
    assert_eq!(lines[..3], ["tty=1", "tty=1", "mount=ro"], "{inside}");
    assert!(
        ["errno=EROFS", "errno=EPERM"].contains(&lines[3]),
        "{inside}"
    );
    assert_eq!(lines[4], "pwnedok", "{inside}");
    assert_eq!(after, before, "the caller's terminal's mode changed");
    w.assert_no_run_dirs();
}
