//! Metadata (mode, owner, times, xattrs) changes only inside the writable
//! roots; set-id bits and file capabilities not even there.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::python::python3;
use crate::support::world;
use crate::support::world::{assert_absent, assert_canary, meta, s, World};

#[test]
fn metadata_of_outside_files_cannot_change() {
    let w = World::new("meta");
    let f = w.canary(&w.data.join("f"));
    // Owned by another uid, outside: the read-only mount refuses the changes
    // Landlock does not cover (chmod, chown, utimes, setxattr) with EROFS
    // before the kernel's DAC (which would refuse them too) is even asked.
    std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = meta(&f);
    let mine = w.canary(&w.wt.join("mine"));
    let r = w.probe(
        &[],
        &[
            &["truncate", s(&f)],
            &["chmod", s(&f)],
            &["chown", s(&f)],
            &["utime", s(&f)],
            &["setxattr", s(&f)],
            &["truncate", s(&mine)],
            &["chmod", s(&mine)],
            &["utime", s(&mine)],
            &["setxattr", s(&mine)],
        ],
    );
    // truncate(2): the read-only mount, or where the kernel asks it
    // first, Landlock's truncate right (ABI ≥ 3): 6.18 asks Landlock, 6.12
    // the mount.
    let truncated = if world::landlock_abi() < 3 {
        &["errno=EROFS"][..]
    } else {
        &["errno=EACCES", "errno=EROFS"][..]
    };
    assert!(truncated.contains(&r[0].as_str()), "{r:?}");
    assert_eq!(
        r[1..],
        [
            "errno=EROFS",
            "errno=EROFS",
            "errno=EROFS",
            "errno=EROFS",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    assert_canary(&f);
    assert_eq!(meta(&f), before);
    assert!(xattr_absent(&f));
}

fn xattr_absent(p: &std::path::Path) -> bool {
    let out = Command::new(python3())
        .args([
            "-c",
            "import os,sys; print('user.pwned' in os.listxattr(sys.argv[1]))",
            s(p),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "False"
}

/// Set-id bits are refused in the worktree too (a setuid-root file left
/// there runs as root for whoever starts it after the run), each refusal
/// recorded and summed up; a directory may keep set-group-ID, which only
/// hands its group to what is made in it, so `git init --shared` works.
#[test]
fn set_id_bits_cannot_be_set_even_in_the_worktree() {
    use lockrun_seccomp::deny_list::Widens::SetIdMode;
    use std::os::unix::fs::MetadataExt;
    let w = World::new("setid");
    let f = w.canary(&w.wt.join("tool"));
    let dir = w.wt.join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &world::probe_argv(&[
            &["chmod_mode", s(&f), "4755"],
            &["chmod_mode", s(&f), "2755"],
            &["create_mode", s(&w.wt.join("made")), "4755"],
            &["chmod_mode", s(&dir), "4775"],
            &["open_raw", s(&w.wt.join("raw")), "101", "2644"], // O_CREAT|O_WRONLY
            // Controls: ordinary modes, set-group-ID on a directory, and a
            // set-id mode where the kernel ignores it (no O_CREAT).
            &["chmod_mode", s(&f), "755"],
            &["create_mode", s(&w.wt.join("plain")), "644"],
            &["chmod_mode", s(&dir), "2775"],
            &["open_raw", "/etc/os-release", "2000000", "5007"], // O_CLOEXEC
        ]),
    );
    assert!(out.status.success(), "{out:?}");
    w.assert_no_run_dirs();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    assert_absent(&w.wt.join("raw"));
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o2775);
    assert_absent(&w.wt.join("made"));
    assert!(w.wt.join("plain").exists());
    let (tool, shared) = (s(&f), s(&dir));
    let (made, raw) = (w.wt.join("made"), w.wt.join("raw"));
    let (made, raw) = (s(&made), s(&raw));
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            (format!("chmod to mode 04755 on {tool}"), SetIdMode),
            (format!("chmod to mode 02755 on {tool}"), SetIdMode),
            (format!("openat with mode 04755 on {made}"), SetIdMode),
            (
                format!("chmod to mode 04775 on {shared} (a directory)"),
                SetIdMode
            ),
            (format!("openat with mode 02644 on {raw}"), SetIdMode),
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lockrun: 5 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): "),
        "{stderr}"
    );
    // A shared repository sets S_ISGID on its directories.
    let out = w.run(&[], &["git", "init", "-q", "--shared=group", "repo"]);
    assert!(out.status.success(), "{out:?}");
    let objects = std::fs::metadata(w.wt.join("repo/.git/objects")).unwrap();
    assert_eq!(objects.mode() & 0o2000, 0o2000, "{:o}", objects.mode());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("refused"),
        "{out:?}"
    );
}

/// File capabilities are set-id by another name: `setcap cap_setuid+ep`
/// on a file in the worktree would hand `CAP_SETUID` to whoever runs it
/// after the run. The supervisor sets xattrs without capabilities, so the
/// kernel refuses `security.capability` (it wants `CAP_SETFCAP`); a
/// `user.*` xattr on the same file is set. Judged from outside.
#[test]
fn file_capabilities_cannot_be_set_in_the_worktree() {
    let w = World::new("setfcap");
    // Control: outside, as root with every capability, the xattr is set.
    let outside = w.root.join("outside-tool");
    std::fs::write(&outside, b"#!/bin/sh\n").unwrap();
    assert_eq!(w.probe_outside(&[&["setfcap", s(&outside)]]), ["ok"]);
    assert_eq!(
        Command::new(python3())
            .args([
                "-c",
                "import os,sys; print(len(os.getxattr(sys.argv[1], 'security.capability')))",
                s(&outside)
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap(),
        "20"
    );
    let tool = w.canary(&w.wt.join("tool"));
    let r = w.probe(&[], &[&["setfcap", s(&tool)], &["setxattr", s(&tool)]]);
    assert_eq!(r, ["errno=EPERM", "ok"]);
    let xattrs = Command::new(python3())
        .args([
            "-c",
            "import os,sys; print(sorted(os.listxattr(sys.argv[1])))",
            s(&tool),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&xattrs.stdout).trim(),
        "['user.pwned']"
    );
}
