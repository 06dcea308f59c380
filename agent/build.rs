//! Embeds the eBPF object built by `cargo xtask build`.
//!
//! The object is looked up at `$LOCKRUN_EBPF_OBJECT` (xtask sets it), else at
//! `<workspace>/target/ebpf/bpfel-unknown-none/release/lockrun-ebpf`. When it
//! is missing the agent still compiles, and loading the hooks fails with
//! "run cargo xtask build" (cfg `lockrun_ebpf_missing`).

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(lockrun_ebpf_missing)");
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
    } else {
        println!("cargo::rustc-cfg=lockrun_ebpf_missing");
    }
}
