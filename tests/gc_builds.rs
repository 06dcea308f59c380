//! `lockrun gc` and other lockrun builds: each build pins its own programs,
//! maps and rings, and attaches them to a parent cgroup of its own
//! (`lockrun::bpf::reap::reap_other_builds`). gc removes another build's parent and
//! pins once none of its runs is left, and touches nothing of a build whose
//! run is live, nor anything of its own build.
//!
//! "Another build" is this test build run with `LOCKRUN_TEST_BUILD_ID`
//! (`weaken-for-tests`): the real programs, under another name. Its own
//! binary: gc here reaps every other build on the machine, which no other
//! test may be making meanwhile (cargo runs test binaries one after another).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod support;

use crate::support::{build, net, net_world, python};

use std::process::Stdio;

use build::TestBuild;
use net::TcpSink;
use net_world::{assert_eperm, s, wait_for, Background, World};

/// Inside the other build's run: say "ready", wait for `go`, then one
/// connection to each port given, one result line each.
const WAIT_THEN_CONNECT: &str = r#"
import errno, os, socket, sys, time
go, report, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
with open(report, "w") as r: r.write("ready\n")
while not os.path.exists(go): time.sleep(0.02)
res = []
for port in ports:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port)); s.sendall(b"escaped\n"); res.append("ok")
    except OSError as e:
        res.append("errno %d %s" % (e.errno, errno.errorcode.get(e.errno, "?")))
    s.close()
with open(report, "a") as r: r.write("\n".join(res) + "\n")
"#;

/// `lockrun gc` (the world's), which must succeed without a warning; its stdout.
fn gc(w: &World) -> String {
    let out = w.gc();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{out:?}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn gc_reaps_another_builds_programs_only_once_none_of_its_runs_is_left() {
    const T: &str = "gc_reaps_another_builds_programs_only_once_none_of_its_runs_is_left";
    let Some(w) = World::new(T) else { return };
    // This build is loaded and attached first, by a run of its own, so the
    // control below (gc left it alone) judges a build that existed: this
    // binary may be the first to run a freshly built object.
    let own = w.cmd::<&str>(&[], &["true"]).output().unwrap();
    assert!(own.status.success(), "{own:?}");
    assert!(lockrun::bpf::shared::shared_dir().is_dir());
    let other = TestBuild::new("test");
    let allowed = TcpSink::bind("127.0.0.1");
    let refused = TcpSink::bind("127.0.0.1");
    let go = w.wt.join("go");
    let report = w.wt.join("report");

    // A run of the other build, held open until `go`.
    let mut bg = Background(
        w.cmd(
            &["--allow-local".to_owned(), allowed.addr.to_string()],
            &[
                python::python3(),
                "-c",
                WAIT_THEN_CONNECT,
                s(&go),
                s(&report),
                &allowed.port().to_string(),
                &refused.port().to_string(),
            ],
        )
        .env("LOCKRUN_TEST_BUILD_ID", &other.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    if !bg.until_started(&w, || {
        std::fs::read_to_string(&report).is_ok_and(|r| r.starts_with("ready"))
    }) {
        return;
    }
    // It made its own parent and pins, and attached every program there.
    assert!(other.parent().is_dir(), "{}", other.parent().display());
    assert_eq!(
        other.links_to_parent(),
        net::parent_links(),
        "{}",
        other.dir().display()
    );
    let runs_map = aya::maps::MapInfo::from_pin(other.dir().join("RUNS"))
        .unwrap()
        .id();
    let program = aya::programs::ProgramInfo::from_pin(other.dir().join("connect4"))
        .unwrap()
        .id();

    // gc while it runs: the build is in use, nothing of it is touched.
    let out = gc(&w);
    assert!(
        out.contains(&format!(
            "kept build {}: runs are still in its parent cgroup",
            other.0
        )),
        "{out}"
    );
    assert!(other.parent().is_dir());
    assert_eq!(other.links_to_parent(), net::parent_links());
    // What a gc leaves when a run of that build made the parent again and
    // attached just before the gc moved the pins aside (and the gc was then
    // killed): the live run's links in a moved directory. The next gc
    // must not remove them (the run's hooks hang on them): it puts them back.
    let moved = other.dir().with_file_name(format!("{}-reaping-1", other.0));
    std::fs::rename(other.dir(), &moved).unwrap();
    let out = gc(&w);
    assert!(!out.contains(&format!("reaped build {}", other.0)), "{out}");
    assert!(other.dir().is_dir(), "the live run's pins were removed");
    assert!(!moved.exists(), "the moved pins were not put back");
    assert_eq!(other.links_to_parent(), net::parent_links());
    // And the run is still judged by its hooks, from outside: the allowed
    // endpoint gets the bytes, the other refuses with EPERM and gets nothing.
    std::fs::write(&go, "").unwrap();
    wait_for("the run's connections", || {
        std::fs::read_to_string(&report).is_ok_and(|r| r.lines().count() == 3)
    });
    let report = std::fs::read_to_string(&report).unwrap();
    let results: Vec<&str> = report.lines().skip(1).collect();
    assert_eq!(results[0], "ok", "{report}");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eperm("the other build's run, after gc", results[1]);
    assert_eq!(
        refused.received(),
        None,
        "the refused listener got a connection"
    );
    let st = bg.0.wait().unwrap();
    assert!(st.success(), "{st:?}");

    // Its run is over: gc removes the parent and every pin of that build.
    let out = gc(&w);
    assert!(
        out.contains(&format!(
            "reaped build {}: its parent cgroup and pinned programs",
            other.0
        )),
        "{out}"
    );
    assert!(!other.parent().exists(), "{}", other.parent().display());
    assert_eq!(other.pinned(), Vec::<String>::new());
    // The kernel freed them: with the last pin went the last reference
    // (freeing is deferred past an RCU grace period).
    wait_for("the other build's map and program to be freed", || {
        !aya::maps::loaded_maps()
            .flatten()
            .any(|m| m.id() == runs_map)
            && !aya::programs::loaded_programs()
                .flatten()
                .any(|p| p.id() == program)
    });

    // Control: this build's parent and pins were not touched, and a run of
    // this build is judged as before.
    let mine = lockrun::bpf::shared::shared_dir();
    assert!(mine.is_dir(), "{}", mine.display());
    assert!(lockrun::bpf::shared::build_parent().unwrap().is_dir());
    assert!(
        !out.contains(&format!("build {}", lockrun::bpf::shared::build_id())),
        "{out}"
    );
    let w2 = World::new(T).unwrap();
    let allowed2 = TcpSink::bind("127.0.0.1");
    let refused2 = TcpSink::bind("127.0.0.1");
    let o = w2
        .probe(
            &[allowed2.addr],
            &[
                &["tcp", "127.0.0.1", &allowed2.port().to_string()],
                &["tcp", "127.0.0.1", &refused2.port().to_string()],
            ],
        )
        .unwrap();
    assert_eq!(o.lines[0], "ok");
    assert_eq!(allowed2.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eperm("this build's run, after gc", &o.lines[1]);
    assert_eq!(refused2.received(), None);
}
