//! The suggestions and the grouping, case by case.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};

use super::*;
use crate::audit::{AuditLoss, Destination, Direction, FsEvent, KernelNetEvent, ProxyEvent};
use crate::policy::Policy;

#[test]
fn memory_kills_suggest_a_higher_limit_only_where_the_run_reached_its_own() {
    let at = memory_limit_refusal(64 << 20, 1, Some(63 << 20), RanOut::AtTheRunsLimit);
    assert!(
        matches!(&at.suggestion, Suggestion::Allow { policy, .. } if policy == "[run]\nmax_memory = \"128MiB\""),
        "{:?}",
        at.suggestion
    );
    assert_eq!(at.target, "the run's memory limit of 64 MiB");
    let above = memory_limit_refusal(8 << 30, 3, Some(5 << 30), RanOut::AboveTheRun);
    assert_eq!(above.target, "memory run out above the run");
    assert_eq!(above.count, 3);
    assert!(
        above
            .detail
            .ends_with("the run below its own limit of 8 GiB; the run's peak was 5 GiB"),
        "{}",
        above.detail
    );
    let Suggestion::Explain { reason } = &above.suggestion else {
        panic!("{:?}", above.suggestion);
    };
    assert!(
        reason.contains("a higher max_memory would not have helped"),
        "{reason}"
    );
}

/// Forks refused at the run's limit get the limit doubled; refused
/// above the run, no line: a higher limit would not help.
#[test]
fn refused_forks_suggest_a_higher_limit_only_where_the_run_reached_its_own() {
    let at = task_limit_refusal(16, 1, RanOut::AtTheRunsLimit);
    assert!(
        matches!(&at.suggestion, Suggestion::Allow { policy, .. } if policy == "[run]\nmax_tasks = 32"),
        "{:?}",
        at.suggestion
    );
    assert_eq!(at.target, "the run's limit of 16 tasks");
    let above = task_limit_refusal(4096, 7, RanOut::AboveTheRun);
    assert_eq!(
        (above.target.as_str(), above.count),
        ("tasks run out above the run", 7)
    );
    assert!(
        above
            .detail
            .ends_with("the run below its own limit of 4096 tasks"),
        "{}",
        above.detail
    );
    let Suggestion::Explain { reason } = &above.suggestion else {
        panic!("{:?}", above.suggestion);
    };
    assert!(
        reason.contains("a higher max_tasks would not have helped"),
        "{reason}"
    );
}

fn kernel(dest: Destination, protocol: &str) -> KernelNetEvent {
    KernelNetEvent {
        pid: 7,
        tgid: 7,
        comm: "probe".into(),
        cgroup_id: 1,
        hook: "connect4".into(),
        family: "inet".into(),
        protocol: protocol.into(),
        destination: dest,
        target_absent: false,
        direction: Direction::Outbound,
        local_port: 0,
    }
}

fn inet(s: &str) -> Destination {
    Destination::Inet(s.parse().unwrap())
}

fn fs(path: Option<&str>, access: &[&str]) -> FsEvent {
    FsEvent {
        pid: 7,
        comm: "probe".into(),
        path: path.map(Into::into),
        access: access.iter().map(|s| (*s).to_owned()).collect(),
        raw: "type=LANDLOCK_ACCESS".into(),
        other_name_of: None,
        errno: None,
    }
}

fn ctx() -> FsContext {
    let home = PathBuf::from("/home/u");
    let mut deny: Vec<(PathBuf, DenySource)> = Policy::secret_floor(&home)
        .into_iter()
        .map(|p| (p, DenySource::SecretFloor))
        .collect();

    deny.push(("/srv/private".into(), DenySource::Policy));
    deny.push(("/var/lib/lockrun".into(), DenySource::StateDir));
    FsContext {
        home,
        deny,
        state_dirs: vec!["/var/lib/lockrun".into()],
        narrowed: Vec::new(),
    }
}

fn dirs(p: &Path) -> bool {
    ["/home/u/.cache/mytool", "/opt/data"]
        .iter()
        .any(|d| p == Path::new(d))
}

pub(crate) fn allow(s: &Suggestion) -> (&str, Option<&str>) {
    match s {
        Suggestion::Allow { policy, flag, .. } => (policy.as_str(), flag.as_deref()),
        other => panic!("expected Allow, got {other:?}"),
    }
}

pub(crate) fn reason(s: &Suggestion) -> &str {
    match s {
        Suggestion::Warn { reason }
        | Suggestion::Never { reason }
        | Suggestion::Explain { reason }
        | Suggestion::Harmless { reason } => reason,
        Suggestion::Allow { .. } => panic!("expected no Allow, got {s:?}"),
    }
}

#[test]
fn a_missing_unix_socket_is_harmless() {
    let mut ev = kernel(Destination::Unix("/var/run/nscd/socket".into()), "0");
    ev.target_absent = true;
    assert!(matches!(suggest_kernel(&ev), Suggestion::Harmless { .. }));
}

#[test]
fn kernel_loopback_suggests_local() {
    let s = suggest_kernel(&kernel(inet("127.0.0.1:5432"), "tcp"));
    assert_eq!(
        allow(&s),
        (
            "[network]\nlocal = [\"127.0.0.1:5432\"]",
            Some("--allow-local 127.0.0.1:5432")
        )
    );
    let v6 = suggest_kernel(&kernel(inet("[::1]:6379"), "tcp"));
    assert_eq!(allow(&v6).1, Some("--allow-local [::1]:6379"));
    let mapped = suggest_kernel(&kernel(inet("[::ffff:127.0.0.1]:8080"), "tcp"));
    assert_eq!(allow(&mapped).1, Some("--allow-local 127.0.0.1:8080"));
}

#[test]
fn inbound_over_loopback_suggests_expose_and_from_beyond_never() {
    let inbound = |peer: &str| KernelNetEvent {
        hook: "ingress".into(),
        direction: Direction::Inbound,
        local_port: 3000,
        ..kernel(inet(peer), "tcp")
    };
    for peer in ["127.0.0.1:40000", "[::1]:40000"] {
        let s = suggest_kernel(&inbound(peer));
        assert_eq!(
            allow(&s),
            ("[network]\nexpose = [3000]", Some("--expose 3000")),
            "{peer}"
        );
    }
    let s = suggest_kernel(&inbound("10.1.2.3:40000"));
    assert!(matches!(s, Suggestion::Never { .. }), "{s:?}");
}

#[test]
fn kernel_local_dns_is_not_suggested() {
    let s = suggest_kernel(&kernel(inet("127.0.0.53:53"), "udp"));
    assert!(matches!(s, Suggestion::Warn { .. }), "{s:?}");
}

#[test]
fn kernel_remote_is_never_allowed_directly() {
    let s = suggest_kernel(&kernel(inet("93.184.216.34:443"), "tcp"));
    assert!(matches!(s, Suggestion::Never { .. }), "{s:?}");
    assert!(reason(&s).contains("HTTPS_PROXY"));
    let udp = suggest_kernel(&kernel(inet("8.8.8.8:53"), "udp"));
    assert!(reason(&udp).contains("UDP"), "{udp:?}");
    let private = suggest_kernel(&kernel(inet("10.0.0.1:22"), "tcp"));
    assert!(matches!(private, Suggestion::Never { .. }), "{private:?}");
}

#[test]
fn kernel_unix_socket_explains() {
    let s = suggest_kernel(&kernel(Destination::Unix("/run/docker.sock".into()), "0"));
    assert!(matches!(s, Suggestion::Explain { .. }), "{s:?}");
    assert!(reason(&s).contains("worktree"));
}

#[test]
fn kernel_unspecified_points_to_loopback() {
    let s = suggest_kernel(&kernel(inet("0.0.0.0:8000"), "tcp"));
    assert!(reason(&s).contains("127.0.0.1:8000"), "{s:?}");
}

#[test]
fn a_read_by_a_denied_files_other_name_is_explained_not_allowed() {
    let mut ev = fs(Some("/backup/root/.ssh/id"), &["fs.read_file"]);
    ev.other_name_of = Some("/home/u/.ssh/id".into());
    let s = suggest_fs(&ev, &ctx(), &dirs);
    assert!(matches!(s, Suggestion::Explain { .. }), "{s:?}");
    assert!(
        reason(&s)
            .contains("/backup/root/.ssh/id is another name (a hard link) of /home/u/.ssh/id"),
        "{s:?}"
    );
}

#[test]
fn fs_write_suggests_the_nearest_directory() {
    let file = suggest_fs(
        &fs(Some("/home/u/.cache/mytool/http/x"), &["fs.write_file"]),
        &ctx(),
        &dirs,
    );
    assert_eq!(
        allow(&file),
        (
            "[filesystem]\nwritable = [\"{home}/.cache/mytool/http\"]",
            Some("--allow-write /home/u/.cache/mytool/http")
        )
    );
    let dir = suggest_fs(
        &fs(Some("/home/u/.cache/mytool"), &["fs.make_reg"]),
        &ctx(),
        &dirs,
    );
    assert_eq!(allow(&dir).1, Some("--allow-write /home/u/.cache/mytool"));
    // the directory is named by the right, even when it is gone by now
    let gone = suggest_fs(
        &fs(Some("/home/u/.cache/gone"), &["fs.make_dir"]),
        &ctx(),
        &dirs,
    );
    assert_eq!(allow(&gone).1, Some("--allow-write /home/u/.cache/gone"));
    let outside = suggest_fs(
        &fs(Some("/opt/data/out.csv"), &["fs.truncate"]),
        &ctx(),
        &dirs,
    );
    assert_eq!(
        allow(&outside).0,
        "[filesystem]\nwritable = [\"/opt/data\"]"
    );
}

#[test]
fn fs_write_under_secret_or_state_warns() {
    for p in [
        "/home/u/.ssh/authorized_keys",
        "/var/lib/lockrun/runs/other/tmp/x",
        "/srv/private/x",
    ] {
        let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
        assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
    }
}

#[test]
fn fs_write_to_broad_dirs_warns() {
    for p in ["/home/u/.bashrc", "/etc/hosts", "/tmp/x"] {
        let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
        assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
    }
    // A file in it names the file and its dir; a file made in it names
    // the dir alone (Landlock's record has no name for it).
    let file = suggest_fs(&fs(Some("/etc/hosts"), &["fs.write_file"]), &ctx(), &dirs);
    let file = reason(&file);
    assert!(
        file.starts_with(
            "the nearest directory of /etc/hosts is /etc; making it writable would open far more"
        ),
        "{file}"
    );
    let made = suggest_fs(&fs(Some("/etc"), &["fs.make_reg"]), &ctx(), &dirs);
    let made = reason(&made);
    assert!(
        made.starts_with("making /etc writable would open far more than this needs."),
        "{made}"
    );
    assert!(
        made.contains("($TMPDIR; `{tmp}` in a policy's [env])"),
        "{made}"
    );
}

#[test]
fn fs_write_in_shared_memory_is_not_suggested_and_says_why() {
    // A named semaphore is made in /dev/shm (make_reg, on the dir), its
    // data written to a file there; both name the shared dir.
    for (p, access) in [
        ("/dev/shm", "fs.make_reg"),
        ("/dev/shm/sem.mp-1", "fs.write_file"),
        ("/run/shm/x", "fs.write_file"),
    ] {
        let s = suggest_fs(&fs(Some(p), &[access]), &ctx(), &dirs);
        assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
        let r = reason(&s);
        assert!(
            r.contains("is shared by every process on this machine")
                && r.contains("Python multiprocessing")
                && r.contains("--allow-write /"),
            "{p}: {r}"
        );
    }
}

#[test]
fn fs_write_where_code_runs_later_warns_and_says_what_instead() {
    for (p, place, instead) in [
        (
            "/home/u/.cargo/.package-cache",
            "/home/u/.cargo",
            Some("CARGO_HOME"),
        ),
        (
            "/home/u/.npm/_cacache/index-v5/x",
            "/home/u/.npm",
            Some("npm_config_cache"),
        ),
        (
            "/home/u/.cache/pip/http/x",
            "/home/u/.cache/pip",
            Some("PIP_CACHE_DIR"),
        ),
        (
            "/home/u/.config/git/config",
            "/home/u/.config/git",
            Some("GIT_CONFIG_GLOBAL"),
        ),
        ("/home/u/.local/bin/git", "/home/u/.local/bin", None),
        ("/usr/local/bin/cargo", "/usr", None),
    ] {
        let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
        let Suggestion::Warn { reason } = &s else {
            panic!("{p}: expected Warn, got {s:?}");
        };
        assert!(
            reason.contains(&format!("would reach {place} (")),
            "{p}: {reason}"
        );
        assert!(reason.contains("outside the sandbox"), "{p}: {reason}");
        if let Some(i) = instead {
            assert!(reason.contains(i), "{p}: {reason}");
        }
    }
}

#[test]
fn fs_make_in_a_narrowed_dir_cannot_be_allowed_and_a_write_beneath_can() {
    let mut c = ctx();
    c.narrowed.push(Narrowed {
        dir: "/work/repo".into(),
        denied: vec!["/work/repo/.env".into()],
    });
    for access in ["fs.make_reg", "fs.remove_file", "fs.refer"] {
        let s = suggest_fs(&fs(Some("/work/repo"), &[access]), &c, &dirs);
        assert!(matches!(s, Suggestion::Never { .. }), "{access}: {s:?}");
        assert!(
            reason(&s).contains("holds the denied /work/repo/.env"),
            "{s:?}"
        );
    }
    // Elsewhere, and without the run's account, the usual suggestion.
    let other = suggest_fs(&fs(Some("/work/other"), &["fs.make_reg"]), &c, &dirs);
    assert!(matches!(other, Suggestion::Allow { .. }), "{other:?}");
    let unlogged = suggest_fs(&fs(Some("/work/repo"), &["fs.make_reg"]), &ctx(), &dirs);
    assert!(matches!(unlogged, Suggestion::Allow { .. }), "{unlogged:?}");
}

#[test]
fn a_link_out_of_a_read_only_dir_says_what_was_refused() {
    let s = suggest_fs(
        &fs(
            Some("/work/main/.git/objects/b1"),
            &["fs.write_file", "fs.make_reg", "fs.refer", "fs.truncate"],
        ),
        &ctx(),
        &dirs,
    );
    let Suggestion::Allow { note, flag, .. } = &s else {
        panic!("{s:?}")
    };
    assert_eq!(
        flag.as_deref(),
        Some("--allow-write /work/main/.git/objects/b1")
    );
    let note = note.as_deref().unwrap_or_default();
    assert!(
        note.contains("hard-linked or renamed a file from /work/main/.git/objects/b1")
            && note.contains("EXDEV"),
        "{note}"
    );
    // A plain write carries no such note.
    let plain = suggest_fs(&fs(Some("/srv/data/f"), &["fs.write_file"]), &ctx(), &dirs);
    assert!(
        matches!(plain, Suggestion::Allow { note: None, .. }),
        "{plain:?}"
    );
}

#[test]
fn fs_read_names_the_deny_entry() {
    let secret = suggest_fs(
        &fs(Some("/home/u/.ssh/id_ed25519"), &["fs.read_file"]),
        &ctx(),
        &dirs,
    );
    assert!(matches!(secret, Suggestion::Never { .. }), "{secret:?}");
    assert!(reason(&secret).contains("/home/u/.ssh"), "{secret:?}");
    let nested = suggest_fs(
        &fs(Some("/home/u/.config/gcloud/x"), &["fs.read_file"]),
        &ctx(),
        &dirs,
    );
    assert!(
        reason(&nested).contains("/home/u/.config/gcloud"),
        "{nested:?}"
    );
    let pol = suggest_fs(&fs(Some("/srv/private/a"), &["fs.read_dir"]), &ctx(), &dirs);
    assert!(matches!(pol, Suggestion::Explain { .. }), "{pol:?}");
    assert!(reason(&pol).contains("deny_read") && reason(&pol).contains("/srv/private"));
    let unknown = suggest_fs(&fs(Some("/srv/other"), &["fs.read_file"]), &ctx(), &dirs);
    assert!(reason(&unknown).contains("--deny-read"), "{unknown:?}");
    let none = suggest_fs(&fs(None, &["fs.write_file"]), &ctx(), &dirs);
    assert!(reason(&none).contains("raw record"), "{none:?}");
}

/// Lines that name their run go to it, wherever they lie among other
/// runs' lines (runs sharing a log write at once); lines that name none
/// follow the last `run_start` that names none.
#[test]
fn lines_that_name_their_run_are_grouped_by_it() {
    let line = |run: Option<&str>, e: Event| Record {
        ts_ms: 0,
        event: e,
        run: run.map(str::to_owned),
        seq: None,
    };
    let start = |id: &str| Event::RunStart {
        run_id: id.into(),
        command: vec![],
        policy: vec![],
        worktree: "/w".into(),
        seal_key: None,
    };
    let refused = || Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"));
    let records = vec![
        line(Some("a"), start("a")),
        line(Some("b"), start("b")),
        line(Some("a"), refused()),
        line(None, start("legacy")),
        line(Some("b"), refused()),
        line(None, refused()),
        line(Some("a"), refused()),
    ];
    let runs = summarize(&records, |_, _| ctx(), &dirs);
    let counts: Vec<(Option<&str>, u64)> = runs
        .iter()
        .map(|r| {
            (
                r.run_id.as_deref(),
                r.refused.get(&Layer::KernelNetwork).copied().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        counts,
        vec![(Some("a"), 2), (Some("b"), 1), (Some("legacy"), 1)]
    );
    assert_eq!(runs[2].seal, SealStatus::Unsealed);
    assert_ne!(runs[0].seal, SealStatus::Unsealed);
}

#[test]
fn runs_are_split_and_grouped() {
    let line = |e: Event| Record {
        ts_ms: 0,
        event: e,
        run: None,
        seq: None,
    };
    let records = vec![
        line(Event::RunStart {
            run_id: "r1".into(),
            command: vec!["psql".into()],
            policy: vec!["preset:default".into()],
            worktree: "/w".into(),
            seal_key: None,
        }),
        line(Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"))),
        line(Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"))),
        line(Event::KernelEventsLost { count: 2 }),
        line(Event::AuditRecordsLost(AuditLoss::Dropped {
            records: 5,
            backlog_limit: 64,
            rate_limit: 0,
        })),
        line(Event::InboundNotItemized {
            count: 9,
            per_cpu: 32,
        }),
        line(Event::RunEnd {
            run_id: "r1".into(),
            exit: 2,
            refused: BTreeMap::new(),
            unwritten: 0,
        }),
        line(Event::RunStart {
            run_id: "r2".into(),
            command: vec![],
            policy: vec![],
            worktree: "/w".into(),
            seal_key: None,
        }),
    ];
    let runs = summarize(&records, |_, _| ctx(), &dirs);
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].refusals.len(), 1);
    assert_eq!(runs[0].refusals[0].count, 2);
    assert_eq!(runs[0].refused.get(&Layer::KernelNetwork), Some(&13));
    assert_eq!(runs[0].inbound_not_itemized, 9);
    assert_eq!(runs[0].by_process.get("probe"), Some(&2));
    assert_eq!(runs[0].exit, Some(2));
    assert!(runs[1].refusals.is_empty());
    let text = render_text(&runs);
    assert!(text.contains("--allow-local 127.0.0.1:5432"), "{text}");
    assert!(text.contains("nothing refused"), "{text}");
    // A short account is said so among the run's notices, not counted.
    assert!(
        text.contains("  notice:   filesystem: the kernel dropped 5 audit records on this machine while the run went on (more were waiting than its backlog limit of 64)"),
        "{text}"
    );
    assert!(
        text.contains("(9 packets from outside dropped and counted, not itemized: only the first 32 on each CPU are)"),
        "{text}"
    );
}

/// A refused listing of a dir above a deny-read entry (what lockrun did
/// before it granted those dirs the listing right) is explained as such,
/// not as a refusal of unknown cause; a listing refused elsewhere still is
/// one, and a read in that dir is not taken for a listing.
#[test]
fn a_refused_listing_above_a_denied_path_is_told_as_lockruns_own() {
    for (dir, entry, source) in [
        ("/", None, ""),
        ("/home/u", None, "a secret lockrun always denies"),
        ("/srv", Some("/srv/private"), "the run's policy"),
        ("/var/lib", Some("/var/lib/lockrun"), "lockrun's state dir"),
    ] {
        let s = suggest_fs(&fs(Some(dir), &["fs.read_dir"]), &ctx(), &dirs);
        let r = reason(&s);
        assert!(matches!(s, Suggestion::Explain { .. }), "{s:?}");
        assert!(
            r.starts_with(&format!("{dir} lies above the deny-read entry ")) && r.contains(source),
            "{dir}: {r}"
        );
        assert!(!r.contains("--deny-read flag"), "{r}");
        if let Some(entry) = entry {
            assert!(r.contains(&format!("entry {entry} (")), "{dir}: {r}");
        }
    }
    let elsewhere = suggest_fs(&fs(Some("/opt/data"), &["fs.read_dir"]), &ctx(), &dirs);
    assert!(reason(&elsewhere).contains("not under any deny-read entry"));
    let read = suggest_fs(&fs(Some("/srv"), &["fs.read_file"]), &ctx(), &dirs);
    assert!(reason(&read).contains("not under any deny-read entry"));
}

fn inside(method: &str, verdict: ProxyVerdict, reason: &str) -> ProxyEvent {
    ProxyEvent {
        method: method.into(),
        host: "api.github.com".into(),
        port: 443,
        dialed: None,
        allowed: false,
        reason: reason.into(),
        status: 403,
        verdict,
        via: None,
        basis: None,
    }
}

/// A request no rule allowed: the rule that would, its ids as `*`, under
/// the pattern the rules are written for; an ambiguous path gets none, and
/// a secret sent elsewhere is never allowed.
#[test]
fn a_refused_request_suggests_a_rule_and_a_secret_elsewhere_never() {
    let ev = inside(
        "PATCH",
        ProxyVerdict::RuleRefused,
        "PATCH /repos/o/r/issues/1234: no rule of api.github.com allows it",
    );
    let s = suggest_proxy(&ev);
    assert_eq!(
        allow(&s),
        (
            "[network.requests.\"api.github.com\"]\nallow = [\"PATCH /repos/o/r/issues/*\"]",
            None
        )
    );
    let ev = inside(
        "GET",
        ProxyVerdict::RuleRefused,
        "GET /a/../b: the path has a `.` or `..` segment, which the rules of api.github.com cannot judge",
    );
    assert!(matches!(suggest_proxy(&ev), Suggestion::Explain { .. }));
    let ev = inside(
        "POST",
        ProxyVerdict::SecretElsewhere,
        "the placeholder of secret GITHUB_TOKEN in the request's header authorization to gist.example.com, which GITHUB_TOKEN is not bound to",
    );
    let s = suggest_proxy(&ev);
    assert!(matches!(s, Suggestion::Never { .. }), "{s:?}");
    assert!(reason(&s).contains("GITHUB_TOKEN"));
}

/// A refusal by a read-only mount says so beside the access, in the text
/// `lockrun audit` prints.
#[test]
fn a_refusal_by_a_read_only_mount_says_erofs() {
    let line = |e: Event| Record {
        ts_ms: 0,
        event: e,
        run: None,
        seq: None,
    };
    let mut made = fs(Some("/work/repo/ro"), &["fs.make_dir"]);
    made.errno = Some(crate::audit::FsErrno::ReadOnly);
    let records = vec![
        line(Event::RunStart {
            run_id: "r1".into(),
            command: vec![],
            policy: vec![],
            worktree: "/work/repo".into(),
            seal_key: None,
        }),
        line(Event::Filesystem(made)),
        line(Event::Filesystem(fs(Some("/etc"), &["fs.make_dir"]))),
    ];
    let runs = summarize(&records, |_, _| ctx(), &dirs);
    let text = render_text(&runs);
    assert!(
        text.contains("make a dir in (fs.make_dir; EROFS: read-only (outside the writable roots"),
        "{text}"
    );
    // Landlock's own says nothing of it.
    assert_eq!(text.matches("EROFS").count(), 1, "{text}");
}
