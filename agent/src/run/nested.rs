//! A lockrun started inside a run: named, and refused in one clear line.
//!
//! A run's command is told its run id in [`RUN_ID_VAR`]. A lockrun started
//! inside (an agent running a project's tests that use lockrun, a nested
//! agent) cannot build a sandbox there: the outer run refuses it the cgroup
//! writes, `bpf(2)` and the audit socket a run needs, and it would fail on
//! whichever comes first with a message about permissions that points the
//! user at the wrong thing. So it refuses up front, naming the run it is in.
//!
//! The variable alone is not trusted: it is a name the command could copy
//! anywhere. The kernel must also say this process is confined the way a
//! run's command is (`NoNewPrivs: 1` and `Seccomp: 2` in
//! `/proc/self/status`). A command that drops the variable changes only the
//! message: the nested lockrun still fails closed, on the first step the
//! outer run refuses.

/// The variable that names the run to its command.
pub const RUN_ID_VAR: &str = "LOCKRUN_RUN_ID";

/// The run this process is confined by, if it is inside one: its
/// environment names the run and the kernel confirms the confinement.
#[must_use]
pub fn enclosing_run() -> Option<String> {
    let id = std::env::var(RUN_ID_VAR).ok().filter(|id| !id.is_empty())?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    confined(&status).then_some(id)
}

/// Whether `/proc/<pid>/status` shows what every run's command has:
/// `no_new_privs` and a seccomp filter.
#[must_use]
pub fn confined(status: &str) -> bool {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    field("NoNewPrivs") == Some("1") && field("Seccomp") == Some("2")
}

/// The one line a lockrun inside run `id` prints before refusing (exit 125).
#[must_use]
pub fn refusal(id: &str) -> String {
    format!(
        "lockrun: this process is already confined by lockrun run {id}: a sandbox cannot be \
         started inside it (the outer run refuses the cgroups, BPF and kernel audit a run \
         needs); run the command directly, it is confined by run {id}"
    )
}

#[cfg(test)]
mod tests {
    use super::confined;

    const STATUS: &str =
        "Name:\tsh\nUmask:\t0022\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";

    #[test]
    fn confined_needs_no_new_privs_and_a_filter() {
        assert!(confined(STATUS));
        assert!(!confined(
            &STATUS.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
        ));
        assert!(!confined(&STATUS.replace("Seccomp:\t2", "Seccomp:\t0")));
        // strict mode (1) is not how a run's command is confined
        assert!(!confined(&STATUS.replace("Seccomp:\t2", "Seccomp:\t1")));
        // Seccomp_filters is another field, not Seccomp
        assert!(!confined("NoNewPrivs:\t1\nSeccomp_filters:\t2\n"));
        assert!(!confined(""));
    }
}
