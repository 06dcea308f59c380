//! lockrun's `sys_exit` recorder: the calls of a run that a read-only
//! mount refuses (`EROFS`), which the kernel refuses before Landlock or
//! kernel audit's rules see them (see `lockrun_common`'s `ReadOnlyRefusal`
//! and the program, `ebpf/programs/src/read_only.rs`).
//!
//! - **Loaded** with the build's other programs ([`super::load`]) and
//!   pinned beside them as `read_only_exit`. A kernel that refuses it
//!   (a kernel locked down for confidentiality refuses its
//!   `bpf_probe_read_kernel`) does not refuse the build: the directory
//!   `read-only-refused-<errno>` is made in its place, and says why to
//!   every later lockrun.
//! - **Attached** to the `sys_exit` tracepoint (`BPF_RAW_TRACEPOINT_OPEN`),
//!   the machine's, not a cgroup's, by a link pinned beside it as
//!   `link-read_only_exit`, so it outlives lockrun as the cgroup links do;
//!   attached under a lock of the build's directory (an exclusive `flock`),
//!   so two lockruns starting together do not both attach it (each
//!   refusal would be recorded twice). It judges only tasks of this
//!   build's runs (`RUNS`), and goes with the build's directory: `lockrun
//!   gc` removes another build's, and with its last reference the kernel
//!   detaches the link.
//! - **Asked once per process** ([`recorder`]): whether it is attached
//!   here, or why not (`crate::kernel::ReadOnlyUnseen`), which
//!   `crate::kernel::Kernel::read_only_refusals_seen` hands to the run and
//!   `lockrun doctor`. A run whose process found it attached checks it
//!   again as it registers ([`ensure`]).
//! - **Decoded** ([`decode`]) into the filesystem refusal Landlock would
//!   have logged ([`crate::audit::syscalls::records::read_only`]), looking
//!   through `/proc/<pid>` only while that pid is still the call's process:
//!   in the run's cgroup, of the name the record gives ([`still_of_run`]),
//!   not a process that took its pid since.
//!
//! `x86_64` only: the program reads its `struct pt_regs`. Elsewhere it
//! is neither loaded nor attached, and [`recorder`] says so.

use std::ffi::CStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::{fs, io};

use lockrun_common::{read_only_offset as at, Hook, READ_ONLY_PATH_MAX};

use super::BpfError;
use crate::audit::syscalls::records::read_only::{refusal, Named, ReadOnlyCall};
use crate::audit::syscalls::records::{At, DevIno, Look, Proc};
use crate::audit::syscalls::refer::Found;
use crate::audit::Event;
use crate::kernel::ReadOnlyUnseen;
use crate::sys::bpf;

/// The program's name in the object, and its pin in the build's directory.
pub(super) const PROGRAM: &str = "read_only_exit";
/// The pin of its link, beside it.
const LINK: &str = "link-read_only_exit";
/// In the build's directory where the kernel refused the program:
/// `read-only-refused-<errno>`, a directory (bpffs holds no files).
const REFUSED: &str = "read-only-refused-";
/// The tracepoint it is attached to.
const TRACEPOINT: &CStr = c"sys_exit";

/// Load the recorder from the relocated object `obj` and pin it in `dir`
/// (a build's load in progress); where the kernel refuses it, make the
/// directory that says so instead.
#[cfg(target_arch = "x86_64")]
pub(super) fn load(obj: &aya_obj::Object, dir: &Path) -> Result<(), BpfError> {
    let prog = obj
        .programs
        .get(PROGRAM)
        .ok_or(BpfError::Missing(PROGRAM))?;
    let function = obj
        .functions
        .get(&prog.function_key())
        .ok_or(BpfError::Missing(PROGRAM))?;
    let insns: Vec<u64> = function
        .instructions
        .iter()
        .copied()
        .map(super::load::encode_insn)
        .collect();
    match bpf::prog_load(bpf::PROG_TYPE_RAW_TRACEPOINT, &insns, 0, PROGRAM, c"GPL") {
        Ok(fd) => {
            let path = dir.join(PROGRAM);
            bpf::obj_pin(fd.as_fd(), &path).map_err(|source| BpfError::Pin { path, source })
        }
        Err((source, log)) => {
            tracing::debug!(
                "the kernel refused lockrun's sys_exit recorder: {source}; verifier log:\n{log}"
            );
            let errno = source.raw_os_error().unwrap_or(libc::EINVAL);
            let path = dir.join(format!("{REFUSED}{errno}"));
            fs::create_dir(&path).map_err(|source| BpfError::Mkdir { path, source })
        }
    }
}

/// Whether the recorder is attached for this build, attaching it if not,
/// asked once per process: the run judges by this whether a refusal by a
/// read-only mount would be seen. Loads the build's programs first where
/// no run has yet (as the run's registration would).
pub fn recorder() -> Result<(), ReadOnlyUnseen> {
    static ANSWER: std::sync::OnceLock<Result<(), ReadOnlyUnseen>> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(ask)
}

#[cfg(not(target_arch = "x86_64"))]
fn ask() -> Result<(), ReadOnlyUnseen> {
    Err(ReadOnlyUnseen::Architecture(std::env::consts::ARCH))
}

#[cfg(target_arch = "x86_64")]
fn ask() -> Result<(), ReadOnlyUnseen> {
    let dir = super::shared::shared_dir();
    if attached(&dir) {
        return Ok(());
    }
    let object = super::OBJECT.ok_or(ReadOnlyUnseen::NoPrograms)?;
    let shared = super::ensure_bpffs()
        .and_then(|()| super::shared::Shared::open_or_load(object))
        .map_err(|e| {
            tracing::debug!("lockrun's sys_exit recorder: the build's programs: {e}");
            ReadOnlyUnseen::NoPrograms
        })?;
    ensure(&shared.dir)
}

/// Whether the link pinned in `dir` runs the recorder pinned there.
fn attached(dir: &Path) -> bool {
    let Ok(id) = bpf::obj_get(&dir.join(PROGRAM)).and_then(|p| bpf::prog_id(p.as_fd())) else {
        return false;
    };
    bpf::obj_get(&dir.join(LINK))
        .and_then(|l| bpf::link_prog_id(l.as_fd()))
        .is_ok_and(|p| p == id)
}

/// The recorder pinned in the build's directory `dir` attached by a live
/// link pinned beside it, or attached now (see the module's docs); why
/// not, where the kernel refused it.
pub(super) fn ensure(dir: &Path) -> Result<(), ReadOnlyUnseen> {
    use nix::fcntl::{Flock, FlockArg};
    let errno = |e: &io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    if attached(dir) {
        return Ok(());
    }
    let Ok(prog) = bpf::obj_get(&dir.join(PROGRAM)) else {
        return Err(refused_at_load(dir));
    };
    let locked = fs::File::open(dir)
        .map_err(|e| ReadOnlyUnseen::Attach { errno: errno(&e) })
        .and_then(|d| {
            Flock::lock(d, FlockArg::LockExclusive)
                .map_err(|(_, e)| ReadOnlyUnseen::Attach { errno: e as i32 })
        })?;
    // Another lockrun may have attached it meanwhile.
    if attached(dir) {
        return Ok(());
    }
    let link = bpf::attach_raw_tracepoint(prog.as_fd(), TRACEPOINT)
        .map_err(|e| ReadOnlyUnseen::Attach { errno: errno(&e) })?;
    let pin = dir.join(LINK);
    // A pin that runs no longer this program (none is expected) is replaced.
    let _ = fs::remove_file(&pin);
    bpf::obj_pin(link.as_fd(), &pin).map_err(|e| ReadOnlyUnseen::Pin { errno: errno(&e) })?;
    drop(locked);
    Ok(())
}

/// Why the recorder is not pinned in `dir`: the kernel refused it when the
/// build's programs were loaded, with the errno its directory names.
fn refused_at_load(dir: &Path) -> ReadOnlyUnseen {
    let errno = super::attach::names(dir)
        .iter()
        .find_map(|n| n.strip_prefix(REFUSED)?.parse().ok())
        .unwrap_or(libc::ENOENT);
    ReadOnlyUnseen::Load { errno }
}

/// A record of the recorder → its run's cgroup id and the filesystem
/// refusal it tells, its paths found through `/proc` while the process
/// that made the call is there ([`still_of_run`]); `None` for any other
/// record (a [`lockrun_common::Denial`]: another size and hook).
#[must_use]
pub fn decode(bytes: &[u8]) -> Option<(u64, Event)> {
    decode_with(bytes, &Proc, &still_of_run)
}

/// Whether the process `pid` is still the one of the run in `cgroup_id`
/// whose name was `comm`: in that cgroup, by its id, and of that name. A
/// process gone, its pid used again by another (outside the run, or of
/// another name) is not looked through: its working directory and
/// descriptors are not the call's.
fn still_of_run(pid: u32, cgroup_id: u64, comm: &str) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    let (Some(path), Ok(root)) = (
        crate::state::membership::unified(&text),
        crate::cgroup::cgroup2_mount(),
    ) else {
        return false;
    };
    fs::metadata(root.join(path.trim_start_matches('/'))).is_ok_and(|m| m.ino() == cgroup_id)
        && Proc.comm(pid).as_deref() == Some(comm)
}

/// A [`Look`] through the processes that still are the call's only
/// (`still`, asked once per pid).
struct OfRun<'a> {
    look: &'a dyn Look,
    still: &'a dyn Fn(u32) -> bool,
    asked: std::cell::RefCell<Vec<(u32, bool)>>,
}

impl OfRun<'_> {
    fn there(&self, pid: u32) -> bool {
        if let Some((_, yes)) = self.asked.borrow().iter().find(|(p, _)| *p == pid) {
            return *yes;
        }
        let yes = (self.still)(pid);
        self.asked.borrow_mut().push((pid, yes));
        yes
    }
}

impl Look for OfRun<'_> {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        self.there(pid).then(|| self.look.fd_path(pid, fd))?
    }

    fn dev_ino(&self, pid: u32, at: &At<'_>) -> Option<DevIno> {
        self.there(pid).then(|| self.look.dev_ino(pid, at))?
    }

    fn cwd(&self, pid: u32) -> Option<String> {
        self.there(pid).then(|| self.look.cwd(pid))?
    }

    /// Where lockrun is, not through the process: asked whatever became
    /// of it (an `O_CREAT` open's file, once its process is gone).
    fn found(&self, path: &str, follow: bool) -> Option<Found> {
        self.look.found(path, follow)
    }
}

/// [`decode`], looking through `look` at the processes `of_run` says are
/// still the call's (pid, cgroup id, name).
pub(super) fn decode_with(
    bytes: &[u8],
    look: &dyn Look,
    of_run: &dyn Fn(u32, u64, &str) -> bool,
) -> Option<(u64, Event)> {
    if bytes.len() != at::SIZE {
        return None;
    }
    let u32_at =
        |o: usize| u32::from_ne_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[o..o + 8]);
        u64::from_ne_bytes(b)
    };
    if u32_at(at::HOOK) != Hook::ReadOnly as u32 {
        return None;
    }
    let comm = &bytes[at::COMM..at::COMM + 16];
    let comm_end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    let path = |i: usize| {
        let len = u32_at(at::PATH_LEN + 4 * i).cast_signed();
        let from = at::PATHS + i * READ_ONLY_PATH_MAX;
        Named::from_record(len, &bytes[from..from + READ_ONLY_PATH_MAX])
    };
    let call = ReadOnlyCall {
        pid: u32_at(at::PID),
        tgid: u32_at(at::TGID),
        comm: String::from_utf8_lossy(&comm[..comm_end]).into_owned(),
        nr: u64_at(at::NR).cast_signed(),
        args: [0, 1, 2, 3].map(|i| u64_at(at::ARGS + 8 * i)),
        paths: [path(0), path(1)],
    };
    let cgroup_id = u64_at(at::CGROUP_ID);
    let checked = OfRun {
        look,
        still: &|pid| of_run(pid, cgroup_id, &call.comm),
        asked: std::cell::RefCell::new(Vec::new()),
    };
    let fs = refusal(&call, &checked)?;
    Some((cgroup_id, Event::Filesystem(fs)))
}
