//! Escape tests for the filesystem and privilege confinement, driving the real
//! binary. Each escape is judged from outside (file absent, canary unchanged,
//! process alive and untraced) and asserts the errno the probe got inside;
//! a control beside it must succeed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_wrap)]

#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/slow.rs"]
mod slow;
use python::python3;
#[path = "support/fs.rs"]
mod support;

use std::io::Read;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{assert_absent, assert_canary, meta, s, RemovedAtEnd, World, BIN, PROBE};

/// A process outside the sandbox, killed when dropped.
struct Outside(std::process::Child);

impl Outside {
    fn sleep() -> Self {
        Self(Command::new("sleep").arg("300").spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn assert_alive_untraced(&mut self) {
        assert!(self.0.try_wait().unwrap().is_none(), "outside process died");
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        assert!(
            status.contains("TracerPid:\t0\n"),
            "outside process is traced: {status}"
        );
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lockrun started in the background. If the test fails first it gets
/// `SIGTERM`, so that it cleans up after its run, and `SIGKILL` if it has
/// not exited within 5 s, so a failing test never leaves it holding the
/// harness's output.
struct Background(std::process::Child);

impl Background {
    fn sigterm(&self) {
        self.term().unwrap();
    }
    fn term(&self) -> nix::Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
    }
    /// `c` started with its stdio piped, and its stdout's lines up to and
    /// including one that says `ready` (a probe holding what it made).
    fn until_ready(
        mut c: Command,
    ) -> (
        Self,
        std::io::BufReader<std::process::ChildStdout>,
        Vec<String>,
    ) {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let mut p = Self(
            c.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
        let mut lines = Vec::new();
        while lines.last().is_none_or(|l| l != "ready") {
            let mut line = String::new();
            assert_ne!(out.read_line(&mut line).unwrap(), 0, "{lines:?}");
            lines.push(line.trim_end().to_owned());
        }
        (p, out, lines)
    }
    fn wait(&mut self) -> std::process::ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "lockrun did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = self.term();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn controls_write_worktree_and_tmpdir_read_everywhere() {
    let w = World::new("controls");
    let f = w.wt.join("f");
    let r = w.probe(
        &[],
        &[
            &["write", s(&f)],
            &["write", "{TMPDIR}/t"],
            &["read", "/etc/os-release"],
            &["read", "{TMPDIR}/t"],
        ],
    );
    assert_eq!(r, ["ok", "ok", "ok", "ok"]);
    assert_eq!(std::fs::read(&f).unwrap(), b"pwned");
}

#[test]
fn controls_tools_run_in_worktree() {
    let w = World::new("tools");
    let script = "set -e
        cd \"$1\"
        printf 'int main(void){return 0;}' > a.c
        gcc a.c -o a && ./a
        python3 -c 'import tempfile; tempfile.NamedTemporaryFile()'
        git init -q .
        git -c user.email=t@example.org -c user.name=t add -A
        git -c user.email=t@example.org -c user.name=t commit -qm init
        git log --oneline | wc -l";
    let out = w.run(&[], &["sh", "-c", script, "sh", s(&w.wt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    assert!(w.wt.join(".git/HEAD").exists() && w.wt.join("a").exists());
    w.assert_no_run_dirs();
}

#[test]
fn writes_into_data_and_other_agent_dirs_fail_by_every_path() {
    let w = World::new("datadirs");
    let mut outside = Outside::sleep();
    let pid = outside.pid().to_string();
    let mut targets = Vec::new();
    for dir in [&w.data, &w.other] {
        for prefix in [
            String::new(),
            "/proc/self/root".to_owned(),
            "/proc/1/root".to_owned(),
            format!("/proc/{pid}/root"),
        ] {
            targets.push(format!("{prefix}{}", dir.join("pwned").display()));
        }
    }
    let ops: Vec<[&str; 2]> = targets.iter().map(|t| ["write", t.as_str()]).collect();
    let ops: Vec<&[&str]> = ops.iter().map(|o| &o[..]).collect();
    let r = w.probe(&[], &ops);
    // By path and through the run's own root: Landlock (EACCES). Through a
    // process outside: the run's /proc has no entry for it (ENOENT).
    let want: Vec<&str> = targets
        .iter()
        .map(|t| {
            if t.starts_with("/proc/") && !t.starts_with("/proc/self/") {
                "errno=ENOENT"
            } else {
                "errno=EACCES"
            }
        })
        .collect();
    assert_eq!(r, want, "{targets:?}");
    // Control: outside, the dir is there to reach through the process (init's
    // root, on this VM, is not the machine's: only its entry is checked).
    let dir = format!("/proc/{pid}/root{}", w.data.display());
    assert!(std::path::Path::new(&dir).is_dir(), "{dir}");
    assert!(std::fs::symlink_metadata("/proc/1/root").is_ok());
    assert_absent(&w.data.join("pwned"));
    assert_absent(&w.other.join("pwned"));
    outside.assert_alive_untraced();
    // Control: the worktree through /proc/self/root.
    let own = format!("/proc/self/root{}", w.wt.join("ok").display());
    assert_eq!(w.probe(&[], &[&["write", &own]]), ["ok"]);
    assert!(w.wt.join("ok").exists());
}

#[test]
fn links_and_renames_across_the_worktree_boundary_fail() {
    let w = World::new("links");
    let out_file = w.canary(&w.data.join("file"));
    let in_file = w.canary(&w.wt.join("mine"));
    let r = w.probe(
        &[],
        &[
            &["link", s(&out_file), s(&w.wt.join("hl"))],
            &["rename", s(&out_file), s(&w.wt.join("mv"))],
            &["link", s(&in_file), s(&w.data.join("hl"))],
            &["rename", s(&in_file), s(&w.data.join("mv"))],
            // Controls inside the worktree.
            &["link", s(&in_file), s(&w.wt.join("hl2"))],
            &["rename", s(&w.wt.join("hl2")), s(&w.wt.join("mv2"))],
        ],
    );
    assert_eq!(
        r,
        [
            "errno=EXDEV",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "ok",
            "ok"
        ]
    );
    assert_absent(&w.wt.join("hl"));
    assert_absent(&w.wt.join("mv"));
    assert_absent(&w.data.join("hl"));
    assert_absent(&w.data.join("mv"));
    assert_canary(&out_file);
    assert_canary(&in_file);
    assert!(w.wt.join("mv2").exists());
}

#[test]
fn symlink_in_worktree_pointing_outside_does_not_write() {
    let w = World::new("symlink");
    let target = w.canary(&w.data.join("target"));
    let link = w.wt.join("link");
    let r = w.probe(
        &[],
        &[
            &["symlink", s(&target), s(&link)],
            &["write", s(&link)],
            &["append", s(&link)],
            &["read", s(&link)],
        ],
    );
    assert_eq!(r, ["ok", "errno=EACCES", "errno=EACCES", "ok"]);
    assert_canary(&target);
}

#[test]
fn metadata_of_outside_files_cannot_change() {
    let w = World::new("meta");
    let f = w.canary(&w.data.join("f"));
    // Owned by another uid, outside: the seccomp supervisor refuses the changes
    // that Landlock does not cover (chmod, chown, utimes, setxattr) with EPERM
    // before the kernel's DAC (which would refuse them too) is even asked.
    std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = meta(&f);
    let mine = w.canary(&w.wt.join("mine"));
    let r = w.probe(
        &[],
        &[
            &["truncate", s(&f)],
            &["chmod", s(&f)],
            &["chown", s(&f)],
            &["utime", s(&f)],
            &["setxattr", s(&f)],
            &["truncate", s(&mine)],
            &["chmod", s(&mine)],
            &["utime", s(&mine)],
            &["setxattr", s(&mine)],
        ],
    );
    assert_eq!(
        r,
        [
            "errno=EACCES",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    assert_canary(&f);
    assert_eq!(meta(&f), before);
    assert!(xattr_absent(&f));
}

fn xattr_absent(p: &std::path::Path) -> bool {
    let out = Command::new(python3())
        .args([
            "-c",
            "import os,sys; print('user.pwned' in os.listxattr(sys.argv[1]))",
            s(p),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "False"
}

/// Writes to the machine's /dev/shm: `a_run_has_shared_memory_of_its_own_that_nothing_outside_shares`.
#[test]
fn mknod_mkfifo_and_tmp_outside_tmpdir_fail() {
    let w = World::new("nodes");
    let tag = format!("lockrun-test-{}", std::process::id());
    let tmp = format!("/tmp/{tag}");
    let r = w.probe(
        &[],
        &[
            &["mknod", s(&w.data.join("null"))],
            &["mkfifo", s(&w.data.join("fifo"))],
            &["write", &tmp],
            &["mkfifo", s(&w.wt.join("fifo"))],
            &["mkfifo", "{TMPDIR}/fifo"],
        ],
    );
    assert_eq!(
        r,
        ["errno=EACCES", "errno=EACCES", "errno=EACCES", "ok", "ok"]
    );
    assert_absent(&w.data.join("null"));
    assert_absent(&w.data.join("fifo"));
    assert_absent(std::path::Path::new(&tmp));
}

#[test]
fn inherited_writable_descriptor_does_not_survive() {
    let w = World::new("fd");
    let canary = w.canary(&w.data.join("fd-canary"));
    let wrapper = ["sh", "-c", "exec 5>>\"$0\"; exec \"$@\"", s(&canary)];
    // Control: without lockrun, fd 5 is writable.
    let control = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .args(support::probe_argv(&[&["writefd", "5"]]))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&control.stdout).trim(), "ok");
    std::fs::write(&canary, b"canary").unwrap();
    let out = w
        .cmd_under(&wrapper, &[], &support::probe_argv(&[&["writefd", "5"]]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno=EBADF");
    assert_canary(&canary);
    w.assert_no_run_dirs();
}

/// Waits for what is bound to happen (a backstop, stretched where the
/// tests run slower: [`slow`]).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    let patience = slow::patience(Duration::from_secs(20));
    while !f() {
        assert!(t.elapsed() < patience, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
    // Run B (same state dir) tries A's tmp.
    let out = w.run(
        &[],
        &support::probe_argv(&[
            &["write", s(&a_tmp.join("pwned"))],
            &["read", s(&a_tmp.join("s"))],
            &["listdir", s(&a_tmp)],
            &["write", "{TMPDIR}/mine"],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        ["errno=EACCES", "errno=EACCES", "errno=EACCES", "ok"]
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

/// The secret floor covers the home of the command's uid too, not only
/// `$HOME`: a caller whose `HOME` is another (here the test's, as under
/// `sudo` keeping the user's) would otherwise leave root's `~/.ssh` to a
/// run of uid 0, which passes its owner's permission bits. The test puts a
/// key in root's `~/.ssh` (and removes what it made). In the run, reading
/// it is `EACCES`; judged from outside, the run's copy into its worktree
/// does not exist. Control: outside, a process without capabilities copies
/// it.
#[test]
fn the_uids_own_home_secrets_are_denied_when_home_is_another() {
    let w = World::new("uid-home");
    let pid = std::process::id();
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .dir;
    assert_ne!(home, w.home, "the run's HOME must be another");
    let ssh = home.join(".ssh");
    let key = ssh.join(format!("lockrun-test-key-{pid}"));
    let made = if ssh.exists() {
        key.clone()
    } else {
        ssh.clone()
    };
    std::fs::create_dir_all(&ssh).unwrap();
    let _made = RemovedAtEnd(vec![made]);
    std::fs::write(&key, "lockrun-test key\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let copy = w.wt.join("key");
    assert_eq!(
        w.probe(&[], &[&["copy", s(&key), s(&copy)]]),
        ["errno=EACCES"]
    );
    assert_absent(&copy);
    let outside = w.root.join("key-outside");
    probe_without_caps(&["copy", s(&key), s(&outside)]);
    assert_eq!(std::fs::read(&outside).unwrap(), b"lockrun-test key\n");
}

#[test]
fn deny_read_paths_are_unreadable_by_every_path() {
    let w = World::new("denyread");
    // The secret floor (under HOME) and a --deny-read dir.
    let ssh = w.home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = w.canary(&ssh.join("id_ed25519"));
    let vault = w.root.join("vault");
    std::fs::create_dir_all(&vault).unwrap();
    let secret = w.canary(&vault.join("secret"));
    let notes = w.canary(&w.home.join("notes"));
    let mine = w.canary(&w.wt.join("mine"));
    // A symlink sibling pointing into the denied dir: must not grant it.
    std::os::unix::fs::symlink(&ssh, w.home.join("link")).unwrap();
    std::os::unix::fs::symlink(&key, w.wt.join("key")).unwrap();
    let via_root = format!("/proc/self/root{}", key.display());
    let secret_via_root = format!("/proc/self/root{}", secret.display());
    let r = w.probe(
        &["--deny-read", s(&vault)],
        &[
            &["read", s(&key)],
            &["read", &via_root],
            &["read", s(&w.wt.join("key"))],
            &["read", s(&w.home.join("link/id_ed25519"))],
            &["listdir", s(&ssh)],
            &["read", s(&secret)],
            &["read", &secret_via_root],
            &["listdir", s(&vault)],
            // A second name for a denied file, made inside the run, in the
            // readable worktree: Landlock refuses a link or rename that
            // would give the file more rights than it has where it is.
            &["link", s(&key), s(&w.wt.join("key-link"))],
            &["rename", s(&secret), s(&w.wt.join("secret-moved"))],
            // Controls: siblings stay readable; a worktree file can be linked.
            &["read", s(&notes)],
            &["read", "/etc/os-release"],
            &["link", s(&mine), s(&w.wt.join("mine-link"))],
        ],
    );
    assert_eq!(
        r,
        [
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EXDEV",
            "errno=EACCES",
            "ok",
            "ok",
            "ok"
        ]
    );
    // Judged from outside: no second name exists, the secrets are where they were.
    assert_absent(&w.wt.join("key-link"));
    assert_absent(&w.wt.join("secret-moved"));
    assert_canary(&key);
    assert_canary(&secret);
    assert!(w.wt.join("mine-link").exists());
}

/// Landlock decides by path: a file beneath a denied dir that has a second
/// name outside it (a hard link the machine's user made, before the run)
/// would be read by that name. lockrun marks such files' inodes for
/// fanotify permission events and refuses the run's opens of them by a name
/// outside its writable roots (`EPERM`), reading and executing, and records
/// the name used. Judged from outside: the run's copies made through the
/// other names do not exist, the denied tool left no mark of having run,
/// and the audit log names each link. Controls: a file and a tool of two
/// names that are not denied are read and run by their other names (the
/// tool's mark exists); the denied file's name in the worktree (the run's
/// own) is read; while the run is alive, a process outside reads the secret
/// by its other name.
#[test]
fn a_denied_file_is_unreadable_by_its_other_names() {
    use std::os::unix::fs::PermissionsExt as _;
    let w = World::new("othernames");
    let vault = w.root.join("vault");
    let elsewhere = w.root.join("elsewhere");
    std::fs::create_dir_all(vault.join("deeper")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let secret = vault.join("deeper/key");
    std::fs::write(&secret, "lockrun-test secret\n").unwrap();
    // Each tool leaves a mark in the worktree when it runs.
    let tool_at = |path: &std::path::Path, mark: &std::path::Path| {
        std::fs::write(path, format!("#!/bin/sh\ntouch {}\n", mark.display())).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let (tool, tool_ran) = (vault.join("tool"), w.wt.join("tool-ran"));
    tool_at(&tool, &tool_ran);
    let (public_tool, public_ran) = (w.data.join("public-tool"), w.wt.join("public-ran"));
    tool_at(&public_tool, &public_ran);
    let public = w.canary(&w.data.join("public"));
    let (key_link, tool_link, public_link, public_tool_link) = (
        elsewhere.join("key"),
        elsewhere.join("tool"),
        elsewhere.join("public"),
        elsewhere.join("public-tool"),
    );
    std::fs::hard_link(&secret, &key_link).unwrap();
    std::fs::hard_link(&tool, &tool_link).unwrap();
    std::fs::hard_link(&public, &public_link).unwrap();
    std::fs::hard_link(&public_tool, &public_tool_link).unwrap();
    let own = w.wt.join("key-own");
    std::fs::hard_link(&secret, &own).unwrap();
    // A denied file, not a dir: the secret floor's ~/.netrc.
    let netrc = w.home.join(".netrc");
    std::fs::write(&netrc, "machine x password p\n").unwrap();
    let netrc_link = elsewhere.join("netrc");
    std::fs::hard_link(&netrc, &netrc_link).unwrap();
    let log = w.root.join("audit.jsonl");
    let (copy, netrc_copy) = (w.wt.join("copy"), w.wt.join("netrc-copy"));
    let (mut run, _out, lines) = Background::until_ready(w.cmd(
        &["--deny-read", s(&vault), "--audit-log", s(&log)],
        &support::probe_argv(&[
            &["copy", s(&key_link), s(&copy)],
            &["exec", s(&tool_link)],
            &["read", s(&secret)],
            &["read", s(&public_link)],
            &["read", s(&own)],
            &["copy", s(&netrc_link), s(&netrc_copy)],
            &["exec", s(&public_tool_link)],
            &["hold"],
        ]),
    ));
    assert_eq!(
        lines,
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EACCES",
            "ok",
            "ok",
            "errno=EPERM",
            "ok",
            "ready"
        ]
    );
    // Outside, while the guard answers: let through.
    let outside = Command::new("timeout")
        .args(["10", "cat", s(&key_link)])
        .output()
        .unwrap();
    assert_eq!(outside.stdout, b"lockrun-test secret\n", "{outside:?}");
    drop(run.0.stdin.take());
    assert!(run.wait().success());
    assert_absent(&copy);
    assert_absent(&netrc_copy);
    assert_absent(&tool_ran);
    assert!(
        public_ran.exists(),
        "the control tool ran by its other name"
    );
    let audit = std::fs::read_to_string(&log).unwrap();
    let refused = other_name_refusals(&audit);
    assert_eq!(refused.len(), 3, "{audit}");
    assert_eq!(refused[2].2, s(&netrc));
    assert_eq!(refused[0].0, s(&key_link));
    assert_eq!(refused[0].2, s(&secret));
    assert_eq!(refused[1].2, s(&tool));
    assert!(
        refused[0].1.contains(&format!(
            "open of {}, another name of the denied {} (3 names)",
            key_link.display(),
            secret.display()
        )),
        "{}",
        refused[0].1
    );
    assert_eq!(refused[1].0, s(&tool_link));
    assert!(
        refused[1].1.starts_with("fanotify guard: execute of"),
        "{}",
        refused[1].1
    );
}

/// The audit log's refusals of another name of a denied file: the name
/// used, the raw record, the denied name.
fn other_name_refusals(audit: &str) -> Vec<(String, String, String)> {
    audit
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Filesystem(f),
                ..
            } => Some((f.path.unwrap(), f.raw, f.other_name_of?)),
            _ => None,
        })
        .collect()
}

/// Landlock does not check an inotify watch, and a watch on a directory
/// names every entry made in it: a run could learn the names that appear in
/// a denied dir, which listing it refuses. The watch is refused (`EACCES`)
/// and shown; fanotify, which watches by inode and reports by handle, is
/// refused whole (`EPERM`). Judged from outside: a file made in the denied
/// dir while the run watches is not named to it. Controls: the same watch
/// on a readable dir names its new file, and outside, the denied dir can be
/// watched.
#[test]
fn a_watch_names_nothing_made_in_a_denied_dir() {
    use std::io::{BufRead as _, Write as _};
    use std::process::Stdio;
    let w = World::new("watch");
    let vault = w.root.join("vault");
    std::fs::create_dir_all(&vault).unwrap();
    let log = w.root.join("audit.jsonl");
    let (mut run, out, lines) = Background::until_ready(w.cmd(
        &["--deny-read", s(&vault), "--audit-log", s(&log)],
        &support::probe_argv(&[&["watch_names", s(&vault), s(&w.data)]]),
    ));
    assert_eq!(lines, ["errno=EACCES", "ok", "ready"]);
    // Made outside while the run watches.
    std::fs::write(vault.join("secret-name"), "x").unwrap();
    std::fs::write(w.data.join("plain-name"), "x").unwrap();
    writeln!(run.0.stdin.take().unwrap()).unwrap();
    let rest: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert_eq!(rest, ["name=plain-name", "end"]);
    assert!(run.wait().success());
    let mut stderr = String::new();
    run.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains(&format!(
            "lockrun: 1 filesystem access refused: list {} (python3)\n",
            vault.display()
        )),
        "{stderr}"
    );
    let audit = std::fs::read_to_string(&log).unwrap();
    assert!(
        audit.contains("inotify_add_watch on") && audit.contains("\"fs.read_dir\""),
        "{audit}"
    );
    // fanotify: refused in a run, shown; outside it opens.
    let fan = w.run(&[], &support::probe_argv(&[&["fanotify"]]));
    assert_eq!(String::from_utf8_lossy(&fan.stdout), "errno=EPERM\n");
    assert!(
        String::from_utf8_lossy(&fan.stderr).contains(": fanotify_init (python3)\n"),
        "{fan:?}"
    );
    // Controls outside: the denied dir can be watched, fanotify opens.
    assert_eq!(w.probe_outside(&[&["fanotify"]]), ["ok"]);
    let argv = support::probe_argv(&[&["watch_names", s(&vault)]]);
    let outside = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&outside.stdout), "ok\nready\nend\n");
    w.assert_no_run_dirs();
}

/// `kernel.core_pattern` set for one test, and set back when dropped (a
/// failing test included).
/// Tests that set it take turns.
struct CorePattern {
    before: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";
static CORE_PATTERN_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl CorePattern {
    fn set(pattern: &str) -> Self {
        let turn = CORE_PATTERN_TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = std::fs::read_to_string(CORE_PATTERN).unwrap();
        std::fs::write(CORE_PATTERN, pattern).unwrap();
        Self {
            before,
            _turn: turn,
        }
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        std::fs::write(CORE_PATTERN, self.before.trim_end_matches('\n')).unwrap();
    }
}

/// Where `kernel.core_pattern` pipes cores to a program (systemd-coredump,
/// apport), the kernel starts it as root outside every sandbox and feeds it
/// the crashed process's memory, which it writes out. A crash inside a run
/// must start nothing: the command runs with `RLIMIT_CORE` at 1 byte, which
/// a pipe heeds. Judged from outside by the helper's mark, for a crash by a
/// copy of `sh` named for this test; the control, the same crash outside
/// (by a second copy), leaves its mark. The run's exit is 128+11, its
/// stderr says why no core was dumped and its audit log holds the notice.
#[test]
fn a_crash_inside_starts_no_core_helper_outside() {
    use std::os::unix::process::ExitStatusExt as _;
    let w = World::new("cores");
    let marks = w.root.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let helper = w.root.join("helper");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\ncat > {}/\"$1-$2\"\n", marks.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Two copies of sh, so each crash names itself to the helper (`%e`).
    let (inside, outside) = (w.data.join("lrcore-in"), w.data.join("lrcore-out"));
    std::fs::copy("/bin/sh", &inside).unwrap();
    std::fs::copy("/bin/sh", &outside).unwrap();
    let marked = |name: &str| {
        std::fs::read_dir(&marks)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
    };
    let crash = "grep '^Max core' /proc/self/limits; kill -SEGV $$";
    let log = w.root.join("audit.jsonl");
    let pattern = CorePattern::set(&format!("|{} %e %P", helper.display()));
    let run = w
        .cmd(&["--audit-log", s(&log)], &[s(&inside), "-c", crash])
        .output()
        .unwrap();
    let control = Command::new(&outside)
        .args(["-c", "kill -SEGV $$"])
        .status()
        .unwrap();
    // The kernel starts the helpers in the order of the crashes; once the
    // control's mark is there, the run's would be too.
    wait_for("the control crash's core helper", || marked("lrcore-out"));
    std::thread::sleep(Duration::from_millis(200));
    let inside_marked = marked("lrcore-in");
    drop(pattern);
    assert_eq!(control.signal(), Some(libc::SIGSEGV));
    assert!(
        !inside_marked,
        "a crash inside the run started the core helper outside"
    );
    assert_eq!(run.status.code(), Some(128 + libc::SIGSEGV), "{run:?}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout
            .split_whitespace()
            .eq(["Max", "core", "file", "size", "1", "1", "bytes"]),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("the command died of signal 11 and left no core dump: core dumps are off in this run: kernel.core_pattern"),
        "{stderr}"
    );
    let audit = std::fs::read_to_string(&log).unwrap();
    let notices: Vec<String> = audit
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Notice { message, .. },
                ..
            } => Some(message),
            _ => None,
        })
        .filter(|m| m.starts_with("core dumps are off"))
        .collect();
    assert_eq!(notices.len(), 1, "{audit}");
    assert!(
        notices[0].contains(&format!("`|{} %e %P`", helper.display())),
        "{}",
        notices[0]
    );
    w.assert_no_run_dirs();
}

/// Where `kernel.core_pattern` sends cores to a unix socket (`@path`, Linux
/// 6.16), the kernel connects as the crashing process: the run's hooks on
/// unix connects refuse it, and the refusal is shown. Judged from outside
/// by the listener: the one connection it accepts comes from the control,
/// the same crash outside the run (its peer pid).
#[test]
fn a_crash_inside_sends_no_core_to_a_socket_outside() {
    use std::os::unix::process::ExitStatusExt as _;
    if skip::before_kernel(
        "a_crash_inside_sends_no_core_to_a_socket_outside",
        (6, 16),
        "core_pattern `@socket`",
    ) {
        return;
    }
    let w = World::new("coresock");
    let sock = w.root.join("core.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let pattern = CorePattern::set(&format!("@{}", sock.display()));
    let run = w.run(&[], &["sh", "-c", "kill -SEGV $$"]);
    let mut control = Command::new("sh")
        .args(["-c", "kill -SEGV $$"])
        .spawn()
        .unwrap();
    let control_pid = control.id();
    // The crashing process waits for its core to be taken: each connection
    // is closed as soon as its peer is known.
    let mut peers = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20)
        && (peers.is_empty() || t.elapsed() < Duration::from_millis(200))
    {
        match listener.accept() {
            Ok((conn, _)) => peers.push(
                nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials)
                    .unwrap()
                    .pid(),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    let _ = control.kill();
    let control_status = control.wait().unwrap();
    drop(pattern);
    assert_eq!(control_status.signal(), Some(libc::SIGSEGV));
    assert_eq!(
        peers,
        [control_pid as i32],
        "the crash inside the run reached the socket"
    );
    assert_eq!(run.status.code(), Some(128 + libc::SIGSEGV), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "1 connection refused: unix:{} (sh)",
            sock.display()
        )),
        "{stderr}"
    );
    w.assert_no_run_dirs();
}

/// A command's standard output, line by line.
fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The probe's `op` outside any sandbox, in a process without capabilities
/// (as a run's command is, and any local user's process): it must succeed.
fn probe_without_caps(op: &[&str]) {
    let argv = support::probe_argv(&[op]);
    let control = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all", "--"])
        .args(&argv)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&control.stdout),
        "ok\n",
        "{control:?}"
    );
}

/// `kernel.dmesg_restrict`, set for a test and put back when it ends.
struct DmesgRestrict(String);

impl DmesgRestrict {
    const PATH: &'static str = "/proc/sys/kernel/dmesg_restrict";

    fn set(value: &str) -> Self {
        let was = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, value).unwrap();
        Self(was)
    }
}

impl Drop for DmesgRestrict {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim());
    }
}

/// The kernel's log carries other processes' audit records when no audit
/// daemon takes them (another run's refusals, with its command line), and
/// any user may read it through `syslog(2)` where `kernel.dmesg_restrict` is
/// 0: the call is refused (`EPERM`) and shown. The test sets that sysctl to
/// 0 and puts it back. Judged from outside: a line written to the log
/// before the run is not in what the run copied into its worktree.
/// Control: outside, a process without capabilities copies the log, that
/// line included.
#[test]
fn the_kernel_log_is_unreadable_even_where_any_user_may_read_it() {
    let w = World::new("klog");
    let marker = format!("lockrun-test-klog-{}", std::process::id());
    std::fs::write("/dev/kmsg", format!("{marker}\n")).unwrap();
    let _restrict = DmesgRestrict::set("0");
    let copied = w.wt.join("klog");
    let out = w.run(&[], &support::probe_argv(&[&["klog_copy", s(&copied)]]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "errno=EPERM\n");
    assert_absent(&copied);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(": syslog (python3)\n"),
        "{out:?}"
    );
    // Control: a process without capabilities outside reads the line.
    let outside = w.root.join("klog-outside");
    probe_without_caps(&["klog_copy", s(&outside)]);
    let log = std::fs::read(&outside).unwrap();
    assert!(
        log.windows(marker.len()).any(|l| l == marker.as_bytes()),
        "the control did not read the marker"
    );
    w.assert_no_run_dirs();
}

/// A filesystem of the machine's, at a path, for a test: mounted if the
/// machine has none there, unmounted (with what the kernel mounted beneath
/// it) when the test ends.
struct MachineFs {
    at: &'static str,
    mounted_here: bool,
}

impl MachineFs {
    const TRACEFS: &'static str = "/sys/kernel/tracing";

    /// `fstype` at `at`, which `stat -f` names `shown`.
    fn mounted(fstype: &str, at: &'static str, shown: &str) -> Self {
        if fs_type_at(at) == shown {
            return Self {
                at,
                mounted_here: false,
            };
        }
        let ok = Command::new("mount")
            .args(["-t", fstype, "nodev", at])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting {fstype} at {at}");
        assert_eq!(fs_type_at(at), shown);
        Self {
            at,
            mounted_here: true,
        }
    }
}

impl Drop for MachineFs {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = Command::new("umount").args(["-R", self.at]).status();
        }
    }
}

/// The type of the filesystem at `at`, as `stat -f` names it, outside.
fn fs_type_at(at: &str) -> String {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T", at])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The kernel's tracing and debug filesystems are out of every run's
/// sight: a run is often uid 0, which owns them, and tracefs's `trace`
/// holds the events the machine's tracers enabled, from every process. The
/// test mounts tracefs where the machine has none, and writes a line of its
/// own into the trace buffer. In the run, an empty read-only tmpfs lies
/// over it: `trace` is not there (`ENOENT`), the dir lists empty and takes
/// no file (`EROFS`), and `/sys/kernel` around it reads and lists as
/// before. Judged from outside: the run's copy into its worktree does not
/// exist, and the tracefs outside holds no file of the run's. Control:
/// outside, a process without capabilities copies `trace`, the line
/// included.
#[test]
fn the_kernels_tracing_filesystem_is_out_of_a_runs_sight() {
    let w = World::new("tracefs");
    let _tracefs = MachineFs::mounted("tracefs", MachineFs::TRACEFS, "tracefs");
    let marker = format!("lockrun-test-trace-{}", std::process::id());
    std::fs::write(format!("{}/trace_marker", MachineFs::TRACEFS), &marker).unwrap();
    let trace = format!("{}/trace", MachineFs::TRACEFS);
    let planted = format!("{}/planted", MachineFs::TRACEFS);
    let (copy_trace, copy_thp) = (w.wt.join("trace"), w.wt.join("thp"));
    let out = w.run(
        &[],
        &support::probe_argv(&[
            &["copy", &trace, s(&copy_trace)],
            &["lists", MachineFs::TRACEFS, "trace"],
            &["write", &planted],
            &["lists", "/sys/kernel", "mm"],
            &[
                "copy",
                "/sys/kernel/mm/transparent_hugepage/enabled",
                s(&copy_thp),
            ],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        ["errno=ENOENT", "errno=ENOENT", "errno=EROFS", "ok", "ok"],
        "{out:?}"
    );
    assert_absent(&copy_trace);
    assert_absent(std::path::Path::new(&planted));
    // Control: outside, without capabilities, the marker is there to copy.
    let outside = w.root.join("trace-outside");
    probe_without_caps(&["copy", &trace, s(&outside)]);
    let copied = std::fs::read_to_string(&outside).unwrap();
    assert!(
        copied.contains(&marker),
        "the control did not read the marker"
    );
    w.assert_no_run_dirs();
}

/// The machine's other filesystems that hold what a run must not read are
/// out of its sight too, each under an empty read-only tmpfs: bpffs (the
/// names of every pinned eBPF object, typed maps' entries), securityfs
/// (IMA's list of every file run, where IMA is on), pstore (earlier
/// crashes' kernel logs) and debugfs. The test mounts each where the
/// machine has none, and pins a directory of its own in bpffs. In the run,
/// the pinned name is not listed (`ENOENT`), securityfs's `lsm` is not
/// there (`ENOENT`), debugfs lists no `tracing`, and each is a tmpfs.
/// Judged from outside: the run's copy of `lsm` into its worktree does
/// not exist. Control: outside, a process without capabilities lists the
/// pinned name and `tracing`, and copies `lsm`.
#[test]
fn the_kernels_other_filesystems_are_out_of_a_runs_sight() {
    let w = World::new("kernelfs");
    let hidden = [
        ("bpf", "/sys/fs/bpf", "bpf_fs"),
        ("securityfs", "/sys/kernel/security", "securityfs"),
        ("pstore", "/sys/fs/pstore", "pstorefs"),
        ("debugfs", "/sys/kernel/debug", "debugfs"),
    ];
    let _mounted = hidden.map(|(fstype, at, shown)| MachineFs::mounted(fstype, at, shown));
    let name = format!("lockrun-test-{}", std::process::id());
    let pinned = std::path::Path::new("/sys/fs/bpf").join(&name);
    std::fs::create_dir(&pinned).unwrap();
    let _pinned = RemovedAtEnd(vec![pinned]);
    let lsm = "/sys/kernel/security/lsm";
    let copy_lsm = w.wt.join("lsm");
    let ops: [&[&str]; 3] = [
        &["lists", "/sys/fs/bpf", &name],
        &["copy", lsm, s(&copy_lsm)],
        &["lists", "/sys/kernel/debug", "tracing"],
    ];
    let out = w.run(&[], &support::probe_argv(&ops));
    assert_eq!(stdout_lines(&out), ["errno=ENOENT"; 3], "{out:?}");
    assert_absent(&copy_lsm);
    let mut stat = vec!["stat", "-f", "-c", "%T"];
    stat.extend(hidden.map(|(_, at, _)| at));
    let types = w.run(&[], &stat);
    assert_eq!(stdout_lines(&types), ["tmpfs"; 4], "{types:?}");
    // Control: outside, without capabilities, each is there to read.
    let outside = w.root.join("lsm-outside");
    probe_without_caps(&["lists", "/sys/fs/bpf", &name]);
    probe_without_caps(&["copy", lsm, s(&outside)]);
    probe_without_caps(&["lists", "/sys/kernel/debug", "tracing"]);
    assert!(!std::fs::read(&outside).unwrap().is_empty());
    w.assert_no_run_dirs();
}

/// The machine's own secrets, which uid 0 without capabilities reads by
/// their owner's permission bits, are masked in every run: the password
/// hashes in `/etc/shadow`, an SSH host key, cloud-init's user data (the
/// test makes the last two where the machine has none, and removes what it
/// made). In the run each is `EACCES` to read, and cloud-init's dir to
/// list, while `/etc/passwd` beside them reads; judged from outside, the
/// run's copies into its worktree do not exist. Control: outside, a
/// process without capabilities copies each. A secret above a writable
/// root is left as it is (masking it would hide what the run may write):
/// with `--allow-write` on a dir in cloud-init's, the run reads the user
/// data.
#[test]
fn the_machines_own_secrets_are_unreadable() {
    let w = World::new("machine-secrets");
    let pid = std::process::id();
    let mut made = Vec::new();
    let host_key = std::path::Path::new("/etc/ssh/ssh_host_ed25519_key");
    if !host_key.exists() {
        std::fs::create_dir_all("/etc/ssh").unwrap();
        std::fs::write(host_key, "lockrun-test host key\n").unwrap();
        std::fs::set_permissions(host_key, std::fs::Permissions::from_mode(0o600)).unwrap();
        made.push(host_key.to_path_buf());
    }
    let cloud = std::path::Path::new("/var/lib/cloud");
    if !cloud.exists() {
        std::fs::create_dir_all(cloud).unwrap();
        made.push(cloud.to_path_buf());
    }
    let user_data = cloud.join(format!("lockrun-test-user-data-{pid}"));
    std::fs::write(&user_data, "lockrun-test user data\n").unwrap();
    std::fs::set_permissions(&user_data, std::fs::Permissions::from_mode(0o600)).unwrap();
    let writable_in_cloud = cloud.join(format!("lockrun-test-wt-{pid}"));
    std::fs::create_dir(&writable_in_cloud).unwrap();
    made.splice(0..0, [user_data.clone(), writable_in_cloud.clone()]);
    let _made = RemovedAtEnd(made);
    let secrets = ["/etc/shadow", s(host_key), s(&user_data)];
    let copies: Vec<_> = (0..secrets.len())
        .map(|i| w.wt.join(format!("copy-{i}")))
        .collect();
    let mut ops: Vec<Vec<&str>> = secrets
        .iter()
        .zip(&copies)
        .map(|(secret, copy)| vec!["copy", *secret, s(copy)])
        .collect();
    ops.push(vec!["listdir", s(cloud)]);
    ops.push(vec!["read", "/etc/passwd"]);
    let ops: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    assert_eq!(
        w.probe(&[], &ops),
        [
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "ok"
        ]
    );
    for copy in &copies {
        assert_absent(copy);
    }
    // Control: outside, without capabilities, each is there to copy.
    for (i, secret) in secrets.iter().enumerate() {
        let outside = w.root.join(format!("outside-{i}"));
        probe_without_caps(&["copy", secret, s(&outside)]);
        assert!(!std::fs::read(&outside).unwrap().is_empty(), "{secret}");
    }
    // Above a writable root, the user data is not masked.
    assert_eq!(
        w.probe(
            &["--allow-write", s(&writable_in_cloud)],
            &[&["read", s(&user_data)], &["read", "/etc/shadow"]]
        ),
        ["ok", "errno=EACCES"]
    );
}

#[test]
fn kill_and_ptrace_of_an_outside_process_fail() {
    let w = World::new("killptrace");
    let mut outside = Outside::sleep();
    let pid = outside.pid().to_string();
    let out = w.run(
        &[],
        &support::probe_argv(&[&["kill", &pid], &["ptrace", &pid]]),
    );
    assert_eq!(stdout_lines(&out), ["errno=EPERM", "errno=EPERM"]);
    outside.assert_alive_untraced();
    // The refusal is told as what it was, with the process it aimed at
    // (ptrace is refused by seccomp before Landlock sees it: no record).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 attempt to reach processes outside the run refused")
            && err.contains(&format!("signal to pid {pid}")),
        "stderr: {err}"
    );
    assert!(!err.contains("filesystem"), "stderr: {err}");
    // Control: a process inside the sandbox can be signalled.
    let out = w.run(
        &[],
        &[
            "sh",
            "-c",
            "sleep 300 & python3 -c \"$0\" kill $!; wait",
            PROBE,
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

/// A process outside the run is not in the run's `/proc` (a procfs
/// instance of its own, `hidepid=ptraceable`): its command line, which any
/// local user could read before, its environment and working directory
/// (ptrace-mode accesses) and its entry in a listing are all `ENOENT`. The
/// outside process here holds no capability and is of the run's uid, as
/// another run's command is, so it is Landlock's ptrace scoping that hides
/// it, and the summary names the process; init, which holds capabilities the
/// command lacks, is hidden by the capability check, unrecorded. Below
/// Landlock ABI 7 (Linux < 6.15) Landlock logs nothing, and nothing else can
/// name the process: a lookup of it fails as any missing path does
/// (`ENOENT`), a listing leaves it out, and no record of kernel audit names
/// it; there nothing is recorded, and the run's log says so. Judged from
/// outside: nothing was copied into the worktree. Controls: outside, the
/// same probe reads all of it, the secret included; inside, a process of the
/// run is listed and its command line, environment and directory read.
#[test]
fn an_outside_process_is_not_in_the_runs_proc() {
    let w = World::new("procptrace");
    let secret = format!("s16-secret-{}", std::process::id());
    // argv[0] carries a secret of its own, as a token on a command line would.
    let mut outside = Outside(
        Command::new("setpriv")
            .args([
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--",
                "bash",
                "-c",
                &format!("exec -a sleep-{secret} sleep 300"),
            ])
            .env("LOCKRUN_TEST_SECRET", &secret)
            .spawn()
            .unwrap(),
    );
    let pid = outside.pid().to_string();
    // setpriv and bash exec sleep in the same process once the capabilities are gone.
    let t = Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap() != "sleep\n" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "setpriv did not exec sleep"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("CapPrm:\t0000000000000000\n"), "{status}");
    let environ = format!("/proc/{pid}/environ");
    let cmdline = format!("/proc/{pid}/cmdline");
    let cwd = format!("/proc/{pid}/cwd");
    // Copy each into the worktree, where the caller would find it.
    let (leak_env, leak_cmd) = (w.wt.join("leak-env"), w.wt.join("leak-cmd"));
    let ops: [&[&str]; 5] = [
        &["copy", &environ, s(&leak_env)],
        &["copy", &cmdline, s(&leak_cmd)],
        &["readlink", &cwd],
        &["lists", "/proc", &pid],
        &["read", "/proc/1/cmdline"],
    ];
    let log = w.root.join("audit.jsonl");
    let out = w.run(&["--audit-log", s(&log)], &support::probe_argv(&ops));
    assert_eq!(stdout_lines(&out), ["errno=ENOENT"; 5]);
    assert_absent(&leak_env);
    assert_absent(&leak_cmd);
    outside.assert_alive_untraced();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("access to pid 1 "), "stderr: {err}");
    assert!(!err.contains("filesystem"), "stderr: {err}");
    if support::landlock_abi() >= 7 {
        let named = format!("ptrace or /proc access to pid {pid} (sleep) ×");
        assert!(
            err.contains("attempts to reach processes outside the run refused")
                && err.contains(&named),
            "stderr: {err}"
        );
    } else {
        // Not recorded below ABI 7 (see above), and said.
        assert!(!err.contains("outside the run refused"), "stderr: {err}");
        let said = support::notices(&log);
        assert!(
            said.iter().any(|n| n.contains(
                "Processes outside the run hidden from its /proc (Landlock's ptrace scoping) \
                 are not recorded"
            )),
            "{said:?}"
        );
    }
    // Controls: the same probe outside copies the secrets (so the judge
    // above would see them) and lists the process,
    let (copied_env, copied_cmd) = (w.root.join("copied-env"), w.root.join("copied-cmd"));
    let (copy_env, copy_cmd) = (
        ["copy", &environ, s(&copied_env)],
        ["copy", &cmdline, s(&copied_cmd)],
    );
    let mut outside_ops = ops;
    outside_ops[0] = &copy_env;
    outside_ops[1] = &copy_cmd;
    assert_eq!(w.probe_outside(&outside_ops), ["ok"; 5]);
    let copied = std::fs::read(&copied_env).unwrap();
    assert!(copied
        .split(|b| *b == 0)
        .any(|v| v == format!("LOCKRUN_TEST_SECRET={secret}").as_bytes()));
    let copied = std::fs::read(&copied_cmd).unwrap();
    assert!(copied.starts_with(format!("sleep-{secret}\0").as_bytes()));
    // and inside, a process of the run is there, and readable.
    let out = w.run(
        &[],
        &[
            "sh",
            "-c",
            "LOCKRUN_TEST_SECRET=inside sleep 300 & python3 -c \"$0\" copy /proc/$!/environ made \\; copy /proc/$!/cmdline made-cmd \\; readlink /proc/$!/cwd \\; lists /proc $!; kill $!",
            PROBE,
        ],
    );
    assert_eq!(stdout_lines(&out), ["ok"; 4]);
    let made = std::fs::read(w.wt.join("made")).unwrap();
    assert!(made
        .split(|b| *b == 0)
        .any(|v| v == b"LOCKRUN_TEST_SECRET=inside"));
    assert_eq!(
        std::fs::read(w.wt.join("made-cmd")).unwrap(),
        b"sleep\x00300\x00"
    );
}

#[test]
fn abstract_unix_socket_outside_is_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new("abstract");
    let name = format!("lockrun-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = w.run(&[], &support::probe_argv(&[&["abstract", &name]]));
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

#[test]
fn inside_no_capabilities_no_new_privs_seccomp() {
    let w = World::new("status");
    let r = w.probe(&[], &[&["status"]]);
    for want in [
        "CapEff=0000000000000000",
        "CapPrm=0000000000000000",
        "CapInh=0000000000000000",
        "CapBnd=0000000000000000",
        "CapAmb=0000000000000000",
        "NoNewPrivs=1",
        "Seccomp=2",
    ] {
        assert!(r.iter().any(|l| l == want), "{want} not in {r:?}");
    }
}

/// Each refusal of the deny list is seen: the filter hands the call to
/// lockrun's supervisor, which answers EPERM, records it and sums it up on
/// stderr. The controls, and `clone3`'s ENOSYS (glibc falls back to
/// `clone`), are not refusals and are not reported.
#[test]
fn seccomp_denials_and_controls() {
    let w = World::new("seccomp");
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &support::probe_argv(&[
            &["bpf"],
            &["unshare"],
            &["mount"],
            &["socket", "packet"],
            &["socket", "netlink", "4"],
            &["clone_newuser"],
            &["clone3"],
            // Controls.
            &["fork"],
            &["socket", "inet"],
            &["socket", "inet6"],
            &["socket", "unix"],
            &["socket", "netlink", "0"],
        ]),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{out:?}");
    w.assert_no_run_dirs();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=ENOSYS",
            "ok",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    let calls: Vec<String> = w
        .refused_calls(&log, "python3")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(
        calls,
        [
            "bpf",
            "unshare",
            "mount",
            "socket(AF_PACKET)",
            "socket(AF_NETLINK, protocol 4)",
            "clone with CLONE_NEWUSER"
        ]
    );
    assert!(
        stderr.contains(
            "lockrun: 6 system calls refused (seccomp: calls that would widen the sandbox, \
             which no policy allows): bpf (python3), clone with CLONE_NEWUSER (python3), \
             mount (python3), socket(AF_NETLINK, protocol 4) (python3), socket(AF_PACKET) \
             (python3), unshare (python3)\n"
        ),
        "{stderr}"
    );
    // NETLINK_ROUTE is what `ip addr` needs.
    let out = w.run(&[], &["ip", "addr", "show", "lo"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("127.0.0.1"));
}

/// An inet socket of a protocol the inet code does not have itself (SCTP,
/// L2TP) makes the kernel look the protocol up, and where modules load on
/// demand, load its module as root (`net-pf-2-proto-132-type-1`) before any
/// hook of the run is asked. This kernel loads none (no `CONFIG_MODULES`),
/// so what is judged is where the call stops: inside, at the filter
/// (`EPERM`, recorded and shown); outside, the same probe reaches the
/// kernel's lookup (`EPROTONOSUPPORT` where the protocol is absent, as
/// here). Controls inside: TCP, MPTCP and UDP by their numbers.
#[test]
fn inet_protocols_the_kernel_would_load_are_refused_first() {
    let w = World::new("inet-protocols");
    let log = w.root.join("audit.jsonl");
    let refused: [&[&str]; 2] = [
        &["socket", "inet", "132", "1"],  // SCTP, SOCK_STREAM
        &["socket", "inet6", "115", "2"], // L2TP, SOCK_DGRAM
    ];
    for (op, got) in refused.iter().zip(w.probe_outside(&refused)) {
        assert!(
            got == "errno=EPROTONOSUPPORT" || got == "ok",
            "control {op:?}: {got}"
        );
    }
    let mut ops = refused.to_vec();
    ops.extend([
        &["socket", "inet", "6", "1"][..],
        &["socket", "inet6", "262", "1"],
        &["socket", "inet6", "17", "2"],
    ]);
    let out = w.run(&["--audit-log", s(&log)], &support::probe_argv(&ops));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["errno=EPERM", "errno=EPERM", "ok", "ok", "ok"]
    );
    let why = lockrun::seccomp::Widens::SocketProtocol;
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            ("socket(AF_INET, IPPROTO_SCTP)".to_owned(), why),
            ("socket(AF_INET6, IPPROTO_L2TP)".to_owned(), why),
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "lockrun: 2 system calls refused (seccomp: calls that would widen the sandbox, \
             which no policy allows): socket(AF_INET, IPPROTO_SCTP) (python3), \
             socket(AF_INET6, IPPROTO_L2TP) (python3)\n"
        ),
        "{stderr}"
    );
    w.assert_no_run_dirs();
}

/// x32-ABI calls (bit 30 in the number) are refused with EPERM whatever the
/// kernel: where that ABI is on, they are the same calls under numbers the
/// deny list and the supervisor would not know. Outside, the same call gets
/// the kernel's own answer (ENOSYS where x32 is off, as on our machines).
#[cfg(target_arch = "x86_64")]
/// The run refused exactly one call, `call` for `why`: recorded in the
/// audit log `log` (by python3), and summed up on stderr.
fn assert_one_refused_call(
    w: &World,
    log: &std::path::Path,
    out: &Output,
    call: &str,
    why: lockrun::seccomp::Widens,
) {
    assert_eq!(w.refused_calls(log, "python3"), [(call.to_owned(), why)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("lockrun: 1 system call refused (seccomp: calls that would widen the sandbox, which no policy allows): {call} (python3)\n")),
        "{stderr}"
    );
}

#[test]
fn x32_calls_are_refused() {
    let w = World::new("x32");
    let outside = w.probe_outside(&[&["x32_getpid"]]);
    assert!(
        outside == ["ok"] || outside == ["errno=ENOSYS"],
        "outside: {outside:?}"
    );
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &support::probe_argv(&[&["x32_getpid"], &["getpid"]]),
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["errno=EPERM", "ok"]);
    // Seen: recorded, and summed up on stderr.
    assert_one_refused_call(
        &w,
        &log,
        &out,
        "x32-ABI call 0x40000027",
        lockrun::seccomp::Widens::X32Abi,
    );
    w.assert_no_run_dirs();
}

#[test]
fn io_uring_is_refused_because_it_creates_sockets_seccomp_never_sees() {
    let w = World::new("iouring");
    // Outside: IORING_OP_SOCKET makes an AF_PACKET socket, which socket()
    // inside would be refused. That is why io_uring_setup is refused.
    let outside = w.probe_outside(&[&["uring_socket", "packet"]]);
    if outside != ["ok"] {
        let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .is_ok_and(|s| s.trim() != "0");
        assert!(
            disabled || outside == ["errno=ENOSYS"],
            "io_uring failed outside for an unexpected reason: {outside:?}"
        );
        support::skip(
            "io_uring decision",
            &format!("io_uring unavailable on this host ({outside:?})"),
        );
    }
    let r = w.probe(&[], &[&["io_uring_setup"], &["uring_socket", "packet"]]);
    assert_eq!(r, ["errno=EPERM", "errno=EPERM"]);
}

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

/// A run that left its temp dir as it got it hands the dir on to a later
/// run, empty and 0700 (what spares a run two directories made and two
/// removed); one that wrote in it, or changed it, never does. Judged from
/// outside: the state dir's `spare/` after each run, and the file the
/// run left found nowhere beneath the state dir. Control: the untouched
/// temp dir is kept (the later run gets the same directory), so the
/// check after the touched run is not one that finds nothing kept ever.
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
    let first = look("true");
    assert_eq!(kept(), 1, "an untouched temp dir is kept");
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
        look("true");
        assert_eq!(kept(), 1);
    }
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
fn gc_reaps_only_dead_and_old_runs() {
    let w = World::new("gc");
    let [dead, young, alive] = stale_runs(&w);
    let out = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "3600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // `gc` reads the young dir's owner too, to report it apart.
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("1 reaped, 1 running, 1 within the grace period"),
        "{report}"
    );
    assert_absent(&dead);
    assert!(young.exists(), "a young run dir was reaped");
    assert!(alive.exists(), "a live run dir was reaped");
    std::fs::remove_dir_all(w.state.join("runs")).unwrap();
}

/// Run cgroups no run dir accounts for (lockrun killed, its state dir
/// deleted): `gc` reaps, once older than the grace period, those whose
/// recorded lockrun is gone (killing what is in them) and an empty one with
/// no owner recorded. It leaves a live owner's, a young one, one whose
/// owner is in another pid namespace, and one with processes in it and no
/// owner recorded (an earlier lockrun's run may still be going).
#[test]
fn gc_reaps_run_cgroups_whose_lockrun_is_gone() {
    let w = World::new("gc-cgroups");
    let mut made = HandMadeCgroups::new();
    // A dead owner: a pid with a start time that never matches, in this
    // pid namespace; the same in another one cannot be judged from here.
    let ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    let dead = format!("1 1 {ns}\n");
    let dead_empty = made.add("dead-empty", Some(&dead), true);
    let dead_busy = made.add("dead-busy", Some(&dead), true);
    let mut killed = sleep_in(&dead_busy);
    made.add("young", Some(&dead), false);
    let elsewhere = made.add("elsewhere", Some(&format!("1 1 {}\n", ns + 1)), true);
    let unknown_empty = made.add("unknown-empty", None, true);
    let unknown_busy = made.add("unknown-busy", None, true);
    let mut spared = sleep_in(&unknown_busy);
    // Made as a run makes its cgroup: this test process is its owner.
    let live = lockrun::cgroup::RunCgroup::create(&HandMadeCgroups::id("live")).unwrap();
    age(live.path());

    let out = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "3600"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let alive_after = spared.try_wait().unwrap().is_none();
    // Clean up before judging: the processes, and what gc left.
    let _ = spared.kill();
    let _ = spared.wait();
    let _ = killed.kill();
    let killed_status = killed.wait().unwrap();
    let live_kept = live.path().exists();
    let elsewhere_kept = elsewhere.exists();
    drop(live);
    let id = HandMadeCgroups::id;

    assert!(out.status.success(), "{out:?}");
    for k in ["dead-empty", "dead-busy", "unknown-empty"] {
        let reaped = format!("reaped the cgroup of run {}: its lockrun is gone", id(k));
        assert!(report.contains(&reaped), "{k}: {report}");
    }
    assert_absent(&dead_empty);
    assert_absent(&dead_busy);
    assert_absent(&unknown_empty);
    // The process in the dead owner's cgroup was killed by gc (SIGKILL,
    // from cgroup.kill), before the test's own kill could matter.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed_status),
        Some(9)
    );
    // Controls.
    assert!(live_kept, "a live lockrun's cgroup was reaped: {report}");
    assert!(
        alive_after,
        "a process in an unowned cgroup was killed: {report}"
    );
    assert!(elsewhere_kept, "{report}");
    let other_ns = format!(
        "kept the cgroup of run {}: its lockrun is in another pid namespace",
        id("elsewhere")
    );
    assert!(report.contains(&other_ns), "{report}");
    let kept = format!(
        "kept 1 run cgroup with processes in it whose lockrun is not recorded \
         (made by an earlier lockrun): {}",
        id("unknown-busy")
    );
    assert!(report.contains(&kept), "{report}");
    for k in ["young", "unknown-busy", "live"] {
        assert!(
            !report.contains(&format!("run {}:", id(k))),
            "{k}: {report}"
        );
    }
}

/// Run cgroups a test makes by hand in the build's parent, killed and
/// removed on every path.
struct HandMadeCgroups {
    parent: std::path::PathBuf,
    made: Vec<std::path::PathBuf>,
}

impl HandMadeCgroups {
    fn new() -> Self {
        let parent = lockrun::cgroup::build_parent().unwrap();
        std::fs::create_dir_all(&parent).unwrap();
        Self {
            parent,
            made: Vec::new(),
        }
    }

    fn id(k: &str) -> String {
        format!("gccg-{}-{k}", std::process::id())
    }

    /// A cgroup `k`, with `owner` as its recorded lockrun, aged if `old`.
    fn add(&mut self, k: &str, owner: Option<&str>, old: bool) -> std::path::PathBuf {
        let p = self.parent.join(Self::id(k));
        std::fs::create_dir(&p).unwrap();
        self.made.push(p.clone());
        if let Some(owner) = owner {
            let set = "import os,sys; os.setxattr(sys.argv[1], 'trusted.lockrun.owner', sys.argv[2].encode())";
            let ok = Command::new(python3())
                .args(["-c", set, s(&p), owner])
                .status()
                .unwrap();
            assert!(ok.success());
        }
        if old {
            age(&p);
        }
        p
    }
}

impl Drop for HandMadeCgroups {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::write(p.join("cgroup.kill"), "1");
            for _ in 0..250 {
                if std::fs::remove_dir(p).is_ok() || !p.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Date `p` back to 2000.
fn age(p: &std::path::Path) {
    let ok = Command::new("touch")
        .args(["-d", "2000-01-01", s(p)])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A `sleep 600` moved into the cgroup `cg`.
fn sleep_in(cg: &std::path::Path) -> std::process::Child {
    let child = Command::new("sleep").arg("600").spawn().unwrap();
    std::fs::write(cg.join("cgroup.procs"), child.id().to_string()).unwrap();
    child
}

/// The sweep a run makes at its start (which reads no owner of a young
/// dir) reaps the same: the dead and old run only.
#[test]
fn a_runs_start_reaps_only_dead_and_old_runs() {
    let w = World::new("gc-at-start");
    std::fs::write(w.wt.join("policy.toml"), "[run]\ngc_grace_secs = 3600\n").unwrap();
    let [dead, young, alive] = stale_runs(&w);
    let out = w
        .cmd(&["--policy", s(&w.wt.join("policy.toml"))], &["true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_absent(&dead);
    assert!(young.exists(), "a young run dir was reaped");
    assert!(alive.exists(), "a live run dir was reaped");
    std::fs::remove_dir_all(w.state.join("runs")).unwrap();
}

/// Three run dirs under `w`'s state dir: a dead and old one, a young one
/// with a dead owner, and an old one whose owner (this test) is alive.
fn stale_runs(w: &World) -> [std::path::PathBuf; 3] {
    let runs = w.state.join("runs");
    let dead = runs.join("000000000001-000000000-1");
    let young = runs.join("000000000002-000000000-2");
    let alive = runs.join("000000000003-000000000-3");
    for d in [&dead, &young, &alive] {
        std::fs::create_dir_all(d.join("tmp")).unwrap();
    }
    // A dead owner: a pid with a start time that never matches.
    std::fs::write(dead.join("owner"), "1 1\n").unwrap();
    std::fs::write(young.join("owner"), "1 1\n").unwrap();
    let me = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let started = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    // As lockrun names its owner: a symlink to the owner line.
    std::os::unix::fs::symlink(format!("{me} {started}"), alive.join("owner")).unwrap();
    // Age the dead and alive dirs.
    for d in [&dead, &alive] {
        let ok = Command::new("touch")
            .args(["-d", "2000-01-01", s(d)])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    [dead, young, alive]
}

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
    let pty = include_str!("support/pty.py");
    let tiocsti = support::probe_argv(&[&["tiocsti"], &["write", "/dev/tty"]]);
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
        .filter(|l| !support::is_crowding(l))
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
        support::skip(T, "the kernel has no line discipline but n_tty");
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
            .args(support::probe_argv(probe))
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
    let probe = support::probe_argv(&[switches, flow].concat());
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

/// A capability-less uid 0 may lower the resource limits of every process
/// of uid 0 (`prlimit`): an open-files limit of 3 starves a process
/// outside, a CPU-time limit kills it, past the signal scoping. Refused
/// (`EPERM`) and shown; the command still sets its own. Judged from
/// outside: the outside process's limit is unchanged. Control: the same
/// probe outside lowers it.
#[test]
fn limits_of_an_outside_process_cannot_be_lowered() {
    let w = World::new("prlimit");
    let mut victim = Outside::sleep();
    let pid = victim.pid().to_string();
    let limits = || {
        std::fs::read_to_string(format!("/proc/{pid}/limits"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap()
            .split_whitespace()
            .skip(3)
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let before = limits();
    assert_ne!(before, "3 3");
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &support::probe_argv(&[&["prlimit", &pid], &["rlimit_self"]]),
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["errno=EPERM", "ok"]);
    assert_eq!(limits(), before, "the outside process's limit changed");
    assert_one_refused_call(
        &w,
        &log,
        &out,
        &format!("prlimit64 setting RLIMIT_NOFILE of pid {pid}"),
        lockrun::seccomp::Widens::OtherLimits,
    );
    // Control: outside, the same probe lowers it.
    assert_eq!(w.probe_outside(&[&["prlimit", &pid]]), ["ok"]);
    assert_eq!(limits(), "3 3");
    victim.assert_alive_untraced();
    w.assert_no_run_dirs();
}

/// A task's CPU and I/O scheduling, read from outside.
#[derive(Debug, PartialEq, Eq)]
struct Scheduling {
    nice: i32,
    /// `SCHED_OTHER` 0, `SCHED_IDLE` 5.
    policy: u32,
    /// `Cpus_allowed_list`.
    cpus: String,
    /// `ionice -p`: `none: prio 0`, `idle`, …
    io: String,
}

impl Scheduling {
    fn of(pid: &str) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command name: state is field 3, nice 19, policy 41.
        let after_comm = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        let io = Command::new("ionice").args(["-p", pid]).output().unwrap();
        Self {
            nice: fields[16].parse().unwrap(),
            policy: fields[38].parse().unwrap(),
            cpus: cpus.trim().to_owned(),
            io: String::from_utf8_lossy(&io.stdout).trim().to_owned(),
        }
    }
}

/// The kernel lets a task lower the CPU and I/O scheduling of any task of
/// its uid with no more capabilities than its own: a run's command, which
/// has none, could set another run's command to nice 19, `SCHED_IDLE`, the
/// idle I/O class or one CPU, for good (it cannot undo them without
/// capabilities). Refused (`EPERM`) and shown, also for every process of
/// the uid at once. Judged from outside on another run's command; control:
/// a capability-less process outside lowers it with the same probe, and
/// the run still sets its own child's and thread's scheduling.
#[test]
fn scheduling_of_another_runs_command_cannot_be_lowered() {
    let w = World::new("sched");
    let victim_w = World::new("sched-victim");
    let ready = victim_w.wt.join("pid");
    let mut victim = Background(
        victim_w
            .cmd(
                &[],
                &[
                    "sh",
                    "-c",
                    &format!("echo $$ > {}; exec sleep 300", s(&ready)),
                ],
            )
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the other run's command", || {
        std::fs::read_to_string(&ready).is_ok_and(|p| p.ends_with('\n'))
    });
    let pid = std::fs::read_to_string(&ready).unwrap().trim().to_owned();
    let before = Scheduling::of(&pid);
    assert_eq!((before.nice, before.policy), (0, 0), "{before:?}");
    assert_ne!(before.io, "idle", "{before:?}");
    let log = w.root.join("audit.jsonl");
    let ops = ["nice", "affinity", "sched_idle", "ioprio_idle"];
    let mut argv: Vec<Vec<&str>> = ops.iter().map(|op| vec![*op, pid.as_str()]).collect();
    argv.extend([vec!["nice_user"], vec!["sched_own"]]);
    let argv: Vec<&[&str]> = argv.iter().map(Vec::as_slice).collect();
    let out = w.run(&["--audit-log", s(&log)], &support::probe_argv(&argv));
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok"
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        Scheduling::of(&pid),
        before,
        "the other run's command was lowered"
    );
    let why = lockrun::seccomp::Widens::OtherScheduling;
    let mut refused: Vec<(String, _)> = [
        "setpriority",
        "sched_setaffinity",
        "sched_setscheduler",
        "ioprio_set",
    ]
    .iter()
    .map(|call| (format!("{call} of pid {pid}"), why))
    .collect();
    refused.push((
        "setpriority PRIO_USER of every process of its own uid".to_owned(),
        why,
    ));
    assert_eq!(w.refused_calls(&log, "python3"), refused);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = format!(
        "lockrun: 5 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): \
         ioprio_set of pid {pid} (python3), sched_setaffinity of pid {pid} (python3), \
         sched_setscheduler of pid {pid} (python3), \
         setpriority PRIO_USER of every process of its own uid (python3), setpriority of pid {pid} (python3)\n"
    );
    assert!(stderr.contains(&summary), "{stderr}");
    // Control: outside, a process without capabilities lowers it.
    let control = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all", "--"])
        .args(support::probe_argv(&argv[..ops.len()]))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&control.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["ok"; 4],
        "{control:?}"
    );
    let after = Scheduling::of(&pid);
    assert_eq!(
        (after.nice, after.policy, after.cpus.as_str()),
        (19, 5, "0")
    );
    assert!(after.io.starts_with("idle"), "{after:?}");
    victim.sigterm();
    assert_eq!(victim.wait().code(), Some(128 + 15));
    w.assert_no_run_dirs();
    victim_w.assert_no_run_dirs();
}

/// A nonblocking inet socket of `kind` on 127.0.0.1, a port of its own,
/// with `opt` (`reuseport`, else `reuseaddr`) on, listening if a stream:
/// it and its port.
fn held_port(kind: nix::sys::socket::SockType, opt: &str) -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{self as so, sockopt};
    use std::os::fd::AsRawFd as _;
    let fd = so::socket(
        so::AddressFamily::Inet,
        kind,
        so::SockFlag::SOCK_NONBLOCK,
        None,
    )
    .unwrap();
    match opt {
        "reuseport" => so::setsockopt(&fd, sockopt::ReusePort, &true).unwrap(),
        _ => so::setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap(),
    }
    so::bind(fd.as_raw_fd(), &so::SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
    if kind == so::SockType::Stream {
        so::listen(&fd, so::Backlog::new(64).unwrap()).unwrap();
    }
    let at: so::SockaddrIn = so::getsockname(fd.as_raw_fd()).unwrap();
    (fd, at.port())
}

/// How many connections (`stream`) or datagrams wait on the nonblocking
/// socket `fd`, taken.
fn received(fd: &std::os::fd::OwnedFd, stream: bool) -> usize {
    use nix::sys::socket as so;
    use std::os::fd::AsRawFd as _;
    let mut n = 0;
    loop {
        let r = if stream {
            so::accept(fd.as_raw_fd()).map(|c| {
                let _ = nix::unistd::close(c);
            })
        } else {
            so::recv(fd.as_raw_fd(), &mut [0u8; 64], so::MsgFlags::empty()).map(drop)
        };
        if r.is_err() {
            return n;
        }
        n += 1;
    }
}

/// `SO_REUSEPORT`, and `SO_REUSEADDR` on a datagram socket, let a socket
/// bind a port a socket of the same uid outside already holds with it, and
/// take the connections or datagrams meant for that one. Refused (`EPERM`)
/// and shown, and the port then cannot be bound (`EADDRINUSE`). Judged
/// here: while the run holds its sockets, every connection and datagram
/// sent to the three ports reaches the sockets held outside. Controls: the
/// same probe run outside shares each port and takes a part of each; inside,
/// a TCP server's `SO_REUSEADDR` and turning `SO_REUSEPORT` off are set.
#[test]
fn a_socket_cannot_share_a_port_held_outside() {
    use nix::sys::socket as so;
    use std::io::Write as _;
    let w = World::new("reuse");
    let (tcp, tcp_port) = held_port(so::SockType::Stream, "reuseport");
    let (udp, udp_port) = held_port(so::SockType::Datagram, "reuseaddr");
    let (udp_rp, reuseport_port) = held_port(so::SockType::Datagram, "reuseport");
    // 20 connections with bytes, and 20 datagrams to each UDP port, each
    // from a port of its own (a reuseport group picks by the sender's
    // address): how many of each the sockets held here got.
    let sent_and_got = || {
        for _ in 0..20 {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
            c.write_all(b"secret").unwrap();
            for port in [udp_port, reuseport_port] {
                let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                u.send_to(b"secret", ("127.0.0.1", port)).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        [
            received(&tcp, true),
            received(&udp, false),
            received(&udp_rp, false),
        ]
    };
    let [tcp_port, udp_port, reuseport_port] =
        [tcp_port, udp_port, reuseport_port].map(|p| p.to_string());
    let sharing: [&[&str]; 3] = [
        &["share_port", "tcp", "reuseport", "1", &tcp_port],
        &["share_port", "udp", "reuseaddr", "1", &udp_port],
        &["share_port", "udp", "reuseport", "1", &reuseport_port],
    ];
    let mut ops = sharing.to_vec();
    ops.push(&["hold"]);
    // `argv` as lockrun runs it, or as a process outside: its lines up to
    // "ready", then what the sockets here got while it held its own.
    let holding = |c: Command| {
        let (mut p, _out, lines) = Background::until_ready(c);
        let got = sent_and_got();
        writeln!(p.0.stdin.take().unwrap()).unwrap();
        assert!(p.wait().success());
        (lines, got)
    };
    let log = w.root.join("audit.jsonl");
    let (lines, got) = holding(w.cmd(&["--audit-log", s(&log)], &support::probe_argv(&ops)));
    // Judged here: every connection and datagram reached its socket.
    assert_eq!(got, [20, 20, 20], "a socket of the run took its part");
    let refused = "setsockopt=errno=EPERM value=0 bind=errno=EADDRINUSE";
    assert_eq!(lines, [refused, refused, refused, "ready"]);
    let why = lockrun::seccomp::Widens::SharedPort;
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            "setsockopt SO_REUSEPORT on an inet stream socket",
            "setsockopt SO_REUSEADDR on an inet datagram socket",
            "setsockopt SO_REUSEPORT on an inet datagram socket",
        ]
        .map(|c| (c.to_owned(), why))
    );
    // Inside, a TCP server's SO_REUSEADDR and SO_REUSEPORT off are set.
    assert_eq!(
        w.probe(
            &[],
            &[
                &["share_port", "tcp", "reuseaddr", "1", "0"],
                &["share_port", "udp", "reuseport", "0", "0"],
            ]
        ),
        [
            "setsockopt=ok value=1 bind=ok",
            "setsockopt=ok value=0 bind=ok"
        ]
    );
    // Control: the same probe outside shares each port, and takes a part
    // of each (all of the datagrams, where SO_REUSEADDR shares).
    let argv = support::probe_argv(&ops);
    let mut outside = Command::new(&argv[0]);
    outside.args(&argv[1..]);
    let (lines, got) = holding(outside);
    let shared = "setsockopt=ok value=1 bind=ok";
    assert_eq!(lines, [shared, shared, shared, "ready"]);
    assert!(got[0] < 20 && got[1] == 0 && got[2] < 20, "{got:?}");
    w.assert_no_run_dirs();
}

/// The probe's `lease` op run by `c`, with the file `victim` tried by a
/// writer outside while it holds on: its first line, and whether the
/// writer's non-blocking open for writing succeeded or failed how.
fn lease_held(mut c: Command, victim: &std::path::Path) -> (String, Result<(), i32>, Output) {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = Vec::new();
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
        first.push(b[0]);
    }
    // With a lease held the kernel answers a non-blocking writer's open at
    // once with EWOULDBLOCK (a blocking one would wait up to the break time).
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(victim)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap());
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (String::from_utf8(first).unwrap(), writer, output)
}

/// A lease (`fcntl F_SETLEASE`) on a file outside would hold back every
/// process that then opens it for writing, up to `fs.lease-break-time`
/// (45 s by default), and tell the command when one did: the command, uid
/// 0, owns every root-owned file, and a lease needs only ownership and a
/// descriptor open for reading. Refused (`EPERM`) and shown. Judged from
/// outside: a writer's non-blocking open of the file, made while the
/// command holds on, succeeds. Control: the same probe outside takes the
/// lease, and the same open then fails with `EWOULDBLOCK`.
#[test]
fn a_lease_that_would_hold_back_writers_outside_is_refused() {
    let w = World::new("lease");
    let victim = w.canary(&w.data.join("shared.db"));
    let argv = support::probe_argv(&[&["lease", s(&victim)]]);

    let mut outside = Command::new(&argv[0]);
    outside.args(&argv[1..]);
    let (first, writer, _) = lease_held(outside, &victim);
    assert_eq!(first, "ok", "control: the lease outside");
    assert_eq!(
        writer,
        Err(nix::errno::Errno::EWOULDBLOCK as i32),
        "control: the writer is held back"
    );

    let log = w.root.join("audit.jsonl");
    let (first, writer, out) = lease_held(w.cmd(&["--audit-log", s(&log)], &argv), &victim);
    assert_eq!(first, "errno=EPERM", "inside: {out:?}");
    assert_eq!(
        writer,
        Ok(()),
        "the writer outside was held back by the run"
    );
    assert!(out.status.success(), "{out:?}");
    assert_one_refused_call(
        &w,
        &log,
        &out,
        "fcntl F_SETLEASE F_RDLCK",
        lockrun::seccomp::Widens::Leases,
    );
    assert_canary(&victim);
    w.assert_no_run_dirs();
}

#[test]
fn an_unprivileged_caller_is_refused_before_anything_runs() {
    let w = World::new("unpriv");
    if Command::new("setpriv").arg("--version").output().is_err() {
        support::skip(
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
            &support::probe_argv(&[&["write", s(&w.wt.join("ran"))]]),
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
        support::skip(
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

#[test]
fn raw_block_devices_are_unreadable() {
    use std::os::unix::fs::FileTypeExt;
    let w = World::new("blockdev");
    let dev = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        .map(|e| e.path());
    let Some(dev) = dev else {
        support::skip(
            "raw_block_devices_are_unreadable",
            "no block device under /dev",
        );
        return;
    };
    // Control: readable outside (we are root), so a refusal inside is Landlock's.
    assert_eq!(
        w.probe_outside(&[&["read", s(&dev)]]),
        ["ok"],
        "{}",
        dev.display()
    );
    let r = w.probe(&[], &[&["read", s(&dev)], &["read", "/dev/urandom"]]);
    assert_eq!(r, ["errno=EACCES", "ok"], "{}", dev.display());
}

#[test]
fn the_console_and_other_root_devices_are_unreadable() {
    let w = World::new("devices");
    // Root's device nodes beyond what a shell or a build uses: the console's
    // screen (vcs) and keyboard (tty1), the kernel log. Those present here.
    let present: Vec<&str> = ["/dev/vcs", "/dev/vcs1", "/dev/tty1", "/dev/kmsg"]
        .into_iter()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    if present.is_empty() {
        support::skip(
            "the_console_and_other_root_devices_are_unreadable",
            "no vcs, tty1 or kmsg here",
        );
        return;
    }
    let ops: Vec<[&str; 2]> = present.iter().map(|p| ["open_read", *p]).collect();
    let ops: Vec<&[&str]> = ops.iter().map(|o| &o[..]).collect();
    // Control: each opens outside (we are root), so a refusal inside is Landlock's.
    assert_eq!(
        w.probe_outside(&ops),
        vec!["ok"; present.len()],
        "{present:?}"
    );
    assert_eq!(
        w.probe(&[], &ops),
        vec!["errno=EACCES"; present.len()],
        "{present:?}"
    );
    // Controls inside: /dev lists, and what a shell uses reads.
    let r = w.probe(
        &[],
        &[
            &["listdir", "/dev"],
            &["read", "/dev/urandom"],
            &["read", "/dev/null"],
            &["open_read", "/dev/tty"],
        ],
    );
    assert_eq!(r[..3], ["ok", "ok", "ok"], "{r:?}");
    // /dev/tty: ENXIO without a controlling terminal, never EACCES.
    assert_ne!(r[3], "errno=EACCES", "{r:?}");
}

/// Set-id bits are refused in the worktree too (a setuid-root file left
/// there runs as root for whoever starts it after the run), each refusal
/// recorded and summed up; a directory may keep set-group-ID, which only
/// hands its group to what is made in it, so `git init --shared` works.
#[test]
fn set_id_bits_cannot_be_set_even_in_the_worktree() {
    use lockrun::seccomp::Widens::SetIdMode;
    use std::os::unix::fs::MetadataExt;
    let w = World::new("setid");
    let f = w.canary(&w.wt.join("tool"));
    let dir = w.wt.join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &support::probe_argv(&[
            &["chmod_mode", s(&f), "4755"],
            &["chmod_mode", s(&f), "2755"],
            &["create_mode", s(&w.wt.join("made")), "4755"],
            &["chmod_mode", s(&dir), "4775"],
            &["open_raw", s(&w.wt.join("raw")), "101", "2644"], // O_CREAT|O_WRONLY
            // Controls: ordinary modes, set-group-ID on a directory, and a
            // set-id mode where the kernel ignores it (no O_CREAT).
            &["chmod_mode", s(&f), "755"],
            &["create_mode", s(&w.wt.join("plain")), "644"],
            &["chmod_mode", s(&dir), "2775"],
            &["open_raw", "/etc/os-release", "2000000", "5007"], // O_CLOEXEC
        ]),
    );
    assert!(out.status.success(), "{out:?}");
    w.assert_no_run_dirs();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    assert_absent(&w.wt.join("raw"));
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o2775);
    assert_absent(&w.wt.join("made"));
    assert!(w.wt.join("plain").exists());
    let (tool, shared) = (s(&f), s(&dir));
    let (made, raw) = (w.wt.join("made"), w.wt.join("raw"));
    let (made, raw) = (s(&made), s(&raw));
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            (format!("chmod to mode 04755 on {tool}"), SetIdMode),
            (format!("chmod to mode 02755 on {tool}"), SetIdMode),
            (format!("openat with mode 04755 on {made}"), SetIdMode),
            (
                format!("chmod to mode 04775 on {shared} (a directory)"),
                SetIdMode
            ),
            (format!("openat with mode 02644 on {raw}"), SetIdMode),
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lockrun: 5 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): "),
        "{stderr}"
    );
    // A shared repository sets S_ISGID on its directories.
    let out = w.run(&[], &["git", "init", "-q", "--shared=group", "repo"]);
    assert!(out.status.success(), "{out:?}");
    let objects = std::fs::metadata(w.wt.join("repo/.git/objects")).unwrap();
    assert_eq!(objects.mode() & 0o2000, 0o2000, "{:o}", objects.mode());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("refused"),
        "{out:?}"
    );
}

/// File capabilities are set-id by another name: `setcap cap_setuid+ep`
/// on a file in the worktree would hand `CAP_SETUID` to whoever runs it
/// after the run. The supervisor sets xattrs without capabilities, so the
/// kernel refuses `security.capability` (it wants `CAP_SETFCAP`); a
/// `user.*` xattr on the same file is set. Judged from outside.
#[test]
fn file_capabilities_cannot_be_set_in_the_worktree() {
    let w = World::new("setfcap");
    // Control: outside, as root with every capability, the xattr is set.
    let outside = w.root.join("outside-tool");
    std::fs::write(&outside, b"#!/bin/sh\n").unwrap();
    assert_eq!(w.probe_outside(&[&["setfcap", s(&outside)]]), ["ok"]);
    assert_eq!(
        Command::new(python3())
            .args([
                "-c",
                "import os,sys; print(len(os.getxattr(sys.argv[1], 'security.capability')))",
                s(&outside)
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap(),
        "20"
    );
    let tool = w.canary(&w.wt.join("tool"));
    let r = w.probe(&[], &[&["setfcap", s(&tool)], &["setxattr", s(&tool)]]);
    assert_eq!(r, ["errno=EPERM", "ok"]);
    let xattrs = Command::new(python3())
        .args([
            "-c",
            "import os,sys; print(sorted(os.listxattr(sys.argv[1])))",
            s(&tool),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&xattrs.stdout).trim(),
        "['user.pwned']"
    );
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

#[test]
fn a_run_sweeps_stale_run_dirs_past_the_grace_period() {
    let w = World::new("sweep");
    let stale = w.state.join("runs/000000000001-000000000-1");
    std::fs::create_dir_all(stale.join("tmp")).unwrap();
    std::fs::write(stale.join("owner"), "1 1\n").unwrap();
    let ok = Command::new("touch")
        .args(["-d", "2000-01-01", s(&stale)])
        .status()
        .unwrap();
    assert!(ok.success());
    let policy = w.root.join("p.toml");
    std::fs::write(&policy, "[run]\ngc_grace_secs = 3600\n").unwrap();
    let out = w.run(&["--policy", s(&policy)], &["true"]);
    assert!(out.status.success(), "{out:?}");
    assert_absent(&stale);
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

/// A writable root that reaches where code runs later, outside the sandbox
/// (here the test home's `.cargo`, and the home itself as the worktree), is
/// run as the policy says, but never silently: a warning naming the place,
/// and a notice in the audit log. Control: the same run with an unrelated
/// writable dir says nothing.
#[test]
fn a_writable_root_where_code_runs_later_is_warned_about() {
    let w = World::new("later");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let cargo = w.home.join(".cargo");
    std::fs::create_dir_all(cargo.join("bin")).unwrap();
    let plain = w.data.clone();

    let quiet = w.run(&["--allow-write", plain.to_str().unwrap()], &["true"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(
        support::warnings(&stderr(&quiet)).is_empty(),
        "{}",
        stderr(&quiet)
    );

    let audit = w.root.join("audit.jsonl");
    let loud = w.run(
        &[
            "--allow-write",
            cargo.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
        &["sh", "-c", "echo planted > \"$HOME/.cargo/bin/cargo\""],
    );
    let err = stderr(&loud);
    assert!(loud.status.success(), "{err}");
    let home_cargo = cargo.canonicalize().unwrap();
    let line = format!(
        "lockrun: warning: {} is writable and reaches {}: its bin/ is on PATH",
        home_cargo.display(),
        home_cargo.display()
    );
    assert!(err.lines().any(|l| l.starts_with(&line)), "{err}");
    // The policy said so: the write happened.
    assert_eq!(
        std::fs::read_to_string(cargo.join("bin/cargo")).unwrap(),
        "planted\n"
    );
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\"notice\"")
            && l.contains("is writable and reaches")
            && l.contains(".cargo")),
        "{log}"
    );

    // The home itself as the worktree reaches the shell's start-up files.
    let home = w.home.canonicalize().unwrap();
    let as_wt = Command::new(BIN)
        .args(["--worktree", home.to_str().unwrap(), "--state-dir"])
        .arg(&w.state)
        .args(["--", "true"])
        .env("HOME", &w.home)
        .output()
        .unwrap();
    let err = stderr(&as_wt);
    assert!(as_wt.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{} is writable and reaches {}: the shell runs it at every start",
            home.display(),
            home.join(".bashrc").display()
        )),
        "{err}"
    );
    w.assert_no_run_dirs();
}

/// git runs the worktree's `.git/hooks` and obeys its `.git/config` and
/// `.git/commondir` outside the sandbox too: what a run changes there is
/// put back when it ends, its versions moved aside and reported. Judged
/// from outside: the files' bytes, the quarantine, lockrun's lines; a
/// control run that commits (and runs the existing hook) changes nothing
/// and says nothing.
#[test]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
fn the_worktrees_git_hooks_and_config_are_put_back_after_the_run() {
    let w = World::new("gitguard");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "core.hooksPath=/dev/null", "-C"])
            .arg(&w.wt)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first",
    ]);
    let dotgit = w.wt.join(".git");
    let hook = dotgit.join("hooks/post-commit");
    let original_hook = "#!/bin/sh\necho post-commit ran\n";
    std::fs::write(&hook, original_hook).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = std::fs::read(dotgit.join("config")).unwrap();
    let commit = "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m inside";

    // Control: a commit, which runs the hook inside; nothing to put back.
    let control = w.run(&[], &["sh", "-c", commit]);
    assert!(control.status.success(), "{}", stderr(&control));
    assert!(
        !stderr(&control).contains("lockrun: git:"),
        "{}",
        stderr(&control)
    );
    assert_eq!(git(&["rev-list", "--count", "HEAD"]).trim(), "2");
    assert!(!std::fs::read_dir(&dotgit).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("lockrun-quarantine")));

    // The run plants a hook, changes one, points git elsewhere.
    let attack = w.run(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "{commit} && printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-push && chmod 755 .git/hooks/pre-push \
                 && echo 'echo changed' >> .git/hooks/post-commit \
                 && git config core.fsmonitor ./planted.sh \
                 && echo /tmp/elsewhere > .git/commondir"
            ),
        ],
    );
    let err = stderr(&attack);
    assert!(attack.status.success(), "{err}");
    // The commit stays: only git's hooks and config go back.
    assert_eq!(git(&["rev-list", "--count", "HEAD"]).trim(), "3");
    assert_eq!(std::fs::read(dotgit.join("config")).unwrap(), config);
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), original_hook);
    assert!(!dotgit.join("hooks/pre-push").exists());
    assert!(!dotgit.join("commondir").exists());
    let q: Vec<std::path::PathBuf> = std::fs::read_dir(&dotgit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("lockrun-quarantine-")
        })
        .collect();
    assert_eq!(q.len(), 1, "{q:?}");
    let q = &q[0];
    assert!(std::fs::read_to_string(q.join("config"))
        .unwrap()
        .contains("fsmonitor = ./planted.sh"));
    assert!(std::fs::read_to_string(q.join("hooks/post-commit"))
        .unwrap()
        .ends_with("echo changed\n"));
    assert_eq!(
        std::fs::read_to_string(q.join("hooks/pre-push")).unwrap(),
        "#!/bin/sh\necho planted\n"
    );
    assert_eq!(
        std::fs::read_to_string(q.join("commondir")).unwrap(),
        "/tmp/elsewhere\n"
    );
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("lockrun: git: "))
        .collect();
    let (d, qd) = (dotgit.display(), q.display());
    assert_eq!(
        lines,
        [
            format!("lockrun: git: the command added {d}/commondir, which git runs or obeys outside the sandbox: moved to {qd}/commondir"),
            format!("lockrun: git: the command changed {d}/config, which git runs or obeys outside the sandbox: put back as it was before the run; the command's version is at {qd}/config"),
            format!("lockrun: git: the command changed {d}/hooks/post-commit, which git runs or obeys outside the sandbox: put back as it was before the run; the command's version is at {qd}/hooks/post-commit"),
            format!("lockrun: git: the command added {d}/hooks/pre-push, which git runs or obeys outside the sandbox: moved to {qd}/hooks/pre-push"),
        ],
        "{err}"
    );
    std::fs::remove_dir_all(q).unwrap();

    // hooks swapped for a symlink to a dir the run may write (and a decoy
    // quarantine planted): lockrun writes nothing through the link, and
    // makes hooks again as it was.
    let outside = w.data.join("hooks-target");
    std::fs::create_dir_all(&outside).unwrap();
    let swap = w.run(
        &["--allow-write", outside.to_str().unwrap()],
        &[
            "sh",
            "-c",
            &format!(
                "mv .git/hooks .git/hooks-old && ln -s {} .git/hooks && ln -s {} .git/lockrun-quarantine-$(basename $(dirname $TMPDIR))",
                outside.display(),
                outside.display()
            ),
        ],
    );
    let err = stderr(&swap);
    assert!(swap.status.success(), "{err}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "lockrun wrote through the link"
    );
    assert!(std::fs::symlink_metadata(dotgit.join("hooks"))
        .unwrap()
        .is_dir());
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), original_hook);
    assert!(
        err.lines().any(|l| l.starts_with(&format!("lockrun: git: the command changed {d}/hooks, which git runs or obeys outside the sandbox: put back as it was before the run; the command's version is at {d}/lockrun-quarantine-"))
            && l.ends_with("-2/hooks")),
        "{err}"
    );

    // `.git` swapped for a `gitdir:` file pointing at a repository the run
    // made: that file goes aside, and lockrun says the repository is gone.
    let swap = w.run(
        &[],
        &[
            "sh",
            "-c",
            "mv .git .git-moved && git init -q planted && printf 'gitdir: planted/.git\\n' > .git",
        ],
    );
    let err = stderr(&swap);
    assert!(swap.status.success(), "{err}");
    assert!(
        !w.wt.join(".git").exists(),
        "the planted .git file is still there"
    );
    let run_id = err
        .lines()
        .find_map(|l| l.strip_prefix(&format!("lockrun: git: the command changed {d}, which git runs or obeys outside the sandbox: lockrun keeps no copy of a whole repository: it is NOT back (the command's version is at {}/.git.lockrun-quarantine-", w.wt.display())))
        .and_then(|rest| rest.strip_suffix("); check it before running git there"))
        .unwrap_or_else(|| panic!("no line for the swapped .git in:\n{err}"));
    assert_eq!(
        std::fs::read_to_string(w.wt.join(format!(".git.lockrun-quarantine-{run_id}"))).unwrap(),
        "gitdir: planted/.git\n"
    );
    w.assert_no_run_dirs();
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

/// A path denied inside the worktree: Landlock only grants, so the
/// worktree is granted entry by entry around it. The run says so before
/// the command starts, and the limits are exactly as said: the secret is
/// unreadable; files already in the worktree stay writable; a subdirectory
/// is whole; nothing can be created, removed or renamed directly in the
/// worktree. A control run without the denial warns of nothing and creates
/// there.
#[test]
fn a_path_denied_inside_the_worktree_is_warned_about_with_its_limits() {
    let w = World::new("narrowed");
    let secret = w.wt.join(".env");
    std::fs::write(&secret, "TOKEN=1\n").unwrap();
    let notes = w.wt.join("notes");
    std::fs::write(&notes, "mine\n").unwrap();
    std::fs::create_dir(w.wt.join("sub")).unwrap();
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let control = w.run(&[], &["sh", "-c", "echo made > control && rm control"]);
    assert!(control.status.success(), "{}", stderr(&control));
    assert!(
        support::warnings(&stderr(&control)).is_empty(),
        "{}",
        stderr(&control)
    );

    let audit = w.root.join("audit.jsonl");
    let out = w.run(
        &["--deny-read", s(&secret), "--audit-log", s(&audit)],
        &support::probe_argv(&[
            &["read", s(&secret)],
            &["write", s(&notes)],
            &["write", s(&w.wt.join("sub/made"))],
            &["write", s(&w.wt.join("made"))],
            &["rename", s(&notes), s(&w.wt.join("moved"))],
        ]),
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let results: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        results,
        ["errno=EACCES", "ok", "ok", "errno=EACCES", "errno=EACCES"],
        "{err}"
    );
    let wt = w.wt.canonicalize().unwrap();
    let line = format!(
        "lockrun: warning: {wt} is writable but holds the denied {wt}/.env: Landlock only grants, \
         so nothing can be created, removed or renamed directly in {wt} (what is in it stays \
         writable); keep what must not be read out of writable dirs",
        wt = wt.display()
    );
    assert!(err.lines().any(|l| l == line), "{err}");
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(
        log.lines().any(|l| l.contains(&format!(
            "\"event\":\"narrowed\",\"dir\":\"{wt}\",\"denied\":[\"{wt}/.env\"]",
            wt = wt.display()
        ))),
        "{log}"
    );
    // `lockrun audit` does not suggest the worktree again for the refused create.
    let report = Command::new(BIN)
        .args(["audit", s(&audit)])
        .env("HOME", &w.home)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains(&format!(
            "cannot be allowed: {wt} is writable but holds the denied {wt}/.env: Landlock cannot \
             grant it whole",
            wt = wt.display()
        )) && !report.contains("--allow-write"),
        "{report}"
    );
    // From outside: as the probe said.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOKEN=1\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "pwned");
    assert_eq!(
        std::fs::read_to_string(w.wt.join("sub/made")).unwrap(),
        "pwned"
    );
    assert_absent(&w.wt.join("made"));
    assert_absent(&w.wt.join("moved"));
    w.assert_no_run_dirs();
}

/// `inner` (a lockrun command of `w`) run by a shell after `ulimit ARGS`.
fn with_ulimit(args: &str, w: &World, inner: &Command) -> Output {
    let script = format!("ulimit {args} && exec \"$@\"");
    wrapped(&["sh", "-c", &script, "sh"], w, inner)
}

/// `inner` (a [`World::cmd`]) run by `wrapper`, a program that runs the
/// command given after its own arguments (`taskset -c 1`), with the
/// test's home, in the worktree.
fn wrapped(wrapper: &[&str], w: &World, inner: &Command) -> Output {
    Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("HOME", &w.home)
        .current_dir(&w.wt)
        .output()
        .unwrap()
}

/// A denied path beside thousands of entries (a state dir or secret in a
/// shared `/tmp`): the walk grants each sibling, and must not hold a
/// descriptor per entry (the soft limit is often 1024) nor skip any.
#[test]
fn a_denied_path_among_thousands_of_siblings_is_enforced_under_a_1024_descriptor_limit() {
    let w = World::new("crowd");
    let crowd = w.root.join("crowd");
    let vault = crowd.join("vault");
    std::fs::create_dir_all(&vault).unwrap();
    let secret = w.canary(&vault.join("secret"));
    for i in 0..1500 {
        std::fs::write(crowd.join(format!("f{i}")), b"sibling").unwrap();
    }
    // Stale unix sockets, as a busy /tmp holds: no right of ABI 7 applies.
    let sockets: Vec<UnixListener> = (0..100)
        .map(|i| UnixListener::bind(crowd.join(format!("s{i}.sock"))).unwrap())
        .collect();
    drop(sockets);
    let last = crowd.join("f1499");

    let inner = w.cmd(
        &["--deny-read", s(&vault)],
        &support::probe_argv(&[
            &["read", s(&secret)],
            &["listdir", s(&vault)],
            &["listdir", s(&crowd)],
            &["read", s(&crowd.join("f0"))],
            &["read", s(&last)],
            &["write", s(&last)],
        ]),
    );
    // Soft and hard: lockrun cannot raise it, the walk must do with it.
    let out = with_ulimit("-n 1024", &w, &inner);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        r,
        [
            "errno=EACCES", // the denied file
            "errno=EACCES", // the denied dir
            "errno=EACCES", // its parent: split, so not listable
            "ok",           // siblings stay readable, first and last
            "ok",
            "errno=EACCES", // and not writable
        ]
    );
    assert_canary(&secret);
    assert_eq!(std::fs::read(&last).unwrap(), b"sibling");
    // The cost is said, with where it comes from and what to do.
    let err = String::from_utf8_lossy(&out.stderr);
    let crowded = format!(
        "lockrun: warning: {} holds 1601 entries, and each gets a Landlock rule of its own on every run",
        crowd.display()
    );
    assert!(
        err.lines().any(|l| l.starts_with(&crowded)
            && l.contains(&format!(
                "because denied paths lie at or beneath {} (",
                vault.display()
            ))
            && l.contains("--state-dir")),
        "stderr: {err}"
    );
    // Control: a denied path among few siblings costs little and is not
    // warned of (the test's own dirs are in /tmp, which may be crowded).
    let few = w.root.join("few");
    std::fs::create_dir_all(few.join("vault")).unwrap();
    let out = w.run(
        &["--deny-read", s(&few.join("vault"))],
        &["sh", "-c", "echo ran"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains(&format!("warning: {} holds", few.display())),
        "stderr: {err}"
    );
}

/// A writable root at or beneath the denied state dir is granted whole (the
/// more specific grant wins, for `{state}/agents/<name>`): the state dir
/// itself or its run dirs as a worktree or writable path would hand this run
/// every other run's temp dir. They are refused up front.
#[test]
#[allow(clippy::too_many_lines)] // one scenario, read top to bottom
fn the_state_dir_and_its_run_dirs_cannot_be_made_writable() {
    let w = World::new("statewt");
    // Another run, holding a secret in its temp dir.
    let mut other = Background(
        w.cmd(
            &[],
            &[
                "sh",
                "-c",
                "echo theirs > \"$TMPDIR/secret\" && echo \"$TMPDIR\" > tmpdir && sleep 300",
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap(),
    );
    let tmpdir_file = w.wt.join("tmpdir");
    wait_for("the other run's temp dir", || {
        std::fs::read_to_string(&tmpdir_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let their_tmp = std::fs::read_to_string(&tmpdir_file)
        .unwrap()
        .trim()
        .to_owned();
    let link = w.root.join("state-link");
    std::os::unix::fs::symlink(&w.state, &link).unwrap();
    let agent = w.state.join("agents/mine");
    std::fs::create_dir_all(&agent).unwrap();
    // Each steal copies the secret into the root it was to be given, where,
    // were it granted, the copy would land.
    let state = s(&w.state);
    let runs = format!("{state}/runs");
    let cases: [(&str, &[&str], &str, String); 4] = [
        (
            "worktree",
            &["--worktree", state],
            "is lockrun's state dir",
            state.to_owned(),
        ),
        (
            "worktree",
            &["--worktree", s(&link)],
            "is lockrun's state dir",
            state.to_owned(),
        ),
        (
            "worktree",
            &["--worktree", &runs],
            "lies in the run dirs",
            runs.clone(),
        ),
        (
            "writable path",
            &["--allow-write", &their_tmp],
            "lies in the run dirs",
            their_tmp.clone(),
        ),
    ];
    for (what, flags, how, into) in cases {
        let leak = std::path::Path::new(&into).join("leak");
        let steal = format!("cat {their_tmp}/secret > {}", s(&leak));
        let mut c = Command::new(BIN);
        c.args(["--state-dir", state]).args(flags);
        if what != "worktree" {
            c.args(["--worktree", s(&w.wt)]);
        }
        let out = c
            .args(["--", "sh", "-c", &steal])
            .env("HOME", &w.home)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_absent(&leak);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("lockrun: {what} "))
                && err.contains(how)
                && err.contains("where other runs keep their temp dirs"),
            "{flags:?}: {err}"
        );
    }

    // Control: an agent dir beneath the state dir is a worktree like any other,
    // and the run dirs beside it stay closed.
    let out = Command::new(BIN)
        .args(["--state-dir", state, "--worktree", s(&agent), "--"])
        .args(support::probe_argv(&[
            &["write", s(&agent.join("mine"))],
            &["read", &format!("{their_tmp}/secret")],
            &["listdir", &format!("{state}/runs")],
        ]))
        .env("HOME", &w.home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout_lines(&out), ["ok", "errno=EACCES", "errno=EACCES"]);
    other.sigterm();
    assert!(!other.wait().success());
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
    let pty = include_str!("support/pty.py");
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
    let lines: Vec<&str> = inside
        .lines()
        .filter(|l| !support::is_crowding(l))
        .collect();
    assert_eq!(lines, ["/dev/console", "via-console"], "{inside}");
    w.assert_no_run_dirs();
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
/// worktree: POSIX shared memory fails there with EACCES, and `lockrun
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
        ["ok", "pool EACCES"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(wt.join("f")).unwrap(), "x");
    let audit = Command::new(BIN).arg("audit").arg(&log).output().unwrap();
    let text = String::from_utf8_lossy(&audit.stdout);
    assert!(
        text.contains("/dev/shm — create a file in (fs.make_reg)")
            && text.contains("not suggested: /dev/shm is shared by every process on this machine")
            && !text.contains("allow with:"),
        "{text}"
    );
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
        support::skip(
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

/// A CI runner sends a run's output to a log file; tools reopen it as
/// `/dev/stdout` or `/dev/stderr` (`> /dev/stderr`, `tee /dev/stderr`). That
/// file is writable through the descriptor the command inherits, so the
/// reopen is granted the same, write and truncate, and nothing else: not
/// read (here it lies in a denied dir), not the dir around it.
#[test]
fn the_callers_stdout_file_is_reachable_as_dev_stderr_and_nothing_more() {
    let w = World::new("stdio");
    let log = w.data.join("err.log");
    std::fs::write(&log, "before\n").unwrap();
    let stderr = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let sibling = w.data.join("sibling");
    let moved = w.data.join("moved");
    let out = w
        .cmd(
            &["--deny-read", s(&w.data)],
            &support::probe_argv(&[
                &["write", "/dev/stderr"],
                &["append", "/dev/stderr"],
                &["read", "/dev/stderr"],
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
        ["ok", "ok", "errno=EACCES", "errno=EACCES", "errno=EACCES"],
        "{said}"
    );
    // Truncated and written as outside; then lockrun's own summary of the
    // three refusals. The reopen itself is no refusal.
    assert!(
        said.starts_with("pwnedpwnedlockrun: 3 filesystem accesses refused: "),
        "{said}"
    );
    assert!(!said.contains("/proc/"), "{said}");
    assert_absent(&sibling);
    assert_absent(&moved);
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
        said.contains(&format!("{} — create a file in (fs.make_reg)", s(&w.data))),
        "{said}"
    );
}

/// Two runs on one worktree at once would each put back what the other
/// changed in `.git`: the second would take the first's planted hook for
/// the state before the run, and put it back after the first removed it.
/// The second is refused while the first runs; after it, a run starts.
#[test]
fn a_second_run_on_a_worktree_with_git_is_refused_while_the_first_runs() {
    let w = World::new("gitlock");
    let out = Command::new("git")
        .args(["init", "-q"])
        .arg(&w.wt)
        .output()
        .unwrap();
    assert!(out.status.success());
    let hook = w.wt.join(".git/hooks/pre-commit");
    let go = w.wt.join("go");
    let mut first = Background(
        w.cmd(
            &[],
            &[
                "sh",
                "-c",
                "printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-commit && \
                 chmod +x .git/hooks/pre-commit && touch planted && \
                 for i in $(seq 400); do [ -e go ] && break; sleep 0.05; done",
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap(),
    );
    wait_for("the first run's hook", || w.wt.join("planted").exists());

    let second = w.run(&[], &["touch", "second"]);
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "lockrun: the worktree {} is in use by another run (process {})",
            s(&w.wt),
            first.0.id()
        )) && err.contains("two runs at once would each put back what the other changed"),
        "{err}"
    );
    assert_absent(&w.wt.join("second"));

    std::fs::write(&go, "").unwrap();
    let st = first.wait();
    assert!(st.success(), "{st:?}");
    let mut said = String::new();
    first
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(
        said.contains("the command added") && said.contains("pre-commit"),
        "{said}"
    );
    assert_absent(&hook);

    // Control: with the first run over, the worktree is free.
    let third = w.run(&[], &["touch", "third"]);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert!(w.wt.join("third").exists());
    assert_absent(&hook);
}

/// lockrun on the other agent's worktree, with state dir `state`.
fn on_other(w: &World, state: &std::path::Path, argv: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--worktree", s(&w.other), "--state-dir", s(state), "--"])
        .args(argv)
        .env("HOME", &w.home)
        .current_dir(&w.other);
    c
}

/// A command of one run can open another agent's worktree for reading,
/// and `flock` it: when that was lockrun's lock, every run of that agent
/// was refused as "in use" for as long as the command held it. lockrun's
/// own lock is now a file in the state dir that no run can open: the other
/// agent's run goes on, and says which command of which run held the
/// worktree. Judged from outside: the command really holds the lock (a
/// non-blocking `flock` of the test's is refused `EWOULDBLOCK`), the other
/// run's file exists, and no lock file is left after both runs. Control: a
/// lockrun of another state dir is still refused while a run holds the
/// worktree, naming that lockrun.
#[test]
fn a_command_cannot_keep_another_agents_runs_from_starting_by_locking_its_worktree() {
    use std::process::Stdio;
    let w = World::new("wtlock");
    assert!(Command::new("git")
        .args(["init", "-q"])
        .arg(&w.other)
        .status()
        .unwrap()
        .success());
    let locks = w.state.join("worktrees");
    let mut holder = Background(
        w.cmd(&[], &support::probe_argv(&[&["flock_hold", s(&w.other)]]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut said = [0u8; 3];
    holder
        .0
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut said)
        .unwrap();
    assert_eq!(&said, b"ok\n", "the command's flock");
    let dir = std::fs::File::open(&w.other).unwrap();
    assert!(
        matches!(
            nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusiveNonblock),
            Err((_, nix::errno::Errno::EWOULDBLOCK))
        ),
        "the command does not hold the other worktree"
    );

    // The other agent's run, on its own worktree, in the same state dir.
    let out = on_other(&w, &w.state, &["touch", "ran"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(w.other.join("ran").exists());
    assert!(
        err.contains(&format!(
            "lockrun: warning: the worktree {} is also locked by process ",
            s(&w.other)
        )) && err.contains(" (python3) of lockrun run ")
            && err.contains("a command of a run, not a lockrun, so this run goes on"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&locks).unwrap().count(),
        0,
        "a lock file left"
    );
    drop(holder.0.stdin.take());
    assert!(holder.wait().success());

    // Control: a lockrun of another state dir holds the worktree; a run
    // here is refused, naming it.
    let other_state = w.root.join("state2");
    let go = w.root.join("go");
    let wait = "touch first; while [ ! -e ../../../go ]; do sleep 0.05; done";
    let mut first = Background(
        on_other(&w, &other_state, &["sh", "-c", wait])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the first run", || w.other.join("first").exists());
    let second = on_other(&w, &w.state, &["touch", "second"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(125), "{err}");
    assert!(
        err.starts_with(&format!(
            "lockrun: the worktree {} is in use by another run (process {})",
            s(&w.other),
            first.0.id()
        )),
        "{err}"
    );
    assert_absent(&w.other.join("second"));
    std::fs::write(&go, "").unwrap();
    assert!(first.wait().success());
}

/// A lockrun killed before it could unlink its worktree lock leaves an
/// unlocked file in `<state>/worktrees`: `gc` reaps it, but not one held.
#[test]
fn gc_reaps_a_worktree_lock_no_lockrun_holds() {
    let w = World::new("wtlockgc");
    let locks = w.state.join("worktrees");
    std::fs::create_dir_all(&locks).unwrap();
    let left = locks.join("fd01-1234");
    let held = locks.join("fd01-5678");
    std::fs::write(&left, "").unwrap();
    std::fs::write(&held, "").unwrap();
    let _held = nix::fcntl::Flock::lock(
        std::fs::File::open(&held).unwrap(),
        nix::fcntl::FlockArg::LockSharedNonblock,
    )
    .unwrap();
    let gc = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&gc.stdout);
    assert!(gc.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "reaped {}: a worktree's lock no run holds",
            s(&left)
        )),
        "{said}"
    );
    assert_absent(&left);
    assert!(held.exists());
}

/// A writable dir inside a denied one is granted (the more specific grant
/// wins), but a path denied beneath that dir is denied again: the more
/// specific denial wins in turn, and the dir is split around it.
#[test]
fn a_path_denied_beneath_a_writable_dir_in_a_denied_dir_stays_denied() {
    let w = World::new("nested-deny");
    let outer = w.root.join("outer");
    let work = outer.join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    let env = w.canary(&work.join(".env"));
    let other = w.canary(&outer.join("other"));
    let flags = [
        "--deny-read",
        s(&outer),
        "--deny-read",
        s(&env),
        "--allow-write",
        s(&work),
    ];
    let made = work.join("sub/made");
    let r = w.probe(
        &flags,
        &[
            &["read", s(&env)],
            &["read", s(&other)],
            &["write", s(&made)],
        ],
    );
    assert_eq!(r, ["errno=EACCES", "errno=EACCES", "ok"]);
    // Judged from outside: the write landed; a copy of the secret did not.
    assert_eq!(std::fs::read(&made).unwrap(), b"pwned");
    let leak = w.wt.join("leak");
    let out = w.run(
        &flags,
        &["sh", "-c", &format!("cat {} > {}", s(&env), s(&leak))],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!std::fs::read_to_string(&leak)
        .unwrap_or_default()
        .contains("canary"));
    assert_canary(&env);
}

/// Agents' worktrees under one dir, and that dir denied (`--deny-read
/// agents`): a run on one of them reads and writes its own, and git works
/// there, while another agent's worktree beside it cannot be read, by its
/// path, through `/proc/self/root` or through a symlink in the run's own,
/// nor the common dir listed (`EACCES`). Judged from outside: no copy of
/// the other agent's file landed in the run's worktree, and the file is
/// unchanged. Control: the same run without the denial copies it (as the
/// README says, a run reads other agents' worktrees unless denied).
#[test]
fn another_agents_worktree_is_unreadable_when_the_dir_of_all_worktrees_is_denied() {
    let w = World::new("agents-dir");
    let agents = w.root.join("agents");
    let alice = agents.join("alice/repo");
    std::fs::create_dir_all(&alice).unwrap();
    let theirs = w.canary(&w.other.join("code.rs"));
    let link = alice.join("link");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    let run = |extra: &[&str], argv: &[String]| {
        Command::new(BIN)
            .args(["--worktree", s(&alice), "--state-dir", s(&w.state)])
            .args(extra)
            .arg("--")
            .args(argv)
            .env("HOME", &w.home)
            .current_dir(&alice)
            .output()
            .unwrap()
    };
    let copy = alice.join("copy");
    let via_root = format!("/proc/self/root{}", s(&theirs));
    let mine = alice.join("mine");
    let denied = ["--deny-read", s(&agents)];
    let out = run(
        &denied,
        &support::probe_argv(&[
            &["copy", s(&theirs), s(&copy)],
            &["read", &via_root],
            &["read", s(&link)],
            &["listdir", s(&agents)],
            &["write", s(&mine)],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        [
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "ok"
        ],
        "{out:?}"
    );
    assert_absent(&copy);
    assert_eq!(std::fs::read(&mine).unwrap(), b"pwned");
    let git = "git init -q && git add mine && git -c user.name=a -c user.email=a@b \
               commit -q -m mine && git log --format=%s";
    let out = run(&denied, &["sh".into(), "-c".into(), git.into()]);
    assert_eq!(stdout_lines(&out), ["mine"], "{out:?}");
    // Control: without the denial, the run copies the other agent's file.
    let out = run(
        &[],
        &support::probe_argv(&[&["copy", s(&theirs), s(&copy)]]),
    );
    assert_eq!(stdout_lines(&out), ["ok"], "{out:?}");
    assert_eq!(std::fs::read(&copy).unwrap(), b"canary");
    assert_canary(&theirs);
    w.assert_no_run_dirs();
}

/// `Cpus_allowed_list` of a process: "0-1", "0,2-3".
fn cpus_allowed(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status:?}"))
        .trim()
        .to_owned()
}

fn cpu_list(list: &str) -> Vec<u32> {
    list.split(',')
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()
        })
        .collect()
}

/// lockrun pins the thread it starts beside to the CPUs it is not on (see
/// `run::beside`); the command must still get exactly the caller's CPUs,
/// which `make -j$(nproc)` and test runners size themselves by. A caller
/// pinned to one CPU leaves no CPU beside: the run does all its work in
/// place, and still runs the command there.
#[test]
fn the_command_runs_on_exactly_the_callers_cpus() {
    let w = World::new("cpus");
    let outside = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    let read = ["cat", "/proc/self/status"];
    let out = w.run(&[], &read);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cpus_allowed(&String::from_utf8_lossy(&out.stdout)), outside);
    for cpu in cpu_list(&outside) {
        let out = wrapped(&["taskset", "-c", &cpu.to_string()], &w, &w.cmd(&[], &read));
        assert!(
            out.status.success(),
            "on CPU {cpu}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            cpus_allowed(&String::from_utf8_lossy(&out.stdout)),
            cpu.to_string(),
            "a caller pinned to CPU {cpu}"
        );
        w.assert_no_run_dirs();
    }
}

/// `git clone` of a local path hard-links the objects; Landlock refuses a
/// link that would give a file rights it lacks where it is (EXDEV), and git
/// copies instead. The clone works, the source's objects gain no link
/// (judged from outside), and `lockrun audit` says what was refused and why
/// rather than only offering to make the source writable.
#[test]
fn a_local_git_clone_copies_and_the_refused_link_is_explained() {
    use std::os::unix::fs::MetadataExt;
    let w = World::new("gitclone");
    let src = w.root.join("src");
    std::fs::create_dir(&src).unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&src, &["init", "-q"]);
    std::fs::write(src.join("file"), "content\n").unwrap();
    git(&src, &["add", "file"]);
    git(&src, &["commit", "-q", "-m", "one"]);
    let objects: Vec<std::path::PathBuf> = walk_files(&src.join(".git/objects"));
    assert!(!objects.is_empty());
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &["git", "clone", "-q", s(&src), "copy"],
    );
    assert!(out.status.success(), "{out:?}");
    w.assert_no_run_dirs();
    assert_eq!(
        std::fs::read_to_string(w.wt.join("copy/file")).unwrap(),
        "content\n"
    );
    // Copied, not linked: every object of the source still has one name.
    for o in &objects {
        assert_eq!(std::fs::metadata(o).unwrap().nlink(), 1, "{}", o.display());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let src_objects = src.join(".git/objects");
    assert!(
        stderr.contains(&format!("{}/", src_objects.display())) && stderr.contains("(git)"),
        "{stderr}"
    );
    let text = Command::new(BIN).args(["audit", s(&log)]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "note: the command hard-linked or renamed a file from {}/",
            src_objects.display()
        )) && text.contains("EXDEV"),
        "{text}"
    );
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
