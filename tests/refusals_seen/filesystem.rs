//! Every filesystem refusal is seen also where Landlock logs none (ABI < 7,
//! Linux before 6.15): kernel audit's records of the run's refused calls,
//! told by a login uid of the run's own, stand in ([`lockrun::audit::syscalls`]).
//!
//! On a newer kernel the test build lowers the Landlock ABI a run
//! uses (`LOCKRUN_TEST_LANDLOCK_ABI=6`), so the fallback is what shows the
//! refusals; under an older kernel it is so anyway, at that kernel's ABI
//! (or lower, where the test process's own `LOCKRUN_TEST_LANDLOCK_ABI`
//! says so: `=2` shows Debian 12's here). Each refusal is judged
//! from outside too, beside a control inside the worktree that must work
//! and show nothing.
//!
//! A link or rename Landlock refuses with `EXDEV` (`fs.refer`: the file
//! would gain rights where it goes) is seen too, as Landlock's own logging
//! (ABI 7) shows it, beside a run at the kernel's own ABI where it is 7;
//! the `EXDEV` of a link or rename across two mounts or filesystems, which
//! the kernel gives before Landlock is asked, is not a refusal of the run
//! and is not seen at either. Where the run's mounts are read-only outside
//! its writable roots, each writable root is a mount of its own, and every
//! link or rename out of or into one is such an `EXDEV`: Landlock's own
//! are then met only where the supervisor holds metadata instead
//! (`LOCKRUN_TEST_NO_READ_ONLY_MOUNTS`), which those tests ([`told`]) use.
//!
//! The run's audit rules are the machine's: the tests also look that no
//! rule of a run's is left, after the run and after a killed lockrun and
//! `lockrun gc`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lockrun::audit::{refused_as, Event, Record};

use crate::support::{python, world};
use world::{assert_absent, s, skip, World, BIN};

/// The Landlock ABI the runs here use: 6 (no denial logging), or the
/// kernel's where it is lower, or what the test process's own
/// `LOCKRUN_TEST_LANDLOCK_ABI` lowers it to.
fn abi() -> u8 {
    world::landlock_abi().min(6)
}

/// The login uids of the kernel's audit rules of lockrun's shapes
/// (`AUDIT_LIST_RULES`: exit filter, always, the fields arch, auid and
/// exit, exit `-EACCES`, `-EPERM` or `-EXDEV`), one line each, with the
/// exit.
const RULES: &str = r#"
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
s.send(struct.pack("=IHHII", 16, 1013, 0x5, 1, 0))
done = False
while not done:
    d = s.recv(65536)
    off = 0
    while off + 16 <= len(d):
        n, t = struct.unpack_from("=IH", d, off)
        p = d[off + 16:off + n]
        if t == 2 and struct.unpack_from("=i", p)[0] != 0:
            raise SystemExit("AUDIT_LIST_RULES: errno %d" % -struct.unpack_from("=i", p)[0])
        if t == 3:
            done = True
        if t == 1013:
            flags, action, count = struct.unpack_from("=3I", p)
            fields = struct.unpack_from("=64I", p, 12 + 256)[:count]
            values = struct.unpack_from("=64I", p, 12 + 512)[:count]
            if flags & 7 == 4 and action == 2 and fields == (11, 9, 103) and values[2] in (0xfffffff3, 0xffffffff, 0xffffffee):
                print(values[1], 0x100000000 - values[2])
        off += (n + 3) & ~3
"#;

/// The login uids of lockrun's rules loaded now, each with its rule's
/// errno (`EACCES`: filesystem refusals; `EXDEV`: links and renames;
/// `EPERM`: reaches outside the run, at ABI 6).
fn rules() -> Vec<(u32, i32)> {
    let out = Command::new(python::python3())
        .args(["-c", RULES])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (uid, errno) = l.split_once(' ').unwrap();
            (uid.parse().unwrap(), errno.parse().unwrap())
        })
        .collect()
}

/// As root, or a loud skip (the kernel's audit rules and records).
fn root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip(test, "needs root (the kernel's audit rules and records)");
    false
}

/// A filesystem refusal: (path, access, comm).
type Seen = (String, Vec<String>, String);

/// The filesystem refusals of a run's log, and the run's login uid, as
/// its records name it.
fn refusals(log: &Path) -> (BTreeSet<Seen>, Option<u32>) {
    let mut seen = BTreeSet::new();
    let mut uid = None;
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let Record { event, .. } = serde_json::from_str(line).unwrap();
        if let Event::Filesystem(f) = event {
            assert!(f.pid > 0, "{f:?}");
            uid = f
                .raw
                .split_whitespace()
                .find_map(|w| w.strip_prefix("auid="))
                .and_then(|u| u.parse().ok());
            seen.insert((f.path.unwrap_or_default(), f.access, f.comm));
        }
    }
    (seen, uid)
}

fn one(path: &str, access: &str, comm: &str) -> Seen {
    (path.to_owned(), vec![access.to_owned()], comm.to_owned())
}

#[test]
fn below_abi_7_each_filesystem_refusal_is_seen_with_its_path_and_access() {
    if !root("below_abi_7_each_filesystem_refusal_is_seen_with_its_path_and_access") {
        return;
    }
    let w = World::new("fsseen");
    let data = s(&w.data).to_owned();
    std::fs::write(w.data.join("existing"), b"canary").unwrap();
    std::fs::write(w.data.join("ro-file"), b"canary").unwrap();
    let secret = w.data.join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key"), b"k").unwrap();
    std::fs::write(secret.join("run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(
        secret.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let usr_file = format!("/usr/lockrun-test-{}", std::process::id());
    let usr_dir = format!("/usr/lockrun-test-dir-{}", std::process::id());
    let _gone = world::RemovedAtEnd(vec![usr_file.clone().into(), usr_dir.clone().into()]);
    let log = w.root.join("audit.jsonl");
    // Six refusals, then the control inside the worktree, and an open of
    // /dev/stdout with O_CREAT, whose create check the kernel drops as the
    // file is there (a call that succeeds: no record).
    let script = format!(
        "echo x >> {data}/existing; echo x > {usr_file}; mkdir {usr_dir}; \
         cat {data}/secret/key; mv {data}/ro-file moved; {data}/secret/run.sh; \
         echo in > inside && mkdir d && mv inside d/ && cat d/inside; echo out > /dev/stdout"
    );
    let out = w
        .cmd(
            &["--audit-log", s(&log), "--deny-read", s(&secret)],
            &["sh", "-c", &script],
        )
        .env("LOCKRUN_TEST_LANDLOCK_ABI", abi().to_string())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The last command's status: the control and the open of stdout worked.
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in\nout\n", "{err}");

    // Each refusal, with its path and access in Landlock's words.
    let (seen, uid) = refusals(&log);
    let want: BTreeSet<_> = [
        one(&format!("{data}/existing"), "fs.write_file", "sh"),
        one("/usr", "fs.make_reg", "sh"),
        one("/usr", "fs.make_dir", "mkdir"),
        one(&format!("{data}/secret/key"), "fs.read_file", "cat"),
        // A rename out of a dir outside the writable paths, as Landlock
        // names it: every right the file would gain; the data dir holds a
        // denied path, so its own rule is the listing right alone, and that
        // is all it has.
        (data.clone(), lacking(&LISTING), "mv".to_owned()),
        // Then mv copies, and its removal of the source is the read-only
        // mount's refusal.
        one(&data, "fs.remove_file", "mv"),
        one(&format!("{data}/secret/run.sh"), "fs.execute", "sh"),
    ]
    .into();
    assert_eq!(seen, want, "{err}");
    // And in the summary.
    for said in [
        format!("write {data}/existing (sh)"),
        "create a file in /usr (sh)".to_owned(),
        "make a dir in /usr (mkdir)".to_owned(),
        format!("read {data}/secret/key (cat)"),
        format!("{} {data} (mv)", refused_as(&lacking(&LISTING))),
        format!("remove a file from {data} (mv)"),
        format!("run {data}/secret/run.sh (sh)"),
    ] {
        assert!(err.contains(&said), "{said} not in: {err}");
    }
    assert!(
        err.contains("lockrun: 7 filesystem accesses refused: "),
        "{err}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("are taken from kernel audit's records of the calls of the run's login uid"),
        "{text}"
    );
    // Judged from outside: nothing written, made or moved there (mv's
    // copy into the worktree is a read outside and a write inside, both
    // allowed; its source stays); the control inside was.
    assert_eq!(std::fs::read(w.data.join("existing")).unwrap(), b"canary");
    assert_absent(Path::new(&usr_file));
    assert_absent(Path::new(&usr_dir));
    assert_eq!(std::fs::read(w.data.join("ro-file")).unwrap(), b"canary");
    assert_eq!(std::fs::read(w.wt.join("d/inside")).unwrap(), b"in\n");

    // The run's rule went with it.
    let uid = uid.expect("the records name the run's login uid");
    assert!(uid >= 0x8000_0000, "{uid}");
    assert!(
        !rules().iter().any(|r| r.0 == uid),
        "the run's audit rule was left"
    );
}

/// Kills its lockrun (and the command, through the watchdog) if the test
/// ends before it did.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_lockruns_audit_rule_is_removed_by_gc() {
    if !root("a_killed_lockruns_audit_rule_is_removed_by_gc") {
        return;
    }
    let w = World::new("fsseengc");
    let uid_file = w.wt.join("uid");
    let lockrun = w
        .cmd(
            &[],
            &[
                "sh",
                "-c",
                "cat /proc/self/loginuid > uid.tmp && mv uid.tmp uid && exec sleep 60",
            ],
        )
        .env("LOCKRUN_TEST_LANDLOCK_ABI", abi().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lockrun = Killed(lockrun);
    // The command runs, with its login uid, once its rule is loaded.
    let started = Instant::now();
    let uid: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(&uid_file) {
            break text.trim().parse().unwrap();
        }
        assert!(
            lockrun.0.try_wait().unwrap().is_none(),
            "lockrun ended before the command started"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the command did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(uid >= 0x8000_0000, "{uid}");
    // One rule for its filesystem refusals, one for its links and renames
    // refused with EXDEV, and at ABI 6 one for its reaches outside the run
    // (signals, abstract sockets).
    let mut all = vec![(uid, libc::EACCES), (uid, libc::EXDEV)];
    if abi() >= 6 {
        all.insert(0, (uid, libc::EPERM));
    }
    let ours = |rules: Vec<(u32, i32)>| {
        let mut r: Vec<_> = rules.into_iter().filter(|r| r.0 == uid).collect();
        r.sort_unstable();
        r
    };
    assert_eq!(ours(rules()), all, "the run's rules are not loaded");
    // SIGKILL: no teardown runs, and the rules stay.
    lockrun.0.kill().unwrap();
    lockrun.0.wait().unwrap();
    assert_eq!(ours(rules()), all, "the rules are gone without gc");
    let gc = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&gc.stdout);
    assert!(gc.status.success(), "{gc:?}");
    let mut removed = vec![
        "its calls refused with EACCES",
        "its link and rename calls refused with EXDEV",
    ];
    if abi() >= 6 {
        removed.push("its signal and socket calls refused with EPERM");
    }
    for refused in removed {
        assert!(
            said.contains(&format!(
                "removed the kernel audit rule of login uid {uid} ({refused}): its run's cgroup \
                 is gone"
            )),
            "{said}"
        );
    }
    assert_eq!(ours(rules()), Vec::new(), "gc left the rules");
}

/// The kernel's own Landlock ABI (`landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`), whatever the test build lowers.
fn kernel_abi() -> i64 {
    let out = Command::new(python::python3())
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Landlock's filesystem rights at ABI 6 and 7, in its order (the bits'),
/// as its records name them: ABI 2 handles the first 14, 3 and 4 the
/// first 15 (`fs.truncate`), 5 all.
const RIGHTS: [&str; 16] = [
    "fs.execute",
    "fs.write_file",
    "fs.read_file",
    "fs.read_dir",
    "fs.remove_dir",
    "fs.remove_file",
    "fs.make_char",
    "fs.make_dir",
    "fs.make_reg",
    "fs.make_sock",
    "fs.make_fifo",
    "fs.make_block",
    "fs.make_sym",
    "fs.refer",
    "fs.truncate",
    "fs.ioctl_dev",
];

/// The ABI the runs below 7 use, as `LOCKRUN_TEST_LANDLOCK_ABI` gives it,
/// and whether a run at the kernel's own ABI, beside, is a reference: it
/// is 7, and the other handles the same rights (ABI 5 and 6 do).
fn abis() -> (String, bool) {
    let abi = abi();
    (abi.to_string(), kernel_abi() >= 7 && abi >= 5)
}

/// The rights a dir outside the writable paths holds (the default
/// preset's reading ones).
const READING: [&str; 3] = ["fs.execute", "fs.read_file", "fs.read_dir"];

/// The right a dir on the way down to a denied path holds, and every dir
/// beneath it, the denied ones too: listing.
const LISTING: [&str; 1] = ["fs.read_dir"];

/// Every right of [`RIGHTS`] but those in `has`: what Landlock names in a
/// dir that holds `has` when a file would come from there into the
/// worktree, which holds them all.
fn lacking(has: &[&str]) -> Vec<String> {
    let handled = match abi() {
        ..=2 => 14,
        3 | 4 => 15,
        _ => 16,
    };
    RIGHTS[..handled]
        .iter()
        .filter(|r| !has.contains(r))
        .map(|r| (*r).to_owned())
        .collect()
}

/// What a run showed of its refusals: the probe's lines, the filesystem
/// refusals of its audit log, the summary's line of them, and `lockrun
/// audit`'s account of them (its `filesystem:` part).
#[derive(Debug)]
struct Told {
    probe: Vec<String>,
    seen: BTreeSet<Seen>,
    summary: String,
    explained: String,
    uid: Option<u32>,
}

/// The run of `argv` in `w` with lockrun's arguments `extra`, at Landlock
/// ABI `abi`, or (`None`) the kernel's own, its log at `log`; its mounts
/// as the machine has them (the supervisor holding metadata), so that
/// Landlock, not a mount's edge, decides its links and renames.
fn told(w: &World, log: &Path, abi: Option<&str>, extra: &[&str], argv: &[String]) -> Told {
    let mut flags = vec!["--audit-log", s(log)];
    flags.extend(extra);
    let mut c = w.cmd(&flags, argv);
    c.env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1");
    match abi {
        Some(abi) => c.env("LOCKRUN_TEST_LANDLOCK_ABI", abi),
        None => c.env_remove("LOCKRUN_TEST_LANDLOCK_ABI"),
    };
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let (seen, uid) = refusals(log);
    let summary = err
        .lines()
        .find(|l| l.contains(" refused: ") && l.contains("filesystem access"))
        .unwrap_or_default()
        .to_owned();
    let audit = Command::new(BIN).args(["audit", s(log)]).output().unwrap();
    assert!(audit.status.success(), "{audit:?}");
    let audit = String::from_utf8_lossy(&audit.stdout).into_owned();
    let explained = audit
        .split_once("\n  filesystem:\n")
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or_default();
    Told {
        probe: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        seen,
        summary,
        explained,
        uid,
    }
}

/// A bind mount of a dir at another path: the same filesystem, another
/// mount. Unmounted when dropped.
struct Bound(std::path::PathBuf);

impl Bound {
    fn new(from: &Path, at: &Path) -> Self {
        std::fs::create_dir(at).unwrap();
        let ok = Command::new("mount")
            .args(["--bind", s(from), s(at)])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount --bind {} {}", from.display(), at.display());
        Self(at.to_path_buf())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// How many names the file at `path` has, judged from outside.
fn links(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).unwrap().nlink()
}

/// A hard link into the worktree from a dir outside the writable paths,
/// and one from a denied dir, are refused by Landlock with `EXDEV`
/// (`fs.refer`), unlogged below ABI 7: each is seen with the dir it came
/// from and the rights the file would gain, in the log, the summary and
/// `lockrun audit`'s note, as at ABI 7. A link or rename across two mounts
/// of one filesystem or across two filesystems gets `EXDEV` from the kernel
/// before Landlock is asked, and is seen at neither ABI; a link and renames
/// within the worktree work.
#[test]
fn below_abi_7_links_landlock_refuses_with_exdev_are_seen_as_at_abi_7_and_other_exdevs_are_not() {
    if !root(
        "below_abi_7_links_landlock_refuses_with_exdev_are_seen_as_at_abi_7_and_other_exdevs_are_not",
    ) {
        return;
    }
    let w = World::new("fsrefer");
    let data = s(&w.data).to_owned();
    let f = w.canary(&w.data.join("f"));
    let g = w.canary(&w.data.join("g"));
    let rw = w.root.join("rw");
    let secret = rw.join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let key = secret.join("key");
    std::fs::write(&key, b"k").unwrap();
    let sub = w.wt.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("m"), b"m").unwrap();
    std::fs::write(w.wt.join("n"), b"n").unwrap();
    // The data dir again, as another mount of its filesystem.
    let bound = Bound::new(&w.data, &w.root.join("bound"));
    let (bf, bg) = (bound.0.join("f"), bound.0.join("g"));
    let extra = ["--allow-write", s(&rw), "--deny-read", s(&secret)];
    let run = |abi: Option<&str>, tag: &str| {
        let into = |name: &str| format!("sub/{name}-{tag}");
        let (data_file, denied_file) = (into("f"), into("key"));
        let (linked_by_bind, renamed_by_bind) = (into("bf"), into("bg"));
        let (linked_inside, moved_up) = (into("n"), format!("m-{tag}"));
        let ops: [&[&str]; 9] = [
            // Refused by Landlock.
            &["link", s(&f), &data_file],
            &["link", s(&key), &denied_file],
            // Refused by the kernel before Landlock: two mounts, two
            // filesystems (the run's own /dev/shm).
            &["link", s(&bf), &linked_by_bind],
            &["rename", s(&bg), &renamed_by_bind],
            &["link", s(&f), "/dev/shm/f"],
            &["rename", "sub/m", "/dev/shm/m"],
            // Within the worktree, across its dirs.
            &["link", "n", &linked_inside],
            &["rename", "sub/m", &moved_up],
            &["rename", &moved_up, "sub/m"],
        ];
        let log = w.root.join(format!("refer-{tag}.jsonl"));
        told(&w, &log, abi, &extra, &world::probe_argv(&ops))
    };
    let (abi, reference) = abis();
    let below = run(Some(&abi), "6");
    let at_7 = reference.then(|| run(None, "7"));

    let mut want_probe = vec!["errno=EXDEV"; 6];
    want_probe.extend(["ok"; 3]);
    assert_eq!(below.probe, want_probe, "{below:?}");
    // Seen: the dir each link came from, with every right the file would
    // gain in the worktree (all but the reading ones outside; all but
    // listing in a denied dir), as Landlock names them.
    let python3 = || "python3".to_owned();
    let want: BTreeSet<Seen> = [
        (data.clone(), lacking(&READING), python3()),
        (s(&secret).to_owned(), lacking(&LISTING), python3()),
    ]
    .into();
    assert_eq!(below.seen, want, "{below:?}");
    assert!(
        below
            .summary
            .starts_with("lockrun: 2 filesystem accesses refused: ")
            && below.summary.contains(&format!(
                "{} {data} (python3)",
                refused_as(&lacking(&READING))
            )),
        "{below:?}"
    );
    for dir in [data.as_str(), s(&secret)] {
        assert!(
            below.explained.contains(&format!(
                "note: the command hard-linked or renamed a file from {dir} into a writable dir"
            )) && below.explained.contains("EXDEV"),
            "{below:?}"
        );
    }
    if let Some(at_7) = &at_7 {
        assert_eq!(at_7.probe, below.probe, "{at_7:?}");
        assert_eq!(at_7.seen, below.seen, "{at_7:?}");
        assert_eq!(at_7.summary, below.summary, "{at_7:?}");
        assert_eq!(at_7.explained, below.explained, "{at_7:?}");
    }

    // Judged from outside: no file got another name, nothing moved; the
    // links and renames within the worktree were made.
    assert_eq!((links(&f), links(&key)), (1, 1));
    assert_eq!(std::fs::read(&g).unwrap(), b"canary");
    for tag in ["6", "7"] {
        for name in ["f", "key", "bf", "bg"] {
            assert_absent(&sub.join(format!("{name}-{tag}")));
        }
    }
    assert_eq!(std::fs::read(sub.join("m")).unwrap(), b"m");
    assert_eq!(links(&w.wt.join("n")), if at_7.is_some() { 3 } else { 2 });
    assert_eq!(links(&sub.join("n-6")), links(&w.wt.join("n")));

    // The run's rules went with it.
    let uid = below.uid.expect("the records name the run's login uid");
    assert!(
        !rules().iter().any(|r| r.0 == uid),
        "the run's audit rules were left"
    );
    drop(bound);
}

/// Renames and hard links across dirs that Landlock refuses with `EACCES`
/// (a name it may not remove or make there): each is seen, in each dir
/// Landlock's own logging (ABI 7) names, with what it names there: out of
/// a dir outside the writable paths into the worktree, every right the
/// file would gain; out of one such dir into another on the same mount
/// (a shelf beside it: a link across mounts is the VFS's `EXDEV`, never
/// Landlock's), `fs.refer` in each and the name made; out of the worktree,
/// what it would make. Within one dir no file moves: what the rename
/// removes and makes.
#[test]
fn below_abi_7_moves_across_dirs_refused_with_eacces_are_named_as_at_abi_7() {
    if !root("below_abi_7_moves_across_dirs_refused_with_eacces_are_named_as_at_abi_7") {
        return;
    }
    let w = World::new("fsrefermoves");
    let data = s(&w.data).to_owned();
    let f = w.canary(&w.data.join("f"));
    let g = w.canary(&w.data.join("g"));
    let sub = w.wt.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("m"), b"m").unwrap();
    let shelf = w.root.join("shelf");
    std::fs::create_dir(&shelf).unwrap();
    let shelved = |tag: &str| format!("{}/f-{tag}", s(&shelf));
    let run = |abi: Option<&str>, tag: &str| {
        let (into_wt, into_shelf) = (format!("sub/g-{tag}"), shelved(tag));
        let (out_of_wt, within) = (format!("{data}/m-{tag}"), format!("{data}/h-{tag}"));
        let ops: [&[&str]; 4] = [
            &["rename", s(&g), &into_wt],
            &["link", s(&f), &into_shelf],
            &["rename", "sub/m", &out_of_wt],
            &["rename", s(&g), &within],
        ];
        let log = w.root.join(format!("moves-{tag}.jsonl"));
        told(&w, &log, abi, &[], &world::probe_argv(&ops))
    };
    let (abi, reference) = abis();
    let below = run(Some(&abi), "6");
    let at_7 = reference.then(|| run(None, "7"));

    assert_eq!(below.probe, ["errno=EACCES"; 4], "{below:?}");
    let named = |path: &str, access: &[&str]| -> Seen {
        (
            path.to_owned(),
            access.iter().map(|a| (*a).to_owned()).collect(),
            "python3".to_owned(),
        )
    };
    let want: BTreeSet<Seen> = [
        (data.clone(), lacking(&READING), "python3".to_owned()),
        named(&data, &["fs.refer"]),
        named(s(&shelf), &["fs.make_reg", "fs.refer"]),
        named(&data, &["fs.make_reg", "fs.refer"]),
        named(&data, &["fs.remove_file", "fs.make_reg"]),
    ]
    .into();
    assert_eq!(below.seen, want, "{below:?}");
    assert!(
        below
            .summary
            .starts_with("lockrun: 5 filesystem accesses refused: "),
        "{below:?}"
    );
    if let Some(at_7) = &at_7 {
        assert_eq!(at_7.probe, below.probe, "{at_7:?}");
        assert_eq!(at_7.seen, below.seen, "{at_7:?}");
        assert_eq!(at_7.summary, below.summary, "{at_7:?}");
        assert_eq!(at_7.explained, below.explained, "{at_7:?}");
    }
    // Judged from outside: nothing moved, nothing made.
    assert_eq!(std::fs::read(&g).unwrap(), b"canary");
    assert_eq!(std::fs::read(sub.join("m")).unwrap(), b"m");
    for tag in ["6", "7"] {
        assert_absent(&sub.join(format!("g-{tag}")));
        assert_absent(Path::new(&shelved(tag)));
        assert_absent(&w.data.join(format!("m-{tag}")));
        assert_absent(&w.data.join(format!("h-{tag}")));
    }
    let uid = below.uid.expect("the records name the run's login uid");
    assert!(
        !rules().iter().any(|r| r.0 == uid),
        "the run's audit rules were left"
    );
}

/// `git clone` of a local repository outside the writable paths: git's hard
/// link of an object is refused by Landlock (`EXDEV`), git copies instead,
/// and below ABI 7 the refusal is seen as at ABI 7: the summary names the
/// source's object dir, and `lockrun audit` says why git copied.
#[test]
fn below_abi_7_a_local_git_clone_s_refused_link_is_explained_as_at_abi_7() {
    if !root("below_abi_7_a_local_git_clone_s_refused_link_is_explained_as_at_abi_7") {
        return;
    }
    let w = World::new("fsrefergit");
    let src = w.data.join("src");
    std::fs::create_dir(&src).unwrap();
    let git = |dir: &Path, args: &[&str]| {
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
    let clone = |abi: Option<&str>, tag: &str| {
        let argv: Vec<String> = ["git", "clone", "-q", s(&src), &format!("copy-{tag}")]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        let log = w.root.join(format!("git-{tag}.jsonl"));
        told(&w, &log, abi, &[], &argv)
    };
    let (abi, reference) = abis();
    let below = clone(Some(&abi), "6");
    let at_7 = reference.then(|| clone(None, "7"));
    let objects = format!("{}/", src.join(".git/objects").display());
    assert_eq!(
        std::fs::read_to_string(w.wt.join("copy-6/file")).unwrap(),
        "content\n"
    );
    assert_eq!(below.seen.len(), 1, "{below:?}");
    assert!(
        below
            .seen
            .iter()
            .all(|(path, access, comm)| path.starts_with(&objects)
                && access.contains(&"fs.refer".to_owned())
                && comm == "git"),
        "{below:?}"
    );
    assert!(
        below.summary.contains(&objects) && below.summary.ends_with("(git)"),
        "{below:?}"
    );
    assert!(
        below.explained.contains(&format!(
            "note: the command hard-linked or renamed a file from {objects}"
        )) && below.explained.contains("EXDEV"),
        "{below:?}"
    );
    if let Some(at_7) = &at_7 {
        assert_eq!(at_7.seen, below.seen, "{at_7:?}");
        assert_eq!(at_7.summary, below.summary, "{at_7:?}");
        assert_eq!(at_7.explained, below.explained, "{at_7:?}");
    }
}
