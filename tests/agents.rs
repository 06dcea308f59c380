//! The real agent CLIs under their presets (issue 58): each installed by
//! the test itself with npm at a pinned version (cached under the target
//! dir), run unattended in `lockrun --policy <preset>` against a model API
//! of the test's own on a test host in a network namespace, reached by
//! name through the proxy. The scripted reply makes the agent run one
//! shell command that writes in the worktree, reads `~/.ssh/id_rsa`,
//! touches `/etc` and reaches a host the policy does not list; each action
//! is judged from outside (the files, the test host's log, the audit log),
//! beside a control run outside that succeeds, and the agent must finish.
//!
//! Test hosts are veth pairs in 10.213.248–249 (one /30 per test).
//! A test that cannot install its CLI because npm cannot be reached says
//! `skipped: <test>: <reason>`, and fails instead under `CI=true`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::manual_assert
)]

mod support;

// The subjects, one file each in tests/agents/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod agents {
    mod claude_code;
    mod codex;
    mod gemini;
    mod opencode;
    mod qwen_code;
    pub mod setup;
}
