//! lockrun: run one command confined by the kernel.
//!
//! | concern | module |
//! |---|---|
//! | what the running kernel offers, and the promises it leaves without a mechanism | [`kernel`] |
//! | the policy model (TOML + flags → one `Policy`) | [`policy`] |
//! | writes only to the worktree and `{tmp}`; deny-read paths (Landlock) | [`fs`] |
//! | syscalls that would widen the box (seccomp) | [`seccomp`] |
//! | the run's cgroup v2 | [`cgroup`] |
//! | the eBPF connect/sendmsg hooks, pinned, and their audit events | [`bpf`] |
//! | the allowlisting proxy | [`proxy`] |
//! | the audit log and end-of-run summary | [`audit`] |
//! | the order of the steps of one run, and what `gc` reaps in order | [`run`] |
//! | run dirs, their owners and ages; where a task is against a run's cgroup | [`state`] |
//! | lockrun's own warnings and debug lines on stderr (`LOCKRUN_LOG`) | [`log`] |
//! | what the run chose (names, paths) made inert before a person's terminal shows it | [`shown`] |
//! | metadata calls and unix connects answered from outside (seccomp user notification) | [`supervise`] |
//! | one run at a time on a worktree with git, by a lock no run can take | [`worktree_lock`] |
//! | the caller's terminal settings, put back after the run | [`terminal`] |
//! | the caller's stdin, stdout and stderr, handed on off the machine's writable mounts | [`stdio`] |
//! | files a caller or a policy names, read as regular files within a bound | [`regular_file`] |
//! | the few raw syscalls (the only `unsafe`, with `sys::bpf` for the bpf(2) calls aya lacks) | [`sys`] |

pub mod audit;
pub mod bpf;
pub mod cgroup;
pub mod cli;
pub mod commands;
pub mod exit;
pub mod fs;
pub mod gitguard;
pub mod kernel;
pub mod log;
pub mod policy;
pub mod proxy;
pub mod regular_file;
pub mod run;
pub mod seccomp;
pub mod shown;
pub mod state;
pub mod stdio;
pub mod supervise;
pub mod sys;
pub mod terminal;
#[cfg(test)]
mod testing;
pub mod worktree_lock;

#[cfg(test)]
mod tests {
    /// `build.rs` links the unwinder from `libgcc_eh.a` instead of `libgcc_s.so`:
    /// a panic must still unwind (tokio catches a task's panic this way).
    #[test]
    fn a_panic_unwinds_with_the_static_unwinder() {
        let caught = std::panic::catch_unwind(|| panic!("unwind me"));
        let payload = caught.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"unwind me"));
    }
}
