//! The policy as people meet it: `policy show` of every file in policies/ is
//! stable (snapshots), `--rules` shows the grants around a deny-read path,
//! and bad policies exit 2 naming the line and key, with nothing run.
//!
//! Regenerate the snapshots with `LOCKRUN_UPDATE_SNAPSHOTS=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{scratch_cli, skip};
use scratch_cli::{lockrun, Scratch, BIN};

/// `text` without `policy show`'s warning that the temp dir, where the
/// scratch dirs and so the denied state dir lie, is crowded: that depends
/// on the machine, not on the test.
/// `--worktree`, `--state-dir` of the scratch dir's own, and `--deny-read denied`.
fn scratch_run_args(s: &Scratch, denied: &Path) -> Vec<String> {
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    vec![
        "--worktree".into(),
        path(&s.0.join("wt")),
        "--state-dir".into(),
        path(&s.0.join("state")),
        "--deny-read".into(),
        path(denied),
    ]
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn without_tmp_crowding(text: &str) -> String {
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    let crowding = format!("  warning: {} holds ", tmp.display());
    let mut out = String::new();
    for l in text.lines().filter(|l| !l.starts_with(&crowding)) {
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

#[test]
fn policy_show_of_every_policy_file_is_stable() {
    // `policy show` names what stands in for what the kernel lacks (the
    // supervisor's truncate and scoping, `nodev` mounts): the snapshots are
    // of a kernel that lacks none of it, and those lines are judged in
    // tests/filesystem/fallbacks.rs and tests/processes/scope.rs.
    if skip::below_landlock_abi(
        "policy_show_of_every_policy_file_is_stable",
        6,
        "Landlock truncate, device ioctl or scoping (`policy show` names their stand-ins)",
    ) || skip::before_kernel(
        "policy_show_of_every_policy_file_is_stable",
        (6, 7),
        "cgroup unix hooks (`policy show` names their stand-in)",
    ) {
        return;
    }
    let s = Scratch::new("policy-cli", "snap");
    let update = std::env::var_os("LOCKRUN_UPDATE_SNAPSHOTS").is_some();
    let mut seen = 0;
    for entry in std::fs::read_dir(policies_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let out = lockrun(
            &s,
            &[
                "policy",
                "show",
                "--policy",
                path.to_str().unwrap(),
                "--worktree",
                s.0.join("wt").to_str().unwrap(),
                "--state-dir",
                s.0.join("state").to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{name}: {out:?}");
        let text = without_tmp_crowding(&String::from_utf8(out.stdout).unwrap());
        let text = text
            .replace(
                &path.canonicalize().unwrap().display().to_string(),
                &format!("policies/{name}.toml"),
            )
            .replace(&s.0.join("state").display().to_string(), "<state>")
            .replace(&s.0.join("wt").display().to_string(), "<worktree>")
            .replace(&s.0.join("home").display().to_string(), "<home>");
        let snap = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../tests/snapshots/policy_show/{name}.txt"));
        if update {
            std::fs::write(&snap, &text).unwrap();
        } else {
            let want = std::fs::read_to_string(&snap).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (run with LOCKRUN_UPDATE_SNAPSHOTS=1 to create it)",
                    snap.display()
                )
            });
            assert_eq!(
                text, want,
                "policy show of {name} changed; if intended, LOCKRUN_UPDATE_SNAPSHOTS=1"
            );
        }
        // The JSON form parses and names the same sources.
        let out = lockrun(
            &s,
            &[
                "policy",
                "show",
                "--json",
                "--policy",
                path.to_str().unwrap(),
                "--worktree",
                s.0.join("wt").to_str().unwrap(),
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            v["policy"]["sources"].as_array().unwrap().len() >= 2 || name == "default",
            "{name}: {v}"
        );
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} policies found");
}

/// A worktree whose name is not UTF-8 (any byte but `/` and NUL is a Linux
/// file name): `policy show --json` prints it, the byte as U+FFFD, as the
/// audit log does; the text form shows it the same way.
#[test]
fn policy_show_json_prints_a_worktree_whose_name_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt as _;
    let s = Scratch::new("policy-cli", "non-utf8");
    let wt = s.0.join(std::ffi::OsStr::from_bytes(b"wt-\xff"));
    std::fs::create_dir_all(&wt).unwrap();
    let show = |wt: &Path| {
        Command::new(BIN)
            .args(["policy", "show", "--json", "--worktree"])
            .arg(wt)
            .env("HOME", s.0.join("home"))
            .output()
            .unwrap()
    };
    let out = show(&wt);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = v["policy"]["worktree"].as_str().unwrap_or_default();
    assert!(shown.ends_with("/wt-\u{fffd}"), "{v}");
    // Control: the same with a UTF-8 name shows it as it is.
    let plain = s.0.join("wt-plain");
    std::fs::create_dir_all(&plain).unwrap();
    let out = show(&plain);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["policy"]["worktree"].as_str(), plain.to_str(), "{v}");
}

#[test]
fn rules_grant_the_siblings_of_a_denied_path_and_not_the_path() {
    let s = Scratch::new("policy-cli", "rules");
    let home = s.0.join("home");
    for d in ["secret", "open/a", "open/b"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let mut args = vec!["policy".to_owned(), "show".into(), "--rules".into()];
    args.extend(scratch_run_args(&s, &home.join("secret")));
    let out = lockrun(&s, &strs(&args));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rule = |p: &Path| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{}:", p.display())))
            .map(str::to_owned)
    };
    assert_eq!(
        rule(&home.join("open")).as_deref().map(str::trim),
        Some(format!("{}: read, execute, list", home.join("open").display()).as_str())
    );
    assert!(
        rule(&home.join("secret")).is_none(),
        "the denied path must have no rule:\n{text}"
    );
    // Its parent is listable, never granted whole.
    assert!(
        rule(&home).is_some_and(|r| r
            .trim()
            .ends_with(": list only (the names; nothing beneath is readable unless listed here)")),
        "its parent must be listable only:\n{text}"
    );
    assert!(
        rule(&s.0.join("wt")).unwrap().contains("every right"),
        "{text}"
    );
    assert!(text.contains("{tmp}: every right"), "{text}");
}

/// `lockrun __kernel_steps`, the bench floor's input, lists exactly the
/// Landlock rules `policy show --rules` does (the same walk), the run's own
/// filesystems apart, and a seccomp program; else the floor would time
/// another sandbox than lockrun's.
#[test]
fn kernel_steps_list_the_rules_a_run_builds() {
    let s = Scratch::new("policy-cli", "kernel-steps");
    let home = s.0.join("home");
    for d in ["secret", "open/a"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    // Where a run's temp dir is; not a sibling the walk to the denied path
    // grants, as `policy show`'s stand-in, which is left out below, is not.
    let tmp = s.0.join("state/runs/kernel-steps/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // The walk passes the temp dir, where other tests make and remove
    // theirs while these two commands run: its entries but this test's
    // own are left out of the comparison (`policy show`'s stand-in temp
    // dir among them).
    let machine_tmp = std::env::temp_dir();
    let others =
        |p: &str| Path::new(p).parent() == Some(machine_tmp.as_path()) && !s.0.starts_with(p);
    let common = scratch_run_args(&s, &home.join("secret"));
    let mut args = vec![
        "__kernel_steps".to_owned(),
        "--tmp".into(),
        tmp.display().to_string(),
    ];
    args.extend(common.iter().cloned());
    let steps = lockrun(&s, &strs(&args));
    assert!(steps.status.success(), "{steps:?}");
    let steps = String::from_utf8(steps.stdout).unwrap();
    let mut args = vec![
        "policy".to_owned(),
        "show".into(),
        "--rules".into(),
        "--json".into(),
    ];
    args.extend(common.iter().cloned());
    let shown = lockrun(&s, &strs(&args));
    assert!(shown.status.success(), "{shown:?}");
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();

    let tmp = tmp.display().to_string();
    let mut listed: Vec<String> = steps
        .lines()
        .filter_map(|l| l.strip_prefix("rule "))
        .map(|l| l.split_once(' ').unwrap().1)
        .map(|p| {
            if p == tmp {
                "{tmp}".to_owned()
            } else {
                p.to_owned()
            }
        })
        .filter(|p| !others(p))
        .collect();
    listed.sort();
    let own: Vec<&str> = steps
        .lines()
        .filter_map(|l| l.strip_prefix("own "))
        .map(|l| l.split_once(' ').unwrap().1)
        .collect();
    let mut expected: Vec<String> = shown["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().to_owned())
        .filter(|p| !p.contains(" (the run's own"))
        .filter(|p| !others(p))
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(
        !listed
            .iter()
            .any(|p| p.starts_with(home.join("secret").to_str().unwrap())),
        "{steps}"
    );
    assert!(own.contains(&"/proc"), "{steps}");
    let program = steps.lines().filter(|l| l.starts_with("bpf ")).count();
    assert!(
        program > 100,
        "a seccomp program of {program} instructions:\n{steps}"
    );
    assert!(
        steps.lines().any(|l| l.starts_with("handled 0x")),
        "{steps}"
    );
}

/// A bad policy: exit 2, one message naming the file, line and key; the
/// command (which would create a file) never ran.
fn refused(name: &str, toml: &str, wants: &[&str]) {
    let s = Scratch::new("policy-cli", name);
    let policy = s.0.join("bad.toml");
    std::fs::write(&policy, toml).unwrap();
    let marker = s.0.join("wt/ran");
    let out = lockrun(
        &s,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--worktree",
            s.0.join("wt").to_str().unwrap(),
            "--state-dir",
            s.0.join("state").to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name}: {err}");
    assert_eq!(err.lines().count(), 1, "{name}: one line: {err}");
    for w in wants {
        assert!(err.contains(w), "{name}: {w:?} not in {err}");
    }
    assert!(!marker.exists(), "{name}: the command ran");
    assert!(
        std::fs::read_dir(s.0.join("state"))
            .unwrap()
            .next()
            .is_none(),
        "{name}: a run dir was made"
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_line_and_a_suggestion() {
    refused(
        "unknown",
        "[network]\nallow = []\nalow = [\"x\"]\n",
        &[
            "bad.toml:3:1",
            "unknown field `alow`",
            "did you mean `allow`",
        ],
    );
}

#[test]
fn a_wrong_type_is_refused_with_its_line() {
    refused(
        "type",
        "[run]\nidle_tunnel_secs = \"long\"\n",
        &["bad.toml:2:", "invalid type"],
    );
}

#[test]
fn a_relative_path_is_refused() {
    refused(
        "relative",
        "[filesystem]\nwritable = [\"build/out\"]\n",
        &["bad.toml", "filesystem.writable", "relative"],
    );
}

#[test]
fn an_invalid_host_pattern_is_refused() {
    refused(
        "pattern",
        "[network]\nallow = [\"*evil\"]\n",
        &["bad.toml", "network.allow", "*evil"],
    );
}

#[test]
fn ports_0_and_70000_are_refused() {
    refused(
        "port0",
        "[network]\nallow = [\"a.example.com:0\"]\n",
        &["bad.toml", "network.allow", "port"],
    );
    refused(
        "port70000",
        "[network]\nallow = [\"a.example.com:70000\"]\n",
        &["bad.toml", "network.allow", "70000"],
    );
}

#[test]
fn an_extends_cycle_is_refused() {
    let s = Scratch::new("policy-cli", "cycle");
    std::fs::write(s.0.join("a.toml"), "extends = \"b.toml\"\n").unwrap();
    std::fs::write(s.0.join("b.toml"), "extends = \"a.toml\"\n").unwrap();
    let marker = s.0.join("wt/ran");
    let out = lockrun(
        &s,
        &[
            "--policy",
            s.0.join("a.toml").to_str().unwrap(),
            "--worktree",
            s.0.join("wt").to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`extends` cycle") && err.contains("a.toml") && err.contains("b.toml"),
        "{err}"
    );
    assert!(!marker.exists());
}

#[test]
fn an_agent_preset_reads_neither_other_agents_nor_the_users_own_harness_state() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test may not skip under CI=true"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: an_agent_preset_reads_neither_other_agents_nor_the_users_own_harness_state: needs root\n",
        );
        return;
    }
    let s = Scratch::new("policy-cli", "agents");
    let (state, home) = (s.0.join("state"), s.0.join("home"));
    std::fs::create_dir_all(state.join("agents/codex")).unwrap();
    std::fs::write(state.join("agents/codex/auth.json"), "codex-token").unwrap();
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(home.join(".claude/.credentials.json"), "user-token").unwrap();
    let script = "cat \"$0\" 2>&1; echo \"rc=$?\"; cat \"$1\" 2>&1; echo \"rc=$?\"; echo mine > \"$CLAUDE_CONFIG_DIR/mine\"; echo \"rc=$?\"";
    let out = lockrun(
        &s,
        &[
            "--policy",
            "claude-code",
            "--worktree",
            s.0.join("wt").to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
            state.join("agents/codex/auth.json").to_str().unwrap(),
            home.join(".claude/.credentials.json").to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    // Refused inside (EACCES from Landlock), and nothing of either secret came out.
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("Permission denied") && lines[1] == "rc=1",
        "{text}"
    );
    assert!(
        lines[2].contains("Permission denied") && lines[3] == "rc=1",
        "{text}"
    );
    assert!(
        !text.contains("codex-token") && !text.contains("user-token"),
        "{text}"
    );
    // Control: the agent's own dir under the state dir is writable (seen from outside).
    assert_eq!(lines[4], "rc=0", "{text}");
    assert_eq!(
        std::fs::read_to_string(state.join("agents/claude-code/mine")).unwrap(),
        "mine\n"
    );
}

#[test]
fn policy_show_warns_of_a_writable_dir_where_code_runs_later() {
    let s = Scratch::new("policy-cli", "later");
    let home = s.0.join("home");
    let bin = home.join(".local/bin");
    let plain = s.0.join("wt/out");
    let out = lockrun(
        &s,
        &[
            "policy",
            "show",
            "--worktree",
            s.0.join("wt").to_str().unwrap(),
            "--allow-write",
            bin.to_str().unwrap(),
            "--allow-write",
            plain.to_str().unwrap(),
        ],
    );
    let text = without_tmp_crowding(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(
        warnings,
        [format!(
            "  warning: {} is writable and reaches {}: it is on PATH: its programs run in place of the real ones; \
             what a command leaves there runs later, outside the sandbox",
            bin.display(),
            bin.display()
        )],
        "{text}"
    );
}

/// A denied path among thousands of siblings costs every run a rule for
/// each; `policy show` says so before any run, naming the dir, its entry
/// count and the denied path behind it, in text and JSON. Control: a denied
/// path among a few siblings is not warned of.
#[test]
fn policy_show_warns_of_a_crowded_dir_on_the_way_to_a_denied_path() {
    let s = Scratch::new("policy-cli", "crowded");
    let crowd = s.0.join("crowd");
    let few = s.0.join("few");
    for d in [crowd.join("vault"), few.join("vault")] {
        std::fs::create_dir_all(d).unwrap();
    }
    for i in 0..1200 {
        std::fs::write(crowd.join(format!("f{i}")), b"").unwrap();
    }
    let args = |json: bool| {
        let mut a = vec!["policy", "show"];
        if json {
            a.push("--json");
        }
        a.extend(["--worktree", "wt", "--state-dir", "state"]);
        a
    };
    let mut text_args = args(false);
    let vault = crowd.join("vault");
    let few_vault = few.join("vault");
    text_args.extend(["--deny-read", vault.to_str().unwrap()]);
    text_args.extend(["--deny-read", few_vault.to_str().unwrap()]);
    let out = lockrun(&s, &text_args);
    assert!(out.status.success(), "{out:?}");
    let text = without_tmp_crowding(&String::from_utf8_lossy(&out.stdout));
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(
        warnings,
        [format!(
            "  warning: {} holds 1201 entries, and each gets a Landlock rule of its own on every \
             run, because denied paths lie at or beneath {} (Landlock only grants, so a denied \
             path's siblings are granted one by one); a state dir (--state-dir) or denied path in \
             a less crowded directory starts faster",
            crowd.display(),
            vault.display()
        )],
        "{text}"
    );
    // It follows the deny-read list it explains.
    let lines: Vec<&str> = text.lines().collect();
    let at = |needle: &str| lines.iter().position(|l| l.trim_start() == needle);
    assert!(
        at(vault.to_str().unwrap()) < lines.iter().position(|l| l.contains("warning:")),
        "{text}"
    );

    let mut json_args = args(true);
    json_args.extend(["--deny-read", vault.to_str().unwrap()]);
    let out = lockrun(&s, &json_args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let crowded: Vec<&str> = v["crowded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        crowded
            .iter()
            .any(|c| c.starts_with(&format!("{} holds 1201 entries", crowd.display()))),
        "{v}"
    );
}
