//! What the filters do, for people (`lockrun policy show`): each line a
//! verdict and the calls it applies to, built from the filters' own tables.

use super::deny_list::{DENY_ALWAYS, TERMINAL_IOCTLS};
use super::fallback::TRUNCATING_OPENS;
use super::notify::{NOTIFY_METADATA, NOTIFY_SCHED};
use super::{scope, Fallbacks};

/// What the filters do, for people (`lockrun policy show`), on a kernel
/// that leaves `fallbacks` to the supervisor: each line a verdict and the
/// calls it applies to. Built from the same tables as the
/// filters where the calls are listed one by one.
#[must_use]
pub fn describe(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let mut lines = describe_always();
    // What this kernel's missing mechanisms hand over besides.
    lines.extend(scope::describe(fallbacks));
    lines.extend(describe_metadata(fallbacks));
    lines.extend(describe_fallbacks(fallbacks));
    lines
}

/// How the metadata calls are held on a kernel that leaves `fallbacks` to
/// the supervisor ([`Fallbacks::metadata`]).
fn describe_metadata(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let calls = format!(
        "{} metadata calls (chmod, chown, utime(s), utimensat, set/remove xattr families) and the inode-attribute ioctls",
        NOTIFY_METADATA.len()
    );
    if fallbacks.metadata {
        vec![(
            "supervised",
            format!("{calls}: lockrun performs them, only beneath the run's writable roots"),
        )]
    } else {
        vec![(
            "allowed",
            format!(
                "{calls} but a set-id mode and fs-verity or fscrypt: the kernel's, on mounts read-only outside the \
                 run's writable roots (EROFS there, each refusal shown)"
            ),
        )]
    }
}

/// [`describe`] of the parts every kernel has.
pub(super) fn describe_always() -> Vec<(&'static str, String)> {
    let names: Vec<&str> = DENY_ALWAYS.iter().map(|(_, n, _)| *n).collect();
    vec![
        ("EPERM, each refusal shown", names.join(", ")),
        ("EPERM, each refusal shown", "clone with any CLONE_NEW* flag".to_owned()),
        (
            "EPERM, each refusal shown",
            "socket, socketpair: any family but AF_UNIX, AF_INET, AF_INET6, and AF_NETLINK with NETLINK_ROUTE; AF_INET and AF_INET6 with any protocol but TCP, UDP, MPTCP, UDP-Lite and ICMP".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            format!(
                "ioctl {} (typing into the caller's terminal, switching its line discipline, making it refuse others' opens, stopping its flow)",
                TERMINAL_IOCTLS.iter().map(|(_, _, n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        ),
        (
            "EPERM, each refusal shown",
            "prlimit64 setting a limit of another process (any pid but 0)".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            "fcntl F_SETLEASE but F_UNLCK (a lease holds back others' writes to the file)".to_owned(),
        ),
        #[cfg(target_arch = "x86_64")]
        (
            "EPERM, each refusal shown",
            "every x32-ABI call (numbers with bit 30 set: the same calls under numbers the lists would miss)".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            "set-id mode bits: S_ISUID and S_ISGID in open, openat, creat, mknod, mknodat; in chmod, fchmod, fchmodat, \
             fchmodat2 (judged by the supervisor) S_ISUID always and S_ISGID except on a directory".to_owned(),
        ),
        (
            "ENOSYS",
            "clone3, openat2, file_setattr (arguments in a struct; callers fall back to clone, openat, the ioctl)".to_owned(),
        ),
        (
            "supervised",
            "connect/sendto of unix pathname addresses: lockrun performs them, only beneath the run's writable roots"
                .to_owned(),
        ),
        (
            "supervised",
            "setsockopt SO_REUSEPORT, SO_REUSEADDR: lockrun sets them, refused (EPERM, shown) when turning on port sharing \
             for an inet socket (SO_REUSEPORT; SO_REUSEADDR but on a stream socket)".to_owned(),
        ),
        (
            "supervised",
            "inotify_add_watch: lockrun adds the watch, refused (EACCES, shown) at or beneath a denied path".to_owned(),
        ),
        (
            "supervised",
            format!(
                "{} naming another task: let through for a task of the run, refused (EPERM, shown) for any other; \
                 a process group's or a uid's (PRIO_PGRP, PRIO_USER, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER) refused",
                NOTIFY_SCHED.iter().map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    ]
}

/// What the part of [`super::fallback::fallback_filter`] adds on this kernel, for people
/// (`lockrun policy show`), as [`describe`]'s lines: nothing where the
/// kernel has every mechanism.
#[must_use]
pub fn describe_fallbacks(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if fallbacks.truncate {
        let opens: Vec<String> = TRUNCATING_OPENS
            .iter()
            .map(|(nr, _)| match *nr {
                libc::SYS_openat => "openat".to_owned(),
                _ => "open".to_owned(),
            })
            .collect();
        lines.push((
            "supervised",
            format!(
                "truncate, and {} with O_TRUNC and access mode O_RDONLY (or 3), for want of Landlock's truncate \
                 right (ABI < 3): lockrun truncates, or opens and hands over the descriptor, only a regular file \
                 beneath the run's writable roots; refused (EACCES, shown) elsewhere",
                opens.join(", ")
            ),
        ));
    }
    lines
}
