//! Loading the programs: the object's hooks, the hand-assembled unix hooks
//! ([`super::unix`]), the unix guard ([`super::guard`]) and the `sys_exit`
//! recorder ([`super::read_only`]), verified once and pinned in the
//! build's directory.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::{fs, io};

use aya::maps::MapData;
use lockrun_common::{
    Hook, UnixPrefixKey, MAP_ALLOWED_ENDPOINTS, MAP_COUNTERS, MAP_EXPOSED_PORTS, MAP_ORIGINALS,
    MAP_RINGS, MAP_RUNS, MAP_TRANSPARENT, MAX_RING_SLOTS, MAX_UNIX_PREFIXES_ALL_RUNS,
};
use lockrun_unix::{guard, UnixMaps};

use super::shared::{new_ring, SLOT_OWNERS, UNIX_PREFIXES};
use super::{btf, BpfError, BPFFS, SHARED_ROOT};
use crate::kernel::Features;
use crate::sys::bpf;

/// The programs: name (the object's section, or a hand-assembled unix hook),
/// program type, attach type.
pub(super) const PROGRAMS: [(&str, u32, u32); 14] = [
    (
        "connect4",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_INET4_CONNECT,
    ),
    (
        "connect6",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_INET6_CONNECT,
    ),
    (
        "sendmsg4",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UDP4_SENDMSG,
    ),
    (
        "sendmsg6",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UDP6_SENDMSG,
    ),
    (
        "sock_create",
        bpf::PROG_TYPE_CGROUP_SOCK,
        bpf::ATTACH_INET_SOCK_CREATE,
    ),
    (
        "ingress",
        bpf::PROG_TYPE_CGROUP_SKB,
        bpf::ATTACH_INET_INGRESS,
    ),
    ("egress", bpf::PROG_TYPE_CGROUP_SKB, bpf::ATTACH_INET_EGRESS),
    (
        "connect_unix",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UNIX_CONNECT,
    ),
    (
        "sendmsg_unix",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UNIX_SENDMSG,
    ),
    (
        "recvmsg4",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UDP4_RECVMSG,
    ),
    (
        "recvmsg6",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_UDP6_RECVMSG,
    ),
    (
        "getpeername4",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_INET4_GETPEERNAME,
    ),
    (
        "getpeername6",
        bpf::PROG_TYPE_CGROUP_SOCK_ADDR,
        bpf::ATTACH_INET6_GETPEERNAME,
    ),
    ("sock_ops", bpf::PROG_TYPE_SOCK_OPS, bpf::ATTACH_SOCK_OPS),
];

/// Whether `attach_type` is one of the hooks only redirection uses
/// ([`crate::kernel::redirect`]).
fn redirect_only(attach_type: u32) -> bool {
    matches!(
        attach_type,
        bpf::ATTACH_UDP4_RECVMSG
            | bpf::ATTACH_UDP6_RECVMSG
            | bpf::ATTACH_INET4_GETPEERNAME
            | bpf::ATTACH_INET6_GETPEERNAME
            | bpf::ATTACH_SOCK_OPS
    )
}

/// The programs a run's hooks are: every one of [`PROGRAMS`] (all are
/// loaded and pinned), except in a TEST BUILD (`weaken-for-tests`) told by
/// `LOCKRUN_TEST_WEAKEN` to attach fewer: `no-ingress`, or
/// `no-packet-programs` (neither `ingress` nor `egress`), which is how
/// `tests/proxy_e2e.rs` shows what `egress` stops on its own. The build id
/// hashes this list, so a weakened build never shares the real one's parent.
pub(super) fn attached_programs() -> &'static [(&'static str, u32, u32)] {
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
/// whose promise is then the seccomp supervisor's alone, or a gap; and but
/// the hooks only redirection uses where the kernel lacks one
/// ([`crate::kernel::redirect`]: its runs go without redirection).
pub(super) fn programs_here() -> impl Iterator<Item = (&'static str, u32, u32)> {
    let unix_hooks = Features::get().unix_hooks;
    let redirect = crate::kernel::redirect().is_ok();
    PROGRAMS.into_iter().filter(move |(_, _, attach)| {
        (unix_hooks || !matches!(*attach, bpf::ATTACH_UNIX_CONNECT | bpf::ATTACH_UNIX_SENDMSG))
            && (redirect || !redirect_only(*attach))
    })
}

/// Parse the embedded object, create its maps (`RINGS` with a ring buffer as
/// its inner-map template) and the loader's `SLOT_OWNERS` and
/// `UNIX_PREFIXES`, relocate and load the object's programs, assemble and
/// load the unix hooks, and pin programs and maps into `dir`.
///
/// Without aya's `EbpfLoader`: its constructor parses /sys/kernel/btf/vmlinux,
/// which programs without CO-RE relocations never need. The
/// programs load with raw `BPF_PROG_LOAD`s, without BTF (no func/line info).
#[allow(clippy::too_many_lines)] // one load, in order
pub(super) fn load_object(object: &[u8], dir: &Path) -> Result<(), BpfError> {
    let mut obj = aya_obj::Object::parse(object).map_err(BpfError::Parse)?;
    let pin = |fd: BorrowedFd<'_>, name: &str| {
        let path = dir.join(name);
        bpf::obj_pin(fd, &path).map_err(|source| BpfError::Pin { path, source })
    };
    let ring_template = new_ring()?;
    let owners = bpf::map_create(&bpf::MapSpec {
        name: SLOT_OWNERS,
        map_type: bpf::MAP_TYPE_HASH,
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
    let prefixes = bpf::map_create(&bpf::MapSpec {
        name: UNIX_PREFIXES,
        map_type: bpf::MAP_TYPE_LPM_TRIE,
        key_size: std::mem::size_of::<UnixPrefixKey>() as u32,
        value_size: 1,
        max_entries: MAX_UNIX_PREFIXES_ALL_RUNS,
        flags: bpf::F_NO_PREALLOC,
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
        MAP_ORIGINALS,
        MAP_TRANSPARENT,
    ] {
        let m = obj.maps.remove(name).ok_or(BpfError::Missing(name))?;
        let fd = if name == MAP_RINGS {
            bpf::map_create(&bpf::MapSpec {
                name,
                map_type: bpf::MAP_TYPE_ARRAY_OF_MAPS,
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
    let unix_maps = UnixMaps {
        runs: fd_of(MAP_RUNS),
        unix_prefixes: prefixes.as_raw_fd(),
        rings: fd_of(MAP_RINGS),
        counters: fd_of(MAP_COUNTERS),
    };
    for (name, prog_type, attach_type) in programs_here() {
        let insns: Vec<u64> = match name {
            "connect_unix" => lockrun_unix::program(Hook::ConnectUnix, &unix_maps),
            "sendmsg_unix" => lockrun_unix::program(Hook::SendmsgUnix, &unix_maps),
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
        let fd = bpf::prog_load(prog_type, &insns, attach_type, name, c"GPL").map_err(
            |(source, log)| BpfError::RawLoad {
                program: name,
                source,
                log,
            },
        )?;
        pin(fd.as_fd(), name)?;
    }
    if unix_guard() {
        for (name, fd) in load_guard(&unix_maps)? {
            pin(fd.as_fd(), name)?;
        }
    }
    #[cfg(target_arch = "x86_64")]
    super::read_only::load(&obj, dir)?;
    Ok(())
}

/// The names the unix guard's programs are pinned by (their links:
/// `link-<name>`), by hook.
pub(super) const GUARD_PINS: [(Hook, &str); 2] = [
    (Hook::GuardConnectUnix, "guard_connect_unix"),
    (Hook::GuardSendUnix, "guard_send_unix"),
];

/// The structs whose members the guard reads ([`guard_target`]).
pub(super) const GUARD_STRUCTS: [&str; 4] = ["socket", "sock", "unix_sock", "unix_address"];

/// This kernel's BTF, as far as the guard reads it.
pub(super) fn guard_btf() -> io::Result<btf::Btf> {
    btf::Btf::of_kernel(&guard::FUNCTIONS.map(|(_, f)| f), &GUARD_STRUCTS)
}

/// The vmlinux BTF ids of the guard's functions ([`lockrun_unix::guard::FUNCTIONS`]) and
/// the struct offsets its programs read; `None` where this kernel's BTF
/// lacks one (or there is none).
pub(super) fn guard_target(btf: &btf::Btf) -> Option<([u32; 2], guard::Layout)> {
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

/// Whether this kernel's runs use lockrun's unix guard, asked once: where
/// the kernel has no cgroup unix hooks, and the guard loads
/// ([`unix_guard_loads`]); `crate::kernel::Kernel::unix_guard`.
#[must_use]
pub fn unix_guard() -> bool {
    static USED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USED.get_or_init(|| !Features::get().unix_hooks && unix_guard_loads())
}

/// Whether lockrun's unix guard can be loaded here ([`lockrun_unix::guard`]): the
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
    if bpf::obj_get(&kept).is_ok() {
        return true;
    }
    let Some((ids, _)) = guard_btf().ok().as_ref().and_then(guard_target) else {
        return false;
    };
    let mut probes = Vec::new();
    for id in ids {
        match bpf::prog_load_fmod_ret(&PASS, id, "lockrun_probe", false) {
            Ok(fd) => probes.push(fd),
            Err(_) => return false,
        }
    }
    // Kept where bpffs is already there (it is mounted later otherwise).
    if let Some(fd) = probes.first() {
        let _ = fs::create_dir(kept.parent().unwrap_or(Path::new(BPFFS)));
        let _ = bpf::obj_pin(fd.as_fd(), &kept);
    }
    true
}

/// How long a lockrun waits for the unix guard's link another lockrun has
/// just made to be pinned ([`Shared::ensure_guard`]).
pub(super) const GUARD_ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Under [`SHARED_ROOT`]: the pinned probe that says the unix guard loads
/// on this boot's kernel ([`unix_guard_loads`]); no build's, never reaped.
pub(super) const GUARD_PROBE: &str = "unix-guard-probe";

/// Assemble and load the guard's programs with the shared maps.
pub(super) fn load_guard(maps: &UnixMaps) -> Result<Vec<(&'static str, OwnedFd)>, BpfError> {
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
        let fd = bpf::prog_load_fmod_ret(&insns, id, name, true).map_err(|(source, log)| {
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
pub(super) fn encode_insn(i: aya_obj::generated::bpf_insn) -> u64 {
    let regs = (i.dst_reg() & 0xf) | ((i.src_reg() & 0xf) << 4);
    u64::from(i.code)
        | (u64::from(regs) << 8)
        | (u64::from(i.off.cast_unsigned()) << 16)
        | (u64::from(i.imm.cast_unsigned()) << 32)
}

/// Removes a half-built pin dir (a load that failed).
pub(super) struct PinGuard(pub(super) PathBuf);

impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
