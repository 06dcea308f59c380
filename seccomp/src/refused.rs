//! What a call the deny list hands the supervisor was, named for the audit
//! ([`refused_call`]): decided on the registers alone, as the filter
//! decides.

#[cfg(target_arch = "x86_64")]
use super::assemble::X32_SYSCALL_BIT;
use super::deny_list::Widens;
use super::deny_list::{
    CLONE_NS_FLAGS, CREATES, CREATING_FLAGS, DENY_ALWAYS, F_SETLEASE, F_UNLCK, INET_PROTOCOLS,
    NETLINK_ROUTE, SET_ID_BITS, SOCKET_FAMILIES, TERMINAL_IOCTLS,
};

/// What a notification of the reported part (or the front's x32 test)
/// refused, and how it would widen the sandbox, for the audit: `None` when
/// the call is not one of its refusals. Decided on the number and the
/// registers the kernel copied, never the task's memory, exactly as the
/// filter decides (`refused_call_agrees_with_the_filter`). The supervisor
/// asks this before it performs an `ioctl` and after the calls that are
/// never one of these: no call the notifying part hands over for the
/// supervisor to perform is one of these
/// (`the_reported_calls_are_notified_by_no_other_part`), and a refusal
/// this failed to name would still be refused there (`ENOSYS`, or the
/// ioctl refused as not allowed).
#[must_use]
pub fn refused_call(nr: i64, args: [u64; 6]) -> Option<(String, Widens)> {
    #[cfg(target_arch = "x86_64")]
    if nr & i64::from(X32_SYSCALL_BIT) != 0 {
        return Some((
            format!("x32-ABI call {:#x}", nr & 0xffff_ffff),
            Widens::X32Abi,
        ));
    }
    if let Some((_, name, why)) = DENY_ALWAYS.iter().find(|(n, _, _)| *n == nr) {
        return Some(((*name).to_owned(), *why));
    }
    // Registers the kernel reads as ints: their low halves.
    let low = |i: usize| args[i] & 0xffff_ffff;
    if let Some(c) = CREATES.iter().find(|c| c.nr == nr) {
        let mode = low(usize::from(c.mode));
        // Without a creating flag the kernel ignores the mode.
        let creates = c.flags.is_none_or(|f| {
            CREATING_FLAGS
                .iter()
                .any(|cr| low(usize::from(f)) & cr != 0)
        });
        let set_id = SET_ID_BITS.iter().any(|b| mode & b != 0);
        return (creates && set_id).then(|| {
            (
                format!("{} with mode 0{:o}", c.name, mode & 0o7777),
                Widens::SetIdMode,
            )
        });
    }
    match nr {
        libc::SYS_clone => {
            let flags: Vec<&str> = CLONE_NS_FLAGS
                .iter()
                .filter(|(f, _)| args[0] & f == *f)
                .map(|(_, n)| *n)
                .collect();
            (!flags.is_empty()).then(|| {
                (
                    format!("clone with {}", flags.join("|")),
                    Widens::Namespaces,
                )
            })
        }
        libc::SYS_socket | libc::SYS_socketpair => {
            let call = if nr == libc::SYS_socket {
                "socket"
            } else {
                "socketpair"
            };
            let (family, protocol) = (low(0), low(2));
            if let Some((_, protocols)) = INET_PROTOCOLS.iter().find(|(f, _)| *f == family) {
                return (!protocols.contains(&protocol)).then(|| {
                    let family = u32::try_from(family).unwrap_or(u32::MAX);
                    (
                        format!(
                            "{call}({}, {})",
                            family_name(family),
                            protocol_name(protocol)
                        ),
                        Widens::SocketProtocol,
                    )
                });
            }
            let allowed = SOCKET_FAMILIES.contains(&family)
                || (family == libc::AF_NETLINK as u64 && protocol == NETLINK_ROUTE);
            if allowed {
                return None;
            }
            let family = u32::try_from(family).unwrap_or(u32::MAX);
            let shown = if family == libc::AF_NETLINK as u32 {
                format!("{call}({}, protocol {protocol})", family_name(family))
            } else {
                format!("{call}({})", family_name(family))
            };
            Some((shown, Widens::SocketFamily))
        }
        libc::SYS_ioctl => TERMINAL_IOCTLS
            .iter()
            .find(|(cmd, arg, _, _)| *cmd == low(1) && arg.is_none_or(|a| a == args[2]))
            .map(|(_, _, name, why)| (format!("ioctl {name}"), *why)),
        libc::SYS_prlimit64 if low(0) != 0 && args[2] != 0 => Some((
            format!(
                "prlimit64 setting {} of pid {}",
                rlimit_name(low(1)),
                low(0).cast_signed()
            ),
            Widens::OtherLimits,
        )),
        libc::SYS_fcntl if low(1) == F_SETLEASE && low(2) != F_UNLCK => {
            let kind = match i32::try_from(low(2)) {
                Ok(libc::F_RDLCK) => "F_RDLCK".to_owned(),
                Ok(libc::F_WRLCK) => "F_WRLCK".to_owned(),
                _ => format!("type {}", low(2)),
            };
            Some((format!("fcntl F_SETLEASE {kind}"), Widens::Leases))
        }
        _ => None,
    }
}

/// `RLIMIT_NOFILE`, … or the number.
pub(super) fn rlimit_name(resource: u64) -> String {
    const NAMES: [&str; 16] = [
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_DATA",
        "RLIMIT_STACK",
        "RLIMIT_CORE",
        "RLIMIT_RSS",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_AS",
        "RLIMIT_LOCKS",
        "RLIMIT_SIGPENDING",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
    ];
    usize::try_from(resource)
        .ok()
        .and_then(|r| NAMES.get(r))
        .map_or_else(|| format!("resource {resource}"), |n| (*n).to_owned())
}

/// `AF_PACKET`, … or the number.
pub(super) fn family_name(family: u32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::AF_INET, "AF_INET"),
        (libc::AF_INET6, "AF_INET6"),
        (libc::AF_PACKET, "AF_PACKET"),
        (libc::AF_NETLINK, "AF_NETLINK"),
        (libc::AF_VSOCK, "AF_VSOCK"),
        (libc::AF_ALG, "AF_ALG"),
        (libc::AF_BLUETOOTH, "AF_BLUETOOTH"),
        (libc::AF_CAN, "AF_CAN"),
        (libc::AF_KEY, "AF_KEY"),
        (libc::AF_XDP, "AF_XDP"),
        (libc::AF_TIPC, "AF_TIPC"),
        (libc::AF_RDS, "AF_RDS"),
        (libc::AF_APPLETALK, "AF_APPLETALK"),
        (libc::AF_X25, "AF_X25"),
        (libc::AF_PPPOX, "AF_PPPOX"),
    ];
    NAMES
        .iter()
        .find(|(f, _)| u32::try_from(*f) == Ok(family))
        .map_or_else(|| format!("family {family}"), |(_, n)| (*n).to_owned())
}

/// An inet protocol as a person knows it, for the refusals of
/// [`Widens::SocketProtocol`].
pub(super) fn protocol_name(protocol: u64) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::IPPROTO_SCTP, "IPPROTO_SCTP"),
        (libc::IPPROTO_DCCP, "IPPROTO_DCCP"),
        (libc::IPPROTO_RAW, "IPPROTO_RAW"),
        (libc::IPPROTO_IGMP, "IPPROTO_IGMP"),
        (libc::IPPROTO_ICMP, "IPPROTO_ICMP"),
        (libc::IPPROTO_ICMPV6, "IPPROTO_ICMPV6"),
        (115, "IPPROTO_L2TP"),
        (256, "IPPROTO_SMC"),
    ];
    NAMES
        .iter()
        .find(|(p, _)| u64::try_from(*p) == Ok(protocol))
        .map_or_else(|| format!("protocol {protocol}"), |(_, n)| (*n).to_owned())
}
