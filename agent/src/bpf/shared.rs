//! The verified programs and the maps they share, loaded and pinned once per
//! lockrun build ([`Shared`]), named by the build id ([`build_id`]); the ring
//! slots runs claim.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::{fs, io};

use aya::maps::{HashMap, LpmTrie, Map, MapData, PerCpuHashMap};
use lockrun_common::{
    RunConfig, RunCounters, RunEndpoint, RunPort, DENIALS_RING_BYTES, MAP_ALLOWED_ENDPOINTS,
    MAP_COUNTERS, MAP_EXPOSED_PORTS, MAP_RINGS, MAP_RUNS, MAX_RING_SLOTS,
};

use super::attach::{link_parent, link_pin, lock_parent, names};
use super::hooks::{is_not_found, PrefixData};
use super::load::{
    attached_programs, load_object, programs_here, PinGuard, GUARD_ATTACH_WAIT, GUARD_PINS,
};
use super::registry::forget;
use super::{BpfError, BPFFS, SHARED_ROOT};
use crate::sys::bpf;
use crate::{cgroup, sys};

/// The verified programs and the maps they share, pinned once per lockrun
/// build under [`SHARED_ROOT`]`/<object-hash>/`, with the links that attach
/// them to the build's parent cgroup (`link-<program>-<parent cgroup id>`).
pub(super) struct Shared {
    pub(super) endpoints: HashMap<MapData, RunEndpoint, u8>,
    pub(super) exposed: HashMap<MapData, RunPort, u8>,
    pub(super) counters: PerCpuHashMap<MapData, u64, RunCounters>,
    pub(super) runs: HashMap<MapData, u64, RunConfig>,
    pub(super) prefixes: LpmTrie<MapData, PrefixData, u8>,
    pub(super) slot_owners: HashMap<MapData, u32, u64>,
    pub(super) rings: OwnedFd,
    pub(super) dir: PathBuf,
}

/// The embedded object's FNV-1a 64 (computed by build.rs).
#[cfg(not(lockrun_ebpf_missing))]
pub(super) const OBJECT_HASH: &str = env!("LOCKRUN_EBPF_HASH");
#[cfg(lockrun_ebpf_missing)]
pub(super) const OBJECT_HASH: &str = "none";

/// [`lockrun_unix::programs_hash`], as the build script computed it.
pub(super) const UNIX_PROGRAMS_HASH: &str = env!("LOCKRUN_UNIX_PROGRAMS_HASH");

/// [`lockrun_unix::guard::programs_hash`], as the build script computed it.
pub(super) const GUARD_PROGRAMS_HASH: &str = env!("LOCKRUN_GUARD_PROGRAMS_HASH");

/// Bumped whenever the maps the loader makes, or what it pins, change
/// without the object or the unix programs changing.
pub(super) const LAYOUT_VERSION: u32 = 4;

/// This build's name: its programs' pin directory under [`SHARED_ROOT`] and
/// (with a `build-` prefix) its parent cgroup under `<cgroup2>/lockrun/`.
/// Everything a run would reuse from an earlier run of the same build goes
/// into it: the object, the hand-assembled unix programs (with stand-in map
/// fds), the programs the loader attaches and how ([`PROGRAMS`]), the
/// `sys_exit` recorder, and `LAYOUT_VERSION`, so a lockrun that changed
/// any of them never attaches another build's programs.
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

/// This build's parent cgroup, `<cgroup2>/lockrun/build-<build-id>`, where
/// the hooks are attached and every run's cgroup is made.
pub fn build_parent() -> Result<PathBuf, cgroup::CgroupError> {
    cgroup::build_parent_of(build_id())
}

/// [`build_id`] of this object and these `programs`.
pub(super) fn hash_build(programs: &[(&str, u32, u32)]) -> String {
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
    // ([`lockrun_unix::programs_hash`]).
    eat(UNIX_PROGRAMS_HASH.as_bytes());
    // The unix guard, where this kernel needs it (its shape; the offsets
    // it reads are this boot's, and so are the pins).
    if super::load::unix_guard() {
        eat(b"guard");
        eat(GUARD_PROGRAMS_HASH.as_bytes());
    }
    // The sys_exit recorder (its code is the object's), where this build
    // loads it.
    if cfg!(target_arch = "x86_64") {
        eat(super::read_only::PROGRAM.as_bytes());
        eat(&bpf::PROG_TYPE_RAW_TRACEPOINT.to_le_bytes());
    }
    format!("{h:016x}")
}

/// TEST BUILDS ONLY (`weaken-for-tests`): `LOCKRUN_TEST_BUILD_ID` names
/// this process's build instead, so a test can make the parent and pins of
/// "another build" with the real programs, for `lockrun gc` to judge.
#[cfg(feature = "weaken-for-tests")]
pub(super) fn test_build_id() -> Option<String> {
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
pub(super) fn is_build_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Where this build's programs are pinned.
#[must_use]
pub fn shared_dir() -> PathBuf {
    Path::new(BPFFS).join(SHARED_ROOT).join(build_id())
}

/// Loads this process has begun: each names its own loading directory.
pub(super) static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Shared {
    /// Open this build's pinned programs, loading and pinning them first if
    /// no run has yet. Concurrent first runs each load into their own
    /// directory; the first rename wins and the others use its programs.
    pub(super) fn open_or_load(object: &[u8]) -> Result<Self, BpfError> {
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
        match sys::rename_noreplace(&tmp, &root.join(hash)) {
            Ok(()) => std::mem::forget(guard),
            // Another first run won; its programs are the same.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
                drop(guard);
            }
            Err(source) => return Err(BpfError::Pin { path: dir, source }),
        }
        Self::open(&dir).map_err(|source| BpfError::OpenShared { path: dir, source })
    }

    pub(super) fn open(dir: &Path) -> io::Result<Self> {
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
        let rings = bpf::obj_get(&dir.join(MAP_RINGS))?;
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
    /// anything (`tests/builds/second_bpffs.rs`).
    pub(super) fn ensure_attached(&self, parent: &Path) -> Result<(), BpfError> {
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
                    bpf::obj_get(&pin).and_then(|l| bpf::cgroup_link_target(l.as_fd())),
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
                bpf::obj_get(&self.dir.join(name)).map_err(|source| BpfError::OpenShared {
                    path: self.dir.join(name),
                    source,
                })?;
            let link =
                bpf::link_create(prog.as_fd(), cg.as_fd(), attach_type).map_err(|source| {
                    BpfError::RawAttach {
                        program: name,
                        source,
                    }
                })?;
            match bpf::obj_pin(link.as_fd(), &pin) {
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
    pub(super) fn ensure_guard(&self) -> Result<(), BpfError> {
        for (_, name) in GUARD_PINS {
            let path = self.dir.join(name);
            let prog = bpf::obj_get(&path).map_err(|source| BpfError::OpenShared {
                path: path.clone(),
                source,
            })?;
            let id = bpf::prog_id(prog.as_fd())
                .map_err(|source| BpfError::OpenShared { path, source })?;
            let pin = self.dir.join(format!("link-{name}"));
            let live = || {
                bpf::obj_get(&pin)
                    .and_then(|l| bpf::link_prog_id(l.as_fd()))
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
                match bpf::attach_tracing(prog.as_fd()) {
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
            match bpf::obj_pin(link.as_fd(), &pin) {
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
    pub(super) fn refuse_foreign(&self, cg: BorrowedFd<'_>, parent: &Path) -> Result<(), BpfError> {
        let query = |source| BpfError::Query {
            cgroup: parent.to_path_buf(),
            source,
        };
        let mut ours = Vec::new();
        for &(name, _, _) in attached_programs() {
            let path = self.dir.join(name);
            let prog = bpf::obj_get(&path).map_err(|source| BpfError::OpenShared {
                path: path.clone(),
                source,
            })?;
            ours.push(
                bpf::prog_id(prog.as_fd())
                    .map_err(|source| BpfError::OpenShared { path, source })?,
            );
        }
        for &(name, _, attach_type) in attached_programs() {
            let attached = bpf::prog_query(cg, attach_type).map_err(query)?;
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
    pub(super) fn claim_slot(
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
    pub(super) fn lock_slot(&self, slot: u32) -> Result<Option<SlotLock>, BpfError> {
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
    pub(super) fn take_over(&mut self, slot: u32, owner: u64, parent: &Path) -> bool {
        use crate::cgroup::Occupancy;
        match cgroup::occupancy(parent, owner) {
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
    pub(super) fn slot_ring(&self, slot: u32) -> Result<OwnedFd, BpfError> {
        let path = self.dir.join(format!("ring-{slot}"));
        match bpf::obj_get(&path) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(BpfError::OpenShared { path, source }),
        }
        let fd = new_ring()?;
        // Into RINGS first (an RCU grace period, once per slot), then pinned:
        // a pin always names the ring in its slot.
        bpf::map_update_u32_u32(self.rings.as_fd(), slot, fd.as_raw_fd().cast_unsigned()).map_err(
            |source| BpfError::Register {
                map: MAP_RINGS,
                call: "BPF_MAP_UPDATE_ELEM",
                source,
            },
        )?;
        bpf::obj_pin(fd.as_fd(), &path).map_err(|source| BpfError::Pin { path, source })?;
        Ok(fd)
    }

    pub(super) fn release_slot(&mut self, slot: u32) {
        if let Err(e) = self.slot_owners.remove(&slot) {
            if !is_not_found(&e) {
                tracing::warn!("releasing ring slot {slot}: {e}");
            }
        }
    }
}

/// The loader-only map of which run holds which ring slot.
pub(super) const SLOT_OWNERS: &str = "SLOT_OWNERS";

/// A ring slot's lock ([`Shared::lock_slot`]).
pub(super) type SlotLock = nix::fcntl::Flock<fs::File>;
/// The loader-created trie of the runs' unix socket directories.
pub(super) const UNIX_PREFIXES: &str = "UNIX_PREFIXES";

pub(super) fn new_ring() -> Result<OwnedFd, BpfError> {
    bpf::map_create(&bpf::MapSpec {
        name: "DENIALS",
        map_type: bpf::MAP_TYPE_RINGBUF,
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
pub(super) fn open_shared() -> Result<Option<Shared>, BpfError> {
    let dir = shared_dir();
    match Shared::open(&dir) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(BpfError::OpenShared { path: dir, source }),
    }
}
