//! Gemini CLI (`gemini`) under the `gemini` preset.

use super::setup::{Agent, Cli, Protocol, API_URL};

const CLI: Cli = Cli {
    package: "@google/gemini-cli",
    version: "0.61.0",
    bin: "gemini",
    preset: "gemini",
    key: "GEMINI_API_KEY",
};

/// `gemini -p … --yolo --skip-trust`, as the README gives it (an untrusted
/// folder turns yolo back to asking), signed in with an API key, against a Gemini API of
/// the test's own (`GOOGLE_GEMINI_BASE_URL`): the agent runs the scripted
/// tool call and finishes.
#[test]
fn gemini_runs_unattended_and_its_tool_call_is_confined() {
    let test = "gemini_runs_unattended_and_its_tool_call_is_confined";
    let Some(agent) = Agent::new(test, &CLI, Protocol::Gemini) else {
        return;
    };
    // What choosing "Gemini API key" once leaves in its settings.
    agent.agent_file(
        ".gemini/settings.json",
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    );
    let out = agent.run(
        &[("GOOGLE_GEMINI_BASE_URL", API_URL.to_owned())],
        &[
            "-p",
            "Run the shell command you are given.",
            "--yolo",
            "--skip-trust",
        ],
    );
    agent.assert_confined_and_finished(&out);
}

/// `lockrun --policy gemini -- gemini --version` prints the version and
/// nothing of lockrun's own.
#[test]
fn gemini_version_shows_nothing_of_lockrun() {
    let test = "gemini_version_shows_nothing_of_lockrun";
    if let Some(agent) = Agent::new(test, &CLI, Protocol::None) {
        agent.assert_version_quiet("0.61.0");
    }
}
