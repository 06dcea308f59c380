//! The unix programs lockrun assembles itself, instructions only: loaded
//! by `lockrun::bpf`, and hashed into the build id by lockrun's build
//! script. The unix guard, for kernels without the hooks below, is
//! [`guard`].
//!
//! The `cgroup/connect_unix` and `cgroup/sendmsg_unix` hooks (kernel 6.7),
//! assembled here because aya 0.14 can neither parse nor load programs of
//! those attach types. Like the object's programs they are verified once per
//! build and attached to the build's parent cgroup; they reach the shared
//! maps (`RUNS`, `UNIX_PREFIXES`, `COUNTERS`, `RINGS`) by fd.
//!
//! # Whose connect
//! The hook runs for every unix socket created in a run's cgroup, whoever
//! uses it. The calling task's cgroup id is looked up in `RUNS`:
//! - **not a run** (no entry): lockrun's seccomp supervisor, connecting for
//!   the command from outside after resolving the path itself (see
//!   `lockrun::supervise`), passes. A run's tasks cannot leave their cgroup
//!   (Landlock denies writes to cgroupfs), and a run is in `RUNS` from
//!   before its first task until after its cgroup is removed.
//! - **a run**: judged by its [`RunConfig::unix_mode`](lockrun_common::RunConfig).
//!
//! # What they decide for a run's task
//! Unnamed destinations pass. Abstract ones (`sun_path[0] == 0`) pass where
//! Landlock's `Scope::AbstractUnixSocket` confines them to the run's own
//! domain (ABI 6, Linux 6.12); before, the run's mode says so
//! (`UNIX_MODE_ABSTRACT`), and every abstract name a task of the run names
//! itself is refused: the supervisor connects to the names the run bound
//! (`lockrun::supervise::abstract_unix`), and this is what keeps an
//! address it did not see (length 16 or 28, `sendmsg`, swapped in after
//! its read) from reaching one bound outside. A pathname destination:
//! - supervised mode (what `lockrun run` uses): refused — every legitimate
//!   pathname connect is performed by the supervisor, so one a task names
//!   itself is a connect the filter did not notify (address length 16 or 28),
//!   a `sendmsg`/`sendmmsg` with a `msg_name` (user memory the supervisor
//!   cannot read race-free), or an address swapped in after the supervisor
//!   let a non-pathname address continue;
//! - prefix mode (library callers): passes only when it is absolute, has no
//!   `.` or `..` component (`/wt/../../run/docker.sock` is refused) and lies
//!   under one of the run's directories in `UNIX_PREFIXES` (an LPM-trie match
//!   on the run's cgroup id and the raw bytes). The hook runs before the
//!   kernel resolves the path, so a **symlink** inside an allowed directory
//!   that points at an outside socket passes the textual check.
//!
//! # Layout the program relies on
//! `struct bpf_sock_addr_kern` (include/linux/filter.h, 6.7+): `sk` @0, `uaddr` @8,
//! `tmp_reg` @16, `t_ctx` @24, `uaddrlen: u32` @32. The program receives a
//! pointer to it as its context and reads it with `bpf_probe_read_kernel`
//! (allowed for privileged loaders; lockdown `integrity` does not forbid it).
//! Bytes of `sun_path` past `uaddrlen` are garbage at hook time: only
//! `uaddrlen - 2` bytes are read, into a zeroed buffer.

// BPF instruction fields are fixed-width two's-complement encodings, and every
// offset here is a small constant of this file: the casts are the encoding.
#![allow(
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

pub mod guard;

use lockrun_common::{
    denial_offset as off, Hook, AF_UNIX, COUNTER_LOST, UNIX_MODE_ABSTRACT, UNIX_MODE_PREFIXES,
    UNIX_MODE_SUPERVISED, UNIX_PATH_MAX,
};

/// The shared maps the unix hooks use, as raw fds valid while the program loads.
pub struct UnixMaps {
    pub runs: i32,
    pub unix_prefixes: i32,
    pub rings: i32,
    pub counters: i32,
}

/// How pathname destinations named by tasks of a run are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnixMode {
    /// By text: absolute, no `.`/`..`, under the run's `UNIX_PREFIXES` (symlinks pass).
    Prefixes,
    /// All refused: the seccomp supervisor connects for the command.
    Supervised,
    /// All refused, and every abstract name too: the seccomp supervisor
    /// connects for the command to the abstract names the run bound
    /// (no Landlock scoping, `lockrun::supervise::abstract_unix`).
    SupervisedAbstract,
}

impl UnixMode {
    /// The value in [`RunConfig::unix_mode`](lockrun_common::RunConfig).
    #[must_use]
    pub fn raw(self) -> u32 {
        match self {
            UnixMode::Prefixes => UNIX_MODE_PREFIXES,
            UnixMode::Supervised => UNIX_MODE_SUPERVISED,
            UnixMode::SupervisedAbstract => UNIX_MODE_SUPERVISED | UNIX_MODE_ABSTRACT,
        }
    }

    /// The supervised mode for this kernel's `fallbacks`.
    #[must_use]
    pub fn supervised(fallbacks: lockrun_seccomp::Fallbacks) -> Self {
        if lockrun_seccomp::scope::abstract_names_supervised(fallbacks) {
            UnixMode::SupervisedAbstract
        } else {
            UnixMode::Supervised
        }
    }
}

// Registers.
pub(crate) const R0: u8 = 0;
pub(crate) const R1: u8 = 1;
pub(crate) const R2: u8 = 2;
pub(crate) const R3: u8 = 3;
pub(crate) const R4: u8 = 4;
pub(crate) const R6: u8 = 6;
pub(crate) const R7: u8 = 7;
pub(crate) const R8: u8 = 8;
pub(crate) const FP: u8 = 10;

// Helpers.
pub(crate) const MAP_LOOKUP_ELEM: i32 = 1;
pub(crate) const GET_CURRENT_PID_TGID: i32 = 14;
pub(crate) const GET_CURRENT_COMM: i32 = 16;
pub(crate) const GET_CURRENT_CGROUP_ID: i32 = 80;
pub(crate) const PROBE_READ_KERNEL: i32 = 113;
pub(crate) const RINGBUF_OUTPUT: i32 = 130;

// Stack layout (offsets from the frame pointer).
const STACK: i16 = 360;
const EVENT: i16 = -176; // Denial, 176 bytes
                         // UnixPrefixKey: prefix_len u32, the cgroup id (two u32 stores: the stack
                         // is accessed aligned), 108 path bytes, then 8 zero bytes of slack.
const KEY: i16 = -304;
const KEY_CGROUP: i16 = KEY + 4;
const KEY_PATH: i16 = KEY + 12;
const KERN: i16 = -344; // copy of bpf_sock_addr_kern, 40 bytes
const CGROUP: i16 = -352; // u64: the calling task's cgroup id (key of RUNS, COUNTERS)
const SLOT: i16 = -360; // u32: the run's ring slot (key of RINGS)
const MODE: i16 = -356; // u32: the run's unix mode

const KERN_UADDR: i16 = 8;
const KERN_UADDRLEN: i16 = 32;
const KERN_SIZE: i32 = 40;
/// `offsetof(struct bpf_sock_addr, type)`.
const CTX_TYPE: i16 = 32;

#[derive(Clone, Copy)]
pub(crate) enum Label {
    Allow,
    Deny,
    Next(usize),
    SkipCount,
    SkipPath,
    Done,
    SkipLost,
    Lost,
    Pathname,
}

impl Label {
    pub(crate) fn id(self) -> usize {
        match self {
            Label::Allow => 0,
            Label::Deny => 1,
            Label::SkipCount => 2,
            Label::SkipPath => 3,
            Label::Done => 4,
            Label::SkipLost => 5,
            Label::Lost => 6,
            Label::Pathname => 7,
            Label::Next(i) => 16 + i,
        }
    }
}

/// A tiny BPF assembler: enough for these two programs.
#[derive(Default)]
pub(crate) struct Asm {
    insns: Vec<u64>,
    labels: std::collections::HashMap<usize, usize>,
    fixups: Vec<(usize, usize)>,
}

fn enc(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | (u64::from(dst | (src << 4)) << 8)
        | (u64::from(off as u16) << 16)
        | (u64::from(imm as u32) << 32)
}

impl Asm {
    pub(crate) fn raw(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(enc(code, dst, src, off, imm));
    }
    pub(crate) fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0xb7, dst, 0, 0, imm);
    }
    pub(crate) fn mov_reg(&mut self, dst: u8, src: u8) {
        self.raw(0xbf, dst, src, 0, 0);
    }
    pub(crate) fn add_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0x07, dst, 0, 0, imm);
    }
    pub(crate) fn sub_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0x17, dst, 0, 0, imm);
    }
    pub(crate) fn rsh_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0x77, dst, 0, 0, imm);
    }
    pub(crate) fn ldx_b(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(0x71, dst, src, off, 0);
    }
    pub(crate) fn ldx_w(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(0x61, dst, src, off, 0);
    }
    pub(crate) fn ldx_dw(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(0x79, dst, src, off, 0);
    }
    pub(crate) fn stx_w(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(0x63, dst, src, off, 0);
    }
    pub(crate) fn stx_dw(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(0x7b, dst, src, off, 0);
    }
    pub(crate) fn st_w(&mut self, dst: u8, off: i16, imm: i32) {
        self.raw(0x62, dst, 0, off, imm);
    }
    pub(crate) fn st_h(&mut self, dst: u8, off: i16, imm: i32) {
        self.raw(0x6a, dst, 0, off, imm);
    }
    pub(crate) fn st_dw(&mut self, dst: u8, off: i16, imm: i32) {
        self.raw(0x7a, dst, 0, off, imm);
    }
    /// `dst = map fd` (two-slot `ld_imm64` with `BPF_PSEUDO_MAP_FD`).
    pub(crate) fn ld_map_fd(&mut self, dst: u8, fd: i32) {
        self.raw(0x18, dst, 1, 0, fd);
        self.raw(0, 0, 0, 0, 0);
    }
    pub(crate) fn call(&mut self, helper: i32) {
        self.raw(0x85, 0, 0, 0, helper);
    }
    pub(crate) fn exit(&mut self) {
        self.raw(0x95, 0, 0, 0, 0);
    }
    /// Conditional jump on `dst OP imm` (code: 0x15 jeq, 0x55 jne, 0x25 jgt, 0xb5 jle).
    pub(crate) fn jmp_imm(&mut self, code: u8, dst: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to.id()));
        self.raw(code, dst, 0, 0, imm);
    }
    /// Conditional jump on `dst OP src` (code: 0x1d jeq).
    pub(crate) fn jmp_reg(&mut self, code: u8, dst: u8, src: u8, to: Label) {
        self.fixups.push((self.insns.len(), to.id()));
        self.raw(code, dst, src, 0, 0);
    }
    pub(crate) fn label(&mut self, l: Label) {
        self.labels.insert(l.id(), self.insns.len());
    }
    pub(crate) fn finish(mut self) -> Vec<u64> {
        for (at, label) in std::mem::take(&mut self.fixups) {
            let target = self.labels.get(&label).copied().unwrap_or(at + 1);
            let delta = (target as i64 - at as i64 - 1) as i16;
            let insn = self.insns[at];
            self.insns[at] = (insn & !(0xffff << 16)) | (u64::from(delta as u16) << 16);
        }
        self.insns
    }
}

pub(crate) const JA: u8 = 0x05;
pub(crate) const JEQ: u8 = 0x15;
pub(crate) const JNE: u8 = 0x55;
pub(crate) const JSET: u8 = 0x45;
pub(crate) const JGT: u8 = 0x25;
pub(crate) const JLE: u8 = 0xb5;

/// Assemble the hook program for `hook` (`ConnectUnix` or `SendmsgUnix`).
/// One straight-line listing, kept in one piece so it reads like the program.
#[must_use]
#[allow(clippy::too_many_lines)] // one listing, read as the program it assembles
pub fn program(hook: Hook, maps: &UnixMaps) -> Vec<u64> {
    let mut a = Asm::default();
    let hook_id = hook as i32;
    a.mov_reg(R6, R1);
    // r7/r8 are read on the deny path; give them a value on every path. Without
    // this the verifier refused the program (kernel 6.18):
    //     0: R1=ctx() R10=fp0
    //     R8 !read_ok
    //     processed 2860 insns (limit 1000000) max_states_per_insn 2 total_states 262
    a.mov_imm(R7, 0);
    a.mov_imm(R8, 0);
    // Zero the whole frame: the event, the trie key and its slack are read later.
    // Not for the verifier (a privileged loader may read uninitialized stack; it
    // accepted the program without this), but for the verdict and the log: the
    // bytes after the path must be zero for the `..` scan, and an event must not
    // carry stale kernel stack into the audit log.
    for k in 1..=(STACK / 8) {
        a.st_dw(FP, -8 * k, 0);
    }
    // Whose connect: a task of a run (RUNS has its cgroup), or a task outside
    // acting on a socket of a run — the supervisor, connecting for the
    // command after resolving the path itself.
    a.call(GET_CURRENT_CGROUP_ID);
    a.stx_dw(FP, R0, CGROUP);
    a.stx_w(FP, R0, KEY_CGROUP);
    a.rsh_imm(R0, 32);
    a.stx_w(FP, R0, KEY_CGROUP + 4);
    a.ld_map_fd(R1, maps.runs);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(CGROUP));
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_imm(JEQ, R0, 0, Label::Allow);
    a.ldx_w(R1, R0, 0); // RunConfig.slot
    a.stx_w(FP, R1, SLOT);
    a.ldx_w(R1, R0, 4); // RunConfig.unix_mode
    a.stx_w(FP, R1, MODE);
    // Copy the kernel context (struct bpf_sock_addr_kern).
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(KERN));
    a.mov_imm(R2, KERN_SIZE);
    a.mov_reg(R3, R6);
    a.call(PROBE_READ_KERNEL);
    a.jmp_imm(JNE, R0, 0, Label::Deny);
    a.ldx_dw(R7, FP, KERN + KERN_UADDR);
    a.ldx_w(R8, FP, KERN + KERN_UADDRLEN);
    // unix_validate_addr() already refused <= 2 bytes; an unnamed address is not a path.
    a.jmp_imm(JLE, R8, 2, Label::Allow);
    // More than sizeof(struct sockaddr_un) cannot happen; refuse rather than guess.
    a.jmp_imm(JGT, R8, 2 + UNIX_PATH_MAX as i32, Label::Deny);
    a.sub_imm(R8, 2); // bytes of sun_path: 1..=108
    a.add_imm(R7, 2); // &sun_path
                      // The trie key's length: the cgroup id and the whole path field.
    a.st_w(FP, KEY, ((8 + UNIX_PATH_MAX) * 8) as i32);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(KEY_PATH));
    a.mov_reg(R2, R8);
    a.mov_reg(R3, R7);
    a.call(PROBE_READ_KERNEL);
    a.jmp_imm(JNE, R0, 0, Label::Deny);
    a.ldx_b(R1, FP, KEY_PATH);
    a.ldx_w(R2, FP, MODE);
    a.jmp_imm(JNE, R1, 0, Label::Pathname);
    // Abstract: Landlock's scoping judges it; where there is none, the
    // supervisor does, and every abstract name a task of the run names
    // itself is refused (UNIX_MODE_ABSTRACT).
    a.jmp_imm(JSET, R2, UNIX_MODE_ABSTRACT as i32, Label::Deny);
    a.jmp_imm(JA, R0, 0, Label::Allow);
    a.label(Label::Pathname);
    // Supervised: every pathname named by a task of the run is refused; the
    // supervisor performs the legitimate ones from outside (allowed above).
    a.jmp_imm(JSET, R2, UNIX_MODE_SUPERVISED as i32, Label::Deny);
    a.jmp_imm(JNE, R1, i32::from(b'/'), Label::Deny); // relative
                                                      // Refuse any `.` or `..` component. Unrolled: no loop for the verifier to bound.
    for i in 0..(UNIX_PATH_MAX as i16 - 1) {
        let at = KEY_PATH + i;
        a.ldx_b(R1, FP, at);
        a.jmp_imm(JNE, R1, i32::from(b'/'), Label::Next(i as usize));
        a.ldx_b(R1, FP, at + 1);
        a.jmp_imm(JNE, R1, i32::from(b'.'), Label::Next(i as usize));
        a.ldx_b(R1, FP, at + 2);
        a.jmp_imm(JEQ, R1, i32::from(b'/'), Label::Deny);
        a.jmp_imm(JEQ, R1, 0, Label::Deny);
        a.jmp_imm(JNE, R1, i32::from(b'.'), Label::Next(i as usize));
        a.ldx_b(R1, FP, at + 3);
        a.jmp_imm(JEQ, R1, i32::from(b'/'), Label::Deny);
        a.jmp_imm(JEQ, R1, 0, Label::Deny);
        a.label(Label::Next(i as usize));
    }
    // Under one of the run's directories?
    a.ld_map_fd(R1, maps.unix_prefixes);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(KEY));
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_imm(JEQ, R0, 0, Label::Deny);
    a.label(Label::Allow);
    a.mov_imm(R0, 1);
    a.exit();

    a.label(Label::Deny);
    // COUNTERS[run cgroup].slots[hook] += 1
    count(
        &mut a,
        maps,
        CGROUP,
        i16::try_from(hook_id * 8).unwrap_or(0),
        Label::SkipCount,
    );
    a.label(Label::SkipCount);
    // The Denial record.
    a.ldx_dw(R0, FP, CGROUP);
    a.stx_dw(FP, R0, EVENT + off::CGROUP_ID);
    a.call(GET_CURRENT_PID_TGID);
    a.stx_w(FP, R0, EVENT + off::PID);
    a.rsh_imm(R0, 32);
    a.stx_w(FP, R0, EVENT + off::TGID);
    a.st_w(FP, EVENT + off::HOOK, hook_id);
    a.ldx_w(R1, R6, CTX_TYPE);
    a.stx_w(FP, R1, EVENT + off::SOCK_TYPE);
    a.st_h(FP, EVENT + off::FAMILY, i32::from(AF_UNIX));
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(EVENT + off::COMM));
    a.mov_imm(R2, 16);
    a.call(GET_CURRENT_COMM);
    // The path, when one was read: r8 is 1..=108 here, or 0 when refused before.
    a.jmp_imm(JEQ, R8, 0, Label::SkipPath);
    a.jmp_imm(JGT, R8, UNIX_PATH_MAX as i32, Label::SkipPath);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(EVENT + off::PATH));
    a.mov_reg(R2, R8);
    a.mov_reg(R3, R7);
    a.call(PROBE_READ_KERNEL);
    a.label(Label::SkipPath);
    // The run's ring: RINGS[slot].
    a.ld_map_fd(R1, maps.rings);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(SLOT));
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_imm(JEQ, R0, 0, Label::Lost);
    a.mov_reg(R1, R0);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(EVENT));
    a.mov_imm(R3, i32::from(off::SIZE));
    a.mov_imm(R4, 0);
    a.call(RINGBUF_OUTPUT);
    a.jmp_imm(JEQ, R0, 0, Label::Done);
    // No ring, or the ring is full: never silent.
    a.label(Label::Lost);
    count(
        &mut a,
        maps,
        CGROUP,
        (COUNTER_LOST * 8) as i16,
        Label::SkipLost,
    );
    a.label(Label::SkipLost);
    a.label(Label::Done);
    a.mov_imm(R0, 0);
    a.exit();
    a.finish()
}

/// `COUNTERS[cgroup].slots[at / 8] += 1` (this CPU's copy), the cgroup id
/// on the stack at `cgroup_at`, or on to `skip` when the run has no entry.
pub(crate) fn count(a: &mut Asm, maps: &UnixMaps, cgroup_at: i16, at: i16, skip: Label) {
    a.ld_map_fd(R1, maps.counters);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(cgroup_at));
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_imm(JEQ, R0, 0, skip);
    a.ldx_dw(R1, R0, at);
    a.add_imm(R1, 1);
    a.stx_dw(R0, R1, at);
}

/// The FNV-1a 64 of both programs, assembled with stand-in map fds, by
/// whole instructions: what they contribute to the build id
/// (`lockrun::bpf::shared::build_id`). Computed by lockrun's build script,
/// which uses this crate too, so that no run assembles them just to name
/// its build; `lockrun::bpf`'s tests check the two agree.
#[must_use]
pub fn programs_hash() -> u64 {
    let stand_in = UnixMaps {
        runs: 1,
        unix_prefixes: 2,
        rings: 3,
        counters: 4,
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for hook in [Hook::ConnectUnix, Hook::SendmsgUnix] {
        for insn in program(hook, &stand_in) {
            h ^= insn;
            h = h.wrapping_mul(0x0100_0000_01b3);
            h ^= h >> 32; // the immediates (high half) reach the low bits too
        }
    }
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_kernel_expects() {
        // r1 = r10 → bf a1 00 00 00 00 00 00
        assert_eq!(
            enc(0xbf, 1, 10, 0, 0).to_le_bytes(),
            [0xbf, 0xa1, 0, 0, 0, 0, 0, 0]
        );
        // if r0 != 0 goto +3
        assert_eq!(
            enc(0x55, 0, 0, 3, 0).to_le_bytes(),
            [0x55, 0, 3, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn all_jumps_resolve_forward() {
        let p = program(
            Hook::ConnectUnix,
            &UnixMaps {
                runs: 3,
                unix_prefixes: 4,
                rings: 5,
                counters: 6,
            },
        );
        for (i, insn) in p.iter().enumerate() {
            let code = (*insn & 0xff) as u8;
            if code & 0x07 == 0x05 && code != 0x85 && code != 0x95 {
                let off = ((*insn >> 16) & 0xffff) as u16 as i16;
                assert!(off >= 0 && i + 1 + off as usize <= p.len(), "insn {i}");
            }
        }
        assert_eq!(p.last().map(|i| i & 0xff), Some(0x95));
    }
}
