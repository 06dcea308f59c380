//! lockrun's unix guard: what the cgroup `connect_unix`/`sendmsg_unix`
//! hooks do for a run ([`crate`], supervised mode), on a kernel that
//! has no such hooks (before Linux 6.7; Debian 12's 6.1).
//!
//! Without them a task of the run could reach a unix socket outside its
//! worktree by an address the seccomp filter does not hand over (one as
//! long as an inet address, 16 or 28 bytes), by `sendmsg`/`sendmmsg`
//! (whose address is in a struct), or by swapping a pathname in (or
//! another socket under the same descriptor number) after the supervisor
//! let a call continue. Handing every connect and send to the supervisor
//! would not close the last: the inet ones must continue (the inet hooks
//! judge by the calling task's cgroup, so the supervisor cannot make them),
//! and a thread of the caller can put a unix socket under the number the
//! supervisor judged before the kernel looks it up again.
//!
//! So the kernel refuses them: two `fmod_ret` programs (BPF trampolines,
//! Linux 5.7, on the kernel's `security_` functions, which any kernel with
//! BTF lets a program replace the return of, whichever LSMs it runs) on
//!
//! - `security_unix_stream_connect(sock, other, newsk)`: every stream or
//!   seqpacket connect of a task of a supervised run is refused;
//! - `security_unix_may_send(sock, other)`: every datagram connect, and
//!   every send to a socket other than the sender's connected peer, of a
//!   task of a supervised run is refused.
//!
//! The supervisor makes the legitimate ones from outside the run's cgroup,
//! which the guard lets through (a task whose cgroup is no run's passes, as
//! in the unix hooks): pathnames under the worktree and the run's temp dir
//! (`lockrun::supervise::unix`), and the abstract names the run bound
//! (`lockrun::supervise::abstract_unix`). A connected datagram socket's
//! sends to its peer pass: the connect was judged.
//!
//! They find the run as the unix hooks do (`RUNS` by the calling task's
//! cgroup id), count and record each refusal in the run's ring (a
//! [`Denial`](lockrun_common::Denial) of [`Hook::GuardConnectUnix`] or
//! [`Hook::GuardSendUnix`], with the target's bound address), and return
//! `-EPERM`. They read the kernel's structs at offsets taken from its BTF
//! ([`Layout`], `lockrun::bpf::btf`) with `bpf_probe_read_kernel`. Loaded once per
//! build and boot, attached by links pinned beside the programs: global,
//! not per cgroup, they judge only tasks of this build's runs.
//!
//! Loaded only where the unix hooks are missing (`lockrun::kernel::Kernel`);
//! where the kernel refuses the programs (no BTF, no trampolines: this VM
//! kind's kernel answers `EPERM` for every trampoline), their promise is a
//! gap (`lockrun::kernel::Gap::UnixAddresses`).

// BPF instruction fields are fixed-width two's-complement encodings, and every
// offset here is a small constant or a struct offset of the kernel's: the
// casts are the encoding.
#![allow(
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless,
    clippy::cast_possible_truncation
)]

use lockrun_common::{
    denial_offset as off, Hook, AF_UNIX, COUNTER_LOST, UNIX_MODE_SUPERVISED, UNIX_PATH_MAX,
};

use crate::{
    count, Asm, Label, UnixMaps, FP, GET_CURRENT_CGROUP_ID, GET_CURRENT_COMM, GET_CURRENT_PID_TGID,
    JA, JEQ, JGT, JLE, JNE, JSET, MAP_LOOKUP_ELEM, PROBE_READ_KERNEL, R0, R1, R2, R3, R4, R6, R7,
    R8, RINGBUF_OUTPUT,
};

/// The kernel functions the guard's programs attach to, by hook.
pub const FUNCTIONS: [(Hook, &str); 2] = [
    (Hook::GuardConnectUnix, "security_unix_stream_connect"),
    (Hook::GuardSendUnix, "security_unix_may_send"),
];

/// Where the programs read the kernel's structs: byte offsets from its BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `struct socket`'s `sk`.
    pub socket_sk: i32,
    /// `struct sock`'s `sk_type` (a `u16`).
    pub sock_type: i32,
    /// `struct unix_sock`'s `peer` and `addr` (it begins with its `struct sock`).
    pub unix_peer: i32,
    pub unix_addr: i32,
    /// `struct unix_address`'s `len` (an `int`) and `name` (a `sockaddr_un`).
    pub addr_len: i32,
    pub addr_name: i32,
}

impl Layout {
    /// Offsets no kernel has, for hashing the programs' shape.
    pub const STAND_IN: Self = Self {
        socket_sk: 1001,
        sock_type: 1002,
        unix_peer: 1003,
        unix_addr: 1004,
        addr_len: 1005,
        addr_name: 1006,
    };
}

// Stack layout (offsets from the frame pointer).
const STACK: i16 = 208;
const EVENT: i16 = -176; // Denial, 176 bytes
const CGROUP: i16 = -184; // u64: the calling task's cgroup id
const SLOT: i16 = -192; // u32: the run's ring slot
const MODE: i16 = -188; // u32: the run's unix mode
const TMP: i16 = -200; // u64: a pointer read from the kernel
const LEN: i16 = -208; // u32: the target's address length; u16 its type at -204

/// `-EPERM`, the refusal the programs return.
const EPERM: i32 = -1;
/// `BPF_JMP | BPF_JEQ | BPF_X`.
const JEQ_REG: u8 = 0x1d;
/// `BPF_LDX | BPF_MEM | BPF_H`.
const LDX_H: u8 = 0x69;

/// `dst = *(u64 *)(src + off)` of kernel memory, through the stack
/// ([`TMP`]); on to `fail` if the read fails.
fn read_ptr(a: &mut Asm, dst: u8, src: u8, off: i32, fail: Label) {
    a.mov_reg(R3, src);
    a.add_imm(R3, off);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(TMP));
    a.mov_imm(R2, 8);
    a.call(PROBE_READ_KERNEL);
    a.jmp_imm(JNE, R0, 0, fail);
    a.ldx_dw(dst, FP, TMP);
}

/// Assemble the guard's program for `hook` ([`FUNCTIONS`]). One listing,
/// kept in one piece so it reads like the program.
#[must_use]
#[allow(clippy::too_many_lines)] // one listing, read as the program it assembles
pub fn program(hook: Hook, maps: &UnixMaps, layout: &Layout) -> Vec<u64> {
    let mut a = Asm::default();
    let hook_id = hook as i32;
    // r6: the context, the function's arguments as u64s.
    a.mov_reg(R6, R1);
    // r7: the target socket (struct sock *), r8: its path's length; 0 until known.
    a.mov_imm(R7, 0);
    a.mov_imm(R8, 0);
    for k in 1..=(STACK / 8) {
        a.st_dw(FP, -8 * k, 0);
    }
    // Whose call: a task of a supervised run (RUNS has its cgroup), or any
    // other, the supervisor connecting for the command among them.
    a.call(GET_CURRENT_CGROUP_ID);
    a.stx_dw(FP, R0, CGROUP);
    a.ld_map_fd(R1, maps.runs);
    a.mov_reg(R2, FP);
    a.add_imm(R2, i32::from(CGROUP));
    a.call(MAP_LOOKUP_ELEM);
    a.jmp_imm(JEQ, R0, 0, Label::Allow);
    a.ldx_w(R1, R0, 0); // RunConfig.slot
    a.stx_w(FP, R1, SLOT);
    a.ldx_w(R1, R0, 4); // RunConfig.unix_mode
    a.stx_w(FP, R1, MODE);
    // A run without the supervisor (prefix mode) is not guarded.
    a.jmp_imm(JSET, R1, UNIX_MODE_SUPERVISED as i32, Label::Next(0));
    a.jmp_imm(JA, R0, 0, Label::Allow);
    a.label(Label::Next(0));
    if hook == Hook::GuardSendUnix {
        // security_unix_may_send(struct socket *sock, struct socket *other):
        // the target is other->sk; the sender's connected peer passes.
        a.ldx_dw(R1, R6, 8);
        read_ptr(&mut a, R7, R1, layout.socket_sk, Label::Deny);
        a.ldx_dw(R1, R6, 0);
        read_ptr(&mut a, R1, R1, layout.socket_sk, Label::Deny);
        read_ptr(&mut a, R1, R1, layout.unix_peer, Label::Deny);
        a.jmp_reg(JEQ_REG, R1, R7, Label::Allow);
    } else {
        // security_unix_stream_connect(struct sock *sock, struct sock *other, …):
        // the target is other.
        a.ldx_dw(R1, R6, 8);
        a.stx_dw(FP, R1, TMP);
        a.ldx_dw(R7, FP, TMP);
    }
    a.label(Label::Deny);
    // The target's type and bound address, for the record.
    a.jmp_imm(JEQ, R7, 0, Label::SkipPath);
    a.mov_reg(R3, R7);
    a.add_imm(R3, layout.sock_type);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(LEN) + 4);
    a.mov_imm(R2, 2);
    a.call(PROBE_READ_KERNEL);
    a.raw(LDX_H, R1, FP, LEN + 4, 0);
    a.stx_w(FP, R1, EVENT + off::SOCK_TYPE);
    read_ptr(&mut a, R7, R7, layout.unix_addr, Label::SkipPath);
    a.jmp_imm(JEQ, R7, 0, Label::SkipPath);
    a.mov_reg(R3, R7);
    a.add_imm(R3, layout.addr_len);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(LEN));
    a.mov_imm(R2, 4);
    a.call(PROBE_READ_KERNEL);
    a.jmp_imm(JNE, R0, 0, Label::SkipPath);
    a.ldx_w(R8, FP, LEN);
    // Unnamed (2 bytes) has no path; more than a sockaddr_un cannot be.
    a.jmp_imm(JLE, R8, 2, Label::SkipPath);
    a.jmp_imm(JGT, R8, 2 + UNIX_PATH_MAX as i32, Label::SkipPath);
    a.sub_imm(R8, 2);
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(EVENT + off::PATH));
    a.mov_reg(R2, R8);
    a.mov_reg(R3, R7);
    a.add_imm(R3, layout.addr_name + 2);
    a.call(PROBE_READ_KERNEL);
    a.label(Label::SkipPath);
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
    a.st_h(FP, EVENT + off::FAMILY, i32::from(AF_UNIX));
    a.mov_reg(R1, FP);
    a.add_imm(R1, i32::from(EVENT + off::COMM));
    a.mov_imm(R2, 16);
    a.call(GET_CURRENT_COMM);
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
    a.mov_imm(R0, EPERM);
    a.exit();

    a.label(Label::Allow);
    // 0: the kernel's own function decides.
    a.mov_imm(R0, 0);
    a.exit();
    a.finish()
}

/// The FNV-1a 64 of both programs, assembled with stand-in map fds and
/// [`Layout::STAND_IN`]: what they contribute to the build id, computed by
/// the build script as [`crate::programs_hash`] is.
#[must_use]
pub fn programs_hash() -> u64 {
    let stand_in = UnixMaps {
        runs: 1,
        unix_prefixes: 2,
        rings: 3,
        counters: 4,
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (hook, _) in FUNCTIONS {
        for insn in program(hook, &stand_in, &Layout::STAND_IN) {
            h ^= insn;
            h = h.wrapping_mul(0x0100_0000_01b3);
            h ^= h >> 32;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn all_jumps_resolve_forward_and_each_path_returns() {
        let maps = super::UnixMaps {
            runs: 3,
            unix_prefixes: 4,
            rings: 5,
            counters: 6,
        };
        for (hook, _) in super::FUNCTIONS {
            let p = super::program(hook, &maps, &super::Layout::STAND_IN);
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
}
