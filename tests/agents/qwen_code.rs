//! Qwen Code (`qwen`) under the `qwen-code` preset.

use super::setup::{Agent, Cli, Protocol, API_URL};

const CLI: Cli = Cli {
    package: "@qwen-code/qwen-code",
    version: "0.24.4",
    bin: "qwen",
    preset: "qwen-code",
    key: "OPENAI_API_KEY",
};

/// `qwen --auth-type openai --yolo "…"`, as the README gives it, signed in
/// with an API key to an OpenAI-compatible API of the test's own
/// (`OPENAI_BASE_URL`): the agent runs the scripted tool call and finishes.
#[test]
fn qwen_code_runs_unattended_and_its_tool_call_is_confined() {
    let test = "qwen_code_runs_unattended_and_its_tool_call_is_confined";
    let Some(agent) = Agent::new(test, &CLI, Protocol::Chat) else {
        return;
    };
    let out = agent.run(
        &[
            ("OPENAI_BASE_URL", format!("{API_URL}/v1")),
            ("OPENAI_MODEL", "qwen-test".to_owned()),
        ],
        &[
            "--auth-type",
            "openai",
            "--yolo",
            "Run the shell command you are given.",
        ],
    );
    agent.assert_confined_and_finished(&out);
}

/// `lockrun --policy qwen-code -- qwen --version` prints the version and
/// nothing of lockrun's own.
#[test]
fn qwen_code_version_shows_nothing_of_lockrun() {
    let test = "qwen_code_version_shows_nothing_of_lockrun";
    if let Some(agent) = Agent::new(test, &CLI, Protocol::None) {
        agent.assert_version_quiet("0.24.4");
    }
}
