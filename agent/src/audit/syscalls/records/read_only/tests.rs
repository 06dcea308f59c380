#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;

use super::super::{clean, DevIno};
use super::*;

const PID: u32 = 4242;

/// A process as `/proc` shows it: its working directory, descriptors and
/// files; or, when it is gone, nothing.
#[derive(Default)]
struct Fake {
    cwd: Option<String>,
    fds: BTreeMap<i32, String>,
    files: Vec<String>,
}

impl Look for Fake {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        (pid == PID).then(|| self.fds.get(&fd).cloned())?
    }

    fn dev_ino(&self, pid: u32, at: &At<'_>) -> Option<DevIno> {
        if pid != PID {
            return None;
        }
        let path = match at {
            At::Root(p) => clean(p),
            At::Fd(fd, rel) => clean(&format!("{}/{rel}", self.fds.get(fd)?)),
        };
        self.files.contains(&path).then_some((0, 42, 7))
    }

    fn cwd(&self, pid: u32) -> Option<String> {
        (pid == PID).then(|| self.cwd.clone())?
    }
}

fn alive() -> Fake {
    Fake {
        cwd: Some("/w/wt".into()),
        fds: BTreeMap::from([(3, "/w/wt/ro/f".to_owned()), (5, "/w/wt/ro".to_owned())]),
        files: vec!["/w/wt/ro/f".into(), "/w/wt/ro".into()],
    }
}

const GONE: &Fake = &Fake {
    cwd: None,
    fds: BTreeMap::new(),
    files: Vec::new(),
};

fn call(nr: i64, args: [u64; 4], first: &str, second: &str) -> ReadOnlyCall {
    let named = |p: &str| {
        if p.is_empty() {
            Named::Nothing
        } else {
            Named::Path(p.to_owned())
        }
    };
    ReadOnlyCall {
        pid: PID,
        tgid: PID,
        comm: "python3".into(),
        nr,
        args,
        paths: [named(first), named(second)],
    }
}

/// The event's path and access.
fn seen(c: &ReadOnlyCall, look: &Fake) -> (Option<String>, Vec<String>) {
    let e = refusal(c, look).unwrap();
    assert_eq!((e.pid, e.comm.as_str()), (PID, "python3"));
    assert_eq!(e.errno, Some(FsErrno::ReadOnly));
    assert!(e.raw.contains(&format!("syscall {}", c.nr)), "{}", e.raw);
    assert!(e.raw.contains("EROFS"), "{}", e.raw);
    (e.path, e.access)
}

fn said(path: &str, access: &[&str]) -> (Option<String>, Vec<String>) {
    (
        Some(path.to_owned()),
        access.iter().map(|a| (*a).to_owned()).collect(),
    )
}

/// `AT_FDCWD` as a register holds it (sign-extended).
const AT_FDCWD: u64 = (libc::AT_FDCWD as i64).cast_unsigned();

/// Open flags as an argument.
fn flags(f: i32) -> u64 {
    u64::from(f.cast_unsigned())
}
const PTR: u64 = 0x7ffd_0000_1000;

#[test]
fn an_open_for_writing_names_the_file_relative_to_the_working_directory() {
    let o_wronly = flags(libc::O_WRONLY);
    let c = call(libc::SYS_openat, [AT_FDCWD, PTR, o_wronly, 0], "ro/f", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro/f", &["fs.write_file"]));
    // O_CREAT of a file that is there: written, not made.
    let creat = flags(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
    let c = call(libc::SYS_openat, [AT_FDCWD, PTR, creat, 0o666], "ro/f", "");
    assert_eq!(
        seen(&c, &alive()),
        said("/w/wt/ro/f", &["fs.write_file", "fs.truncate"])
    );
    // Of one that is not: made in its directory, as Landlock names it.
    let c = call(
        libc::SYS_openat,
        [AT_FDCWD, PTR, creat, 0o666],
        "ro/new",
        "",
    );
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.make_reg"]));
    // Through a directory descriptor.
    let c = call(libc::SYS_openat, [5, PTR, o_wronly, 0], "f", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro/f", &["fs.write_file"]));
}

#[test]
fn a_made_or_removed_name_is_named_by_its_directory() {
    let c = call(libc::SYS_mkdir, [PTR, 0o777, 0, 0], "ro/d", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.make_dir"]));
    // A last component alone: the working directory.
    let c = call(libc::SYS_mkdirat, [AT_FDCWD, PTR, 0o777, 0], "d/", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt", &["fs.make_dir"]));
    // Relative to a descriptor: its directory.
    let c = call(libc::SYS_unlinkat, [5, PTR, 0, 0], "f", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.remove_file"]));
    let rmdir = flags(libc::AT_REMOVEDIR);
    let c = call(
        libc::SYS_unlinkat,
        [AT_FDCWD, PTR, rmdir, 0],
        "/w/wt/ro/d",
        "",
    );
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.remove_dir"]));
    let c = call(libc::SYS_symlinkat, [PTR, AT_FDCWD, PTR, 0], "ro/l", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.make_sym"]));
}

#[test]
fn a_rename_names_its_source_directory() {
    let c = call(libc::SYS_rename, [PTR, PTR, 0, 0], "ro/f", "ro/g");
    assert_eq!(
        seen(&c, &alive()),
        said("/w/wt/ro", &["fs.remove_file", "fs.make_reg"])
    );
    let c = call(
        libc::SYS_renameat2,
        [AT_FDCWD, PTR, AT_FDCWD, PTR],
        "/w/wt/ro/f",
        "/w/wt/ro/sub/g",
    );
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro", &["fs.remove_file"]));
}

#[test]
fn a_metadata_change_is_named_as_the_supervisor_names_it() {
    let c = call(libc::SYS_chmod, [PTR, 0o600, 0, 0], "ro/f", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro/f", &["metadata.chmod"]));
    let c = call(libc::SYS_fchownat, [AT_FDCWD, PTR, 0, 0], "/w/wt/ro/f", "");
    assert_eq!(seen(&c, &alive()), said("/w/wt/ro/f", &["metadata.chown"]));
    let c = call(libc::SYS_lsetxattr, [PTR, PTR, PTR, 4], "ro/f", "");
    assert_eq!(
        seen(&c, &alive()),
        said("/w/wt/ro/f", &["metadata.setxattr"])
    );
}

#[test]
fn a_call_on_a_descriptor_names_it_and_what_it_is() {
    let c = call(libc::SYS_fchmod, [3, 0o600, 0, 0], "", "");
    assert_eq!(
        seen(&c, &alive()),
        said("fd 3 (/w/wt/ro/f)", &["metadata.chmod"])
    );
    // futimens: utimensat(fd, NULL, times, 0).
    let c = call(libc::SYS_utimensat, [3, 0, PTR, 0], "", "");
    assert_eq!(
        seen(&c, &alive()),
        said("fd 3 (/w/wt/ro/f)", &["metadata.utimes"])
    );
    let c = call(libc::SYS_fsetxattr, [5, PTR, PTR, 4], "", "");
    assert_eq!(
        seen(&c, &alive()),
        said("fd 5 (/w/wt/ro)", &["metadata.setxattr"])
    );
    // Its process gone: the descriptor alone.
    let c = call(libc::SYS_fchmod, [3, 0o600, 0, 0], "", "");
    assert_eq!(seen(&c, GONE), said("fd 3", &["metadata.chmod"]));
}

#[test]
fn a_relative_name_of_a_process_gone_is_not_made_absolute() {
    let c = call(libc::SYS_mkdir, [PTR, 0o777, 0, 0], "ro/d", "");
    let e = refusal(&c, GONE).unwrap();
    assert_eq!((e.path, e.access), (None, vec!["fs.make_dir".to_owned()]));
    assert!(e.raw.contains("\"ro/d\""), "{}", e.raw);
    assert!(e.raw.contains("the name is relative"), "{}", e.raw);
    // An absolute one is named all the same.
    let c = call(libc::SYS_mkdir, [PTR, 0o777, 0, 0], "/w/wt/ro/d", "");
    assert_eq!(seen(&c, GONE), said("/w/wt/ro", &["fs.make_dir"]));
    // An open with O_CREAT of a process gone, by an absolute name: looked
    // up where lockrun is (here, not there: made in its dir); under /proc,
    // whose files the run's namespace shows otherwise, made or written is
    // unknown.
    let creat = flags(libc::O_WRONLY | libc::O_CREAT);
    let c = call(
        libc::SYS_openat,
        [AT_FDCWD, PTR, creat, 0o666],
        "/w/wt/ro/f",
        "",
    );
    assert_eq!(seen(&c, GONE), said("/w/wt/ro", &["fs.make_reg"]));
    let c = call(
        libc::SYS_openat,
        [AT_FDCWD, PTR, creat, 0o666],
        "/proc/self/f",
        "",
    );
    assert_eq!(
        seen(&c, GONE),
        said("/proc/self/f", &[&format!("syscall.{}", libc::SYS_openat)])
    );
}

#[test]
fn a_cut_or_unreadable_name_is_not_named() {
    let mut c = call(libc::SYS_mkdir, [PTR, 0o777, 0, 0], "", "");
    c.paths[0] = Named::Cut("/w/wt/ro/aaaa".into());
    let e = refusal(&c, &alive()).unwrap();
    assert_eq!((e.path, e.access), (None, vec!["fs.make_dir".to_owned()]));
    assert!(e.raw.contains("longer than 511 bytes"), "{}", e.raw);
    c.paths[0] = Named::Unreadable(-libc::EFAULT);
    let e = refusal(&c, &alive()).unwrap();
    assert_eq!(e.path, None);
    assert!(e.raw.contains("EFAULT"), "{}", e.raw);
}

#[test]
fn a_question_is_no_refusal_and_an_unknown_call_is_named_by_its_number() {
    let c = call(libc::SYS_faccessat, [AT_FDCWD, PTR, 2, 0], "ro/f", "");
    assert_eq!(refusal(&c, &alive()), None);
    let c = call(libc::SYS_fallocate, [3, 0, 0, 4096], "", "");
    assert_eq!(
        seen(&c, &alive()),
        (None, vec![format!("syscall.{}", libc::SYS_fallocate)])
    );
}

#[test]
fn what_the_recorder_read_becomes_a_name() {
    let mut buf = [0u8; READ_ONLY_PATH_MAX];
    buf[..5].copy_from_slice(b"ro/f\0");
    assert_eq!(Named::from_record(5, &buf), Named::Path("ro/f".into()));
    assert_eq!(Named::from_record(0, &buf), Named::Nothing);
    assert_eq!(Named::from_record(1, b"\0"), Named::Nothing);
    assert_eq!(Named::from_record(-14, &buf), Named::Unreadable(-14));
    // Cut: the helper filled the buffer, its last byte the NUL.
    let mut long = [b'a'; READ_ONLY_PATH_MAX];
    long[READ_ONLY_PATH_MAX - 1] = 0;
    let max = i32::try_from(READ_ONLY_PATH_MAX).unwrap();
    let cut = Named::from_record(max, &long);
    assert!(
        matches!(cut, Named::Cut(ref p) if p.len() == READ_ONLY_PATH_MAX - 1),
        "{cut:?}"
    );
    // One byte shorter is whole.
    long[READ_ONLY_PATH_MAX - 2] = 0;
    let whole = Named::from_record(max - 1, &long);
    assert!(
        matches!(whole, Named::Path(ref p) if p.len() == READ_ONLY_PATH_MAX - 2),
        "{whole:?}"
    );
}
