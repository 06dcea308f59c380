//! `lockrun audit` on a crafted log with one refusal of each layer: the
//! binary reads it and prints the policy line that would allow each one (or
//! says why none can), as text and as JSON; a bad line is exit 2 with its
//! line number.
//!
//! The end-to-end variant — a real run with one refusal of each layer, where
//! applying the suggestions makes the same run succeed — needs the sandbox
//! and is added with the run flow.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

/// A scratch dir of this test process (no tempfile crate in the tree),
/// removed when dropped, on every path out of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("lockrun-audit-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create scratch dir");
        Self(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn line(event: &Value) -> String {
    let mut v = event.clone();
    v["ts_ms"] = json!(1_700_000_000_000_u64);
    v.to_string()
}

/// A run refused once by each layer, plus a proxy refusal by the address guard.
fn crafted_log(home: &Path, worktree: &Path) -> String {
    let h = home.display();
    [
        json!({"event": "run_start", "run_id": "r1", "command": ["agent", "-p", "go"],
               "policy": ["preset:default", "preset:claude-code"], "worktree": worktree}),
        json!({"event": "filesystem", "pid": 10, "comm": "black",
               "path": format!("{h}/.cache/black/24.1"), "access": ["fs.make_reg"],
               "raw": "type=LANDLOCK_ACCESS"}),
        json!({"event": "filesystem", "pid": 11, "comm": "cat",
               "path": format!("{h}/.ssh/id_ed25519"), "access": ["fs.read_file"],
               "raw": "type=LANDLOCK_ACCESS"}),
        json!({"event": "kernel_network", "pid": 12, "tgid": 12, "comm": "psql", "cgroup_id": 5,
               "hook": "connect4", "family": "inet", "protocol": "tcp",
               "destination": {"inet": "127.0.0.1:5432"}}),
        json!({"event": "kernel_network", "pid": 13, "tgid": 13, "comm": "curl", "cgroup_id": 5,
               "hook": "connect4", "family": "inet", "protocol": "tcp",
               "destination": {"inet": "93.184.216.34:443"}}),
        json!({"event": "proxy", "method": "CONNECT", "host": "mirror.example.org",
               "port": 443, "dialed": null, "allowed": false,
               "reason": "mirror.example.org is not in the allowlist", "status": 403,
               "verdict": {"kind": "not_listed"}}),
        json!({"event": "proxy", "method": "CONNECT", "host": "git.internal.example",
               "port": 443, "dialed": null, "allowed": false,
               "reason": "git.internal.example resolves to 10.20.0.5, private; whole request refused",
               "status": 403,
               "verdict": {"kind": "address", "addr": "10.20.0.5", "range": "private",
                           "embedded": null}}),
        json!({"event": "proxy", "method": "CONNECT", "host": "sneaky.example.org",
               "port": 443, "dialed": null, "allowed": false,
               "reason": "sneaky.example.org resolves to 127.0.0.1, loopback; whole request refused",
               "status": 403,
               "verdict": {"kind": "address", "addr": "127.0.0.1", "range": "loopback",
                           "embedded": null}}),
        json!({"event": "proxy", "method": "CONNECT", "host": "api.anthropic.com",
               "port": 443, "dialed": "160.79.104.10:443", "allowed": true,
               "reason": "allowed by `api.anthropic.com`", "status": 200,
               "verdict": {"kind": "allowed"}}),
        json!({"event": "run_end", "run_id": "r1", "exit": 1,
               "refused": {"filesystem": 2, "kernel_network": 2, "proxy": 3}}),
    ]
    .iter()
    .map(line)
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

fn audit(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockrun"))
        .arg("audit")
        .args(args)
        .env("HOME", home)
        .output()
        .expect("run lockrun audit")
}

fn setup(name: &str) -> (Scratch, PathBuf, PathBuf) {
    let dir = Scratch::new(name);
    let home = dir.0.join("home");
    let worktree = dir.0.join("worktree");
    std::fs::create_dir_all(home.join(".cache/black/24.1")).expect("home");
    std::fs::create_dir_all(&worktree).expect("worktree");
    let log = dir.0.join("audit.jsonl");
    std::fs::write(&log, crafted_log(&home, &worktree)).expect("write log");
    (dir, home, log)
}

#[test]
fn json_names_the_line_that_allows_each_refusal() {
    let (_dir, home, log) = setup("json");
    let out = audit(&home, &[log.to_str().expect("utf-8"), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["run_id"], "r1");
    assert_eq!(run["exit"], 1);
    assert_eq!(
        run["refused"],
        json!({"filesystem": 2, "kernel_network": 2, "proxy": 3})
    );
    assert_eq!(run["by_process"]["psql"], 1);
    let refusals = run["refusals"].as_array().expect("refusals");
    let find = |target: &str| -> &Value {
        refusals
            .iter()
            .find(|r| r["target"] == target)
            .unwrap_or_else(|| panic!("no refusal of {target} in {refusals:#?}"))
    };
    let home_s = home.display();

    // filesystem: creating a file → Landlock names the directory (audit/kernel.rs);
    // suggested as {home}/… and as a flag
    let write = &find(&format!("{home_s}/.cache/black/24.1"))["suggestion"];
    assert_eq!(write["kind"], "allow");
    assert_eq!(
        write["policy"],
        "[filesystem]\nwritable = [\"{home}/.cache/black/24.1\"]"
    );
    assert_eq!(
        write["flag"],
        format!("--allow-write {home_s}/.cache/black/24.1")
    );
    // filesystem: a read of a secret → names the deny entry, never allows
    let secret = &find(&format!("{home_s}/.ssh/id_ed25519"))["suggestion"];
    assert_eq!(secret["kind"], "never");
    assert!(
        secret["reason"]
            .as_str()
            .expect("reason")
            .contains(&format!("{home_s}/.ssh")),
        "{secret}"
    );

    // kernel network: loopback → local; another host → never, use the proxy
    let local = &find("127.0.0.1:5432")["suggestion"];
    assert_eq!(local["kind"], "allow");
    assert_eq!(local["policy"], "[network]\nlocal = [\"127.0.0.1:5432\"]");
    assert_eq!(local["flag"], "--allow-local 127.0.0.1:5432");
    let direct = &find("93.184.216.34:443")["suggestion"];
    assert_eq!(direct["kind"], "never");
    assert!(
        direct["reason"]
            .as_str()
            .expect("reason")
            .contains("HTTPS_PROXY"),
        "{direct}"
    );

    // proxy: a name → allow it; a private answer → a private grant; loopback → never
    let named = &find("mirror.example.org:443")["suggestion"];
    assert_eq!(named["kind"], "allow");
    assert_eq!(
        named["policy"],
        "[network]\nallow = [\"mirror.example.org\"]"
    );
    assert_eq!(named["flag"], "--allow-host mirror.example.org:443");
    let private = &find("git.internal.example:443")["suggestion"];
    assert_eq!(private["kind"], "allow");
    assert_eq!(
        private["policy"],
        "[[network.private]]\nhosts = [\"git.internal.example\"]\nnetwork = \"10.20.0.5/32\""
    );
    assert_eq!(private["flag"], Value::Null);
    let looped = &find("sneaky.example.org:443")["suggestion"];
    assert_eq!(looped["kind"], "never");

    // the allowed proxy request is not a refusal
    assert!(refusals
        .iter()
        .all(|r| r["target"] != "api.anthropic.com:443"));
    assert_eq!(refusals.len(), 7);
}

#[test]
fn text_shows_layers_processes_and_suggestions() {
    let (_dir, home, log) = setup("text");
    let out = audit(&home, &[log.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    for want in [
        "run r1 (exit 1)",
        "refused:  filesystem 2, kernel network 2, proxy 3",
        "by process: black 1, cat 1, curl 1, psql 1",
        "  filesystem:\n",
        "  kernel network:\n",
        "  proxy:\n",
        "--allow-write ",
        "--allow-local 127.0.0.1:5432",
        "--allow-host mirror.example.org:443",
        "[[network.private]]",
        "cannot be allowed: ",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

/// A line that is not a record (cut short by a full disk, or not
/// lockrun's) is named and passed over: the rest of the log is still read,
/// and the exit status says the log was not whole. A log that cannot be
/// read at all is exit 2.
#[test]
fn a_bad_line_is_named_and_the_rest_is_read() {
    let scratch = Scratch::new("bad");
    let dir = &scratch.0;
    let log = dir.join("bad.jsonl");
    let good = line(&json!({"event": "kernel_events_lost", "count": 1}));
    std::fs::write(
        &log,
        format!("{good}\n{{\"event\": \"nope\"}}\n{good}\n{{\"half\":"),
    )
    .expect("write");
    let out = audit(dir, &[log.to_str().expect("utf-8"), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for n in [2, 4] {
        assert!(
            err.contains(&format!(
                "{}:{n}: not an audit record, passed over",
                log.display()
            )),
            "stderr: {err}"
        );
    }
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(report["runs"][0]["lost_kernel_events"], 2, "{report}");

    let missing = audit(dir, &[dir.join("absent.jsonl").to_str().expect("utf-8")]);
    assert_eq!(missing.status.code(), Some(2));
    let device = audit(dir, &["/dev/zero"]);
    assert_eq!(device.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&device.stderr)
            .contains("is a character device, not a regular file"),
        "{device:?}"
    );
}
