//! Core dumps of the run's processes, which must not be a way out.
//!
//! The kernel writes a crashing process's memory where
//! `kernel.core_pattern` says:
//! - A file path: the kernel creates the file as the dumping process, with
//!   its credentials and so its Landlock domain. A dump lands only where the
//!   run may write; one anywhere else is refused, and recorded like any
//!   filesystem refusal. Nothing to do.
//! - `|program …`: the kernel starts the program as root, in the machine's
//!   namespaces, outside every sandbox, and feeds it the dump
//!   (`systemd-coredump`, `apport`). A crash inside the run would make it
//!   write the run's memory, whose contents the command chooses, into a file
//!   outside (`/var/lib/systemd/coredump`, `/var/crash`). So the run's
//!   processes do not dump: the command starts with `RLIMIT_CORE` at 1 byte,
//!   soft and hard. The kernel ignores the limit for a pipe except for that
//!   one value, which it takes as "do not dump" (`coredump_pipe` in
//!   `fs/coredump.c`); a file dump needs a page at least. Raising a hard
//!   limit needs `CAP_SYS_RESOURCE`, which the command does not have.
//! - `@socket` (Linux 6.16): the kernel connects to the unix socket as the
//!   dumping process, so the run's hooks on unix connects refuse it and
//!   record it like any connect of the run's. Nothing to do.
//!
//! The pattern is read once, before the command starts. Changing it takes
//! a write to `/proc/sys`, which no run may make; an administrator who
//! switches it to a pipe during a run lets that run's dumps through.

use std::fmt;
use std::io;

const PATTERN: &str = "/proc/sys/kernel/core_pattern";

/// Where the kernel sends a dump of one of the run's processes, and so
/// whether the run may dump at all.
#[derive(Debug)]
pub enum CoreDumps {
    /// To a file, written under the dumping process's own confinement.
    File,
    /// To a unix socket, connected to under the dumping process's own
    /// confinement.
    Socket,
    /// Piped to a program the kernel runs outside the sandbox (the
    /// pattern, `|` and all): off.
    Piped(String),
    /// The pattern could not be read: off, as if piped.
    Unknown(io::Error),
}

impl CoreDumps {
    /// What this machine's `kernel.core_pattern` says.
    #[must_use]
    pub fn of_machine() -> Self {
        match std::fs::read_to_string(PATTERN) {
            Ok(p) => Self::from_pattern(&p),
            Err(e) => Self::Unknown(e),
        }
    }

    fn from_pattern(pattern: &str) -> Self {
        // Reading it adds a newline; the kernel decides by the first byte.
        let pattern = pattern.strip_suffix('\n').unwrap_or(pattern);
        match pattern.as_bytes().first() {
            Some(b'|') => Self::Piped(pattern.to_owned()),
            Some(b'@') => Self::Socket,
            _ => Self::File,
        }
    }

    /// Whether the command starts with core dumps off.
    #[must_use]
    pub fn off(&self) -> bool {
        !matches!(self, Self::File | Self::Socket)
    }
}

/// Why dumps are off, for the audit log and the end of a run whose command
/// died of a signal that dumps.
impl fmt::Display for CoreDumps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File => write!(f, "core dumps go to files, under the run's own confinement"),
            Self::Socket => write!(
                f,
                "core dumps go to a unix socket, connected to under the run's own confinement"
            ),
            Self::Piped(p) => write!(
                f,
                "core dumps are off in this run: kernel.core_pattern (`{p}`) pipes them to a \
                 program the kernel runs as root outside the sandbox"
            ),
            Self::Unknown(e) => write!(
                f,
                "core dumps are off in this run: {PATTERN} could not be read ({e}), so they \
                 might go to a program the kernel runs outside the sandbox"
            ),
        }
    }
}

/// Whether a process killed by `signal` dumps core by default (signal(7):
/// the "Core" action).
#[must_use]
pub fn dumps(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGQUIT
            | libc::SIGILL
            | libc::SIGTRAP
            | libc::SIGABRT
            | libc::SIGBUS
            | libc::SIGFPE
            | libc::SIGSEGV
            | libc::SIGXCPU
            | libc::SIGXFSZ
            | libc::SIGSYS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_turns_dumps_off_a_file_does_not() {
        for file in [
            "core\n",
            "/var/crash/core.%e.%p\n",
            "core",
            "",
            " |not a pipe\n",
        ] {
            assert!(!CoreDumps::from_pattern(file).off(), "{file:?}");
        }
        assert!(matches!(
            CoreDumps::from_pattern("@/run/systemd/coredump\n"),
            CoreDumps::Socket
        ));
        assert!(!CoreDumps::from_pattern("@@/run/coredump.socket\n").off());
        let piped = CoreDumps::from_pattern("|/usr/lib/systemd/systemd-coredump %P %u\n");
        assert!(piped.off());
        assert!(
            matches!(&piped, CoreDumps::Piped(p) if p == "|/usr/lib/systemd/systemd-coredump %P %u"),
            "{piped:?}"
        );
        assert!(CoreDumps::Unknown(io::Error::from(io::ErrorKind::NotFound)).off());
    }

    #[test]
    fn the_signals_that_dump_are_signal_7s_core_action() {
        for s in [libc::SIGSEGV, libc::SIGABRT, libc::SIGQUIT, libc::SIGSYS] {
            assert!(dumps(s), "{s}");
        }
        for s in [
            libc::SIGKILL,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGPIPE,
            libc::SIGHUP,
        ] {
            assert!(!dumps(s), "{s}");
        }
    }
}
