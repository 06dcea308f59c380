//! A call of a run that a read-only mount refused (`EROFS`), as lockrun's
//! `sys_exit` recorder writes it to the run's ring buffer
//! ([`ReadOnlyRefusal`]), and where each call names its paths
//! ([`path_args`]).
//!
//! The kernel refuses a write, a create or a metadata change on a
//! read-only mount before any security hook is asked, so neither Landlock's
//! records nor kernel audit's rules (keyed on `EACCES`) see it. The
//! recorder, a raw tracepoint on `sys_exit` (`BPF_PROG_TYPE_RAW_TRACEPOINT`,
//! Linux 4.17; its helpers `bpf_probe_read_kernel` and
//! `bpf_probe_read_user_str`, 5.5), compares the call's return with
//! `-EROFS` first, so every other syscall exit on the machine costs one
//! compare; then finds the task's run by its cgroup in `RUNS`, as the
//! cgroup hooks do.
//!
//! **x86_64 only.** The recorder reads the call's number and arguments
//! from the `struct pt_regs` the tracepoint passes, whose layout, and the
//! syscall numbers of [`path_args`], are x86_64's; the loader (built for
//! the host) loads it on x86_64 only, and says so elsewhere.

/// Bytes of each path a [`ReadOnlyRefusal`] carries, its NUL included. A
/// longer path is cut to its first `READ_ONLY_PATH_MAX - 1` bytes, and its
/// [`ReadOnlyRefusal::path_len`] is then `READ_ONLY_PATH_MAX` (as is a
/// path of exactly `READ_ONLY_PATH_MAX - 1` bytes: read as cut).
pub const READ_ONLY_PATH_MAX: usize = 512;

/// `EROFS`: a read-only file system.
pub const EROFS: i64 = 30;

/// [`path_args`]: no path in this place.
pub const NO_PATH: u8 = 0xff;

/// One call refused with `EROFS` (see the module's docs), as written to
/// the run's ring buffer beside [`crate::Denial`]s: its `hook`, at the
/// offset of [`crate::Denial::hook`], is [`crate::Hook::ReadOnly`], and its
/// size is its own, so the reader tells the two apart by either.
///
/// Layout (1120 bytes, offsets in [`read_only_offset`]): `cgroup_id: u64`,
/// `pid: u32` (thread id), `tgid: u32` (process id), `hook: u32`, 4 zero
/// bytes, `nr: u64` (the syscall number, `orig_ax`), `args: [u64; 4]` (the
/// first four arguments: `di`, `si`, `dx`, `r10`), `ret: i64` (`-EROFS`),
/// `comm: [u8; 16]` (NUL-padded), `path_len: [i32; 2]` (what
/// `bpf_probe_read_user_str` returned for each path: its bytes with the
/// NUL, 0 where the call names no path there, negative where it could not
/// be read), `paths: [[u8; READ_ONLY_PATH_MAX]; 2]` (the first and second
/// path the call named, [`path_args`]; only the first `path_len` bytes are
/// written).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReadOnlyRefusal {
    pub cgroup_id: u64,
    pub pid: u32,
    pub tgid: u32,
    pub hook: u32,
    /// Explicit padding (always zero), so the record has no hidden bytes.
    pub _pad: u32,
    pub nr: u64,
    pub args: [u64; 4],
    pub ret: i64,
    pub comm: [u8; 16],
    pub path_len: [i32; 2],
    pub paths: [[u8; READ_ONLY_PATH_MAX]; 2],
}

/// Byte offsets inside [`ReadOnlyRefusal`].
pub mod read_only_offset {
    pub const CGROUP_ID: usize = 0;
    pub const PID: usize = 8;
    pub const TGID: usize = 12;
    pub const HOOK: usize = 16;
    pub const NR: usize = 24;
    pub const ARGS: usize = 32;
    pub const RET: usize = 64;
    pub const COMM: usize = 72;
    pub const PATH_LEN: usize = 88;
    pub const PATHS: usize = 96;
    pub const SIZE: usize = 96 + 2 * super::READ_ONLY_PATH_MAX;
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ReadOnlyRefusal>() == read_only_offset::SIZE);
    assert!(offset_of!(ReadOnlyRefusal, cgroup_id) == read_only_offset::CGROUP_ID);
    assert!(offset_of!(ReadOnlyRefusal, pid) == read_only_offset::PID);
    assert!(offset_of!(ReadOnlyRefusal, tgid) == read_only_offset::TGID);
    assert!(offset_of!(ReadOnlyRefusal, hook) == read_only_offset::HOOK);
    assert!(offset_of!(ReadOnlyRefusal, nr) == read_only_offset::NR);
    assert!(offset_of!(ReadOnlyRefusal, args) == read_only_offset::ARGS);
    assert!(offset_of!(ReadOnlyRefusal, ret) == read_only_offset::RET);
    assert!(offset_of!(ReadOnlyRefusal, comm) == read_only_offset::COMM);
    assert!(offset_of!(ReadOnlyRefusal, path_len) == read_only_offset::PATH_LEN);
    assert!(offset_of!(ReadOnlyRefusal, paths) == read_only_offset::PATHS);
    // The reader tells it from a Denial by its hook, at the same offset,
    // and by its size.
    assert!(offset_of!(crate::Denial, hook) == read_only_offset::HOOK);
    assert!(size_of::<crate::Denial>() != read_only_offset::SIZE);
    // A ring buffer record's size is a multiple of 8 (no tail to pad).
    assert!(read_only_offset::SIZE.is_multiple_of(8));
};

/// Where an x86_64 call named by `nr` takes its paths: the argument (from
/// 0) of its first and of its second path, [`NO_PATH`] where it names
/// none. A link or rename names two, the old name first; `symlink(at)`
/// the name it makes, not its target (a string, not looked up); a call
/// on a descriptor none (`fchmod`, `fchown`, `fsetxattr`, `ftruncate`,
/// `ioctl`), and neither does a call this table does not know (`bind` of
/// a unix socket, whose path is inside its address; `openat2`, whose flags
/// are in a struct): its refusal is recorded with its arguments, and named
/// by its number.
#[must_use]
pub const fn path_args(nr: u64) -> [u8; 2] {
    match nr {
        // open, mkdir, rmdir, creat, unlink, chmod, chown, lchown, truncate,
        // utime, mknod, utimes, setxattr, lsetxattr, removexattr, lremovexattr
        2 | 83 | 84 | 85 | 87 | 90 | 92 | 94 | 76 | 132 | 133 | 235 | 188 | 189 | 197 | 198 => {
            [0, NO_PATH]
        }
        // openat, mkdirat, mknodat, fchownat, futimesat, unlinkat, fchmodat,
        // utimensat, openat2, fchmodat2, setxattrat, removexattrat; and
        // symlink(target, linkpath)
        257 | 258 | 259 | 260 | 261 | 263 | 268 | 280 | 437 | 452 | 463 | 466 | 88 => [1, NO_PATH],
        // symlinkat(target, newdirfd, linkpath)
        266 => [2, NO_PATH],
        // rename, link
        82 | 86 => [0, 1],
        // renameat, linkat, renameat2
        264 | 265 | 316 => [1, 3],
        _ => [NO_PATH, NO_PATH],
    }
}

/// Whether the x86_64 call `nr` asks rather than acts: `access`,
/// `faccessat`, `faccessat2` (`W_OK` on a read-only mount: `EROFS`). Not a
/// refusal, and not recorded, as kernel audit's stand-in leaves them out.
#[must_use]
pub const fn is_query(nr: u64) -> bool {
    matches!(nr, 21 | 269 | 439)
}
