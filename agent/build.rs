//! Embeds the eBPF object built by `cargo xtask build`.
//!
//! The object is looked up at `$LOCKRUN_EBPF_OBJECT` (xtask sets it), else at
//! `<workspace>/target/ebpf/bpfel-unknown-none/release/lockrun-ebpf`. When it
//! is missing the agent still compiles, and loading the hooks fails with
//! "run cargo xtask build" (cfg `lockrun_ebpf_missing`).
//!
//! It also hashes the unix programs (the crate `lockrun-unix`) into the
//! build id and builds the seccomp filter every run loads (the crate
//! `lockrun-seccomp`): both crates of the workspace, built for this script
//! as for the agent.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(lockrun_ebpf_missing)");
    println!(
        "cargo::rustc-env=LOCKRUN_UNIX_PROGRAMS_HASH={:016x}",
        lockrun_unix::programs_hash()
    );
    println!(
        "cargo::rustc-env=LOCKRUN_GUARD_PROGRAMS_HASH={:016x}",
        lockrun_unix::guard::programs_hash()
    );
    seccomp_filter();
    println!("cargo::rerun-if-env-changed=LOCKRUN_EBPF_OBJECT");
    let path = std::env::var_os("LOCKRUN_EBPF_OBJECT").map_or_else(
        || {
            let manifest =
                PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
            manifest.join("../target/ebpf/bpfel-unknown-none/release/lockrun-ebpf")
        },
        PathBuf::from,
    );
    println!("cargo::rerun-if-changed={}", path.display());
    if path.is_file() {
        let abs = path.canonicalize().unwrap_or(path);
        println!("cargo::rustc-env=LOCKRUN_EBPF_OBJECT={}", abs.display());
        // The object's FNV-1a 64, part of the build id (lockrun::bpf::shared::build_id):
        // computed here, not at every run's start.
        let bytes = std::fs::read(&abs).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        println!("cargo::rustc-env=LOCKRUN_EBPF_HASH={h:016x}");
    } else {
        println!("cargo::rustc-cfg=lockrun_ebpf_missing");
    }
    static_libgcc();
}

/// The combined seccomp filter for a kernel with every mechanism, built
/// and compacted once here rather than at every run's start
/// (`lockrun_seccomp::compile`), written to `$OUT_DIR/seccomp_filter.rs` as
/// `(code, jt, jf, k)` tuples for `seccomp::combined` to embed (cfg
/// `lockrun_seccomp_built`). Not for another architecture than this
/// script's: the crate's `target_arch` is this script's, so such a build
/// compiles the filter at run time. An error is left to the run time too,
/// where it refuses the run with its message.
fn seccomp_filter() {
    println!("cargo::rustc-check-cfg=cfg(lockrun_seccomp_built)");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok(std::env::consts::ARCH) {
        return;
    }
    let Ok(filter) = lockrun_seccomp::compile(lockrun_seccomp::Fallbacks::NONE) else {
        return;
    };
    let mut text = String::from("&[\n");
    for f in &filter {
        let _ = writeln!(text, "    ({:#x}, {}, {}, {:#x}),", f.code, f.jt, f.jf, f.k);
    }
    text.push_str("]\n");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("seccomp_filter.rs");
    if std::fs::write(&out, text).is_ok() {
        println!("cargo::rustc-cfg=lockrun_seccomp_built");
    }
}

/// Take the unwinder from `libgcc_eh.a`, as `-static-libgcc` would, so that
/// lockrun does not load `libgcc_s.so` at every start (each shared library
/// adds to exec's work). Our native libraries come before
/// std's `-lgcc_s` on the link line, and that one is `--as-needed`: with
/// every `_Unwind_*` already resolved here, it is left out. Where the C
/// compiler does not know the archive, nothing changes.
fn static_libgcc() {
    let Ok(out) = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let archive = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if let (true, Some(dir)) = (archive.is_absolute() && archive.is_file(), archive.parent()) {
        println!("cargo::rustc-link-search=native={}", dir.display());
        println!("cargo::rustc-link-lib=static=gcc_eh");
    }
}
