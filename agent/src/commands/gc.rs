//! `lockrun gc`: reap run dirs left by lockruns that are gone, and other
//! builds' programs and parent cgroups that no run uses any more; the
//! reapers and their order are listed in [`crate::run::gc`]. This prints
//! what each did.

use std::time::Duration;

use crate::audit::syscalls::reap_stale;
use crate::bpf::reap::{self, OtherBuild};
use crate::cli::GcArgs;
use crate::exit;
use crate::policy::{self, Overrides};
use crate::run::{chain, gc as run_gc};
use crate::shown::say;
use crate::{cgroup, state, worktree_lock};

#[must_use]
pub fn main(args: &GcArgs) -> i32 {
    // The grace and state dir come from the default policy unless given.
    let over = Overrides {
        state_dir: args.state_dir.clone(),
        worktree: Some(std::path::PathBuf::from("/")),
        ..Overrides::default()
    };
    let policy = match policy::load(None, &over) {
        Ok(p) => p,
        Err(e) => {
            say!("lockrun: {e}");
            return exit::USAGE;
        }
    };
    let grace = args
        .grace_secs
        .map_or(policy.run.gc_grace, Duration::from_secs);
    let runs = policy.runs_dir();
    match run_gc::gc(&runs, grace) {
        Ok(r) => {
            run_gc::forget_gone_runs();
            for p in &r.reaped {
                println!("reaped {}", p.display());
            }
            println!(
                "{} reaped, {} running, {} within the grace period",
                r.reaped.len(),
                r.kept_alive,
                r.kept_young
            );
            reap_orphan_cgroups(grace);
            reap_stale_audit_rules();
            // Task- and memory-limit cgroups of v1 hierarchies whose
            // run's cgroup is gone (a lockrun killed between the two).
            for o in cgroup::v1::reap_orphans() {
                let (what, id, at) = (o.hierarchy.what(), &o.run_id, o.path.display());
                let line = match o.kept {
                    None => format!(
                        "reaped the {what} cgroup of run {id} ({at}): its run's cgroup is gone"
                    ),
                    Some(e) => format!(
                        "kept the {what} cgroup of run {id} ({at}), whose run's cgroup is gone: {e}"
                    ),
                };
                println!("{line}");
            }
            let spares = state::remove_old_spares(&policy.run.state_dir.join(state::SPARES), grace);
            if spares > 0 {
                println!("removed {spares} spare run dirs older than the grace period");
            }
            reap_other_builds();
            let locks = policy.run.state_dir.join(worktree_lock::LOCKS_DIR);
            for p in worktree_lock::sweep(&locks) {
                println!(
                    "reaped {}: a worktree's lock no run holds (its lockrun was killed)",
                    p.display()
                );
            }
            0
        }
        Err(e) => {
            say!("lockrun: gc: reading {}: {e}", runs.display());
            1
        }
    }
}

/// Run cgroups no run dir here accounts for; a line for each reaped, and
/// one for those left because nothing tells whose they are.
fn reap_orphan_cgroups(grace: Duration) {
    match run_gc::reap_orphan_cgroups(grace) {
        Ok(r) => {
            for id in &r.reaped {
                println!("reaped the cgroup of run {id}: its lockrun is gone");
            }
            for id in &r.kept_elsewhere {
                println!(
                    "kept the cgroup of run {id}: its lockrun is in another pid namespace, \
                     where only a gc can tell whether it still runs"
                );
            }
            if !r.kept_unknown.is_empty() {
                let n = r.kept_unknown.len();
                println!(
                    "kept {n} run cgroup{} with processes in {} whose lockrun is not recorded \
                     (made by an earlier lockrun): {}",
                    if n == 1 { "" } else { "s" },
                    if n == 1 { "it" } else { "them" },
                    r.kept_unknown.join(", ")
                );
            }
        }
        Err(e) => say!("lockrun: warning: gc: the run cgroups: {e}"),
    }
}

/// The kernel audit rules of runs whose cgroup is gone (a lockrun killed
/// below Landlock ABI 7, see [`crate::audit::syscalls`]); a line for each
/// removed.
fn reap_stale_audit_rules() {
    match reap_stale(cgroup::live_run_cgroup_ids) {
        Ok(rules) => {
            for (uid, refused) in rules {
                println!(
                    "removed the kernel audit rule of login uid {uid} ({refused}): its run's \
                     cgroup is gone"
                );
            }
        }
        Err(e) => say!("lockrun: warning: gc: the runs' kernel audit rules: {e}"),
    }
}

/// Other lockrun builds' parent cgroups and pinned programs, where none of
/// their runs is left; one line for each build found.
fn reap_other_builds() {
    match reap::reap_other_builds() {
        Ok(builds) => {
            for b in builds {
                match b {
                    OtherBuild::Reaped { id } => {
                        println!("reaped build {id}: its parent cgroup and pinned programs");
                    }
                    OtherBuild::InUse { id } => {
                        println!("kept build {id}: runs are still in its parent cgroup");
                    }
                    OtherBuild::Deferred { id } => println!(
                        "kept build {id}: one of its runs attached while gc reaped; a later gc removes it"
                    ),
                }
            }
        }
        Err(e) => say!(
            "lockrun: warning: gc: other builds' programs: {}",
            chain(&e)
        ),
    }
}
