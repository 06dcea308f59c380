//! The run's watchdog, seen from outside: a test that kills lockrun finds
//! it, and judges whether a process is gone.

/// A process's pid is free or its process dead (a zombie its new parent
/// has not reaped yet).
pub fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
        st.rsplit(')').next().unwrap().trim_start().starts_with('Z')
    })
}

/// The run's watchdog: the child of `lockrun` that named itself so.
pub fn watchdog_of(lockrun: u32) -> u32 {
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{lockrun}/task"))
        .unwrap()
        .map(|t| std::fs::read_to_string(t.unwrap().path().join("children")).unwrap_or_default())
        .collect::<Vec<_>>()
        .iter()
        .flat_map(|l| l.split_whitespace().map(|p| p.parse().unwrap()))
        .collect();
    let watchdogs: Vec<u32> = children
        .iter()
        .copied()
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .unwrap_or_default()
                .trim()
                == lockrun::sys::watchdog::NAME
        })
        .collect();
    assert_eq!(watchdogs.len(), 1, "lockrun's children: {children:?}");
    watchdogs[0]
}

/// `SIGKILL` to the watchdog of `lockrun`, and wait (15 s at most) until
/// it is gone: what the OOM killer does to it when it takes lockrun. A
/// test that then kills lockrun sees the run go on without either.
pub fn kill_watchdog_of(lockrun: u32) {
    let watchdog = watchdog_of(lockrun);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(watchdog).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let t = std::time::Instant::now();
    while !gone(watchdog) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(15),
            "the watchdog {watchdog} outlived SIGKILL"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
