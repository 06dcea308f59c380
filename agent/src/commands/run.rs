//! The run: `lockrun [OPTIONS] -- COMMAND [ARGS]...`.

use crate::cli::{PolicyArgs, RunArgs};
use crate::exit;
use crate::policy::{self, Overrides};

/// The policy overrides the flags give.
#[must_use]
pub fn overrides(args: &PolicyArgs) -> Overrides {
    Overrides {
        worktree: args.worktree.clone(),
        allow_write: args.allow_write.clone(),
        deny_read: args.deny_read.clone(),
        allow_host: args.allow_host.clone(),
        allow_local: args.allow_local.clone(),
        expose: args.expose.clone(),
        state_dir: args.state_dir.clone(),
    }
}

/// Check the input, load the policy, and run the command.
#[must_use]
pub fn main(args: &RunArgs) -> i32 {
    if args.command.is_empty() {
        eprintln!("lockrun: no command given (usage: lockrun [OPTIONS] -- COMMAND [ARGS]...)");
        return exit::USAGE;
    }
    let policy = match policy::load(args.policy.policy.as_deref(), &overrides(&args.policy)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lockrun: {e}");
            return exit::USAGE;
        }
    };
    tracing::debug!("policy loaded");
    crate::run::execute(&policy, &args.command, args.audit_log.as_deref())
}
