//! `lockrun doctor`: what this host can enforce, which of lockrun's promises
//! hold here, and a live canary that proves it: a probe under a real sandbox
//! tries to break out five ways, and each attempt is judged from outside.
//!
//! `--json` prints the same report as one JSON object ([`PromiseLine`] for
//! each promise), for the kernel matrix's table (`cargo xtask kernels table`).
//!
//! Exit status: 0 when every promise holds and nothing got out; 3 when the
//! host lacks something a promise needs; 4 when the canary got out (or could
//! not be judged); 125 when it runs inside a lockrun run, where the host
//! cannot be judged (see [`crate::run::nested`]).

use std::io::{ErrorKind, Read as _};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::audit::kernel as kernel_audit;
use crate::audit::AuditLog;
use crate::cli::DoctorArgs;
use crate::kernel::{Gap, Kernel, Mechanism, Unheld};
use crate::shown::say;
use crate::{bpf, cgroup, fs, run};

/// Host support is missing for some promise.
pub const HOST_LACKS: i32 = 3;
/// The canary got out, or could not be judged.
pub const CANARY_FAILED: i32 = 4;

/// One line of the host report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub what: &'static str,
    pub ok: bool,
    pub detail: String,
    /// The promise that needs it.
    pub needed_for: &'static str,
}

fn check(what: &'static str, needed_for: &'static str, r: Result<String, String>) -> Check {
    match r {
        Ok(detail) => Check {
            what,
            ok: true,
            detail,
            needed_for,
        },
        Err(detail) => Check {
            what,
            ok: false,
            detail,
            needed_for,
        },
    }
}

/// The host checks, in the order a run needs them.
#[must_use]
pub fn host_checks() -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(check(
        "Landlock",
        "filesystem: writes only in the worktree and {tmp}; deny-read; with ABI 3 to 7 the promises below",
        fs::kernel_abi()
            .map(|v| format!("ABI {v}"))
            .map_err(|e| e.to_string()),
    ));
    checks.push(check(
        "cgroup v2",
        "network: the run's own cgroup, joined before exec",
        cgroup::cgroup2_mount()
            .map(|p| format!("mounted at {}", p.display()))
            .map_err(|e| e.to_string()),
    ));
    checks.push(check(
        "cgroup pids",
        "availability: the run's task limit (run.max_tasks), which stops a fork bomb at the run",
        cgroup::pids::available().map_err(|e| e.to_string()),
    ));
    checks.push(check(
        "cgroup memory",
        "availability: the run's memory limit (run.max_memory), which keeps the OOM killer in the run",
        cgroup::memory::available().map_err(|e| e.to_string()),
    ));
    checks.push(check(
        "bpffs",
        "network: hooks pinned, outliving lockrun",
        bpf::preflight()
            .map(|()| "mounted at /sys/fs/bpf".to_owned())
            .map_err(|e| e.to_string()),
    ));
    let kernel = run::kernel();
    checks.push(check(
        "BPF cgroup hooks",
        if kernel.unix_hooks {
            "network: connect4/6, sendmsg4/6, sock_create, connect_unix, sendmsg_unix, ingress/egress"
        } else if kernel.unix_guard {
            "network: connect4/6, sendmsg4/6, sock_create, ingress/egress, and (no unix hooks) the \
             unix guard on security_unix_stream_connect, security_unix_may_send"
        } else {
            "network: connect4/6, sendmsg4/6, sock_create, ingress/egress (no unix hooks)"
        },
        attach_probe(),
    ));
    checks.push(read_only_refusals(&kernel));
    checks.push(Check {
        what: "transparent redirection",
        // Not a promise: without it a run is judged as before (fail
        // closed), so its absence is said, not counted as a miss.
        ok: true,
        detail: match crate::kernel::redirect() {
            Ok(()) => "the cgroup recvmsg4/6, getpeername4/6 and sock_ops hooks".to_owned(),
            Err(needs) => format!(
                "not on this kernel ({needs}): runs go without it, clients that ignore the \
                 proxy variables are refused"
            ),
        },
        needed_for: "network: clients that ignore the proxy variables brought to the proxy, \
                     the run's DNS answered by lockrun",
    });
    checks.push(check(
        "kernel audit",
        "audit: filesystem refusals in the log",
        kernel_audit::status()
            .map(|st| {
                format!(
                    "{}, {}; {} read from the read-only multicast group; {}",
                    match st.enabled {
                        0 => "off (lockrun turns it on for its runs)",
                        1 => "on",
                        _ => "on and locked",
                    },
                    if st.daemon_pid == 0 {
                        "no audit daemon".to_owned()
                    } else {
                        format!("audit daemon pid {}", st.daemon_pid)
                    },
                    if run::kernel().landlock_abi() >= 7 {
                        "Landlock denials"
                    } else {
                        "the records of the run's refused calls"
                    },
                    if st.backlog_limit == 0 {
                        "no backlog limit".to_owned()
                    } else {
                        format!(
                            "backlog limit {} (a burst of refusals beyond it loses records, and the run says so)",
                            st.backlog_limit
                        )
                    }
                )
            })
            .map_err(|e| e.to_string()),
    ));
    checks
}

/// Whether the run's calls that a read-only mount refuses are recorded here.
fn read_only_refusals(kernel: &Kernel) -> Check {
    Check {
        what: "read-only refusals",
        // Not a promise yet: no run leaves a refusal to a read-only mount
        // without it (the seccomp supervisor judges metadata changes).
        ok: true,
        detail: match kernel.read_only_refusals_seen() {
            Ok(()) => "lockrun's sys_exit recorder (a raw tracepoint, pinned): a call of a run \
                       that a read-only mount refuses (EROFS) is recorded"
                .to_owned(),
            Err(why) => format!(
                "not recorded here ({why}): runs keep the seccomp supervisor for metadata \
                 changes outside the writable roots"
            ),
        },
        needed_for: "audit: a refusal by a read-only mount (EROFS) in the log",
    }
}

/// Load and attach every hook to a throwaway cgroup of the doctor's own, then
/// tear it all down: proof that the run's network layer can be set up here.
fn attach_probe() -> Result<String, String> {
    let id = format!("doctor-{}", std::process::id());
    let cg = cgroup::RunCgroup::create(bpf::shared::build_id(), &id).map_err(|e| e.to_string())?;
    let hooks = bpf::hooks::NetworkHooks::attach(&cg, &id, &[], &[]).map_err(|e| {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(c) = src {
            s.push_str(": ");
            s.push_str(&c.to_string());
            src = c.source();
        }
        s
    });
    let result = match hooks {
        Ok(h) => {
            let log = AuditLog::open(None).map_err(|e| e.to_string())?;
            h.finish(&log)
                .map(|_| "loaded, attached to a cgroup of its own, pinned, and removed".to_owned())
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e),
    };
    cg.remove()
        .and_then(cgroup::Limits::remove)
        .map_err(|e| e.to_string())?;
    result
}

/// What one canary attempt showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Attempt {
    pub what: String,
    /// What the probe inside reported (`errno=1 (EPERM)`, or `ok`).
    pub inside: String,
    /// What was seen from outside.
    pub outside: String,
    /// Whether this is a control (must succeed) or an escape (must fail).
    pub control: bool,
    pub held: bool,
}

/// One promise that depends on the kernel, as `doctor` tells it: held by
/// a mechanism, or not (`doctor --json` prints exactly these objects).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum PromiseLine {
    Held {
        promise: &'static str,
        /// How it is held, in a sentence.
        held_by: String,
        mechanism: Mechanism,
    },
    /// A gap a policy may accept by its name.
    Gap {
        promise: &'static str,
        gap: Gap,
        /// What this kernel lacks for it.
        lacks: String,
    },
    /// No Landlock, and so no run: why there is none.
    NoLandlock {
        promise: &'static str,
        no_landlock: String,
    },
}

impl PromiseLine {
    /// The promises of `kernel`, each with what holds it.
    #[must_use]
    pub fn of(kernel: &Kernel) -> Vec<Self> {
        kernel
            .promises()
            .into_iter()
            .map(|h| match h.by {
                Ok(held) => Self::Held {
                    promise: h.promise,
                    held_by: held.how,
                    mechanism: held.mechanism,
                },
                Err(Unheld::Gap(gap)) => Self::Gap {
                    promise: h.promise,
                    gap,
                    lacks: kernel.lacks(gap),
                },
                Err(Unheld::NoLandlock) => Self::NoLandlock {
                    promise: h.promise,
                    no_landlock: kernel
                        .landlock
                        .err()
                        .map_or_else(String::new, |why| why.to_string()),
                },
            })
            .collect()
    }

    #[must_use]
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    /// Its line in the text report.
    fn text(&self) -> String {
        let (mark, promise, by) = match self {
            Self::Held {
                promise, held_by, ..
            } => (" ok ", promise, held_by.clone()),
            Self::Gap {
                promise,
                gap,
                lacks,
            } => (
                "GAP ",
                promise,
                format!(
                    "nothing: this kernel lacks {lacks}; a run is refused unless its policy accepts {} (run.accept_gaps, --accept-gap)",
                    gap.name()
                ),
            ),
            Self::NoLandlock { promise, .. } => (
                "MISS",
                promise,
                "nothing: no Landlock (no run starts)".to_owned(),
            ),
        };
        format!("  [{mark}] {promise:<60} {by}")
    }
}

/// What the canary showed, where it ran.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryOutcome {
    Attempts(Vec<Attempt>),
    CouldNotRun(String),
}

/// `doctor --json`: everything the text report says, as one object.
#[derive(Debug, serde::Serialize)]
struct Report<'a> {
    /// The kernel's release (`uname -r`).
    release: String,
    /// The Landlock ABI lockrun uses here; 0 without Landlock.
    landlock_abi: u8,
    checks: &'a [Check],
    promises: &'a [PromiseLine],
    /// `null` with `--no-canary`.
    canary: Option<&'a CanaryOutcome>,
}

/// Run `doctor`; returns the exit status.
#[must_use]
pub fn run(args: &DoctorArgs) -> i32 {
    let kernel = run::kernel();
    if !args.json {
        println!("lockrun doctor: what this host can enforce");
    }
    let checks = host_checks();
    let promises = PromiseLine::of(&kernel);
    let host_ok = checks.iter().all(|c| c.ok) && promises.iter().all(PromiseLine::is_held);
    if !args.json {
        print_host(&checks, &promises);
    }
    let canary = (!args.no_canary).then(|| {
        if !args.json {
            println!("\nlive canary: a probe under a real sandbox tries to get out; each attempt judged from outside");
        }
        canary().map_or_else(
            |e| CanaryOutcome::CouldNotRun(e.to_string()),
            CanaryOutcome::Attempts,
        )
    });
    let code = exit_status(host_ok, canary.as_ref());
    if args.json {
        let report = Report {
            release: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            landlock_abi: kernel.landlock_abi(),
            checks: &checks,
            promises: &promises,
            canary: canary.as_ref(),
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                say!("lockrun: cannot print the doctor's report as JSON: {e}");
                return 1;
            }
        }
    } else if let Some(c) = &canary {
        print_canary(c, host_ok);
    }
    code
}

/// 0 when every promise holds (and the canary, if it ran, got nothing
/// out); [`CANARY_FAILED`] when it did, or could not be judged;
/// [`HOST_LACKS`] when the host lacks what some promise needs.
fn exit_status(host_ok: bool, canary: Option<&CanaryOutcome>) -> i32 {
    match canary {
        Some(CanaryOutcome::CouldNotRun(_)) => CANARY_FAILED,
        Some(CanaryOutcome::Attempts(a)) if !a.iter().all(|a| a.held) => CANARY_FAILED,
        _ if !host_ok => HOST_LACKS,
        _ => 0,
    }
}

fn print_host(checks: &[Check], promises: &[PromiseLine]) {
    for c in checks {
        println!(
            "  [{}] {:<22} {}  — {}",
            if c.ok { " ok " } else { "MISS" },
            c.what,
            c.detail,
            c.needed_for
        );
    }
    println!("\nthe promises that depend on the kernel, and what holds each here:");
    for p in promises {
        println!("{}", p.text());
    }
}

fn print_canary(canary: &CanaryOutcome, host_ok: bool) {
    let attempts = match canary {
        CanaryOutcome::Attempts(a) => a,
        CanaryOutcome::CouldNotRun(e) => {
            println!("  canary could not run: {e}");
            return;
        }
    };
    for a in attempts {
        println!(
            "  [{}] {:<9} {:<44} inside: {:<18} outside: {}",
            if a.held { " ok " } else { "FAIL" },
            if a.control { "control" } else { "escape" },
            a.what,
            a.inside,
            a.outside
        );
    }
    if !attempts.iter().all(|a| a.held) {
        println!("\nlockrun doctor: the canary got out or a control failed: this host does NOT confine as promised");
    } else if !host_ok {
        println!("\nlockrun doctor: the canary held, but the host lacks what some promises need (see MISS and GAP above)");
    } else {
        println!("\nlockrun doctor: every promise holds on this host");
    }
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The canary: one sandboxed run of `lockrun __probe` per attempt.
#[allow(clippy::too_many_lines)] // seven attempts, each set up, made and judged in turn
fn canary() -> std::io::Result<Vec<Attempt>> {
    let exe = std::env::current_exe()?;
    let scratch =
        Scratch(std::env::temp_dir().join(format!("lockrun-doctor-{}", std::process::id())));
    let base = &scratch.0;
    let worktree = base.join("worktree");
    let outside = base.join("outside");
    let state = base.join("state");
    for d in [&worktree, &outside, &state] {
        std::fs::create_dir_all(d)?;
    }
    let tcp_out = TcpListener::bind("127.0.0.1:0")?;
    tcp_out.set_nonblocking(true)?;
    let tcp_allowed = TcpListener::bind("127.0.0.1:0")?;
    tcp_allowed.set_nonblocking(true)?;
    let udp_out = UdpSocket::bind("127.0.0.1:0")?;
    udp_out.set_nonblocking(true)?;
    let sock_path = outside.join("outside.sock");
    let unix_out = UnixListener::bind(&sock_path)?;
    unix_out.set_nonblocking(true)?;
    let mut victim = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()?;

    let probe = |args: &[&str]| -> std::io::Result<String> {
        let out = Command::new(&exe)
            .arg("--worktree")
            .arg(&worktree)
            .arg("--state-dir")
            .arg(&state)
            .arg("--allow-local")
            .arg(tcp_allowed.local_addr()?.to_string())
            // What this kernel cannot hold is told above; the canary
            // proves what it does.
            .args(
                run::kernel()
                    .gaps()
                    .into_iter()
                    .flat_map(|g| ["--accept-gap", g.name()]),
            )
            .arg("--")
            .arg(&exe)
            .arg("__probe")
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if text.is_empty() {
            let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Ok(format!("no report (exit {:?}: {err})", out.status.code()));
        }
        Ok(text)
    };

    let mut attempts = Vec::new();
    // Controls: they must get through, or the canary proves nothing.
    let inside_file = worktree.join("control.txt");
    let r = probe(&["write", &inside_file.to_string_lossy()])?;
    let seen = std::fs::read(&inside_file).is_ok_and(|b| b == b"canary");
    attempts.push(Attempt {
        what: "write in the worktree".into(),
        outside: present(seen),
        held: seen && r == "ok",
        inside: r,
        control: true,
    });
    let r = probe(&["tcp", &tcp_allowed.local_addr()?.to_string()])?;
    let got = accepted_bytes(&tcp_allowed);
    attempts.push(Attempt {
        what: format!("TCP to the allowed {}", tcp_allowed.local_addr()?),
        outside: format!("listener received {got} bytes"),
        held: got > 0 && r == "ok",
        inside: r,
        control: true,
    });

    // Escapes: each must be refused, and nothing may arrive outside.
    let outside_file = outside.join("escaped.txt");
    let r = probe(&["write", &outside_file.to_string_lossy()])?;
    let exists = outside_file.exists();
    attempts.push(Attempt {
        what: format!("write {}", outside_file.display()),
        outside: present(exists),
        held: !exists && refused(&r),
        inside: r,
        control: false,
    });
    let r = probe(&["tcp", &tcp_out.local_addr()?.to_string()])?;
    let got = accepted_bytes(&tcp_out);
    attempts.push(Attempt {
        what: format!("TCP to an outside listener {}", tcp_out.local_addr()?),
        outside: format!("listener accepted {got} connections/bytes"),
        held: got == 0 && refused(&r),
        inside: r,
        control: false,
    });
    let r = probe(&["udp", &udp_out.local_addr()?.to_string()])?;
    let mut buf = [0u8; 64];
    let got = udp_out.recv(&mut buf).unwrap_or(0);
    attempts.push(Attempt {
        what: format!("UDP to {}", udp_out.local_addr()?),
        outside: format!("socket received {got} bytes"),
        held: got == 0 && refused(&r),
        inside: r,
        control: false,
    });
    let r = probe(&["unix", &sock_path.to_string_lossy()])?;
    let got = unix_out.accept().is_ok();
    attempts.push(Attempt {
        what: format!("unix socket {}", sock_path.display()),
        outside: if got {
            "listener accepted a connection".into()
        } else {
            "listener accepted nothing".into()
        },
        held: !got && refused(&r),
        inside: r,
        control: false,
    });
    let r = probe(&["signal", &victim.id().to_string()])?;
    std::thread::sleep(Duration::from_millis(20));
    let alive = victim.try_wait()?.is_none();
    attempts.push(Attempt {
        what: format!("SIGTERM to an outside process (pid {})", victim.id()),
        outside: if alive {
            "still alive".into()
        } else {
            "it died".into()
        },
        held: alive && refused(&r),
        inside: r,
        control: false,
    });
    let _ = victim.kill();
    let _ = victim.wait();
    Ok(attempts)
}

/// An escape holds only if the probe really ran and the kernel refused it:
/// it reported an errno. A probe that never ran (lockrun could not set up,
/// the probe was not found) proves nothing.
fn refused(report: &str) -> bool {
    report.starts_with("errno=")
}

fn present(b: bool) -> String {
    if b {
        "file exists".into()
    } else {
        "file absent".into()
    }
}

/// Connections waiting on a non-blocking listener, and the bytes they sent
/// (a connection that sent nothing still counts as 1).
fn accepted_bytes(l: &TcpListener) -> usize {
    let mut total = 0;
    loop {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                total += buf.len().max(1);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return total,
            Err(_) => return total.max(1),
        }
    }
}
