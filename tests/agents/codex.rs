//! Codex CLI (`codex`) under the `codex` preset.

use super::setup::{Agent, Cli, Protocol, API_URL};

const CLI: Cli = Cli {
    package: "@openai/codex",
    version: "0.171.0",
    bin: "codex",
    preset: "codex",
    key: "OPENAI_API_KEY",
};

/// `codex exec --dangerously-bypass-approvals-and-sandbox …`, as the
/// README gives it (Codex's own sandbox cannot nest inside lockrun),
/// against a Responses API of the test's own (a model provider of the
/// test's, given with `-c`: codex 0.171 reads no base URL from the
/// environment for its built-in one): the
/// agent runs the scripted tool call and finishes.
#[test]
fn codex_runs_unattended_and_its_tool_call_is_confined() {
    let test = "codex_runs_unattended_and_its_tool_call_is_confined";
    let Some(agent) = Agent::new(test, &CLI, Protocol::OpenAi) else {
        return;
    };
    let out = agent.run(
        &[],
        &[
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "-c",
            "model_provider=\"lockrun_test\"",
            "-c",
            &format!(
                "model_providers.lockrun_test={{name=\"lockrun test\", base_url=\"{API_URL}/v1\", \
                 env_key=\"OPENAI_API_KEY\", wire_api=\"responses\"}}"
            ),
            "Run the shell command you are given.",
        ],
    );
    agent.assert_confined_and_finished(&out);
}

/// `lockrun --policy codex -- codex --version` prints the version and
/// nothing of lockrun's own.
#[test]
fn codex_version_shows_nothing_of_lockrun() {
    let test = "codex_version_shows_nothing_of_lockrun";
    if let Some(agent) = Agent::new(test, &CLI, Protocol::None) {
        agent.assert_version_quiet("codex-cli 0.171.0");
    }
}
