//! What a run sees of the `/dev` filesystems a machine may have: POSIX
//! message queues and huge-page memory.
//!
//! A run has message queues of its own, in its IPC namespace, granted by
//! Landlock through the run's mqueue filesystem and mounted on
//! `/dev/mqueue` where the machine has one (hiding the machine's, whose
//! queue files a uid-0 run could otherwise open and receive through).
//! Judged from outside: the machine's queue still holds its one message.
//! Files of the machine's `/dev/hugepages` (other processes' memory) are
//! not readable.
//!
//! Its own test binary: tests here make `/dev/mqueue` or `/dev/hugepages`
//! on a machine without one (as systemd makes them) and remove it after,
//! which a run starting meanwhile in another test would trip over; the
//! tests here take turns. The filesystems are mounted only in a mount
//! namespace of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Mutex;

use crate::support::world;
use world::{probe_argv, RemovedAtEnd, World};

static TURNS: Mutex<()> = Mutex::new(());

/// A queue of the machine's, unlinked when dropped.
struct Queue<'w>(&'w World, String);

impl Queue<'_> {
    /// A new queue holding the one message `text`.
    fn holding<'w>(w: &'w World, tag: &str, text: &str) -> Queue<'w> {
        let q = Queue(w, format!("/lockrun-{tag}-{}", std::process::id()));
        let _ = w.probe_outside(&[&["mq_unlink", &q.1]]);
        assert_eq!(w.probe_outside(&[&["mq_make", &q.1, text]]), ["ok"]);
        q
    }

    /// Whether it still holds `text` and nothing else (judged from outside).
    fn assert_holds(&self, text: &str) {
        assert_eq!(
            self.0.probe_outside(&[&["mq_holds", &self.1, text]]),
            ["ok"]
        );
    }
}

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        let _ = self.0.probe_outside(&[&["mq_unlink", &self.1]]);
    }
}

/// A queue outside is not there by its name inside; the run makes one of
/// its own by the same name, sends and receives on it; the machine's still
/// holds its one message, untouched. Before the run had its own mqueue
/// filesystem granted, `mq_open` inside failed with `EACCES`.
#[test]
fn a_run_has_message_queues_of_its_own_that_nothing_outside_shares() {
    let _turn = TURNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let w = World::new("mq");
    let q = Queue::holding(&w, "mq", "outside");
    // Control: outside, the queue is there by its name.
    assert_eq!(w.probe_outside(&[&["mq_open", &q.1]]), ["ok"]);
    let r = w.probe(
        &[],
        &[
            &["mq_open", &q.1],
            &["mq_make", &q.1, "inside"],
            &["mq_holds", &q.1, "inside"],
        ],
    );
    assert_eq!(r, ["errno=ENOENT", "ok", "ok"]);
    q.assert_holds("outside");
}

/// Where the machine has a `/dev/mqueue`, the run's own is mounted over
/// it: the machine's queue file is not there to open (before, it was
/// readable, and receiving through it took the queue's messages), and the
/// run's own queue appears there, its file usable and its mode changeable.
/// Control: outside, in the same mount namespace, the machine's queue file
/// is there to read.
#[test]
fn the_machines_dev_mqueue_is_hidden_by_the_runs_own() {
    let _turn = TURNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let w = World::new("mq-dev");
    let _made = made(Path::new("/dev/mqueue"));
    let q = Queue::holding(&w, "mq-dev", "outside");
    let file = format!("/dev/mqueue{}", q.1);
    let out = in_mount_namespace(
        &w,
        // The machine's own where it has one (systemd mounts it), else
        // one made here, as systemd makes it.
        "mountpoint -q /dev/mqueue || mount -t mqueue mqueue /dev/mqueue",
        &file,
        &[
            &["read", &file],
            &["mq_receive_file", &file],
            &["mq_make", &q.1, "inside"],
            &["chmod_mode", &file, "644"],
            &["mq_receive_file", &file],
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["ok", "errno=ENOENT", "errno=ENOENT", "ok", "ok", "ok"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    w.assert_no_run_dirs();
    q.assert_holds("outside");
}

/// Files of the machine's `/dev/hugepages` (hugetlbfs: memory other
/// processes share as files) are not readable inside (`EACCES`); before,
/// they were among `/dev`'s readable entries. Control: outside, in the same
/// mount namespace, the file reads.
#[test]
fn the_machines_huge_page_files_are_not_readable() {
    let _turn = TURNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let w = World::new("hugepages");
    let _made = made(Path::new("/dev/hugepages"));
    let file = format!("/dev/hugepages/lockrun-{}", std::process::id());
    let out = in_mount_namespace(
        &w,
        &format!("mount -t hugetlbfs hugetlbfs /dev/hugepages; : > {file}"),
        &file,
        &[&["read", &file]],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["ok", "errno=EACCES"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("refused: read {file} (python3)")),
        "lockrun names the refusal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.assert_no_run_dirs();
}

/// In a mount namespace of its own: `setup` (a shell line), then the
/// probe's `read` of `file` outside (the control), then the probe's `ops`
/// in a run.
fn in_mount_namespace(w: &World, setup: &str, file: &str, ops: &[&[&str]]) -> std::process::Output {
    let script = format!(r#"{setup}; "$1" "$2" "$3" "$4" "$5"; shift 5; exec "$@""#);
    let mut wrapper = vec![
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-ec",
        &script,
        "sh",
    ];
    let control = probe_argv(&[&["read", file]]);
    wrapper.extend(control.iter().map(String::as_str));
    w.cmd_under(&wrapper, &[], &probe_argv(ops))
        .output()
        .unwrap()
}

/// `dir`, made as systemd makes it where the machine has none, and removed
/// at the end; `None` where the machine has one.
fn made(dir: &Path) -> Option<RemovedAtEnd> {
    (!dir.exists()).then(|| {
        std::fs::create_dir(dir).unwrap();
        RemovedAtEnd(vec![dir.to_path_buf()])
    })
}
