//! The `sys_exit` recorder: a call of a task of a run that a read-only
//! mount refused (`EROFS`), written to the run's ring buffer as a
//! [`ReadOnlyRefusal`] (see `lockrun_common`'s `read_only` for the record
//! and why: the kernel refuses it before Landlock or kernel audit's rules
//! see it).
//!
//! A raw tracepoint (`raw_tp/sys_exit`, `BPF_RAW_TRACEPOINT_OPEN`): it runs
//! at the exit of every system call of every task on the machine, so the
//! call's return is compared first, and nothing else is done for any call
//! that did not fail with `EROFS`. Then the task's cgroup must be a run of
//! this build (`RUNS`), as for the cgroup hooks; a call that only asks
//! (`access`, `faccessat`, `faccessat2`) is left out. Each refusal is
//! counted in its run's `COUNTERS` slot of [`Hook::ReadOnly`], and a
//! record that does not fit the ring buffer in `COUNTER_LOST`.
//!
//! The record is reserved in the ring buffer (`bpf_ringbuf_reserve`, 5.8)
//! and filled there: with its two paths it is larger than the 512 bytes of
//! a program's stack. The paths are read from the task's memory
//! (`bpf_probe_read_user_str`) at the arguments [`path_args`] names, cut
//! at [`READ_ONLY_PATH_MAX`] bytes.
//!
//! x86_64's `struct pt_regs` (the tracepoint's first argument): `r10` at
//! 56, `dx` 96, `si` 104, `di` 112, `orig_ax` (the syscall number) 120.
//! Read with `bpf_probe_read_kernel` (5.5), which a kernel locked down for
//! confidentiality refuses: the program then does not load, and the
//! loader says so.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_map_lookup_elem, bpf_probe_read_kernel, bpf_ringbuf_reserve, bpf_ringbuf_submit,
        generated::bpf_probe_read_user_str,
    },
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use lockrun_common::{
    is_query, path_args, Hook, ReadOnlyRefusal, COUNTER_LOST, EROFS, READ_ONLY_PATH_MAX,
};

use crate::{bump, RINGS, RUNS};

/// Where x86_64's `struct pt_regs` holds `r10`, the first of the
/// registers read (one read: `r10` to `orig_ax`, nine of them).
const REGS_FROM: usize = 56;
/// The registers read, as `u64`s from [`REGS_FROM`]: `r10`, `r9`, `r8`,
/// `ax`, `cx`, `dx`, `si`, `di`, `orig_ax`.
const REGS_READ: usize = 9;
const R10: usize = 0;
const DX: usize = 5;
const SI: usize = 6;
const DI: usize = 7;
const ORIG_AX: usize = 8;

#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn read_only_exit(ctx: RawTracePointContext) -> i32 {
    // TP_PROTO(struct pt_regs *regs, long ret)
    let ret: i64 = ctx.arg(1);
    if ret != -EROFS {
        return 0;
    }
    refused(&ctx, ret);
    0
}

/// Record a call of a run's task that returned `ret` (`-EROFS`). Not
/// inlined: the common path of [`read_only_exit`] stays a compare and a
/// return.
#[inline(never)]
fn refused(ctx: &RawTracePointContext, ret: i64) {
    // SAFETY: helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: a read-only lookup; the slot is copied out.
    let Some(slot) = (unsafe { RUNS.get(&cgroup_id) }).map(|c| c.slot) else {
        return;
    };
    let regs: *const u8 = ctx.arg(0);
    // SAFETY: the kernel's pt_regs of this syscall, read by the helper,
    // which fails rather than faults (then the call is recorded as number
    // 0, with no arguments and no path).
    let r =
        unsafe { bpf_probe_read_kernel(regs.wrapping_add(REGS_FROM).cast::<[u64; REGS_READ]>()) }
            .unwrap_or([0; REGS_READ]);
    let nr = r[ORIG_AX];
    if is_query(nr) {
        return;
    }
    bump(cgroup_id, Hook::ReadOnly as u32);
    // SAFETY: the outer map's address and a key on the stack; the result is
    // the slot's ring buffer (a map pointer, only passed to a helper) or null.
    let ring =
        unsafe { bpf_map_lookup_elem(RINGS.0.get().cast(), core::ptr::from_ref(&slot).cast()) };
    if ring.is_null() {
        bump(cgroup_id, COUNTER_LOST);
        return;
    }
    // SAFETY: `ring` is a ring buffer map from RINGS; the size is a constant.
    let rec =
        unsafe { bpf_ringbuf_reserve(ring, core::mem::size_of::<ReadOnlyRefusal>() as u64, 0) }
            .cast::<ReadOnlyRefusal>();
    if rec.is_null() {
        bump(cgroup_id, COUNTER_LOST);
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    let args = [r[DI], r[SI], r[DX], r[R10]];
    let at = path_args(nr);
    // SAFETY: `rec` is a reserved record of ReadOnlyRefusal's size, this
    // program's until submitted; every field written through it is inside
    // it, the paths with their own size, and it is submitted on the one
    // path out.
    unsafe {
        (*rec).cgroup_id = cgroup_id;
        (*rec).pid = pid_tgid as u32;
        (*rec).tgid = (pid_tgid >> 32) as u32;
        (*rec).hook = Hook::ReadOnly as u32;
        (*rec)._pad = 0;
        (*rec).nr = nr;
        (*rec).args = args;
        (*rec).ret = ret;
        (*rec).comm = comm;
        (*rec).path_len = [
            read_path(&mut (*rec).paths[0], arg(&args, at[0])),
            read_path(&mut (*rec).paths[1], arg(&args, at[1])),
        ];
        bpf_ringbuf_submit(rec.cast::<c_void>(), 0);
    }
}

/// Argument `i` of `args` as a user pointer; 0 (none) past the four read,
/// and for [`lockrun_common::NO_PATH`].
#[inline(always)]
fn arg(args: &[u64; 4], i: u8) -> u64 {
    match i {
        0 => args[0],
        1 => args[1],
        2 => args[2],
        3 => args[3],
        _ => 0,
    }
}

/// The string at user address `from` into `to` (NUL included, cut at its
/// size): what `bpf_probe_read_user_str` returned; 0 for no address.
#[inline(always)]
fn read_path(to: &mut [u8; READ_ONLY_PATH_MAX], from: u64) -> i32 {
    if from == 0 {
        to[0] = 0;
        return 0;
    }
    // SAFETY: `to` is READ_ONLY_PATH_MAX writable bytes (of the reserved
    // record), the size passed; the helper reads the task's memory itself
    // and fails without faulting.
    unsafe {
        bpf_probe_read_user_str(
            to.as_mut_ptr().cast::<c_void>(),
            READ_ONLY_PATH_MAX as u32,
            from as *const c_void,
        ) as i32
    }
}
