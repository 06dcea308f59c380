//! The command as lockrun runs it: bad input is one line and nothing runs,
//! exit statuses follow `env`'s convention, the command is found as `execvp`
//! would, with its environment, temp dir, descriptor limit and signals.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::python::python3;
use crate::support::world;
use crate::support::world::{
    assert_absent, s, stdout_lines, wait_for, with_ulimit, Background, World, BIN,
};

#[test]
fn another_runs_tmp_is_unreachable_and_sigterm_is_forwarded() {
    let w = World::new("otherrun");
    let ready = w.wt.join("ready");
    let got = w.wt.join("got-term");
    let script = format!(
        "echo secret > \"$TMPDIR/s\"; trap 'echo term > {got}; exit 7' TERM; touch {ready}; \
         while :; do sleep 0.1; done",
        got = s(&got),
        ready = s(&ready)
    );
    let mut a = Background(
        w.cmd(&[], &["sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("run A ready", || ready.exists());
    let runs: Vec<_> = std::fs::read_dir(w.state.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let a_tmp = runs[0].join("tmp");
    assert!(a_tmp.join("s").exists());
    // Run B (same state dir) tries A's tmp: nothing written or read there;
    // its names list, as every denied dir's do (docs/promises.md#reads:
    // the listing right of the dirs above reaches every dir beneath).
    let out = w.run(
        &[],
        &world::probe_argv(&[
            &["write", s(&a_tmp.join("pwned"))],
            &["read", s(&a_tmp.join("s"))],
            &["listdir", s(&a_tmp)],
            &["write", "{TMPDIR}/mine"],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        ["errno=EROFS", "errno=EACCES", "ok", "ok"]
    );
    assert_absent(&a_tmp.join("pwned"));
    // SIGTERM lockrun A: forwarded to the command, which exits 7; A cleans up.
    a.sigterm();
    let status = a.wait();
    assert_eq!(status.code(), Some(7));
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "term");
    w.assert_no_run_dirs();
}

#[test]
fn sigterm_kills_a_command_that_does_not_trap_and_cleans_up() {
    let w = World::new("sigterm");
    let ready = w.wt.join("ready");
    let mut a = Background(
        w.cmd(
            &[],
            &["sh", "-c", &format!("touch {}; exec sleep 300", s(&ready))],
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap(),
    );
    wait_for("ready", || ready.exists());
    std::thread::sleep(Duration::from_millis(100));
    a.sigterm();
    assert_eq!(a.wait().code(), Some(128 + 15));
    w.assert_no_run_dirs();
}

/// A run that left its temp dir as it got it hands the dir on to a later
/// run, empty and 0700 (what spares a run two directories made and two
/// removed); one that wrote in it, or changed it, never does. Judged from
/// outside: the state dir's `spare/` after each run, and the file the
/// run left found nowhere beneath the state dir. Control: the untouched
/// temp dir is kept (the later run gets the same directory), so the
/// check after the touched run is not one that finds nothing kept ever.
/// A new temp dir whose command started within the clock tick it was made
/// in is not kept (a change then would not move its ctime): a control on
/// a new dir is tried up to 3 times.
#[test]
fn a_temp_dir_is_handed_on_to_a_later_run_only_as_its_run_got_it() {
    let w = World::new("spare");
    let spare = w.state.join("spare");
    let kept = || std::fs::read_dir(&spare).map_or(0, Iterator::count);
    // The temp dir as its run sees it: inode, mode, entries.
    let look = |touch: &str| {
        let out = w.run(
            &[],
            &[
                "sh",
                "-c",
                &format!("stat -c '%i %a' \"$TMPDIR\"; ls -A \"$TMPDIR\" | wc -l; {touch}"),
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        w.assert_no_run_dirs();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: Vec<u64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(v[1..], [700, 0], "{text}");
        v[0]
    };
    // An untouched new temp dir, until one is kept: its inode.
    let untouched = || {
        (0..3)
            .map(|_| look("true"))
            .find(|_| kept() == 1)
            .expect("an untouched temp dir is kept")
    };
    let first = untouched();
    let again = look("true");
    assert_eq!(again, first, "the later run got it");
    assert_eq!(kept(), 1);
    for touch in [
        "echo secret > \"$TMPDIR/left\"",
        "chmod 755 \"$TMPDIR\"",
        "mkdir \"$TMPDIR/d\" && rmdir \"$TMPDIR/d\"",
    ] {
        look(touch);
        assert_eq!(kept(), 0, "{touch}: its temp dir was handed on");
        let left = Command::new("find")
            .arg(&w.state)
            .args(["-name", "left"])
            .output()
            .unwrap();
        assert!(left.stdout.is_empty(), "{touch}: left behind: {left:?}");
        // The next run gets a new one, empty and 0700 (`look` checks it),
        // which is kept again.
        untouched();
    }
}

#[test]
fn bad_input_is_one_clear_line_and_nothing_runs() {
    let w = World::new("badinput");
    let side = w.wt.join("side-effect");
    let touch = ["touch", s(&side)];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--policy".into(), s(&w.root.join("missing.toml")).into()],
            "cannot read policy",
        ),
        (
            // A directory: unreadable as a policy, even for root.
            vec!["--policy".into(), format!("{}/", s(&w.data))],
            "cannot read policy",
        ),
    ];
    for (extra, want) in &cases {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let out = w.run(&extra, &touch);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("lockrun: ") && err.contains(want), "{err}");
    }
    let out = Command::new(BIN)
        .args(["--worktree", s(&w.root.join("nope"))])
        .args(["--state-dir", s(&w.state), "--"])
        .args(touch)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("worktree") && err.contains("nope"), "{err}");
    let out = Command::new(BIN)
        .args(["--worktree", s(&w.wt), "--state-dir", s(&w.state)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no command"), "{err}");
    assert_absent(&side);
    w.assert_no_run_dirs();
}

#[test]
fn exit_statuses_follow_env_convention() {
    let w = World::new("exits");
    let code = |argv: &[&str]| w.run(&[], argv).status.code();
    assert_eq!(code(&["sh", "-c", "exit 3"]), Some(3));
    assert_eq!(code(&["sh", "-c", "kill -9 $$"]), Some(128 + 9));
    assert_eq!(code(&["lockrun-no-such-command"]), Some(127));
    assert_eq!(code(&["/etc/os-release"]), Some(126));
    // Not executable because Landlock refuses exec of a file... in a dir we
    // may not even read: EACCES → 126.
    let vault = w.root.join("vault");
    std::fs::create_dir_all(&vault).unwrap();
    std::fs::copy("/bin/true", vault.join("true")).unwrap();
    let out = w.run(&["--deny-read", s(&vault)], &[s(&vault.join("true"))]);
    assert_eq!(out.status.code(), Some(126));
    w.assert_no_run_dirs();
}

/// The command is found as `execvp` finds it, on the command's own `PATH`
/// (lockrun writes the search out: its child shares lockrun's memory until
/// the exec and may not touch `environ`).
#[test]
fn the_command_is_searched_on_its_own_path_as_execvp_does() {
    let w = World::new("path");
    let (first, second) = (w.root.join("bin1"), w.root.join("bin2"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let script = |p: &std::path::Path, body: &str, mode: u32| {
        std::fs::write(p, body).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    // In the first directory, not executable (EACCES: remembered, the
    // search goes on); in the second, a script without `#!` (ENOEXEC: run
    // by /bin/sh with its arguments).
    script(&first.join("lr-tool"), "echo wrong\n", 0o644);
    script(&second.join("lr-tool"), "echo \"tool ran: $*\"\n", 0o755);
    script(&first.join("lr-only-here"), "echo never\n", 0o644);
    script(&w.wt.join("lr-in-cwd"), "#!/bin/sh\necho from cwd\n", 0o755);
    let path = format!("{}:{}:/usr/bin:/bin", first.display(), second.display());
    let run = |path: &str, argv: &[&str]| {
        let out = w.cmd(&[], argv).env("PATH", path).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&path, &["lr-tool", "a", "b c"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "tool ran: a b c\n");
    // Only a non-executable match: EACCES, 126.
    let (code, _, err) = run(&path, &["lr-only-here"]);
    assert_eq!(code, Some(126), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    // No match at all: 127.
    let (code, _, err) = run(&path, &["lr-nowhere"]);
    assert_eq!(code, Some(127), "{err}");
    // An empty entry is the current directory (the worktree here).
    let (code, out, err) = run(&format!(":{path}"), &["lr-in-cwd"]);
    assert_eq!((code, out.as_str()), (Some(0), "from cwd\n"), "{err}");
    // Control: without the empty entry the same name is not found.
    let (code, _, _) = run(&path, &["lr-in-cwd"]);
    assert_eq!(code, Some(127));
    w.assert_no_run_dirs();
}

#[test]
fn child_env_has_run_tmp_policy_env_and_the_callers() {
    let w = World::new("env");
    let policy = w.root.join("p.toml");
    std::fs::write(&policy, "[env]\nAGENT_TMPDIR = \"{tmp}/agent\"\n").unwrap();
    let out = w
        .cmd(
            &["--policy", s(&policy)],
            &[
                "sh",
                "-c",
                "echo \"$TMPDIR|$TMP|$TEMP|$AGENT_TMPDIR|$FROM_CALLER\"",
            ],
        )
        .env("FROM_CALLER", "kept")
        .env("TMPDIR", "/caller/tmp")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = line.trim().split('|').collect();
    let tmp = parts[0];
    assert!(
        tmp.starts_with(s(&w.state)) && tmp.ends_with("/tmp") && tmp.contains("/runs/"),
        "{line}"
    );
    assert_eq!(parts[1..], [tmp, tmp, &format!("{tmp}/agent"), "kept"]);
}

/// lockrun's own log: quiet by default; `LOCKRUN_LOG=debug` times each step
/// of a run (how a slow start is diagnosed); a filter that does not parse is
/// one warning line, and the run goes on.
#[test]
fn lockrun_log_times_each_step_and_warns_on_a_bad_filter() {
    let w = World::new("log");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Control: no LOCKRUN_LOG, no debug lines.
    let quiet = w
        .cmd(&[], &["true"])
        .env_remove("LOCKRUN_LOG")
        .output()
        .unwrap();
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(
        !stderr(&quiet).contains("lockrun: debug"),
        "{}",
        stderr(&quiet)
    );

    let loud = w
        .cmd(&[], &["true"])
        .env("LOCKRUN_LOG", "debug")
        .output()
        .unwrap();
    let err = stderr(&loud);
    assert!(loud.status.success(), "{err}");
    let mut last = 0.0_f64;
    for step in [
        "1. run dir ",
        "4. cgroup created",
        "6. run registered in the hooks",
        // built beside steps 2–7, taken after them
        "3. Landlock ruleset received",
        "9. the command ended",
        "10. torn down",
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(step))
            .unwrap_or_else(|| panic!("no {step:?} line in:\n{err}"));
        let ms: f64 = line
            .strip_prefix("lockrun: debug +")
            .and_then(|r| r.split_once(" ms: "))
            .and_then(|(ms, _)| ms.parse().ok())
            .unwrap_or_else(|| panic!("not `lockrun: debug +<ms> ms: …`: {line}"));
        assert!(ms >= last, "steps out of order at {line}:\n{err}");
        last = ms;
    }

    let bad = w
        .cmd(&[], &["sh", "-c", "echo ran"])
        .env("LOCKRUN_LOG", "lockrun=loudest")
        .output()
        .unwrap();
    let err = stderr(&bad);
    assert!(bad.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&bad.stdout), "ran\n");
    assert!(
        err.lines().any(|l| l
            .starts_with("lockrun: warning: LOCKRUN_LOG=\"lockrun=loudest\" is not a log filter")),
        "{err}"
    );
    assert!(!err.contains("lockrun: debug"), "{err}");
    w.assert_no_run_dirs();
}

/// The proxy holds a descriptor or more per connection, and the common soft
/// limit of 1024 would stall it well below `run.max_connections`: lockrun
/// raises its own soft limit to the hard one, and gives the command the
/// caller's back (programs using select(2) expect no descriptor above 1023).
#[test]
fn the_proxy_gets_the_hard_descriptor_limit_and_the_command_the_callers() {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    if hard < 4096 {
        world::skip(
            "the_proxy_gets_the_hard_descriptor_limit_and_the_command_the_callers",
            &format!("the hard descriptor limit is {hard}, below the 4096 this test needs"),
        );
        return;
    }
    let w = World::new("nofile");
    let policy = w.root.join("many.toml");
    std::fs::write(&policy, "[run]\nmax_connections = 4000\n").unwrap();
    let hold = "import os, socket, sys, time, urllib.parse\n\
                u = urllib.parse.urlparse(os.environ['HTTPS_PROXY'])\n\
                s = [socket.create_connection((u.hostname, u.port)) for _ in range(800)]\n\
                os.write(1, b'held %d\\n' % len(s))\n\
                open(os.environ['TMPDIR'] + '/held.' + str(os.getpid()), 'w').close()\n\
                time.sleep(30)\n";
    // 1,600 connections held open to the proxy, then one real request: an
    // unlisted name must get its 403 at once, not wait behind an accept
    // that fails with EMFILE.
    let hold_py = w.root.join("hold.py");
    std::fs::write(&hold_py, hold).unwrap();
    let script = format!(
        "ulimit -Sn; {py} {hold} & a=$!; {py} {hold} & b=$!; \
         for i in $(seq 300); do [ $(ls \"$TMPDIR\" | grep -c held) = 2 ] && break; sleep 0.1; done; \
         curl -sS -m 8 -o /dev/null -w 'status %{{http_connect}}\\n' https://unlisted.test/; \
         kill $a $b",
        py = python3(),
        hold = s(&hold_py),
    );
    let inner = w.cmd(
        &["--policy", s(&policy), "--allow-host", "listed.test"],
        &["sh", "-c", &script],
    );
    let out = with_ulimit("-Sn 1024", &w, &inner);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["1024", "held 800", "held 800", "status 403"],
        "stderr: {stderr}"
    );
    assert!(!stderr.contains("accept failed"), "{stderr}");
}

/// A worktree whose name is not UTF-8 (any bytes but `/` and NUL are a
/// name): the run works, and its audit log stays whole and readable; the
/// name is logged with U+FFFD for the bytes that are not UTF-8.
#[test]
fn a_worktree_named_in_bytes_that_are_not_utf8_keeps_the_audit_log_whole() {
    use std::os::unix::ffi::OsStrExt as _;
    let w = World::new("bytes");
    let wt = w.root.join(std::ffi::OsStr::from_bytes(b"w \xff x"));
    std::fs::create_dir(&wt).unwrap();
    let log = w.root.join("audit.jsonl");
    let outside = w.data.join("outside");
    let out = Command::new(BIN)
        .arg("--worktree")
        .arg(&wt)
        .args(["--state-dir", s(&w.state), "--audit-log", s(&log), "--"])
        .args([
            "sh",
            "-c",
            &format!("echo in > made; echo out > {}", s(&outside)),
        ])
        .current_dir(&wt)
        .env("HOME", &w.home)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(wt.join("made")).unwrap(), b"in\n");
    assert_absent(&outside);
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["event"] == "run_start" {
            assert_eq!(v["worktree"], format!("{}/w \u{fffd} x", s(&w.root)));
        }
    }
    assert!(text.contains("\"event\":\"run_end\""), "{text}");
    let audit = Command::new(BIN).arg("audit").arg(&log).output().unwrap();
    let said = String::from_utf8_lossy(&audit.stdout);
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    assert!(
        said.contains(&format!(
            "{} — create a file in (fs.make_reg; EROFS",
            s(&w.data)
        )),
        "{said}"
    );
}
