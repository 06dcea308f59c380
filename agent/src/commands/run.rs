//! The run: `lockrun [OPTIONS] -- COMMAND [ARGS]...`.

use std::ffi::OsString;
use std::sync::Arc;

use crate::cli::{PolicyArgs, RunArgs};
use crate::exit;
use crate::policy::{self, Overrides, Policy, PolicyError};
use crate::proxy::inspector::Inspector;
use crate::proxy::reach::{self, Unreachable};
use crate::run;
use crate::shown::say;

/// The policy overrides the flags give.
#[must_use]
pub fn overrides(args: &PolicyArgs) -> Overrides {
    Overrides {
        worktree: args.worktree.clone(),
        allow_write: args.allow_write.clone(),
        deny_read: args.deny_read.clone(),
        allow_host: args.allow_host.clone(),
        secrets: args.secrets.clone(),
        allow_local: args.allow_local.clone(),
        expose: args.expose.clone(),
        state_dir: args.state_dir.clone(),
        accept_gaps: args.accept_gaps.clone(),
        program: None,
    }
}

/// Why the policy the flags name cannot be used. Nothing has run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
}

impl LoadError {
    /// The exit status: a usage error, but for a host that could not be
    /// asked its addresses.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Unreachable(Unreachable::OwnAddresses(_)) => exit::SETUP,
            _ => exit::USAGE,
        }
    }
}

/// The policy the flags name, as a run and `policy show` take it: loaded
/// ([`policy::load`]), and refused if it allows what the proxy could never
/// reach ([`crate::proxy::reach`]).
pub fn load(args: &PolicyArgs) -> Result<Policy, LoadError> {
    load_for(args, None)
}

/// [`load`] for a run of `program`, which the state dir must not hold.
fn load_for(args: &PolicyArgs, program: Option<&OsString>) -> Result<Policy, LoadError> {
    let over = Overrides {
        program: program.cloned(),
        ..overrides(args)
    };
    let policy = policy::load(args.policy.as_deref(), &over)?;
    reach::check(&policy.network)?;
    Ok(policy)
}

/// Check the input, load the policy, and run the command.
#[must_use]
pub fn main(args: &RunArgs) -> i32 {
    if args.command.is_empty() {
        say!("lockrun: no command given (usage: lockrun [OPTIONS] -- COMMAND [ARGS]...)");
        return exit::USAGE;
    }
    let policy = match load_for(&args.policy, args.command.first()) {
        Ok(p) => p,
        Err(e) => {
            say!("lockrun: {e}");
            return e.exit_code();
        }
    };
    tracing::debug!("policy loaded");
    // The secrets' values, read once, kept in lockrun's memory only.
    let inspector = match Inspector::from_policy(&policy, |k| std::env::var_os(k)) {
        Ok((inspector, skipped)) => {
            // Said only where asked (LOCKRUN_LOG=debug): a preset's
            // optional key is unset in every run that logs in otherwise,
            // and a run says nothing of lockrun's own when all is well.
            for env in skipped {
                tracing::debug!("secret {env}: not set; skipped (optional), the run gets no {env}");
            }
            inspector
        }
        Err(e) => {
            say!("lockrun: {e}");
            return exit::USAGE;
        }
    };
    run::execute(
        &policy,
        &Arc::new(inspector),
        &args.command,
        args.audit_log.as_deref(),
    )
}
