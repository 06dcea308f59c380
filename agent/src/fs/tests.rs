use super::mounts::unescape_octal;
use super::*;

/// Of the device files a run may open in `/dev`, only random and
/// urandom lack the device ioctl right, and their ioctls do nothing
/// without `CAP_SYS_ADMIN` but report the entropy count: where the
/// kernel has no such right (ABI < 5), lockrun keeps device files to
/// `/dev` ([`crate::kernel::Kernel::devices_only_in_dev`]) and grants
/// nothing more. A device added to [`DEV_READABLE`] must be judged
/// there first.
#[test]
fn the_devices_readable_in_dev_take_ioctls_only_where_granted() {
    use std::os::unix::fs::FileTypeExt as _;
    let mut devices = 0;
    for name in DEV_READABLE {
        // Not through a symlink: stdin, stdout, stderr are the
        // caller's stdio, granted as such.
        let Ok(m) = std::fs::symlink_metadata(Path::new("/dev").join(name)) else {
            continue;
        };
        let ft = m.file_type();
        if !(ft.is_char_device() || ft.is_block_device()) {
            continue;
        }
        devices += 1;
        assert!(
            DEVICES.contains(&name)
                || TERMINALS.contains(&name)
                || ["random", "urandom"].contains(&name),
            "/dev/{name} is readable in a run, a device, and granted no ioctl: judge what its \
             ioctls do without Landlock's device ioctl right (crate::kernel::Kernel::devices_only_in_dev)"
        );
    }
    assert!(
        devices >= 5,
        "only {devices} devices of DEV_READABLE found in /dev"
    );
}

#[test]
fn strictly_beneath_is_by_component() {
    let b = |p: &str, d: &str| strictly_beneath(Path::new(p), Path::new(d));
    assert!(b("/root/.ssh", "/root"));
    assert!(b("/root/.ssh", "/"));
    assert!(b("/a/b/c", "/a/b/"));
    assert!(!b("/root", "/root"));
    assert!(!b("/rootkit/x", "/root"));
    assert!(!b("/root", "/root/.ssh"));
    assert!(!b("/", "/"));
}

/// A dir of at least [`CROWDED_ENTRIES`] entries is found once, even
/// when listed twice, naming each of its entries that leads to a denied
/// path once (`a` and `a-b` sort apart among the denied paths: `a`,
/// `a-b/x`, `a/y`); a dir of fewer entries (`few`) is not.
#[test]
fn crowded_dirs_name_the_entries_that_lead_to_denied_paths() {
    let scratch = crate::testing::Scratch::new("fs-crowded");
    let dir = scratch.path().to_path_buf();
    let many = dir.join("many");
    for d in ["a", "a-b", "few/v"] {
        std::fs::create_dir_all(many.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..CROWDED_ENTRIES - 3 {
        std::fs::write(many.join(format!("f{i}")), b"").unwrap_or_else(|e| panic!("{e}"));
    }
    let many = many.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let denied: BTreeSet<PathBuf> = [
        many.join("a"),
        many.join("a-b/x"),
        many.join("a/y"),
        many.join("few/v"),
    ]
    .into_iter()
    .collect();
    // Listed twice, as a writable root over a denied path is: found once.
    let mut plan = Plan::default();
    for grant in [Grant::Read, Grant::ReadWrite] {
        plan.grant_except(&many, grant, &denied)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let got: Vec<(PathBuf, usize, Vec<PathBuf>)> = plan
        .take_crowded()
        .into_iter()
        .map(|c| (c.dir, c.entries, c.toward))
        .collect();
    assert_eq!(
        got,
        [(
            many.clone(),
            CROWDED_ENTRIES,
            vec![many.join("a"), many.join("a-b"), many.join("few")]
        )]
    );
}

/// A run begins its walk before its temp dir exists and finishes it
/// once it does: the rules, roots and denials are those of the walk
/// made at once, as `policy show` makes it (a state dir with a
/// writable agent dir beneath it and a denied path in the worktree,
/// so that both the read walk and a writable root are split).
#[test]
fn a_walk_begun_before_the_temp_dir_exists_makes_the_rules_of_one_made_after() {
    let scratch = crate::testing::Scratch::new("fs-begun");
    let base = scratch.path().to_path_buf();
    let (wt, state) = (base.join("wt"), base.join("state"));
    for d in [wt.join("secret"), wt.join("src"), state.join("agents/a")] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    let policy = crate::policy::load(
        None,
        &crate::policy::Overrides {
            worktree: Some(wt.clone()),
            state_dir: Some(state.clone()),
            allow_write: vec![state.join("agents/a")],
            deny_read: vec![wt.join("secret")],
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let runs = state.join("runs");
    std::fs::create_dir_all(&runs).unwrap_or_else(|e| panic!("{e}"));
    let runs = runs.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let tmp = runs.join("r1").join("tmp");

    let begun = FsSandbox::begin(&policy, &tmp, &runs).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("{e}"));
    let split = begun.finish(&policy).unwrap_or_else(|e| panic!("{e}"));
    let whole = FsSandbox::prepare(&policy, &tmp, &runs).unwrap_or_else(|e| panic!("{e}"));

    // The two walks of `/` are apart in time: what other tests (or the
    // machine) make and remove in /tmp meanwhile is not this test's.
    let base = base.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let ours = |g: &[(PathBuf, Grant)]| -> Vec<(PathBuf, Grant)> {
        g.iter()
            .filter(|(p, _)| p.parent() != Some(Path::new("/tmp")) || p.starts_with(&base))
            .cloned()
            .collect()
    };
    assert_eq!(ours(split.grants()), ours(whole.grants()));
    assert_eq!(split.writable_roots(), whole.writable_roots());
    assert_eq!(split.denied(), whole.denied());
    assert_eq!(split.denied_found(), whole.denied_found());
    assert_eq!(split.own_filesystems(), whole.own_filesystems());
    assert_eq!(split.narrowed(), whole.narrowed());
    // Not vacuous: the temp dir is granted, and the worktree was
    // listed around its secret by both the read walk and its own grant.
    let src = wt
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("src");
    for (path, grant) in [
        (&tmp, Grant::ReadWrite),
        (&src, Grant::Read),
        (&src, Grant::ReadWrite),
    ] {
        assert!(
            split.grants().contains(&(path.clone(), grant)),
            "{path:?} {grant:?}"
        );
    }
    assert_eq!(split.narrowed().len(), 1, "{:?}", split.narrowed());
}

/// The walk's grants from `root` down, around `denied`, for a run that
/// has the filesystems `own` of its own.
fn walked(root: &str, denied: &[&str], own: Vec<OwnFs>) -> Vec<(PathBuf, Grant)> {
    let mut plan = Plan {
        own,
        ..Plan::default()
    };
    let denied: BTreeSet<PathBuf> = denied.iter().map(PathBuf::from).collect();
    plan.grant_except(Path::new(root), Grant::Read, &denied)
        .unwrap_or_else(|e| panic!("{e}"));
    plan.grants
}

/// `/dev`'s grants: with the run's own shared memory and terminals,
/// the machine's get no rule; without, `/dev/pts` is listable only (no
/// other process's terminal can be opened for reading), `/dev/shm`
/// readable as before.
#[test]
fn the_machines_terminals_are_never_readable_and_hidden_when_the_run_has_its_own() {
    let grants = |own| walked("/dev", &[], own);
    let of = |g: &[(PathBuf, Grant)], p: &str| {
        g.iter().find(|(q, _)| q == Path::new(p)).map(|(_, g)| *g)
    };
    let machine = grants(Vec::new());
    assert_eq!(of(&machine, "/dev/pts"), Some(Grant::List));
    assert_eq!(of(&machine, "/dev/shm"), Some(Grant::Read));
    assert_eq!(of(&machine, "/dev/null"), Some(Grant::Read));
    let own = grants(OwnFs::ALL.to_vec());
    assert_eq!(of(&own, "/dev/pts"), None);
    assert_eq!(of(&own, "/dev/shm"), None);
    assert_eq!(of(&own, "/dev/null"), Some(Grant::Read));
}

/// The machine's `/proc` gets no rule when the run has its own (whose
/// rule the child adds on the new mount), and its usual one otherwise.
#[test]
fn the_machines_processes_get_no_rule_when_the_run_has_its_own() {
    let grants = |own| walked("/", &["/root/.ssh"], own);
    let proc_rule = |g: &[(PathBuf, Grant)]| g.iter().any(|(p, _)| p == Path::new("/proc"));
    assert!(proc_rule(&grants(Vec::new())));
    let own = grants(OwnFs::ALL.to_vec());
    assert!(!proc_rule(&own));
    assert!(own.iter().any(|(p, _)| p == Path::new("/etc")));
}

#[test]
fn a_secret_near_a_writable_root_or_beneath_another_is_not_masked() {
    let dir = |p: &str| Mask::Dir(PathBuf::from(p));
    let file = |p: &str| Mask::File(PathBuf::from(p));
    let found = vec![
        dir("/etc/ssl/private"),
        dir("/var/lib/docker/volumes"),
        dir("/var/lib/cloud"),
        file("/etc/shadow"),
        dir("/var/lib/docker"),
        file("/var/lib/cloud/instance/user-data.txt"),
        dir("/var/lib/docker"),
    ];
    let writable = [
        PathBuf::from("/var/lib/cloud/instance/wt"),
        PathBuf::from("/etc"),
    ];
    // /etc/ssl/private and /etc/shadow lie beneath a writable /etc,
    // /var/lib/cloud above a worktree, docker's volumes beneath docker
    // (listed before it), docker twice; the user data beside the
    // worktree is masked on its own.
    assert_eq!(
        masks(found, &writable),
        [
            dir("/var/lib/docker"),
            file("/var/lib/cloud/instance/user-data.txt")
        ]
    );
    assert!(MACHINE_SECRETS
        .iter()
        .all(|s| s.path.starts_with('/') && !s.holds.is_empty()));
}

#[test]
fn hidden_mounts_are_the_outermost_mounts_of_the_hidden_types() {
    let mountinfo = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,nosuid - sysfs sysfs rw
30 23 0:7 / /sys/kernel/debug rw,nosuid - debugfs debugfs rw
31 30 0:12 / /sys/kernel/debug/tracing rw - tracefs tracefs rw
32 23 0:12 / /sys/kernel/tracing rw - tracefs tracefs rw
33 27 0:12 / /srv/my\\040trace rw - tracefs tracefs rw
34 27 0:40 / /srv/tracefs rw - tmpfs tracefs rw
35 23 0:30 / /sys/fs/bpf rw - bpf bpf rw,mode=700
36 23 0:8 / /sys/kernel/security rw - securityfs securityfs rw
37 23 0:31 / /sys/fs/pstore rw - pstore pstore rw
";
    assert_eq!(
        hidden_mounts(mountinfo),
        [
            PathBuf::from("/srv/my trace"),
            PathBuf::from("/sys/kernel/debug"),
            PathBuf::from("/sys/kernel/tracing"),
            PathBuf::from("/sys/fs/bpf"),
            PathBuf::from("/sys/kernel/security"),
            PathBuf::from("/sys/fs/pstore"),
        ]
    );
    assert!(hidden_mounts("22 27 0:21 / /proc rw - proc proc rw\n").is_empty());
    assert_eq!(unescape_octal("a\\134b\\011\\9"), b"a\\b\t\\9");
}

#[test]
fn narrowed_dirs_are_those_the_walk_lists_in_writable_roots() {
    let scratch = crate::testing::Scratch::new("fs-narrowed");
    let dir = scratch.path().to_path_buf();
    let w = dir.join("w");
    std::fs::create_dir_all(w.join("a/b")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(w.join("d")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.join("elsewhere/x")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.join("closed/inner/s")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.join("closed/open")).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::os::unix::fs::symlink(dir.join("elsewhere"), w.join("link"));
    let w = w.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let closed = dir
        .join("closed")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let roots = Roots {
        denied: [
            w.join("a/b/secret"),   // W, W/a, W/a/b
            w.join("absent"),       // W (absent: still split)
            w.join("d"),            // W; a denied dir itself is not narrowed
            w.join("d/deeper"),     // nothing below a denied dir
            w.join("link/x"),       // W; the walk grants the symlink whole
            closed.clone(),         // what the roots below lie in
            closed.join("inner/s"), // beneath a root in a denied dir: split
        ]
        .into_iter()
        .collect(),
        writable: vec![w.clone(), closed.join("inner"), closed.join("open")],
    };
    let mut plan = Plan::default();
    roots
        .grant_writable(&mut plan)
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(PathBuf, usize)> = plan
        .take_narrowed()
        .into_iter()
        .map(|n| (n.dir, n.denied.len()))
        .collect();
    assert_eq!(
        got,
        [
            (closed.join("inner"), 1),
            (w.clone(), 5),
            (w.join("a"), 1),
            (w.join("a/b"), 1)
        ],
        "{got:?}"
    );
    // A root in a denied dir with nothing denied beneath it is whole.
    assert!(
        plan.grants
            .iter()
            .any(|(p, g)| *p == closed.join("open") && *g == Grant::ReadWrite),
        "{:?}",
        plan.grants
    );
    assert!(
        !plan
            .grants
            .iter()
            .any(|(p, _)| p.starts_with(closed.join("inner/s"))),
        "{:?}",
        plan.grants
    );
}

#[test]
fn missing_denied_paths_resolve_through_their_existing_ancestor() {
    let scratch = crate::testing::Scratch::new("fs-unit");
    let dir = scratch.path().to_path_buf();
    let real = dir.join("real");
    std::fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
    let link = dir.join("link");
    let _ = std::os::unix::fs::symlink(&real, &link);
    let set = canonical_set(&[link.join("not-yet/secret")]);
    let real = real.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    assert!(set.contains(&real.join("not-yet/secret")), "{set:?}");
    assert!(set.contains(&link.join("not-yet/secret")), "{set:?}");
}

#[test]
fn a_symlinked_denied_path_resolves_to_its_target_and_a_dangling_one_to_itself() {
    let scratch = crate::testing::Scratch::new("fs-unit-links");
    let dir = scratch.path().to_path_buf();
    let real = dir.join("home/real-ssh");
    std::fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
    let home = dir
        .join("home")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::os::unix::fs::symlink(&real, home.join(".ssh"));
    let _ = std::os::unix::fs::symlink(home.join("gone"), home.join(".aws"));
    let _ = std::os::unix::fs::symlink(&home, dir.join("via"));
    let set = canonical_set(&[
        home.join(".ssh"),
        home.join(".aws"),
        dir.join("via/.ssh/id_ed25519"),
        home.join(".absent"),
    ]);
    let want: BTreeSet<PathBuf> = [
        home.join(".ssh"),
        home.join("real-ssh"),
        home.join(".aws"),
        dir.join("via/.ssh/id_ed25519"),
        home.join("real-ssh/id_ed25519"),
        home.join(".absent"),
    ]
    .into_iter()
    .collect();
    assert_eq!(set, want);
}

/// The read walk lists the dirs on the way down to a denied path and
/// grants each the listing right alone (so `ls /` works); the denied path
/// gets no rule, its siblings their read rule.
#[test]
fn the_dirs_above_a_denied_path_are_listable_only() {
    let grants = walked("/", &["/root/.ssh"], OwnFs::ALL.to_vec());
    let of = |p: &str| {
        grants
            .iter()
            .filter(|(q, _)| q == Path::new(p))
            .map(|(_, g)| *g)
            .collect::<Vec<_>>()
    };
    assert_eq!(of("/"), [Grant::List]);
    assert_eq!(of("/root"), [Grant::List]);
    assert_eq!(of("/root/.ssh"), []);
    assert_eq!(of("/etc"), [Grant::Read]);
}
