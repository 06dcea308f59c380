//! Nothing a run can touch turns against lockrun, the caller or the next
//! run: the audit log (where it may be, what is written to it, whether a
//! reader can trust it, a disk that fills), what lockrun keeps in memory for
//! a run, what reaches the caller's terminal, the caller's descriptor limit,
//! and lockrun killed while it starts. Each is judged from outside: the
//! file outside is unchanged, the marker the command would write is absent,
//! lockrun's own peak memory, the bytes on the caller's stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{python, slow, world};
use python::python3;
use world::{assert_absent, s, World, BIN};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// lockrun refused before anything ran: exit 2, one `lockrun:` line
/// saying `why`.
fn assert_refused_usage(out: &Output, why: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("lockrun: "), "{err}");
    assert!(lines[0].contains(why), "{why:?} in {err}");
}

/// `lockrun audit --state-dir STATE LOG`.
fn audit(w: &World, log: &Path) -> Output {
    Command::new(BIN)
        .args(["audit", "--state-dir", s(&w.state), s(log)])
        .env("HOME", &w.home)
        .output()
        .unwrap()
}

#[test]
fn a_log_the_run_could_write_is_refused_before_anything_runs() {
    let w = World::new("log-writable");
    let marker = w.wt.join("ran");
    let touch = ["sh", "-c", "echo ran > ran"];
    // In the worktree, and in a writable path (given through a link).
    let out = w.run(&["--audit-log", s(&w.wt.join("r.jsonl"))], &touch);
    assert_refused_usage(&out, "which the run may write");
    let extra = w.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    std::os::unix::fs::symlink(&extra, w.root.join("via")).unwrap();
    let out = w.run(
        &[
            "--allow-write",
            s(&extra),
            "--audit-log",
            s(&w.root.join("via/r.jsonl")),
        ],
        &touch,
    );
    assert_refused_usage(&out, "which the run may write");
    assert_absent(&marker);
    assert_absent(&w.wt.join("r.jsonl"));
    assert_absent(&extra.join("r.jsonl"));
    // Control: beside the worktree, the same run is kept in its log.
    let log = w.root.join("r.jsonl");
    let out = w.run(&["--audit-log", s(&log)], &touch);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(marker.exists());
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("\"run_end\""));
}

/// A run of another worktree can write where a later run keeps its log: it
/// leaves a link there, to a file outside. The later run's lockrun, root,
/// must not follow it; nor wait on a FIFO left there.
#[test]
fn a_link_or_a_fifo_left_at_the_logs_name_is_refused_not_followed() {
    let w = World::new("log-link");
    let shared = w.root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    let victim = w.data.join("victim");
    std::fs::write(&victim, "canary\n").unwrap();
    // The first run, whose worktree is `shared`, plants the link.
    let plant = format!(
        "ln -s {} {}/r.jsonl && mkfifo {}/f.jsonl",
        s(&victim),
        s(&shared),
        s(&shared)
    );
    let out = Command::new(BIN)
        .args(["--worktree", s(&shared), "--state-dir", s(&w.state), "--"])
        .args(["sh", "-c", &plant])
        .env("HOME", &w.home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::symlink_metadata(shared.join("r.jsonl"))
        .unwrap()
        .file_type()
        .is_symlink());
    // The next run, of another worktree, logs there.
    let touch = ["sh", "-c", "echo ran > ran"];
    let out = w.run(&["--audit-log", s(&shared.join("r.jsonl"))], &touch);
    assert_refused_usage(&out, "is a symbolic link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "canary\n");
    let started = Instant::now();
    let mut child = w
        .cmd(&["--audit-log", s(&shared.join("f.jsonl"))], &touch)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("lockrun hangs on a FIFO at the log's name");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_refused_usage(&out, "not a regular file");
    assert_absent(&w.wt.join("ran"));
}

/// Each line is sealed with the state dir's key, which no run can read: a
/// reader tells the lines lockrun wrote from lines changed, removed or
/// added after.
#[test]
fn the_seal_tells_the_lines_lockrun_wrote_from_lines_changed_after() {
    let w = World::new("log-seal");
    let log = w.root.join("audit.jsonl");
    let key = w.state.join("audit-key");
    let out = w.run(
        &["--audit-log", s(&log)],
        &[
            "sh",
            "-c",
            &format!(
                "echo x > /usr/x; cat {} | od -An -tx1 | tr -d ' \\n'",
                s(&key)
            ),
        ],
    );
    // The command could not read the key (Landlock: the state dir is denied).
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
    let written = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert!(lines.len() >= 4, "{written}");
    // Control: the log as lockrun wrote it verifies.
    let got = audit(&w, &log);
    let text = String::from_utf8_lossy(&got.stdout);
    assert_eq!(got.status.code(), Some(0), "{text}{}", stderr(&got));
    assert!(
        text.contains(&format!("seal:     verified: all {} lines", lines.len())),
        "{text}"
    );

    let variant = |name: &str, edited: Vec<String>| {
        let p = w.root.join(name);
        std::fs::write(&p, edited.join("\n") + "\n").unwrap();
        let got = audit(&w, &p);
        (
            got.status.code(),
            String::from_utf8_lossy(&got.stdout).into_owned(),
        )
    };
    // A line changed: its exit, made 0.
    let last = lines.len() - 1;
    let mut changed: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    changed[last] = changed[last]
        .replace("\"exit\":0", "\"exit\":1")
        .replace("\"exit\":2", "\"exit\":0");
    assert_ne!(changed[last], lines[last]);
    let (code, text) = variant("changed.jsonl", changed);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "NOT written by lockrun, or altered since: line {}",
            last + 1
        )),
        "{text}"
    );
    // A line removed: the refusal.
    let mut removed: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    removed.remove(1);
    let (code, text) = variant("removed.jsonl", removed);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("1 line of this run missing before line 2"),
        "{text}"
    );
    // A line added, in the run's name, with a seal of its own making.
    let run = serde_json::from_str::<serde_json::Value>(lines[0]).unwrap()["run"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut forged: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    forged.insert(
        1,
        format!(
            r#"{{"ts_ms":1,"event":"notice","layer":"proxy","message":"all clear","run":"{run}","seq":1,"seal":"{}"}}"#,
            "0".repeat(64)
        ),
    );
    let (code, text) = variant("forged.jsonl", forged);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("NOT written by lockrun, or altered since: line 2"),
        "{text}"
    );
    // A whole run of someone else's making, naming a key of its own.
    let other: Vec<String> = lines
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["run"] = "made-up".into();
            if v["event"] == "run_start" {
                v["run_id"] = "made-up".into();
                v["seal_key"] = "0123456789abcdef".into();
            }
            v.to_string()
        })
        .collect();
    let (code, text) = variant("other-key.jsonl", other);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("NOT verified: no line holds with the key of"),
        "{text}"
    );
}

/// The caller's disk fills while the run goes on: lockrun says so, and how
/// many lines the log lacks; the log stays readable, and the next run's
/// lines are whole. A log that cannot be written at all is not kept, and
/// nothing runs.
#[test]
fn a_full_disk_is_told_and_the_log_stays_readable() {
    let w = World::new("log-full");
    let small = w.root.join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs", s(&small)])
        .status()
        .unwrap();
    if !mounted.success() {
        world::skip(
            "a_full_disk_is_told_and_the_log_stays_readable",
            "cannot mount a small tmpfs to fill (not root?)",
        );
        return;
    }
    let _unmount = Unmount(small.clone());
    // Two of four pages taken: the log has two.
    std::fs::write(small.join("fill"), vec![0u8; 8192]).unwrap();
    let log = small.join("audit.jsonl");
    // Paced: a burst could overrun the kernel's audit backlog, whose
    // limit is the machine's.
    let refusals =
        "for i in $(seq 1 24); do echo > /usr/lockrun-test-$i; sleep 0.02; done 2>/dev/null; echo done";
    let out = w.run(&["--audit-log", s(&log)], &["sh", "-c", refusals]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the command's own status: {err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert!(
        err.contains(" filesystem accesses refused: create a file in /usr"),
        "{err}"
    );
    let told = err
        .lines()
        .find(|l| l.starts_with("lockrun: warning: the audit log"))
        .unwrap_or_else(|| panic!("no word of the lost lines: {err}"));
    assert!(told.contains("No space left on device"), "{told}");
    assert!(
        told.contains("lines of this run are missing from it"),
        "{told}"
    );
    // Read all the same, the line cut short named.
    let got = audit(&w, &log);
    assert_eq!(got.status.code(), Some(1), "{}", stderr(&got));
    assert!(
        stderr(&got).contains("not an audit record, passed over"),
        "{}",
        stderr(&got)
    );
    assert!(String::from_utf8_lossy(&got.stdout).contains("filesystem"));
    // Room again: the next run's lines are whole and sealed.
    std::fs::remove_file(small.join("fill")).unwrap();
    let before = std::fs::metadata(&log).unwrap().len();
    let out = w.run(
        &["--audit-log", s(&log)],
        &["sh", "-c", "echo > /usr/lockrun-test; true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let got = audit(&w, &log);
    let text = String::from_utf8_lossy(&got.stdout);
    // Its start, a refusal, its end (and below Landlock ABI 7, the notice
    // of where its refusals come from): every line this run added.
    // (The first byte it added ends the line cut short.)
    let added = std::fs::read(&log).unwrap()[usize::try_from(before).unwrap()..]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert!(added >= 3, "{added} lines: {text}");
    assert!(
        text.contains(&format!("seal:     verified: all {added} lines")),
        "{text}"
    );
    // Full from the start: refused, nothing ran.
    fill_up(&small.join("fill"));
    let out = w.run(
        &["--audit-log", s(&small.join("full.jsonl"))],
        &["sh", "-c", "echo ran > ran"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains("will not run the command without the log"),
        "{err}"
    );
    assert_absent(&w.wt.join("ran"));
}

/// `path` written until the filesystem it is on is full.
fn fill_up(path: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    while f.write_all(&[0u8; 512]).is_ok() {}
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Names the command chose — a program's, a path's — reach the caller's
/// terminal only escaped: no escape sequence, no line of their own.
#[test]
fn what_the_command_names_reaches_the_terminal_inert() {
    let w = World::new("terminal-escapes");
    let log = w.root.join("audit.jsonl");
    // 15 bytes: all of it is the process's name (comm).
    let name = "\u{1b}[2J\nlockrun: x";
    std::fs::copy("/bin/sh", w.wt.join(name)).unwrap();
    let out = w.run(
        &["--audit-log", s(&log)],
        &[
            "sh",
            "-c",
            "for f in ./*; do \"$f\" -c 'echo > /usr/lockrun-test'; done 2>/dev/null; true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let check = |what: &str, bytes: &[u8]| {
        assert!(!bytes.contains(&0x1b), "{what}: {bytes:?}");
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("lockrun: x") || l.starts_with("lockrun: ok")),
            "{what}: a line of the command's making: {text}"
        );
        text.into_owned()
    };
    let err = check("the summary", &out.stderr);
    assert!(err.contains(r"(\u{1b}[2J\nlockrun: x)"), "{err}");
    let got = audit(&w, &log);
    let report = check("lockrun audit", &got.stdout);
    assert!(report.contains(r"[\u{1b}[2J\nlockrun: x]"), "{report}");
    // Where the caller names the path, a warning shows it inert too.
    let out = w.run(&["--allow-write", "/nonexistent\nlockrun: ok"], &["true"]);
    check("a warning", &out.stderr);
    assert!(
        stderr(&out).contains(r"/nonexistent\nlockrun: ok does not exist"),
        "{}",
        stderr(&out)
    );
}

/// A run that makes the proxy refuse thousands of distinct, long targets
/// costs lockrun bounded memory, and its summary stays a few lines.
#[test]
fn many_long_refused_targets_cost_lockrun_bounded_memory() {
    let w = World::new("memory-bound");
    let flood = r#"
import os, socket, sys
proxy = os.environ["HTTPS_PROXY"]
auth = proxy.split("//")[1].split("@")[0]
host, port = proxy.rsplit("@", 1)[1].rstrip("/").rsplit(":", 1)
import base64
token = base64.b64encode(auth.encode()).decode()
long = "q" * 15000
for i in range(int(sys.argv[1])):
    s = socket.create_connection((host, int(port)))
    s.sendall(f"CONNECT {i}{long}_:443 HTTP/1.1\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode())
    s.recv(4096)
    s.close()
print("sent")
"#;
    let mut child = w
        .cmd(
            &["--allow-host", "allowed.lockrun.test"],
            &[python3(), "-c", flood, "3000"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak_kib = 0u64;
    let mut err = Vec::new();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stderr_pipe.read_to_end(&mut err);
        err
    });
    while child.try_wait().unwrap().is_none() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sent\n", "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("lockrun: 3000 proxy requests refused"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.len() < 8 * 1024,
        "a summary line of {} bytes",
        line.len()
    );
    assert!(err.len() < 16 * 1024, "a summary of {} bytes", err.len());
    assert!(line.contains("not kept by name"), "{line}");
    // Kept whole, 3000 targets of 15 KB each would cost lockrun far more
    // than this bound.
    assert!(peak_kib > 0, "lockrun's memory was never read");
    eprintln!("lockrun's peak memory: {peak_kib} KiB");
    assert!(
        peak_kib < 64 * 1024,
        "lockrun's peak memory: {peak_kib} KiB"
    );
}

/// A caller's low soft descriptor limit is the command's, and the run
/// starts: lockrun's own descriptors do not count against it.
#[test]
fn a_low_descriptor_limit_is_given_to_the_command() {
    let w = World::new("low-nofile");
    for limit in [32u64, 8] {
        let lowered = format!("ulimit -Sn {limit} && exec \"$0\" \"$@\"");
        let mut cmd = w.cmd_under(&["sh", "-c", &lowered], &[], &["sh", "-c", "ulimit -n"]);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "soft limit {limit}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{limit}\n"));
    }
}

/// A request to the run's proxy for a host no policy lists: proxy traffic
/// with no upstream, answered 403. Prints the status.
const ASK_PROXY: &str = r#"
import base64, os, socket
proxy = os.environ["HTTPS_PROXY"]
auth, addr = proxy.split("//")[1].rstrip("/").rsplit("@", 1)
host, port = addr.rsplit(":", 1)
s = socket.create_connection((host, int(port)))
token = base64.b64encode(auth.encode()).decode()
s.sendall(f"CONNECT unlisted.lockrun.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode())
print(s.recv(64).split(b" ")[1].decode())
"#;

/// Runs one after another and many at once, each with proxy traffic: every
/// one ends as its command did, and none leaves a run dir, a cgroup or a
/// process behind.
#[test]
fn runs_one_after_another_and_at_once_all_end_and_leave_nothing() {
    let w = World::new("load");
    let argv = [python3(), "-c", ASK_PROXY];
    let allow = ["--allow-host", "allowed.lockrun.test"];
    let mut logs = Vec::new();
    let log_args = |i: usize| {
        let log = w.root.join(format!("run-{i}.jsonl"));
        (
            log.clone(),
            vec![
                allow[0].to_owned(),
                allow[1].to_owned(),
                "--audit-log".to_owned(),
                s(&log).to_owned(),
            ],
        )
    };
    // Fewer under emulation (tests/support/slow.rs): the same cleanup.
    let one_by_one = slow::repetitions(30, 4) as usize;
    let at_once = slow::repetitions(16, 6) as usize;
    for i in 0..one_by_one {
        let (log, extra) = log_args(i);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let out = w.run(&extra, &argv);
        assert!(out.status.success(), "run {i}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403\n", "run {i}");
        logs.push(log);
    }
    let at_once: Vec<_> = (one_by_one..one_by_one + at_once)
        .map(|i| {
            let (log, extra) = log_args(i);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            logs.push(log);
            w.cmd(&extra, &argv)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in at_once.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "run {}: {}",
            one_by_one + i,
            stderr(&out)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403\n");
    }
    // Nothing left: each run's cgroup (named by its log), its run dir, and
    // every process that ran in it.
    let parent = lockrun::bpf::shared::build_parent().unwrap();
    for log in &logs {
        let first = std::fs::read_to_string(log).unwrap();
        let rec: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
        let id = rec["run_id"].as_str().unwrap();
        assert!(!parent.join(id).exists(), "the cgroup of run {id} remains");
        assert!(first.contains("\"run_end\""), "{first}");
    }
    w.assert_no_run_dirs();
    assert!(processes_naming(&w.root).is_empty());
}

/// The pids of live processes whose command line names `path`.
fn processes_naming(path: &Path) -> Vec<u32> {
    let needle = path.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// lockrun killed (`SIGKILL`) at any moment of its start-up: the command never runs
/// unconfined, and no process of the run outlives it for long (its
/// watchdog, or the kernel, ends them); `lockrun gc` reaps what is left.
#[test]
fn lockrun_killed_while_it_starts_never_lets_the_command_out() {
    let w = World::new("killed-starting");
    let escaped = w.data.join("escaped");
    let pids = w.wt.join("pids");
    let command = format!(
        "echo $$ >> {}; echo out > {} 2>/dev/null; exec sleep 60",
        s(&pids),
        s(&escaped)
    );
    // How long a start-up takes here: from lockrun's spawn to the command's
    // first write. The kills are spread over twice that.
    let first = w.wt.join("first");
    let t = Instant::now();
    let mut control = w
        .cmd(
            &[],
            &["sh", "-c", &format!("echo > {}; exec sleep 60", s(&first))],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !first.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "the control never started"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let start_up = t.elapsed();
    control.kill().unwrap();
    control.wait().unwrap();
    std::fs::remove_file(&first).unwrap();
    for i in 0..24u32 {
        let mut child = w
            .cmd(&[], &["sh", "-c", &command])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(start_up * 2 * i / 24);
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Every command that got to run did so confined, and is gone soon.
    let ran: Vec<String> = std::fs::read_to_string(&pids)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut alive = processes_naming(&w.wt);
        alive.extend(
            ran.iter()
                .filter_map(|p| p.parse::<u32>().ok())
                .filter(|p| Path::new(&format!("/proc/{p}")).exists()),
        );
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes of killed runs live on: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_absent(&escaped);
    // Control: the kills spanned the start-up: some commands started.
    assert!(
        !ran.is_empty(),
        "no kill came late enough for a command to start"
    );
    assert!(
        ran.len() < 24,
        "no kill came early enough to stop a start-up"
    );
    let gc = Command::new(BIN)
        .args(["gc", "--grace-secs", "0", "--state-dir", s(&w.state)])
        .output()
        .unwrap();
    assert!(gc.status.success(), "{}", stderr(&gc));
    w.assert_no_run_dirs();
}
