#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;

use super::super::records::{refusal, At, Look};
use super::super::Reach;
use super::*;
use crate::audit::kernel::{parse_record, AuditRecord};

/// Every right of ABI 6 and 7; what the default preset grants outside
/// the writable paths; ABI 2's rights (no truncate, no device ioctl).
const ALL: u64 = (1 << 16) - 1;
const READ: u64 = 1 | 1 << 2 | 1 << 3;
const ABI_2: u64 = (1 << 14) - 1;
const WRITE_FILE: u64 = 1 << 1;
const MAKE_SOCK: u64 = 1 << 9;
/// What a link asks besides `fs.refer` (a file made in the new dir), and
/// a rename (a file removed from the old one, made in the new one).
const LINK: (u64, u64) = (0, MAKE_REG);
const RENAME: (u64, u64) = (REMOVE_FILE, MAKE_REG);

fn rights(from: u64, child: u64, to: u64, handled: u64) -> Rights {
    Rights {
        from,
        child,
        to,
        handled,
    }
}

#[test]
fn landlock_refuses_a_file_that_would_gain_rights_and_names_what_it_lacks() {
    let every = |from, to| blockers(rights(from, 0, to, ALL), LINK, false, false);
    // From a dir outside the writable paths into the worktree (`git
    // clone`'s link): the source named, with every right it lacks.
    assert_eq!(every(READ, ALL), Some((ALL & !READ, 0)));
    // From a denied dir (no rule at all), or a dir Landlock cannot grant
    // whole: every right.
    assert_eq!(every(0, ALL), Some((ALL, 0)));
    // Between two writable dirs: allowed (the EXDEV was not Landlock's).
    assert_eq!(every(ALL, ALL), None);
    // Into a dir lacking only fs.refer, losing rights: fs.refer, there.
    assert_eq!(every(ALL, ALL & !REFER), Some((0, REFER)));
    // Between two dirs granting all but fs.refer: nothing gained,
    // fs.refer named in each.
    assert_eq!(every(ALL & !REFER, ALL & !REFER), Some((REFER, REFER)));
    // ABI 2 handles fewer rights: fewer named.
    assert_eq!(
        blockers(rights(READ, 0, ABI_2, ABI_2), LINK, false, false),
        Some((ABI_2 & !READ, 0))
    );
}

#[test]
fn where_the_file_gains_nothing_what_the_call_asks_is_named_with_fs_refer() {
    // As Landlock 7 names them, refused with EACCES. A rename out of the
    // worktree into a read-only dir: the name made there.
    assert_eq!(
        blockers(rights(ALL, 0, READ, ALL), RENAME, false, false),
        Some((0, MAKE_REG | REFER))
    );
    // A link from one read-only dir into another: fs.refer where it came
    // from, the name made and fs.refer where it goes.
    assert_eq!(
        blockers(rights(READ, 0, READ, ALL), LINK, false, false),
        Some((REFER, MAKE_REG | REFER))
    );
    // A rename between two: the name removed, the name made.
    assert_eq!(
        blockers(rights(READ, 0, READ, ALL), RENAME, false, false),
        Some((REMOVE_FILE | REFER, MAKE_REG | REFER))
    );
    // Out of a read-only dir into the worktree: the file would gain, so
    // every right lacking is named, whatever the call asks.
    assert_eq!(
        blockers(rights(READ, 0, ALL, ALL), RENAME, false, false),
        Some((ALL & !READ, 0))
    );
}

#[test]
fn only_the_rights_that_matter_for_what_is_moved_are_compared() {
    let from = ALL & !MAKE_SOCK;
    // A file gains no file right: allowed, both holding fs.refer.
    assert_eq!(
        blockers(rights(from, 0, ALL, ALL), LINK, false, false),
        None
    );
    // A directory would gain making sockets in it.
    assert_eq!(
        blockers(rights(from, 0, ALL, ALL), LINK, true, false),
        Some((MAKE_SOCK, 0))
    );
    // The file's own rule counts for it: what it holds there it keeps,
    // and only fs.refer is then lacking.
    assert_eq!(
        blockers(rights(READ, FILE_RIGHTS, ALL, ALL), LINK, false, false),
        Some((REFER, 0))
    );
    // Into a dir granting less: the file loses writing, allowed; an
    // exchange moves each way, and the other file would gain it.
    assert_eq!(
        blockers(rights(ALL, 0, ALL & !WRITE_FILE, ALL), RENAME, false, false),
        None
    );
    assert_eq!(
        blockers(rights(ALL, 0, ALL & !WRITE_FILE, ALL), RENAME, false, true),
        Some((0, WRITE_FILE))
    );
}

#[test]
fn the_rights_at_a_path_are_those_of_the_rules_at_and_above_it() {
    let granted = Granted {
        handled: ALL,
        rules: vec![
            ("/t/data".into(), READ),
            ("/t/wt".into(), ALL),
            ("/t/wt/f".into(), FILE_RIGHTS),
            ("/t/x".into(), 1 << 20),
        ],
    };
    assert_eq!(granted.at(Path::new("/t/wt/sub/deeper")), ALL);
    assert_eq!(granted.at(Path::new("/t/data/sub")), READ);
    assert_eq!(granted.at(Path::new("/t/data")), READ);
    // By whole components; nothing above the rules; unhandled bits not.
    assert_eq!(granted.at(Path::new("/t/database")), 0);
    assert_eq!(granted.at(Path::new("/t")), 0);
    assert_eq!(granted.at(Path::new("/t/x")), 0);
    assert_eq!(granted.own(Path::new("/t/wt/f")), FILE_RIGHTS);
    assert_eq!(granted.own(Path::new("/t/wt")), ALL);
    assert_eq!(granted.own(Path::new("/t/wt/sub")), 0);
}

#[test]
fn rights_are_named_in_landlocks_order() {
    assert_eq!(names(REFER | 1), ["fs.execute", "fs.refer"]);
    assert_eq!(names(ALL).len(), 16);
    assert_eq!(names(0), Vec::<String>::new());
}

#[test]
fn a_mounts_device_is_read_from_mountinfo() {
    // This VM's, with a bind of the root filesystem's.
    let mountinfo = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                     27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                     46 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw\n";
    assert_eq!(mount_dev(mountinfo, 27), Some((254, 0)));
    assert_eq!(mount_dev(mountinfo, 46), Some((254, 0)));
    assert_eq!(mount_dev(mountinfo, 22), Some((0, 21)));
    assert_eq!(mount_dev(mountinfo, 2), None);
    assert_eq!(mount_dev("", 27), None);
}

/// The run's login uid in the records below.
const UID: u32 = 2_147_730_027;

/// One refused call's records, as this kernel (6.18, the run's Landlock
/// at ABI 6) wrote them: SYSCALL, CWD, then its PATH items.
fn group(syscall: &str, paths: &[&str]) -> Vec<AuditRecord> {
    let mut g = vec![
        parse_record(
            1300,
            format!(
                "audit(1796547737.567:518027): arch=c000003e {syscall} ppid=8751 pid=8758 \
                 auid={UID} uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 \
                 tty=(none) ses=489 comm=\"python3\" \
                 exe=\"/root/.pyenv/versions/3.11.7/bin/python3.11\" key=(null)"
            )
            .as_bytes(),
        )
        .unwrap(),
        parse_record(1307, b"audit(1796547737.567:518027): cwd=\"/tmp/lrx/wt\"").unwrap(),
    ];
    for (i, p) in paths.iter().enumerate() {
        g.push(
            parse_record(
                1302,
                format!(
                    "audit(1796547737.567:518027): item={i} {p} ouid=0 ogid=0 rdev=00:00 \
                     cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0"
                )
                .as_bytes(),
            )
            .unwrap(),
        );
    }
    g
}

/// What lockrun finds at each path (device fe:00 unless said), on which
/// mount; the descriptors the process holds.
#[derive(Default)]
struct Fake {
    found: BTreeMap<&'static str, (u64, u64, (u32, u32))>,
    fds: BTreeMap<i32, &'static str>,
}

impl Fake {
    /// The run's worktree and a data dir outside it, on mount 27.
    fn machine() -> Self {
        let mut f = Self::default();
        for (path, ino) in [
            ("/tmp/lrx/wt/sub", 10_060_981),
            ("/tmp/lrx/wt/sub2", 10_061_353),
            ("/tmp/lrx/data", 10_061_001),
            ("/tmp/lrx/data/f", 10_061_047),
            ("/tmp/lrx/rw/secret", 10_061_060),
            ("/tmp/lrx/rw/secret/key", 10_061_061),
        ] {
            f.found.insert(path, (ino, 27, (0xfe, 0)));
        }
        f
    }
}

impl Look for Fake {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        assert_eq!(pid, 8758);
        self.fds.get(&fd).map(|p| (*p).to_owned())
    }

    fn dev_ino(&self, _pid: u32, at: &At<'_>) -> Option<DevIno> {
        let path = match at {
            At::Root(p) => (*p).to_owned(),
            At::Fd(fd, rel) => format!("{}/{rel}", self.fds.get(fd)?),
        };
        let (ino, _, (major, minor)) = self.found.get(path.as_str())?;
        Some((*major, *minor, *ino))
    }

    fn found(&self, path: &str, _follow: bool) -> Option<Found> {
        let (ino, mount, (major, minor)) = self.found.get(path)?;
        Some(Found {
            dev_ino: (*major, *minor, *ino),
            mount: *mount,
            path: path.into(),
        })
    }
}

fn watch() -> Watch {
    Watch {
        login_uid: UID,
        writable: vec!["/tmp/lrx/wt".into(), "/dev/shm".into()],
        granted: Granted {
            handled: ALL,
            rules: vec![
                ("/tmp/lrx/data".into(), READ),
                ("/tmp/lrx/wt".into(), ALL),
                ("/dev/shm".into(), ALL),
            ],
        },
        cgroup: None,
        reach: Reach::default(),
    }
}

fn seen(g: &[AuditRecord], look: &Fake) -> Option<(Option<String>, Vec<String>)> {
    seen_by(&watch(), g, look)
}

fn seen_by(watch: &Watch, g: &[AuditRecord], look: &Fake) -> Option<(Option<String>, Vec<String>)> {
    let mut all = all_seen(watch, g, look);
    assert!(all.len() <= 1, "{all:?}");
    all.pop()
}

/// Each refusal the records tell, in order.
fn all_seen(watch: &Watch, g: &[AuditRecord], look: &Fake) -> Vec<(Option<String>, Vec<String>)> {
    refusal(g, watch, look)
        .into_iter()
        .map(|e| {
            assert_eq!((e.pid, e.comm.as_str()), (8758, "python3"));
            (e.path, e.access)
        })
        .collect()
}

fn parent(name: &str, ino: u64) -> String {
    format!("name=\"{name}\" inode={ino} dev=fe:00 mode=040755 nametype=PARENT")
}

fn normal(name: &str, ino: u64) -> String {
    format!("name=\"{name}\" inode={ino} dev=fe:00 mode=0100644 nametype=NORMAL")
}

/// A [`Look`] that finds nothing: [`Look::found`] as it is by default.
struct Blind;

impl Look for Blind {
    fn fd_path(&self, _: u32, _: i32) -> Option<String> {
        None
    }

    fn dev_ino(&self, _: u32, _: &At<'_>) -> Option<DevIno> {
        None
    }
}

/// What Landlock (ABI 7) names for a link out of `/tmp/lrx/data`.
#[allow(clippy::unnecessary_wraps)] // compared with what `seen` returns
fn from_data() -> Option<(Option<String>, Vec<String>)> {
    Some((Some("/tmp/lrx/data".into()), names(ALL & !READ)))
}

#[test]
fn a_link_landlock_refused_is_named_as_landlock_names_it() {
    let look = Fake::machine();
    // link("/tmp/lrx/data/f", "sub/f"), cwd the worktree.
    let link = group(
        "syscall=86 success=no exit=-18 a0=7f8a0cf12270 a1=7f8a0cf13a10 a2=0 a3=7f8a0d02ea18 \
         items=2",
        &[
            &parent("sub/", 10_060_981),
            &normal("/tmp/lrx/data/f", 10_061_047),
        ],
    );
    assert_eq!(seen(&link, &look), from_data());
    // linkat(AT_FDCWD, "../data/f", AT_FDCWD, "sub2/x", 0).
    let linkat = group(
        "syscall=265 success=no exit=-18 a0=ffffff9c a1=7f8a0cf12270 a2=ffffff9c \
         a3=7f8a0cf13a10 items=2",
        &[
            &parent("sub2/", 10_061_353),
            &normal("../data/f", 10_061_047),
        ],
    );
    assert_eq!(seen(&linkat, &look), from_data());
    // linkat(3, "f", AT_FDCWD, "/tmp/lrx/wt/sub/y", 0), 3 the data dir.
    let at_fd = group(
        "syscall=265 success=no exit=-18 a0=3 a1=7f8a0d751c10 a2=ffffff9c a3=7f8a0caa9510 \
         items=2",
        &[
            &parent("/tmp/lrx/wt/sub/", 10_060_981),
            &normal("f", 10_061_047),
        ],
    );
    let mut holds = Fake::machine();
    holds.fds.insert(3, "/tmp/lrx/data");
    assert_eq!(seen(&at_fd, &holds), from_data());
    // The process gone, its descriptor with it: not named.
    assert_eq!(seen(&at_fd, &look), None);
}

#[test]
fn exdev_across_mounts_or_between_writable_dirs_is_not_a_refusal() {
    let link = |old: &str, ino: u64| {
        group(
            "syscall=86 success=no exit=-18 a0=7f8a0cf12270 a1=7f8a0cf13a10 a2=0 a3=0 items=2",
            &[&parent("sub/", 10_060_981), &normal(old, ino)],
        )
    };
    // The data dir bound at /tmp/lrx/bound: its file, another mount.
    let mut look = Fake::machine();
    look.found
        .insert("/tmp/lrx/bound/f", (10_061_047, 46, (0xfe, 0)));
    assert_eq!(seen(&link("/tmp/lrx/bound/f", 10_061_047), &look), None);
    // The same on one mount: Landlock's (no rule grants anything there).
    look.found
        .insert("/tmp/lrx/bound/f", (10_061_047, 27, (0xfe, 0)));
    assert_eq!(
        seen(&link("/tmp/lrx/bound/f", 10_061_047), &look),
        Some((Some("/tmp/lrx/bound".into()), names(ALL)))
    );
    // rename("sub/m", "/dev/shm/m"): another filesystem.
    let mut look = Fake::machine();
    look.found.insert("/dev/shm", (1, 31, (0, 27)));
    let to_shm = group(
        "syscall=82 success=no exit=-18 a0=7f8a0cf13a10 a1=7f8a0cf12270 a2=0 a3=0 items=2",
        &[
            "name=\"/dev/shm/\" inode=1 dev=00:1b mode=041777 nametype=PARENT",
            &parent("sub/", 10_060_981),
        ],
    );
    assert_eq!(seen(&to_shm, &look), None);
    // Between two writable dirs of one mount (a filesystem's own EXDEV:
    // btrfs subvolumes, an overlayfs dir): Landlock allowed it.
    let within = group(
        "syscall=316 success=no exit=-18 a0=ffffff9c a1=7f a2=ffffff9c a3=7f items=2",
        &[&parent("sub2/", 10_061_353), &parent("sub/", 10_060_981)],
    );
    assert_eq!(seen(&within, &look), None);
    // Within one directory: no reparenting.
    let same = group(
        "syscall=82 success=no exit=-18 a0=7f a1=7f a2=0 a3=0 items=2",
        &[&parent("sub/", 10_060_981), &parent("sub/", 10_060_981)],
    );
    assert_eq!(seen(&same, &look), None);
}

#[test]
fn exdev_whose_names_changed_or_were_not_all_read_is_not_named() {
    let link = group(
        "syscall=86 success=no exit=-18 a0=7f a1=7f a2=0 a3=0 items=2",
        &[
            &parent("sub/", 10_060_981),
            &normal("/tmp/lrx/data/f", 10_061_047),
        ],
    );
    // Another file there now.
    let mut look = Fake::machine();
    look.found.insert("/tmp/lrx/data/f", (99, 27, (0xfe, 0)));
    assert_eq!(seen(&link, &look), None);
    // Gone.
    look.found.remove("/tmp/lrx/data/f");
    assert_eq!(seen(&link, &look), None);
    // A PATH record lost on its way.
    assert_eq!(seen(&link[..3], &Fake::machine()), None);
    // Nothing is found by a Look that does not look (the default).
    assert!(refusal(&link, &watch(), &Blind).is_empty());
    // Another errno of the same calls is not this rule's.
    let eperm = group(
        "syscall=86 success=no exit=-1 a0=7f a1=7f a2=0 a3=0 items=2",
        &[
            &parent("sub/", 10_060_981),
            &normal("/tmp/lrx/data/f", 10_061_047),
        ],
    );
    assert_eq!(seen(&eperm, &Fake::machine()), None);
}

#[test]
fn a_renames_old_dir_is_the_second_named_and_may_lack_only_fs_refer() {
    // renameat2(AT_FDCWD, "/tmp/lrx/rw/secret/key", AT_FDCWD, "sub/key", 0)
    // out of a dir granted every right but fs.refer: the kernel named the
    // new name's dir first; only fs.refer is named, there.
    let rename = group(
        "syscall=316 success=no exit=-18 a0=ffffff9c a1=7f a2=ffffff9c a3=7f a4=0 items=2",
        &[
            &parent("sub/", 10_060_981),
            &parent("/tmp/lrx/rw/secret/", 10_061_060),
        ],
    );
    let mut w = watch();
    w.granted
        .rules
        .push(("/tmp/lrx/rw/secret".into(), ALL & !REFER));
    let refer = Some((Some("/tmp/lrx/rw/secret".into()), names(REFER)));
    assert_eq!(seen_by(&w, &rename, &Fake::machine()), refer);
    // Denied there (no rule): every right.
    assert_eq!(
        seen(&rename, &Fake::machine()),
        Some((Some("/tmp/lrx/rw/secret".into()), names(ALL)))
    );
}

#[test]
fn a_move_across_dirs_refused_with_eacces_is_named_in_each_dir_landlock_names() {
    let look = Fake::machine();
    let mut w = watch();
    w.granted.rules.push(("/usr".into(), READ));
    // link("/tmp/lrx/data/f", "/usr/lrx-f"): a record for each dir, the
    // one it came from first.
    let link = group(
        "syscall=86 success=no exit=-13 a0=7f a1=7f a2=0 a3=0 items=2",
        &[
            &parent("/usr/", 246_973),
            &normal("/tmp/lrx/data/f", 10_061_047),
        ],
    );
    assert_eq!(
        all_seen(&w, &link, &look),
        [
            (Some("/tmp/lrx/data".into()), names(REFER)),
            (Some("/usr".into()), names(MAKE_REG | REFER)),
        ]
    );
    // rename("/tmp/lrx/data/g", "sub/g"): the file would gain every right
    // the worktree holds, named where it came from.
    let rename = group(
        "syscall=82 success=no exit=-13 a0=7f a1=7f a2=0 a3=0 items=2",
        &[
            &parent("sub/", 10_060_981),
            &parent("/tmp/lrx/data/", 10_061_001),
        ],
    );
    assert_eq!(
        all_seen(&w, &rename, &look),
        [(Some("/tmp/lrx/data".into()), names(ALL & !READ))]
    );
    // Between two writable dirs Landlock allows it: the permission bits
    // refused (a sticky dir, a dir of mode 0555), named as before, by the
    // name removed where it came from.
    let within = group(
        "syscall=82 success=no exit=-13 a0=7f a1=7f a2=0 a3=0 items=2",
        &[&parent("sub2/", 10_061_353), &parent("sub/", 10_060_981)],
    );
    assert_eq!(
        all_seen(&w, &within, &look),
        [(
            Some("/tmp/lrx/wt/sub".into()),
            vec!["fs.remove_file".to_owned()]
        )]
    );
    // Within one dir outside: what the rename removes and makes there.
    let same = group(
        "syscall=82 success=no exit=-13 a0=7f a1=7f a2=0 a3=0 items=2",
        &[
            &parent("/tmp/lrx/data/", 10_061_001),
            &parent("/tmp/lrx/data/", 10_061_001),
        ],
    );
    assert_eq!(
        all_seen(&w, &same, &look),
        [(
            Some("/tmp/lrx/data".into()),
            vec!["fs.remove_file".to_owned(), "fs.make_reg".to_owned()]
        )]
    );
}
