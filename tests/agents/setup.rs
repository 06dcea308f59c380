//! What every agent test shares: the CLI installed at its pinned version,
//! a world (worktree, state dir with the preset's agent dir, a home with a
//! key in `~/.ssh`), the model API of the test's own on a test host, the
//! run under the preset, and the judges from outside.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use lockrun::audit::{Event, Record};

use crate::support::proxy::{can_netns, Range, Scratch, TestHost};
use crate::support::python::python3;
use crate::support::skip::skip;

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
const MOCK: &str = include_str!("mock_api.py");

/// This binary's test hosts: 10.213.248.0/30 and 10.213.249.0/30.
const RANGE: Range = Range {
    first: 248,
    count: 2,
};

/// One agent at a time: each is a node or native process tree that takes
/// the machine's cores for seconds, and a run's timing is not what a test
/// here judges.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the model API answers once the tool's output is back.
pub const FINISHED: &str = "lockrun-agent-test: finished";
/// The model API's name, reached through the proxy.
const API_HOST: &str = "api.model.test";
/// The model API's base URL, by name.
pub const API_URL: &str = "http://api.model.test";
/// A name that resolves to the same test host, not allowed.
const UNLISTED: &str = "unlisted.test";

/// Where the tool call's command writes what each action got.
const TOLD: &str = "told.txt";

/// An agent CLI at its pinned version, and the preset it runs under.
pub struct Cli {
    /// The npm package.
    pub package: &'static str,
    pub version: &'static str,
    /// Its command, in `node_modules/.bin`.
    pub bin: &'static str,
    /// The preset, and the name of its agent dir under the state dir.
    pub preset: &'static str,
    /// The variable the CLI takes its API key from: the run binds it to
    /// the model API (`--secret KEY@api.model.test`), with [`real_key`]
    /// in lockrun's environment; `""`: the key goes another way.
    pub key: &'static str,
}

/// The real value of the key in `var`: long enough to hide (a
/// placeholder of its shape), and nowhere but in lockrun's environment.
#[must_use]
pub fn real_key(var: &str) -> String {
    format!(
        "sk-lockrun-REAL-{}-0123456789abcdefXYZ",
        var.replace('_', "")
    )
}

/// The protocol of the model API the test serves (`mock_api.py`'s KIND).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// No model API: `--version`.
    None,
    /// Anthropic's Messages API.
    Anthropic,
    /// The Responses API of `OpenAI`.
    OpenAi,
    /// The Chat Completions API of `OpenAI`.
    Chat,
    /// Gemini's `generateContent`.
    Gemini,
}

impl Protocol {
    fn kind(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::Chat => "chat",
            Self::Gemini => "gemini",
        }
    }
}

/// The install cache: a dir of the test build's own, kept between runs.
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agent-clis")
}

/// The CLI's command, installed with npm unless it is there already;
/// `None` (after the loud skip, a failure under `CI=true`) when npm cannot
/// be reached. Any other install failure fails the test.
fn installed(test: &str, cli: &Cli) -> Option<PathBuf> {
    let dir = cache().join(format!(
        "{}@{}",
        cli.package.trim_start_matches('@').replace('/', "_"),
        cli.version
    ));
    let bin = dir.join("node_modules/.bin").join(cli.bin);
    if bin.exists() {
        return Some(bin);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let out = match Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
        ])
        .arg(&dir)
        .arg(format!("{}@{}", cli.package, cli.version))
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            skip(test, &format!("npm cannot be run: {e}"));
            return None;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let unreachable = [
            "ENOTFOUND",
            "EAI_AGAIN",
            "ECONNREFUSED",
            "ECONNRESET",
            "ETIMEDOUT",
            "ENETUNREACH",
        ];
        if unreachable.iter().any(|e| err.contains(e)) {
            skip(
                test,
                &format!("npm cannot reach its registry to install {}", cli.package),
            );
            return None;
        }
        panic!("npm install {}@{}: {err}", cli.package, cli.version);
    }
    assert!(bin.exists(), "npm installed no {}: {err}", bin.display());
    Some(bin)
}

/// One agent test's world and model API.
pub struct Agent {
    _turn: std::sync::MutexGuard<'static, ()>,
    cli: &'static Cli,
    bin: PathBuf,
    dir: Scratch,
    host: Option<TestHost>,
    /// What the tool call would make in `/etc`.
    etc_mark: PathBuf,
}

impl Agent {
    /// `None` (after the skip) where the test cannot run here.
    pub fn new(test: &str, cli: &'static Cli, protocol: Protocol) -> Option<Self> {
        if !can_netns(test) {
            return None;
        }
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bin = installed(test, cli)?;
        let dir = Scratch::new("agent");
        for d in ["wt", "home/.ssh", "outside"] {
            std::fs::create_dir_all(dir.0.join(d)).unwrap();
        }
        std::fs::create_dir_all(dir.0.join("state/agents").join(cli.preset)).unwrap();
        std::fs::write(dir.0.join("home/.ssh/id_rsa"), "canary").unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.0.join("wt"))
            .status()
            .unwrap();
        assert!(git.success());
        let mut agent = Self {
            _turn: turn,
            cli,
            bin,
            etc_mark: PathBuf::from(format!(
                "/etc/lockrun-agent-test-{}-{}",
                cli.preset,
                std::process::id()
            )),
            dir,
            host: None,
        };
        if protocol != Protocol::None {
            agent.serve(protocol);
        }
        Some(agent)
    }

    /// The test host with the model API on port 80, and the run's policy:
    /// the preset, with the API's name allowed, resolved and granted its
    /// private network, and the unlisted name resolved only.
    fn serve(&mut self, protocol: Protocol) {
        let mut host = TestHost::new(RANGE);
        let child = Command::new("ip")
            .args(["netns", "exec", &host.ns, python3(), "-c", MOCK])
            .arg(protocol.kind())
            .arg(host.ns_ip.to_string())
            .arg("80")
            .arg(self.api_log())
            .arg(self.command(""))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.0.join("mock.err")).unwrap())
            .spawn()
            .unwrap();
        host.servers.push(child);
        host.wait_port(80);
        std::fs::write(
            self.policy(),
            format!(
                "extends = {preset:?}\n\
                 [network]\n\
                 allow = [\"{API_HOST}:80\"]\n\
                 [[network.private]]\n\
                 hosts = [\"{API_HOST}\"]\n\
                 network = \"{net}\"\n\
                 [network.resolve]\n\
                 \"{API_HOST}\" = [\"{ip}\"]\n\
                 \"{UNLISTED}\" = [\"{ip}\"]\n",
                preset = self.cli.preset,
                net = host.net,
                ip = host.ns_ip,
            ),
        )
        .unwrap();
        self.host = Some(host);
    }

    /// Write `file` (a path relative to the agent's own dir under the
    /// state dir) with `text`: the setup a user makes once, logged in.
    pub fn agent_file(&self, file: &str, text: &str) {
        let path = self.state().join("agents").join(self.cli.preset).join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub fn wt(&self) -> PathBuf {
        self.dir.0.join("wt")
    }

    fn home(&self) -> PathBuf {
        self.dir.0.join("home")
    }

    fn state(&self) -> PathBuf {
        self.dir.0.join("state")
    }

    fn policy(&self) -> PathBuf {
        self.dir.0.join("policy.toml")
    }

    fn audit_log(&self) -> PathBuf {
        self.dir.0.join("audit.jsonl")
    }

    fn api_log(&self) -> PathBuf {
        self.dir.0.join("api.jsonl")
    }

    /// The shell command the model asks the agent to run: each action
    /// says what it got, to the agent and into [`TOLD`] in its directory
    /// (what the tests judge: a CLI that captures a command's output on a
    /// terminal of its own may lose its last lines, as Qwen Code once did
    /// here). `curl_extra` is for the control outside, where no
    /// resolver of lockrun's names the unlisted host.
    fn command(&self, curl_extra: &str) -> String {
        format!(
            "{{ printf made > inside.txt && echo write=ok || echo write=refused; \
             cp ~/.ssh/id_rsa stolen.txt 2>/dev/null && echo ssh=read || echo ssh=refused; \
             touch {etc} 2>/dev/null && echo etc=made || echo etc=refused; \
             curl -s {curl_extra} -o /dev/null -w 'unlisted=%{{http_code}}\\n' http://{UNLISTED}/; \
             echo key=${key}; }} | tee {TOLD}",
            etc = self.etc_mark.display(),
            key = if self.cli.key.is_empty() {
                "NO_KEY_VAR"
            } else {
                self.cli.key
            },
        )
    }

    /// `lockrun --policy <the test's> … -- <cli> args`, unattended (stdin
    /// closed), with `env` added, stopped after five minutes.
    pub fn run(&self, env: &[(&str, String)], args: &[&str]) -> Output {
        let mut c = Command::new("timeout");
        c.args(["-k", "10", "300", BIN, "--worktree"])
            .arg(self.wt())
            .arg("--state-dir")
            .arg(self.state())
            .arg("--policy")
            .arg(self.policy())
            .arg("--audit-log")
            .arg(self.audit_log());
        if !self.cli.key.is_empty() {
            c.arg("--secret")
                .arg(format!("{}@{API_HOST}", self.cli.key))
                .env(self.cli.key, real_key(self.cli.key));
        }
        c.arg("--")
            .arg(&self.bin)
            .args(args)
            .env("HOME", self.home())
            // As a shell that changed into it says: opencode takes its
            // project dir from PWD, not from its working directory.
            .env("PWD", self.wt())
            .current_dir(self.wt())
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// What the model API heard, one JSON value per request.
    fn api_requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.api_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn events(&self) -> Vec<Event> {
        std::fs::read_to_string(self.audit_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Record>(l).unwrap().event)
            .collect()
    }

    /// The agent finished (exit 0, the final answer printed) after running
    /// the tool call, and each action of it was held, judged from outside:
    /// the worktree file made; no copy of the key, the key unchanged; no
    /// file in `/etc`; the test host never asked for the unlisted name.
    /// Seen: the audit log records the refused read, the refused create
    /// in `/etc` and the proxy's 403 for the unlisted host. Control: the
    /// same command outside lockrun reads the key, makes the file in
    /// `/etc` and reaches the unlisted name on the test host.
    pub fn assert_confined_and_finished(&self, out: &Output) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let requests = self.api_requests();
        let said = || {
            format!(
                "{:?}\nstdout: {stdout}\nstderr: {stderr}\nmodel API: {requests:#?}\nmock: {}",
                out.status,
                std::fs::read_to_string(self.dir.0.join("mock.err")).unwrap_or_default()
            )
        };
        assert!(out.status.success(), "{}", said());
        assert!(stdout.contains(FINISHED), "{}", said());
        // What the agent handed back to the model of its tool call.
        let tool_output = requests
            .iter()
            .find_map(|r| r["tool_output"].as_str())
            .unwrap_or_else(|| panic!("no tool output reached the model API: {}", said()));
        assert!(tool_output.contains("write=ok"), "{}", said());
        let told = std::fs::read_to_string(self.wt().join(TOLD)).unwrap_or_default();
        for line in ["write=ok", "ssh=refused", "etc=refused", "unlisted=403"] {
            assert!(told.contains(line), "{line}: {told}\n{}", said());
        }
        // Judged from outside.
        assert_eq!(
            std::fs::read_to_string(self.wt().join("inside.txt")).ok(),
            Some("made".to_owned()),
            "{}",
            said()
        );
        assert!(!self.wt().join("stolen.txt").exists(), "{}", said());
        assert_eq!(
            std::fs::read_to_string(self.home().join(".ssh/id_rsa")).unwrap(),
            "canary"
        );
        assert!(!self.etc_mark.exists(), "{}", said());
        assert!(
            !requests
                .iter()
                .any(|r| r["host"].as_str().is_some_and(|h| h.contains(UNLISTED))),
            "{}",
            said()
        );
        // Seen.
        let events = self.events();
        let key = self.home().join(".ssh/id_rsa");
        let fs_refused = |path: &Path, access: &str| {
            events.iter().any(|e| {
                matches!(e, Event::Filesystem(f)
                    if f.path.as_deref() == path.to_str() && f.access.iter().any(|a| a == access))
            })
        };
        assert!(fs_refused(&key, "fs.read_file"), "{events:#?}");
        assert!(fs_refused(Path::new("/etc"), "fs.make_reg"), "{events:#?}");
        assert!(
            events.iter().any(|e| matches!(e, Event::Proxy(p)
                if p.host == UNLISTED && p.status == 403 && p.refused())),
            "{events:#?}"
        );
        self.assert_key_held(&stdout, &stderr, (&told, tool_output), &requests, &said);
        self.control();
    }

    /// The run held a placeholder of the key (the command's `key=` line:
    /// the value's length, not the value), the model API got the real
    /// value (the proxy put it in) and never the placeholder, and neither
    /// the tool's output nor the audit log nor lockrun's output holds the
    /// value.
    fn assert_key_held(
        &self,
        stdout: &str,
        stderr: &str,
        (told, tool_output): (&str, &str),
        requests: &[serde_json::Value],
        said: &dyn Fn() -> String,
    ) {
        if self.cli.key.is_empty() {
            return;
        }
        let real = real_key(self.cli.key);
        let at = told
            .find("key=sk-")
            .unwrap_or_else(|| panic!("no key=sk-… in {told:?}: {}", said()));
        let held: String = told[at + 4..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        assert_eq!(held.len(), real.len(), "{held:?}: {}", said());
        assert_ne!(held, real, "the run held the real key: {}", said());
        assert!(held.starts_with("sk-lockrun-REAL-"), "{held:?}");
        assert!(!tool_output.contains(&real), "{}", said());
        let auths: Vec<&str> = requests.iter().filter_map(|r| r["auth"].as_str()).collect();
        // Every CLI's model API gets the real key: through the proxy URL
        // as a forwarded request, or inside a CONNECT tunnel (undici's
        // ProxyAgent takes even an `http://` URL so: gemini, qwen-code),
        // which the proxy inspects for a host a secret is bound to.
        assert!(
            auths.iter().any(|a| a.contains(&real)),
            "the model API never got the real key: {auths:?}: {}",
            said()
        );
        assert!(
            !auths.iter().any(|a| a.contains(held.as_str())),
            "{auths:?}"
        );
        let audit = std::fs::read_to_string(self.audit_log()).unwrap();
        assert!(!audit.contains(&real), "the audit log holds the key");
        assert!(
            !stdout.contains(&real) && !stderr.contains(&real),
            "{}",
            said()
        );
    }

    /// The same command outside lockrun: every action succeeds.
    fn control(&self) {
        let outside = self.dir.0.join("outside");
        let host = self.host.as_ref().unwrap();
        let mut control = Command::new("sh");
        if !self.cli.key.is_empty() {
            control.env_remove(self.cli.key);
        }
        let out = control
            .args([
                "-c",
                &self.command(&format!("--resolve {UNLISTED}:80:{}", host.ns_ip)),
            ])
            .env("HOME", self.home())
            .env_remove("NO_KEY_VAR")
            .current_dir(&outside)
            .output()
            .unwrap();
        let made = self.etc_mark.exists();
        let _ = std::fs::remove_file(&self.etc_mark);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "write=ok\nssh=read\netc=made\nunlisted=404\nkey=\n",
            "{out:?}"
        );
        assert!(made);
        assert_eq!(
            std::fs::read_to_string(outside.join("stolen.txt")).unwrap(),
            "canary"
        );
        assert!(self
            .api_requests()
            .iter()
            .any(|r| r["host"].as_str() == Some(UNLISTED)));
    }

    /// `lockrun --policy <preset> -- <cli> --version` prints `version` and
    /// nothing of lockrun's own: the preset refuses nothing the CLI does to
    /// start. Control: the same outside lockrun prints the same.
    pub fn assert_version_quiet(&self, version: &str) {
        let out = Command::new(BIN)
            .arg("--worktree")
            .arg(self.wt())
            .arg("--state-dir")
            .arg(self.state())
            .args(["--policy", self.cli.preset, "--"])
            .arg(&self.bin)
            .arg("--version")
            .env("HOME", self.home())
            .current_dir(self.wt())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), version);
        assert!(!stderr.contains("lockrun"), "{stderr}");
        let outside = Command::new(&self.bin)
            .arg("--version")
            .env("HOME", self.home())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&outside.stdout).trim(), version);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.etc_mark);
    }
}
