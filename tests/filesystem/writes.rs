//! Writes only in the worktree, the run's temp dir and `--allow-write` paths:
//! every other path, by every route (links, renames, symlinks, inherited
//! descriptors, device nodes), is refused; what lockrun keeps of its own (the
//! state dir, its run dirs) is never made writable.

use std::process::{Command, Output};

use crate::support::world;
use crate::support::world::{
    assert_absent, assert_canary, s, stdout_lines, wait_for, Background, Outside, World, BIN,
};

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
    // By path and through the run's own root: the read-only mount (EROFS).
    // Through a process outside: the run's /proc has no entry for it
    // (ENOENT).
    let want: Vec<&str> = targets
        .iter()
        .map(|t| {
            if t.starts_with("/proc/") && !t.starts_with("/proc/self/") {
                "errno=ENOENT"
            } else {
                "errno=EROFS"
            }
        })
        .collect();
    assert_eq!(r, want, "{targets:?}");
    // Control: outside, the dir is there to reach through the process (init's
    // root may not be the machine's, as in a container: only its entry is
    // checked).
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

/// Out of the worktree: Landlock's `EXDEV` (the link would give the file
/// rights it lacks); across its mount (the worktree is one of its own):
/// `EXDEV`, as across filesystems; into a read-only mount: `EROFS`.
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
            "errno=EXDEV",
            "errno=EROFS",
            "errno=EXDEV",
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
    assert_eq!(r, ["ok", "errno=EROFS", "errno=EROFS", "ok"]);
    assert_canary(&target);
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
    assert_eq!(r, ["errno=EROFS", "errno=EROFS", "errno=EROFS", "ok", "ok"]);
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
        .args(world::probe_argv(&[&["writefd", "5"]]))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&control.stdout).trim(), "ok");
    std::fs::write(&canary, b"canary").unwrap();
    let out = w
        .cmd_under(&wrapper, &[], &world::probe_argv(&[&["writefd", "5"]]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno=EBADF");
    assert_canary(&canary);
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
        world::warnings(&stderr(&quiet)).is_empty(),
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
        .args(world::probe_argv(&[
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
    // The run dirs' names are listed, as every dir's are (see `listing`).
    assert_eq!(stdout_lines(&out), ["ok", "errno=EACCES", "ok"]);
    other.sigterm();
    assert!(!other.wait().success());
}
