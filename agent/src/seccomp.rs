//! The seccomp program every run loads (seccomp-bpf, Linux 3.5): the
//! filter of the `lockrun_seccomp` crate (its deny list, the calls handed
//! to the supervisor, the fallbacks for older kernels), as the build script
//! compiled it where the kernel needs no fallback, else built now.
//! Loaded in the child ([`crate::sys`]); the supervisor answers what it
//! hands over ([`crate::supervise`]).

use lockrun_seccomp::{Fallbacks, SeccompError};
use seccompiler::BpfProgram;

/// The filter for a kernel that lacks the mechanisms of `fallbacks`
/// ([`crate::kernel::Features::fallbacks`]), in the order and with the
/// verdicts [`lockrun_seccomp::compile`] gives. With no fallback, it is
/// the program the build script compiled (agent/build.rs), so that no run
/// builds and compacts it at start-up; with one, the program has a part
/// more and is built now.
pub fn combined(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    if fallbacks != Fallbacks::NONE {
        return lockrun_seccomp::compile(fallbacks);
    }
    #[cfg(lockrun_seccomp_built)]
    {
        Ok(BUILT
            .iter()
            .map(|&(code, jt, jf, k)| lockrun_seccomp::assemble::insn(code, jt, jf, k))
            .collect())
    }
    #[cfg(not(lockrun_seccomp_built))]
    lockrun_seccomp::compile(Fallbacks::NONE)
}

/// [`combined`] with no fallback as the build script compiled it:
/// `(code, jt, jf, k)`.
#[cfg(lockrun_seccomp_built)]
#[allow(clippy::unreadable_literal)]
const BUILT: &[(u16, u8, u8, u32)] = include!(concat!(env!("OUT_DIR"), "/seccomp_filter.rs"));

#[cfg(test)]
mod tests {
    use lockrun_seccomp::Fallbacks;

    /// The filter every run loads is the one the crate builds: the build
    /// script's copy (compiled from that crate) is not stale, and the build
    /// embedded it (on the build's own architecture it always does).
    #[test]
    fn the_filter_a_run_loads_is_the_one_the_crate_builds() {
        let key = |p: &[seccompiler::sock_filter]| -> Vec<(u16, u8, u8, u32)> {
            p.iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect()
        };
        let loaded = super::combined(Fallbacks::NONE).unwrap_or_else(|e| panic!("{e}"));
        let built = lockrun_seccomp::compile(Fallbacks::NONE).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key(&loaded), key(&built));
        // A fact of the build, checked where the tests run.
        #[allow(clippy::assertions_on_constants)]
        {
            assert!(
                cfg!(lockrun_seccomp_built),
                "the build script did not build the filter"
            );
        }
    }
}
