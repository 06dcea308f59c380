//! The kernel network policy: the run's only ways out, held by cgroup eBPF
//! hooks on the run's cgroup v2 and pinned in bpffs so they outlive lockrun.
//!
//! | hook | kernel | what it allows |
//! |---|---|---|
//! | `cgroup/connect4`, `cgroup/connect6` | 4.17 | the endpoints of `ALLOWED_ENDPOINTS` (the proxy, `network.local`) |
//! | `cgroup/sendmsg4`, `cgroup/sendmsg6` | 4.18 | the same, for unconnected UDP |
//! | `cgroup/sock_create` | 4.10 | no ICMP ping or raw inet sockets (ping `sendto` runs no sendmsg hook on 6.18) |
//! | `cgroup/connect_unix`, `cgroup/sendmsg_unix` | 6.7 | a run (supervised mode): no pathname the command names itself — lockrun's seccomp supervisor connects for it after resolving the path ([`crate::supervise`]); library callers (prefix mode): pathnames under the worktree and the run's temp dir, by text ([`unix`]) |
//!
//! Everything else fails with `EPERM`, and each refusal becomes an
//! [`Event::KernelNetwork`] (the `DENIALS` ring buffer) and a count (`COUNTERS`).
//! Links and maps are pinned under `/sys/fs/bpf/lockrun/<run-id>/`; a lockrun
//! killed with SIGKILL leaves its processes confined until `lockrun gc`
//! ([`unpin`]) removes the pins.
//!
//! Pinned link files: `connect4`, `connect6`, `sendmsg4`, `sendmsg6`,
//! `sock_create`, `connect_unix`, `sendmsg_unix`; pinned maps: their object names.

mod raw;
pub mod unix;

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use aya::maps::{HashMap, LpmTrie, Map, MapData, PerCpuArray, RingBuf};
use lockrun_common::{
    Denial, Endpoint, Hook, UnixPrefixKey, AF_INET6, AF_UNIX, COUNTER_LOST, MAP_ALLOWED_ENDPOINTS,
    MAP_COUNTERS, MAP_DENIALS, MAP_UNIX_PREFIXES, MAX_ALLOWED_ENDPOINTS, UNIX_PATH_MAX,
};

use crate::audit::{AuditLog, Destination, Event, KernelNetEvent};
use crate::cgroup::{check_run_id, RunCgroup};

/// Where bpffs is mounted (and mounted by lockrun when it is not).
pub const BPFFS: &str = "/sys/fs/bpf";

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
    #[error("cannot read /proc/self/mountinfo")]
    MountInfo(#[source] io::Error),
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
    #[error("more than {MAX_ALLOWED_ENDPOINTS} allowed endpoints")]
    TooManyEndpoints,
    #[error("the ring buffer's fd cannot be watched (epoll_ctl)")]
    Watch(#[source] io::Error),
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

/// Mount bpffs at [`BPFFS`] unless one is mounted there.
pub fn ensure_bpffs() -> Result<(), BpfError> {
    let info = fs::read_to_string("/proc/self/mountinfo").map_err(BpfError::MountInfo)?;
    let mounted = info.lines().any(|l| {
        let Some((left, right)) = l.split_once(" - ") else {
            return false;
        };
        left.split_whitespace().nth(4) == Some(BPFFS)
            && right.split_whitespace().next() == Some("bpf")
    });
    if mounted {
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

/// The LPM keys admitting sockets under `dir`: the path as given and its
/// canonical form, each with a trailing `/`. Paths too long to prefix a socket
/// path are left out (nothing under them can be a socket address).
fn prefix_keys(dir: &Path) -> Vec<UnixPrefixKey> {
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
                prefix_len: (bytes.len() * 8) as u32,
                path,
            })
        })
        .collect()
}

/// Per-hook refusal counts read from `COUNTERS` (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Refusals per hook, in [`Hook`] order.
    pub refused: [u64; 7],
    /// Refusals whose event did not fit the ring buffer.
    pub lost: u64,
}

impl Counters {
    #[must_use]
    pub fn total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

type Ring = Arc<Mutex<RingBuf<MapData>>>;

/// The attached, pinned hooks of one run. Dropping it without [`finish`]
/// unpins and detaches (an early error leaves nothing behind); a `SIGKILL`ed
/// lockrun leaves the pins, and the hooks hold.
///
/// [`finish`]: NetworkHooks::finish
pub struct NetworkHooks {
    run_id: String,
    dir: PathBuf,
    cgroup_id: u64,
    ring: Ring,
    counters: PerCpuArray<MapData, u64>,
    reader: Option<tokio::task::JoinHandle<()>>,
    // Kept so the programs stay loaded until the links are pinned.
    _progs: Vec<OwnedFd>,
    finished: bool,
}

impl std::fmt::Debug for NetworkHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkHooks")
            .field("run_id", &self.run_id)
            .field("dir", &self.dir)
            .field("cgroup_id", &self.cgroup_id)
            .finish_non_exhaustive()
    }
}

impl NetworkHooks {
    /// Load the embedded object, attach every hook to `cgroup`, allow exactly
    /// `allowed` (the proxy endpoint and `network.local`) and pathname unix
    /// sockets under `unix_allowed` (the worktree and the run's temp dir), and
    /// pin links and maps under [`pin_dir`]`(run_id)`.
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
            unix_allowed,
            unix::UnixMode::Prefixes,
        )
    }

    /// [`attach`](Self::attach), choosing how the unix hooks judge pathname
    /// destinations ([`unix::UnixMode`]; a run with the seccomp supervisor
    /// uses `Supervised`).
    pub fn attach_with(
        cgroup: &RunCgroup,
        run_id: &str,
        allowed: &[SocketAddr],
        unix_allowed: &[PathBuf],
        unix_mode: unix::UnixMode,
    ) -> Result<Self, BpfError> {
        check_run_id(run_id)?;
        let object = OBJECT.ok_or(BpfError::ObjectMissing)?;
        if allowed.len() > MAX_ALLOWED_ENDPOINTS as usize {
            return Err(BpfError::TooManyEndpoints);
        }
        ensure_bpffs()?;
        let root = Path::new(BPFFS).join("lockrun");
        for d in [&root, &pin_dir(run_id)] {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && *d == root => {}
                Err(source) => {
                    return Err(BpfError::Mkdir {
                        path: d.clone(),
                        source,
                    })
                }
            }
        }
        // From here on, a guard removes the pin dir on any error.
        let guard = PinGuard(pin_dir(run_id));
        let dir = guard.0.clone();

        // The object is parsed and its maps created here, without aya's
        // `EbpfLoader`: its constructor parses /sys/kernel/btf/vmlinux (~18 ms
        // here), which programs without CO-RE relocations never need, and its
        // load probes kernel features. The programs are loaded below with
        // raw `BPF_PROG_LOAD`s, without BTF (no func/line info).
        let (mut maps, programs) = load_object(object)?;

        // Maps: pin, fill, and keep raw fds for the hand-assembled unix hooks.
        let mut take = |name: &'static str| -> Result<MapData, BpfError> {
            let map = maps.remove(name).ok_or(BpfError::Missing(name))?;
            map.pin(dir.join(name)).map_err(|e| BpfError::Pin {
                path: dir.join(name),
                source: io::Error::other(e),
            })?;
            Ok(map)
        };
        let allowed_map = take(MAP_ALLOWED_ENDPOINTS)?;
        let prefixes_map = take(MAP_UNIX_PREFIXES)?;
        let denials_map = take(MAP_DENIALS)?;
        let counters_map = take(MAP_COUNTERS)?;
        let unix_maps = unix::UnixMaps {
            unix_prefixes: prefixes_map.fd().as_fd().as_raw_fd(),
            denials: denials_map.fd().as_fd().as_raw_fd(),
            counters: counters_map.fd().as_fd().as_raw_fd(),
            run_cgroup: cgroup.id(),
            mode: unix_mode,
        };
        // Assemble now, while the fds are borrowed from live maps.
        let unix_insns: [Program; 2] = [
            ("connect_unix", Hook::ConnectUnix, raw::ATTACH_UNIX_CONNECT),
            ("sendmsg_unix", Hook::SendmsgUnix, raw::ATTACH_UNIX_SENDMSG),
        ]
        .map(|(name, hook, at)| Program {
            name,
            prog_type: raw::PROG_TYPE_CGROUP_SOCK_ADDR,
            attach_type: at,
            insns: unix::program(hook, &unix_maps),
            license: c"GPL".into(),
        });

        let map_err = |map, call| move |source| BpfError::Map { map, call, source };
        let mut endpoints: HashMap<MapData, Endpoint, u8> =
            HashMap::try_from(Map::HashMap(allowed_map))
                .map_err(map_err(MAP_ALLOWED_ENDPOINTS, "open"))?;
        for a in allowed {
            endpoints
                .insert(endpoint_key(a), 1, 0)
                .map_err(map_err(MAP_ALLOWED_ENDPOINTS, "BPF_MAP_UPDATE_ELEM"))?;
        }
        let mut prefixes: LpmTrie<MapData, [u8; UNIX_PATH_MAX], u8> =
            LpmTrie::try_from(Map::LpmTrie(prefixes_map))
                .map_err(map_err(MAP_UNIX_PREFIXES, "open"))?;
        for d in unix_allowed {
            for k in prefix_keys(d) {
                let key = aya::maps::lpm_trie::Key::new(k.prefix_len, k.path);
                prefixes
                    .insert(&key, 1, 0)
                    .map_err(map_err(MAP_UNIX_PREFIXES, "BPF_MAP_UPDATE_ELEM"))?;
            }
        }

        // Unix hooks first: they must load before the maps' fds are handed on.
        let mut progs = attach_all(&unix_insns, cgroup, &dir)?;
        progs.extend(attach_all(&programs, cgroup, &dir)?);

        let ring =
            RingBuf::try_from(Map::RingBuf(denials_map)).map_err(map_err(MAP_DENIALS, "open"))?;
        let counters = PerCpuArray::try_from(Map::PerCpuArray(counters_map))
            .map_err(map_err(MAP_COUNTERS, "open"))?;
        std::mem::forget(guard);
        Ok(Self {
            run_id: run_id.to_owned(),
            dir,
            cgroup_id: cgroup.id(),
            ring: Arc::new(Mutex::new(ring)),
            counters,
            reader: None,
            _progs: progs,
            finished: false,
        })
    }

    /// The pin directory.
    #[must_use]
    pub fn pin_dir(&self) -> &Path {
        &self.dir
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
        self.reader = Some(tokio::spawn(async move {
            loop {
                let Ok(mut guard) = afd.readable().await else {
                    return;
                };
                drain(&ring, &audit);
                guard.clear_ready();
            }
        }));
        Ok(())
    }

    /// Read the counters now.
    pub fn counters(&self) -> Result<Counters, BpfError> {
        let mut c = Counters::default();
        for (i, slot) in c.refused.iter_mut().enumerate() {
            *slot = self.sum(i as u32)?;
        }
        c.lost = self.sum(COUNTER_LOST)?;
        Ok(c)
    }

    fn sum(&self, slot: u32) -> Result<u64, BpfError> {
        let v = self
            .counters
            .get(&slot, 0)
            .map_err(|source| BpfError::Map {
                map: MAP_COUNTERS,
                call: "BPF_MAP_LOOKUP_ELEM",
                source,
            })?;
        Ok(v.iter().sum())
    }

    /// Deliver the events still in the ring buffer to `audit` (also done by
    /// the reader task as they come).
    pub fn drain_into(&self, audit: &AuditLog) {
        drain(&self.ring, audit);
    }

    /// Teardown: stop the reader, drain the last events, read the counters
    /// (lost events are recorded as [`Event::KernelEventsLost`]), unpin and
    /// detach. Call after the run's cgroup is empty.
    pub fn finish(mut self, audit: &AuditLog) -> Result<Counters, BpfError> {
        self.finished = true;
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        drain(&self.ring, audit);
        let counters = self.counters();
        if let Ok(c) = &counters {
            if c.lost > 0 {
                audit.record(Event::KernelEventsLost { count: c.lost });
            }
        }
        unpin(&self.run_id)?;
        counters
    }
}

impl Drop for NetworkHooks {
    fn drop(&mut self) {
        if let Some(r) = self.reader.take() {
            r.abort();
        }
        if !self.finished {
            if let Err(e) = unpin(&self.run_id) {
                tracing::warn!("unpinning {}: {e}", self.dir.display());
            }
        }
    }
}

/// A program ready for `BPF_PROG_LOAD`, with its attach type: one of the
/// object's (relocated) or a hand-assembled unix hook ([`unix::program`]).
struct Program {
    name: &'static str,
    prog_type: u32,
    attach_type: u32,
    insns: Vec<u64>,
    license: std::ffi::CString,
}

/// The object's programs: section name, program type, attach type.
const OBJECT_PROGRAMS: [(&str, u32, u32); 5] = [
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
];

/// Parse the embedded object, create its maps (`BPF_MAP_CREATE`) and
/// relocate the programs' map references and calls: the maps by name, and
/// the programs of [`OBJECT_PROGRAMS`] ready to load.
fn load_object(
    object: &[u8],
) -> Result<(std::collections::HashMap<String, MapData>, Vec<Program>), BpfError> {
    const RINGBUF: u32 = 27; // BPF_MAP_TYPE_RINGBUF
    let mut obj = aya_obj::Object::parse(object).map_err(BpfError::Parse)?;
    let mut maps = std::collections::HashMap::new();
    let mut objs = Vec::new();
    for name in [
        MAP_ALLOWED_ENDPOINTS,
        MAP_UNIX_PREFIXES,
        MAP_DENIALS,
        MAP_COUNTERS,
    ] {
        let mut m = obj.maps.remove(name).ok_or(BpfError::Missing(name))?;
        if m.map_type() == RINGBUF {
            // As aya's loader does: a ring buffer has no value size, and its
            // size (a power-of-two multiple of the page size) is set by the
            // eBPF side's `DENIALS_RING_BYTES`.
            m.set_value_size(0);
        }
        let data = MapData::create(m.clone(), name, None)
            .map_err(|source| BpfError::MapCreate { map: name, source })?;
        objs.push((name, m));
        maps.insert(name.to_owned(), data);
    }
    if let Some(extra) = obj.maps.keys().next() {
        // Global data (.data/.rodata/.bss) or a map this lockrun does not know.
        return Err(BpfError::UnknownMap(extra.clone()));
    }
    let text_sections = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_maps(
        objs.iter().map(|(name, m)| {
            let fd = maps[*name].fd().as_fd().as_raw_fd();
            (*name, fd, m)
        }),
        &text_sections,
    )
    .map_err(BpfError::Relocate)?;
    obj.relocate_calls(&text_sections)
        .map_err(BpfError::Relocate)?;
    let mut programs = Vec::new();
    for (name, prog_type, attach_type) in OBJECT_PROGRAMS {
        let prog = obj.programs.get(name).ok_or(BpfError::Missing(name))?;
        let function = obj
            .functions
            .get(&prog.function_key())
            .ok_or(BpfError::Missing(name))?;
        programs.push(Program {
            name,
            prog_type,
            attach_type,
            insns: function
                .instructions
                .iter()
                .copied()
                .map(encode_insn)
                .collect(),
            license: obj.license.clone(),
        });
    }
    Ok((maps, programs))
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

/// Load programs, attach them to the cgroup (no flags: one program per
/// attach type) and pin their links; the program fds.
fn attach_all(
    programs: &[Program],
    cgroup: &RunCgroup,
    dir: &Path,
) -> Result<Vec<OwnedFd>, BpfError> {
    let mut fds = Vec::new();
    for p in programs {
        let name = p.name;
        let prog = raw::prog_load(p.prog_type, &p.insns, p.attach_type, name, &p.license).map_err(
            |(source, log)| BpfError::RawLoad {
                program: name,
                source,
                log,
            },
        )?;
        let link =
            raw::link_create(prog.as_fd(), cgroup.dir_fd(), p.attach_type).map_err(|source| {
                BpfError::RawAttach {
                    program: name,
                    source,
                }
            })?;
        let path = dir.join(name);
        raw::obj_pin(link.as_fd(), &path).map_err(|source| BpfError::Pin { path, source })?;
        fds.push(prog);
    }
    Ok(fds)
}

/// Removes a half-built pin dir when `attach` fails.
struct PinGuard(PathBuf);

impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn drain(ring: &Ring, audit: &AuditLog) {
    let mut ring = ring.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(item) = ring.next() {
        if let Some(ev) = decode(&item) {
            audit.record(Event::KernelNetwork(ev));
        }
    }
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
    })
}

fn protocol_name(family: u16, sock_type: u32, protocol: u32) -> String {
    const IPPROTO_ICMP: u32 = 1;
    const IPPROTO_TCP: u32 = 6;
    const IPPROTO_UDP: u32 = 17;
    const IPPROTO_ICMPV6: u32 = 58;
    const IPPROTO_MPTCP: u32 = 262;
    if family == AF_UNIX {
        return match sock_type {
            1 => "unix_stream".into(),
            2 => "unix_dgram".into(),
            5 => "unix_seqpacket".into(),
            t => format!("unix_type_{t}"),
        };
    }
    match protocol {
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_UDP => "udp".into(),
        IPPROTO_ICMP | IPPROTO_ICMPV6 => "icmp".into(),
        IPPROTO_MPTCP => "mptcp".into(),
        p => p.to_string(),
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
        _pad: [0; 4],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
        let k = prefix_keys(Path::new("/nonexistent/wt/"));
        assert_eq!(k.len(), 1);
        let n = (k[0].prefix_len / 8) as usize;
        assert_eq!(&k[0].path[..n], b"/nonexistent/wt/");
        assert!(prefix_keys(Path::new("relative")).is_empty());
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
    }
}
