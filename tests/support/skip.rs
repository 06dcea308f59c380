//! Saying a test cannot run here. A skip is loud (`skipped: <test>:
//! <reason>` on fd 2, past the harness's capture), and under `CI=true` a
//! kernel test may not skip: it fails instead.

/// Skip `test` for `reason`; under `CI=true`, fail it.
#[allow(dead_code)] // not every test crate that shares this module skips
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
