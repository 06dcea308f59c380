//! POSIX message queues: a run has its own, in its IPC namespace, granted
//! by Landlock through the run's mqueue filesystem and mounted on
//! `/dev/mqueue` where the machine has one (hiding the machine's, whose
//! queue files a uid-0 run could otherwise open and receive through).
//! Judged from outside: the machine's queue still holds its one message.
//!
//! Its own test binary: one test here makes `/dev/mqueue` on a machine
//! without one (as systemd makes it) and removes it after, which a run
//! starting meanwhile in another test would trip over; the two tests here
//! take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[allow(unused_imports)]
#[path = "support/fs.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use support::{probe_argv, World};

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
    let dev = Path::new("/dev/mqueue");
    // Made as systemd makes it where the machine has none, and removed
    // after; mounted only in a mount namespace of this test's own.
    let _made = (!dev.exists()).then(|| {
        std::fs::create_dir(dev).unwrap();
        RemovedDir(dev)
    });
    let q = Queue::holding(&w, "mq-dev", "outside");
    let file = format!("/dev/mqueue{}", q.1);
    let run = w.cmd(
        &[],
        &probe_argv(&[
            &["read", &file],
            &["mq_receive_file", &file],
            &["mq_make", &q.1, "inside"],
            &["chmod_mode", &file, "644"],
            &["mq_receive_file", &file],
        ]),
    );
    let control = probe_argv(&[&["read", &file]]);
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-ec"])
        .arg(r#"mount -t mqueue mqueue /dev/mqueue; "$1" "$2" "$3" "$4" "$5"; shift 5; exec "$@""#)
        .arg("sh")
        .args(&control)
        .arg(run.get_program())
        .args(run.get_args())
        .envs(run.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(run.get_current_dir().unwrap())
        .output()
        .unwrap();
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

struct RemovedDir<'p>(&'p Path);

impl Drop for RemovedDir<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.0);
    }
}
