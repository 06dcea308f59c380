//! The kernel network policy: cgroup/connect4, connect6, sendmsg4, sendmsg6
//! (and the unix hooks) attached to the run's cgroup, pinned in bpffs.
//!
//! CONTRACT (filled in by the eBPF work).

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("not implemented yet")]
    Todo,
}
