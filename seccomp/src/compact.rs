//! The combined filter made smaller before it is loaded, with the same
//! verdict for every call: each jump that lands on an unconditional jump
//! goes straight to where that chain of jumps ends, each jump to a verdict
//! (`RET k`) to the last alike verdict it can reach, each load of the
//! `seccomp_data` word the accumulator already holds on every path to it
//! is dropped, and what that leaves unreachable, or a jump to the very next
//! instruction, is taken out (898 instructions become 486).
//!
//! Why: at each `seccomp(SECCOMP_SET_MODE_FILTER)` the kernel checks every
//! classic instruction, converts the program to eBPF (twice: once to size
//! it) and JITs the result, in the command's process before it runs, so
//! every instruction costs each run's start-up; in seccompiler's layout a
//! third of them are its `JEQ nr; JA +1; JA +n` triples, re-loads of the
//! syscall number and jumps to the next part.
//!
//! Why the verdict cannot change:
//! - a `JA` moves nothing: a jump to one is a jump to its target;
//! - a `RET k` returns `k`, whichever of them is jumped to;
//! - a dropped `LD [k]` would have loaded the word the accumulator already
//!   holds on every path reaching it (the same `seccomp_data` word, which
//!   does not change while the filter runs; any other instruction that
//!   writes the accumulator, or one this pass does not know, makes it
//!   unknown);
//! - an instruction no path reaches decides nothing.
//!
//! Jumps of classic BPF are forward only and a conditional one reaches at
//! most 255 instructions ahead: a threaded jump that would reach further
//! keeps its first target. A program this pass cannot read (a jump out of
//! range, a last instruction that falls off the end) is returned as it
//! was, for the kernel to refuse.

use std::collections::BTreeSet;

use seccompiler::{sock_filter, BpfProgram};

const CLASS: u16 = 0x07;
const CLASS_JMP: u16 = 0x05;
const CLASS_RET: u16 = 0x06;
const OP: u16 = 0xf0;
const OP_JA: u16 = 0x00;
/// `BPF_LD | BPF_W | BPF_ABS`: load the `seccomp_data` word at offset `k`.
const LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JA`.
const JA: u16 = CLASS_JMP | OP_JA;
/// `BPF_RET | BPF_K`: the verdict `k`.
const RET_K: u16 = CLASS_RET;

/// Where control goes after an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The next instruction.
    Fall,
    /// Always to this one (`JA`).
    Jump(usize),
    /// To the first when the condition holds, else the second.
    Branch(usize, usize),
    /// Nowhere: the verdict (`RET`).
    Stop,
}

/// What the accumulator holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acc {
    /// The `seccomp_data` word at this offset.
    Word(u32),
    Unknown,
}

/// One instruction and where it leads (absolute indices).
#[derive(Debug, Clone)]
struct Node {
    f: sock_filter,
    next: Next,
}

/// `p`, smaller, with the same verdict for every call (see the module docs).
#[must_use]
pub fn compact(p: &[sock_filter]) -> BpfProgram {
    let Some(mut nodes) = decode(p) else {
        return p.to_vec();
    };
    drop_known_loads(&mut nodes);
    // The jumps that must keep their first target: threaded, they would
    // reach more than 255 instructions ahead.
    let mut unthreaded = BTreeSet::new();
    loop {
        match lay_out(&thread(&nodes, &unthreaded)) {
            Ok(out) => return out,
            Err(far) => unthreaded.extend(far),
        }
    }
}

/// The program as nodes, or `None` when a jump leaves it or its last
/// instruction falls off the end.
fn decode(p: &[sock_filter]) -> Option<Vec<Node>> {
    let n = p.len();
    let at = |i: usize, off: usize| Some(i.checked_add(1)?.checked_add(off)?).filter(|&t| t < n);
    p.iter()
        .enumerate()
        .map(|(i, f)| {
            let next = match f.code & CLASS {
                CLASS_RET => Next::Stop,
                CLASS_JMP if f.code & OP == OP_JA => Next::Jump(at(i, f.k as usize)?),
                CLASS_JMP => Next::Branch(at(i, f.jt.into())?, at(i, f.jf.into())?),
                _ if i + 1 < n => Next::Fall,
                _ => return None,
            };
            Some(Node { f: f.clone(), next })
        })
        .collect()
}

/// Turn each load of the word the accumulator holds on every path to it
/// into a jump to the next instruction (which [`lay_out`] then drops).
/// Forward jumps only: every path to an instruction comes from one before
/// it, so one pass in order sees each instruction's every way in first.
fn drop_known_loads(nodes: &mut [Node]) {
    let mut acc: Vec<Option<Acc>> = vec![None; nodes.len()];
    if let Some(first) = acc.first_mut() {
        *first = Some(Acc::Unknown);
    }
    for i in 0..nodes.len() {
        // `None`: no path reaches it.
        let Some(held) = acc[i] else { continue };
        let f = nodes[i].f.clone();
        let after = match f.code & CLASS {
            _ if f.code == LD_W_ABS => {
                if held == Acc::Word(f.k) {
                    nodes[i] = Node {
                        f: sock_filter {
                            code: JA,
                            jt: 0,
                            jf: 0,
                            k: 0,
                        },
                        next: Next::Jump(i + 1),
                    };
                }
                Acc::Word(f.k)
            }
            CLASS_JMP | CLASS_RET => held,
            // Arithmetic, other loads, anything else: not known.
            _ => Acc::Unknown,
        };
        let mut reach = |to: usize| {
            acc[to] = Some(match acc[to] {
                None => after,
                Some(a) if a == after => a,
                Some(_) => Acc::Unknown,
            });
        };
        match nodes[i].next {
            Next::Fall => reach(i + 1),
            Next::Jump(t) => reach(t),
            Next::Branch(t, e) => {
                reach(t);
                reach(e);
            }
            Next::Stop => {}
        }
    }
}

/// Each jump's targets past the `JA`s they land on, but those in
/// `unthreaded` (`(instruction, taken?)`), which keep their first target;
/// a jump to a `RET k` goes to the last `RET k` it reaches (255
/// instructions ahead at most for a branch), so that the others, reached
/// by no one else, go; a branch whose two targets are then one is a `JA`.
fn thread(nodes: &[Node], unthreaded: &BTreeSet<(usize, bool)>) -> Vec<Node> {
    let end = |mut t: usize| {
        while let Next::Jump(to) = nodes[t].next {
            t = to;
        }
        t
    };
    // Every `RET k`, by `k`, in order.
    let mut rets: std::collections::BTreeMap<u32, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        if node.f.code == RET_K {
            rets.entry(node.f.k).or_default().push(i);
        }
    }
    // The last `RET k` alike `to`'s no further than `reach` after `from`.
    let alike = |from: usize, to: usize, reach: usize| {
        let f = &nodes[to].f;
        if f.code != RET_K {
            return to;
        }
        // `to` is among them: the last one up to the limit is at or after it
        // (or none is in reach, and the branch keeps its first target).
        let limit = from.saturating_add(1).saturating_add(reach);
        rets.get(&f.k)
            .and_then(|at| at[..at.partition_point(|&r| r <= limit)].last())
            .copied()
            .filter(|&r| r >= to)
            .unwrap_or(to)
    };
    nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let next = match node.next {
                Next::Jump(t) => Next::Jump(alike(i, end(t), usize::MAX)),
                Next::Branch(t, e) => {
                    let t = if unthreaded.contains(&(i, true)) {
                        t
                    } else {
                        alike(i, end(t), 255)
                    };
                    let e = if unthreaded.contains(&(i, false)) {
                        e
                    } else {
                        alike(i, end(e), 255)
                    };
                    if t == e {
                        Next::Jump(t)
                    } else {
                        Next::Branch(t, e)
                    }
                }
                n => n,
            };
            let f = if matches!((node.next, next), (Next::Branch(..), Next::Jump(_))) {
                sock_filter {
                    code: JA,
                    jt: 0,
                    jf: 0,
                    k: 0,
                }
            } else {
                node.f.clone()
            };
            Node { f, next }
        })
        .collect()
}

/// The instructions some path reaches, without the `JA`s to the very next
/// one, with their offsets; or the branches (`(instruction, taken?)`) that
/// would reach more than 255 instructions ahead.
fn lay_out(nodes: &[Node]) -> Result<BpfProgram, Vec<(usize, bool)>> {
    let len = nodes.len();
    let mut kept = vec![false; len];
    if len > 0 {
        kept[0] = true;
    }
    for i in 0..len {
        if !kept[i] {
            continue;
        }
        match nodes[i].next {
            Next::Fall => kept[i + 1] = true,
            Next::Jump(to) => kept[to] = true,
            Next::Branch(taken, other) => {
                kept[taken] = true;
                kept[other] = true;
            }
            Next::Stop => {}
        }
    }
    // From the end: a `JA` to the next instruction kept goes too, and the
    // one kept after those before it stays that one.
    let mut next_kept = len;
    for i in (0..len).rev() {
        if !kept[i] {
            continue;
        }
        if nodes[i].next == Next::Jump(next_kept) {
            kept[i] = false;
        } else {
            next_kept = i;
        }
    }
    // Where each instruction goes: one not kept, where the next kept one
    // goes (a dropped `JA` led there; an unreached one is no target).
    let mut place = vec![0; len + 1];
    place[len] = kept.iter().filter(|&&k| k).count();
    let mut slot = place[len];
    for i in (0..len).rev() {
        if kept[i] {
            slot -= 1;
            place[i] = slot;
        } else {
            place[i] = place[i + 1];
        }
    }
    let mut far = Vec::new();
    let mut out = Vec::with_capacity(place[len]);
    for i in (0..len).filter(|&i| kept[i]) {
        let mut f = nodes[i].f.clone();
        let ahead = |to: usize| place[to] - place[i] - 1;
        match nodes[i].next {
            Next::Jump(to) => f.k = u32::try_from(ahead(to)).unwrap_or(u32::MAX),
            Next::Branch(taken, other) => {
                match u8::try_from(ahead(taken)) {
                    Ok(jt) => f.jt = jt,
                    Err(_) => far.push((i, true)),
                }
                match u8::try_from(ahead(other)) {
                    Ok(jf) => f.jf = jf,
                    Err(_) => far.push((i, false)),
                }
            }
            Next::Fall | Next::Stop => {}
        }
        out.push(f);
    }
    if far.is_empty() {
        Ok(out)
    } else {
        Err(far)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AND_K: u16 = 0x54;
    const JEQ_K: u16 = 0x15;
    const JGT_K: u16 = 0x25;
    const JGE_K: u16 = 0x35;
    const JSET_K: u16 = 0x45;

    /// A `seccomp_data`: number, arch, instruction pointer, arguments.
    #[derive(Clone, Copy)]
    struct Data {
        nr: u32,
        arch: u32,
        ip: u64,
        args: [u64; 6],
    }

    impl Data {
        /// The 32-bit word at byte offset `k` of the struct (little endian).
        fn word(&self, k: u32) -> u32 {
            let half = |v: u64, hi: bool| if hi { (v >> 32) as u32 } else { v as u32 };
            match k {
                0 => self.nr,
                4 => self.arch,
                8 | 12 => half(self.ip, k == 12),
                16..=60 if k.is_multiple_of(4) => {
                    half(self.args[(k as usize - 16) / 8], k % 8 == 4)
                }
                _ => panic!("load at {k}"),
            }
        }
    }

    /// Run a classic-BPF filter (the opcodes lockrun's and seccompiler's
    /// filters use; any other fails the test); the verdict and the
    /// instructions run.
    fn run(p: &[sock_filter], d: &Data) -> (u32, usize) {
        let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0usize);
        loop {
            let f = &p[pc];
            steps += 1;
            let cond = |c: bool| 1 + usize::from(if c { f.jt } else { f.jf });
            pc += match f.code {
                LD_W_ABS => {
                    acc = d.word(f.k);
                    1
                }
                JEQ_K => cond(acc == f.k),
                JGT_K => cond(acc > f.k),
                JGE_K => cond(acc >= f.k),
                JSET_K => cond(acc & f.k != 0),
                AND_K => {
                    acc &= f.k;
                    1
                }
                JA => 1 + f.k as usize,
                RET_K => return (f.k, steps),
                c => panic!("opcode {c:#x}"),
            };
        }
    }

    fn f(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    /// A program's instructions, comparable.
    fn fields(p: &[sock_filter]) -> Vec<(u16, u8, u8, u32)> {
        p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect()
    }

    /// `p` and `small` give each of the syscall numbers `nrs` (no
    /// arguments) the same verdict.
    fn same_verdicts(p: &[sock_filter], small: &[sock_filter], nrs: impl Iterator<Item = u32>) {
        for nr in nrs {
            let d = Data {
                nr,
                arch: 0,
                ip: 0,
                args: [0; 6],
            };
            assert_eq!(run(p, &d).0, run(small, &d).0, "nr {nr}");
        }
    }

    /// The combined filter lockrun loads, compacted, gives every call the
    /// verdict the filter as built gives it: every syscall number (and its
    /// x32 twin) under this arch and others, then, for each number, each
    /// argument half set to every constant the filter compares with (and
    /// its neighbours), then mixed arguments from those constants.
    #[test]
    fn the_compacted_filter_gives_every_call_the_verdict_of_the_filter_built() {
        let built = super::super::assemble::uncompacted(super::super::Fallbacks::NONE)
            .unwrap_or_else(|e| panic!("{e}"));
        let small = compact(&built);
        assert!(
            small.len() * 10 < built.len() * 8,
            "{} of {} instructions left",
            small.len(),
            built.len()
        );
        let mut pool: BTreeSet<u32> = [0, 1, 2, u32::MAX, 0x8000_0000, 0x4000_0000].into();
        for i in &built {
            pool.extend([i.k, i.k.wrapping_add(1), i.k.wrapping_sub(1)]);
        }
        let pool: Vec<u32> = pool.into_iter().collect();
        let arch = super::super::assemble::AUDIT_ARCH;
        let mut checked = 0usize;
        let mut same = |d: Data| {
            assert_eq!(
                run(&built, &d).0,
                run(&small, &d).0,
                "nr {:#x} arch {:#x} args {:x?}",
                d.nr,
                d.arch,
                d.args
            );
            checked += 1;
        };
        let zero = Data {
            nr: 0,
            arch,
            ip: 0,
            args: [0; 6],
        };
        for nr in (0..1024).chain((0..1024).map(|n| n | 0x4000_0000)) {
            for a in [arch, 0x4000_0003, 0] {
                same(Data {
                    nr,
                    arch: a,
                    ..zero
                });
            }
        }
        for nr in (0..600).chain(pool.iter().copied()) {
            for arg in 0..6 {
                for hi in [false, true] {
                    for &c in &pool {
                        let mut d = Data { nr, ..zero };
                        d.args[arg] = if hi { u64::from(c) << 32 } else { u64::from(c) };
                        same(d);
                    }
                }
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut pick = |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(seed >> 33).unwrap_or(0) % n
        };
        for _ in 0..200_000 {
            let mut d = Data {
                nr: u32::try_from(pick(600)).unwrap_or(0),
                ..zero
            };
            for a in &mut d.args {
                *a = (u64::from(pool[pick(pool.len())]) << 32) | u64::from(pool[pick(pool.len())]);
            }
            same(d);
        }
        assert!(checked > 1_000_000, "{checked} calls compared");
    }

    /// Each way the pass shrinks a program, on a program of a few
    /// instructions: a branch to a `JA` chain goes to its end, a load of
    /// what the accumulator holds goes, unreached instructions go.
    #[test]
    fn jumps_are_threaded_known_loads_and_dead_code_dropped() {
        let p = vec![
            f(LD_W_ABS, 0, 0, 0),        // 0: A = nr
            f(JEQ_K, 0, 2, 1),           // 1: nr == 1 → 2, else → 4
            f(JA, 0, 0, 0),              // 2: → 3
            f(JA, 0, 0, 3),              // 3: → 7
            f(LD_W_ABS, 0, 0, 0),        // 4: A = nr again: dropped
            f(JEQ_K, 0, 1, 2),           // 5: nr == 2 → 6, else → 7
            f(RET_K, 0, 0, 0x5_0001),    // 6: errno 1
            f(RET_K, 0, 0, 0x7fff_0000), // 7: allow
            f(RET_K, 0, 0, 0),           // 8: unreached
        ];
        let small = compact(&p);
        assert_eq!(
            fields(&small),
            [
                (LD_W_ABS, 0, 0, 0),
                (JEQ_K, 2, 0, 1),
                (JEQ_K, 0, 1, 2),
                (RET_K, 0, 0, 0x5_0001),
                (RET_K, 0, 0, 0x7fff_0000),
            ]
        );
        same_verdicts(&p, &small, 0..4);
    }

    /// Jumps to alike verdicts share the last of them: the others go.
    #[test]
    fn jumps_to_the_same_verdict_share_one() {
        let p = vec![
            f(LD_W_ABS, 0, 0, 0),        // 0: A = nr
            f(JEQ_K, 0, 1, 1),           // 1: nr == 1 → 2, else → 3
            f(RET_K, 0, 0, 0x5_0001),    // 2: errno 1, reached by 1 alone
            f(JEQ_K, 0, 1, 2),           // 3: nr == 2 → 4, else → 5
            f(RET_K, 0, 0, 0x5_0001),    // 4: errno 1
            f(RET_K, 0, 0, 0x7fff_0000), // 5: allow
        ];
        let small = compact(&p);
        assert_eq!(
            fields(&small),
            [
                (LD_W_ABS, 0, 0, 0),
                (JEQ_K, 1, 0, 1),
                (JEQ_K, 0, 1, 2),
                (RET_K, 0, 0, 0x5_0001),
                (RET_K, 0, 0, 0x7fff_0000),
            ]
        );
        same_verdicts(&p, &small, 0..4);
    }

    /// A branch whose threaded target would lie more than 255 instructions
    /// ahead keeps its first one, the `JA` that reaches it.
    #[test]
    fn a_branch_too_far_from_its_chains_end_keeps_its_jump() {
        let mut p = vec![
            f(LD_W_ABS, 0, 0, 0),
            f(JEQ_K, 0, 1, 7),
            f(JA, 0, 0, 302), // → the errno, 303 ahead of the branch
            f(JA, 0, 0, 0),   // → the run of loads
        ];
        // 300 instructions that write the accumulator, each kept.
        p.extend((0..300).map(|k| f(LD_W_ABS, 0, 0, 16 + 4 * (k % 2))));
        p.push(f(RET_K, 0, 0, 0x7fff_0000));
        p.push(f(RET_K, 0, 0, 0x5_0001));
        let small = compact(&p);
        // Only the JA the branch's other way threads past goes.
        assert_eq!(small.len(), p.len() - 1);
        assert_eq!((small[2].code, small[2].k), (JA, 301), "the kept JA");
        same_verdicts(&p, &small, [6, 7, 8].into_iter());
    }

    /// What the pass cannot read is left as it was, for the kernel to refuse.
    #[test]
    fn a_program_that_jumps_out_or_falls_off_is_left_as_it_is() {
        for p in [
            vec![f(JA, 0, 0, 5), f(RET_K, 0, 0, 0)],
            vec![f(JEQ_K, 0, 9, 1), f(RET_K, 0, 0, 0)],
            vec![f(LD_W_ABS, 0, 0, 0)],
        ] {
            assert_eq!(fields(&compact(&p)), fields(&p));
        }
    }
}
