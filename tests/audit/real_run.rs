//! `lockrun audit` on a log from a real run with one refusal of each layer
//! (a write outside, a direct connect to a loopback port, a proxy request to
//! an unlisted name) suggests the right line for each; applying the
//! suggested flags makes the same run succeed, judged from outside.
//!
//! The proxied host is a test host in a network namespace this test makes
//! (veth, 10.214.7.0/30), reached by a name the policy resolves.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{python, skip};
use python::python3;

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
const NAME: &str = "svc.lockrun.test";

use skip::skip;

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// A network namespace with an HTTP server at 10.214.7.2:80; removed on drop.
struct TestHost {
    ns: String,
    server: Child,
    root: PathBuf,
}

impl TestHost {
    fn start(root: &Path) -> Self {
        let ns = format!("lr-audit-{}", std::process::id());
        let (host_if, ns_if) = (format!("lra{}", std::process::id()), "eth0");
        lockrun_leftovers::remove_dead("lr-audit-", "lra");
        let holders = lockrun_leftovers::holders("10.214.7.0/30");
        assert!(
            holders.is_empty(),
            "10.214.7.0/30 is already held by {holders:?}: a test host made there would not be reached"
        );
        sh(&format!("ip netns add {ns}"));
        let me = Self {
            ns: ns.clone(),
            server: Command::new("true").spawn().unwrap(),
            root: root.to_path_buf(),
        };
        sh(&format!(
            "ip link add {host_if} type veth peer name {ns_if} netns {ns}"
        ));
        sh(&format!(
            "ip addr add 10.214.7.1/30 dev {host_if} && ip link set {host_if} up"
        ));
        sh(&format!("ip -n {ns} addr add 10.214.7.2/30 dev {ns_if} && ip -n {ns} link set {ns_if} up && ip -n {ns} link set lo up"));
        let www = root.join("www");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("hello"), "hello from the test host\n").unwrap();
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                python3(),
                "-m",
                "http.server",
                "80",
                "--bind",
                "10.214.7.2",
                "--directory",
                www.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut me = me;
        me.server = server;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(
            &"10.214.7.2:80".parse().unwrap(),
            Duration::from_millis(200),
        )
        .is_err()
        {
            assert!(Instant::now() < deadline, "test host did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        me
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn run(
    root: &Path,
    policy: &Path,
    log: &Path,
    out_dir: &Path,
    port: u16,
    extra: &[String],
) -> std::process::Output {
    let script = format!(
        "echo written > {out}/escaped.txt; \
         python3 -c 'import socket; s = socket.create_connection((\"127.0.0.1\", {port})); s.sendall(b\"ping\")'; \
         curl -s -o got.txt -w '%{{http_code}}' http://{NAME}/hello",
        out = out_dir.display()
    );
    let wt = root.join("wt");
    let mut args: Vec<String> = vec![
        "--worktree".into(),
        wt.display().to_string(),
        "--state-dir".into(),
        root.join("state").display().to_string(),
        "--policy".into(),
        policy.display().to_string(),
        "--audit-log".into(),
        log.display().to_string(),
    ];
    args.extend(extra.iter().cloned());
    args.extend(["--".into(), "sh".into(), "-c".into(), script]);
    Command::new(BIN)
        .args(&args)
        .current_dir(&wt)
        .output()
        .unwrap()
}

/// Bytes the listener's connections sent within a short wait.
fn received(l: &TcpListener) -> Vec<u8> {
    l.set_nonblocking(true).unwrap();
    let mut all = Vec::new();
    while let Ok((mut s, _)) = l.accept() {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.read_to_end(&mut all);
    }
    all
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario: run, audit, apply, run again
fn audit_suggestions_applied_make_the_same_run_succeed() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            "audit_suggestions_applied_make_the_same_run_succeed",
            "needs root",
        );
        return;
    }
    let root = std::env::temp_dir().join(format!("lockrun-audit-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for d in ["wt", "state", "outside"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let host = TestHost::start(&root);
    let out_dir = root.join("outside");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The proxy runs (one unrelated host is allowed); the test host's name is
    // resolved and its network granted, but the name is not allowed.
    let policy = root.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[network]\nallow = [\"unrelated.lockrun.test:80\"]\n[network.resolve]\n\"{NAME}\" = [\"10.214.7.2\"]\n[[network.private]]\nhosts = [\"{NAME}\"]\nnetwork = \"10.214.7.0/30\"\n"
        ),
    )
    .unwrap();

    // Run 1: every layer refuses once.
    let log1 = root.join("run1.jsonl");
    let out = run(&root, &policy, &log1, &out_dir, port, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout.trim(),
        "403",
        "the proxy refused the unlisted name: {stderr}"
    );
    assert!(
        stderr.contains("PermissionError: [Errno 1]"),
        "the direct connect got EPERM: {stderr}"
    );
    assert!(
        stderr.contains("Read-only file system"),
        "the write got EROFS: {stderr}"
    );
    assert!(
        !out_dir.join("escaped.txt").exists(),
        "judged from outside: no file"
    );
    assert!(
        received(&listener).is_empty(),
        "judged from outside: the listener got nothing"
    );
    assert!(
        stderr.contains("lockrun audit"),
        "the summary points to lockrun audit: {stderr}"
    );

    let audit = Command::new(BIN)
        .args(["audit", "--json", log1.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(audit.status.success(), "{audit:?}");
    let v: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let refusals = v["runs"][0]["refusals"].as_array().unwrap().clone();
    let flag_for = |layer: &str| -> String {
        let r = refusals
            .iter()
            .find(|r| r["layer"] == layer && r["suggestion"]["kind"] == "allow")
            .unwrap_or_else(|| panic!("no allow suggestion for {layer}: {refusals:#?}"));
        r["suggestion"]["flag"].as_str().unwrap().to_owned()
    };
    let fs_flag = flag_for("filesystem");
    let net_flag = flag_for("kernel_network");
    let proxy_flag = flag_for("proxy");
    assert_eq!(fs_flag, format!("--allow-write {}", out_dir.display()));
    assert_eq!(net_flag, format!("--allow-local 127.0.0.1:{port}"));
    assert_eq!(proxy_flag, format!("--allow-host {NAME}:80"));
    // The text form carries the same lines for people.
    let text = Command::new(BIN)
        .args(["audit", log1.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for f in [&fs_flag, &net_flag, &proxy_flag] {
        assert!(text.contains(f.as_str()), "{f} not in:\n{text}");
    }

    // Run 2: the same run with the suggested flags applied.
    let extra: Vec<String> = [fs_flag, net_flag, proxy_flag]
        .iter()
        .flat_map(|f| f.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let log2 = root.join("run2.jsonl");
    let out = run(&root, &policy, &log2, &out_dir, port, &extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "200",
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("escaped.txt")).unwrap(),
        "written\n"
    );
    assert_eq!(received(&listener), b"ping");
    assert_eq!(
        std::fs::read_to_string(root.join("wt/got.txt")).unwrap(),
        "hello from the test host\n"
    );
    let audit = Command::new(BIN)
        .args(["audit", "--json", log2.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    // Only harmless probes may remain (glibc's lookups of a nscd socket that
    // does not exist here); nothing the run needed was refused.
    let left: Vec<&serde_json::Value> = v["runs"][0]["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["suggestion"]["kind"] != "harmless")
        .collect();
    assert!(left.is_empty(), "{v:#}");
    drop(host);
}
