//! The relay of a caller's file open for writing (`> log`, `>> log`,
//! `2>&1`): the command writes into a pipe, and a thread of lockrun's
//! writes what it reads there into the caller's own descriptor, whose
//! offset and `O_APPEND` so move as they would have under the command's
//! writes.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, Signal};

use super::Stream;

/// How long a relay is waited for when processes of the run are left,
/// which may keep writing.
const GRACE: Duration = Duration::from_secs(1);

/// What a relay reads at once: a pipe's default capacity.
const CHUNK: usize = 64 * 1024;

/// A running relay.
pub struct Relay {
    stream: Stream,
    name: PathBuf,
    done: mpsc::Receiver<Result<u64, Failed>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A relay that stopped before the end of what the command wrote.
#[derive(Debug)]
pub struct Failed {
    pub stream: Stream,
    pub name: PathBuf,
    /// The bytes written into the caller's file before.
    pub written: u64,
    pub call: &'static str,
    pub source: io::Error,
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the command's {} could not all be written into {}: {}: {}; {} bytes were, what \
             came after them is lost, and the command's writes after that failed (EPIPE)",
            self.stream,
            self.name.display(),
            self.call,
            self.source,
            self.written
        )
    }
}

impl Relay {
    /// A pipe whose write end the command gets as `stream`, and a thread
    /// that writes what it reads into `caller` (named `name`).
    ///
    /// # Errors
    /// No pipe, descriptor or thread to be had.
    pub fn start(
        stream: Stream,
        name: &Path,
        caller: BorrowedFd<'_>,
    ) -> io::Result<(OwnedFd, Self)> {
        let (from, into) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let to = caller.try_clone_to_owned()?;
        let (tx, done) = mpsc::channel();
        let named = name.to_path_buf();
        let thread = std::thread::Builder::new()
            .name(format!("lockrun-{stream}"))
            .spawn(move || {
                let ended = copy(&from, &to, stream, &named);
                // Closed before the end is told, and on a failure before
                // the command has written all: its next write fails
                // (EPIPE) rather than fill the pipe for nobody.
                drop(from);
                let _ = tx.send(ended);
            })?;
        Ok((
            into,
            Self {
                stream,
                name: name.to_path_buf(),
                done,
                thread: Some(thread),
            },
        ))
    }

    #[must_use]
    pub fn stream(&self) -> Stream {
        self.stream
    }

    #[must_use]
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// The relay read to the end of its pipe (`all_gone`: no process of
    /// the run is left; else it gets [`GRACE`]): the bytes it wrote, or
    /// why it stopped; `None` if it had not ended.
    #[must_use]
    pub fn finish(mut self, all_gone: bool) -> Option<Result<u64, Failed>> {
        let ended = if all_gone {
            self.done.recv().ok()
        } else {
            self.done.recv_timeout(GRACE).ok()
        };
        if ended.is_some() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        ended
    }
}

/// Write what `from` reads into `to` until its end of file, or a failure.
fn copy(from: &OwnedFd, to: &OwnedFd, stream: Stream, name: &Path) -> Result<u64, Failed> {
    // A write beyond the caller's RLIMIT_FSIZE sends this thread SIGXFSZ,
    // whose default kills lockrun: blocked here, the write fails (EFBIG).
    let mut xfsz = SigSet::empty();
    xfsz.add(Signal::SIGXFSZ);
    let _ = xfsz.thread_block();
    let mut buf = vec![0u8; CHUNK];
    let mut written = 0u64;
    let failed = |written, call, source: Errno| Failed {
        stream,
        name: name.to_path_buf(),
        written,
        call,
        source: source.into(),
    };
    loop {
        let n = match nix::unistd::read(from.as_raw_fd(), &mut buf) {
            Ok(0) => return Ok(written),
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(failed(written, "read", e)),
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            match nix::unistd::write(to, rest) {
                Ok(0) => return Err(failed(written, "write", Errno::EIO)),
                Ok(m) => {
                    rest = &rest[m..];
                    written += m as u64;
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(failed(written, "write", e)),
            }
        }
    }
}
