use serde_json::{json, Value};

use super::*;

const WRITES: &str =
    "writes only in the worktree, {tmp} and the writable paths; deny-read paths unreadable";
const TRUNCATE: &str = "no file outside the writable roots truncated";
const IOCTL: &str = "no ioctl on a device outside the writable roots but a terminal's";
const UNIX: &str = "pathname unix sockets only inside the worktree and {tmp}";
const RECORDED: &str = "every filesystem refusal recorded";

fn held(promise: &str, mechanism: &str) -> Value {
    json!({"promise": promise, "held_by": "(the doctor's sentence)", "mechanism": mechanism})
}

fn gap(promise: &str, name: &str) -> Value {
    json!({"promise": promise, "gap": name, "lacks": "(what the kernel lacks)"})
}

/// A results file as `run_suite` writes it: a whole, complete run of the
/// usual LSMs with `passed` tests passed, and the doctor's report.
fn run(kernel: &str, abi: u8, promises: &[Value], passed: u64) -> Value {
    json!({
        "kernel": kernel,
        "source": format!("/cache/debs/linux-image-{kernel}_all.deb"),
        "boot_seconds": 5.2,
        "test_args": [],
        "only": [],
        "except": [],
        "passed": passed,
        "failed": 0,
        "skipped": 0,
        "binaries": [{"name": "filesystem", "exit": 0, "seconds": 280.3}],
        "tests": {},
        "skips": [],
        "promises": {
            "release": kernel,
            "landlock_abi": abi,
            "checks": [],
            "promises": promises,
            "canary": null,
        },
        "lsm": "landlock,lockdown,yama,bpf",
        "complete": true,
        "timed_out": false,
    })
}

fn parsed(v: &Value) -> RunResults {
    serde_json::from_value(v.clone()).unwrap()
}

fn column(v: &Value) -> std::result::Result<Column, Unused> {
    Column::of(&parsed(v)).unwrap()
}

/// 6.1 (ABI 2): the supervisor, `nodev`, a gap; 6.12 (ABI 6): Landlock,
/// kernel audit, and a suite with failures.
fn old_and_new() -> (Value, Value) {
    let old = run(
        "6.1.0-57-amd64",
        2,
        &[
            held(WRITES, "landlock"),
            held(TRUNCATE, "supervisor"),
            held(IOCTL, "nodev_mounts"),
            held(UNIX, "supervisor_and_unix_guard"),
            gap(RECORDED, "filesystem_refusals_unseen"),
        ],
        399,
    );
    let mut new = run(
        "6.12.117+deb13-amd64",
        6,
        &[
            held(WRITES, "landlock"),
            held(TRUNCATE, "landlock"),
            held(IOCTL, "landlock"),
            held(UNIX, "supervisor_and_unix_hooks"),
            held(RECORDED, "syscall_audit"),
        ],
        396,
    );
    new["failed"] = 3.into();
    new["binaries"] = json!([{"name": "filesystem", "exit": 101, "seconds": 1.0}]);
    (old, new)
}

#[test]
fn a_row_per_promise_a_column_per_kernel_and_the_suite_under_it() {
    let (old, new) = old_and_new();
    // Given newest first: columns still go oldest series first.
    let columns = newest(vec![column(&new).unwrap(), column(&old).unwrap()]);
    assert_eq!(
        render(&columns),
        "\
| promise | 6.1 (ABI 2) | 6.12 (ABI 6) |
|---|---|---|
| writes only in the worktree, {tmp} and the writable paths; deny-read paths unreadable | Landlock (ABI 2) | Landlock (ABI 6) |
| no file outside the writable roots truncated | supervisor | Landlock (ABI 6) |
| no ioctl on a device outside the writable roots but a terminal's | `nodev` mounts | Landlock (ABI 6) |
| pathname unix sockets only inside the worktree and {tmp} | supervisor + unix guard | supervisor + cgroup unix hooks |
| every filesystem refusal recorded | GAP: `filesystem_refusals_unseen` | kernel audit records |
| suite under it | all 399 passed | 3 failed |
"
    );
}

#[test]
fn a_promise_one_kernel_does_not_tell_is_said_so_and_a_pipe_is_escaped() {
    let a = run(
        "6.16.12+deb13-amd64",
        7,
        &[held(WRITES, "landlock"), held("a | b", "supervisor")],
        1,
    );
    let b = run("6.18.15+deb13-amd64", 7, &[held(WRITES, "landlock")], 2);
    let table = render(&newest(vec![column(&a).unwrap(), column(&b).unwrap()]));
    assert!(
        table.contains("\n| a \\| b | supervisor | (not told) |\n"),
        "{table}"
    );
}

#[test]
fn the_newest_release_of_a_series_makes_its_column() {
    let older = run("6.1.0-9-amd64", 2, &[held(WRITES, "landlock")], 10);
    let newer = run("6.1.0-57-amd64", 2, &[held(WRITES, "landlock")], 20);
    for order in [[&older, &newer], [&newer, &older]] {
        let columns = newest(order.iter().map(|v| column(v).unwrap()).collect());
        assert_eq!(columns.len(), 1);
        assert_eq!(columns[0].release, "6.1.0-57-amd64");
        assert_eq!(columns[0].suite, Suite::AllPassed { passed: 20 });
    }
}

#[test]
fn runs_that_cannot_stand_for_their_kernel_make_no_column() {
    let base = run("6.12.117+deb13-amd64", 6, &[held(WRITES, "landlock")], 1);
    assert!(column(&base).is_ok());
    let with = |key: &str, value: Value| {
        let mut v = base.clone();
        v[key] = value;
        column(&v)
    };
    assert_eq!(
        with("lsm", "lockdown,yama,bpf".into()),
        Err(Unused::OtherLsm("lockdown,yama,bpf".into()))
    );
    assert_eq!(with("complete", false.into()), Err(Unused::Incomplete));
    assert_eq!(with("only", json!(["filesystem"])), Err(Unused::Partial));
    assert_eq!(with("except", json!(["audit"])), Err(Unused::Partial));
    assert_eq!(with("test_args", json!(["landlock"])), Err(Unused::Partial));
    assert_eq!(with("promises", Value::Null), Err(Unused::NoPromises));
    let mut v = base.clone();
    v.as_object_mut().unwrap().remove("promises");
    assert_eq!(column(&v), Err(Unused::NoPromises));
    let mut v = base.clone();
    v["promises"]["release"] = "6.18.15+deb13-amd64".into();
    assert_eq!(
        column(&v),
        Err(Unused::OtherRelease("6.18.15+deb13-amd64".into()))
    );
    let mut v = run("6.15.1", 7, &[held(WRITES, "landlock")], 1);
    assert_eq!(column(&v), Err(Unused::NotInMatrix));
    // A run from before `lsm` was recorded booted the usual LSMs.
    v = base.clone();
    v.as_object_mut().unwrap().remove("lsm");
    assert!(column(&v).is_ok());
}

#[test]
fn a_suite_that_failed_says_so() {
    let base = run("6.18.15+deb13-amd64", 7, &[held(WRITES, "landlock")], 40);
    let suite = |edit: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        edit(&mut v);
        column(&v).unwrap().suite
    };
    assert_eq!(suite(&|_| {}), Suite::AllPassed { passed: 40 });
    assert_eq!(
        suite(&|v| v["failed"] = 2.into()),
        Suite::Failed { failed: 2 }
    );
    // A binary that crashed, timed out or never ended, with no test failed.
    for exit in [json!(124), Value::Null] {
        assert_eq!(
            suite(&|v| v["binaries"] = json!([{"exit": 0}, {"exit": exit}])),
            Suite::BinariesFailed { binaries: 1 }
        );
    }
    assert_eq!(
        suite(&|v| v["skipped"] = 1.into()),
        Suite::Skipped {
            passed: 40,
            skipped: 1
        }
    );
    assert_eq!(Suite::Failed { failed: 2 }.words(), "2 failed");
    assert_eq!(
        Suite::BinariesFailed { binaries: 1 }.words(),
        "1 test binaries failed"
    );
    assert_eq!(
        Suite::Skipped {
            passed: 40,
            skipped: 1
        }
        .words(),
        "40 passed, 1 skipped"
    );
}

#[test]
fn each_mechanism_is_said_its_own_way_everywhere() {
    let all = [
        "landlock",
        "supervisor",
        "supervisor_and_unix_hooks",
        "supervisor_and_unix_guard",
        "nodev_mounts",
        "read_only_mounts",
        "syscall_audit",
    ];
    let words: Vec<String> = all
        .iter()
        .map(|m| {
            let m: Mechanism = serde_json::from_value(json!(m)).unwrap();
            Cell::Held(m).words(6)
        })
        .collect();
    for (i, w) in words.iter().enumerate() {
        assert!(!words[..i].contains(w), "{w} twice");
    }
    assert_eq!(Cell::NoLandlock.words(0), "no Landlock: no run");
}

#[test]
fn a_report_lockrun_does_not_make_is_refused() {
    let unknown = run("6.12.117+deb13-amd64", 6, &[held(WRITES, "magic")], 1);
    let err = serde_json::from_value::<RunResults>(unknown)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown variant `magic`"), "{err}");
    let both = json!({"promise": WRITES, "mechanism": "landlock", "gap": "truncate"});
    let both = run("6.12.117+deb13-amd64", 6, &[both], 1);
    let err = Column::of(&parsed(&both)).unwrap_err().to_string();
    assert!(err.contains("not exactly one of"), "{err}");
}

#[test]
fn the_table_goes_between_the_markers_and_a_check_sees_a_stale_one() {
    let readme = format!("# x\n\n## Kernels\n\n{BEGIN}\nold line\n{END}\n\nafter\n");
    let table = "| a |\n|---|\n| b |\n";
    let written = with_table(&readme, table).unwrap();
    assert_eq!(
        written,
        format!("# x\n\n## Kernels\n\n{BEGIN}\n| a |\n|---|\n| b |\n{END}\n\nafter\n")
    );
    assert_eq!(with_table(&written, table).unwrap(), written);
    assert_eq!(
        difference(cut(&readme).unwrap().1, cut(&written).unwrap().1),
        "- old line\n+ | a |\n+ |---|\n+ | b |\n"
    );
    assert_eq!(difference(table, table), "");
    assert_eq!(
        difference("| a |\n| b |\n", "| a |\n| c |\n"),
        "- | b |\n+ | c |\n"
    );
    assert!(with_table("no markers", table).is_err());
    assert!(with_table(&format!("{END} {BEGIN}"), table).is_err());
}
