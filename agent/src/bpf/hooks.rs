//! One run's place in the build's shared hooks ([`NetworkHooks`]): registered
//! in the shared maps under its cgroup id, with a ring slot, its allowed
//! endpoints, exposed ports and unix prefixes, and its refusal counters.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use aya::maps::{Map, MapData, PerCpuValues, RingBuf};
use lockrun_common::{
    Hook, RunConfig, RunCounters, RunEndpoint, RunPort, UnixPrefixKey, COUNTER_INBOUND_UNITEMIZED,
    COUNTER_LOST, MAP_ALLOWED_ENDPOINTS, MAP_COUNTERS, MAP_EXPOSED_PORTS, MAP_RUNS,
    MAX_ALLOWED_ENDPOINTS, MAX_EXPOSED_PORTS, MAX_UNIX_PREFIXES, UNIX_PATH_MAX,
};
use lockrun_unix::UnixMode;

use crate::audit::{AuditLog, Event};
use crate::cgroup::{check_run_id, RunCgroup};

use super::events::drain;
use super::redirect::Redirects;
use super::shared::{Shared, SlotLock, UNIX_PREFIXES};
use super::{endpoint_key, ensure_bpffs, prefix_keys, BpfError, OBJECT};
use crate::proxy::transparent::Originals;
use crate::sys::bpf;

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

pub(super) type Ring = Arc<Mutex<RingBuf<MapData>>>;

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
    /// Where the run's connects are redirected, when they are.
    redirect: Option<RedirectTo>,
    reader: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
}

/// Where a run's connects are brought ([`NetworkHooks::attach_with`]): the
/// proxy's transparent listener (TCP to the fake range) and the run's
/// resolver (TCP and UDP to port 53, the same port number for both). Both
/// on `127.0.0.1`, the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectTo {
    pub transparent: SocketAddr,
    pub resolver: SocketAddr,
}

impl RedirectTo {
    /// The endpoints as the hooks take them: IPv4 loopback, one address,
    /// non-zero ports.
    pub(super) fn checked(self) -> Result<Self, BpfError> {
        match (self.transparent, self.resolver) {
            (SocketAddr::V4(t), SocketAddr::V4(r))
                if t.ip().is_loopback() && t.ip() == r.ip() && t.port() != 0 && r.port() != 0 =>
            {
                Ok(self)
            }
            _ => Err(BpfError::RedirectEndpoints(self)),
        }
    }

    /// The run's [`RunConfig`] with these endpoints.
    pub(super) fn config(self, slot: u32, unix_mode: u32) -> RunConfig {
        let ip = match self.transparent {
            SocketAddr::V4(a) => a.ip().octets(),
            SocketAddr::V6(_) => [0; 4],
        };
        RunConfig {
            slot,
            unix_mode,
            redirect_ip4: ip,
            transparent_port: self.transparent.port(),
            resolver_port: self.resolver.port(),
        }
    }
}

/// The data of a `UNIX_PREFIXES` key: the cgroup id, then the path bytes.
pub(super) type PrefixData = [u8; 8 + UNIX_PATH_MAX];

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
            UnixMode::Prefixes,
            None,
        )
    }

    /// [`attach`](Self::attach), with the run's ports that this host's
    /// processes may reach over loopback (`exposed`, `network.expose`), and
    /// choosing how the unix hooks judge pathname destinations
    /// ([`UnixMode`]; a run with the seccomp supervisor uses
    /// `Supervised`), and, with `redirect`, bringing the run's connects to
    /// its proxy ([`RedirectTo`]): a TCP connect to the fake range
    /// (`198.18.0.0/15`) to the transparent listener, a TCP connect or UDP
    /// datagram to port 53 to the resolver. Both endpoints are allowed too
    /// (the resolver's replies pass `ingress`). On a kernel without the
    /// hooks this needs ([`crate::kernel::redirect`]) the run
    /// goes on without redirection, as with `None`
    /// ([`Self::originals`] is then `None`).
    ///
    /// The hooks are the build's, attached once to the build's parent cgroup
    /// ([`super::shared::build_parent`]); they are checked to be attached
    /// there (re-attached if not), and `cgroup` must be its child. The run is
    /// registered before this returns, and no task of the run exists yet.
    pub fn attach_with(
        cgroup: &RunCgroup,
        run_id: &str,
        allowed: &[SocketAddr],
        exposed: &[u16],
        unix_allowed: &[PathBuf],
        unix_mode: UnixMode,
        redirect: Option<RedirectTo>,
    ) -> Result<Self, BpfError> {
        check_run_id(run_id)?;
        let redirect = match (redirect, crate::kernel::redirect()) {
            (Some(r), Ok(())) => Some(r.checked()?),
            (Some(_), Err(needs)) => {
                tracing::info!(
                    "run {run_id}: transparent redirection is not on this kernel ({needs}): \
                     the run goes without it"
                );
                None
            }
            (None, _) => None,
        };
        let mut allowed = allowed.to_vec();
        if let Some(r) = &redirect {
            for a in [r.transparent, r.resolver] {
                if !allowed.contains(&a) {
                    allowed.push(a);
                }
            }
        }
        let allowed = &allowed[..];
        let object = OBJECT.ok_or(BpfError::ObjectMissing)?;
        if allowed.len() > MAX_ALLOWED_ENDPOINTS as usize {
            return Err(BpfError::TooManyEndpoints);
        }
        if exposed.len() > MAX_EXPOSED_PORTS as usize {
            return Err(BpfError::TooManyExposed);
        }
        ensure_bpffs()?;
        let mut shared = Shared::open_or_load(object)?;
        let parent = super::shared::build_parent()?;
        if cgroup.path().parent() != Some(parent.as_path()) {
            return Err(BpfError::NotUnderParent {
                cgroup: cgroup.path().to_path_buf(),
                parent,
            });
        }
        shared.ensure_attached(&parent)?;
        if super::load::unix_guard() {
            shared.ensure_guard()?;
        }
        // Where this process found the recorder attached, a run may count
        // on it: kept so (a pin removed since is attached again), or the
        // run is refused.
        if super::read_only::recorder().is_ok() {
            super::read_only::ensure(&shared.dir).map_err(BpfError::ReadOnlyRecorder)?;
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
            redirect,
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
        unix_mode: UnixMode,
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
                self.redirect.map_or(
                    RunConfig {
                        slot: self.slot,
                        unix_mode: unix_mode.raw(),
                        ..RunConfig::default()
                    },
                    |r| r.config(self.slot, unix_mode.raw()),
                ),
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
        let afd = bpf::watch(fd).map_err(BpfError::Watch)?;
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

    /// Where the run's transparent connections were meant to go, for the
    /// proxy ([`Redirects`]); `None` when the run's connects are not
    /// redirected (no [`RedirectTo`], or a kernel without the hooks), or
    /// the shared map cannot be opened (then the proxy refuses every
    /// transparent connection).
    #[must_use]
    pub fn originals(&self) -> Option<Arc<dyn Originals>> {
        let r = self.redirect?;
        match Redirects::open(&self.shared.dir, self.cgroup_id, r.transparent) {
            Ok(o) => Some(Arc::new(o)),
            Err(e) => {
                tracing::warn!("run {}: the transparent connections' map: {e}", self.run_id);
                None
            }
        }
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

pub(super) fn is_not_found(e: &aya::maps::MapError) -> bool {
    matches!(e, aya::maps::MapError::KeyNotFound)
        || matches!(e, aya::maps::MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOENT))
}
