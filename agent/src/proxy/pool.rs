//! Upstream connections kept open between forwarded plain-HTTP requests,
//! and between the requests of inspected hosts (TLS, a pool of its own).
//!
//! A forwarded request's upstream connection goes back here when its
//! response ended cleanly and the upstream agreed to keep it (HTTP/1.1, no
//! `Connection: close`, a framed body, nothing left unread). A later request
//! to the same host and port may take it instead of dialing, but only if
//! every gate passed again for that request and the connection's peer is
//! one of the addresses the guard has just checked: the pool saves the
//! handshake, never a decision. Only a request safe to send again takes one
//! ([`RequestHead::resendable`](super::request::RequestHead::resendable)):
//! if the upstream closed it meanwhile, the request goes out again on a
//! fresh dial.
//!
//! Bounded: at most [`MAX_IDLE`] connections per proxy, that is per run,
//! each closed after [`KEEP`] idle (the accept loop prunes every `KEEP / 2`)
//! and all of them when the proxy stops.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::request::Target;

/// Idle upstream connections kept at most, per run.
pub const MAX_IDLE: usize = 64;
/// How long an idle upstream connection is kept (servers commonly close
/// theirs after 5 to 75 s; a closed one is noticed before reuse anyway).
pub const KEEP: Duration = Duration::from_secs(30);

struct Idle<S> {
    target: Target,
    peer: SocketAddr,
    stream: S,
    since: Instant,
}

/// The idle upstream connections of one proxy.
pub struct Pool<S = TcpStream> {
    idle: Mutex<Vec<Idle<S>>>,
}

impl<S> Default for Pool<S> {
    fn default() -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
        }
    }
}

impl<S: AsRawFd> Pool<S> {
    /// The kept connections, locked (a panic elsewhere leaves them usable:
    /// each entry is whole).
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle<S>>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The most recently returned open connection to `target` whose peer is
    /// in `checked`, if any. Expired and closed ones are dropped on the way.
    pub fn take(&self, target: &Target, checked: &[SocketAddr]) -> Option<(S, SocketAddr)> {
        loop {
            let found = {
                let mut idle = self.idle();
                idle.retain(|c| c.since.elapsed() < KEEP);
                let i = idle
                    .iter()
                    .rposition(|c| c.target == *target && checked.contains(&c.peer))?;
                idle.remove(i)
            };
            if quiet(&found.stream) {
                return Some((found.stream, found.peer));
            }
        }
    }

    /// Keep `stream`, connected to `peer` for `target`, for a later request;
    /// the oldest goes when the pool is full.
    pub fn put(&self, target: &Target, peer: SocketAddr, stream: S) {
        let mut idle = self.idle();
        idle.retain(|c| c.since.elapsed() < KEEP);
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            target: target.clone(),
            peer,
            stream,
            since: Instant::now(),
        });
    }

    /// Close the kept connections to `target`: a request that may not take
    /// one dials its own, and a server that serves one connection at a time
    /// must not be left waiting on a kept one meanwhile.
    pub fn close(&self, target: &Target) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|c| c.target != *target);
    }

    /// Close the connections kept longer than [`KEEP`] (or all of them).
    pub fn prune(&self, all: bool) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|c| !all && c.since.elapsed() < KEEP);
    }

    /// How many connections are kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// Whether an idle connection is still open with nothing to read: the
/// upstream's FIN, a reset or stray bytes all make it unusable. Asked of the
/// kernel now (`MSG_PEEK | MSG_DONTWAIT`), not of tokio's cached readiness.
/// Over TLS, a record the upstream sent unasked (its `close_notify`) is such
/// bytes.
fn quiet(s: &impl AsRawFd) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    let mut b = [0u8; 1];
    recv(
        s.as_raw_fd(),
        &mut b,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    ) == Err(nix::errno::Errno::EAGAIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{HostName, Port};
    use crate::proxy::request::Host;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    fn target(name: &str) -> Target {
        Target {
            host: Host::Name(HostName::parse(name).unwrap()),
            port: Port::HTTP,
        }
    }

    async fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    #[tokio::test]
    async fn taken_only_for_its_target_and_a_checked_peer() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = l.local_addr().unwrap();
        let other: SocketAddr = "127.0.0.2:80".parse().unwrap();
        let pool: Pool = Pool::default();
        let (c, _s) = pair(&l).await;
        pool.put(&target("a.test"), peer, c);
        assert!(
            pool.take(&target("b.test"), &[peer]).is_none(),
            "another host"
        );
        assert!(
            pool.take(&target("a.test"), &[other]).is_none(),
            "the peer is not in this answer"
        );
        assert_eq!(pool.len(), 1, "a miss keeps the connection");
        pool.close(&target("b.test"));
        assert_eq!(pool.len(), 1, "closing another host's keeps it");
        let (_, got) = pool.take(&target("a.test"), &[other, peer]).unwrap();
        assert_eq!(got, peer);
        assert_eq!(pool.len(), 0);
        let (c, _s) = pair(&l).await;
        pool.put(&target("a.test"), peer, c);
        pool.close(&target("a.test"));
        assert_eq!(pool.len(), 0);
    }

    #[tokio::test]
    async fn a_closed_or_chatty_connection_is_dropped_not_taken() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = l.local_addr().unwrap();
        let pool: Pool = Pool::default();
        let (closed, s1) = pair(&l).await;
        let (chatty, mut s2) = pair(&l).await;
        let (open, _s3) = pair(&l).await;
        let open_port = open.local_addr().unwrap().port();
        pool.put(&target("a.test"), peer, open);
        pool.put(&target("a.test"), peer, chatty);
        pool.put(&target("a.test"), peer, closed);
        drop(s1);
        s2.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (got, _) = pool.take(&target("a.test"), &[peer]).unwrap();
        assert_eq!(got.local_addr().unwrap().port(), open_port);
        assert_eq!(pool.len(), 0, "the closed and the chatty ones are gone");
    }

    #[tokio::test]
    async fn full_pool_drops_the_oldest() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = l.local_addr().unwrap();
        let pool: Pool = Pool::default();
        let mut servers = Vec::new();
        let mut first = 0;
        for i in 0..=MAX_IDLE {
            let (c, s) = pair(&l).await;
            if i == 0 {
                first = c.local_addr().unwrap().port();
            }
            servers.push(s);
            pool.put(&target("a.test"), peer, c);
        }
        assert_eq!(pool.len(), MAX_IDLE);
        while let Some((c, _)) = pool.take(&target("a.test"), &[peer]) {
            assert_ne!(c.local_addr().unwrap().port(), first);
        }
    }
}
