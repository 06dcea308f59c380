use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};

use super::*;
use crate::testing::Scratch;

/// Every row: what a descriptor open on `kind` with `access` is handed
/// on as, on stdin and on stdout (stderr is stdout's).
#[test]
fn each_kind_of_descriptor_is_handed_on_as_its_row_says() {
    use Access::{Path, Read, ReadWrite, Write};
    use Handling::{AsIs, Refused, Relayed, Reopened};
    use Kind::{BlockDevice, CharDevice, Directory, Fifo, Other, PtyMaster, Regular, Unnamed};
    let written_stdin = Refused(Refusal::WrittenStdin);
    let master = Refused(Refusal::PtyMaster);
    let rows: &[(Kind, Access, Handling, Handling)] = &[
        // kind, access, as stdin, as stdout
        (Unnamed, Read, AsIs, AsIs),
        (Unnamed, Write, AsIs, AsIs),
        (Unnamed, ReadWrite, AsIs, AsIs),
        (Regular, Read, Reopened, Reopened),
        (Regular, Write, written_stdin, Relayed),
        (Regular, ReadWrite, written_stdin, Relayed),
        (Regular, Path, Reopened, Reopened),
        (Fifo, Read, Reopened, Reopened),
        (Fifo, Write, Reopened, Reopened),
        (CharDevice, ReadWrite, Reopened, Reopened),
        (CharDevice, Write, Reopened, Reopened),
        (BlockDevice, Read, Reopened, Reopened),
        (Directory, Read, Reopened, Reopened),
        (Other, Path, Reopened, Reopened),
        (PtyMaster, ReadWrite, master, master),
        (PtyMaster, Path, Reopened, Reopened),
    ];
    for &(kind, access, stdin, stdout) in rows {
        assert_eq!(
            handling(Stream::In, kind, access),
            stdin,
            "{kind:?} {access:?}"
        );
        assert_eq!(
            handling(Stream::Out, kind, access),
            stdout,
            "{kind:?} {access:?}"
        );
        assert_eq!(
            handling(Stream::Err, kind, access),
            stdout,
            "{kind:?} {access:?}"
        );
    }
}

fn read_only_mount(fd: BorrowedFd<'_>) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .unwrap()
        .flags()
        .contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
}

fn offset(fd: BorrowedFd<'_>) -> i64 {
    lseek(fd.as_raw_fd(), 0, Whence::SeekCur).unwrap()
}

fn open(path: &std::path::Path, flags: libc::c_int) -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
        .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
        .custom_flags(flags & !libc::O_ACCMODE)
        .open(path)
        .unwrap()
        .into()
}

/// A file read as stdin is the same file, read-only (its mode cannot be
/// changed through it), positioned where the caller's was; the caller's
/// follows where the command read to. Control: the caller's descriptor
/// is on a writable mount, and a copy not read from leaves it as it was.
#[test]
fn a_file_read_as_stdin_is_reopened_read_only_and_its_offset_followed() {
    let scratch = Scratch::new("stdio-reopen");
    let path = scratch.path().join("input");
    std::fs::write(&path, b"0123456789").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let null = open(std::path::Path::new("/dev/null"), libc::O_RDWR);
    for reads in [true, false] {
        let caller = open(&path, libc::O_RDONLY);
        lseek(caller.as_raw_fd(), 2, Whence::SeekSet).unwrap();
        assert!(
            !read_only_mount(caller.as_fd()),
            "control: a writable mount"
        );
        let Prepared { handed, kept } =
            prepare_fds([caller.as_fd(), null.as_fd(), null.as_fd()]).unwrap();
        let [Some(copy), Some(out), Some(err)] = handed else {
            panic!("each of the three is handed a copy");
        };
        assert!(read_only_mount(copy.as_fd()));
        assert!(read_only_mount(out.as_fd()));
        // One open file on stdout and stderr, one copy.
        assert_eq!(same_open_file(out.as_fd(), err.as_fd()).ok(), Some(true));
        let refused = nix::sys::stat::fchmod(copy.as_raw_fd(), nix::sys::stat::Mode::empty());
        assert_eq!(refused, Err(nix::errno::Errno::EROFS));
        let mut copy = std::fs::File::from(copy);
        if reads {
            let mut got = [0u8; 3];
            copy.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"234");
        }
        drop(copy);
        assert!(kept.finish(true).is_empty());
        assert_eq!(offset(caller.as_fd()), if reads { 5 } else { 2 });
    }
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o644);
}

/// A file open for writing as stdout and stderr (`> log 2>&1`, `>> log`)
/// is written through lockrun's relay: one pipe for both, in order, after
/// what the file held, and the caller's offset after the command's
/// output, so what the caller writes next follows it.
#[test]
fn a_file_written_as_stdout_is_relayed_through_one_pipe_in_order() {
    let scratch = Scratch::new("stdio-relay");
    let stdin = open(std::path::Path::new("/dev/null"), libc::O_RDONLY);
    for append in [false, true] {
        let path = scratch.path().join("log");
        std::fs::write(&path, b"before\n").unwrap();
        let flags = libc::O_WRONLY | if append { libc::O_APPEND } else { 0 };
        let caller = open(&path, flags);
        if !append {
            lseek(caller.as_raw_fd(), 7, Whence::SeekSet).unwrap();
        }
        let Prepared { handed, kept } =
            prepare_fds([stdin.as_fd(), caller.as_fd(), caller.as_fd()]).unwrap();
        let [_, Some(out), Some(err)] = handed else {
            panic!("stdout and stderr are handed a pipe");
        };
        let kind = nix::sys::stat::fstat(out.as_raw_fd()).unwrap().st_mode & libc::S_IFMT;
        assert_eq!(kind, libc::S_IFIFO, "a pipe");
        assert_eq!(same_open_file(out.as_fd(), err.as_fd()).ok(), Some(true));
        let (mut out, mut err) = (std::fs::File::from(out), std::fs::File::from(err));
        for i in 0..100 {
            writeln!(out, "out {i}").unwrap();
            writeln!(err, "err {i}").unwrap();
        }
        drop((out, err));
        assert!(kept.finish(true).is_empty());
        let mut caller = std::fs::File::from(caller);
        caller.write_all(b"after\n").unwrap();
        let want: String = std::iter::once("before\n".to_owned())
            .chain((0..100).map(|i| format!("out {i}\nerr {i}\n")))
            .chain(std::iter::once("after\n".to_owned()))
            .collect();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
        assert_eq!(
            caller.stream_position().unwrap(),
            want.len() as u64,
            "append {append}"
        );
    }
}

/// A regular file open for writing cannot be stdin: refused, named.
#[test]
fn a_file_written_as_stdin_is_refused() {
    let scratch = Scratch::new("stdio-written-stdin");
    let path = scratch.path().join("f");
    std::fs::write(&path, b"").unwrap();
    let null = open(std::path::Path::new("/dev/null"), libc::O_RDWR);
    let caller = open(&path, libc::O_RDWR);
    let refused = prepare_fds([caller.as_fd(), null.as_fd(), null.as_fd()]).err();
    assert!(
        matches!(
            &refused,
            Some(StdioError::Refused {
                stream: Stream::In,
                refusal: Refusal::WrittenStdin,
                name,
            }) if *name == path
        ),
        "{refused:?}"
    );
}
