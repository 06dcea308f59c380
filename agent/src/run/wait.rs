//! Step 9 of a run, its end (see [`super`]): supervise the command,
//! forwarding SIGINT, SIGTERM and SIGHUP to it, and wait for it to end.

use std::process::ExitStatus;

use nix::sys::signal::Signal;
use tokio::signal::unix::{self as tokio_signal, signal, SignalKind};

use super::RunError;
use crate::sys::spawn::Child;

/// How the command ended; the signals lockrun gets meanwhile go to it.
pub(super) async fn wait(child: &Child, signals: &mut Signals) -> Result<ExitStatus, RunError> {
    loop {
        tokio::select! {
            status = child.wait() => return status.map_err(RunError::Wait),
            sig = signals.recv() => child.signal(sig as libc::c_int),
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught for forwarding.
pub(super) struct Signals {
    int: tokio_signal::Signal,
    term: tokio_signal::Signal,
    hup: tokio_signal::Signal,
}

impl Signals {
    pub(super) fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    pub(super) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}
