//! The summary's lines for each kind of refusal, and records read back as written.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report
use super::summary::SHOWN_PER_LINE;
use super::*;
use crate::testing::Scratch;

/// The summary's lines of a log kept nowhere (`--audit-log` not given),
/// but the last, which must tell how to get the details.
fn refusals(log: &AuditLog) -> Vec<String> {
    let mut lines = log.summary();
    assert_eq!(
        lines.pop().as_deref(),
        Some(
            "lockrun: for details and the policy lines that would allow them, run it again \
             with --audit-log FILE, then: lockrun audit FILE"
        )
    );
    lines
}

#[test]
fn the_details_are_where_the_log_is_and_nothing_is_said_without_a_refusal() {
    let scratch = Scratch::new("summary");
    let dir = scratch.path().to_path_buf();
    let path = dir.join("audit.jsonl");
    let kept = AuditLog::open(Some(&path)).unwrap();
    assert_eq!(kept.summary(), Vec::<String>::new());
    kept.record(k("127.0.0.1:6379", "redis-cli"));
    assert_eq!(
        kept.summary(),
        vec![
            "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
            format!(
                "lockrun: details and the policy lines that would allow them: lockrun audit {}",
                path.display()
            ),
        ]
    );
    let unkept = AuditLog::open(None).unwrap();
    assert_eq!(unkept.summary(), Vec::<String>::new());
}

/// The kills out of memory say where it ran out: at the run's limit
/// (raise it), or above the run (raising it would not help).
#[test]
fn kills_out_of_memory_say_where_it_ran_out() {
    let kill = |ran_out| Event::MemoryLimit {
        limit: 64 << 20,
        killed: 2,
        peak: Some(60 << 20),
        ran_out,
    };
    let log = AuditLog::open(None).unwrap();
    log.record(kill(RanOut::AtTheRunsLimit));
    assert_eq!(
        refusals(&log),
        [
            "lockrun: the kernel killed 2 processes of the run (SIGKILL, out of memory): the run \
          had reached its memory limit of 64 MiB, its processes together (run.max_memory in \
          the policy)"
        ]
    );
    let log = AuditLog::open(None).unwrap();
    log.record(kill(RanOut::AboveTheRun));
    assert_eq!(
        refusals(&log),
        [
            "lockrun: the kernel killed 2 processes of the run (SIGKILL, out of memory): memory \
          ran out above the run (the machine's, or a cgroup's lockrun is in), which had not \
          reached its own limit of 64 MiB; a run's processes are the kernel's first pick there"
        ]
    );
    let now = serde_json::to_string(&kill(RanOut::AboveTheRun)).unwrap();
    assert!(now.contains(r#""ran_out":"above_the_run""#), "{now}");
}

/// Forks refused say where the tasks ran out: at the run's limit, or
/// above the run (a cgroup's lockrun is in).
#[test]
fn refused_forks_say_where_the_tasks_ran_out() {
    let refused = |ran_out| Event::TaskLimit {
        limit: 16,
        refused: 3,
        ran_out,
    };
    let log = AuditLog::open(None).unwrap();
    log.record(refused(RanOut::AtTheRunsLimit));
    assert_eq!(
        refusals(&log),
        [
            "lockrun: 3 forks or threads refused (EAGAIN): the run had reached its limit of 16 \
          tasks, processes and threads at once (run.max_tasks in the policy)"
        ]
    );
    let log = AuditLog::open(None).unwrap();
    log.record(refused(RanOut::AboveTheRun));
    assert_eq!(
        refusals(&log),
        [
            "lockrun: 3 forks or threads refused (EAGAIN): tasks ran out above the run (a \
          cgroup's lockrun is in, e.g. its caller's), which had not reached its own limit of 16"
        ]
    );
    let now = serde_json::to_string(&refused(RanOut::AboveTheRun)).unwrap();
    assert!(now.contains(r#""ran_out":"above_the_run""#), "{now}");
}

fn fs(path: Option<&str>, access: &[&str], comm: &str) -> Event {
    Event::Filesystem(FsEvent {
        pid: 1,
        comm: comm.into(),
        path: path.map(Into::into),
        access: access.iter().map(|&a| a.into()).collect(),
        raw: String::new(),
        other_name_of: None,
        errno: None,
    })
}

#[test]
fn a_filesystem_refusal_says_what_was_refused_where() {
    let log = AuditLog::open(None).unwrap();
    log.record(fs(Some("/etc"), &["fs.make_reg"], "sh"));
    log.record(fs(Some("/etc"), &["fs.remove_file"], "rm"));
    log.record(fs(Some("/etc/passwd"), &["fs.write_file"], "touch"));
    log.record(fs(Some("/etc/passwd"), &["fs.write_file"], "sh"));
    log.record(fs(Some("/etc/passwd"), &["metadata.utimes"], "touch"));
    log.record(fs(Some("/etc/x"), &["fs.write_file", "fs.truncate"], "sh"));
    log.record(fs(Some("/vault"), &["fs.read_dir"], "ls"));
    log.record(fs(None, &["fs.future_right"], ""));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 8 filesystem accesses refused: fs.future_right (path unknown), \
             create a file in /etc (sh), remove a file from /etc (rm), \
             set the times of /etc/passwd (touch), write /etc/passwd ×2 (touch, sh), \
             write and truncate /etc/x (sh), list /vault (ls)"
                .to_owned(),
            "lockrun: the kernel named no process for 1 of these (it names none on a host \
             whose audit rules leave the run out of syscall auditing, e.g. `-a task,never`)"
                .to_owned(),
        ]
    );
}

fn k(dest: &str, comm: &str) -> Event {
    Event::KernelNetwork(KernelNetEvent {
        pid: 1,
        tgid: 1,
        comm: comm.into(),
        cgroup_id: 7,
        hook: "connect4".into(),
        family: "inet".into(),
        protocol: "tcp".into(),
        destination: Destination::Inet(dest.parse().unwrap()),
        target_absent: false,
        direction: Direction::Outbound,
        local_port: 0,
    })
}

#[test]
fn lost_audit_records_are_told_once_per_cause_even_with_nothing_else_refused() {
    let dropped = AuditLoss::Dropped {
        records: 3,
        backlog_limit: 64,
        rate_limit: 0,
    };
    let log = AuditLog::open(None).unwrap();
    log.record(Event::AuditRecordsLost(AuditLoss::SocketFull));
    log.record(Event::AuditRecordsLost(dropped));
    log.record(Event::AuditRecordsLost(AuditLoss::SocketFull));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: lockrun's kernel audit socket overflowed while the run went on, so this \
             run's filesystem and scope refusals may not all be shown"
                .to_owned(),
            "lockrun: the kernel dropped 3 audit records on this machine while the run went on \
             (more were waiting than its backlog limit of 64), so this run's filesystem and \
             scope refusals may not all be shown; `auditctl -b 8192` raises the backlog limit"
                .to_owned(),
        ]
    );
    // The causes the kernel's limits give.
    let said = |backlog_limit, rate_limit| {
        AuditLoss::Dropped {
            records: 1,
            backlog_limit,
            rate_limit,
        }
        .to_string()
    };
    assert!(said(64, 100).contains(
        "1 audit record on this machine while the run went on (more were waiting than its \
         backlog limit of 64, or more came than its rate limit of 100 a second)"
    ));
    assert!(said(0, 100).contains("(more came than its rate limit of 100 a second)"));
    assert!(said(0, 0).contains("(it had no memory for them)"));
    // As the log writes it, and read back.
    let line = serde_json::to_string(&Event::AuditRecordsLost(dropped)).unwrap();
    assert_eq!(
        line,
        r#"{"event":"audit_records_lost","cause":"dropped","records":3,"backlog_limit":64,"rate_limit":0}"#
    );
    assert_eq!(
        serde_json::from_str::<Event>(&line).unwrap(),
        Event::AuditRecordsLost(dropped)
    );
    let full = serde_json::to_string(&Event::AuditRecordsLost(AuditLoss::SocketFull)).unwrap();
    assert_eq!(
        full,
        r#"{"event":"audit_records_lost","cause":"socket_full"}"#
    );
    assert_eq!(
        serde_json::from_str::<Event>(&full).unwrap(),
        Event::AuditRecordsLost(AuditLoss::SocketFull)
    );
}

#[test]
fn a_summary_line_names_at_most_a_dozen_targets_and_counts_the_rest() {
    let log = AuditLog::open(None).unwrap();
    for port in 1..=20u16 {
        log.record(k(&format!("127.0.0.1:{port}"), "nc"));
    }
    let lines = refusals(&log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("lockrun: 20 connections refused: "),
        "{line}"
    );
    assert!(line.ends_with(", 8 more targets"), "{line}");
    assert_eq!(line.matches("(nc)").count(), SHOWN_PER_LINE, "{line}");
}

#[test]
fn summary_groups_by_destination() {
    let log = AuditLog::open(None).unwrap();
    log.record(k("127.0.0.1:6379", "redis-cli"));
    log.record(k("127.0.0.1:6379", "redis-cli"));
    log.record(k("[::1]:22", "ssh"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 3 connections refused: 127.0.0.1:6379 ×2 (redis-cli), [::1]:22 (ssh)"
                .to_owned()
        ]
    );
}

/// A packet between `peer` and the run's `port` that a packet program
/// (`hook`) dropped: judged in no task's context, so no process.
fn packet(hook: &str, direction: Direction, peer: &str, port: u16, protocol: &str) -> Event {
    Event::KernelNetwork(KernelNetEvent {
        pid: 0,
        tgid: 0,
        comm: String::new(),
        cgroup_id: 7,
        hook: hook.into(),
        family: "inet".into(),
        protocol: protocol.into(),
        destination: Destination::Inet(peer.parse().unwrap()),
        target_absent: false,
        direction,
        local_port: port,
    })
}

/// A packet from `peer` to the run's `port`, dropped by `ingress`.
fn inbound(peer: &str, port: u16, protocol: &str) -> Event {
    packet("ingress", Direction::Inbound, peer, port, protocol)
}

#[test]
fn inbound_drops_are_their_own_line_by_peer_and_port() {
    let log = AuditLog::open(None).unwrap();
    // Two SYNs of one connection attempt, from two source ports.
    log.record(inbound("10.1.2.3:40000", 8080, "tcp"));
    log.record(inbound("10.1.2.3:40001", 8080, "tcp"));
    log.record(inbound("[fd00::2]:5353", 9000, "udp"));
    log.record(k("127.0.0.1:6379", "redis-cli"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 3 packets from outside dropped (a run takes no traffic from beyond loopback, and no policy changes that): from 10.1.2.3 to port 8080 (tcp) ×2, from fd00::2 to port 9000 (udp)".to_owned(),
            "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
        ]
    );
    assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
}

#[test]
fn packets_dropped_on_their_way_out_are_their_own_line() {
    let log = AuditLog::open(None).unwrap();
    let egress = |peer, port| packet("egress", Direction::Outbound, peer, port, "tcp");
    // A SYN-ACK and its retransmit, then another connection's.
    log.record(egress("10.1.2.3:40000", 8080));
    log.record(egress("10.1.2.3:40000", 8080));
    log.record(egress("10.1.2.3:40001", 8080));
    log.record(k("127.0.0.1:6379", "redis-cli"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 3 packets to outside dropped (a run's sockets exchange packets only with loopback, and no policy changes that): from port 8080 to 10.1.2.3:40000 (tcp) ×2, from port 8080 to 10.1.2.3:40001 (tcp)".to_owned(),
            "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
        ]
    );
    assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
}

#[test]
fn refused_system_calls_are_their_own_line_and_layer() {
    let log = AuditLog::open(None).unwrap();
    let call = |call: &str, comm: &str| {
        Event::Syscall(SyscallEvent {
            pid: 9,
            comm: comm.into(),
            cgroup_id: 7,
            call: call.into(),
            why: Widens::Namespaces,
        })
    };
    log.record(call("unshare", "bwrap"));
    log.record(call("unshare", "bwrap"));
    log.record(call("clone with CLONE_NEWUSER", "chrome"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 3 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): clone with CLONE_NEWUSER (chrome), unshare ×2 (bwrap)".to_owned(),
        ]
    );
    assert_eq!(log.refused(), BTreeMap::from([(Layer::Syscall, 3)]));
}

#[test]
fn sockets_of_a_refused_kind_are_their_own_line() {
    let log = AuditLog::open(None).unwrap();
    let socket = |family: &str, protocol: &str, comm: &str| {
        Event::KernelNetwork(KernelNetEvent {
            pid: 9,
            tgid: 9,
            comm: comm.into(),
            cgroup_id: 7,
            hook: "sock_create".into(),
            family: family.into(),
            protocol: protocol.into(),
            destination: Destination::Inet("0.0.0.0:0".parse().unwrap()),
            target_absent: false,
            direction: Direction::Outbound,
            local_port: 0,
        })
    };
    log.record(socket("inet", "udplite", "python3"));
    log.record(socket("inet", "udplite", "python3"));
    log.record(socket("inet6", "icmp", "ping"));
    log.record(k("127.0.0.1:6379", "redis-cli"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
            "lockrun: 3 sockets refused (a run may make inet sockets of three kinds only, TCP, MPTCP and UDP, and no policy changes that): inet udplite ×2 (python3), inet6 icmp (ping)".to_owned(),
        ]
    );
    assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
}

#[test]
fn inbound_drops_past_the_itemized_ones_are_counted_on_the_same_line() {
    let log = AuditLog::open(None).unwrap();
    log.record(inbound("10.1.2.3:40000", 9000, "udp"));
    log.record(Event::InboundNotItemized {
        count: 4999,
        per_cpu: 32,
    });
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 5000 packets from outside dropped (a run takes no traffic from beyond loopback, and no policy changes that): from 10.1.2.3 to port 9000 (udp), 4999 more not itemized (only the first 32 on each CPU are)".to_owned(),
        ]
    );
    assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&5000));
}

#[test]
fn scoping_refusals_are_their_own_line_and_layer() {
    let log = AuditLog::open(None).unwrap();
    let sc = |target: ScopeTarget, comm: &str| {
        Event::Scope(ScopeEvent {
            pid: 7,
            comm: comm.into(),
            target,
            raw: String::new(),
        })
    };
    let sig = ScopeTarget::Signal {
        to_pid: 42,
        to_comm: "sshd".into(),
    };
    log.record(sc(sig.clone(), "kill"));
    log.record(sc(sig, "sh"));
    log.record(sc(
        ScopeTarget::AbstractUnixSocket {
            name: "dbus-x".into(),
        },
        "gdbus",
    ));
    log.record(sc(
        ScopeTarget::Ptrace {
            to_pid: 7,
            to_comm: "agent".into(),
        },
        "cat",
    ));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 4 attempts to reach processes outside the run refused (Landlock; no \
             policy allows it): signal to pid 42 (sshd) ×2 (kill, sh), abstract unix socket \
             @dbus-x (gdbus), ptrace or /proc access to pid 7 (agent) (cat)"
                .to_owned()
        ]
    );
    assert_eq!(log.refused(), BTreeMap::from([(Layer::Scope, 4)]));
}

#[test]
fn proxy_refusals_without_a_target_are_named_by_their_reason() {
    let log = AuditLog::open(None).unwrap();
    let cap = "too many connections (run.max_connections = 256)";
    log.record(proxy("", 0, ProxyVerdict::Overloaded, cap, 503));
    log.record(proxy("", 0, ProxyVerdict::Overloaded, cap, 503));
    log.record(proxy(
        "evil.example",
        443,
        ProxyVerdict::NotListed,
        "evil.example is not in the allowlist",
        403,
    ));
    assert_eq!(
        refusals(&log),
        vec![format!(
            "lockrun: 3 proxy requests refused: ({cap}) ×2, evil.example:443"
        )]
    );
}

fn proxy(host: &str, port: u16, verdict: ProxyVerdict, reason: &str, status: u16) -> Event {
    Event::Proxy(ProxyEvent {
        method: if host.is_empty() { "" } else { "CONNECT" }.into(),
        host: host.into(),
        port,
        dialed: None,
        allowed: verdict.allowed(),
        reason: reason.into(),
        status,
        verdict,
        via: None,
        basis: None,
    })
}

/// A request the policy allowed whose upstream failed (its name did not
/// resolve, no connection) is said apart, after the refusals and their
/// pointer to policy lines, and counted as no refusal; the credentials
/// challenge is not said at all.
#[test]
fn an_allowed_request_whose_upstream_failed_is_not_called_refused() {
    let log = AuditLog::open(None).unwrap();
    let unresolved = "resolving api.example.com failed: Name or service not known";
    for _ in 0..2 {
        let failed = ProxyVerdict::UpstreamFailed;
        log.record(proxy("api.example.com", 443, failed, unresolved, 502));
    }
    log.record(proxy(
        "git.example.com",
        443,
        ProxyVerdict::NoCredentials,
        "proxy credentials required",
        407,
    ));
    assert_eq!(
        log.summary(),
        vec![format!(
            "lockrun: 2 proxy requests the policy allowed failed upstream, not refused: api.example.com:443 ×2 ({unresolved})"
        )]
    );
    assert!(log.refused().is_empty());
    log.record(proxy(
        "evil.example",
        443,
        ProxyVerdict::NotListed,
        "evil.example is not in the allowlist",
        403,
    ));
    let lines = log.summary();
    assert_eq!(
        lines[0],
        "lockrun: 1 proxy request refused: evil.example:443"
    );
    assert!(lines[1].contains("--audit-log FILE"), "{lines:?}");
    assert!(
        lines[2].contains("failed upstream, not refused"),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 3);
    assert_eq!(log.refused(), BTreeMap::from([(Layer::Proxy, 1)]));
}

#[test]
fn records_round_trip() {
    let rec = Record {
        ts_ms: 5,
        event: k("127.0.0.1:1", "x"),
        run: Some("r".into()),
        seq: Some(3),
    };
    let line = serde_json::to_string(&rec).unwrap();
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.event, rec.event);
    assert_eq!((back.run.as_deref(), back.seq), (Some("r"), Some(3)));
}

#[test]
fn inbound_drops_over_loopback_name_the_setting_that_lets_them_in() {
    let log = AuditLog::open(None).unwrap();
    log.record(inbound("127.0.0.1:40000", 3000, "tcp"));
    log.record(inbound("[::1]:5353", 9000, "udp"));
    assert_eq!(
        refusals(&log),
        vec![
            "lockrun: 2 packets from outside dropped (a run takes no traffic from outside it; [network] expose lets this host's processes reach a port over loopback, never another host): from 127.0.0.1 to port 3000 (tcp), from ::1 to port 9000 (udp)".to_owned(),
        ]
    );
}
