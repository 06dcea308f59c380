//! The kernel network policy: the run's only ways out, held by cgroup eBPF
//! hooks that every run's cgroup v2 is born under, pinned in bpffs so they
//! outlive lockrun.
//!
//! | hook | kernel | what it allows |
//! |---|---|---|
//! | `cgroup/connect4`, `cgroup/connect6` | 4.17 | the endpoints of `ALLOWED_ENDPOINTS` (the proxy, `network.local`) |
//! | `cgroup/sendmsg4`, `cgroup/sendmsg6` | 4.18 | the same, for unconnected UDP |
//! | the same four, for a run with [`hooks::RedirectTo`] | 4.17, 4.18 | besides: a TCP connect to the fake range `198.18.0.0/15` brought to the run's transparent listener, DNS (TCP and UDP to port 53) to its resolver; IPv4 or v4-mapped destinations only |
//! | `cgroup/recvmsg4`, `cgroup/recvmsg6` | 5.2 | a redirected UDP socket: a datagram from the resolver shows the original server as its source |
//! | `cgroup/getpeername4`, `cgroup/getpeername6` | 5.8 | a redirected socket: its original destination as its peer |
//! | `sockops` at `BPF_SOCK_OPS_TCP_CONNECT_CB` | 4.13 | a transparent connection's client side recorded for the proxy ([`redirect::Redirects`]) |
//! | `cgroup/sock_create` | 4.10 | inet sockets of three kinds only: TCP, MPTCP, UDP (the address hooks miss ways out of others on 6.18: `sendto` on an ICMP ping socket, `connect` on a UDP-Lite one) |
//! | `cgroup_skb/ingress`, `cgroup_skb/egress` | 4.10 | packets of the run's sockets only from and to loopback: nothing from outside reaches a port the command listens on (no address hook sees an accepted connection) |
//! | `cgroup_skb/ingress`, over loopback | 5.8 (`bpf_sk_lookup_tcp`/`_udp` and `bpf_sk_cgroup_id` in `cgroup_skb`) | from a process outside the run, only what the run asked for: a connection to a port the policy exposes (`EXPOSED_PORTS`), a datagram from an endpoint it may reach (its replies); a connection or datagram of the run's own passes (the sending socket, looked up, is in the run's cgroup) |
//! | `cgroup/connect_unix`, `cgroup/sendmsg_unix` | 6.7 | a run (supervised mode): no pathname the command names itself — lockrun's seccomp supervisor connects for it after resolving the path ([`crate::supervise`]); without Landlock's scoping, no abstract name either ([`crate::supervise::abstract_unix`]); library callers (prefix mode): pathnames under the worktree and the run's temp dir, by text ([`lockrun_unix`]) |
//! | `fmod_ret` on `security_unix_stream_connect`, `security_unix_may_send` (the unix guard, where the two above are missing) | 5.7, with BTF | a run (supervised mode): no unix stream connect, datagram connect or send to a socket other than the connected peer that the command makes itself ([`lockrun_unix::guard`]) |
//! | `raw_tp/sys_exit` (the recorder, [`read_only`]; `x86_64`) | 5.8 | nothing refused: a call of a run's task that a read-only mount refused (`EROFS`) recorded, as the filesystem refusal Landlock would have logged |
//!
//! Where the kernel lacks one of the last three ([`crate::kernel::redirect`]),
//! they are neither loaded nor attached, and a run goes without
//! redirection: every connect judged as without [`hooks::RedirectTo`].
//!
//! Everything else fails with `EPERM`, and each refusal becomes an
//! [`Event::KernelNetwork`] (the run's ring buffer) and a count (its
//! `COUNTERS` entry).
//!
//! # Verified and attached once per build
//! Verifying the programs, and attaching and pinning them, would cost every
//! run's start-up. They are loaded once per lockrun build and pinned, with the shared maps, under
//! `/sys/fs/bpf/lockrun-programs/<object-hash>/` ([`SHARED_ROOT`]), and
//! attached once, by links pinned there as `link-<program>-<parent id>`, to the build's
//! parent cgroup `<cgroup2>/lockrun/build-<object-hash>/`
//! ([`shared::build_parent`]). Every run's cgroup is made inside it, so
//! a run's processes are judged from their first instruction. The programs
//! find the run's allow list, unix prefixes, counters and ring buffer by the
//! cgroup id of the calling task (`RUNS`); a task of no registered run is
//! refused every inet destination (fail closed). Each run checks that every
//! link is live and on the parent (`BPF_OBJ_GET_INFO_BY_FD`) and attaches
//! one that is not; links are pinned per parent incarnation
//! (`link-<program>-<parent cgroup id>`), so no run ever removes a pin that
//! another run's attachment depends on.
//!
//! # One set of programs per parent
//! The pins are the build's memory of what it attached, and a lockrun in
//! another mount namespace with a bpffs of its own sees none of them. It
//! would load the programs again and attach a second set to the same parent
//! cgroup (cgroup links always attach beside each other): the kernel runs
//! both sets for every run in the parent, and the second set's maps know
//! none of the first set's runs, so each of those was refused its own proxy
//! (and the reverse). So attaching asks the kernel, not the pins: under the
//! parent's lock (an exclusive `flock` on the cgroup directory, which every
//! mount namespace shares), a lockrun that finds no live link of its own
//! queries the programs attached to the parent (`BPF_PROG_QUERY`, 4.15) and
//! refuses the run (exit 125, saying why) if any is not one its bpffs holds;
//! nothing is attached then. The first set's runs go on untouched, and the
//! second namespace can run once the first set's bpffs is gone (its pins,
//! and with them its links, go with it). Giving each bpffs a parent of its
//! own would let both run, at the price of a parent per mount namespace
//! that every other part (gc, `/proc/<pid>/cgroup` checks, tests) would have
//! to find; refusing keeps one parent per build. A lockrun that finds its
//! links live, every run but the first, makes no query.
//!
//! Ring buffers are reached through a map of maps, and every update of one
//! waits for an RCU grace period. So the rings stay:
//! `ring-<slot>` is created the first time a slot is used and kept in `RINGS`;
//! a run claims a slot (`SLOT_OWNERS`), discards what a killed predecessor
//! left in its ring, and points `RUNS[cgroup]` at it.
//!
//! A slot is held by a lock, not only by its `SLOT_OWNERS` entry: an
//! exclusive `flock` on `slot-<slot>/` (a bpffs directory beside the rings,
//! which no run can see), taken before the slot is claimed and let go after
//! it is released, by the kernel when its lockrun dies. So a slot whose lock
//! is free while `SLOT_OWNERS` still names a run is a killed lockrun's, and
//! the next run takes it over at once when that run's cgroup is gone or
//! empty, forgetting the run as `lockrun gc` would
//! (`tests/builds/ring_slots.rs`).
//! Judging by the cgroup alone could not tell a killed run from one being
//! set up (registered before its first process) or torn down (its cgroup
//! removed before it is unregistered); a lock held by the lockrun can.
//!
//! A lockrun killed with SIGKILL leaves its processes confined (the
//! attachment is the build's, the registration stays) until `lockrun gc`
//! reaps the cgroup and forgets the run ([`registry::forget_runs`]); a run whose
//! processes are all gone (its watchdog killed them) gives up its slot to
//! the next run that needs one.
//!
//! Each build keeps its pins and parent between runs; another build's are
//! removed by `lockrun gc` once none of its runs is left
//! ([`reap::reap_other_builds`]).
//!
//! Per-run pins under `/sys/fs/bpf/lockrun/<run-id>/` are what earlier
//! builds made; [`unpin`] still removes them.

pub mod attach;
pub mod btf;
pub mod events;
pub mod hooks;
pub mod load;
pub mod read_only;
pub mod reap;
pub mod redirect;
pub mod registry;
pub mod shared;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use lockrun_common::{
    Endpoint, UnixPrefixKey, MAX_ALLOWED_ENDPOINTS, MAX_EXPOSED_PORTS, UNIX_PATH_MAX,
};

use crate::cgroup;
use crate::cgroup::CgroupError;
use attach::PARENT_LOCK_TIMEOUT;

/// Where bpffs is mounted (and mounted by lockrun when it is not).
pub const BPFFS: &str = "/sys/fs/bpf";

/// Under [`BPFFS`]: the verified programs and shared maps, one directory per
/// lockrun build (`<object-hash>`).
pub const SHARED_ROOT: &str = "lockrun-programs";

/// The eBPF object built by `cargo xtask build`.
#[cfg(not(lockrun_ebpf_missing))]
static OBJECT: Option<&[u8]> = Some(include_bytes!(env!("LOCKRUN_EBPF_OBJECT")));
#[cfg(lockrun_ebpf_missing)]
static OBJECT: Option<&[u8]> = None;

/// Errors setting up or tearing down the kernel network policy. Each one
/// refuses the run (exit 125).
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this lockrun was built without its eBPF object; build it with `cargo xtask build` \
         — lockrun will not run the command without its network hooks"
    )]
    ObjectMissing,
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("cannot statfs /sys/fs/bpf")]
    StatBpffs(#[source] io::Error),
    #[error("mount -t bpf bpf {BPFFS} failed (is CONFIG_BPF_SYSCALL set?)")]
    MountBpffs(#[source] nix::Error),
    #[error("mkdir {path} failed")]
    Mkdir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the embedded eBPF object cannot be parsed")]
    Parse(#[source] aya_obj::ParseError),
    #[error("relocating the eBPF object's map references and calls failed")]
    Relocate(#[source] aya_obj::relocation::EbpfRelocationError),
    #[error("BPF_MAP_CREATE of {map} failed (is lockrun root with BPF enabled?)")]
    MapCreate {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("the eBPF object has no {0}: it does not match this lockrun")]
    Missing(&'static str),
    #[error("the eBPF object has a map lockrun does not create: {0}")]
    UnknownMap(String),
    #[error("BPF_PROG_LOAD of {program} failed: {source}; verifier log:\n{log}")]
    RawLoad {
        program: &'static str,
        source: io::Error,
        log: String,
    },
    #[error(
        "bpf_link_create({program}) on the run cgroup failed (the cgroup unix hooks need kernel 6.7)"
    )]
    RawAttach {
        program: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("attaching lockrun's unix guard ({program}) failed")]
    GuardAttach {
        program: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("BPF_OBJ_PIN {path} failed")]
    Pin {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("bpf map {map}: {call} failed")]
    Map {
        map: &'static str,
        call: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("BPF_MAP_CREATE of the run's {map} failed (is lockrun root with BPF enabled?)")]
    RawMapCreate {
        map: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("opening the verified programs at {path} failed (remove that directory; the next run loads them again)")]
    OpenShared {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "registering the run in the shared map {map} failed ({call}); too many concurrent runs?"
    )]
    Register {
        map: &'static str,
        call: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the run's cgroup {cgroup} is not in the build's parent cgroup {parent}, where the hooks are attached")]
    NotUnderParent { cgroup: PathBuf, parent: PathBuf },
    #[error(
        "another set of this lockrun build's programs is attached to {parent} ({program} hook), \
         by a lockrun that sees another bpf filesystem than this {BPFFS} (another mount \
         namespace); a second set would cut its runs off from their proxy, so lockrun will not \
         attach one — run lockrun where it sees the same bpf filesystem"
    )]
    SecondProgramSet {
        parent: PathBuf,
        program: &'static str,
    },
    #[error("another process holds {parent} locked (flock) past {PARENT_LOCK_TIMEOUT:?}: the hooks cannot be attached")]
    ParentLocked {
        parent: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "lockrun's sys_exit recorder, attached when this lockrun began, could not be kept \
         attached: {0}"
    )]
    ReadOnlyRecorder(crate::kernel::ReadOnlyUnseen),
    #[error("the {program} hook is not attached to {parent} and could not be attached")]
    NotAttached {
        program: &'static str,
        parent: PathBuf,
    },
    #[error("the run's transparent listener and resolver must be on one IPv4 loopback address, with ports: {0:?}")]
    RedirectEndpoints(hooks::RedirectTo),
    #[error("more than {MAX_ALLOWED_ENDPOINTS} allowed endpoints")]
    TooManyEndpoints,
    #[error("more than {MAX_EXPOSED_PORTS} exposed ports")]
    TooManyExposed,
    #[error("the ring buffer's fd cannot be watched (epoll_ctl)")]
    Watch(#[source] io::Error),
    #[error("BPF_PROG_QUERY of {cgroup} failed")]
    Query {
        cgroup: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unpin {path} failed")]
    Unpin {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Mount bpffs at [`BPFFS`] unless one is mounted there (checked once per
/// process).
pub fn ensure_bpffs() -> Result<(), BpfError> {
    static MOUNTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if MOUNTED.get().is_some() {
        return Ok(());
    }
    ensure_bpffs_now()?;
    MOUNTED.get_or_init(|| ());
    Ok(())
}

fn ensure_bpffs_now() -> Result<(), BpfError> {
    // statfs names the filesystem holding BPFFS: bpf once it is mounted
    // there, sysfs before (one syscall, where mountinfo is a file to parse).
    let fs_type = nix::sys::statfs::statfs(BPFFS)
        .map_err(|e| BpfError::StatBpffs(io::Error::from(e)))?
        .filesystem_type();
    if fs_type == nix::sys::statfs::BPF_FS_MAGIC {
        return Ok(());
    }
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(BpfError::MountBpffs)
}

/// Preflight (and `lockrun doctor`): the embedded object is there, bpffs is
/// (or can be) mounted, and cgroup2 is found. Loading is proven only by `attach`.
pub fn preflight() -> Result<(), BpfError> {
    OBJECT.ok_or(BpfError::ObjectMissing)?;
    cgroup::cgroup2_mount()?;
    ensure_bpffs()
}

/// Turn an allowed socket address into the allow map's key (an IPv4-mapped
/// IPv6 address becomes the IPv4 endpoint it carries).
#[must_use]
pub fn endpoint_key(addr: &SocketAddr) -> Endpoint {
    match addr {
        SocketAddr::V4(a) => Endpoint::v4(a.ip().octets(), a.port()),
        SocketAddr::V6(a) => Endpoint::v6(a.ip().octets(), a.port()),
    }
}

/// The LPM keys admitting the run in `cgroup_id` to sockets under `dir`: the
/// path as given and its canonical form, each with a trailing `/`, after the
/// cgroup id (matched whole). Paths too long to prefix a socket path are left
/// out (nothing under them can be a socket address).
pub(super) fn prefix_keys(cgroup_id: u64, dir: &Path) -> Vec<UnixPrefixKey> {
    let mut forms = vec![dir.to_path_buf()];
    if let Ok(c) = dir.canonicalize() {
        if c != dir {
            forms.push(c);
        }
    }
    forms
        .iter()
        .filter_map(|p| {
            let mut bytes = p.as_os_str().as_bytes().to_vec();
            if bytes.first() != Some(&b'/') {
                return None;
            }
            while bytes.len() > 1 && bytes.last() == Some(&b'/') {
                bytes.pop();
            }
            if bytes.len() > 1 {
                bytes.push(b'/');
            }
            if bytes.len() >= UNIX_PATH_MAX {
                return None;
            }
            let mut path = [0u8; UNIX_PATH_MAX];
            path[..bytes.len()].copy_from_slice(&bytes);
            Some(UnixPrefixKey {
                prefix_len: ((8 + bytes.len()) * 8) as u32,
                cgroup_id,
                path,
            })
        })
        .collect()
}
