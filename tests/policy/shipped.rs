//! Every policy shipped in `policies/` parses through `lockrun::policy::load`,
//! and every preset embedded in the binary is the file on disk. The directory
//! is listed, so a new policy file is covered without touching this test.

use std::path::{Path, PathBuf};

use lockrun::policy::file::PRESETS;
use lockrun::policy::{load, Overrides, PathSpec, Policy};

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

fn policy_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(policies_dir())
        .expect("list policies/")
        .map(|e| e.expect("policies/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected default + 4 agent presets, found {files:?}"
    );
    files
}

/// A scratch dir of this test process (no tempfile crate in the tree),
/// removed when dropped, on every path out of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let d =
            std::env::temp_dir().join(format!("lockrun-policy-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create scratch dir");
        Self(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn overrides(worktree: &Scratch) -> Overrides {
    Overrides {
        worktree: Some(worktree.0.clone()),
        state_dir: Some(PathBuf::from("/var/lib/lockrun-test-state")),
        ..Overrides::default()
    }
}

fn load_file(path: &Path, worktree: &Scratch) -> Policy {
    let p = path.to_str().expect("utf-8 path");
    load(Some(p), &overrides(worktree)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_policy_file_loads() {
    let wt = Scratch::new("loads");
    for f in policy_files() {
        let policy = load_file(&f, &wt);
        assert!(
            !policy.sources.is_empty(),
            "{}: no sources recorded",
            f.display()
        );
    }
}

#[test]
fn every_preset_is_the_file_on_disk() {
    let wt = Scratch::new("presets");
    for (name, text) in PRESETS {
        let path = policies_dir().join(format!("{name}.toml"));
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("preset {name}: {}: {e}", path.display()));
        assert_eq!(
            *text,
            on_disk,
            "preset {name} differs from {}",
            path.display()
        );
        load(Some(name), &overrides(&wt)).unwrap_or_else(|e| panic!("preset {name}: {e}"));
    }
}

#[test]
fn every_policy_file_is_a_preset() {
    for f in policy_files() {
        let stem = f.file_stem().and_then(|s| s.to_str()).expect("file stem");
        assert!(
            PRESETS.iter().any(|(n, _)| *n == stem),
            "{} is not in PRESETS (agent/src/policy/file.rs)",
            f.display()
        );
    }
}

#[test]
fn default_means_no_network() {
    let wt = Scratch::new("default");
    let p = load(Some("default"), &overrides(&wt)).expect("default preset");
    assert!(p.network.allow.is_empty(), "{:?}", p.network.allow);
    assert!(p.network.local.is_empty(), "{:?}", p.network.local);
    assert!(p.network.private.is_empty(), "{:?}", p.network.private);
    assert!(!p.network.needs_proxy());
}

/// Agent presets stay narrow: on top of default, no direct (loopback) or
/// private-network access, nothing writable in the user's home, and every
/// directory they point the agent at through `[env]` is writable.
#[test]
fn agent_presets_are_narrow_and_consistent() {
    let wt = Scratch::new("narrow");
    let state = PathBuf::from("/var/lib/lockrun-test-state");
    for (name, _) in PRESETS.iter().filter(|(n, _)| *n != "default") {
        let p = load(Some(name), &overrides(&wt)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            p.sources
                .first()
                .map(|s| s.display().to_string())
                .as_deref(),
            Some("preset:default"),
            "{name} must extend default"
        );
        assert!(p.network.local.is_empty(), "{name}: local endpoints");
        assert!(p.network.private.is_empty(), "{name}: private networks");
        let writable: Vec<PathBuf> =
            p.fs.writable
                .iter()
                .map(|w| match w {
                    PathSpec::Absolute(a) => a.clone(),
                    PathSpec::RunTmp(_) => panic!("{name}: {{tmp}} is writable already"),
                })
                .collect();
        for w in &writable {
            assert!(
                w.starts_with(state.join("agents").join(name)),
                "{name}: writable {} is outside {{state}}/agents/{name}",
                w.display()
            );
        }
        for (k, v) in &p.env {
            let v = v.render(Path::new("/run-tmp"));
            if v.starts_with('/') && !v.starts_with("/run-tmp") {
                assert!(
                    writable.iter().any(|w| Path::new(&v).starts_with(w)),
                    "{name}: env {k}={v} points outside the writable dirs"
                );
            }
        }
    }
}
