//! The build's hooks are attached once, to the parent of every run's cgroup
//! (`lockrun::bpf`). If that parent is removed (nothing runs) and made again,
//! its old links are defunct: the next run must attach the hooks again before
//! it registers, and the run must be judged as before. Its own binary: it
//! removes the build's parent, which no other test may be using meanwhile
//! (cargo runs test binaries one after another).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use crate::support::net;

use net::{assert_eperm, assert_event, Run, TcpSink};

#[test]
fn hooks_are_attached_again_to_a_parent_made_again() {
    const T: &str = "hooks_are_attached_again_to_a_parent_made_again";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    // A first run: the build's hooks are attached to its parent.
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    assert_eq!(
        run.probe(&["tcp", "127.0.0.1", &allowed.port().to_string()]),
        "ok"
    );
    run.finish();
    // Nothing runs: the parent can go, and its links with it.
    let parent = lockrun::bpf::shared::build_parent().unwrap();
    let old_id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&parent).unwrap());
    match std::fs::remove_dir(&parent) {
        Ok(()) => {}
        // A lockrun of this build is running on this machine (never in CI).
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            net::skip(T, "a run of this build is live in the build's parent");
            return;
        }
        Err(e) => panic!("removing {}: {e}", parent.display()),
    }

    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    let new_id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&parent).unwrap());
    assert_ne!(old_id, new_id, "the parent was made again");
    // Control: the allowed endpoint, bytes arrive.
    assert_eq!(
        run.probe(&["tcp", "127.0.0.1", &allowed.port().to_string()]),
        "ok"
    );
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    // Judged: another port is refused, and the refusal reported.
    assert_eperm(
        "tcp after the parent was made again",
        &run.probe(&["tcp", "127.0.0.1", &other.port().to_string()]),
    );
    assert_eq!(other.received(), None);
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", &other.addr.to_string());
    // Only links for the parent as it is now stay pinned (the unix guard's
    // and the sys_exit recorder's are no cgroup's).
    let links: Vec<String> = std::fs::read_dir(lockrun::bpf::shared::shared_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with("link-") && !n.starts_with("link-guard_") && n != "link-read_only_exit"
        })
        .collect();
    assert_eq!(links.len(), net::parent_links(), "{links:?}");
    assert!(
        links.iter().all(|n| n.ends_with(&format!("-{new_id}"))),
        "{links:?}"
    );
}
