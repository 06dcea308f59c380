//! The audit log's file, which lockrun opens and writes as root.
//!
//! So it is opened as nothing a run left behind can redirect: by a
//! descriptor of its dir (which the caller judged), without following a
//! link at its name (`O_NOFOLLOW`: a link planted there would make root
//! create or append to the file it names), without waiting (`O_NONBLOCK`:
//! a FIFO planted there would hang lockrun), and only when it is a regular
//! file of one name (another name may lie where a run writes). Each line
//! is written whole by one `write` to the end (`O_APPEND`), so runs that
//! share a log never mix their lines.
//!
//! A write that fails (a full disk, a quota) is counted, not fatal: the run
//! goes on, and lockrun says at its end how many lines the log lacks. A
//! line cut short by one is ended by the next line's newline, so the lines
//! after it, this run's or a later one's, stay whole.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use crate::regular_file::{self, ReadError as Refused};
use crate::sys::openat;

/// Why the log cannot be the file at its path.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot open audit log {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error(
        "the audit log {path} is a symbolic link: lockrun writes its log as root and follows no \
         link to do it (a run could have planted it); name the file itself"
    )]
    Link { path: PathBuf },
    #[error("the audit log {path} is {kind}, not a regular file: lockrun writes its log only to a regular file")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "the audit log {path} has {names} names (hard links): another may lie where a run can \
         write; use a file of one name"
    )]
    OtherNames { path: PathBuf, names: u64 },
    #[error(
        "the audit log {path} is the file the command's {stream} goes to: the command would write \
         into its own log; log elsewhere"
    )]
    CommandsOutput { path: PathBuf, stream: &'static str },
}

/// What of the log could not be written.
#[derive(Debug)]
pub struct WriteFailure {
    /// The first error.
    pub error: io::Error,
    /// The lines not written (in full).
    pub lines: u64,
}

/// The open log.
pub struct LogFile {
    file: File,
    path: PathBuf,
    /// The file does not end with a newline (a line cut short, by this
    /// lockrun or another): the next line starts with one.
    unended: bool,
    failed: Option<WriteFailure>,
}

impl LogFile {
    /// Open `name` in `dir` to append to (made, 0600, if missing); `path`
    /// is how it is named in errors.
    pub fn open_in(dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<Self, SinkError> {
        let flags = nix::fcntl::OFlag::O_WRONLY
            | nix::fcntl::OFlag::O_APPEND
            | nix::fcntl::OFlag::O_CREAT
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_NONBLOCK
            | nix::fcntl::OFlag::O_CLOEXEC
            | nix::fcntl::OFlag::O_NOCTTY;
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
        let fd = match openat(dir, name, flags, mode) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ELOOP) => {
                return Err(SinkError::Link {
                    path: path.to_path_buf(),
                })
            }
            // A FIFO no one reads, opened for writing without waiting.
            Err(nix::errno::Errno::ENXIO) => {
                return Err(SinkError::NotRegular {
                    path: path.to_path_buf(),
                    kind: "a FIFO or a socket",
                })
            }
            Err(e) => {
                return Err(SinkError::Open {
                    path: path.to_path_buf(),
                    source: e.into(),
                })
            }
        };
        let file = File::from(fd);
        let open_err = |source| SinkError::Open {
            path: path.to_path_buf(),
            source,
        };
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(SinkError::NotRegular {
                path: path.to_path_buf(),
                kind: regular_file::kind(meta.file_type()),
            });
        }
        if meta.nlink() > 1 {
            return Err(SinkError::OtherNames {
                path: path.to_path_buf(),
                names: meta.nlink(),
            });
        }
        for (fd, stream) in [(1, "standard output"), (2, "standard error")] {
            if same_file(fd, &meta) {
                return Err(SinkError::CommandsOutput {
                    path: path.to_path_buf(),
                    stream,
                });
            }
        }
        let mut last = [0u8; 1];
        let unended = meta.len() > 0
            && file
                .read_at(&mut last, meta.len() - 1)
                .map_or(true, |n| n != 1 || last[0] != b'\n');
        Ok(Self {
            file,
            path: path.to_path_buf(),
            unended,
            failed: None,
        })
    }

    /// Where the log is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `line` and its newline, in one write.
    pub fn write_line(&mut self, line: &[u8]) {
        let mut buf = Vec::with_capacity(line.len() + 2);
        if self.unended {
            buf.push(b'\n');
        }
        buf.extend_from_slice(line);
        buf.push(b'\n');
        let mut done = 0;
        while done < buf.len() {
            match nix::unistd::write(self.file.as_fd(), &buf[done..]) {
                Ok(n) => done += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    self.fail(e.into());
                    // Begun and cut short: the file ends without a newline.
                    self.unended = self.unended || done > 0;
                    return;
                }
            }
        }
        self.unended = false;
    }

    fn fail(&mut self, error: io::Error) {
        match &mut self.failed {
            Some(f) => f.lines += 1,
            None => self.failed = Some(WriteFailure { error, lines: 1 }),
        }
    }

    /// What could not be written so far.
    #[must_use]
    pub fn failure(&self) -> Option<&WriteFailure> {
        self.failed.as_ref()
    }
}

/// Whether descriptor `fd` of this process is open on the file of `meta`.
fn same_file(fd: i32, meta: &std::fs::Metadata) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_dev == meta.dev() && st.st_ino == meta.ino())
}

/// The most `lockrun audit` reads of a log, and of one line: a log of
/// millions of lines is still read whole, a device or a file without
/// newlines (`/dev/zero`) is not read without end.
pub const READ_LIMIT: u64 = 1 << 30;
pub const LINE_LIMIT: usize = 1 << 20;

/// Why a log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read audit log {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is {kind}, not a regular file: an audit log is a regular file")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is {size} bytes, more than `lockrun audit` reads ({limit} bytes): split it, \
         e.g. by run, and read each part"
    )]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
}

/// The log at `path` opened for reading: a regular file (following links:
/// reading needs no guard against them; [`crate::regular_file::open`], so
/// that no FIFO is waited on) no larger than [`READ_LIMIT`].
pub fn open_for_reading(path: &Path) -> Result<File, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = regular_file::open(path).map_err(|e| match e {
        Refused::NotRegular(kind) => ReadError::NotRegular {
            path: path.to_path_buf(),
            kind,
        },
        Refused::Open(e) | Refused::Read(e) => io(e),
        other => io(io::Error::other(other.to_string())),
    })?;
    let size = file.metadata().map_err(io)?.len();
    if size > READ_LIMIT {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: READ_LIMIT,
        });
    }
    Ok(file)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;
    use crate::testing::Scratch;

    fn dir(p: &Path) -> std::os::fd::OwnedFd {
        std::os::fd::OwnedFd::from(File::open(p).unwrap())
    }

    #[test]
    fn a_link_a_fifo_a_dir_or_a_file_of_two_names_is_not_opened_to_write() {
        let scratch = Scratch::new("sink-refuses");
        let d = dir(scratch.path());
        let target = scratch.path().join("target");
        std::fs::write(&target, "canary\n").unwrap();
        std::os::unix::fs::symlink(&target, scratch.path().join("link")).unwrap();
        nix::unistd::mkfifo(&scratch.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::create_dir(scratch.path().join("dir")).unwrap();
        std::fs::hard_link(&target, scratch.path().join("second")).unwrap();
        let open = |name: &str| LogFile::open_in(d.as_fd(), OsStr::new(name), Path::new(name));
        assert!(matches!(open("link"), Err(SinkError::Link { .. })));
        assert!(matches!(
            open("fifo"),
            Err(SinkError::NotRegular {
                kind: "a FIFO or a socket",
                ..
            })
        ));
        assert!(
            matches!(open("dir"), Err(SinkError::Open { source, .. }) if source.raw_os_error() == Some(libc::EISDIR))
        );
        assert!(matches!(
            open("second"),
            Err(SinkError::OtherNames { names: 2, .. })
        ));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "canary\n");
    }

    #[test]
    fn a_line_after_one_cut_short_starts_on_a_line_of_its_own() {
        let scratch = Scratch::new("sink-unended");
        let d = dir(scratch.path());
        let path = scratch.path().join("log");
        std::fs::write(&path, "{\"half\":").unwrap();
        let mut log = LogFile::open_in(d.as_fd(), OsStr::new("log"), &path).unwrap();
        log.write_line(b"{\"a\":1}");
        log.write_line(b"{\"b\":2}");
        assert!(log.failure().is_none());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"half\":\n{\"a\":1}\n{\"b\":2}\n"
        );
    }

    #[test]
    fn a_device_or_a_fifo_is_not_read_as_a_log() {
        assert!(matches!(
            open_for_reading(Path::new("/dev/zero")),
            Err(ReadError::NotRegular {
                kind: "a character device",
                ..
            })
        ));
        let scratch = Scratch::new("sink-read-fifo");
        let fifo = scratch.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            open_for_reading(&fifo),
            Err(ReadError::NotRegular { kind: "a FIFO", .. })
        ));
    }
}
