//! opencode (`opencode`) under the `opencode` preset.

use super::setup::{Agent, Cli, Protocol, API_URL};

const CLI: Cli = Cli {
    package: "opencode-ai",
    version: "1.18.33",
    bin: "opencode",
    preset: "opencode",
    key: "ANTHROPIC_API_KEY",
};

/// `opencode run --auto …`, as the README gives it, with its Anthropic
/// provider pointed at a Messages API of the test's own (the provider's
/// `baseURL`, in `OPENCODE_CONFIG_CONTENT`): the agent runs the scripted
/// tool call and finishes. Its background install of its plugin SDK from
/// the package registry, which the preset leaves out, does not stop it.
#[test]
fn opencode_runs_unattended_and_its_tool_call_is_confined() {
    let test = "opencode_runs_unattended_and_its_tool_call_is_confined";
    let Some(agent) = Agent::new(test, &CLI, Protocol::Anthropic) else {
        return;
    };
    let config =
        format!(r#"{{"provider":{{"anthropic":{{"options":{{"baseURL":"{API_URL}/v1"}}}}}}}}"#);
    let out = agent.run(
        &[("OPENCODE_CONFIG_CONTENT", config)],
        &[
            "run",
            "--auto",
            "-m",
            "anthropic/claude-sonnet-4-5",
            "Run the shell command you are given.",
        ],
    );
    agent.assert_confined_and_finished(&out);
}

/// `lockrun --policy opencode -- opencode --version` prints the version
/// and nothing of lockrun's own.
#[test]
fn opencode_version_shows_nothing_of_lockrun() {
    let test = "opencode_version_shows_nothing_of_lockrun";
    if let Some(agent) = Agent::new(test, &CLI, Protocol::None) {
        agent.assert_version_quiet("1.18.33");
    }
}
