//! One module per subcommand; `main` parses and dispatches.

pub mod audit;
pub mod doctor;
pub mod gc;
pub mod kernel_steps;
pub mod policy_show;
pub mod probe;
pub mod run;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, PolicyCommand};
use crate::run::nested;
use crate::shown::say;
use crate::{exit, log};

/// Parse the command line and run the chosen command.
#[must_use]
pub fn main() -> ExitCode {
    log::init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return exit_code(code);
        }
    };
    // The commands that build sandboxes or reach into the state dir cannot
    // work inside a run; say so before they fail on some permission.
    if matches!(
        cli.command,
        None | Some(Command::Gc(_) | Command::Doctor(_))
    ) {
        if let Some(id) = nested::enclosing_run() {
            say!("{}", nested::refusal(&id));
            return exit_code(exit::SETUP);
        }
    }
    let code = match cli.command {
        None => run::main(&cli.run),
        Some(Command::Gc(args)) => gc::main(&args),
        Some(Command::Audit(a)) => audit::run(&a),
        Some(Command::Policy(PolicyCommand::Show(a))) => policy_show::run(&a),
        Some(Command::Doctor(a)) => doctor::run(&a),
        Some(Command::Probe(a)) => probe::run(&a.args),
        Some(Command::KernelSteps(a)) => kernel_steps::run(&a),
    };
    exit_code(code)
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
