//! Claude Code (`claude`) under the `claude-code` preset.

use super::setup::{Agent, Cli, Protocol, API_URL};

const CLI: Cli = Cli {
    package: "@anthropic-ai/claude-code",
    version: "2.1.197",
    bin: "claude",
    preset: "claude-code",
    key: "ANTHROPIC_API_KEY",
};

/// `claude -p … --dangerously-skip-permissions`, as the README gives it,
/// against a Messages API of the test's own (`ANTHROPIC_BASE_URL`): the
/// agent runs the scripted tool call and finishes.
#[test]
fn claude_code_runs_unattended_and_its_tool_call_is_confined() {
    let test = "claude_code_runs_unattended_and_its_tool_call_is_confined";
    let Some(agent) = Agent::new(test, &CLI, Protocol::Anthropic) else {
        return;
    };
    let out = agent.run(
        &[("ANTHROPIC_BASE_URL", API_URL.to_owned())],
        &[
            "-p",
            "Run the shell command you are given.",
            "--dangerously-skip-permissions",
        ],
    );
    agent.assert_confined_and_finished(&out);
}

/// `lockrun --policy claude-code -- claude --version` prints the version
/// and nothing of lockrun's own.
#[test]
fn claude_code_version_shows_nothing_of_lockrun() {
    let test = "claude_code_version_shows_nothing_of_lockrun";
    if let Some(agent) = Agent::new(test, &CLI, Protocol::None) {
        agent.assert_version_quiet("2.1.197 (Claude Code)");
    }
}
