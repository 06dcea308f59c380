//! The kernel allows a run exactly one way out: escape tests for the cgroup
//! eBPF hooks (`lockrun::bpf`) on the run's cgroup (`lockrun::cgroup`).
//!
//! Until the run flow lands, each test builds the run at the library level
//! (root): a cgroup, the hooks with an allow list, and a probe process that is
//! moved into the cgroup before it tries anything. Each escape is judged from
//! outside (the test's own listener receives nothing) and by the errno the
//! probe got, and has a control beside it that must get through. After each
//! test no cgroup, pin or link may remain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "net_support.rs"]
mod support;

use support::{assert_eperm, assert_event, Run, TcpSink};

#[test]
fn tcp_to_unlisted_loopback_ports_is_refused() {
    const T: &str = "tcp_to_unlisted_loopback_ports_is_refused";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    // Control: the allowed endpoint works, bytes arrive.
    let out = run.probe(&["tcp", "127.0.0.1", &allowed.port().to_string()]);
    assert_eq!(out, "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    // Escape: another port on the same address.
    let out = run.probe(&["tcp", "127.0.0.1", &other.port().to_string()]);
    assert_eperm("tcp 127.0.0.1", &out);
    assert_eq!(other.received(), None, "the listener must receive nothing");
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", &other.addr.to_string());
    assert_eq!(events.len(), 1);
}
