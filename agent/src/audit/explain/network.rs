//! What `lockrun audit` suggests for a network refusal: the proxy's, by
//! the verdict it recorded, and the kernel hooks', by where the connection
//! or packet was headed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::Suggestion;
use crate::audit::ranges::{classify, Embedding, Range, Special};
use crate::audit::{Destination, KernelNetEvent, ProxyEvent, ProxyVerdict};
use crate::policy::HostName;

/// The line that would allow a proxy refusal, or why there is none: by
/// the refusal's verdict, as the proxy recorded it.
#[must_use]
pub fn suggest_proxy(ev: &ProxyEvent) -> Suggestion {
    let host = ev.host.trim_start_matches('[').trim_end_matches(']');
    match ev.verdict {
        ProxyVerdict::NotListed | ProxyVerdict::PortNotAllowed => allow_host(host, ev.port),
        ProxyVerdict::Denied => Suggestion::Explain {
            reason: format!(
                "{host} matches a [network] deny entry ({}); deny wins over allow. Remove that \
                 entry from the policy if the host is really needed.",
                ev.reason
            ),
        },
        // An IP literal: the proxy allows names only.
        ProxyVerdict::IpLiteral => match host.parse::<IpAddr>().ok().and_then(this_host) {
            Some(_) => Suggestion::Never {
                reason: format!(
                    "{host} is this host (loopback): the proxy never connects back to the host. \
                     A local service is reached directly with [network] local = [\"ADDR:PORT\"]."
                ),
            },
            _ => Suggestion::Explain {
                reason: format!(
                    "the request named an IP address ({host}); the proxy allows host names only, \
                     checked before DNS. Make the program use the host's name, then allow that name."
                ),
            },
        },
        ProxyVerdict::Address {
            addr,
            range: None,
            ..
        } => Suggestion::Never {
            reason: format!(
                "{host} resolved to an address of this host ({addr}); the proxy never connects \
                 to the host itself (that would reach services outside the sandbox). A service \
                 on this host is reached directly: [network] local = [\"127.0.0.1:PORT\"]."
            ),
        },
        ProxyVerdict::Address {
            addr,
            range: Some(range),
            embedded,
        } => suggest_guarded(host, addr, range, embedded),
        ProxyVerdict::GuardUnavailable => Suggestion::Explain {
            reason: format!(
                "the proxy could not read this host's addresses, without which it cannot judge \
                 what {host} resolved to, so it refused ({}); no policy line changes that. Run \
                 it again.",
                ev.reason
            ),
        },
        ProxyVerdict::WrongCredentials | ProxyVerdict::NoCredentials => Suggestion::Explain {
            reason: "the request came without this run's proxy credentials (the proxy URL in \
                     the run's environment carries them); no policy line changes that."
                .into(),
        },
        ProxyVerdict::BadRequest => Suggestion::Explain {
            reason: format!(
                "the request itself was refused, not its host ({}); no policy line changes that.",
                ev.reason
            ),
        },
        ProxyVerdict::Overloaded => Suggestion::Explain {
            reason: format!(
                "{}: the run had that many connections to the proxy open at once. Raise [run] \
                 max_connections in the policy if the command really needs more.",
                ev.reason
            ),
        },
        ProxyVerdict::Fronted => Suggestion::Never {
            reason: format!(
                "the connection went to the address of {host}, but its first bytes named another \
                 host ({}); the proxy relays a connection only to the host it names. Allow the \
                 host the program really wants, and let it look that name up.",
                ev.reason
            ),
        },
        ProxyVerdict::Unattributed => Suggestion::Explain {
            reason: "a connection reached the run's transparent listener that the kernel did not \
                     bring from the run (another process of this host); no policy line changes \
                     that."
                .into(),
        },
        ProxyVerdict::RuleRefused
        | ProxyVerdict::SecretElsewhere
        | ProxyVerdict::UpstreamUntrusted
        | ProxyVerdict::ClientRefusedCert => suggest_inside(ev, host),
        ProxyVerdict::Allowed | ProxyVerdict::UpstreamFailed => Suggestion::Explain {
            reason: format!(
                "the policy allowed it; the upstream failed ({}). No policy line changes that.",
                ev.reason
            ),
        },
    }
}

/// For a refusal inside a host's requests (its TLS seen by the proxy, or
/// plain HTTP): by the request rules, the secrets, or either side's TLS.
fn suggest_inside(ev: &ProxyEvent, host: &str) -> Suggestion {
    match ev.verdict {
        ProxyVerdict::RuleRefused => rule_for(ev).unwrap_or_else(|| Suggestion::Explain {
            reason: format!("{host}'s request rules refused it ({}).", ev.reason),
        }),
        ProxyVerdict::SecretElsewhere => Suggestion::Never {
            reason: format!(
                "the request carried a secret's placeholder to {host}, which the secret is not \
                 bound to ({}); the proxy never lets a secret go to another host.",
                ev.reason
            ),
        },
        ProxyVerdict::UpstreamUntrusted => Suggestion::Explain {
            reason: format!(
                "{host}'s certificate did not verify ({}). If a private CA you trust signs it, \
                 name that CA's PEM file: `[network] tls_ca = \"/path/ca.pem\"`.",
                ev.reason
            ),
        },
        ProxyVerdict::ClientRefusedCert => Suggestion::Explain {
            reason: format!(
                "the client refused the run's certificate for {host} ({}): it pins the host's \
                 key or does not read the run's CA bundle (point it at `$SSL_CERT_FILE`). The \
                 proxy must see inside {host}'s TLS for its secrets and request rules.",
                ev.reason
            ),
        },
        _ => Suggestion::Explain {
            reason: ev.reason.clone(),
        },
    }
}

/// For a request no rule of its host allowed (the reason says `METHOD
/// PATH: no rule of PATTERN allows it`): a rule that would, its id-like
/// segments as `*`. None for a path the rules could not judge (`..`, an
/// encoded `/`: no rule allows those) or one cut short in the log.
fn rule_for(ev: &ProxyEvent) -> Option<Suggestion> {
    let rest = ev.reason.strip_prefix(&ev.method)?.strip_prefix(' ')?;
    let (path, pattern) = rest.split_once(": no rule of ")?;
    let pattern = pattern.strip_suffix(" allows it")?;
    if path.ends_with('…') || !path.starts_with('/') {
        return None;
    }
    let rule = crate::policy::requests::suggested(&ev.method, path);
    Some(Suggestion::Allow {
        policy: format!("[network.requests.\"{pattern}\"]\nallow = [\"{rule}\"]"),
        flag: None,
        note: Some(format!(
            "beside {pattern}'s other rules; each allowed request lets the run send that host what it holds"
        )),
    })
}

/// `[network] allow` for `host` (the port too, unless 443), and the flag.
fn allow_host(host: &str, port: u16) -> Suggestion {
    let Ok(name) = HostName::parse(host) else {
        return Suggestion::Explain {
            reason: format!("`{host}` is not a valid host name; nothing to allow."),
        };
    };
    // Port 0: a name the run's resolver refused, on no port yet.
    let rule = if port == 443 || port == 0 {
        name.to_string()
    } else {
        format!("{name}:{port}")
    };
    let (flag, note) = if port == 0 {
        (
            format!("--allow-host {name}:443"),
            Some(format!(
                "the run looked {name} up and the run's resolver refused it; allow it on the port                  the program connects to (443 for HTTPS)."
            )),
        )
    } else {
        (format!("--allow-host {name}:{port}"), None)
    };
    Suggestion::Allow {
        policy: format!("[network]\nallow = [\"{rule}\"]"),
        flag: Some(flag),
        note,
    }
}

/// For an address the guard refused as lying in `range`: a private grant
/// where the guard would accept one (for the IPv4 address an IPv6 form
/// carries, which is what it judges), else why not.
fn suggest_guarded(host: &str, ip: IpAddr, range: Range, embedded: Option<Ipv4Addr>) -> Suggestion {
    let judged = embedded.map_or(ip, IpAddr::V4);
    match range {
        r if r.grantable() => {
            let net = match judged {
                IpAddr::V4(_) => format!("{judged}/32"),
                IpAddr::V6(_) => format!("{judged}/128"),
            };
            Suggestion::Allow {
                policy: format!("[[network.private]]\nhosts = [\"{host}\"]\nnetwork = \"{net}\""),
                flag: None,
                note: Some(format!(
                    "{host} resolved to {ip}, in the {} range; only a policy file can grant a \
                     private network (there is no flag), and only for the names it lists.",
                    r.name()
                )),
            }
        }
        Range::Loopback | Range::Unspecified | Range::ThisNetwork => Suggestion::Never {
            reason: format!(
                "{host} resolved to {ip}, which is this host: the proxy never connects back to \
                 the host (that would reach services outside the sandbox). A local service is \
                 reached directly: [network] local = [\"127.0.0.1:PORT\"] / --allow-local."
            ),
        },
        Range::LinkLocal => Suggestion::Never {
            reason: format!(
                "{host} resolved to the link-local address {ip} (where cloud metadata services \
                 and their credentials live); lockrun does not suggest opening it."
            ),
        },
        other => Suggestion::Never {
            reason: format!(
                "{host} resolved to {ip}, a {} address: not one a policy can grant, nor one a \
                 proxy tunnel should reach.",
                other.name()
            ),
        },
    }
}

// ---------------------------------------------------------------- kernel

/// A packet from `peer` to the run's `port`, dropped on its way in: a port
/// the policy can expose to this host's processes over loopback; nothing
/// lets another host in.
fn suggest_inbound(peer: IpAddr, port: u16) -> Suggestion {
    if peer.is_loopback() {
        return Suggestion::Allow {
            policy: format!("[network]\nexpose = [{port}]"),
            flag: Some(format!("--expose {port}")),
            note: Some(format!(
                "a process of this host outside the run ({peer}) reached for the run's port \
                 {port}; exposed, the port takes every process of this host over loopback (never \
                 another host)"
            )),
        };
    }
    Suggestion::Never {
        reason: format!(
            "a packet from {peer} to the run's port {port}: a program of the run listens where \
             hosts beyond loopback can reach it, and lockrun drops everything they send (an \
             accepted connection would be a way out no connect hook sees). Listen on \
             127.0.0.1 or ::1; nothing from outside the host can reach a run."
        ),
    }
}

/// The line that would allow a kernel network refusal, or why there is none.
#[must_use]
pub fn suggest_kernel(ev: &KernelNetEvent) -> Suggestion {
    if let Some(peer) = ev.inbound_peer() {
        return suggest_inbound(peer, ev.local_port);
    }
    if let Some(peer) = ev.outbound_packet_peer() {
        return Suggestion::Never {
            reason: format!(
                "a packet from the run's port {} to {peer} that no connect or send of the run \
                 named (a reply on a connection an outside host opened, or a retransmit); a \
                 run's sockets exchange packets only with loopback peers, and no policy line \
                 changes that.",
                ev.local_port
            ),
        };
    }
    if let Some(kind) = ev.refused_socket_kind() {
        return Suggestion::Never {
            reason: format!(
                "a socket of a kind a run may not make ({kind}): a run makes inet sockets of \
                 three kinds only, TCP, MPTCP and UDP, whose every way out the kernel hooks \
                 judge (on Linux 6.18 none judges sendto on an ICMP ping socket, or connect on \
                 a UDP-Lite one); no policy line changes that. Use a TCP or UDP socket."
            ),
        };
    }
    let addr = match &ev.destination {
        Destination::Unix(path) if ev.target_absent => {
            return Suggestion::Harmless {
                reason: format!(
                    "unix:{path} does not exist on this host, so the connect would have failed \
                     anyway; nothing to allow (glibc tries nscd's socket on every user lookup and \
                     falls back to local files)."
                ),
            }
        }
        Destination::Unix(path) => {
            return Suggestion::Explain {
                reason: format!(
                    "a unix socket outside the sandbox (unix:{path}); no policy line allows it. \
                     Start the service with its socket inside the worktree (or the run's temp \
                     dir) and point the program there."
                ),
            }
        }
        Destination::Inet(a) => *a,
    };
    let mapped = matches!(addr.ip(), IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
    let ip = addr.ip().to_canonical();
    let port = addr.port();
    let shown = SocketAddr::new(ip, port);
    match this_host(ip) {
        Some(ThisHost::Loopback) if port == 53 => Suggestion::Warn {
            reason: format!(
                "{shown} is a local DNS resolver. Names are resolved by the proxy; a program that \
                 resolves on its own should use HTTPS_PROXY instead. Opening the resolver would \
                 let DNS queries — a data channel — leave the sandbox."
            ),
        },
        Some(ThisHost::Loopback) => Suggestion::Allow {
            policy: format!("[network]\nlocal = [\"{shown}\"]"),
            flag: Some(format!("--allow-local {shown}")),
            note: mapped.then(|| {
                format!(
                    "the program used the IPv4-mapped form {}; the rule names {shown}",
                    addr.ip()
                )
            }),
        },
        Some(ThisHost::Unspecified) => Suggestion::Explain {
            reason: format!(
                "a connection to {shown} (the unspecified address, which Linux treats as this \
                 host). Connect to 127.0.0.1:{port} instead, and allow that with [network] local \
                 = [\"127.0.0.1:{port}\"] / --allow-local 127.0.0.1:{port}."
            ),
        },
        _ => {
            let udp = if ev.protocol == "udp" {
                " UDP cannot go through the proxy at all."
            } else {
                ""
            };
            Suggestion::Never {
                reason: format!(
                    "a direct connection to {shown}: lockrun never lets the command reach another \
                     host directly.{udp} Go through the run's proxy (HTTPS_PROXY is set for the \
                     command; make the program honor it) and allow the host by name: [network] \
                     allow = [\"HOST\"] / --allow-host HOST:{port}."
                ),
            }
        }
    }
}

/// One of this host's own addresses, as the kernel takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThisHost {
    Loopback,
    /// The unspecified address, or any of `0.0.0.0/8`: Linux connects it to
    /// this host.
    Unspecified,
}

/// Whether `ip` is this host as the kernel takes it, by the one
/// classification the proxy's guard decides with: plainly, or IPv4-mapped
/// (the one IPv6 form of an IPv4 address a socket of the run reaches as
/// that address); `None` for any other address, however the guard would
/// judge it.
fn this_host(ip: IpAddr) -> Option<ThisHost> {
    let Special { range, via } = classify(ip)?;
    if !matches!(via, None | Some((Embedding::Ipv4Mapped, _))) {
        return None;
    }
    match range {
        Range::Loopback => Some(ThisHost::Loopback),
        Range::Unspecified | Range::ThisNetwork => Some(ThisHost::Unspecified),
        _ => None,
    }
}
