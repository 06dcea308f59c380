//! Escape tests for the seccomp supervisor (`lockrun::supervise`), driving the
//! real binary as uid 0 without capabilities: metadata calls on root-owned
//! files outside the writable roots, and unix connects that reach outside
//! through symlinks, `..` or the cwd. Each escape is judged from outside (the
//! canary's mode, owner, times and xattrs; the outside listener accepted and
//! received nothing) and asserts the errno the probe got; a control beside it
//! must succeed the same way inside the worktree and the run's TMPDIR.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{python, slow, watchdog, world};
use python::python3;
use world::{s, World};

const PROBE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/support/supervise_probe.py"
);

/// Whether this test can run here; says why not (a failure under `CI=true`).
fn can_run(test: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    world::skip(test, "needs root (cgroup v2, bpf, a root-owned canary)");
    false
}

/// The probe's command line for `ops`, one after another.
fn probe_argv<'a, O: AsRef<[&'a str]>>(ops: &[O]) -> Vec<String> {
    let mut argv = vec![python3().to_owned(), PROBE.to_owned()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            argv.push(";".to_owned());
        }
        argv.extend(op.as_ref().iter().map(|s| (*s).to_owned()));
    }
    argv
}

/// Run the probe inside; its result lines. Asserts lockrun exited 0.
fn probe<'a, O: AsRef<[&'a str]>>(w: &World, extra: &[&str], ops: &[O]) -> Vec<String> {
    probe_by(w, extra, &probe_argv(ops))
}

/// [`probe`] with the probe's whole command line given.
fn probe_by(w: &World, extra: &[&str], argv: &[String]) -> Vec<String> {
    let out = w.run(extra, argv);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "lockrun failed: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_owned).collect()
}

/// Run a shell script inside; asserts it exited 0, returns stdout.
fn sh(w: &World, script: &str) -> String {
    let out = w.run(&[], &["sh", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "script failed: {:?}\n{script}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Everything a metadata call can change, judged from outside.
#[derive(Debug, PartialEq, Eq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    /// Changes on any successful chmod/chown/setxattr, even a no-op one.
    ctime: (i64, i64),
    xattrs: Vec<String>,
}

fn xattrs(p: &Path) -> Vec<String> {
    let out = Command::new(python3())
        .args([
            "-c",
            "import os,sys; print('\\n'.join(sorted(os.listxattr(sys.argv[1], follow_symlinks=False))))",
            s(p),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The inode flags (`lsattr`), read from outside.
fn inode_flags(p: &Path) -> u32 {
    let out = Command::new(python3())
        .args([
            "-c",
            "import fcntl,os,struct,sys; fd=os.open(sys.argv[1], os.O_RDONLY); \
             print(struct.unpack('i', fcntl.ioctl(fd, 0x80086601, b'\\0'*4))[0])",
            s(p),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn snapshot(p: &Path) -> Meta {
    let m = std::fs::symlink_metadata(p).unwrap();
    Meta {
        mode: m.permissions().mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        xattrs: xattrs(p),
    }
}

fn set_xattr(p: &Path, name: &str) {
    let st = Command::new(python3())
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], sys.argv[2], b'1')",
            s(p),
            name,
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

/// A root-owned file with mode 0644 and the xattrs `user.canary`, `user.canary2`.
fn root_file(p: &Path) -> PathBuf {
    std::fs::write(p, b"canary").unwrap();
    std::os::unix::fs::chown(p, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    set_xattr(p, "user.canary");
    set_xattr(p, "user.canary2");
    p.to_path_buf()
}

/// Every way of naming `f` (in `dir`) that the tests try: by path, through
/// `..` from the worktree (the cwd), through a symlink in the worktree, by a
/// read-only fd, by a dirfd and a relative name.
fn metadata_ops(dir: &Path, f: &Path, dotdot: &str, link: &Path) -> Vec<Vec<String>> {
    let name = f.file_name().unwrap().to_str().unwrap();
    let (d, f, link) = (s(dir), s(f), s(link));
    let ops: Vec<Vec<&str>> = vec![
        vec!["chmod", f, "751"],
        vec!["chmod", dotdot, "752"],
        vec!["chmod", link, "753"],
        vec!["fchmod_ro", f, "754"],
        vec!["chmod_dirfd", d, name, "755"],
        vec!["chown", f, "0", "0"],
        vec!["chown", link, "0", "0"],
        vec!["fchown_ro", f, "0", "0"],
        vec!["chown_dirfd", d, name, "0", "0"],
        vec!["utime", f],
        vec!["utime_now", dotdot],
        vec!["utime", link],
        vec!["futime_ro", f],
        vec!["utime_dirfd", d, name],
        vec!["setxattr", f],
        vec!["setxattr", link],
        vec!["fsetxattr_ro", f],
        vec!["removexattr", dotdot, "user.canary"],
        vec!["fremovexattr_ro", f, "user.canary2"],
    ];
    ops.into_iter()
        .map(|o| o.into_iter().map(str::to_owned).collect())
        .collect()
}

fn as_refs(ops: &[Vec<String>]) -> Vec<Vec<&str>> {
    ops.iter()
        .map(|o| o.iter().map(String::as_str).collect())
        .collect()
}

/// Every way of changing a root-owned file's metadata outside the
/// writable roots is refused, judged from outside (mode, owner, times,
/// xattrs, inode flags unchanged), and each refusal is in the audit log
/// with its access. Both ways a run holds it: the read-only mounts, whose
/// `EROFS` the kernel's `sys_exit` recorder records; and, where that
/// recorder is missing (`LOCKRUN_TEST_NO_READ_ONLY_MOUNTS`), the
/// supervisor, which refuses with `EPERM` and records each itself.
#[test]
fn metadata_of_root_owned_files_outside_is_refused() {
    const T: &str = "metadata_of_root_owned_files_outside_is_refused";
    if !can_run(T) {
        return;
    }
    for supervised in [false, true] {
        metadata_outside_is_refused(supervised);
    }
}

fn metadata_outside_is_refused(supervised: bool) {
    let w = World::new("sv-meta-out");
    let f = root_file(&w.data.join("f"));
    let link = w.wt.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let before = snapshot(&f);
    let audit = w.root.join("audit.jsonl");
    let mut ops = metadata_ops(&w.data, &f, "../data/f", &link);
    // An inherited descriptor: stdin is the canary, opened by the caller for
    // reading, which the command gets on a read-only mount of its own
    // (`lockrun::stdio`).
    ops.push(vec![
        "fchmod_fd".to_owned(),
        "0".to_owned(),
        "777".to_owned(),
    ]);
    // chattr (FS_IOC_SETFLAGS on a read-only fd): inode flags are metadata too.
    ops.push(vec!["chattr_nodump".to_owned(), s(&f).to_owned()]);
    ops.push(vec!["chattr_nodump".to_owned(), s(&link).to_owned()]);
    let mut cmd = w.cmd(&["--audit-log", s(&audit)], &probe_argv(&as_refs(&ops)));
    if supervised {
        cmd.env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1");
    }
    let out = cmd
        .stdin(std::fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let refused = if supervised {
        "errno=EPERM"
    } else {
        "errno=EROFS"
    };
    for (o, got) in ops.iter().zip(&r) {
        assert_eq!(
            got, refused,
            "{o:?} must be refused (supervised: {supervised})"
        );
    }
    assert_eq!(r.len(), ops.len(), "{r:?}");
    assert_eq!(snapshot(&f), before, "the canary's metadata changed");
    assert_eq!(inode_flags(&f) & 0x40, 0, "chattr +d reached the canary");
    assert_eq!(std::fs::read(&f).unwrap(), b"canary");
    // Every refusal is in the audit log as a filesystem event: the
    // supervisor's, or the recorder's.
    let log = std::fs::read_to_string(&audit).unwrap();
    let events: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"filesystem\""))
        .collect();
    let by_supervisor = events
        .iter()
        .filter(|l| l.contains("seccomp supervisor"))
        .count();
    let by_mounts = events
        .iter()
        .filter(|l| l.contains("\"errno\":\"EROFS\""))
        .count();
    let want = if supervised {
        (ops.len(), 0)
    } else {
        (0, ops.len())
    };
    assert_eq!((by_supervisor, by_mounts), want, "{log}");
    for access in [
        "metadata.chmod",
        "metadata.chown",
        "metadata.utimes",
        "metadata.setxattr",
        "metadata.removexattr",
        "metadata.ioctl",
    ] {
        assert!(log.contains(access), "{access} missing from {log}");
    }
    // A refusal by descriptor names what the descriptor is: one the
    // command opened read-only, the canary by its path.
    let named = format!(" ({})\"", f.display());
    assert!(
        log.lines()
            .any(|l| l.contains("\"path\":\"fd ") && l.contains(&named)),
        "{named} missing from {log}"
    );
}

/// The supervisor holds the run's one seccomp listener, and the command
/// cannot add its own: among filters giving the same action the newest
/// wins, so a listener of the command's that answers `CONTINUE` would take
/// the metadata calls (and the deny list's calls) from lockrun's supervisor
/// and let the kernel run them. The kernel allows one listener per filter
/// tree (`EBUSY`). Control: outside any run, the same program's listener
/// gets the call and the chmod happens.
#[test]
fn the_command_cannot_add_a_seccomp_listener_of_its_own() {
    const T: &str = "the_command_cannot_add_a_seccomp_listener_of_its_own";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-listener");
    let bin = w.root.join("listener");
    let cc = Command::new("gcc")
        .args(["-O1", "-o", s(&bin)])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/support/supervise_listener.c"
        ))
        .arg("-lpthread")
        .status();
    if !cc.is_ok_and(|st| st.success()) {
        world::skip(T, "gcc could not build tests/support/supervise_listener.c");
        return;
    }
    let f = root_file(&w.data.join("f"));
    let control = Command::new(&bin).arg(&f).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&control.stdout), "chmod: ok\n");
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
        0o777
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();

    let out = w.run(&[], &[s(&bin), s(&f)]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "seccomp: EBUSY\n");
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
        0o644
    );
    w.assert_no_run_dirs();
}

#[test]
fn metadata_inside_the_worktree_and_tmpdir_works() {
    const T: &str = "metadata_inside_the_worktree_and_tmpdir_works";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-meta-in");
    // The worktree: the same ops as the escape test, each must succeed.
    let sub = w.wt.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let f = root_file(&sub.join("f"));
    let link = w.wt.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let before = snapshot(&f);
    let ops = metadata_ops(&sub, &f, "../wt/sub/f", &link);
    let r = probe(&w, &[], &as_refs(&ops));
    assert_eq!(r, vec!["ok"; ops.len()], "{ops:?}");
    let after = snapshot(&f);
    assert_eq!(after.mode & 0o7777, 0o755, "the last chmod wins");
    assert_eq!(after.mtime, (1, 0), "the last utime wins");
    assert_ne!(after.ctime, before.ctime);
    assert_eq!(
        after.xattrs,
        ["user.pwned"],
        "set, and both canaries removed"
    );
    // TMPDIR (created inside the run): chmod, utime, xattrs.
    let tmp: &[&[&str]] = &[
        &["chmod", "{TMPDIR}", "700"],
        &["utime_now", "{TMPDIR}"],
        &["cd", "{TMPDIR}"],
    ];
    let r = probe(&w, &[], tmp);
    assert_eq!(r, ["ok", "ok", "ok"]);
    // chattr inside works; fs-verity (immutable for good) is refused everywhere.
    let nodump = w.wt.join("nodump");
    std::fs::write(&nodump, b"x").unwrap();
    let flags: &[&[&str]] = &[
        &["chattr_nodump", s(&nodump)],
        &["enable_verity", s(&nodump)],
    ];
    assert_eq!(probe(&w, &[], flags), ["ok", "errno=EPERM"]);
    assert_eq!(inode_flags(&nodump) & 0x40, 0x40);
    // Objects no path reaches, made inside: an O_TMPFILE, a memfd.
    let anon: &[&[&str]] = &[
        &["fchmod_tmpfile", "{TMPDIR}", "640"],
        &["fchmod_tmpfile", s(&w.wt), "640"],
        &["fchmod_memfd", "640"],
    ];
    assert_eq!(probe(&w, &[], anon), ["ok", "ok", "ok"]);
    let out = sh(
        &w,
        "set -e; cd \"$TMPDIR\"; echo x > t; chmod 640 t; touch -d @1000000000 t; \
         python3 -c 'import os; os.setxattr(\"t\", \"user.k\", b\"v\"); os.removexattr(\"t\", \"user.k\"); os.chown(\"t\", 0, 0)'; \
         stat -c '%a %Y' t",
    );
    assert_eq!(out.trim(), "640 1000000000");
    // Set-id bits stay refused (the supervisor refuses them before performing).
    let setid: &[&[&str]] = &[&["chmod", s(&f), "4755"], &["chmod", s(&f), "2755"]];
    let r = probe(&w, &[], setid);
    assert_eq!(r, ["errno=EPERM", "errno=EPERM"]);
    assert_eq!(snapshot(&f).mode & 0o7000, 0);
    // Another owner's file inside: the kernel's own DAC still refuses.
    let theirs = w.wt.join("theirs");
    std::fs::write(&theirs, b"x").unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let before = snapshot(&theirs);
    let dac: &[&[&str]] = &[
        &["chmod", s(&theirs), "777"],
        &["chown", s(&theirs), "0", "0"],
        &["utime", s(&theirs)],
    ];
    let r = probe(&w, &[], dac);
    assert_eq!(r, ["errno=EPERM", "errno=EPERM", "errno=EPERM"]);
    assert_eq!(snapshot(&theirs), before);
}

/// A regular file the command opened for writing has its metadata set
/// without a look at its name (Landlock let it open it only beneath a
/// writable root). The caller's stdout, a root-owned canary outside, is
/// no such file inside: the command writes into lockrun's relay, a pipe
/// (`lockrun::stdio`), and the calls through its fd 1 and through
/// `/proc/self/fd/1` act on that pipe, never on the file. Judged from
/// outside: the canary's metadata and bytes. Both ways a run holds
/// metadata: the read-only mounts, and the supervisor.
#[test]
fn metadata_through_descriptors_open_for_writing() {
    const T: &str = "metadata_through_descriptors_open_for_writing";
    if !can_run(T) {
        return;
    }
    for supervised in [false, true] {
        metadata_through_descriptors(supervised);
    }
}

fn metadata_through_descriptors(supervised: bool) {
    let w = World::new("sv-meta-w");
    let canary = root_file(&w.data.join("out"));
    let before = snapshot(&canary);
    let other = root_file(&w.data.join("other"));
    let other_before = snapshot(&other);
    let results = w.wt.join("results");
    let audit = w.root.join("audit.jsonl");
    let mine = w.wt.join("mine");
    std::fs::write(&mine, b"x").unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ops: Vec<Vec<&str>> = vec![
        // The caller's stdout, a file outside the worktree.
        vec!["fchmod_fd", "1", "777"],
        vec!["fchown_fd", "1", "0", "0"],
        vec!["futime_fd", "1"],
        vec!["fsetxattr_fd", "1"],
        vec!["fchmod_w", "/proc/self/fd/1", "777"],
        vec!["fchown_w", "/proc/self/fd/1", "0", "0"],
        vec!["futime_w", "/proc/self/fd/1"],
        vec!["fsetxattr_w", "/proc/self/fd/1"],
        // Another file outside, opened with access mode 3 (no read, no
        // write): Landlock asks no right for it.
        vec!["fchmod_acc3", s(&other), "777"],
        // The control: a file in the worktree, opened for writing inside.
        vec!["fchmod_w", s(&mine), "640"],
        vec!["fchown_w", s(&mine), "0", "0"],
        vec!["futime_w", s(&mine)],
        vec!["fsetxattr_w", s(&mine)],
    ];
    let argv = probe_argv(&ops);
    let stdout = std::fs::OpenOptions::new()
        .append(true)
        .open(&canary)
        .unwrap();
    let mut cmd = w.cmd(&["--audit-log", s(&audit)], &argv);
    if supervised {
        cmd.env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1");
    }
    let out = cmd
        .env("PROBE_OUT", &results)
        .stdout(stdout)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = std::fs::read_to_string(&results).unwrap();
    let r: Vec<&str> = r.lines().collect();
    assert_eq!(r.len(), ops.len(), "{r:?}");
    // Through fd 1, the pipe's own answers: changed, but for a user
    // xattr, which only files and dirs take.
    assert_eq!(
        r[..8],
        [
            "ok",
            "ok",
            "ok",
            "errno=EPERM",
            "ok",
            "ok",
            "ok",
            "errno=EPERM"
        ],
        "{:?}",
        &ops[..8]
    );
    let refused = if supervised {
        "errno=EPERM"
    } else {
        "errno=EROFS"
    };
    assert_eq!(r[8], refused, "{:?} must be refused", ops[8]);
    assert_eq!(&r[9..], ["ok"; 4], "{:?}", &ops[9..]);
    assert_eq!(
        snapshot(&other),
        other_before,
        "the file opened with access mode 3 changed"
    );
    assert_eq!(
        snapshot(&canary),
        before,
        "the caller's stdout file changed"
    );
    assert_eq!(std::fs::read(&canary).unwrap(), b"canary");
    let after = snapshot(&mine);
    assert_eq!(after.mode & 0o7777, 0o640);
    assert_eq!(after.mtime, (1, 0));
    assert_eq!(after.xattrs, ["user.pwned"]);
    // Nothing was asked of the canary: no refusal names it.
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(!log.contains(s(&canary)), "{log}");
}

#[test]
fn everyday_tools_keep_working() {
    const T: &str = "everyday_tools_keep_working";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-tools");
    // A tar archive made outside: a file with mode 0750 and mtime 2001-09-09.
    let src = w.root.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("tool"), b"#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(src.join("tool"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let st = Command::new("touch")
        .args(["-d", "@1000000000", s(&src.join("tool"))])
        .status()
        .unwrap();
    assert!(st.success());
    let tar = w.root.join("a.tar");
    let st = Command::new("tar")
        .args(["cf", s(&tar), "-C", s(&src), "tool"])
        .status()
        .unwrap();
    assert!(st.success());
    let script = format!(
        "set -e
printf '#!/bin/sh\\necho script ran\\n' > run.sh
chmod +x run.sh
./run.sh
echo data > old; touch -d '2001-01-01 00:00:00 UTC' old
chmod 640 old; cp -p old copy
mkdir x; tar xpf {tar} -C x
python3 -c 'import os; os.chmod(\"old\", 0o600)'
git init -q repo; cd repo
printf '#!/bin/sh\\necho from git\\n' > exe; chmod 755 exe
git add exe
git -c user.name=t -c user.email=t@example.invalid commit -qm one
rm exe; git checkout -- exe; ./exe
git checkout -q -b other; chmod 644 exe
git -c user.name=t -c user.email=t@example.invalid commit -qam two
git checkout -q -; ./exe
",
        tar = s(&tar)
    );
    let out = sh(&w, &script);
    assert_eq!(out, "script ran\nfrom git\nfrom git\n");
    let m = |p: &str| std::fs::metadata(w.wt.join(p)).unwrap();
    assert_eq!(m("run.sh").permissions().mode() & 0o777, 0o755);
    assert_eq!(m("old").permissions().mode() & 0o777, 0o600);
    assert_eq!(m("old").mtime(), 978_307_200);
    assert_eq!(
        m("copy").permissions().mode() & 0o777,
        0o640,
        "cp -p keeps the mode"
    );
    assert_eq!(m("copy").mtime(), 978_307_200, "cp -p keeps the mtime");
    assert_eq!(m("x/tool").mtime(), 1_000_000_000, "tar keeps the mtime");
    assert_eq!(
        m("x/tool").permissions().mode() & 0o777,
        0o750,
        "tar keeps the mode"
    );
    assert_eq!(m("repo/exe").permissions().mode() & 0o111, 0o111);
}

/// Listeners outside the run, and a place for the command's own sockets.
struct UnixWorld {
    w: World,
    outside: PathBuf,
    docker: UnixListener,
    dgram: UnixDatagram,
}

impl UnixWorld {
    fn new(name: &str) -> Self {
        let w = World::new(name);
        let outside = w.root.join("outside");
        std::fs::create_dir(&outside).unwrap();
        let docker = UnixListener::bind(outside.join("docker.sock")).unwrap();
        docker.set_nonblocking(true).unwrap();
        let dgram = UnixDatagram::bind(outside.join("dg.sock")).unwrap();
        dgram.set_nonblocking(true).unwrap();
        // The command runs as root without CAP_DAC_OVERRIDE: let it write them.
        for p in ["docker.sock", "dg.sock"] {
            std::fs::set_permissions(outside.join(p), std::fs::Permissions::from_mode(0o777))
                .unwrap();
        }
        Self {
            w,
            outside,
            docker,
            dgram,
        }
    }

    /// Whether anything reached the outside listeners.
    fn reached(&self) -> bool {
        let mut buf = [0u8; 64];
        self.docker.accept().is_ok() || self.dgram.recv(&mut buf).is_ok()
    }
}

#[test]
fn unix_sockets_outside_are_refused_through_symlinks_dotdot_and_cwd() {
    const T: &str = "unix_sockets_outside_are_refused_through_symlinks_dotdot_and_cwd";
    if !can_run(T) {
        return;
    }
    let u = UnixWorld::new("sv-unix-out");
    let (wt, outside) = (&u.w.wt, &u.outside);
    std::os::unix::fs::symlink(outside.join("docker.sock"), wt.join("link.sock")).unwrap();
    std::os::unix::fs::symlink(outside.join("dg.sock"), wt.join("dg-link.sock")).unwrap();
    std::os::unix::fs::symlink(outside, wt.join("dir")).unwrap();
    let docker = outside.join("docker.sock");
    let dg = outside.join("dg.sock");
    let audit = u.w.root.join("audit.jsonl");
    let link = wt.join("link.sock");
    let via_dir = wt.join("dir/docker.sock");
    let dotdot = format!("{}/../outside/docker.sock", s(wt));
    let dg_link = wt.join("dg-link.sock");
    let ops: Vec<Vec<&str>> = vec![
        vec!["unix_stream", s(&link)],
        vec!["unix_stream", "link.sock"],
        vec!["unix_stream_nonblock", s(&link)],
        vec!["unix_stream", s(&via_dir)],
        vec!["unix_stream", "dir/docker.sock"],
        vec!["unix_stream", &dotdot],
        vec!["unix_stream", "../outside/docker.sock"],
        vec!["unix_stream", s(&docker)],
        vec!["unix_dgram", s(&dg_link)],
        vec!["unix_dgram", s(&dg)],
        vec!["unix_dgram_connect", "dg-link.sock"],
        // Relative to a cwd outside the worktree.
        vec!["cd", s(outside)],
        vec!["unix_stream", "docker.sock"],
        vec!["unix_dgram", "dg.sock"],
    ];
    let r = probe(&u.w, &["--audit-log", s(&audit)], &ops);
    let expected: Vec<&str> = ops
        .iter()
        .map(|o| if o[0] == "cd" { "ok" } else { "errno=EPERM" })
        .collect();
    assert_eq!(r, expected, "{ops:?}");
    assert!(!u.reached(), "an outside listener was reached");
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(
        log.contains("\"hook\":\"seccomp_connect_unix\"")
            && log.contains("\"hook\":\"seccomp_sendto_unix\""),
        "{log}"
    );
    // Control of the control: the listeners are real.
    std::os::unix::net::UnixStream::connect(&docker).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(u.docker.accept().is_ok());
}

#[test]
fn unix_sockets_inside_the_run_work() {
    const T: &str = "unix_sockets_inside_the_run_work";
    if !can_run(T) {
        return;
    }
    let u = UnixWorld::new("sv-unix-in");
    let wt = &u.w.wt;
    std::fs::create_dir(wt.join("d")).unwrap();
    let abs = wt.join("d/s.sock");
    let dg = wt.join("d/dg.sock");
    let ops: &[&[&str]] = &[
        &["serve_stream", s(&abs)],
        &["serve_stream", "d/rel.sock"],
        &["serve_stream_nonblock", s(&abs)],
        &["serve_dgram", s(&dg)],
        &["serve_dgram", "d/relative-dg.sock"],
        &["serve_dgram_connect", s(&dg)],
        &["serve_stream", "{TMPDIR}/t.sock"],
        &["serve_dgram", "{TMPDIR}/t-dg.sock"],
        &["cd", "{TMPDIR}"],
        &["serve_stream", "rel-in-tmp.sock"],
        &["serve_dgram_connect", "rel-in-tmp-dg.sock"],
    ];
    let r = probe(&u.w, &[], ops);
    assert_eq!(r, vec!["ok"; ops.len()], "{ops:?}");
    assert!(!u.reached());
}

/// The price of keeping inet connects un-notified: a unix address whose
/// length equals `sizeof(sockaddr_in)` or `sizeof(sockaddr_in6)` (16, 28) is
/// not seen by the supervisor, so the unix hooks refuse it whatever it names.
/// Python passes `2 + len(path) + 1`: paths of 13 and 25 bytes.
#[test]
fn unix_addresses_of_inet_length_are_refused() {
    const T: &str = "unix_addresses_of_inet_length_are_refused";
    if !can_run(T) {
        return;
    }
    let u = UnixWorld::new("sv-unix-len");
    let audit = u.w.root.join("audit.jsonl");
    let ops: &[&[&str]] = &[
        &["serve_dgram", "d-123456.sock"], // 13 bytes: addrlen 16
        &["serve_stream", "d-123456789012345678901.s"], // 25 bytes: addrlen 28
        &["serve_stream", "d-1234567.sock"], // 14 bytes: notified, works
    ];
    let r = probe(&u.w, &["--audit-log", s(&audit)], ops);
    assert_eq!(r, ["errno=EPERM", "errno=EPERM", "ok"]);
    let log = std::fs::read_to_string(&audit).unwrap();
    // The cgroup unix hooks' refusals, or before 6.7 the unix guard's.
    let (send, connect) = if lockrun::kernel::Features::get().unix_hooks {
        ("sendmsg_unix", "connect_unix")
    } else {
        ("unix_guard_send", "unix_guard_connect")
    };
    assert!(
        log.contains(&format!("\"hook\":\"{send}\""))
            && log.contains(&format!("\"hook\":\"{connect}\"")),
        "{log}"
    );
}

/// The filter is inherited: threads and child processes are supervised too,
/// and many notifications at once are answered (none lost, none deadlocked).
#[test]
fn threads_and_children_are_supervised() {
    const T: &str = "threads_and_children_are_supervised";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-threads");
    let out_f = root_file(&w.data.join("f"));
    let before = snapshot(&out_f);
    for i in 0..8 {
        std::fs::write(w.wt.join(format!("f{i}")), b"x").unwrap();
    }
    let script = format!(
        r#"
import errno, os, socket, threading
errs = []
def meta(i):
    p = "f%d" % i
    for n in range(100):
        os.chmod(p, 0o600 + (n % 8))
        os.utime(p, (n, n))
    try:
        os.chmod({out:?}, 0o777)
        errs.append("outside chmod allowed")
    except OSError as e:
        if e.errno != errno.EROFS:
            errs.append("outside chmod: %s" % e)
def sock(i):
    path = "s%d.sock" % i + "x" * 8
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(8)
    for _ in range(20):
        c = socket.socket(socket.AF_UNIX); c.connect(path)
        a, _ = srv.accept(); c.send(b"p"); assert a.recv(1) == b"p"; a.close(); c.close()
ts = [threading.Thread(target=meta, args=(i,)) for i in range(8)]
ts += [threading.Thread(target=sock, args=(i,)) for i in range(4)]
for t in ts: t.start()
pid = os.fork()
if pid == 0:
    try:
        os.chmod({out:?}, 0o777); os._exit(1)
    except OSError as e:
        os.chmod("f0", 0o644); os._exit(0 if e.errno == errno.EROFS else 2)
for t in ts: t.join()
_, st = os.waitpid(pid, 0)
print("ok" if not errs and st == 0 else "fail %r %r" % (errs, st))
"#,
        out = s(&out_f)
    );
    let out = w.run(&[], &[python3(), "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert_eq!(snapshot(&out_f), before);
    for i in 1..8 {
        let m = std::fs::metadata(w.wt.join(format!("f{i}"))).unwrap();
        assert_eq!(m.mtime(), 99);
        assert_eq!(m.permissions().mode() & 0o777, 0o603);
    }
}

/// If lockrun dies and its watchdog with it (the OOM killer takes both:
/// they share memory), nobody answers: the kernel fails notified syscalls
/// with ENOSYS (the listener is closed), inside and outside alike — here a
/// set-group-ID mode on a dir inside, which the supervisor would perform.
/// Closed, not open. What was never notified goes on as before: a metadata
/// change outside is the read-only mount's `EROFS`, a TCP connect to an
/// allowed endpoint reaches it.
#[test]
fn a_dead_supervisor_fails_closed() {
    const T: &str = "a_dead_supervisor_fails_closed";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-dead");
    let out_f = root_file(&w.data.join("f"));
    let before = snapshot(&out_f);
    let (ready, go, result) = (w.wt.join("ready"), w.wt.join("go"), w.wt.join("result"));
    // An allowed TCP endpoint: inet connects (addrlen 16) are never notified,
    // so they keep working without the supervisor (the pinned hooks judge them).
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allow = tcp.local_addr().unwrap().to_string();
    let script = format!(
        "touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; \
         python3 {probe} chmod {out} 777 \\; chmod {inside} 2700 \\; tcp {allow} > {result}.tmp; \
         mv {result}.tmp {result}",
        ready = s(&ready),
        go = s(&go),
        probe = PROBE,
        out = s(&out_f),
        inside = s(&w.wt),
        result = s(&result),
    );
    let mut lockrun = w
        .cmd(&["--allow-local", &allow], &["sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !ready.exists() {
        assert!(
            t.elapsed() < slow::patience(std::time::Duration::from_secs(20)),
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    watchdog::kill_watchdog_of(lockrun.id());
    lockrun.kill().unwrap();
    lockrun.wait().unwrap();
    std::fs::write(&go, b"").unwrap();
    let t = std::time::Instant::now();
    while !result.exists() {
        assert!(
            t.elapsed() < slow::patience(std::time::Duration::from_secs(20)),
            "the command never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = std::fs::read_to_string(&result).unwrap();
    // The orphaned run is reaped like any other (its cgroup, pins, run dir).
    let gc = Command::new(world::BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "0"])
        .output()
        .unwrap();
    assert!(gc.status.success(), "{gc:?}");
    assert_eq!(
        r.lines().collect::<Vec<_>>(),
        ["errno=EROFS", "errno=ENOSYS", "ok"]
    );
    assert!(tcp.accept().is_ok(), "the TCP control reached its listener");
    assert_eq!(snapshot(&out_f), before);
}

/// A task that is not dumpable (it runs a program it cannot read) refuses
/// ptrace-mode access to any but `CAP_SYS_PTRACE`. The supervisor runs
/// without capabilities and reads such a task's memory, descriptors and cwd
/// again with them: its calls inside work (judged from outside: a
/// set-group-ID dir by a relative path and by a descriptor, which the
/// supervisor performs, and a unix connect), and one outside is still
/// refused (a set-group-ID mode: the supervisor's `EPERM`; any other mode:
/// the read-only mount's `EROFS`), the canary unchanged.
#[test]
fn a_task_that_is_not_dumpable_is_still_supervised() {
    const T: &str = "a_task_that_is_not_dumpable_is_still_supervised";
    if !can_run(T) {
        return;
    }
    let w = World::new("sv-undumpable");
    // The interpreter, owned by nobody and execute-only: a uid 0 without
    // capabilities can run it, not read it.
    let py = w.root.join("python-x");
    std::fs::copy(python3(), &py).unwrap();
    std::os::unix::fs::chown(&py, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o111)).unwrap();
    let (d, e) = (w.wt.join("d"), w.wt.join("e"));
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&e).unwrap();
    let canary = root_file(&w.data.join("canary"));
    let before = snapshot(&canary);
    let mut argv = probe_argv(&[
        vec!["dumpable"],
        vec!["chmod", "d", "2750"], // a relative path: its cwd, its memory
        vec!["fchmod_ro", s(&e), "2710"], // its descriptor
        vec!["serve_stream", "s.sock"], // a unix connect, supervised too
        vec!["chmod", s(&canary), "2755"],
        vec!["chmod", s(&canary), "600"],
    ]);
    argv[0] = s(&py).to_owned();
    assert_eq!(
        probe_by(&w, &[], &argv),
        ["dumpable=0", "ok", "ok", "ok", "errno=EPERM", "errno=EROFS"]
    );
    assert_eq!(snapshot(&d).mode & 0o7777, 0o2750);
    assert_eq!(snapshot(&e).mode & 0o7777, 0o2710);
    assert_eq!(snapshot(&canary), before, "the canary's metadata changed");
}
