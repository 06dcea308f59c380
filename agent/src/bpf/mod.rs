//! The kernel network policy: the run's only ways out, held by cgroup eBPF
//! hooks that every run's cgroup v2 is born under, pinned in bpffs so they
//! outlive lockrun.
//!
//! | hook | kernel | what it allows |
//! |---|---|---|
//! | `cgroup/connect4`, `cgroup/connect6` | 4.17 | the endpoints of `ALLOWED_ENDPOINTS` (the proxy, `network.local`) |
//! | `cgroup/sendmsg4`, `cgroup/sendmsg6` | 4.18 | the same, for unconnected UDP |
//! | `cgroup/sock_create` | 4.10 | inet sockets of three kinds only: TCP, MPTCP, UDP (the address hooks miss ways out of others on 6.18: `sendto` on an ICMP ping socket, `connect` on a UDP-Lite one) |
//! | `cgroup_skb/ingress`, `cgroup_skb/egress` | 4.10 | packets of the run's sockets only from and to loopback: nothing from outside reaches a port the command listens on (no address hook sees an accepted connection) |
//! | `cgroup_skb/ingress`, over loopback | 5.8 (`bpf_sk_lookup_tcp`/`_udp` and `bpf_sk_cgroup_id` in `cgroup_skb`) | from a process outside the run, only what the run asked for: a connection to a port the policy exposes (`EXPOSED_PORTS`), a datagram from an endpoint it may reach (its replies); a connection or datagram of the run's own passes (the sending socket, looked up, is in the run's cgroup) |
//! | `cgroup/connect_unix`, `cgroup/sendmsg_unix` | 6.7 | a run (supervised mode): no pathname the command names itself — lockrun's seccomp supervisor connects for it after resolving the path ([`crate::supervise`]); without Landlock's scoping, no abstract name either ([`crate::supervise::abstract_unix`]); library callers (prefix mode): pathnames under the worktree and the run's temp dir, by text ([`unix`]) |
//! | `fmod_ret` on `security_unix_stream_connect`, `security_unix_may_send` (the unix guard, where the two above are missing) | 5.7, with BTF | a run (supervised mode): no unix stream connect, datagram connect or send to a socket other than the connected peer that the command makes itself ([`guard`]) |
//!
//! Everything else fails with `EPERM`, and each refusal becomes an
//! [`Event::KernelNetwork`] (the run's ring buffer) and a count (its
//! `COUNTERS` entry).
//!
//! # Verified and attached once per build
//! Verifying the programs cost ~6 ms per run (~1 ms each on this kernel) and
//! attaching and pinning them ~1 ms more. They are now loaded once per
//! lockrun build and pinned, with the shared maps, under
//! `/sys/fs/bpf/lockrun-programs/<object-hash>/` ([`SHARED_ROOT`]), and
//! attached once, by links pinned there as `link-<program>-<parent id>`, to the build's
//! parent cgroup `<cgroup2>/lockrun/build-<object-hash>/`
//! ([`crate::cgroup::build_parent`]). Every run's cgroup is made inside it, so
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
//! waits for an RCU grace period (4–8 ms measured here). So the rings stay:
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
//! (`tests/ring_slots.rs`).
//! Judging by the cgroup alone could not tell a killed run from one being
//! set up (registered before its first process) or torn down (its cgroup
//! removed before it is unregistered); a lock held by the lockrun can.
//!
//! A lockrun killed with SIGKILL leaves its processes confined (the
//! attachment is the build's, the registration stays) until `lockrun gc`
//! reaps the cgroup and forgets the run ([`forget_runs`]); a run whose
//! processes are all gone (its watchdog killed them) gives up its slot to
//! the next run that needs one.
//!
//! Each build keeps its pins and parent between runs; another build's are
//! removed by `lockrun gc` once none of its runs is left
//! ([`reap_other_builds`]).
//!
//! Per-run pins under `/sys/fs/bpf/lockrun/<run-id>/` are what earlier
//! builds made; [`unpin`] still removes them.

pub mod btf;
pub mod guard;
pub(crate) mod raw;
pub mod unix;

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use aya::maps::{HashMap, LpmTrie, Map, MapData, PerCpuHashMap, PerCpuValues, RingBuf};
use lockrun_common::{
    Denial, Endpoint, Hook, RunConfig, RunCounters, RunEndpoint, RunPort, UnixPrefixKey, AF_INET6,
    AF_UNIX, COUNTER_INBOUND_UNITEMIZED, COUNTER_LOST, DENIALS_RING_BYTES, MAP_ALLOWED_ENDPOINTS,
    MAP_COUNTERS, MAP_EXPOSED_PORTS, MAP_RINGS, MAP_RUNS, MAX_ALLOWED_ENDPOINTS, MAX_EXPOSED_PORTS,
    MAX_RING_SLOTS, MAX_UNIX_PREFIXES, MAX_UNIX_PREFIXES_ALL_RUNS, UNIX_PATH_MAX,
};

use crate::audit::{
    AuditLog, Destination, Direction, Event, KernelNetEvent, ScopeEvent, ScopeTarget,
};
use crate::cgroup::{check_run_id, RunCgroup};

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
    Cgroup(#[from] crate::cgroup::CgroupError),
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
    #[error("the {program} hook is not attached to {parent} and could not be attached")]
    NotAttached {
        program: &'static str,
        parent: PathBuf,
    },
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

/// The pin directory of one run: `/sys/fs/bpf/lockrun/<run-id>`.
#[must_use]
pub fn pin_dir(run_id: &str) -> PathBuf {
    Path::new(BPFFS).join("lockrun").join(run_id)
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
    // there, sysfs before (one syscall; mountinfo costs ~0.1 ms to read).
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

/// gc: remove a stale run's pins, which detaches its hooks. `Ok(false)` when there were none.
pub fn unpin(run_id: &str) -> Result<bool, BpfError> {
    check_run_id(run_id)?;
    let dir = pin_dir(run_id);
    // A run that never pinned anything (or an id bpffs cannot hold: it refuses
    // names with a dot, EPERM) has nothing to unpin.
    if !pinned_runs().iter().any(|r| r == run_id) {
        return Ok(false);
    }
    match fs::remove_dir_all(&dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(BpfError::Unpin { path: dir, source }),
    }
}

/// gc: the run ids that have pins under `/sys/fs/bpf/lockrun/` (empty when
/// bpffs or the directory is absent).
#[must_use]
pub fn pinned_runs() -> Vec<String> {
    list_dir(&Path::new(BPFFS).join("lockrun"))
}

/// Preflight (and `lockrun doctor`): the embedded object is there, bpffs is
/// (or can be) mounted, and cgroup2 is found. Loading is proven only by `attach`.
pub fn preflight() -> Result<(), BpfError> {
    OBJECT.ok_or(BpfError::ObjectMissing)?;
    crate::cgroup::cgroup2_mount()?;
    ensure_bpffs()
}

pub(crate) fn list_dir(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| check_run_id(id).is_ok())
        .collect();
    ids.sort();
    ids
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
fn prefix_keys(cgroup_id: u64, dir: &Path) -> Vec<UnixPrefixKey> {
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

/// Per-hook refusal counts read from `COUNTERS` (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Refusals per hook, in [`Hook::ALL`] order.
    pub refused: [u64; Hook::ALL.len()],
    /// Refusals whose event did not fit the ring buffer.
    pub lost: u64,
    /// Packets from outside dropped past the ones itemized in the ring
    /// buffer (counted in `refused` too).
    pub inbound_unitemized: u64,
}

impl Counters {
    #[must_use]
    pub fn total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

type Ring = Arc<Mutex<RingBuf<MapData>>>;

/// One run's place in the shared hooks: registered in the shared maps, with
/// a ring slot whose records are its refusals. Dropping it without
/// [`finish`] unregisters the run (an early error leaves nothing behind); a
/// `SIGKILL`ed lockrun leaves the registration, and the hooks keep judging
/// the run's processes until `gc` reaps them and forgets it.
///
/// [`finish`]: NetworkHooks::finish
pub struct NetworkHooks {
    run_id: String,
    cgroup_id: u64,
    ring: Ring,
    /// The run's slot in `RINGS` (held in `SLOT_OWNERS`).
    slot: u32,
    /// The slot's lock, held as long as the run is registered (see
    /// [`Shared::claim_slot`]); released after [`Self::unregister`].
    _slot_lock: SlotLock,
    shared: Shared,
    /// The keys this run added to the shared allow map, exposed ports and
    /// prefix trie.
    endpoints: Vec<RunEndpoint>,
    exposed: Vec<RunPort>,
    prefixes: Vec<aya::maps::lpm_trie::Key<PrefixData>>,
    registered: bool,
    reader: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
}

/// The data of a `UNIX_PREFIXES` key: the cgroup id, then the path bytes.
type PrefixData = [u8; 8 + UNIX_PATH_MAX];

impl std::fmt::Debug for NetworkHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkHooks")
            .field("run_id", &self.run_id)
            .field("cgroup_id", &self.cgroup_id)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl NetworkHooks {
    /// Make `cgroup` a run: allow exactly `allowed` (the proxy endpoint and
    /// `network.local`) and pathname unix sockets under `unix_allowed` (the
    /// worktree and the run's temp dir), judged by text.
    pub fn attach(
        cgroup: &RunCgroup,
        run_id: &str,
        allowed: &[SocketAddr],
        unix_allowed: &[PathBuf],
    ) -> Result<Self, BpfError> {
        Self::attach_with(
            cgroup,
            run_id,
            allowed,
            &[],
            unix_allowed,
            unix::UnixMode::Prefixes,
        )
    }

    /// [`attach`](Self::attach), with the run's ports that this host's
    /// processes may reach over loopback (`exposed`, `network.expose`), and
    /// choosing how the unix hooks judge pathname destinations
    /// ([`unix::UnixMode`]; a run with the seccomp supervisor uses
    /// `Supervised`).
    ///
    /// The hooks are the build's, attached once to the build's parent cgroup
    /// ([`crate::cgroup::build_parent`]); they are checked to be attached
    /// there (re-attached if not), and `cgroup` must be its child. The run is
    /// registered before this returns, and no task of the run exists yet.
    pub fn attach_with(
        cgroup: &RunCgroup,
        run_id: &str,
        allowed: &[SocketAddr],
        exposed: &[u16],
        unix_allowed: &[PathBuf],
        unix_mode: unix::UnixMode,
    ) -> Result<Self, BpfError> {
        check_run_id(run_id)?;
        let object = OBJECT.ok_or(BpfError::ObjectMissing)?;
        if allowed.len() > MAX_ALLOWED_ENDPOINTS as usize {
            return Err(BpfError::TooManyEndpoints);
        }
        if exposed.len() > MAX_EXPOSED_PORTS as usize {
            return Err(BpfError::TooManyExposed);
        }
        ensure_bpffs()?;
        let mut shared = Shared::open_or_load(object)?;
        let parent = crate::cgroup::build_parent()?;
        if cgroup.path().parent() != Some(parent.as_path()) {
            return Err(BpfError::NotUnderParent {
                cgroup: cgroup.path().to_path_buf(),
                parent,
            });
        }
        shared.ensure_attached(&parent)?;
        if crate::kernel::Kernel::get().unix_guard {
            shared.ensure_guard()?;
        }
        let (slot, ring_fd, slot_lock) = shared.claim_slot(cgroup.id(), &parent)?;
        let map_err = |map, call| move |source| BpfError::Map { map, call, source };
        let ring = match MapData::from_fd(ring_fd)
            .and_then(|d| RingBuf::try_from(Map::RingBuf(d)))
            .map_err(map_err("DENIALS", "open"))
        {
            Ok(r) => r,
            Err(e) => {
                shared.release_slot(slot);
                return Err(e);
            }
        };
        let mut hooks = Self {
            run_id: run_id.to_owned(),
            cgroup_id: cgroup.id(),
            ring: Arc::new(Mutex::new(ring)),
            slot,
            _slot_lock: slot_lock,
            shared,
            endpoints: Vec::new(),
            exposed: Vec::new(),
            prefixes: Vec::new(),
            registered: false,
            reader: None,
            finished: false,
        };
        // From here on, dropping `hooks` unregisters the run and frees the slot.
        // What a killed run that held the slot left in the ring is not ours.
        drain(&hooks.ring, None, hooks.cgroup_id);
        hooks.register(allowed, exposed, unix_allowed, unix_mode)?;
        Ok(hooks)
    }

    /// Enter the run in the shared maps: a zeroed counter entry, its allowed
    /// endpoints, exposed ports and unix prefixes, and last its `RUNS` entry
    /// (slot and unix mode), which makes it a run for the unix hooks.
    fn register(
        &mut self,
        allowed: &[SocketAddr],
        exposed: &[u16],
        unix_allowed: &[PathBuf],
        unix_mode: unix::UnixMode,
    ) -> Result<(), BpfError> {
        let cg = self.cgroup_id;
        let reg = |map: &'static str| {
            move |e: aya::maps::MapError| BpfError::Register {
                map,
                call: "BPF_MAP_UPDATE_ELEM",
                source: io::Error::other(e),
            }
        };
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| BpfError::Register {
            map: MAP_COUNTERS,
            call: "nr_cpus",
            source: e,
        })?;
        let zero = PerCpuValues::try_from(vec![RunCounters::default(); cpus]).map_err(|e| {
            BpfError::Register {
                map: MAP_COUNTERS,
                call: "PerCpuValues",
                source: io::Error::other(e),
            }
        })?;
        self.shared
            .counters
            .insert(cg, zero, 0)
            .map_err(reg(MAP_COUNTERS))?;
        for a in allowed {
            let key = RunEndpoint {
                cgroup_id: cg,
                endpoint: endpoint_key(a),
                _pad: 0,
            };
            self.endpoints.push(key);
            self.shared
                .endpoints
                .insert(key, 1, 0)
                .map_err(reg(MAP_ALLOWED_ENDPOINTS))?;
        }
        for &port in exposed {
            let key = RunPort::new(cg, port);
            self.exposed.push(key);
            self.shared
                .exposed
                .insert(key, 1, 0)
                .map_err(reg(MAP_EXPOSED_PORTS))?;
        }
        let mut keys: Vec<UnixPrefixKey> = unix_allowed
            .iter()
            .flat_map(|d| prefix_keys(cg, d))
            .collect();
        keys.truncate(MAX_UNIX_PREFIXES as usize);
        for k in keys {
            let mut data = [0u8; 8 + UNIX_PATH_MAX];
            data[..8].copy_from_slice(&k.cgroup_id.to_ne_bytes());
            data[8..].copy_from_slice(&k.path);
            let key = aya::maps::lpm_trie::Key::new(k.prefix_len, data);
            self.prefixes.push(key);
            self.shared
                .prefixes
                .insert(&key, 1, 0)
                .map_err(reg(UNIX_PREFIXES))?;
        }
        self.registered = true;
        self.shared
            .runs
            .insert(
                cg,
                RunConfig {
                    slot: self.slot,
                    unix_mode: unix_mode.raw(),
                },
                0,
            )
            .map_err(reg(MAP_RUNS))?;
        Ok(())
    }

    /// Remove the run from the shared maps (what is already gone is fine:
    /// `gc` may have been first) and free its ring slot. Call once no task of
    /// the run is left.
    fn unregister(&mut self) -> Result<(), BpfError> {
        let mut first: Option<(&'static str, aya::maps::MapError)> = None;
        let mut note = |map, r: Result<(), aya::maps::MapError>| {
            if let Err(e) = r {
                if !is_not_found(&e) && first.is_none() {
                    first = Some((map, e));
                }
            }
        };
        if std::mem::take(&mut self.registered) {
            note(MAP_RUNS, self.shared.runs.remove(&self.cgroup_id));
        }
        for key in std::mem::take(&mut self.endpoints) {
            note(MAP_ALLOWED_ENDPOINTS, self.shared.endpoints.remove(&key));
        }
        for key in std::mem::take(&mut self.exposed) {
            note(MAP_EXPOSED_PORTS, self.shared.exposed.remove(&key));
        }
        for key in std::mem::take(&mut self.prefixes) {
            note(UNIX_PREFIXES, self.shared.prefixes.remove(&key));
        }
        note(MAP_COUNTERS, self.shared.counters.remove(&self.cgroup_id));
        // Last: the slot is free for another run once nothing of ours points at it.
        self.shared.release_slot(self.slot);
        match first {
            None => Ok(()),
            Some((map, e)) => Err(BpfError::Register {
                map,
                call: "BPF_MAP_DELETE_ELEM",
                source: io::Error::other(e),
            }),
        }
    }

    /// Start the audit reader on the current tokio runtime: every refusal the
    /// kernel reports becomes an [`Event::KernelNetwork`] in `audit` as it happens.
    /// Must be called from within a tokio runtime.
    pub fn spawn_audit_reader(&mut self, audit: Arc<AuditLog>) -> Result<(), BpfError> {
        let fd = {
            let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            ring.as_fd().try_clone_to_owned().map_err(BpfError::Watch)?
        };
        let afd = raw::watch(fd).map_err(BpfError::Watch)?;
        let ring = Arc::clone(&self.ring);
        let cgroup_id = self.cgroup_id;
        self.reader = Some(tokio::spawn(async move {
            loop {
                let Ok(mut guard) = afd.readable().await else {
                    return;
                };
                drain(&ring, Some(&audit), cgroup_id);
                guard.clear_ready();
            }
        }));
        Ok(())
    }

    /// Read the counters now (the run's entry, summed over CPUs).
    pub fn counters(&self) -> Result<Counters, BpfError> {
        let per_cpu = self
            .shared
            .counters
            .get(&self.cgroup_id, 0)
            .map_err(|source| BpfError::Map {
                map: MAP_COUNTERS,
                call: "BPF_MAP_LOOKUP_ELEM",
                source,
            })?;
        let mut c = Counters::default();
        for cpu in per_cpu.iter() {
            for (n, hook) in c.refused.iter_mut().zip(Hook::ALL) {
                *n += cpu.slots[hook as usize];
            }
            c.lost += cpu.slots[COUNTER_LOST as usize];
            c.inbound_unitemized += cpu.slots[COUNTER_INBOUND_UNITEMIZED as usize];
        }
        Ok(c)
    }

    /// Deliver the events still in the ring buffer to `audit` (also done by
    /// the reader task as they come).
    pub fn drain_into(&self, audit: &AuditLog) {
        drain(&self.ring, Some(audit), self.cgroup_id);
    }

    /// Teardown: stop the reader, drain the last events, read the counters
    /// (lost events are recorded as [`Event::KernelEventsLost`], packets
    /// from outside past those itemized as [`Event::InboundNotItemized`]), remove the
    /// run from the shared maps. Call after the run's cgroup is empty.
    pub fn finish(mut self, audit: &AuditLog) -> Result<Counters, BpfError> {
        self.finished = true;
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        drain(&self.ring, Some(audit), self.cgroup_id);
        let counters = self.counters();
        if let Ok(c) = &counters {
            if c.lost > 0 {
                audit.record(Event::KernelEventsLost { count: c.lost });
            }
            if c.inbound_unitemized > 0 {
                audit.record(Event::InboundNotItemized {
                    count: c.inbound_unitemized,
                    per_cpu: lockrun_common::INBOUND_RECORDS_PER_CPU,
                });
            }
        }
        self.unregister()?;
        counters
    }
}

impl Drop for NetworkHooks {
    fn drop(&mut self) {
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        if !self.finished {
            if let Err(e) = self.unregister() {
                tracing::warn!("unregistering run {}: {e}", self.run_id);
            }
        }
    }
}

fn is_not_found(e: &aya::maps::MapError) -> bool {
    matches!(e, aya::maps::MapError::KeyNotFound)
        || matches!(e, aya::maps::MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOENT))
}

/// The verified programs and the maps they share, pinned once per lockrun
/// build under [`SHARED_ROOT`]`/<object-hash>/`, with the links that attach
/// them to the build's parent cgroup (`link-<program>-<parent cgroup id>`).
struct Shared {
    endpoints: HashMap<MapData, RunEndpoint, u8>,
    exposed: HashMap<MapData, RunPort, u8>,
    counters: PerCpuHashMap<MapData, u64, RunCounters>,
    runs: HashMap<MapData, u64, RunConfig>,
    prefixes: LpmTrie<MapData, PrefixData, u8>,
    slot_owners: HashMap<MapData, u32, u64>,
    rings: OwnedFd,
    dir: PathBuf,
}

/// The embedded object's FNV-1a 64 (computed by build.rs).
#[cfg(not(lockrun_ebpf_missing))]
const OBJECT_HASH: &str = env!("LOCKRUN_EBPF_HASH");
#[cfg(lockrun_ebpf_missing)]
const OBJECT_HASH: &str = "none";

/// [`unix::programs_hash`], as the build script computed it.
const UNIX_PROGRAMS_HASH: &str = env!("LOCKRUN_UNIX_PROGRAMS_HASH");

/// [`guard::programs_hash`], as the build script computed it.
const GUARD_PROGRAMS_HASH: &str = env!("LOCKRUN_GUARD_PROGRAMS_HASH");

/// Bumped whenever the maps the loader makes, or what it pins, change
/// without the object or the unix programs changing.
const LAYOUT_VERSION: u32 = 3;

/// This build's name: its programs' pin directory under [`SHARED_ROOT`] and
/// (with a `build-` prefix) its parent cgroup under `<cgroup2>/lockrun/`.
/// Everything a run would reuse from an earlier run of the same build goes
/// into it: the object, the hand-assembled unix programs (with stand-in map
/// fds), the programs the loader attaches and how ([`PROGRAMS`]), and
/// `LAYOUT_VERSION`, so a lockrun that changed any of them never attaches
/// another build's programs.
#[must_use]
pub fn build_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        #[cfg(feature = "weaken-for-tests")]
        if let Some(id) = test_build_id() {
            return id;
        }
        hash_build(attached_programs())
    })
}

/// [`build_id`] of this object and these `programs`.
fn hash_build(programs: &[(&str, u32, u32)]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(OBJECT_HASH.as_bytes());
    eat(&LAYOUT_VERSION.to_le_bytes());
    for (name, prog_type, attach_type) in programs {
        eat(name.as_bytes());
        eat(&[0]);
        eat(&prog_type.to_le_bytes());
        eat(&attach_type.to_le_bytes());
    }
    // The hand-assembled unix programs, hashed by the build script
    // ([`unix::programs_hash`]).
    eat(UNIX_PROGRAMS_HASH.as_bytes());
    // The unix guard, where this kernel needs it (its shape; the offsets
    // it reads are this boot's, and so are the pins).
    if crate::kernel::Kernel::get().unix_guard {
        eat(b"guard");
        eat(GUARD_PROGRAMS_HASH.as_bytes());
    }
    format!("{h:016x}")
}

/// TEST BUILDS ONLY (`weaken-for-tests`): `LOCKRUN_TEST_BUILD_ID` names
/// this process's build instead, so a test can make the parent and pins of
/// "another build" with the real programs, for `lockrun gc` to judge.
#[cfg(feature = "weaken-for-tests")]
fn test_build_id() -> Option<String> {
    let id = std::env::var("LOCKRUN_TEST_BUILD_ID").ok()?;
    assert!(
        is_build_name(&id),
        "LOCKRUN_TEST_BUILD_ID={id:?}: a build id is ASCII letters and digits"
    );
    Some(id)
}

/// Whether `name` (under [`SHARED_ROOT`], or after `build-` in the cgroup
/// tree) is a build's: letters and digits only. A load in progress
/// (`<id>-loading-<pid>-<n>`) or a build being reaped (`<id>-reaping-<pid>`) is not.
fn is_build_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Where this build's programs are pinned.
#[must_use]
pub fn shared_dir() -> PathBuf {
    Path::new(BPFFS).join(SHARED_ROOT).join(build_id())
}

/// Loads this process has begun: each names its own loading directory.
static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Shared {
    /// Open this build's pinned programs, loading and pinning them first if
    /// no run has yet. Concurrent first runs each load into their own
    /// directory; the first rename wins and the others use its programs.
    fn open_or_load(object: &[u8]) -> Result<Self, BpfError> {
        let root = Path::new(BPFFS).join(SHARED_ROOT);
        let hash = build_id();
        let dir = root.join(hash);
        match Self::open(&dir) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(BpfError::OpenShared { path: dir, source }),
        }
        match fs::create_dir(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(BpfError::Mkdir { path: root, source }),
        }
        // One directory per load, not per process: two threads of one
        // process loading at once must not pin into (or clear) each
        // other's directory.
        let load = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = root.join(format!("{hash}-loading-{}-{load}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir(&tmp).map_err(|source| BpfError::Mkdir {
            path: tmp.clone(),
            source,
        })?;
        let guard = PinGuard(tmp.clone());
        load_object(object, &tmp)?;
        match crate::sys::rename_noreplace(&tmp, &root.join(hash)) {
            Ok(()) => std::mem::forget(guard),
            // Another first run won; its programs are the same.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                drop(guard);
            }
            Err(source) => return Err(BpfError::Pin { path: dir, source }),
        }
        Self::open(&dir).map_err(|source| BpfError::OpenShared { path: dir, source })
    }

    fn open(dir: &Path) -> io::Result<Self> {
        let map = |name: &str| {
            MapData::from_pin(dir.join(name)).map_err(|e| match e {
                aya::maps::MapError::SyscallError(s) => s.io_error,
                e => io::Error::other(e),
            })
        };
        let endpoints = HashMap::try_from(Map::HashMap(map(MAP_ALLOWED_ENDPOINTS)?))
            .map_err(io::Error::other)?;
        let exposed =
            HashMap::try_from(Map::HashMap(map(MAP_EXPOSED_PORTS)?)).map_err(io::Error::other)?;
        let counters = PerCpuHashMap::try_from(Map::PerCpuHashMap(map(MAP_COUNTERS)?))
            .map_err(io::Error::other)?;
        let runs = HashMap::try_from(Map::HashMap(map(MAP_RUNS)?)).map_err(io::Error::other)?;
        let prefixes =
            LpmTrie::try_from(Map::LpmTrie(map(UNIX_PREFIXES)?)).map_err(io::Error::other)?;
        let slot_owners =
            HashMap::try_from(Map::HashMap(map(SLOT_OWNERS)?)).map_err(io::Error::other)?;
        let rings = raw::obj_get(&dir.join(MAP_RINGS))?;
        // The programs themselves: a pinned set is whole (renamed into place
        // complete); they are opened only to attach (ensure_attached).
        if !programs_here()
            .last()
            .is_some_and(|(name, _, _)| dir.join(name).exists())
        {
            return Err(io::Error::new(io::ErrorKind::NotFound, "programs missing"));
        }
        Ok(Self {
            endpoints,
            exposed,
            counters,
            runs,
            prefixes,
            slot_owners,
            rings,
            dir: dir.to_path_buf(),
        })
    }

    /// Every program attached to `parent` by a live link pinned as
    /// `link-<program>-<parent's cgroup id>`, or attached now. A pin is only
    /// ever made for the parent it names, and never removed while that
    /// parent exists, so a run cannot detach another's link. Pins for an
    /// earlier parent at that path (removed and made again) judge nothing
    /// here and are removed.
    ///
    /// Attaching is done under the parent's lock ([`lock_parent`]), and
    /// only while no program this bpffs does not hold is attached there
    /// ([`Self::refuse_foreign`]): lockruns that see different bpf
    /// filesystems (another mount namespace, a bpffs of its own) share the
    /// parent cgroup but not the pins, and a second set of programs there,
    /// whose maps know none of the first set's runs, would refuse them
    /// every connection. The second is refused instead, before it attaches
    /// anything (`tests/second_bpffs.rs`).
    fn ensure_attached(&self, parent: &Path) -> Result<(), BpfError> {
        use std::os::unix::fs::MetadataExt as _;
        let cg = fs::File::open(parent).map_err(|source| BpfError::Mkdir {
            path: parent.to_path_buf(),
            source,
        })?;
        let parent_id = cg
            .metadata()
            .map_err(|source| BpfError::Mkdir {
                path: parent.to_path_buf(),
                source,
            })?
            .ino();
        let mut attached_now = false;
        let mut locked = None;
        for &(name, _, attach_type) in attached_programs() {
            let pin = self.dir.join(link_pin(name, parent_id));
            let live = || {
                matches!(
                    raw::obj_get(&pin).and_then(|l| raw::cgroup_link_target(l.as_fd())),
                    Ok((id, at)) if id == parent_id && at == attach_type
                )
            };
            if live() {
                continue;
            }
            if locked.is_none() {
                locked = Some(lock_parent(parent)?);
                self.refuse_foreign(cg.as_fd(), parent)?;
                // Another lockrun of this bpffs may have attached it meanwhile.
                if live() {
                    continue;
                }
            }
            let prog =
                raw::obj_get(&self.dir.join(name)).map_err(|source| BpfError::OpenShared {
                    path: self.dir.join(name),
                    source,
                })?;
            let link =
                raw::link_create(prog.as_fd(), cg.as_fd(), attach_type).map_err(|source| {
                    BpfError::RawAttach {
                        program: name,
                        source,
                    }
                })?;
            match raw::obj_pin(link.as_fd(), &pin) {
                Ok(()) => attached_now = true,
                // Another run pinned one for this parent first: checked below.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(source) => return Err(BpfError::Pin { path: pin, source }),
            }
            drop(link);
            if !live() {
                return Err(BpfError::NotAttached {
                    program: name,
                    parent: parent.to_path_buf(),
                });
            }
        }
        if attached_now {
            for n in names(&self.dir) {
                if link_parent(&n).is_some_and(|id| id != parent_id) {
                    let _ = fs::remove_file(self.dir.join(n));
                }
            }
        }
        Ok(())
    }

    /// The unix guard's programs attached by live links pinned as
    /// `link-<program>` beside them, or attached now. Unlike the cgroup
    /// hooks they are the kernel's whole (a tracing link has no cgroup):
    /// each judges only tasks of this build's runs, by `RUNS`. A link
    /// another lockrun pinned first is used; the one made here is then
    /// dropped, which detaches it.
    fn ensure_guard(&self) -> Result<(), BpfError> {
        for (_, name) in GUARD_PINS {
            let path = self.dir.join(name);
            let prog = raw::obj_get(&path).map_err(|source| BpfError::OpenShared {
                path: path.clone(),
                source,
            })?;
            let id = raw::prog_id(prog.as_fd())
                .map_err(|source| BpfError::OpenShared { path, source })?;
            let pin = self.dir.join(format!("link-{name}"));
            let live = || {
                raw::obj_get(&pin)
                    .and_then(|l| raw::link_prog_id(l.as_fd()))
                    .is_ok_and(|p| p == id)
            };
            if live() {
                continue;
            }
            // The kernel links a program to its function once: while
            // another lockrun's link, made a moment ago, is not yet pinned,
            // this one is refused (`EBUSY`). Its pin is then waited for; a
            // lockrun that died before pinning closed its link, and the
            // next try attaches.
            let waited = std::time::Instant::now();
            let link = loop {
                match raw::attach_tracing(prog.as_fd()) {
                    Ok(link) => break Some(link),
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY)
                            && waited.elapsed() < GUARD_ATTACH_WAIT =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        if live() {
                            break None;
                        }
                    }
                    Err(source) => {
                        return Err(BpfError::GuardAttach {
                            program: name,
                            source,
                        })
                    }
                }
            };
            let Some(link) = link else {
                continue;
            };
            match raw::obj_pin(link.as_fd(), &pin) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(source) => return Err(BpfError::Pin { path: pin, source }),
            }
            drop(link);
            if !live() {
                return Err(BpfError::GuardAttach {
                    program: name,
                    source: io::Error::other("its pinned link runs another program"),
                });
            }
        }
        Ok(())
    }

    /// Refuse to attach to `parent` (open as `cg`) while a program this
    /// bpffs does not hold is attached to it for one of the hooks: another
    /// set of this build's programs, loaded by a lockrun that sees another
    /// bpf filesystem, judges runs there by maps this one cannot reach.
    fn refuse_foreign(&self, cg: BorrowedFd<'_>, parent: &Path) -> Result<(), BpfError> {
        let query = |source| BpfError::Query {
            cgroup: parent.to_path_buf(),
            source,
        };
        let mut ours = Vec::new();
        for &(name, _, _) in attached_programs() {
            let path = self.dir.join(name);
            let prog = raw::obj_get(&path).map_err(|source| BpfError::OpenShared {
                path: path.clone(),
                source,
            })?;
            ours.push(
                raw::prog_id(prog.as_fd())
                    .map_err(|source| BpfError::OpenShared { path, source })?,
            );
        }
        for &(name, _, attach_type) in attached_programs() {
            let attached = raw::prog_query(cg, attach_type).map_err(query)?;
            if attached.iter().any(|id| !ours.contains(id)) {
                return Err(BpfError::SecondProgramSet {
                    parent: parent.to_path_buf(),
                    program: name,
                });
            }
        }
        Ok(())
    }

    /// Claim a ring slot for the run in `cgroup_id` and open its ring
    /// (created and put in `RINGS` the first time the slot is used): the
    /// first slot whose lock ([`Self::lock_slot`]) no live lockrun holds,
    /// and whose last owner, if `SLOT_OWNERS` still names one, left no
    /// process behind.
    ///
    /// A lockrun holds its slot's lock from before it claims the slot until
    /// after it releases it, and the kernel lets go of a lock only when its
    /// holder is gone. So a slot whose lock is free but which `SLOT_OWNERS`
    /// still gives to a run is a killed lockrun's: it is taken over at once
    /// if that run's cgroup (under `parent`) is gone or empty — its
    /// registration is forgotten, as `lockrun gc` does — and left to gc
    /// while processes of it live on (the hooks still record their
    /// refusals in its ring). A run being set up holds its lock though its
    /// cgroup is still empty, and a run tearing down though its cgroup is
    /// gone: neither is ever taken over.
    fn claim_slot(
        &mut self,
        cgroup_id: u64,
        parent: &Path,
    ) -> Result<(u32, OwnedFd, SlotLock), BpfError> {
        const BPF_NOEXIST: u64 = 1;
        let update_err = |e| BpfError::Register {
            map: SLOT_OWNERS,
            call: "BPF_MAP_UPDATE_ELEM",
            source: io::Error::other(e),
        };
        for slot in 0..MAX_RING_SLOTS {
            let Some(lock) = self.lock_slot(slot)? else {
                continue;
            };
            match self.slot_owners.get(&slot, 0) {
                Ok(owner) => {
                    if !self.take_over(slot, owner, parent) {
                        continue;
                    }
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(BpfError::Register {
                        map: SLOT_OWNERS,
                        call: "BPF_MAP_LOOKUP_ELEM",
                        source: io::Error::other(e),
                    })
                }
            }
            match self.slot_owners.insert(slot, cgroup_id, BPF_NOEXIST) {
                Ok(()) => {}
                // Only a lock holder writes a slot: none can be here.
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::EEXIST) =>
                {
                    continue
                }
                Err(e) => return Err(update_err(e)),
            }
            return match self.slot_ring(slot) {
                Ok(fd) => Ok((slot, fd, lock)),
                Err(e) => {
                    self.release_slot(slot);
                    Err(e)
                }
            };
        }
        Err(BpfError::Register {
            map: SLOT_OWNERS,
            call: "claim a ring slot",
            source: io::Error::other(format!(
                "all {MAX_RING_SLOTS} slots are held, by running lockruns or by runs whose \
                 lockrun was killed and whose processes live on (`lockrun gc` reaps those)"
            )),
        })
    }

    /// The lock of `slot`: an exclusive `flock` on the directory
    /// `slot-<slot>` beside the rings (made the first time), or `None` when
    /// another lockrun holds it. In bpffs, which no run can see
    /// ([`crate::fs::HIDDEN_FS`]): a command cannot hold a slot.
    fn lock_slot(&self, slot: u32) -> Result<Option<SlotLock>, BpfError> {
        use nix::fcntl::{Flock, FlockArg};
        let path = self.dir.join(format!("slot-{slot}"));
        let open = || fs::File::open(&path);
        let dir = match open() {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match fs::create_dir(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(BpfError::Mkdir { path, source }),
                }
                open().map_err(|source| BpfError::OpenShared {
                    path: path.clone(),
                    source,
                })?
            }
            Err(source) => return Err(BpfError::OpenShared { path, source }),
        };
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(lock)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(BpfError::OpenShared {
                path,
                source: io::Error::from(e),
            }),
        }
    }

    /// With `slot`'s lock held: whether its last owner, the run in
    /// `owner`, whose lockrun is gone, can give it up — its cgroup under
    /// `parent` is gone or empty — and if so, forget that run in the
    /// shared maps (its slot freed with it). A cgroup that cannot be
    /// judged keeps its slot.
    fn take_over(&mut self, slot: u32, owner: u64, parent: &Path) -> bool {
        use crate::cgroup::Occupancy;
        match crate::cgroup::occupancy(parent, owner) {
            Ok(Occupancy::Gone | Occupancy::Empty) => {
                tracing::debug!(
                    "ring slot {slot}: taken over from the killed run in cgroup {owner}"
                );
                forget(self, &[owner]);
                true
            }
            Ok(Occupancy::Populated) => false,
            Err(e) => {
                tracing::debug!("ring slot {slot}: the cgroup of its killed run {owner}: {e}");
                false
            }
        }
    }

    /// The ring of a slot this process holds: `ring-<slot>`, or a new one.
    fn slot_ring(&self, slot: u32) -> Result<OwnedFd, BpfError> {
        let path = self.dir.join(format!("ring-{slot}"));
        match raw::obj_get(&path) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(BpfError::OpenShared { path, source }),
        }
        let fd = new_ring()?;
        // Into RINGS first (an RCU grace period, once per slot), then pinned:
        // a pin always names the ring in its slot.
        raw::map_update_u32_u32(self.rings.as_fd(), slot, fd.as_raw_fd().cast_unsigned()).map_err(
            |source| BpfError::Register {
                map: MAP_RINGS,
                call: "BPF_MAP_UPDATE_ELEM",
                source,
            },
        )?;
        raw::obj_pin(fd.as_fd(), &path).map_err(|source| BpfError::Pin { path, source })?;
        Ok(fd)
    }

    fn release_slot(&mut self, slot: u32) {
        if let Err(e) = self.slot_owners.remove(&slot) {
            if !is_not_found(&e) {
                tracing::warn!("releasing ring slot {slot}: {e}");
            }
        }
    }
}

/// The loader-only map of which run holds which ring slot.
const SLOT_OWNERS: &str = "SLOT_OWNERS";

/// A ring slot's lock ([`Shared::lock_slot`]).
type SlotLock = nix::fcntl::Flock<fs::File>;
/// The loader-created trie of the runs' unix socket directories.
const UNIX_PREFIXES: &str = "UNIX_PREFIXES";

fn new_ring() -> Result<OwnedFd, BpfError> {
    raw::map_create(&raw::MapSpec {
        name: "DENIALS",
        map_type: raw::MAP_TYPE_RINGBUF,
        key_size: 0,
        value_size: 0,
        max_entries: DENIALS_RING_BYTES,
        flags: 0,
        inner: None,
    })
    .map_err(|source| BpfError::RawMapCreate {
        map: "DENIALS",
        source,
    })
}

/// This build's shared maps, if any run has loaded them.
fn open_shared() -> Result<Option<Shared>, BpfError> {
    let dir = shared_dir();
    match Shared::open(&dir) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(BpfError::OpenShared { path: dir, source }),
    }
}

/// The cgroup ids of the runs registered in the shared maps (`RUNS`).
pub fn registered_runs() -> Result<Vec<u64>, BpfError> {
    Ok(open_shared()?
        .map(|s| s.runs.keys().filter_map(Result::ok).collect())
        .unwrap_or_default())
}

/// gc: remove the runs of these cgroups (reaped: their processes are gone)
/// from the shared maps and free their ring slots.
pub fn forget_runs(cgroup_ids: &[u64]) -> Result<(), BpfError> {
    if cgroup_ids.is_empty() {
        return Ok(());
    }
    if let Some(mut shared) = open_shared()? {
        forget(&mut shared, cgroup_ids);
    }
    Ok(())
}

/// `lockrun gc`: forget every registered run whose cgroup no longer exists
/// (e.g. removed by hand after lockrun was killed), and remove abandoned
/// program loads. Returns how many runs. A run in its teardown (cgroup
/// removed, hooks not yet finished) would lose its counts: only the explicit
/// gc command sweeps this broadly; a run's start-up sweep forgets exactly the
/// runs it reaped ([`forget_runs`]).
pub fn forget_gone_runs() -> Result<usize, BpfError> {
    remove_abandoned_loads();
    let Some(mut shared) = open_shared()? else {
        return Ok(0);
    };
    // Keys first, live cgroups second: a run registers after its cgroup
    // exists, so a key whose cgroup is missing from the later listing is gone.
    let mut gone: Vec<u64> = shared
        .slot_owners
        .iter()
        .filter_map(Result::ok)
        .map(|(_, cg)| cg)
        .collect();
    gone.extend(shared.runs.keys().filter_map(Result::ok));
    gone.extend(shared.counters.keys().filter_map(Result::ok));
    gone.extend(
        shared
            .endpoints
            .keys()
            .filter_map(Result::ok)
            .map(|k| k.cgroup_id),
    );
    gone.extend(
        shared
            .exposed
            .keys()
            .filter_map(Result::ok)
            .map(|k| k.cgroup_id),
    );
    gone.extend(
        shared
            .prefixes
            .keys()
            .filter_map(Result::ok)
            .map(|k| prefix_cgroup(&k)),
    );
    let live = crate::cgroup::live_run_cgroup_ids()?;
    gone.sort_unstable();
    gone.dedup();
    gone.retain(|cg| !live.contains(cg));
    forget(&mut shared, &gone);
    Ok(gone.len())
}

fn prefix_cgroup(k: &aya::maps::lpm_trie::Key<PrefixData>) -> u64 {
    let d = k.data();
    u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

fn forget(shared: &mut Shared, gone: &[u64]) {
    let endpoints: Vec<RunEndpoint> = shared.endpoints.keys().filter_map(Result::ok).collect();
    let exposed: Vec<RunPort> = shared.exposed.keys().filter_map(Result::ok).collect();
    let prefixes: Vec<_> = shared.prefixes.keys().filter_map(Result::ok).collect();
    let owners: Vec<(u32, u64)> = shared.slot_owners.iter().filter_map(Result::ok).collect();
    for cg in gone {
        let _ = shared.runs.remove(cg);
        let _ = shared.counters.remove(cg);
        for k in endpoints.iter().filter(|k| k.cgroup_id == *cg) {
            let _ = shared.endpoints.remove(k);
        }
        for k in exposed.iter().filter(|k| k.cgroup_id == *cg) {
            let _ = shared.exposed.remove(k);
        }
        for k in prefixes.iter().filter(|k| prefix_cgroup(k) == *cg) {
            let _ = shared.prefixes.remove(k);
        }
    }
    for (slot, cg) in owners {
        if gone.contains(&cg) {
            shared.release_slot(slot);
        }
    }
}

/// Remove `<hash>-loading-<pid>-<n>` directories whose loader is gone
/// (killed while loading the programs; a finished load renames its
/// directory).
fn remove_abandoned_loads() {
    let root = Path::new(BPFFS).join(SHARED_ROOT);
    let Ok(entries) = fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.rsplit_once("-loading-"))
            .and_then(|(_, load)| load.split('-').next()?.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// What `lockrun gc` did about another lockrun build's parent cgroup and
/// pinned programs ([`reap_other_builds`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherBuild {
    /// Its parent cgroup is removed, and its pinned programs, maps, rings
    /// and links with it: the kernel frees them.
    Reaped { id: String },
    /// Run cgroups are still in its parent (`rmdir`: `EBUSY`): nothing was
    /// touched.
    InUse { id: String },
    /// A run of it made the parent again and attached while gc reaped: its
    /// programs stay (put back where they were, when nothing took their
    /// place) and a later gc removes them.
    Deferred { id: String },
}

/// Under [`SHARED_ROOT`]: `<id>-reaping-<pid>`, a build's pins moved out of
/// its runs' way by a gc.
const REAPING: &str = "-reaping-";

/// `lockrun gc`: remove every other build's parent cgroup and pinned
/// programs where none of its runs is left. Each build's programs pin
/// ~256 KiB of kernel memory per ring slot ever used, and a machine that
/// upgrades lockrun (or CI that builds each commit) makes a new build each
/// time.
///
/// Safe beside runs of that build, because a run makes its cgroup (and the
/// parent, when missing) before it opens the pins, and attaches by links
/// named after the parent's inode:
/// 1. `rmdir` the parent. It fails (`EBUSY`) while any run cgroup is in it:
///    then nothing is touched. A run starting now makes a new parent, with a
///    new inode, whose links are not among the old ones.
/// 2. Rename the pin directory to `<id>-reaping-<pid>`: from here on no run
///    can pin anything into it (runs pin into `<id>/`, and one that finds it
///    missing loads its own programs; one that opened it just before fails
///    closed: no program to attach, or no registration the attached
///    programs know).
/// 3. If a link in it is named after the parent as it is now — a run made
///    the parent again and attached between 1 and 2 — its hooks hang on that
///    pin: the directory goes back (`RENAME_NOREPLACE`) and stays. Otherwise
///    it is removed, and with the last reference to each program, map and
///    link, the kernel frees them.
///
/// Moved directories a gc left (killed between 2 and 3, or deferred by 3)
/// are judged by 3 again.
pub fn reap_other_builds() -> Result<Vec<OtherBuild>, BpfError> {
    use crate::cgroup::{build_parent_of, build_parents};
    let root = Path::new(BPFFS).join(SHARED_ROOT);
    let mut ids: std::collections::BTreeSet<String> =
        build_parents()?.into_iter().map(|(id, _)| id).collect();
    ids.extend(names(&root));
    ids.retain(|id| is_build_name(id));
    ids.remove(build_id());

    let mut out = Vec::new();
    let mut judged = Vec::new();
    for id in ids {
        let parent = build_parent_of(&id)?;
        match fs::remove_dir(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                out.push(OtherBuild::InUse { id });
                continue;
            }
            Err(source) => {
                return Err(crate::cgroup::CgroupError::Rmdir {
                    path: parent,
                    source,
                }
                .into())
            }
        }
        let moved = format!("{id}{REAPING}{}", std::process::id());
        match crate::sys::rename_noreplace(&root.join(&id), &root.join(&moved)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                out.push(OtherBuild::Reaped { id });
                continue;
            }
            Err(source) => {
                return Err(BpfError::Unpin {
                    path: root.join(&id),
                    source,
                })
            }
        }
        judged.push(moved.clone());
        out.push(if remove_moved(&root, &moved, &id, &parent)? {
            OtherBuild::Reaped { id }
        } else {
            OtherBuild::Deferred { id }
        });
    }
    for name in names(&root) {
        let Some((id, _)) = name.split_once(REAPING) else {
            continue;
        };
        if judged.contains(&name) || !is_build_name(id) {
            continue;
        }
        remove_moved(&root, &name, id, &build_parent_of(id)?)?;
    }
    Ok(out)
}

/// Step 3 of [`reap_other_builds`]: remove the moved pins `root/moved` of
/// build `id`, unless one of its links is named after `parent` as it is now
/// (then put them back at `root/id` when that is free). Whether it removed them.
fn remove_moved(root: &Path, moved: &str, id: &str, parent: &Path) -> Result<bool, BpfError> {
    use std::os::unix::fs::MetadataExt as _;
    let path = root.join(moved);
    if let Ok(md) = fs::metadata(parent) {
        if names(&path)
            .iter()
            .any(|n| link_parent(n) == Some(md.ino()))
        {
            let _ = crate::sys::rename_noreplace(&root.join(moved), &root.join(id));
            return Ok(false);
        }
    }
    match fs::remove_dir_all(&path) {
        Ok(()) => Ok(true),
        // Another gc removed it first, by the same judgement.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(BpfError::Unpin { path, source }),
    }
}

/// The programs attached to `cgroup` itself, by the name of the hook of
/// this build they would be ([`PROGRAMS`]), in the order they run: what the
/// kernel says, whatever any bpffs holds. For tests and diagnosis.
pub fn programs_attached_to(cgroup: &Path) -> Result<Vec<(&'static str, Vec<u32>)>, BpfError> {
    let cg = fs::File::open(cgroup).map_err(|source| BpfError::OpenShared {
        path: cgroup.to_path_buf(),
        source,
    })?;
    programs_here()
        .map(|(name, _, attach_type)| {
            raw::prog_query(cg.as_fd(), attach_type)
                .map(|ids| (name, ids))
                .map_err(|source| BpfError::Query {
                    cgroup: cgroup.to_path_buf(),
                    source,
                })
        })
        .collect()
}

/// How long a lockrun waits for another to finish attaching to the parent.
const PARENT_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The lock of the build's parent cgroup `parent`, held while programs are
/// attached to it: an exclusive `flock` on its directory. On the cgroup,
/// not in bpffs: lockruns that see different bpf filesystems share the
/// cgroup. A process of a run could hold it too (it may read the cgroup
/// tree), but only a lockrun that finds no live link of its own waits for
/// it, and then for [`PARENT_LOCK_TIMEOUT`] at most.
fn lock_parent(parent: &Path) -> Result<nix::fcntl::Flock<fs::File>, BpfError> {
    use nix::fcntl::{Flock, FlockArg};
    let start = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(100);
    loop {
        let dir = fs::File::open(parent).map_err(|source| BpfError::Mkdir {
            path: parent.to_path_buf(),
            source,
        })?;
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if start.elapsed() < PARENT_LOCK_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            Err((_, e)) => {
                return Err(BpfError::ParentLocked {
                    parent: parent.to_path_buf(),
                    source: io::Error::from(e),
                })
            }
        }
    }
}

/// The pin of the link attaching `program` to the parent cgroup whose id
/// (inode) is `parent_id`: `link-<program>-<parent id>`.
fn link_pin(program: &str, parent_id: u64) -> String {
    format!("link-{program}-{parent_id}")
}

/// The parent cgroup id a [`link_pin`] name is for; `None` for any other name.
fn link_parent(name: &str) -> Option<u64> {
    name.strip_prefix("link-")?.rsplit_once('-')?.1.parse().ok()
}

/// The entry names in `dir` (empty when it cannot be listed).
fn names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// The programs: name (the object's section, or a hand-assembled unix hook),
/// program type, attach type.
const PROGRAMS: [(&str, u32, u32); 9] = [
    (
        "connect4",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_INET4_CONNECT,
    ),
    (
        "connect6",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_INET6_CONNECT,
    ),
    (
        "sendmsg4",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_UDP4_SENDMSG,
    ),
    (
        "sendmsg6",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_UDP6_SENDMSG,
    ),
    (
        "sock_create",
        raw::PROG_TYPE_CGROUP_SOCK,
        raw::ATTACH_INET_SOCK_CREATE,
    ),
    (
        "ingress",
        raw::PROG_TYPE_CGROUP_SKB,
        raw::ATTACH_INET_INGRESS,
    ),
    ("egress", raw::PROG_TYPE_CGROUP_SKB, raw::ATTACH_INET_EGRESS),
    (
        "connect_unix",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_UNIX_CONNECT,
    ),
    (
        "sendmsg_unix",
        raw::PROG_TYPE_CGROUP_SOCK_ADDR,
        raw::ATTACH_UNIX_SENDMSG,
    ),
];

/// The programs a run's hooks are: every one of [`PROGRAMS`] (all are
/// loaded and pinned), except in a TEST BUILD (`weaken-for-tests`) told by
/// `LOCKRUN_TEST_WEAKEN` to attach fewer: `no-ingress`, or
/// `no-packet-programs` (neither `ingress` nor `egress`), which is how
/// `tests/proxy_e2e.rs` shows what `egress` stops on its own. The build id
/// hashes this list, so a weakened build never shares the real one's parent.
fn attached_programs() -> &'static [(&'static str, u32, u32)] {
    static ATTACHED: std::sync::OnceLock<Vec<(&str, u32, u32)>> = std::sync::OnceLock::new();
    ATTACHED.get_or_init(|| {
        #[cfg(feature = "weaken-for-tests")]
        let left_out: &[&str] = match std::env::var("LOCKRUN_TEST_WEAKEN").as_deref() {
            Ok("no-ingress") => &["ingress"],
            Ok("no-packet-programs") => &["ingress", "egress"],
            _ => &[],
        };
        #[cfg(not(feature = "weaken-for-tests"))]
        let left_out: &[&str] = &[];
        programs_here()
            .filter(|(name, _, _)| !left_out.contains(name))
            .collect()
    })
}

/// The programs this kernel takes: [`PROGRAMS`], but the unix hooks where
/// the kernel has no such hook (before Linux 6.7, [`crate::kernel`]),
/// whose promise is then the seccomp supervisor's alone, or a gap.
fn programs_here() -> impl Iterator<Item = (&'static str, u32, u32)> {
    let unix_hooks = crate::kernel::Kernel::get().unix_hooks;
    PROGRAMS.into_iter().filter(move |(_, _, attach)| {
        unix_hooks || !matches!(*attach, raw::ATTACH_UNIX_CONNECT | raw::ATTACH_UNIX_SENDMSG)
    })
}

/// Parse the embedded object, create its maps (`RINGS` with a ring buffer as
/// its inner-map template) and the loader's `SLOT_OWNERS` and
/// `UNIX_PREFIXES`, relocate and load the object's programs, assemble and
/// load the unix hooks, and pin programs and maps into `dir`.
///
/// Without aya's `EbpfLoader`: its constructor parses /sys/kernel/btf/vmlinux
/// (~18 ms here), which programs without CO-RE relocations never need. The
/// programs load with raw `BPF_PROG_LOAD`s, without BTF (no func/line info).
#[allow(clippy::too_many_lines)] // one load, in order
fn load_object(object: &[u8], dir: &Path) -> Result<(), BpfError> {
    let mut obj = aya_obj::Object::parse(object).map_err(BpfError::Parse)?;
    let pin = |fd: BorrowedFd<'_>, name: &str| {
        let path = dir.join(name);
        raw::obj_pin(fd, &path).map_err(|source| BpfError::Pin { path, source })
    };
    let ring_template = new_ring()?;
    let owners = raw::map_create(&raw::MapSpec {
        name: SLOT_OWNERS,
        map_type: raw::MAP_TYPE_HASH,
        key_size: 4,
        value_size: 8,
        max_entries: MAX_RING_SLOTS,
        flags: 0,
        inner: None,
    })
    .map_err(|source| BpfError::RawMapCreate {
        map: SLOT_OWNERS,
        source,
    })?;
    pin(owners.as_fd(), SLOT_OWNERS)?;
    let prefixes = raw::map_create(&raw::MapSpec {
        name: UNIX_PREFIXES,
        map_type: raw::MAP_TYPE_LPM_TRIE,
        key_size: std::mem::size_of::<UnixPrefixKey>() as u32,
        value_size: 1,
        max_entries: MAX_UNIX_PREFIXES_ALL_RUNS,
        flags: raw::F_NO_PREALLOC,
        inner: None,
    })
    .map_err(|source| BpfError::RawMapCreate {
        map: UNIX_PREFIXES,
        source,
    })?;
    pin(prefixes.as_fd(), UNIX_PREFIXES)?;
    let mut fds: Vec<(&'static str, OwnedFd, aya_obj::Map)> = Vec::new();
    for name in [
        MAP_ALLOWED_ENDPOINTS,
        MAP_EXPOSED_PORTS,
        MAP_COUNTERS,
        MAP_RUNS,
        MAP_RINGS,
    ] {
        let m = obj.maps.remove(name).ok_or(BpfError::Missing(name))?;
        let fd = if name == MAP_RINGS {
            raw::map_create(&raw::MapSpec {
                name,
                map_type: raw::MAP_TYPE_ARRAY_OF_MAPS,
                key_size: m.key_size(),
                value_size: m.value_size(),
                max_entries: m.max_entries(),
                flags: 0,
                inner: Some(ring_template.as_fd()),
            })
            .map_err(|source| BpfError::RawMapCreate { map: name, source })?
        } else {
            let data = MapData::create(m.clone(), name, None)
                .map_err(|source| BpfError::MapCreate { map: name, source })?;
            data.fd()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| BpfError::RawMapCreate { map: name, source })?
        };
        pin(fd.as_fd(), name)?;
        fds.push((name, fd, m));
    }
    if let Some(extra) = obj.maps.keys().next() {
        // Global data (.data/.rodata/.bss) or a map this lockrun does not know.
        return Err(BpfError::UnknownMap(extra.clone()));
    }
    let text_sections = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_maps(
        fds.iter()
            .map(|(name, fd, m)| (*name, fd.as_fd().as_raw_fd(), m)),
        &text_sections,
    )
    .map_err(BpfError::Relocate)?;
    obj.relocate_calls(&text_sections)
        .map_err(BpfError::Relocate)?;
    let fd_of = |name: &str| {
        fds.iter()
            .find(|(n, _, _)| *n == name)
            .map_or(-1, |(_, fd, _)| fd.as_raw_fd())
    };
    let unix_maps = unix::UnixMaps {
        runs: fd_of(MAP_RUNS),
        unix_prefixes: prefixes.as_raw_fd(),
        rings: fd_of(MAP_RINGS),
        counters: fd_of(MAP_COUNTERS),
    };
    for (name, prog_type, attach_type) in programs_here() {
        let insns: Vec<u64> = match name {
            "connect_unix" => unix::program(Hook::ConnectUnix, &unix_maps),
            "sendmsg_unix" => unix::program(Hook::SendmsgUnix, &unix_maps),
            _ => {
                let prog = obj.programs.get(name).ok_or(BpfError::Missing(name))?;
                let function = obj
                    .functions
                    .get(&prog.function_key())
                    .ok_or(BpfError::Missing(name))?;
                function
                    .instructions
                    .iter()
                    .copied()
                    .map(encode_insn)
                    .collect()
            }
        };
        let fd = raw::prog_load(prog_type, &insns, attach_type, name, c"GPL").map_err(
            |(source, log)| BpfError::RawLoad {
                program: name,
                source,
                log,
            },
        )?;
        pin(fd.as_fd(), name)?;
    }
    if crate::kernel::Kernel::get().unix_guard {
        for (name, fd) in load_guard(&unix_maps)? {
            pin(fd.as_fd(), name)?;
        }
    }
    Ok(())
}

/// The names the unix guard's programs are pinned by (their links:
/// `link-<name>`), by hook.
const GUARD_PINS: [(Hook, &str); 2] = [
    (Hook::GuardConnectUnix, "guard_connect_unix"),
    (Hook::GuardSendUnix, "guard_send_unix"),
];

/// The structs whose members the guard reads ([`guard_target`]).
const GUARD_STRUCTS: [&str; 4] = ["socket", "sock", "unix_sock", "unix_address"];

/// This kernel's BTF, as far as the guard reads it.
fn guard_btf() -> io::Result<btf::Btf> {
    btf::Btf::of_kernel(&guard::FUNCTIONS.map(|(_, f)| f), &GUARD_STRUCTS)
}

/// The vmlinux BTF ids of the guard's functions ([`guard::FUNCTIONS`]) and
/// the struct offsets its programs read; `None` where this kernel's BTF
/// lacks one (or there is none).
fn guard_target(btf: &btf::Btf) -> Option<([u32; 2], guard::Layout)> {
    let ids = [
        btf.func(guard::FUNCTIONS[0].1)?,
        btf.func(guard::FUNCTIONS[1].1)?,
    ];
    let layout = guard::Layout {
        socket_sk: btf.offset("socket", "sk")?,
        sock_type: btf.offset("sock", "sk_type")?,
        unix_peer: btf.offset("unix_sock", "peer")?,
        unix_addr: btf.offset("unix_sock", "addr")?,
        addr_len: btf.offset("unix_address", "len")?,
        addr_name: btf.offset("unix_address", "name")?,
    };
    Some((ids, layout))
}

/// Whether lockrun's unix guard can be loaded here ([`guard`]): the
/// kernel's BTF names its functions and structs, and a `fmod_ret` program
/// on each function loads (BPF trampolines; some kernels refuse every one).
/// Asked at every run's start on a kernel without the unix hooks, so the
/// answer yes is kept for the boot: the probe program stays pinned
/// ([`GUARD_PROBE`]), and reading the kernel's BTF is skipped after.
#[must_use]
pub fn unix_guard_loads() -> bool {
    /// `r0 = 0; exit`: let the function decide.
    const PASS: [u64; 2] = [0xb7, 0x95];
    let kept = Path::new(BPFFS).join(SHARED_ROOT).join(GUARD_PROBE);
    if raw::obj_get(&kept).is_ok() {
        return true;
    }
    let Some((ids, _)) = guard_btf().ok().as_ref().and_then(guard_target) else {
        return false;
    };
    let mut probes = Vec::new();
    for id in ids {
        match raw::prog_load_fmod_ret(&PASS, id, "lockrun_probe", false) {
            Ok(fd) => probes.push(fd),
            Err(_) => return false,
        }
    }
    // Kept where bpffs is already there (it is mounted later otherwise).
    if let Some(fd) = probes.first() {
        let _ = fs::create_dir(kept.parent().unwrap_or(Path::new(BPFFS)));
        let _ = raw::obj_pin(fd.as_fd(), &kept);
    }
    true
}

/// How long a lockrun waits for the unix guard's link another lockrun has
/// just made to be pinned ([`Shared::ensure_guard`]).
const GUARD_ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Under [`SHARED_ROOT`]: the pinned probe that says the unix guard loads
/// on this boot's kernel ([`unix_guard_loads`]); no build's, never reaped.
const GUARD_PROBE: &str = "unix-guard-probe";

/// Assemble and load the guard's programs with the shared maps.
fn load_guard(maps: &unix::UnixMaps) -> Result<Vec<(&'static str, OwnedFd)>, BpfError> {
    let btf = guard_btf().map_err(|source| BpfError::RawLoad {
        program: "guard_connect_unix",
        source,
        log: String::new(),
    })?;
    let (ids, layout) = guard_target(&btf).ok_or_else(|| BpfError::RawLoad {
        program: "guard_connect_unix",
        source: io::Error::other(
            "the kernel's BTF lacks a function or struct member the guard reads",
        ),
        log: String::new(),
    })?;
    let mut out = Vec::new();
    for ((hook, name), id) in GUARD_PINS.into_iter().zip(ids) {
        let insns = guard::program(hook, maps, &layout);
        let fd = raw::prog_load_fmod_ret(&insns, id, name, true).map_err(|(source, log)| {
            BpfError::RawLoad {
                program: name,
                source,
                log,
            }
        })?;
        out.push((name, fd));
    }
    Ok(out)
}

/// One instruction in the kernel's `struct bpf_insn` layout (little endian:
/// opcode, dst/src registers, offset, immediate).
fn encode_insn(i: aya_obj::generated::bpf_insn) -> u64 {
    let regs = (i.dst_reg() & 0xf) | ((i.src_reg() & 0xf) << 4);
    u64::from(i.code)
        | (u64::from(regs) << 8)
        | (u64::from(i.off.cast_unsigned()) << 16)
        | (u64::from(i.imm.cast_unsigned()) << 32)
}

/// Removes a half-built pin dir (a load that failed).
struct PinGuard(PathBuf);

impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Deliver the run's records to `audit` (`None`: discard); a record of
/// another cgroup (a killed run that held the slot before) is dropped.
fn drain(ring: &Ring, audit: Option<&AuditLog>, cgroup_id: u64) {
    let mut ring = ring.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(item) = ring.next() {
        if let (Some(audit), Some((cg, ev))) = (audit, decode_event(&item)) {
            if cg == cgroup_id {
                audit.record(ev);
            }
        }
    }
}

/// A ring-buffer record → its run's cgroup id and the audit event: an
/// abstract unix name a task of the run named itself, refused where the
/// supervisor judges them (no Landlock scoping), is a scope refusal, as
/// Landlock's would be; any other a [`KernelNetEvent`].
#[must_use]
pub fn decode_event(bytes: &[u8]) -> Option<(u64, Event)> {
    let d = bytemuck_read(bytes)?;
    if d.family == AF_UNIX && d.path[0] == 0 && d.path.iter().any(|b| *b != 0) {
        let end = d.path.iter().rposition(|b| *b != 0).map_or(1, |i| i + 1);
        let name = String::from_utf8_lossy(&d.path[1..end]).into_owned();
        let hook =
            Hook::from_u32(d.hook).map_or_else(|| d.hook.to_string(), |h| h.name().to_owned());
        let comm_end = d.comm.iter().position(|&b| b == 0).unwrap_or(d.comm.len());
        return Some((
            d.cgroup_id,
            Event::Scope(ScopeEvent {
                pid: d.tgid,
                comm: String::from_utf8_lossy(&d.comm[..comm_end]).into_owned(),
                raw: format!(
                    "lockrun's {hook} refused a connect or send to abstract unix socket @{name} \
                     named by a task of the run itself (no Landlock scoping here)"
                ),
                target: ScopeTarget::AbstractUnixSocket { name },
            }),
        ));
    }
    decode(bytes).map(|k| (k.cgroup_id, Event::KernelNetwork(k)))
}

/// A ring-buffer record → the audit event.
#[must_use]
pub fn decode(bytes: &[u8]) -> Option<KernelNetEvent> {
    if bytes.len() < std::mem::size_of::<Denial>() {
        return None;
    }
    // SAFETY-free copy: Denial is Pod; read it unaligned from the byte slice.
    let d: Denial = bytemuck_read(bytes)?;
    let hook = Hook::from_u32(d.hook).map_or_else(|| d.hook.to_string(), |h| h.name().to_owned());
    let comm_end = d.comm.iter().position(|&b| b == 0).unwrap_or(d.comm.len());
    let comm = String::from_utf8_lossy(&d.comm[..comm_end]).into_owned();
    let (family, destination) = match d.family {
        AF_UNIX => {
            let end = d.path.iter().position(|&b| b == 0).unwrap_or(d.path.len());
            (
                "unix",
                Destination::Unix(String::from_utf8_lossy(&d.path[..end]).into_owned()),
            )
        }
        AF_INET6 => (
            "inet6",
            Destination::Inet(SocketAddr::new(
                std::net::Ipv6Addr::from(d.addr).into(),
                d.port,
            )),
        ),
        _ => (
            "inet",
            Destination::Inet(SocketAddr::new(
                std::net::Ipv4Addr::new(d.addr[0], d.addr[1], d.addr[2], d.addr[3]).into(),
                d.port,
            )),
        ),
    };
    Some(KernelNetEvent {
        pid: d.pid,
        tgid: d.tgid,
        comm,
        cgroup_id: d.cgroup_id,
        hook,
        family: family.to_owned(),
        protocol: protocol_name(d.family, d.sock_type, d.protocol),
        destination,
        target_absent: false,
        direction: if d.hook == Hook::Ingress as u32 {
            Direction::Inbound
        } else {
            Direction::Outbound
        },
        local_port: d.local_port,
    })
}

fn protocol_name(family: u16, sock_type: u32, protocol: u32) -> String {
    const IPPROTO_ICMP: u32 = 1;
    const IPPROTO_TCP: u32 = 6;
    const IPPROTO_UDP: u32 = 17;
    const IPPROTO_ICMPV6: u32 = 58;
    const IPPROTO_SCTP: u32 = 132;
    const IPPROTO_UDPLITE: u32 = 136;
    const IPPROTO_MPTCP: u32 = 262;
    const SOCK_RAW: u32 = 3;
    if family == AF_UNIX {
        return match sock_type {
            1 => "unix_stream".into(),
            2 => "unix_dgram".into(),
            5 => "unix_seqpacket".into(),
            t => format!("unix_type_{t}"),
        };
    }
    let name = match protocol {
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_UDP => "udp".into(),
        IPPROTO_ICMP | IPPROTO_ICMPV6 => "icmp".into(),
        IPPROTO_SCTP => "sctp".into(),
        IPPROTO_UDPLITE => "udplite".into(),
        IPPROTO_MPTCP => "mptcp".into(),
        p => p.to_string(),
    };
    if sock_type == SOCK_RAW {
        format!("raw {name}")
    } else {
        name
    }
}

/// Read a `Denial` from the start of `bytes` without alignment assumptions.
fn bytemuck_read(bytes: &[u8]) -> Option<Denial> {
    let b = bytes.get(..std::mem::size_of::<Denial>())?;
    let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let mut addr = [0u8; 16];
    addr.copy_from_slice(&b[32..48]);
    let mut comm = [0u8; 16];
    comm.copy_from_slice(&b[48..64]);
    let mut path = [0u8; UNIX_PATH_MAX];
    path.copy_from_slice(&b[64..64 + UNIX_PATH_MAX]);
    let mut cg = [0u8; 8];
    cg.copy_from_slice(&b[0..8]);
    Some(Denial {
        cgroup_id: u64::from_ne_bytes(cg),
        pid: u32_at(8),
        tgid: u32_at(12),
        hook: u32_at(16),
        sock_type: u32_at(20),
        protocol: u32_at(24),
        family: u16_at(28),
        port: u16_at(30),
        addr,
        comm,
        path,
        local_port: u16_at(172),
        _pad: [0; 2],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_follows_the_programs_attached_and_how() {
        let id = hash_build(&PROGRAMS);
        assert_eq!(id, hash_build(&PROGRAMS), "the same build, the same id");
        let mut other_attach = PROGRAMS;
        other_attach.iter_mut().find(|p| p.0 == "egress").unwrap().2 = raw::ATTACH_INET_INGRESS;
        let mut renamed = PROGRAMS;
        renamed[0].0 = "connect4x";
        for (what, programs) in [
            ("an attach type changed", &other_attach[..]),
            ("a program renamed", &renamed[..]),
            ("a program fewer", &PROGRAMS[..8]),
        ] {
            assert_ne!(id, hash_build(programs), "{what}");
        }
    }

    #[test]
    fn the_build_id_has_the_unix_programs_as_this_build_assembles_them() {
        // The build script hashed them from the same source; a build whose
        // script ran on other code would name its programs wrongly.
        assert_eq!(
            UNIX_PROGRAMS_HASH,
            format!("{:016x}", unix::programs_hash())
        );
        assert_eq!(
            GUARD_PROGRAMS_HASH,
            format!("{:016x}", guard::programs_hash())
        );
    }

    #[test]
    fn link_pins_name_their_parent() {
        for (name, _, _) in PROGRAMS {
            assert_eq!(
                link_parent(&link_pin(name, 271_744)),
                Some(271_744),
                "{name}"
            );
        }
        for other in [
            "connect4",
            "ring-3",
            "link-",
            "link-connect4",
            "link-connect4-x",
            "RUNS",
        ] {
            assert_eq!(link_parent(other), None, "{other}");
        }
    }

    #[test]
    fn mapped_v6_is_keyed_as_v4() {
        let a: SocketAddr = "[::ffff:127.0.0.1]:8080".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(endpoint_key(&a), endpoint_key(&b));
        let c: SocketAddr = "[::1]:8080".parse().unwrap();
        assert_eq!(endpoint_key(&c).family, AF_INET6);
    }

    #[test]
    fn prefixes_end_with_a_slash() {
        let k = prefix_keys(7, Path::new("/nonexistent/wt/"));
        assert_eq!(k.len(), 1);
        let n = (k[0].prefix_len / 8) as usize - 8;
        let path = k[0].path;
        assert_eq!(&path[..n], b"/nonexistent/wt/");
        assert!(prefix_keys(7, Path::new("relative")).is_empty());
    }

    #[test]
    fn decodes_a_unix_denial() {
        let mut b = vec![0u8; 176];
        b[8] = 7;
        b[16] = Hook::ConnectUnix as u8;
        b[20] = 1;
        b[28] = AF_UNIX as u8;
        b[48..52].copy_from_slice(b"curl");
        b[64..84].copy_from_slice(b"/run/docker.sock\0\0\0\0");
        let e = decode(&b).unwrap();
        assert_eq!(e.hook, "connect_unix");
        assert_eq!(e.comm, "curl");
        assert_eq!(e.protocol, "unix_stream");
        assert_eq!(e.destination, Destination::Unix("/run/docker.sock".into()));
        assert!(matches!(
            decode_event(&b),
            Some((0, Event::KernelNetwork(k))) if k == e
        ));
    }

    /// An abstract name refused (no Landlock scoping: the run's mode
    /// refuses the ones its tasks name) is a scope refusal, as Landlock's.
    #[test]
    fn an_abstract_name_refused_is_a_scope_refusal() {
        let mut b = vec![0u8; 176];
        b[0] = 9;
        b[12] = 42;
        b[16] = Hook::SendmsgUnix as u8;
        b[20] = 2;
        b[28] = AF_UNIX as u8;
        b[48..55].copy_from_slice(b"python3");
        b[64..72].copy_from_slice(b"\0x11-bus");
        let Some((9, Event::Scope(sc))) = decode_event(&b) else {
            panic!("{:?}", decode_event(&b));
        };
        assert_eq!(sc.pid, 42);
        assert_eq!(sc.comm, "python3");
        assert_eq!(
            sc.target,
            ScopeTarget::AbstractUnixSocket {
                name: "x11-bus".into()
            }
        );
    }
}
