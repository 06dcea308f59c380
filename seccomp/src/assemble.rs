//! The classic-BPF assembler: the instructions and opcodes the filter is
//! written in, and the whole program put together from its parts — the
//! [`front`] (architecture, x32, a binary search over the decided calls)
//! and the parts [`chain`]ed, then compacted ([`super::compact`]).

use seccompiler::BpfProgram;

use super::deny_list::{filters, CLONE_NS_FLAGS, CREATING_FLAGS, F_SETLEASE};
use super::fallback::fallback_filter;
use super::notify::{
    metadata_decided, notify_filter, MODE_CALLS, NOTIFY_JUDGED, NOTIFY_SCHED, NOTIFY_WATCH,
    SET_ID_BITS,
};
use super::{compact, Fallbacks, SeccompError};

/// [`crate::compile`] with `fallbacks`, built and compacted now.
pub(super) fn compile_with(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    let out = compact::compact(&uncompacted(fallbacks)?);
    // BPF_MAXINSNS: the kernel refuses a longer classic program.
    if out.len() > 4096 {
        return Err(SeccompError::TooLong(out.len()));
    }
    Ok(out)
}

/// [`crate::compile`] as built, before [`compact::compact`] makes it smaller.
pub(super) fn uncompacted(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    let (parts, decided) = parts(fallbacks)?;
    let mut out = front(&decided, &fast_paths(fallbacks));
    out.extend(chain(&parts)?);
    Ok(out)
}

/// The parts of [`crate::compile`] in order, and every syscall number any
/// of them decides on (the others it allows).
pub(super) fn parts(fallbacks: Fallbacks) -> Result<(Vec<BpfProgram>, Vec<i64>), SeccompError> {
    let (mut parts, mut decided) = filters()?;
    parts.push(notify_filter(fallbacks));
    decided.extend(metadata_decided(fallbacks));
    decided.extend(NOTIFY_JUDGED);
    decided.extend(NOTIFY_SCHED.iter().map(|c| c.nr));
    decided.push(NOTIFY_WATCH);
    if fallbacks.truncate || fallbacks.scoping || fallbacks.unix_addresses {
        let (part, calls) = fallback_filter(fallbacks);
        parts.push(part);
        decided.extend(calls);
    }
    Ok((parts, decided))
}

/// A decided call that the front lets through itself when one argument
/// (its low half, which is all the kernel reads of these) shows that no
/// part would refuse or hand it over: the parts decide it with a rule on
/// that argument alone. Only the rest goes on to the parts.
///
/// Why: a call with a rule on its arguments is never in the kernel's cache
/// of calls always allowed, so the filter runs at each one. Down the parts,
/// whose lists are searched one number after another, a plain `openat`
/// took 91 instructions; here it takes 8, and `fork`'s `clone` 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fast {
    pub(super) nr: i64,
    pub(super) arg: u32,
    pub(super) unless: Unless,
}

/// When a [`Fast`] call goes on to the parts after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unless {
    /// Any of these bits is set.
    AnyOf(u32),
    /// The argument is this value.
    Is(u32),
}

/// The calls the front decides itself, for a kernel lacking `fallbacks`:
/// the opens unless they create (a set-id mode is refused) or, without
/// Landlock's truncate right, truncate; `clone` unless it asks for a
/// namespace; with Landlock's scoping, `fcntl` unless it takes a lease;
/// where the mounts hold metadata, the mode calls unless they set a set-id
/// bit.
/// What each part decides on these calls is proved the same, call by call,
/// by `the_fast_paths_agree_with_the_parts`.
pub(super) fn fast_paths(fallbacks: Fallbacks) -> Vec<Fast> {
    let creating = u32::try_from(CREATING_FLAGS.iter().fold(0, |m, f| m | f)).unwrap_or(u32::MAX);
    let opening = if fallbacks.truncate {
        creating | libc::O_TRUNC as u32
    } else {
        creating
    };
    let namespaces = CLONE_NS_FLAGS.iter().fold(0u64, |m, (f, _)| m | f);
    let mut fast = vec![
        Fast {
            nr: libc::SYS_openat,
            arg: 2,
            unless: Unless::AnyOf(opening),
        },
        Fast {
            nr: libc::SYS_clone,
            arg: 0,
            unless: Unless::AnyOf(u32::try_from(namespaces).unwrap_or(u32::MAX)),
        },
    ];
    // Without Landlock's scoping the supervisor takes the commands that
    // name a signal's receiver too (`F_SETOWN`, `F_SETSIG`, …).
    // A lease command that did not fit the low half would have no fast path
    // (never an allow for a value that cannot be compared).
    if let (false, Ok(lease)) = (fallbacks.scoping, u32::try_from(F_SETLEASE)) {
        fast.push(Fast {
            nr: libc::SYS_fcntl,
            arg: 1,
            unless: Unless::Is(lease),
        });
    }
    #[cfg(target_arch = "x86_64")]
    fast.push(Fast {
        nr: libc::SYS_open,
        arg: 1,
        unless: Unless::AnyOf(opening),
    });
    // Where the mounts hold metadata, a mode without a set-id bit
    // (`tar x`, `cp -a`: one per file).
    if !fallbacks.metadata {
        fast.extend(MODE_CALLS.iter().map(|(nr, arg)| Fast {
            nr: *nr,
            arg: *arg,
            unless: Unless::AnyOf(SET_ID_BITS),
        }));
    }
    fast
}

/// The first instructions of [`crate::compile`]: the architecture (any other is
/// killed), then on `x86_64` every x32-ABI call handed to the supervisor,
/// which refuses it with EPERM and reports it ([`refused_call`]), then the
/// [`Fast`] calls, then a binary search over `decided`, the calls some part
/// decides on; only those go on to the parts, every other call is allowed
/// here.
///
/// x32 calls carry bit 30 in their number under the same `AUDIT_ARCH`: on
/// a kernel built with `CONFIG_X86_X32_ABI` and booted with it on,
/// `0x4000_0000 | SYS_fchmodat` is `fchmodat`, and the parts, which compare
/// plain numbers, would let it past the deny list and the supervisor.
///
/// The search is for start-up: when the kernel loads a filter it runs it
/// for every syscall number (~470) to cache the ones it always allows. Down
/// the parts' lists that was ~200 comparisons per number, a few tenths of
/// a millisecond of every run; through the search it is ~10.
pub(super) fn front(decided: &[i64], fast: &[Fast]) -> BpfProgram {
    let mut nrs: Vec<u32> = decided
        .iter()
        .map(|nr| u32::try_from(*nr).unwrap_or(u32::MAX))
        .collect();
    nrs.sort_unstable();
    nrs.dedup();
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([
        insn(JSET_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, RET_USER_NOTIF),
    ]);
    let mut to_parts = Vec::new();
    for f in fast {
        // Another call: over the four below, the number still loaded.
        p.push(insn(JEQ_K, 0, 4, u32::try_from(f.nr).unwrap_or(u32::MAX)));
        p.push(insn(LD_W_ABS, 0, 0, arg_lo(f.arg)));
        p.push(match f.unless {
            Unless::AnyOf(bits) => insn(JSET_K, 0, 1, bits),
            Unless::Is(value) => insn(JEQ_K, 0, 1, value),
        });
        to_parts.push(p.len());
        p.push(insn(JA, 0, 0, 0));
        p.push(insn(RET_K, 0, 0, RET_ALLOW));
    }
    search(&mut p, &mut to_parts, &nrs);
    // Where every found number goes: a load of an argument, which ends the
    // kernel's trial run there (it follows loads of the number and the
    // architecture only). A decided number is never always allowed, so the
    // cache loses nothing, and the trial no longer walks the parts' lists
    // for each of them. Each part loads what it compares first.
    let parts_at = p.len();
    p.push(insn(LD_W_ABS, 0, 0, arg_lo(0)));
    for at in to_parts {
        p[at].k = u32::try_from(parts_at - at - 1).unwrap_or(u32::MAX);
    }
    p
}

/// A binary search for the number in the accumulator over sorted `nrs`:
/// found → a `JA` (recorded in `to_parts`, its offset set by [`front`]) to
/// the parts; not found → allow. Up to four numbers are compared in a row.
pub(super) fn search(p: &mut BpfProgram, to_parts: &mut Vec<usize>, nrs: &[u32]) {
    if nrs.len() <= 4 {
        for (i, nr) in nrs.iter().enumerate() {
            // Found: over the rest of the row and the allow, to the JA.
            p.push(insn(
                JEQ_K,
                u8::try_from(nrs.len() - i).unwrap_or(0),
                0,
                *nr,
            ));
        }
        p.push(insn(RET_K, 0, 0, RET_ALLOW));
        to_parts.push(p.len());
        p.push(insn(JA, 0, 0, 0));
        return;
    }
    let mid = nrs.len() / 2;
    // nr >= nrs[mid]: the JA over the lower half; below: skip the JA.
    p.push(insn(JGE_K, 0, 1, nrs[mid]));
    let over = p.len();
    p.push(insn(JA, 0, 0, 0));
    search(p, to_parts, &nrs[..mid]);
    p[over].k = u32::try_from(p.len() - over - 1).unwrap_or(u32::MAX);
    search(p, to_parts, &nrs[mid..]);
}

/// Concatenate complete filters: in each part but the last, every
/// `RET ALLOW` becomes a jump to the first instruction of the next part.
/// Jumps inside a part keep their offsets (one instruction replaces one).
pub(super) fn chain(parts: &[BpfProgram]) -> Result<BpfProgram, SeccompError> {
    let mut out = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        let last = n + 1 == parts.len();
        for (i, f) in part.iter().enumerate() {
            if !last && f.code == RET_K && f.k == RET_ALLOW {
                let to_next = u32::try_from(part.len() - i - 1)
                    .map_err(|_| SeccompError::TooLong(out.len() + part.len()))?;
                out.push(insn(JA, 0, 0, to_next));
            } else {
                out.push(f.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0x3e | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xb7 | 0x8000_0000 | 0x4000_0000;

pub(super) const RET_ALLOW: u32 = 0x7fff_0000;
pub(super) const RET_ERRNO: u32 = 0x0005_0000;
pub(super) const RET_USER_NOTIF: u32 = 0x7fc0_0000;
pub(super) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(super) const LD_W_ABS: u16 = 0x20;
pub(super) const JEQ_K: u16 = 0x15;
pub(super) const RET_K: u16 = 0x06;
/// `BPF_JMP | BPF_JA`: jump `k` instructions forward.
pub(super) const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JGE | BPF_K`, `BPF_JMP | BPF_JSET | BPF_K` (the x32
/// test, the open flags of [`truncate_section`]).
pub(super) const JGE_K: u16 = 0x35;
pub(super) const JSET_K: u16 = 0x45;
/// `__X32_SYSCALL_BIT`: the x32 ABI's syscall numbers.
#[cfg(target_arch = "x86_64")]
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `offsetof(struct seccomp_data, args[i])`, low and high 32-bit halves (LE).
pub(super) const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
pub(super) const fn arg_hi(i: u32) -> u32 {
    20 + 8 * i
}

#[must_use]
pub fn insn(code: u16, jt: u8, jf: u8, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter { code, jt, jf, k }
}
