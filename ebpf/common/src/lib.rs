//! Types shared by the kernel programs (`ebpf/programs`) and the loader in
//! `lockrun::bpf`. Every map's key and value layout is documented here; both
//! sides compile these same `#[repr(C)]` definitions.
#![no_std]
