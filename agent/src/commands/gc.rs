//! `lockrun gc`: reap run dirs left by lockruns that are gone.

use std::time::Duration;

use crate::cli::GcArgs;
use crate::exit;
use crate::policy::{self, Overrides};

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
            eprintln!("lockrun: {e}");
            return exit::USAGE;
        }
    };
    let grace = args
        .grace_secs
        .map_or(policy.run.gc_grace, Duration::from_secs);
    let runs = policy.runs_dir();
    match crate::run::gc(&runs, grace) {
        Ok(r) => {
            crate::run::forget_gone_runs();
            for p in &r.reaped {
                println!("reaped {}", p.display());
            }
            println!(
                "{} reaped, {} running, {} within the grace period",
                r.reaped.len(),
                r.kept_alive,
                r.kept_young
            );
            0
        }
        Err(e) => {
            eprintln!("lockrun: gc: reading {}: {e}", runs.display());
            1
        }
    }
}
