#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::audit::kernel::parse_record;

/// The run's login uid in the records below.
const UID: u32 = 2_147_546_430;

/// The records of one refused call, as this kernel (6.18, the run's
/// Landlock at ABI 6) wrote them: SYSCALL, CWD, then its PATH items.
fn group(syscall: &str, cwd: &str, paths: &[&str]) -> Vec<AuditRecord> {
    let mut g = vec![parse_record(
        SYSCALL,
        format!(
            "audit(1796536137.506:124681): arch=c000003e {syscall} ppid=8503 pid=8545 \
             auid={UID} uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=8 \
             comm=\"python3\" exe=\"/usr/bin/python3.11\" key=(null)"
        )
        .as_bytes(),
    )
    .unwrap()];
    g.push(
        parse_record(
            CWD,
            format!("audit(1796536137.506:124681): cwd=\"{cwd}\"").as_bytes(),
        )
        .unwrap(),
    );
    for (i, p) in paths.iter().enumerate() {
        g.push(
            parse_record(
                PATH,
                format!(
                    "audit(1796536137.506:124681): item={i} {p} ouid=0 ogid=0 rdev=00:00 \
                     cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0"
                )
                .as_bytes(),
            )
            .unwrap(),
        );
    }
    g
}

fn parent(name: &str, ino: u64) -> String {
    format!("name=\"{name}\" inode={ino} dev=fe:00 mode=040755 nametype=PARENT")
}

fn normal(name: &str, ino: u64, mode: &str) -> String {
    format!("name=\"{name}\" inode={ino} dev=fe:00 mode={mode} nametype=NORMAL")
}

/// What the process shows through `/proc`, or, when it is gone, nothing.
#[derive(Default)]
struct Fake {
    fds: BTreeMap<i32, String>,
    inodes: BTreeMap<String, u64>,
}

impl Look for Fake {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        assert_eq!(pid, 8545);
        self.fds.get(&fd).cloned()
    }

    fn dev_ino(&self, pid: u32, at: &At<'_>) -> Option<DevIno> {
        assert_eq!(pid, 8545);
        let path = match at {
            At::Root(p) => clean(p),
            At::Fd(fd, rel) => clean(&format!("{}/{rel}", self.fds.get(fd)?)),
        };
        self.inodes.get(&path).map(|ino| (0xfe, 0, *ino))
    }
}

fn watch() -> Watch {
    Watch {
        login_uid: UID,
        writable: vec![PathBuf::from("/w/wt"), PathBuf::from("/tmp/run")],
        granted: super::super::refer::Granted::default(),
        cgroup: None,
        reach: super::super::Reach::default(),
    }
}

/// The path and access of the refusal, if one.
fn seen(g: &[AuditRecord], look: &Fake) -> Option<(Option<String>, Vec<String>)> {
    let mut events = refusal(g, &watch(), look);
    assert!(events.len() <= 1, "{events:?}");
    events.pop().map(|e| {
        assert_eq!((e.pid, e.comm.as_str()), (8545, "python3"));
        (e.path, e.access)
    })
}

#[allow(clippy::unnecessary_wraps)] // compared with what `seen` returns
fn said(path: &str, access: &[&str]) -> Option<(Option<String>, Vec<String>)> {
    Some((
        Some(path.to_owned()),
        access.iter().map(|a| (*a).to_owned()).collect(),
    ))
}

const GONE: &Fake = &Fake {
    fds: BTreeMap::new(),
    inodes: BTreeMap::new(),
};

#[test]
fn an_open_names_the_file_it_found_or_the_directory_it_would_make_it_in() {
    let at = "syscall=257 success=no exit=-13 a0=ffffff9c a1=55fd3aa540e8";
    // `echo > /usr/newfile`: O_WRONLY|O_CREAT|O_TRUNC of a file not there.
    let g = group(
        &format!("{at} a2=241 a3=1b6 items=1"),
        "/w/wt",
        &[&parent("/usr/", 246_973)],
    );
    assert_eq!(seen(&g, GONE), said("/usr", &["fs.make_reg"]));
    // `cd /etc; cat shadow`: relative, joined with the working directory.
    let g = group(
        &format!("{at} a2=0 a3=0 items=1"),
        "/etc",
        &[&normal("shadow", 10_061_396, "0100000")],
    );
    assert_eq!(seen(&g, GONE), said("/etc/shadow", &["fs.read_file"]));
    // `echo x >> data/f` (O_WRONLY|O_CREAT|O_APPEND) of a file there.
    let g = group(
        &format!("{at} a2=441 a3=1b6 items=1"),
        "/etc",
        &[&normal("/w/data/f", 10_061_362, "0100644")],
    );
    assert_eq!(seen(&g, GONE), said("/w/data/f", &["fs.write_file"]));
    // O_RDWR|O_TRUNC: each right the open asks for.
    let g = group(
        &format!("{at} a2=202 a3=0 items=1"),
        "/",
        &[&normal("/w/data/f", 10_061_362, "0100644")],
    );
    assert_eq!(
        seen(&g, GONE),
        said(
            "/w/data/f",
            &["fs.read_file", "fs.write_file", "fs.truncate"]
        )
    );
    // opendir: a directory is listed.
    let g = group(
        &format!("{at} a2=90800 a3=0 items=1"),
        "/w/wt",
        &[&normal("/w/data/secret", 10_061_445, "040755")],
    );
    assert_eq!(seen(&g, GONE), said("/w/data/secret", &["fs.read_dir"]));
    // `echo in > inside` in /etc: the kernel printed the working directory.
    let g = group(
        &format!("{at} a2=241 a3=1b6 items=1"),
        "/etc",
        &[&parent("/etc", 19)],
    );
    assert_eq!(seen(&g, GONE), said("/etc", &["fs.make_reg"]));
    // O_TMPFILE|O_WRONLY: a file made in the directory.
    let g = group(
        &format!("{at} a2=490001 a3=1ff items=1"),
        "/w/wt",
        &["name=\"/w/data\" nametype=UNKNOWN"],
    );
    assert_eq!(seen(&g, GONE), said("/w/data", &["fs.make_reg"]));
}

#[test]
fn making_and_removing_names_the_directory_as_landlock_does() {
    let cases: [(&str, &[String], (&str, &str)); 8] = [
        // mkdir /usr/dd
        (
            "syscall=83 success=no exit=-13 a0=7ffee290a9aa a1=1ff a2=0 a3=0 items=1",
            &[parent("/usr/", 246_973)],
            ("/usr", "fs.make_dir"),
        ),
        // mkfifo: mknodat(AT_FDCWD, …, S_IFIFO|0666)
        (
            "syscall=259 success=no exit=-13 a0=ffffff9c a1=7f9d84720790 a2=11b6 a3=0 items=1",
            &[parent("/w/data/", 10_061_346)],
            ("/w/data", "fs.make_fifo"),
        ),
        // mknod of a socket
        (
            "syscall=133 success=no exit=-13 a0=7f9d84720790 a1=c1b6 a2=0 a3=0 items=1",
            &[parent("/w/data/", 10_061_346)],
            ("/w/data", "fs.make_sock"),
        ),
        // symlink("x", data/sym): the target is a name never looked up
        (
            "syscall=88 success=no exit=-13 a0=7f9d85151f70 a1=7f9d84720790 a2=0 a3=0 items=2",
            &[
                parent("/w/data/", 10_061_346),
                "name=\"x\" nametype=UNKNOWN".to_owned(),
            ],
            ("/w/data", "fs.make_sym"),
        ),
        // link(data/tfile, data/tlink): the file's type, in the new name's directory
        (
            "syscall=86 success=no exit=-13 a0=7f9d84720790 a1=7f9d84490e90 a2=0 a3=0 items=2",
            &[
                parent("/w/data/", 10_061_346),
                normal("/w/data/tfile", 10_061_450, "0100644"),
            ],
            ("/w/data", "fs.make_reg"),
        ),
        // rmdir data/rodir/sub
        (
            "syscall=84 success=no exit=-13 a0=7f9d84720790 a1=0 a2=0 a3=0 items=1",
            &[parent("/w/data/rodir/", 10_061_446)],
            ("/w/data/rodir", "fs.remove_dir"),
        ),
        // unlink data/tfile
        (
            "syscall=87 success=no exit=-13 a0=7f9d84720790 a1=0 a2=0 a3=0 items=1",
            &[parent("/w/data/", 10_061_346)],
            ("/w/data", "fs.remove_file"),
        ),
        // unlinkat(AT_FDCWD, …, AT_REMOVEDIR)
        (
            "syscall=263 success=no exit=-13 a0=ffffffffffffff9c a1=7f9d84487fe0 a2=200 a3=0 items=1",
            &[parent("/w/data/", 10_061_346)],
            ("/w/data", "fs.remove_dir"),
        ),
    ];
    for (syscall, paths, (path, access)) in cases {
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let g = group(syscall, "/w/wt", &paths);
        assert_eq!(seen(&g, GONE), said(path, &[access]), "{syscall}");
    }
}

#[test]
fn exec_and_truncate_name_the_file() {
    let exec = group(
        "syscall=59 success=no exit=-13 a0=7f9d84491c50 a1=7f9d848c4700 a2=7ffe69729560 a3=0 items=1",
        "/w/wt",
        &[&normal("/w/data/secret/run.sh", 10_061_448, "0100755")],
    );
    assert_eq!(
        seen(&exec, GONE),
        said("/w/data/secret/run.sh", &["fs.execute"])
    );
    let truncate = group(
        "syscall=76 success=no exit=-13 a0=7f9d84720790 a1=0 a2=0 a3=0 items=1",
        "/w/wt",
        &[&normal("../data/tfile", 10_061_450, "0100644")],
    );
    assert_eq!(
        seen(&truncate, GONE),
        said("/w/data/tfile", &["fs.truncate"])
    );
    // ftruncate names no file: the descriptor's, while the process holds it.
    let ftruncate = group(
        "syscall=77 success=no exit=-13 a0=5 a1=0 a2=0 a3=0 items=0",
        "/w/wt",
        &[],
    );
    let mut alive = Fake::default();
    alive.fds.insert(5, "/w/data/tfile".into());
    assert_eq!(
        seen(&ftruncate, &alive),
        said("/w/data/tfile", &["fs.truncate"])
    );
    assert_eq!(
        seen(&ftruncate, GONE),
        Some((None, vec!["fs.truncate".to_owned()]))
    );
}

#[test]
fn a_rename_names_the_directory_outside_the_writable_paths() {
    let renameat2 = "syscall=316 success=no exit=-13 a0=ffffff9c a1=7ffefbe7d995 a2=ffffff9c \
                     a3=7ffefbe7d9af items=2";
    // `mv /w/data/ro-file moved` in the worktree: the kernel named the new
    // name's directory first (printed as the working directory: `moved`
    // has none of its own).
    let out = group(
        renameat2,
        "/w/wt",
        &[
            &parent("/w/wt", 10_061_314),
            &parent("/w/data/", 10_061_346),
        ],
    );
    assert_eq!(seen(&out, GONE), said("/w/data", &["fs.remove_file"]));
    // `rename("mine", "/w/data/mine")`: into it.
    let into = group(
        "syscall=82 success=no exit=-13 a0=7f9d84487e00 a1=7f9d84720790 a2=0 a3=0 items=2",
        "/w/wt",
        &[
            &parent("/w/data/", 10_061_346),
            &parent("/w/wt", 10_061_314),
        ],
    );
    assert_eq!(seen(&into, GONE), said("/w/data", &["fs.make_reg"]));
    // Within one directory: what the rename removes and makes there.
    let within = group(
        "syscall=82 success=no exit=-13 a0=7f9d84720790 a1=7f9d84490e90 a2=0 a3=0 items=2",
        "/w/wt",
        &[
            &parent("/w/data/", 10_061_346),
            &parent("/w/data/", 10_061_346),
        ],
    );
    assert_eq!(
        seen(&within, GONE),
        said("/w/data", &["fs.remove_file", "fs.make_reg"])
    );
    // Between two directories outside: the source's.
    let across = group(
        renameat2,
        "/w/wt",
        &[&parent("/etc/", 19), &parent("/usr/bin/", 246_974)],
    );
    assert_eq!(seen(&across, GONE), said("/usr/bin", &["fs.remove_file"]));
}

#[test]
fn a_name_relative_to_a_descriptor_is_found_through_it_and_checked() {
    let mut alive = Fake::default();
    alive.fds.insert(3, "/w/data/rodir".into());
    alive.inodes.insert("/w/data/rodir".into(), 10_061_446);
    alive.inodes.insert("/w/data/rodir/sub".into(), 10_061_447);
    alive
        .inodes
        .insert("/w/data/rodir/sub/f".into(), 10_061_449);
    let at = "success=no exit=-13 a0=3 a1=7f9d84487fe0";
    // unlinkat(3, "sub/f", 0): the directory part of the name.
    let unlink = group(
        &format!("syscall=263 {at} a2=0 a3=0 items=1"),
        "/w/wt",
        &[&parent("sub/", 10_061_447)],
    );
    assert_eq!(
        seen(&unlink, &alive),
        said("/w/data/rodir/sub", &["fs.remove_file"])
    );
    // unlinkat(3, "sub", AT_REMOVEDIR): the kernel printed the working
    // directory, but it is the descriptor's (its inode says so).
    let rmdir = group(
        &format!("syscall=263 {at} a2=200 a3=0 items=1"),
        "/w/wt",
        &[&parent("/w/wt", 10_061_446)],
    );
    assert_eq!(
        seen(&rmdir, &alive),
        said("/w/data/rodir", &["fs.remove_dir"])
    );
    // openat(3, "sub/f", O_WRONLY|O_CLOEXEC)
    let write = group(
        &format!("syscall=257 {at} a2=80001 a3=0 items=1"),
        "/w/wt",
        &[&normal("sub/f", 10_061_449, "0100644")],
    );
    assert_eq!(
        seen(&write, &alive),
        said("/w/data/rodir/sub/f", &["fs.write_file"])
    );
    // The process is gone, or descriptor 3 is another directory now: the
    // path is not named, rather than named wrong.
    assert_eq!(
        seen(&write, GONE),
        Some((None, vec!["fs.write_file".to_owned()]))
    );
    let mut moved = Fake::default();
    moved.fds.insert(3, "/w/wt".into());
    moved.inodes.insert("/w/wt/sub/f".into(), 99);
    assert_eq!(
        seen(&write, &moved),
        Some((None, vec!["fs.write_file".to_owned()]))
    );
}

#[test]
fn other_calls_are_named_by_number_and_questions_and_calls_naming_no_file_left_out() {
    // A stat refused on the way (search permission): by its number.
    let stat = group(
        "syscall=262 success=no exit=-13 a0=ffffff9c a1=7f0 a2=7ff a3=0 items=1",
        "/w/wt",
        &["name=\"/root/x/y\" nametype=UNKNOWN"],
    );
    assert_eq!(seen(&stat, GONE), said("/root/x/y", &["syscall.262"]));
    // access(2), faccessat(2): a question.
    for nr in [21, 269, 439] {
        let q = group(
            &format!("syscall={nr} success=no exit=-13 a0=ffffff9c a1=7f0 a2=2 a3=0 items=1"),
            "/w/wt",
            &[&normal("/w/data/f", 1, "0100644")],
        );
        assert_eq!(seen(&q, GONE), None, "{nr}");
    }
    // bind to port 80: no file named.
    let bind = group(
        "syscall=49 success=no exit=-13 a0=3 a1=7ffd a2=10 a3=0 items=0",
        "/w/wt",
        &[],
    );
    assert_eq!(seen(&bind, GONE), None);
}

#[test]
fn only_the_watched_runs_refused_calls_are_taken() {
    let mk = |syscall: &str| group(syscall, "/w/wt", &[&parent("/usr/", 246_973)]);
    let mine = "syscall=83 success=no exit=-13 a0=1 a1=1ff a2=0 a3=0 items=1";
    assert!(seen(&mk(mine), GONE).is_some());
    // Another run's login uid, another error, a success, another architecture.
    let other_uid = mk(mine);
    let mut w = watch();
    w.login_uid = UID + 1;
    assert!(refusal(&other_uid, &w, GONE).is_empty());
    for changed in [
        mine.replace("exit=-13", "exit=-1"),
        mine.replace("success=no exit=-13", "success=yes exit=0"),
    ] {
        assert!(seen(&mk(&changed), GONE).is_none(), "{changed}");
    }
    let mut g = mk(mine);
    g[0].fields.insert("arch".into(), "40000003".into());
    assert!(seen(&g, GONE).is_none());
    // No SYSCALL record: nothing to go by.
    assert!(seen(&g[1..], GONE).is_none());
}

#[test]
fn a_call_whose_names_were_not_all_read_is_kept_without_what_hung_on_them() {
    // python's open(f, "w") of a file in a read-only dir, its PATH record
    // lost (the reader's socket overflowed): made or written, unknown.
    let open = group(
        "syscall=257 success=no exit=-13 a0=ffffff9c a1=7f0 a2=80241 a3=1b6 items=1",
        "/w/wt",
        &[],
    );
    assert_eq!(
        seen(&open, GONE),
        Some((None, vec!["syscall.257".to_owned()]))
    );
    // mkdir: the access is the call's whatever it found.
    let mkdir = group(
        "syscall=83 success=no exit=-13 a0=7ff a1=1ff a2=0 a3=0 items=1",
        "/w/wt",
        &[],
    );
    assert_eq!(
        seen(&mkdir, GONE),
        Some((None, vec!["fs.make_dir".to_owned()]))
    );
}

#[test]
fn paths_are_cleaned_as_written() {
    assert_eq!(clean("/w/wt/../data/"), "/w/data");
    assert_eq!(clean("/usr/"), "/usr");
    assert_eq!(clean("/"), "/");
    assert_eq!(clean("//a/./b//"), "/a/b");
    assert_eq!(clean("/../a"), "/a");
}
