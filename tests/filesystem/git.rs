//! The worktree's git hooks and config as they were when the run ends, and
//! the worktree lock: one run per git worktree, which a command cannot take
//! from other agents' runs and `lockrun gc` reaps once no lockrun holds it.

use std::io::Read;
use std::process::{Command, Output};

use crate::support::world;
use crate::support::world::{assert_absent, s, wait_for, Background, World, BIN};

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
        w.cmd(&[], &world::probe_argv(&[&["flock_hold", s(&w.other)]]))
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

/// `git clone` of a local path hard-links the objects; across the
/// worktree's mount (a mount of its own, the rest read-only) the link
/// fails with `EXDEV`, as across filesystems, before Landlock is asked,
/// and git copies instead. The clone works and the source's objects gain
/// no link (judged from outside). Landlock (ABI 7) logs nothing of it;
/// below, the records of the run's `EXDEV` name it as Landlock would have
/// refused it (the same filesystem, a dir outside the writable paths), so
/// the summary names the objects' dir there and only there.
#[test]
fn a_local_git_clone_copies_across_the_worktrees_mount() {
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
    let objects = format!("{}/", src.join(".git/objects").display());
    let named = stderr
        .lines()
        .any(|l| l.contains("filesystem access") && l.contains(&objects));
    assert_eq!(named, world::landlock_abi() < 7, "{stderr}");
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
