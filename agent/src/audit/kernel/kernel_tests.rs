//! The reader against this kernel: a real Landlock denial of its child.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use super::*;
use crate::audit::{FsEvent, Record};
use crate::sys::landlock_abi_version;
use crate::testing::Scratch;

/// Restricts itself with Landlock (`write_file|make_reg` handled, nothing
/// granted, `LOG_NEW_EXEC_ON`) and execs `argv[1:]`.
const LANDLOCKED: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = struct.pack("=QQQ", (1<<1)|(1<<8), 0, 0)
fd = libc.syscall(444, ctypes.create_string_buffer(attr), len(attr), 0)
assert fd >= 0 and libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.syscall(446, fd, 2) == 0, ctypes.get_errno()
os.execvp(sys.argv[1], sys.argv[1:])
"#;

#[test]
fn collects_a_real_landlock_denial_of_its_child() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test may not skip under CI"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), concat!("skipped: collects_a_real_landlock_denial_of_its_child: needs root (CAP_AUDIT_READ)", "\n").as_bytes());
        return;
    }
    // Landlock's denial records are ABI 7's (Linux 6.15); below, the
    // run's refused calls stand in (tested in tests/refusals_seen/filesystem.rs).
    let abi = landlock_abi_version().unwrap_or(0);
    if abi < 7 {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("skipped: collects_a_real_landlock_denial_of_its_child: this kernel's Landlock ABI is {abi}: no denial records (ABI 7)\n").as_bytes(),
        );
        return;
    }
    let scratch = Scratch::new("kaudit");
    let dir = scratch.path().to_path_buf();
    let target = dir.join("denied.txt");
    let log_path = dir.join("audit.jsonl");
    let log = Arc::new(AuditLog::open(Some(&log_path)).unwrap());
    let reader = KernelAudit::start(log.clone(), "test").unwrap();
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            LANDLOCKED,
            "sh",
            "-c",
            &format!("echo x > {}", target.display()),
        ])
        .spawn()
        .unwrap();
    reader.watch(child.id());
    let status = child.wait().unwrap();
    reader.finish();
    assert!(!status.success(), "the write must have been refused");
    assert!(
        !target.exists(),
        "judged from outside: the file must not exist"
    );
    let text = std::fs::read_to_string(&log_path).unwrap();
    let events: Vec<Record> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fs: Vec<&FsEvent> = events
        .iter()
        .filter_map(|r| {
            if let Event::Filesystem(f) = &r.event {
                Some(f)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(fs.len(), 1, "exactly the one denial: {text}");
    assert_eq!(fs[0].pid, child.id());
    assert_eq!(fs[0].comm, "sh");
    assert_eq!(fs[0].path.as_deref(), Some(dir.to_str().unwrap()));
    assert_eq!(fs[0].access, vec!["fs.make_reg".to_owned()]);
}
