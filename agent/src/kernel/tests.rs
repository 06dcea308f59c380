use super::*;

#[test]
fn each_landlock_abi_leaves_the_gaps_of_the_rights_it_lacks() {
    let gaps = |abi, unix_hooks, unix_guard| {
        Kernel {
            landlock: Ok(abi),
            unix_hooks,
            unix_guard,
            read_only_refusals: Ok(()),
            syscall_audit: (abi < 7).then_some(Err(Unusable::NoAudit)),
        }
        .gaps()
    };
    assert_eq!(gaps(7, true, false), vec![]);
    assert_eq!(gaps(6, true, false), vec![Gap::FilesystemRefusalsUnseen]);
    // The supervisor holds the scoping, where the kernel refuses the
    // run's own unix connects (hooks or guard).
    // The supervisor holds truncate, `nodev` the device ioctls.
    let older = vec![Gap::FilesystemRefusalsUnseen];
    assert_eq!(gaps(2, true, false), older);
    assert_eq!(gaps(2, false, true), older);
    assert_eq!(
        gaps(2, false, false),
        vec![
            Gap::AbstractUnixScope,
            Gap::UnixAddresses,
            Gap::FilesystemRefusalsUnseen
        ]
    );
    assert_eq!(gaps(7, false, false), vec![Gap::UnixAddresses]);
}

/// Without Landlock's scoping the supervisor holds it, and `doctor`
/// names it; the fallbacks follow what the kernel lacks.
#[test]
fn the_supervisor_holds_the_scoping_where_landlock_does_not() {
    let k = |abi, unix_hooks, unix_guard| Kernel {
        landlock: Ok(abi),
        unix_hooks,
        unix_guard,
        read_only_refusals: Ok(()),
        syscall_audit: None,
    };
    let by = |k: Kernel, promise: &str| {
        k.promises()
            .into_iter()
            .find(|h| h.promise.starts_with(promise))
            .unwrap()
            .by
    };
    let old = k(2, true, false);
    assert_eq!(
        by(old, "no signal"),
        Ok(Held::new(
            Mechanism::Supervisor,
            "the seccomp supervisor (no Landlock scoping: ABI < 6)"
        ))
    );
    assert_eq!(
        by(old, "no abstract"),
        Ok(Held::new(
            Mechanism::SupervisorAndUnixHooks,
            "the seccomp supervisor, and the cgroup connect_unix and sendmsg_unix hooks \
            (no Landlock scoping: ABI < 6)"
        ))
    );
    assert_eq!(
        by(k(2, false, true), "no abstract").map(|h| h.mechanism),
        Ok(Mechanism::SupervisorAndUnixGuard)
    );
    assert_eq!(
        by(k(7, false, true), "pathname unix").map(|h| h.mechanism),
        Ok(Mechanism::SupervisorAndUnixGuard)
    );
    assert_eq!(
        by(k(7, true, false), "no signal"),
        Ok(Held::new(
            Mechanism::Landlock,
            "Landlock signal scoping (ABI 7)"
        ))
    );
    assert_eq!(
        by(k(2, false, false), "no abstract"),
        Err(Unheld::Gap(Gap::AbstractUnixScope))
    );
    let f = old.fallbacks();
    assert!(f.scoping && !f.unix_addresses);
    let f = k(7, false, true).fallbacks();
    assert!(!f.scoping && f.unix_addresses);
    assert_eq!(
        k(7, true, false).fallbacks(),
        lockrun_seccomp::Fallbacks::NONE
    );
}

/// Where an older ABI lacks a right, the promise names what holds it
/// instead; where the ABI has it, Landlock.
#[test]
fn an_older_abi_names_what_stands_in_for_a_missing_right() {
    let by = |abi, promise: &str| {
        Kernel {
            landlock: Ok(abi),
            unix_hooks: true,
            unix_guard: false,
            read_only_refusals: Ok(()),
            syscall_audit: None,
        }
        .promises()
        .into_iter()
        .find(|h| h.promise.starts_with(promise))
        .map(|h| h.by)
        .unwrap()
    };
    let truncated = "no file outside the writable roots truncated";
    let ioctl = "no ioctl on a device outside the writable roots";
    let by_mounts = by(2, truncated).unwrap();
    assert_eq!(by_mounts.mechanism, Mechanism::ReadOnlyMounts);
    assert!(by_mounts.how.starts_with("every mount read-only outside"));
    // Where no refusal of a read-only mount would be seen, the supervisor.
    let unseen = Kernel {
        landlock: Ok(2),
        unix_hooks: true,
        unix_guard: false,
        read_only_refusals: Err(ReadOnlyUnseen::NoPrograms),
        syscall_audit: None,
    };
    assert_eq!(
        unseen
            .promises()
            .into_iter()
            .find(|h| h.promise.starts_with(truncated))
            .map(|h| h.by),
        Some(Ok(Held::new(
            Mechanism::Supervisor,
            "the seccomp supervisor (no Landlock truncate right: ABI < 3)"
        )))
    );
    assert!(unseen.fallbacks().truncate && unseen.fallbacks().metadata);
    assert_eq!(
        by(3, truncated),
        Ok(Held::new(
            Mechanism::Landlock,
            "Landlock truncate right (ABI 3)"
        ))
    );
    let nodev = by(4, ioctl).unwrap();
    assert_eq!(nodev.mechanism, Mechanism::NodevMounts);
    assert!(nodev.how.starts_with("device files only under /dev"));
    assert_eq!(
        by(5, ioctl),
        Ok(Held::new(
            Mechanism::Landlock,
            "Landlock device ioctl right (ABI 5)"
        ))
    );
    let k = |abi| Kernel {
        landlock: Ok(abi),
        unix_hooks: true,
        unix_guard: false,
        read_only_refusals: Ok(()),
        syscall_audit: None,
    };
    // The mounts refuse truncation outside: no supervisor at any ABI.
    assert!(!k(2).fallbacks().truncate && !k(3).fallbacks().truncate);
    assert!(k(2).features().fallbacks().truncate);
    assert!(k(4).devices_only_in_dev() && !k(5).devices_only_in_dev());
}

#[test]
fn below_abi_7_kernel_audits_syscall_records_hold_the_refusals_where_they_can() {
    let kernel = |abi, syscall_audit| Kernel {
        landlock: Ok(abi),
        unix_hooks: true,
        unix_guard: false,
        read_only_refusals: Ok(()),
        syscall_audit,
    };
    let on = Some(Ok(SyscallAudit { audit_on: true }));
    let fs = |k: &Kernel| {
        k.promises()
            .into_iter()
            .find(|h| h.promise == "every filesystem refusal recorded")
            .map(|h| h.by)
    };
    // Held by the syscall records below ABI 7.
    let k = kernel(6, on);
    assert_eq!(k.gaps(), vec![]);
    assert_eq!(
        fs(&k),
        Some(Ok(Held::new(
            Mechanism::SyscallAudit,
            "kernel audit's syscall records of the run's login uid (no Landlock \
                 denial logging: ABI < 7)"
        )))
    );
    assert!(k.refusals_by_syscall_audit().is_some());
    // By Landlock from ABI 7, whatever was found of kernel audit.
    let k = kernel(7, on);
    assert_eq!(
        fs(&k),
        Some(Ok(Held::new(
            Mechanism::Landlock,
            "Landlock denial logging to kernel audit (ABI 7)"
        )))
    );
    assert!(k.refusals_by_syscall_audit().is_none());
    // Where kernel audit cannot be used, the gap stays and says why.
    let k = kernel(2, Some(Err(Unusable::Locked)));
    assert!(k.gaps().contains(&Gap::FilesystemRefusalsUnseen));
    assert_eq!(
        k.lacks(Gap::FilesystemRefusalsUnseen),
        "Landlock's denial logging (ABI 7, Linux 6.15), and kernel audit's syscall records \
         cannot stand in here: kernel audit is locked (enabled 2, `auditctl -e 2`): no rule \
         may be added until the next boot"
    );
    assert_eq!(k.lacks(Gap::Truncate), Gap::Truncate.lacks());
}

/// The refused reaches outside the run: Landlock's logging records
/// them; below it, what stands in says what it leaves unrecorded; at
/// ABI 6 without kernel audit, the gap of the filesystem refusals.
#[test]
fn below_abi_7_what_records_the_refused_reaches_says_what_it_leaves_out() {
    let by = |abi, syscall_audit| {
        Kernel {
            landlock: Ok(abi),
            unix_hooks: true,
            unix_guard: false,
            read_only_refusals: Ok(()),
            syscall_audit,
        }
        .promises()
        .into_iter()
        .find(|h| h.promise == "every refused reach outside the run recorded")
        .map(|h| h.by.map(|held| held.how))
        .unwrap()
    };
    let on = Some(Ok(SyscallAudit { audit_on: true }));
    let off = Some(Err(Unusable::NoAudit));
    let unseen = "; not the processes outside the run hidden from its /proc: no record \
                  names them";
    assert_eq!(
        by(7, None),
        Ok("Landlock denial logging to kernel audit (ABI 7)".to_owned())
    );
    assert_eq!(
        by(6, on),
        Ok(format!(
            "kernel audit's syscall records of the run's login uid (no Landlock denial \
             logging: ABI < 7){unseen}"
        ))
    );
    assert_eq!(by(6, off), Err(Unheld::Gap(Gap::FilesystemRefusalsUnseen)));
    for audit in [on, off] {
        assert_eq!(
            by(2, audit),
            Ok(format!(
                "the seccomp supervisor (no Landlock scoping: ABI < 6){unseen}"
            ))
        );
    }
}

/// `doctor --json` names the mechanisms so, and the kernel table
/// (`cargo xtask kernels table`) reads them by these names.
#[test]
fn a_mechanism_is_named_in_snake_case() {
    for (m, name) in [
        (Mechanism::Landlock, "landlock"),
        (Mechanism::Supervisor, "supervisor"),
        (
            Mechanism::SupervisorAndUnixHooks,
            "supervisor_and_unix_hooks",
        ),
        (
            Mechanism::SupervisorAndUnixGuard,
            "supervisor_and_unix_guard",
        ),
        (Mechanism::NodevMounts, "nodev_mounts"),
        (Mechanism::ReadOnlyMounts, "read_only_mounts"),
        (Mechanism::SyscallAudit, "syscall_audit"),
    ] {
        assert_eq!(
            serde_json::to_string(&m).unwrap_or_default(),
            format!("\"{name}\"")
        );
    }
}

#[test]
fn a_release_is_compared_by_its_major_and_minor() {
    assert!(release_at_least("6.12.117+deb13-amd64", (6, 7)));
    assert!(release_at_least("6.7.0", (6, 7)));
    assert!(release_at_least("7.0.1-arch1", (6, 7)));
    assert!(!release_at_least("6.1.0-57-amd64", (6, 7)));
    assert!(!release_at_least("5.19.17", (6, 7)));
    assert!(!release_at_least("", (6, 7)));
}

#[test]
fn a_gap_is_named_as_a_policy_writes_it() {
    for g in Gap::ALL {
        assert_eq!(Gap::named(g.name()), Some(g));
        assert_eq!(
            serde_json::to_string(&g).unwrap_or_default(),
            format!("\"{}\"", g.name())
        );
    }
    assert_eq!(Gap::named("everything"), None);
}
