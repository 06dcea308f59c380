//! A `CONNECT` tunnel: both directions spliced in the kernel until both
//! sides have closed or the tunnel has been idle too long.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// The buffer of a tunnel direction that could get no splice pipe (see
/// `pump`), borrowed only while bytes flow.
pub const TUNNEL_BUF: usize = 64 * 1024;
/// The splice pipe's size, what one splice moves at most: 1 MiB (the
/// default `fs.pipe-max-size`), sixteen times the default pipe's, for
/// sixteen times fewer splices. The pages are the socket's own, moved, not
/// copied.
const SPLICE_PIPE: usize = 1024 * 1024;
#[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
const SPLICE_PIPE_INT: libc::c_int = SPLICE_PIPE as libc::c_int;
/// How long a tunnel direction keeps its splice pipe after its last burst.
pub(super) const PIPE_KEPT: Duration = Duration::from_secs(1);

/// Copy both ways until both sides have closed, forwarding each half-close
/// as `shutdown(Write)` on the other side; give up after `idle` without a
/// byte in either direction.
pub async fn tunnel(a: TcpStream, b: TcpStream, idle: Duration) -> io::Result<()> {
    tunnel_gated(&a, &b, idle, std::future::ready(Ok(Vec::new()))).await
}

/// [`tunnel`], but `a`'s bytes go to `b` only once `gate` has allowed them:
/// it reads `a`'s first bytes itself, and returns them for `b` (or an error,
/// which ends the tunnel). `b`'s bytes go to `a` from the start (a server
/// that speaks first is not kept waiting).
pub async fn tunnel_gated<G>(
    a: &TcpStream,
    b: &TcpStream,
    idle: Duration,
    gate: G,
) -> io::Result<()>
where
    G: std::future::Future<Output = io::Result<Vec<u8>>>,
{
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let a_to_b = async {
        let first = gate.await?;
        write_all(b, &first).await?;
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        pump(a, b, &last, start).await
    };
    let both = async { tokio::try_join!(a_to_b, pump(b, a, &last, start)) };
    tokio::select! {
        r = both => r.map(|_| ()),
        () = idle_watch(&last, start, idle) => Err(io::Error::new(io::ErrorKind::TimedOut, "tunnel idle")),
    }
}

/// Write all of `buf` to `w`.
async fn write_all(w: &TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        w.writable().await?;
        match w.try_write(&buf[off..]) {
            Ok(m) => off += m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One direction of a tunnel, `r` to `w`, in the kernel: `splice(2)` from the
/// socket into a pipe and from the pipe into the other socket, so the bytes
/// are never copied through lockrun (a bulk transfer through a
/// `read`/`write` loop spends most of its time in those two copies). The pipe
/// lives while bytes flow and for [`PIPE_KEPT`] after the last burst (a bulk
/// transfer drains the socket thousands of times; a pipe per burst cost two
/// descriptors and three syscalls each time); an idle tunnel holds no pipe
/// and no buffer. Where no pipe can be had (out of descriptors), the burst
/// is copied through a buffer instead.
async fn pump(r: &TcpStream, w: &TcpStream, last: &AtomicU64, start: Instant) -> io::Result<()> {
    use nix::fcntl::{splice, SpliceFFlags};
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let mut pipe: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> = None;
    loop {
        if pipe.is_some() {
            if tokio::time::timeout(PIPE_KEPT, r.readable()).await.is_err() {
                // Quiet: give the pipe back, wait without it.
                pipe = None;
                r.readable().await?;
            }
        } else {
            r.readable().await?;
        }
        if pipe.is_none() {
            pipe = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
                .ok()
                .map(|(pr, pw)| {
                    // Larger steps, fewer splices; the pipe stays 64 KiB if refused.
                    let _ = nix::fcntl::fcntl(
                        std::os::fd::AsRawFd::as_raw_fd(&pw),
                        nix::fcntl::FcntlArg::F_SETPIPE_SZ(SPLICE_PIPE_INT),
                    );
                    (pr, pw)
                });
        }
        let Some((pipe_r, pipe_w)) = &pipe else {
            if copy_burst(r, w, last, start).await? {
                return Ok(());
            }
            continue;
        };
        loop {
            let got = r.try_io(tokio::io::Interest::READABLE, || {
                splice(r, None, pipe_w, None, SPLICE_PIPE, flags).map_err(io::Error::from)
            });
            let n = match got {
                Ok(0) => {
                    shutdown_write(w)?;
                    return Ok(());
                }
                Ok(n) => n,
                // Drained: wait for the next burst.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            let mut left = n;
            while left > 0 {
                w.writable().await?;
                match w.try_io(tokio::io::Interest::WRITABLE, || {
                    splice(pipe_r, None, w, None, left, flags).map_err(io::Error::from)
                }) {
                    Ok(m) => left -= m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }
}

/// The fallback of [`pump`] for one burst: read and write through a buffer
/// until `r` would block. `Ok(true)` when `r` reached its end (and `w` was
/// shut for writing).
async fn copy_burst(
    r: &TcpStream,
    w: &TcpStream,
    last: &AtomicU64,
    start: Instant,
) -> io::Result<bool> {
    let mut buf = vec![0u8; TUNNEL_BUF];
    loop {
        match r.try_read(&mut buf) {
            Ok(0) => {
                shutdown_write(w)?;
                return Ok(true);
            }
            Ok(n) => {
                let mut off = 0;
                while off < n {
                    w.writable().await?;
                    match w.try_write(&buf[off..n]) {
                        Ok(m) => off += m,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Forward a half-close: no more bytes will go to `w`.
fn shutdown_write(w: &TcpStream) -> io::Result<()> {
    match nix::sys::socket::shutdown(
        std::os::fd::AsRawFd::as_raw_fd(w),
        nix::sys::socket::Shutdown::Write,
    ) {
        // The peer may be gone already; the other direction reports that.
        Ok(()) | Err(nix::errno::Errno::ENOTCONN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Returns once nothing has moved (`last`, in ms since `start`) for `idle`.
pub(super) async fn idle_watch(last: &AtomicU64, start: Instant, idle: Duration) {
    loop {
        let since_start = Duration::from_millis(last.load(Ordering::Relaxed));
        let deadline = start + since_start + idle;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}
