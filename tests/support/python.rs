//! The Python interpreter the tests run, resolved once, outside any run.
//!
//! Python's own start-up must not add refusals to the ones a test counts:
//! - `python3` on PATH may be a version manager's shim (pyenv's is a bash
//!   script), so the tests run what it resolves to (`sys.executable`);
//! - without HOME, the interpreter looks its user up at start-up (glibc tries
//!   nscd's socket first), a unix connect a run refuses and reports. CI may
//!   run without HOME, so a probe judged by its exact refusals gets one.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The path of the real `python3` (a shim resolved to what it executes).
pub fn python3() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 must be on PATH for the tests");
        assert!(out.status.success(), "python3 -c failed: {out:?}");
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(
            path.is_absolute(),
            "sys.executable is not a path: {}",
            path.display()
        );
        path.display().to_string()
    })
}

/// A command for [`python3`] whose start-up makes no lookup a run refuses.
pub fn python3_command() -> Command {
    let mut c = Command::new(python3());
    if std::env::var_os("HOME").is_none() {
        c.env("HOME", std::env::temp_dir());
    }
    c
}

/// The machine's own interpreter, with what the machine installed into it:
/// for a test whose subject is such a client library (Python's `requests`).
/// Under `cargo xtask test`, [`python3`] is a venv of it without them
/// (`xtask/src/test_python.rs`); elsewhere the two are one.
pub fn machine_python3() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = python3_command()
            .args(["-c", "import sys; print(sys._base_executable)"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    })
}
