//! Saying a test cannot run here. A skip is loud (`skipped: <test>:
//! <reason>` on fd 2, past the harness's capture), and under `CI=true` a
//! kernel test may not skip: it fails instead.

/// Skip `test` for `reason`; under `CI=true`, fail it.
pub fn skip(test: &str, reason: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "kernel test {test} may not skip under CI=true: {reason}"
    );
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("skipped: {test}: {reason}\n").as_bytes(),
    );
}

/// The running kernel's release (`6.12.117+deb13-amd64`), and whether it
/// is at least `since` (major, minor).
fn kernel_at_least(since: (u32, u32)) -> (String, bool) {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let at_least = (major, minor) >= since;
    (release, at_least)
}

/// Skip `test` on a kernel older than `since`, which lacks `what`, the
/// subject of the test: the attack or the record it is about does not
/// exist there (the fallback that stands in has tests of its own). Unlike
/// [`skip`], allowed under `CI=true` — the kernel matrix boots older kernels
/// on purpose — and it cannot skip on a kernel that has `what`.
#[must_use]
pub fn before_kernel(test: &str, since: (u32, u32), what: &str) -> bool {
    let (release, at_least) = kernel_at_least(since);
    if !at_least {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "skipped: {test}: this kernel ({release}) has no {what} (Linux {}.{})\n",
                since.0, since.1
            )
            .as_bytes(),
        );
    }
    !at_least
}

/// The kernel's Landlock ABI, 0 without Landlock.
#[must_use]
pub fn landlock_abi() -> i64 {
    lockrun::sys::landlock_abi_version().map_or(0, i64::from)
}

/// Skip `test` where the kernel's Landlock ABI is below `abi`, which
/// brought `what`, the subject of the test; as [`before_kernel`], allowed
/// under `CI=true` and never where the kernel has it.
#[must_use]
pub fn below_landlock_abi(test: &str, abi: i64, what: &str) -> bool {
    let have = landlock_abi();
    if have < abi {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "skipped: {test}: this kernel's Landlock ABI is {have}: no {what} (ABI {abi})\n"
            )
            .as_bytes(),
        );
    }
    have < abi
}
