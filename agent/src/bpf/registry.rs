//! The runs registered in the shared maps, and forgetting those whose
//! cgroup is gone (`lockrun gc`).

use lockrun_common::{RunEndpoint, RunPort};

use super::hooks::PrefixData;
use super::reap::remove_abandoned_loads;
use super::shared::{open_shared, Shared};
use super::BpfError;
use crate::cgroup;

/// The cgroup ids of the runs registered in the shared maps (`RUNS`).
pub fn registered_runs() -> Result<Vec<u64>, BpfError> {
    Ok(open_shared()?
        .map(|s| s.runs.keys().filter_map(Result::ok).collect())
        .unwrap_or_default())
}

/// gc: remove the runs of these cgroups (reaped: their processes are gone)
/// from the shared maps and free their ring slots.
pub fn forget_runs(cgroup_ids: &[u64]) -> Result<(), BpfError> {
    if cgroup_ids.is_empty() {
        return Ok(());
    }
    if let Some(mut shared) = open_shared()? {
        forget(&mut shared, cgroup_ids);
    }
    Ok(())
}

/// `lockrun gc`: forget every registered run whose cgroup no longer exists
/// (e.g. removed by hand after lockrun was killed), and remove abandoned
/// program loads. Returns how many runs. A run in its teardown (cgroup
/// removed, hooks not yet finished) would lose its counts: only the explicit
/// gc command sweeps this broadly; a run's start-up sweep forgets exactly the
/// runs it reaped ([`forget_runs`]).
pub fn forget_gone_runs() -> Result<usize, BpfError> {
    remove_abandoned_loads();
    let Some(mut shared) = open_shared()? else {
        return Ok(0);
    };
    // Keys first, live cgroups second: a run registers after its cgroup
    // exists, so a key whose cgroup is missing from the later listing is gone.
    let mut gone: Vec<u64> = shared
        .slot_owners
        .iter()
        .filter_map(Result::ok)
        .map(|(_, cg)| cg)
        .collect();
    gone.extend(shared.runs.keys().filter_map(Result::ok));
    gone.extend(shared.counters.keys().filter_map(Result::ok));
    gone.extend(
        shared
            .endpoints
            .keys()
            .filter_map(Result::ok)
            .map(|k| k.cgroup_id),
    );
    gone.extend(
        shared
            .exposed
            .keys()
            .filter_map(Result::ok)
            .map(|k| k.cgroup_id),
    );
    gone.extend(
        shared
            .prefixes
            .keys()
            .filter_map(Result::ok)
            .map(|k| prefix_cgroup(&k)),
    );
    let live = cgroup::live_run_cgroup_ids()?;
    gone.sort_unstable();
    gone.dedup();
    gone.retain(|cg| !live.contains(cg));
    forget(&mut shared, &gone);
    Ok(gone.len())
}

pub(super) fn prefix_cgroup(k: &aya::maps::lpm_trie::Key<PrefixData>) -> u64 {
    let d = k.data();
    u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

pub(super) fn forget(shared: &mut Shared, gone: &[u64]) {
    let endpoints: Vec<RunEndpoint> = shared.endpoints.keys().filter_map(Result::ok).collect();
    let exposed: Vec<RunPort> = shared.exposed.keys().filter_map(Result::ok).collect();
    let prefixes: Vec<_> = shared.prefixes.keys().filter_map(Result::ok).collect();
    let owners: Vec<(u32, u64)> = shared.slot_owners.iter().filter_map(Result::ok).collect();
    for cg in gone {
        let _ = shared.runs.remove(cg);
        let _ = shared.counters.remove(cg);
        for k in endpoints.iter().filter(|k| k.cgroup_id == *cg) {
            let _ = shared.endpoints.remove(k);
        }
        for k in exposed.iter().filter(|k| k.cgroup_id == *cg) {
            let _ = shared.exposed.remove(k);
        }
        for k in prefixes.iter().filter(|k| prefix_cgroup(k) == *cg) {
            let _ = shared.prefixes.remove(k);
        }
    }
    for (slot, cg) in owners {
        if gone.contains(&cg) {
            shared.release_slot(slot);
        }
    }
}
