//! Reads everywhere but deny-read paths: a denied path stays unreadable by
//! every name (hard links, `/proc/self/root`, symlinks), beneath writable
//! dirs and among thousands of siblings, and a watch names nothing in it.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::{Command, Output};

use crate::probe_without_caps;
use crate::support::world;
use crate::support::world::{
    assert_absent, assert_canary, s, stdout_lines, with_ulimit, Background, RemovedAtEnd, World,
    BIN,
};

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
            // Listed, as every dir is (see `listing`): the names, not the files.
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
            "ok",
            "errno=EACCES",
            "errno=EACCES",
            "ok",
            "errno=EXDEV",
            "errno=EXDEV", // across the worktree's mount, as across filesystems
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
        &world::probe_argv(&[
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
        &world::probe_argv(&[&["watch_names", s(&vault), s(&w.data)]]),
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
    let fan = w.run(&[], &world::probe_argv(&[&["fanotify"]]));
    assert_eq!(String::from_utf8_lossy(&fan.stdout), "errno=EPERM\n");
    assert!(
        String::from_utf8_lossy(&fan.stderr).contains(": fanotify_init (python3)\n"),
        "{fan:?}"
    );
    // Controls outside: the denied dir can be watched, fanotify opens.
    assert_eq!(w.probe_outside(&[&["fanotify"]]), ["ok"]);
    let argv = world::probe_argv(&[&["watch_names", s(&vault)]]);
    let outside = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&outside.stdout), "ok\nready\nend\n");
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
        world::warnings(&stderr(&control)).is_empty(),
        "{}",
        stderr(&control)
    );

    let audit = w.root.join("audit.jsonl");
    let out = w.run(
        &["--deny-read", s(&secret), "--audit-log", s(&audit)],
        &world::probe_argv(&[
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
        &world::probe_argv(&[
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
            "ok",           // the denied dir's names (see `listing`)
            "ok",           // its parent, split: listable
            "ok",           // siblings stay readable, first and last
            "ok",
            "errno=EROFS", // and not writable (a read-only mount)
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
/// (`EACCES`); the common dir's names are listed, as every dir's are
/// (see `listing`). Judged from outside: no copy of
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
        &world::probe_argv(&[
            &["copy", s(&theirs), s(&copy)],
            &["read", &via_root],
            &["read", s(&link)],
            &["listdir", s(&agents)],
            &["write", s(&mine)],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        ["errno=EACCES", "errno=EACCES", "errno=EACCES", "ok", "ok"],
        "{out:?}"
    );
    assert_absent(&copy);
    assert_eq!(std::fs::read(&mine).unwrap(), b"pwned");
    let git = "git init -q && git add mine && git -c user.name=a -c user.email=a@b \
               commit -q -m mine && git log --format=%s";
    let out = run(&denied, &["sh".into(), "-c".into(), git.into()]);
    assert_eq!(stdout_lines(&out), ["mine"], "{out:?}");
    // Control: without the denial, the run copies the other agent's file.
    let out = run(&[], &world::probe_argv(&[&["copy", s(&theirs), s(&copy)]]));
    assert_eq!(stdout_lines(&out), ["ok"], "{out:?}");
    assert_eq!(std::fs::read(&copy).unwrap(), b"canary");
    assert_canary(&theirs);
    w.assert_no_run_dirs();
}
