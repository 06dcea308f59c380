//! `lockrun __probe KIND ARGS…`: one attempt, made from inside a sandbox by
//! the doctor's canary. It prints `ok` or `errno=N (NAME)` and exits 0 when
//! the attempt went through, 1 when it was refused. The canary judges the
//! outcome from outside; this output only proves the attempt was made.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::exit;

fn report(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => {
            println!("ok");
            0
        }
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            println!("errno={errno} ({})", nix::errno::Errno::from_raw(errno));
            1
        }
    }
}

fn addr(s: &str) -> std::io::Result<SocketAddr> {
    s.parse()
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Run one probe; returns the exit status.
#[must_use]
pub fn run(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    let r = match arg(0) {
        "write" => std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(arg(1))
            .and_then(|mut f| f.write_all(b"canary")),
        "tcp" => addr(arg(1))
            .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)))
            .and_then(|mut s| s.write_all(b"canary")),
        "udp" => addr(arg(1)).and_then(|a| {
            let s = UdpSocket::bind(if a.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
            s.send_to(b"canary", a).map(drop)
        }),
        "unix" => UnixStream::connect(arg(1)).and_then(|mut s| s.write_all(b"canary")),
        "signal" => arg(1)
            .parse::<i32>()
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
            .and_then(|pid| {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                )
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
            }),
        other => {
            eprintln!("lockrun __probe: unknown probe `{other}`");
            return exit::USAGE;
        }
    };
    report(r)
}
