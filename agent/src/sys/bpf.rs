//! The raw `bpf(2)` calls lockrun loads its programs with: `BPF_PROG_LOAD`
//! with an explicit expected attach type (aya 0.14 knows neither the unix
//! socket attach types `BPF_CGROUP_UNIX_CONNECT`/`_SENDMSG`, kernel 6.7, nor
//! a way to load without its `EbpfLoader`, whose constructor parses the
//! kernel's BTF), `BPF_LINK_CREATE` on a cgroup, `BPF_OBJ_PIN`/`BPF_OBJ_GET`,
//! and `BPF_MAP_CREATE` with an inner-map template plus the element calls on
//! raw keys (aya 0.14 creates maps-of-maps only from BTF definitions). The
//! `unsafe` that [`crate::bpf`] and the kernel probe ([`crate::kernel`]) call.
#![allow(unsafe_code)]
// bpf_attr carries fds as u32; a valid fd is never negative.
#![allow(clippy::cast_sign_loss)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::c_path;

/// `BPF_PROG_TYPE_CGROUP_SKB` (4.10).
pub const PROG_TYPE_CGROUP_SKB: u32 = 8;
/// `BPF_PROG_TYPE_CGROUP_SOCK` (4.10).
pub const PROG_TYPE_CGROUP_SOCK: u32 = 9;
/// `BPF_PROG_TYPE_CGROUP_SOCK_ADDR` (4.17).
pub const PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
/// `BPF_CGROUP_INET_INGRESS`.
pub const ATTACH_INET_INGRESS: u32 = 0;
/// `BPF_CGROUP_INET_EGRESS`.
pub const ATTACH_INET_EGRESS: u32 = 1;
/// `BPF_CGROUP_INET_SOCK_CREATE`.
pub const ATTACH_INET_SOCK_CREATE: u32 = 2;
/// `BPF_CGROUP_INET4_CONNECT`.
pub const ATTACH_INET4_CONNECT: u32 = 10;
/// `BPF_CGROUP_INET6_CONNECT`.
pub const ATTACH_INET6_CONNECT: u32 = 11;
/// `BPF_CGROUP_UDP4_SENDMSG`.
pub const ATTACH_UDP4_SENDMSG: u32 = 14;
/// `BPF_CGROUP_UDP6_SENDMSG`.
pub const ATTACH_UDP6_SENDMSG: u32 = 15;
/// `BPF_CGROUP_UNIX_CONNECT` (6.7).
pub const ATTACH_UNIX_CONNECT: u32 = 49;
/// `BPF_CGROUP_UNIX_SENDMSG` (6.7).
pub const ATTACH_UNIX_SENDMSG: u32 = 50;
/// `BPF_PROG_TYPE_SOCK_OPS` (4.13).
pub const PROG_TYPE_SOCK_OPS: u32 = 13;
/// `BPF_CGROUP_SOCK_OPS` (4.13).
pub const ATTACH_SOCK_OPS: u32 = 3;
/// `BPF_CGROUP_UDP4_RECVMSG` (5.2).
pub const ATTACH_UDP4_RECVMSG: u32 = 19;
/// `BPF_CGROUP_UDP6_RECVMSG` (5.2).
pub const ATTACH_UDP6_RECVMSG: u32 = 20;
/// `BPF_CGROUP_INET4_GETPEERNAME` (5.8).
pub const ATTACH_INET4_GETPEERNAME: u32 = 29;
/// `BPF_CGROUP_INET6_GETPEERNAME` (5.8).
pub const ATTACH_INET6_GETPEERNAME: u32 = 30;
/// `BPF_PROG_TYPE_TRACING` (5.5).
pub const PROG_TYPE_TRACING: u32 = 26;
/// `BPF_PROG_TYPE_RAW_TRACEPOINT` (4.17).
pub const PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
/// `BPF_MODIFY_RETURN` (5.7): `fmod_ret`, on an error-injectable or
/// `security_` function.
pub const ATTACH_MODIFY_RETURN: u32 = 26;

/// `BPF_MAP_TYPE_LPM_TRIE`.
pub const MAP_TYPE_LPM_TRIE: u32 = 11;
/// `BPF_MAP_TYPE_HASH`.
pub const MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY_OF_MAPS`.
pub const MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;
/// `BPF_MAP_TYPE_RINGBUF`.
pub const MAP_TYPE_RINGBUF: u32 = 27;
/// `BPF_F_NO_PREALLOC`.
pub const F_NO_PREALLOC: u32 = 1;

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_QUERY: libc::c_int = 16;

/// `bpf(cmd, attr, sizeof attr)`: its non-negative return, or the errno.
///
/// # Safety
/// `A` is the `#[repr(C)]` `bpf_attr` layout `cmd` reads (a zeroed tail
/// where the kernel expects zeros), and every pointer and fd in `attr`
/// stays valid for the call.
unsafe fn sys_bpf<A>(cmd: libc::c_int, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: the caller's contract; attr's size is the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<A>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// [`sys_bpf`] for a command that returns a new fd.
///
/// # Safety
/// As [`sys_bpf`], and `cmd` returns a new fd on success.
unsafe fn sys_bpf_fd<A>(cmd: libc::c_int, attr: &mut A) -> io::Result<OwnedFd> {
    // SAFETY: the caller's contract.
    let fd = unsafe { sys_bpf(cmd, attr) }?;
    // SAFETY: a non-negative return of an fd-returning command is a new fd
    // that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// An object name as the kernel takes it: at most 15 bytes and a NUL.
fn obj_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (d, s) in out.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    out
}

/// `bpf_attr` for `BPF_MAP_CREATE` (4.15 layout up to `map_name`; zeroed tail).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    // u32s: a u64 here would leave 4 bytes of padding (garbage) where the
    // kernel reads `map_ifindex`.
    _tail: [u32; 16],
}

/// What [`map_create`] creates.
pub struct MapSpec<'a> {
    pub name: &'a str,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    /// For a map of maps: a map like the ones it will hold.
    pub inner: Option<BorrowedFd<'a>>,
}

/// `BPF_MAP_CREATE`.
pub fn map_create(spec: &MapSpec<'_>) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: spec.map_type,
        key_size: spec.key_size,
        value_size: spec.value_size,
        max_entries: spec.max_entries,
        map_flags: spec.flags,
        inner_map_fd: spec.inner.map_or(0, |f| f.as_raw_fd() as u32),
        map_name: obj_name(spec.name),
        ..MapCreateAttr::default()
    };
    // SAFETY: attr is a zero-tailed bpf_attr for MAP_CREATE; the inner fd, if
    // any, is borrowed for the call.
    unsafe { sys_bpf_fd(BPF_MAP_CREATE, &mut attr) }
}

/// `bpf_attr` for the element calls.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
    _tail: [u64; 4],
}

fn elem_call(cmd: libc::c_int, attr: &mut ElemAttr) -> io::Result<()> {
    // SAFETY: attr is a zero-tailed bpf_attr whose key/value pointers the
    // callers point at buffers of the map's key and value sizes, alive for the call.
    unsafe { sys_bpf(cmd, attr) }.map(drop)
}

/// `BPF_MAP_UPDATE_ELEM` of a map with 4-byte keys and 4-byte values (an
/// array of maps: the value is the inner map's fd).
pub fn map_update_u32_u32(map: BorrowedFd<'_>, key: u32, value: u32) -> io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: std::ptr::from_ref(&key) as u64,
        value: std::ptr::from_ref(&value) as u64,
        ..ElemAttr::default()
    };
    elem_call(BPF_MAP_UPDATE_ELEM, &mut attr)
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
    _tail: [u64; 4],
}

/// `struct bpf_link_info`, as far as a cgroup link's fields (5.8 layout).
#[repr(C)]
#[derive(Default)]
struct LinkInfo {
    ty: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    cgroup_id: u64,
    attach_type: u32,
    _tail: [u32; 9],
}

/// A cgroup link's target: (cgroup id, attach type). The cgroup id is 0 once
/// the cgroup is gone (the link is defunct).
pub fn cgroup_link_target(link: BorrowedFd<'_>) -> io::Result<(u64, u32)> {
    let mut info = LinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: std::mem::size_of::<LinkInfo>() as u32,
        info: std::ptr::from_mut(&mut info) as u64,
        ..InfoAttr::default()
    };
    // SAFETY: attr points at `info`, whose size is passed; both outlive the
    // call; the link fd is borrowed.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok((info.cgroup_id, info.attach_type))
}

/// `struct bpf_prog_info`, as far as its id.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    ty: u32,
    id: u32,
}

/// A program's id (`BPF_OBJ_GET_INFO_BY_FD`).
pub fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = ProgInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: std::mem::size_of::<ProgInfo>() as u32,
        info: std::ptr::from_mut(&mut info) as u64,
        ..InfoAttr::default()
    };
    // SAFETY: attr points at `info`, whose size is passed; both outlive the
    // call; the program fd is borrowed.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.id)
}

/// `bpf_attr` for `BPF_PROG_QUERY` (4.15 layout; zeroed tail).
#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
    _tail: [u64; 4],
}

/// The programs a cgroup has of one attach type, attached to it itself
/// (not inherited), in the order they run (`BPF_PROG_QUERY`, 4.15).
pub fn prog_query(cgroup: BorrowedFd<'_>, attach_type: u32) -> io::Result<Vec<u32>> {
    // `BPF_CGROUP_MAX_PROGS`: no cgroup has more of one attach type.
    let mut ids = vec![0u32; 64];
    let mut attr = QueryAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..QueryAttr::default()
    };
    // SAFETY: attr points at `ids`, whose length is passed as prog_cnt; it
    // outlives the call; the cgroup fd is borrowed.
    unsafe { sys_bpf(BPF_PROG_QUERY, &mut attr) }?;
    ids.truncate(attr.prog_cnt as usize);
    Ok(ids)
}

/// `BPF_OBJ_GET`: open a pinned bpf object.
pub fn obj_get(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    let mut attr = ObjPinAttr {
        pathname: c.as_ptr() as u64,
        ..ObjPinAttr::default()
    };
    // SAFETY: attr points at a NUL-terminated path that outlives the call.
    unsafe { sys_bpf_fd(BPF_OBJ_GET, &mut attr) }
}
const BPF_LINK_CREATE: libc::c_int = 28;

/// `bpf_attr` for `BPF_PROG_LOAD`, the fields up to `expected_attach_type`
/// (kernel 4.17 layout; zeroed tail).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    _tail: [u64; 12],
}

/// `bpf_attr` for `BPF_LINK_CREATE` (5.7 layout; zeroed tail).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    _tail: [u64; 8],
}

/// Load a program of `prog_type` with an explicit expected attach type,
/// under `license`. On failure returns the error and the verifier log.
pub fn prog_load(
    prog_type: u32,
    insns: &[u64],
    expected_attach_type: u32,
    name: &str,
    license: &std::ffi::CStr,
) -> Result<OwnedFd, (io::Error, String)> {
    // Without a log first: the verifier runs markedly slower while
    // logging. Only a refusal is loaded again, with the log, to say why.
    let ty = (prog_type, expected_attach_type);
    if let Ok(fd) = prog_load_with(ty, insns, name, license, None) {
        return Ok(fd);
    }
    let mut log = vec![0u8; 1 << 20];
    prog_load_with(ty, insns, name, license, Some(&mut log)).map_err(|err| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        (err, String::from_utf8_lossy(&log[..end]).into_owned())
    })
}

fn prog_load_with(
    (prog_type, expected_attach_type): (u32, u32),
    insns: &[u64],
    name: &str,
    license: &std::ffi::CStr,
    log: Option<&mut [u8]>,
) -> io::Result<OwnedFd> {
    let (log_level, log_size, log_buf) = match log {
        Some(l) => (1, l.len() as u32, l.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: u32::try_from(insns.len()).unwrap_or(u32::MAX),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name: obj_name(name),
        expected_attach_type,
        ..ProgLoadAttr::default()
    };
    // SAFETY: attr is a properly initialized bpf_attr prefix whose pointers
    // (insns, license, the log if any) outlive the call; the size passed is
    // attr's size.
    unsafe { sys_bpf_fd(BPF_PROG_LOAD, &mut attr) }
}

/// `BPF_LINK_CREATE` of a cgroup program (no flags: one program per attach type, like `CgroupAttachMode::Single`).
pub fn link_create(
    prog: BorrowedFd<'_>,
    cgroup: BorrowedFd<'_>,
    attach_type: u32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type,
        ..LinkCreateAttr::default()
    };
    // SAFETY: attr is a zero-tailed bpf_attr for LINK_CREATE; both fds are borrowed for the call.
    unsafe { sys_bpf_fd(BPF_LINK_CREATE, &mut attr) }
}

/// `bpf_attr` for `BPF_PROG_LOAD` of a program attached to a kernel
/// function by its BTF id (5.5 layout up to `attach_btf_id`; zeroed tail).
#[repr(C)]
#[derive(Default)]
struct TracingLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    /// The vmlinux BTF id of the function attached to.
    attach_btf_id: u32,
    _tail: [u64; 8],
}

const _: () = assert!(std::mem::offset_of!(TracingLoadAttr, attach_btf_id) == 108);

/// Load a `fmod_ret` program (`BPF_PROG_TYPE_TRACING`,
/// `BPF_MODIFY_RETURN`) for the kernel function of vmlinux BTF id
/// `attach_btf_id`, under GPL (its helpers are GPL-only). On failure
/// returns the error and, when `log` asks (loaded again with it), the
/// verifier's log.
pub fn prog_load_fmod_ret(
    insns: &[u64],
    attach_btf_id: u32,
    name: &str,
    log: bool,
) -> Result<OwnedFd, (io::Error, String)> {
    let load = |log: Option<&mut [u8]>| {
        let (log_level, log_size, log_buf) = match log {
            Some(l) => (1, l.len() as u32, l.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut attr = TracingLoadAttr {
            prog_type: PROG_TYPE_TRACING,
            insn_cnt: u32::try_from(insns.len()).unwrap_or(u32::MAX),
            insns: insns.as_ptr() as u64,
            license: c"GPL".as_ptr() as u64,
            log_level,
            log_size,
            log_buf,
            prog_name: obj_name(name),
            expected_attach_type: ATTACH_MODIFY_RETURN,
            attach_btf_id,
            ..TracingLoadAttr::default()
        };
        // SAFETY: attr is a properly initialized bpf_attr prefix whose
        // pointers (insns, the license, the log if any) outlive the call;
        // the size passed is attr's size.
        unsafe { sys_bpf_fd(BPF_PROG_LOAD, &mut attr) }
    };
    match load(None) {
        Ok(fd) => return Ok(fd),
        Err(e) if !log => return Err((e, String::new())),
        Err(_) => {}
    }
    let mut log = vec![0u8; 1 << 20];
    load(Some(&mut log)).map_err(|err| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        (err, String::from_utf8_lossy(&log[..end]).into_owned())
    })
}

const BPF_RAW_TRACEPOINT_OPEN: libc::c_int = 17;

/// `bpf_attr` for `BPF_RAW_TRACEPOINT_OPEN` (zeroed tail).
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
    _tail: [u64; 4],
}

/// Attach a tracing program (`fmod_ret`) to the function it was loaded
/// for: `BPF_RAW_TRACEPOINT_OPEN` without a name (5.5); the link.
pub fn attach_tracing(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut attr = RawTracepointAttr {
        prog_fd: prog.as_raw_fd() as u32,
        ..RawTracepointAttr::default()
    };
    // SAFETY: attr is a zero-tailed bpf_attr for RAW_TRACEPOINT_OPEN (a
    // NULL name); the program fd is borrowed for the call.
    unsafe { sys_bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }
}

/// Attach a raw tracepoint program to the tracepoint `name`
/// (`BPF_RAW_TRACEPOINT_OPEN`, 4.17); the link (a bpf link since 5.7,
/// which can be pinned).
pub fn attach_raw_tracepoint(prog: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    let mut attr = RawTracepointAttr {
        name: name.as_ptr() as u64,
        prog_fd: prog.as_raw_fd() as u32,
        ..RawTracepointAttr::default()
    };
    // SAFETY: attr is a zero-tailed bpf_attr for RAW_TRACEPOINT_OPEN whose
    // name points at a NUL-terminated string that outlives the call; the
    // program fd is borrowed for the call.
    unsafe { sys_bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }
}

/// The id of the program a link runs (`BPF_OBJ_GET_INFO_BY_FD`).
pub fn link_prog_id(link: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = LinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: std::mem::size_of::<LinkInfo>() as u32,
        info: std::ptr::from_mut(&mut info) as u64,
        ..InfoAttr::default()
    };
    // SAFETY: attr points at `info`, whose size is passed; both outlive the
    // call; the link fd is borrowed.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.prog_id)
}

const BPF_OBJ_PIN: libc::c_int = 6;

/// `bpf_attr` for `BPF_OBJ_PIN` (zeroed tail).
#[repr(C)]
#[derive(Default)]
struct ObjPinAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    _tail: [u64; 4],
}

/// `BPF_OBJ_PIN`: pin a bpf object (here: a link) at a bpffs path.
pub fn obj_pin(fd: BorrowedFd<'_>, path: &std::path::Path) -> io::Result<()> {
    let c = c_path(path)?;
    let mut attr = ObjPinAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: fd.as_raw_fd() as u32,
        ..ObjPinAttr::default()
    };
    // SAFETY: attr points at a NUL-terminated path that outlives the call; fd is borrowed.
    unsafe { sys_bpf(BPF_OBJ_PIN, &mut attr) }.map(drop)
}

/// Register an owned fd (the ring buffer's) with the current tokio reactor.
pub fn watch(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the fd stays open
    // and refers to the same file description for the AsyncFd's whole life.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}
