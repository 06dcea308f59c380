//! How long a test waits for something that is bound to happen: a run to
//! start, a listener inside to bind, an allocation to finish. Such a wait
//! is a backstop against a hang, never what a test judges, so where the
//! tests run slower than natively it stretches by the factor in
//! `LOCKRUN_TEST_SLOWDOWN` (an integer, 1 unless set): `cargo xtask test
//! --kernel` sets it for the kernels it boots under software emulation
//! (docs/kernels.md). A wait for something that must *not* happen is not
//! stretched here: it bounds what the test proves.

use std::time::Duration;

/// The variable that names the factor.
pub const SLOWDOWN: &str = "LOCKRUN_TEST_SLOWDOWN";

/// The factor by which the machine runs the tests slower than natively.
#[must_use]
pub fn factor() -> u32 {
    std::env::var(SLOWDOWN)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(1)
        .max(1)
}

/// `natively`, the longest a wait should take on a machine that runs the
/// tests at native speed, stretched by [`factor`].
#[must_use]
pub fn patience(natively: Duration) -> Duration {
    natively * factor()
}

/// How many times a test repeats what it proves by repetition (runs one
/// after another, a burst of refusals): `natively`, or `emulated` where the
/// machine runs the tests slower than natively. The full count runs in the
/// native suite; a kernel under emulation proves the same mechanism with
/// fewer.
#[must_use]
pub fn repetitions(natively: u32, emulated: u32) -> u32 {
    if factor() > 1 {
        emulated
    } else {
        natively
    }
}
