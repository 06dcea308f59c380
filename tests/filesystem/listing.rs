//! Listing: every dir a run may read is listable, also the dirs above a
//! denied path (`/`, `/tmp`, the home), which agents list at start; what
//! lies beneath a denied path stays closed, and each refused read is seen.

use lockrun::audit::{Event, Record};

use crate::probe_without_caps;
use crate::support::world;
use crate::support::world::{assert_absent, assert_canary, s, stdout_lines, World};

/// The read walk grants the dirs on the way down to a denied path the
/// listing right (Landlock only grants, and their entries are granted one
/// by one around the denied ones). The price, which Landlock does not let
/// lockrun avoid (no rule can take a right away beneath one that grants
/// it): the names in a denied dir are listed too. What they hold is not:
/// a key read, a file beneath a subdir of a denied dir, a tool executed
/// there, all `EACCES`. Judged from outside: the run's copy of the key
/// and the tool's mark do not exist, the canaries are unchanged, and the
/// audit log records the refused read by its path; the summary names no
/// refused listing. Control: outside, without capabilities, the same key
/// is copied and the same tool runs.
#[test]
fn dirs_above_a_denied_path_list_and_nothing_beneath_it_opens() {
    use std::os::unix::fs::PermissionsExt as _;
    let w = World::new("listing");
    let ssh = w.home.join(".ssh");
    std::fs::create_dir_all(ssh.join("keys")).unwrap();
    let key = w.canary(&ssh.join("id_rsa"));
    let deep = w.canary(&ssh.join("keys/deep"));
    let vault = w.root.join("vault");
    std::fs::create_dir_all(vault.join("sub")).unwrap();
    let secret = w.canary(&vault.join("sub/secret"));
    let mark = w.root.join("tool-ran");
    let tool = vault.join("tool");
    std::fs::write(&tool, format!("#!/bin/sh\ntouch {}\n", mark.display())).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = w.root.join("audit.jsonl");
    let copy = w.wt.join("id_rsa");
    let root_name = w.root.file_name().unwrap().to_str().unwrap();
    let out = w.run(
        &["--deny-read", s(&vault), "--audit-log", s(&log)],
        &world::probe_argv(&[
            &["lists", "/", "tmp"],
            &["lists", "/tmp", root_name],
            &["lists", s(&w.home), ".ssh"],
            &["lists", s(&w.root), "vault"],
            // The names in a denied dir: listed (see above).
            &["lists", s(&ssh), "id_rsa"],
            &["copy", s(&key), s(&copy)],
            &["read", s(&deep)],
            &["read", s(&secret)],
            &["exec", s(&tool)],
        ]),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_lines(&out),
        [
            "ok",
            "ok",
            "ok",
            "ok",
            "ok",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES"
        ],
        "{out:?}"
    );
    assert_absent(&copy);
    assert_absent(&mark);
    for c in [&key, &deep, &secret] {
        assert_canary(c);
    }
    // Seen: each refused read by its path, and no listing refused.
    let refused: Vec<(String, Vec<String>)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str::<Record>(l).unwrap().event {
            Event::Filesystem(f) => Some((f.path.unwrap_or_default(), f.access)),
            _ => None,
        })
        .collect();
    for (path, access) in [
        (&key, "fs.read_file"),
        (&deep, "fs.read_file"),
        (&secret, "fs.read_file"),
        (&tool, "fs.execute"),
    ] {
        assert!(
            refused
                .iter()
                .any(|(p, a)| p == s(path) && a.iter().any(|a| a == access)),
            "{path:?} {access} not recorded: {refused:?}"
        );
    }
    assert!(
        !refused
            .iter()
            .any(|(_, a)| a.iter().any(|a| a == "fs.read_dir")),
        "{refused:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains(": list "), "{err}");
    assert!(err.contains(&format!("read {}", key.display())), "{err}");
    // Control: outside, without capabilities, the key copies, the tool runs.
    let outside = w.root.join("key-outside");
    probe_without_caps(&["copy", s(&key), s(&outside)]);
    assert_eq!(std::fs::read(&outside).unwrap(), b"canary");
    probe_without_caps(&["exec", s(&tool)]);
    assert!(mark.exists());
    w.assert_no_run_dirs();
}
