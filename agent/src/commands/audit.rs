//! `lockrun audit FILE [--json]`: read an audit log (JSON lines of
//! [`crate::audit::Record`]), check its seals, and print what
//! [`crate::audit::explain`] says of each run in it. This is the edge:
//! reading the file and the key, reloading the run's policy as it is now,
//! and printing.

use std::path::{Path, PathBuf};

use crate::audit::explain::{
    render_text, summarize, DenySource, FsContext, RunMeta, RunSummary, SealStatus,
};
use crate::audit::read::{self, Log};
use crate::audit::seal::{SealKey, KEY_FILE};
use crate::cli::AuditArgs;
use crate::exit;
use crate::policy::{self, Overrides, PathSpec, Policy};
use crate::shown::say;

/// The `audit` subcommand: exit 0 when the log was read whole and no seal
/// it could check failed (or there was no key to check with), 1 when a line
/// was not a record or a run's lines do not hold with the key, 2 when the
/// log could not be read.
#[must_use]
pub fn run(args: &AuditArgs) -> i32 {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| default_state_dir(&home));
    let state_dir = state_dir.canonicalize().unwrap_or(state_dir);
    let key = SealKey::read(&state_dir.join(KEY_FILE));
    let (key, no_key) = match key {
        Ok(k) => (Some(k), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let log = match read::read(&args.file, key) {
        Ok(l) => l,
        Err(e) => {
            say!("lockrun audit: {e}");
            return exit::USAGE;
        }
    };
    for u in &log.unreadable {
        say!(
            "lockrun audit: {}:{}: not an audit record, passed over: {}",
            args.file.display(),
            u.line,
            u.why
        );
    }
    let mut runs = summarize(
        &log.records,
        |meta, seen_paths| host_context(&home, &state_dir, meta, seen_paths),
        &|p: &Path| p.is_dir(),
    );
    for run in &mut runs {
        if run.seal == SealStatus::Unsealed {
            continue;
        }
        run.seal = seal_status(run, &log, no_key.as_deref(), &state_dir);
    }
    let broken = runs.iter().any(|r| r.seal.broken()) || !log.unreadable.is_empty();
    if args.json {
        match serde_json::to_string_pretty(&serde_json::json!({ "runs": runs })) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                say!("lockrun audit: cannot write JSON: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", render_text(&runs));
    }
    i32::from(broken)
}

/// What the seals of a sealed run's lines say.
fn seal_status(run: &RunSummary, log: &Log, no_key: Option<&str>, state_dir: &Path) -> SealStatus {
    let Some(key) = log.key() else {
        return SealStatus::NotChecked {
            why: format!(
                "not checked: no key to check the seals with ({}); --state-dir names the state \
                 dir of the runs that wrote the log",
                no_key.unwrap_or("none")
            ),
        };
    };
    let id = run.run_id.as_deref().unwrap_or_default();
    let Some(seal) = log.seal_of(id) else {
        return SealStatus::Unsealed;
    };
    match &run.seal_key {
        Some(theirs) if *theirs != key.id() && seal.broken.len() as u64 >= seal.sealed => {
            return SealStatus::OtherKey {
                key: theirs.clone(),
                said: format!(
                    "NOT verified: no line holds with the key of {} ({}); the run names key \
                     {theirs}: --state-dir names the state dir of the run, if lockrun wrote it",
                    state_dir.display(),
                    key.id()
                ),
            };
        }
        _ => {}
    }
    if seal.whole() {
        SealStatus::Verified { lines: seal.sealed }
    } else {
        SealStatus::Broken {
            said: seal.to_string(),
        }
    }
}

/// The filesystem context of a run on this host: the secret floor, the run's
/// policy reloaded (when it still loads), and the state dirs.
fn host_context(
    home: &Path,
    state_dir: &Path,
    meta: Option<&RunMeta>,
    seen: &[PathBuf],
) -> FsContext {
    let mut ctx = FsContext {
        home: home.to_path_buf(),
        deny: Policy::secret_floor(home)
            .into_iter()
            .map(|p| (p, DenySource::SecretFloor))
            .collect(),
        state_dirs: vec![state_dir.to_path_buf()],
        narrowed: Vec::new(),
    };
    if let Some(meta) = meta {
        if let Some(policy) = reload_policy(meta) {
            for d in &policy.fs.deny_read {
                if let PathSpec::Absolute(p) = d {
                    ctx.deny.push((p.clone(), DenySource::Policy));
                }
            }
            ctx.state_dirs.push(policy.run.state_dir.clone());
        }
        // A refused path of the form <state>/runs/<this run id>/… names the state dir.
        for p in seen {
            if let Some(s) = state_dir_from_run_path(p, &meta.run_id) {
                ctx.state_dirs.push(s);
            }
        }
    }
    ctx.state_dirs.sort();
    ctx.state_dirs.dedup();
    for s in ctx.state_dirs.clone() {
        ctx.deny.push((s, DenySource::StateDir));
    }
    ctx
}

/// Load the run's outermost policy again, as it is now. `None` when it no
/// longer loads (moved file, removed worktree): deny-read causes are then
/// judged from the secret floor and the state dir only.
fn reload_policy(meta: &RunMeta) -> Option<Policy> {
    let outer = meta.policy.last()?.to_string_lossy().into_owned();
    let name = outer.strip_prefix("preset:").unwrap_or(&outer).to_owned();
    let over = Overrides {
        worktree: Some(meta.worktree.clone()),
        ..Overrides::default()
    };
    policy::load(Some(&name), &over).ok()
}

fn default_state_dir(home: &Path) -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/lockrun")
    } else {
        home.join(".local/state/lockrun")
    }
}

/// `<state>/runs/<run_id>/…` → `<state>`.
fn state_dir_from_run_path(path: &Path, run_id: &str) -> Option<PathBuf> {
    let comps: Vec<_> = path.components().collect();
    comps.windows(2).enumerate().find_map(|(i, w)| {
        (w[0].as_os_str() == "runs" && w[1].as_os_str() == run_id)
            .then(|| comps[..i].iter().collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_dir_is_found_from_run_paths() {
        assert_eq!(
            state_dir_from_run_path(Path::new("/srv/lr/runs/r1/tmp/x"), "r1"),
            Some(PathBuf::from("/srv/lr"))
        );
        assert_eq!(
            state_dir_from_run_path(Path::new("/srv/lr/runs/r2/tmp"), "r1"),
            None
        );
    }
}
