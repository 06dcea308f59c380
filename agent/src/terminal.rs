//! The caller's terminal, with the settings it had before the run.
//!
//! A run's command shares the terminal lockrun was started from: its
//! controlling terminal (`/dev/tty`) and its stdio when they are terminals.
//! What the kernel keeps of a terminal outlives the processes that set it,
//! so a full-screen program that does not get to clean up (an agent's
//! interface killed by a timeout, a crash) leaves the caller's shell
//! without echo, in raw mode, with `^C` sending nothing.
//!
//! The switches no tool of a run needs are refused by the seccomp filter
//! (`TIOCSTI`, `TIOCSETD`, `TIOCEXCL`, `TCXONC` `TCOOFF`/`TCIOFF`). The
//! settings (`termios`) are what every editor, pager and prompt changes, so
//! they pass, and lockrun puts them back once no process of the run is left
//! ([`Terminals::restore`]), as a shell does for a job a signal killed;
//! each one put back is reported.
//!
//! Only a terminal whose foreground process group is lockrun's, or that is
//! not lockrun's controlling terminal: in the background, the job in the
//! foreground owns the terminal's settings, and the kernel stops a
//! background process that changes them (`SIGTTOU`). The window size is
//! left alone: the terminal sets it when its window is resized, and an old
//! one put back would be wrong.
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt as _;

use nix::sys::termios::{self, InputFlags, LocalFlags, OutputFlags, SetArg, Termios};

/// The terminals of a run, with their settings from before it.
#[derive(Default)]
pub struct Terminals {
    saved: Vec<Saved>,
}

struct Saved {
    fd: OwnedFd,
    name: String,
    settings: Termios,
}

impl Terminals {
    /// The settings of lockrun's controlling terminal and of each of its
    /// stdio that is a terminal, each terminal once. None: nothing to put
    /// back.
    #[must_use]
    pub fn save() -> Self {
        let mut candidates: Vec<OwnedFd> = Vec::new();
        // Stdio first: named by it, a terminal is named by its own path
        // (`/dev/pts/3`), not `/dev/tty`.
        for fd in [
            std::io::stdin().as_fd(),
            std::io::stdout().as_fd(),
            std::io::stderr().as_fd(),
        ] {
            if let Ok(fd) = fd.try_clone_to_owned() {
                candidates.push(fd);
            }
        }
        // The controlling terminal, unless it is among them (its session
        // is answered only there): `/dev/tty` has a device number of its
        // own. No controlling terminal: ENXIO.
        if !candidates.iter().any(|fd| termios::tcgetsid(fd).is_ok()) {
            if let Ok(tty) = File::options()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
                .open("/dev/tty")
            {
                candidates.push(tty.into());
            }
        }
        let mut seen = Vec::new();
        let mut saved = Vec::new();
        for fd in candidates {
            let Ok(settings) = termios::tcgetattr(&fd) else {
                continue;
            };
            // A terminal (tcgetattr answered), known by its device number.
            let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) else {
                continue;
            };
            if seen.contains(&st.st_rdev) {
                continue;
            }
            seen.push(st.st_rdev);
            let name = nix::unistd::ttyname(&fd).map_or_else(
                |_| {
                    format!(
                        "terminal {}:{}",
                        libc::major(st.st_rdev),
                        libc::minor(st.st_rdev)
                    )
                },
                |p| p.display().to_string(),
            );
            saved.push(Saved { fd, name, settings });
        }
        Self { saved }
    }

    /// Put back the settings of each terminal the run left changed; what
    /// was put back, for the user. Call once no process of the run is left.
    #[must_use]
    pub fn restore(self) -> Vec<Restored> {
        let mut restored = Vec::new();
        for s in self.saved {
            let Ok(now) = termios::tcgetattr(&s.fd) else {
                continue;
            };
            if now == s.settings {
                continue;
            }
            if !ours_to_set(s.fd.as_fd()) {
                tracing::debug!(
                    "{}: settings changed during the run, left as they are: lockrun is not in \
                     its foreground",
                    s.name
                );
                continue;
            }
            // TCSANOW: output the user stopped (^S) must not hold lockrun.
            let outcome = termios::tcsetattr(&s.fd, SetArg::TCSANOW, &s.settings);
            restored.push(Restored {
                terminal: s.name,
                changes: changes(&s.settings, &now),
                failed: outcome.err(),
            });
        }
        restored
    }
}

/// Whether lockrun may set the terminal's settings without taking them
/// from the job in its foreground: it is not lockrun's controlling terminal
/// (`ENOTTY`), or lockrun's process group is its foreground.
fn ours_to_set(fd: BorrowedFd<'_>) -> bool {
    match nix::unistd::tcgetpgrp(fd) {
        Ok(pgrp) => pgrp == nix::unistd::getpgrp(),
        Err(nix::errno::Errno::ENOTTY) => true,
        Err(_) => false,
    }
}

/// The settings a user notices, as the run left them: `echo off`, …
fn changes(before: &Termios, after: &Termios) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut flag = |was: bool, is: bool, on: &'static str, off: &'static str| {
        if was != is {
            out.push(if is { on } else { off });
        }
    };
    for (f, on, off) in [
        (LocalFlags::ECHO, "echo on", "echo off"),
        (LocalFlags::ICANON, "line editing on", "line editing off"),
        (LocalFlags::ISIG, "^C and ^Z on", "^C and ^Z off"),
    ] {
        flag(
            before.local_flags.contains(f),
            after.local_flags.contains(f),
            on,
            off,
        );
    }
    flag(
        before.output_flags.contains(OutputFlags::OPOST),
        after.output_flags.contains(OutputFlags::OPOST),
        "output processing on",
        "output processing off",
    );
    flag(
        before.input_flags.contains(InputFlags::ICRNL),
        after.input_flags.contains(InputFlags::ICRNL),
        "Enter sends a newline",
        "Enter sends a carriage return",
    );
    if before.control_chars != after.control_chars {
        out.push("control characters changed");
    }
    if out.is_empty() {
        out.push("other settings changed");
    }
    out
}

/// One terminal whose settings the run left changed.
#[derive(Debug)]
pub struct Restored {
    pub terminal: String,
    /// What the run had changed (`echo off`, `line editing off`).
    pub changes: Vec<&'static str>,
    /// Why they could not be put back.
    pub failed: Option<nix::Error>,
}

impl fmt::Display for Restored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let changes = self.changes.join(", ");
        match self.failed {
            None => write!(
                f,
                "the run left the settings of {} changed ({changes}); put back as they were",
                self.terminal
            ),
            Some(e) => write!(
                f,
                "the run left the settings of {} changed ({changes}); putting them back failed: \
                 {e} (`stty sane` restores usable ones)",
                self.terminal
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::termios::SpecialCharacterIndices;

    /// A real terminal's settings (a fresh pty's), to change.
    fn settings() -> Termios {
        let pty = nix::pty::openpty(None, None).unwrap();
        termios::tcgetattr(&pty.slave).unwrap()
    }

    #[test]
    fn what_the_run_changed_is_named() {
        let before = settings();
        let mut raw = before.clone();
        termios::cfmakeraw(&mut raw);
        assert_eq!(
            changes(&before, &raw),
            [
                "echo off",
                "line editing off",
                "^C and ^Z off",
                "output processing off",
                "Enter sends a carriage return",
            ]
        );
        // Back the other way: as a run that turned them on would read.
        assert_eq!(
            changes(&raw, &before),
            [
                "echo on",
                "line editing on",
                "^C and ^Z on",
                "output processing on",
                "Enter sends a newline",
            ]
        );
        let mut intr = before.clone();
        intr.control_chars[SpecialCharacterIndices::VINTR as usize] = 0;
        assert_eq!(changes(&before, &intr), ["control characters changed"]);
        let mut other = before.clone();
        other.local_flags.toggle(LocalFlags::ECHOCTL);
        assert_eq!(changes(&before, &other), ["other settings changed"]);
    }

    #[test]
    fn a_terminal_that_is_not_lockruns_own_may_be_set() {
        // A pty opened here is no controlling terminal of this process:
        // tcgetpgrp answers ENOTTY.
        let pty = nix::pty::openpty(None, None).unwrap();
        assert!(ours_to_set(pty.slave.as_fd()));
    }
}
