//! The part of the filter for a kernel that lacks a mechanism lockrun
//! relies on ([`Fallbacks`]): it hands the supervisor the calls that
//! mechanism would have judged — the scoping and unix sections
//! ([`super::scope`]) and the truncating opens (Landlock ABI < 3).

use seccompiler::BpfProgram;

use super::assemble::{
    arg_lo, insn, AUDIT_ARCH, JA, JEQ_K, JSET_K, LD_W_ABS, RET_ALLOW, RET_K, RET_KILL_PROCESS,
    RET_USER_NOTIF,
};
use super::{scope, Fallbacks};

/// The part of [`crate::compile`] that hands the supervisor the calls a kernel's
/// missing mechanism would have judged ([`Fallbacks`]), and the calls it
/// decides on; allows every other. One section per mechanism, each handing
/// over its calls and going on to the next with every other: the scoping
/// and unix sections ([`scope::filter`]) take the number in the
/// accumulator and leave it there; the truncate section loads it again
/// itself, and leaves the accumulator holding anything.
pub(super) fn fallback_filter(fallbacks: Fallbacks) -> (BpfProgram, Vec<i64>) {
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    let mut calls = Vec::new();
    scope::filter(fallbacks, &mut p, &mut calls);
    if fallbacks.truncate {
        truncate_section(&mut p, &mut calls);
    }
    p.push(insn(RET_K, 0, 0, RET_ALLOW));
    (p, calls)
}

/// The opens that can truncate without asking Landlock for a write right,
/// with the argument that holds their flags: `O_TRUNC` with the access
/// mode `O_RDONLY`, or 3 (`O_WRONLY | O_RDWR`, which opens for neither and
/// asks Landlock nothing), truncate a regular file the run may only read
/// (or not even that) where Landlock has no truncate right (ABI < 3,
/// Linux < 6.2). `O_WRONLY` and `O_RDWR` ask for the write right, which
/// refuses them outside the writable roots, and so does `creat`
/// (`O_WRONLY`); `O_PATH` ignores `O_TRUNC`; `openat2` is `ENOSYS`.
pub const TRUNCATING_OPENS: &[(i64, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1),
    (libc::SYS_openat, 2),
];

/// Whether [`fallback_filter`] hands this call over for want of Landlock's
/// truncate right: `truncate(2)`, and the opens of [`TRUNCATING_OPENS`]
/// with `O_TRUNC`, without `O_PATH`, and access mode 0 or 3. Decided on
/// the registers alone, as the filter decides
/// (`truncating_agrees_with_the_filter`); the kernel reads the flags as an
/// int (the low half).
#[must_use]
pub fn truncating(nr: i64, args: [u64; 6]) -> bool {
    if nr == libc::SYS_truncate {
        return true;
    }
    TRUNCATING_OPENS
        .iter()
        .find(|(n, _)| *n == nr)
        .is_some_and(|(_, f)| {
            let flags = args[*f as usize] & 0xffff_ffff;
            let mode = flags & libc::O_ACCMODE as u64;
            flags & libc::O_TRUNC as u64 != 0
                && flags & libc::O_PATH as u64 == 0
                && (mode == 0 || mode == libc::O_ACCMODE as u64)
        })
}

/// [`fallback_filter`]'s section for [`Fallbacks::truncate`]: every
/// `truncate`, and the opens [`truncating`] names, to the supervisor
/// (`lockrun::supervise::truncate`), which truncates, or opens and hands
/// over the descriptor, only beneath a writable root.
pub(super) fn truncate_section(p: &mut BpfProgram, decided: &mut Vec<i64>) {
    let nr = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let (trunc, path) = (libc::O_TRUNC as u32, libc::O_PATH as u32);
    let (wronly, rdwr) = (libc::O_WRONLY as u32, libc::O_RDWR as u32);
    p.push(insn(LD_W_ABS, 0, 0, 0));
    p.push(insn(JEQ_K, 0, 1, nr(libc::SYS_truncate)));
    p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    decided.push(libc::SYS_truncate);
    let mut to_end = Vec::new();
    for (call, flags) in TRUNCATING_OPENS {
        // Not this call: over the eight below, to the next call's test.
        p.push(insn(JEQ_K, 0, 8, nr(*call)));
        p.extend([
            insn(LD_W_ABS, 0, 0, arg_lo(*flags)), // 0
            insn(JSET_K, 0, 5, trunc),            // 1: no O_TRUNC → 7
            insn(JSET_K, 4, 0, path),             // 2: O_PATH → 7
            insn(JSET_K, 0, 1, wronly),           // 3: → 4 | 5
            insn(JSET_K, 1, 2, rdwr),             // 4: mode 3 → 6, mode 1 → 7
            insn(JSET_K, 1, 0, rdwr),             // 5: mode 2 → 7, mode 0 → 6
            insn(RET_K, 0, 0, RET_USER_NOTIF),    // 6
        ]);
        // 7: this call is decided; the accumulator holds its flags, which
        // the next call's test must not take for a number: to the end.
        to_end.push(p.len());
        p.push(insn(JA, 0, 0, 0));
        decided.push(*call);
    }
    let end = p.len();
    for at in to_end {
        p[at].k = u32::try_from(end - at - 1).unwrap_or(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;

    /// Open flags that take each branch of the truncate section, with junk
    /// in the high half the kernel does not read.
    fn open_flag_cases() -> Vec<u64> {
        let mut flags = Vec::new();
        for mode in 0..4u64 {
            for extra in [
                0,
                libc::O_TRUNC as u64,
                (libc::O_TRUNC | libc::O_PATH) as u64,
                (libc::O_TRUNC | libc::O_CREAT) as u64,
                (libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC) as u64,
                (libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_DIRECTORY) as u64,
                libc::O_PATH as u64,
                0x1_0000_0000 | libc::O_TRUNC as u64,
                0x2000_0000_0000,
            ] {
                flags.push(mode | extra);
                flags.push(mode | extra | 0xffff_ffff_0000_0000);
            }
        }
        flags
    }

    /// The truncate section hands over exactly the calls
    /// [`super::truncating`] names (which the supervisor's
    /// `truncate` module takes by), and in the whole program every other
    /// open goes on as before: allowed, or refused for a set-id mode, which
    /// the supervisor asks first.
    #[test]
    fn truncating_agrees_with_the_filter() {
        let fallbacks = super::Fallbacks {
            truncate: true,
            ..super::Fallbacks::NONE
        };
        let (part, decided) = super::fallback_filter(fallbacks);
        let all = crate::compile(fallbacks).unwrap();
        let none = crate::compile(super::Fallbacks::NONE).unwrap();
        let mut cases: Vec<(i64, [u64; 6])> = vec![
            (libc::SYS_truncate, [0x1000, 0, 0, 0, 0, 0]),
            (libc::SYS_truncate, [u64::MAX; 6]),
            (libc::SYS_ftruncate, [3, 0, 0, 0, 0, 0]),
            (libc::SYS_read, [3, 0x1000, 0o1000, 0, 0, 0]),
            (libc::SYS_openat2, [3, 0x1000, 0x1000, 24, 0, 0]),
        ];
        #[cfg(target_arch = "x86_64")]
        cases.push((libc::SYS_creat, [0x1000, 0o644, 0, 0, 0, 0]));
        for flags in open_flag_cases() {
            for mode in [0o644, 0o4755] {
                cases.push((libc::SYS_openat, [3, 0x1000, flags, mode, 0, 0]));
                #[cfg(target_arch = "x86_64")]
                cases.push((libc::SYS_open, [0x1000, flags, mode, 0, 0, 0]));
            }
        }
        let mut handed = 0;
        for (nr, args) in cases {
            let truncating = super::truncating(nr, args);
            handed += usize::from(truncating);
            let want = if truncating {
                super::RET_USER_NOTIF
            } else {
                super::RET_ALLOW
            };
            assert_eq!(run(&part, nr, args), want, "part: {nr} {args:?}");
            // The whole program: the truncating calls notified; every other
            // answered as without the fallback.
            let whole = run(&all, nr, args);
            if truncating {
                assert_eq!(whole, super::RET_USER_NOTIF, "{nr} {args:?}");
                assert!(decided.contains(&nr), "{nr} not decided");
            } else {
                assert_eq!(whole, run(&none, nr, args), "{nr} {args:?}");
            }
        }
        // Each truncating branch was taken: truncate, and per open call
        // mode 0 and 3 with O_TRUNC, with or without O_CREAT, O_EXCL…
        assert!(handed >= 2 + 8, "only {handed} calls handed over");
        // The flags the section reads are the kernel's int: the low half.
        assert!(super::truncating(
            libc::SYS_openat,
            [
                3,
                0x1000,
                0xffff_ffff_0000_0000 | libc::O_TRUNC as u64,
                0,
                0,
                0
            ]
        ));
        assert!(!super::truncating(
            libc::SYS_openat,
            [
                3,
                0x1000,
                0x1_0000_0000 | libc::O_WRONLY as u64 | libc::O_TRUNC as u64,
                0,
                0,
                0
            ]
        ));
    }

    /// With every fallback, the program still fits the kernel's limit, its
    /// jumps stay inside, and only its last part allows.
    #[test]
    fn the_program_with_every_fallback_fits() {
        let every = super::Fallbacks {
            truncate: true,
            scoping: true,
            unix_addresses: true,
            metadata: true,
        };
        let all = crate::compile(every).unwrap();
        assert!(all.len() <= 4096);
        let (part, _) = super::fallback_filter(every);
        for (i, f) in part.iter().enumerate() {
            let to = match f.code {
                super::JA => i + 1 + f.k as usize,
                super::JEQ_K | super::JSET_K => i + 1 + usize::from(f.jt.max(f.jf)),
                _ => continue,
            };
            assert!(to < part.len(), "insn {i} jumps to {to} of {}", part.len());
        }
        assert_eq!(
            part.last().map(|f| (f.code, f.k)),
            Some((super::RET_K, super::RET_ALLOW))
        );
    }
}
