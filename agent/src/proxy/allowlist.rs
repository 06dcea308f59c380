//! The allowlist, by name, before any DNS: the first gate of every request.
//!
//! A name passes when no `deny` pattern covers it (deny wins) and an `allow`
//! rule covers both the name and the port. Names arrive normalized
//! ([`HostName`]: lowercase punycode, no trailing dot), so matching is exact
//! and case-insensitive by construction; `*.suffix` respects the label
//! boundary ([`crate::policy::HostPattern::matches`]).
//!
//! IP literals are not names. A request for one passes only when an `allow`
//! rule's host is that very address written as an IPv4 literal (for example
//! `allow = ["10.213.0.2:80"]`); the address guard still judges it afterwards.

use std::fmt;
use std::net::IpAddr;

use super::guard::AddrRefusal;
use crate::audit::ProxyVerdict;
use crate::policy::{HostName, HostPattern, HostRule, NetworkPolicy, Port};

/// Why a request was refused by policy. Printed in the 403's
/// `X-Lockrun-Reason`, the body, the audit log and errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("{host} is not in the allowlist")]
    NotListed { host: String },
    #[error("{host} is allowed only on port(s) {allowed}, not {port}")]
    PortNotAllowed {
        host: String,
        port: Port,
        allowed: String,
    },
    #[error("{host} is denied by the policy (`{pattern}`)")]
    Denied { host: String, pattern: HostPattern },
    #[error("IP literal {addr} is not listed in the policy; use a host name")]
    IpLiteral { addr: IpAddr },
    #[error("{host} resolves to {refusal}; whole request refused")]
    Address { host: String, refusal: AddrRefusal },
}

impl Reason {
    /// The same, as the audit log's typed verdict.
    #[must_use]
    pub fn verdict(&self) -> ProxyVerdict {
        match self {
            Self::NotListed { .. } => ProxyVerdict::NotListed,
            Self::PortNotAllowed { .. } => ProxyVerdict::PortNotAllowed,
            Self::Denied { .. } => ProxyVerdict::Denied,
            Self::IpLiteral { .. } => ProxyVerdict::IpLiteral,
            Self::Address { refusal, .. } => match refusal {
                AddrRefusal::Special { addr, special } => ProxyVerdict::Address {
                    addr: *addr,
                    range: Some(special.range),
                    embedded: special.via.map(|(_, v4)| v4),
                },
                AddrRefusal::OwnHost { addr } => ProxyVerdict::Address {
                    addr: *addr,
                    range: None,
                    embedded: None,
                },
            },
        }
    }
}

/// The allowlist's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by this rule.
    Allow(HostRule),
    Deny(Reason),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Allow(r) => write!(f, "allowed by `{r}`"),
            Self::Deny(r) => write!(f, "{r}"),
        }
    }
}

/// Judge a name and port against the policy.
#[must_use]
pub fn check_name(net: &NetworkPolicy, name: &HostName, port: Port) -> Verdict {
    if let Some(d) = net.deny.iter().find(|d| d.matches(name)) {
        return Verdict::Deny(Reason::Denied {
            host: name.to_string(),
            pattern: d.clone(),
        });
    }
    if let Some(r) = net.allow.iter().find(|r| r.allows(name, port)) {
        return Verdict::Allow(r.clone());
    }
    let ports: Vec<String> = net
        .allow
        .iter()
        .filter(|r| r.pattern.matches(name))
        .flat_map(|r| r.ports.iter().map(ToString::to_string))
        .collect();
    if ports.is_empty() {
        Verdict::Deny(Reason::NotListed {
            host: name.to_string(),
        })
    } else {
        Verdict::Deny(Reason::PortNotAllowed {
            host: name.to_string(),
            port,
            allowed: ports.join(","),
        })
    }
}

/// Judge a name on no particular port, as the run's resolver does: allowed
/// when no `deny` pattern covers it and some `allow` rule does (on any of
/// its ports; the port is judged when the run connects). The rule is the
/// first that covers it.
#[must_use]
pub fn check_any_port(net: &NetworkPolicy, name: &HostName) -> Verdict {
    if let Some(d) = net.deny.iter().find(|d| d.matches(name)) {
        return Verdict::Deny(Reason::Denied {
            host: name.to_string(),
            pattern: d.clone(),
        });
    }
    match net.allow.iter().find(|r| r.pattern.matches(name)) {
        Some(r) => Verdict::Allow(r.clone()),
        None => Verdict::Deny(Reason::NotListed {
            host: name.to_string(),
        }),
    }
}

/// The name an IP literal is listed under in a policy, if it can be listed
/// (IPv4 only: an IPv6 literal cannot be written as a host pattern).
#[must_use]
pub fn literal_name(addr: IpAddr) -> Option<HostName> {
    match addr {
        IpAddr::V4(a) => HostName::parse(&a.to_string()).ok(),
        IpAddr::V6(_) => None,
    }
}

/// Judge an IP literal: allowed only by an exact rule naming that address.
#[must_use]
pub fn check_ip(net: &NetworkPolicy, addr: IpAddr, port: Port) -> Verdict {
    let Some(name) = literal_name(addr) else {
        return Verdict::Deny(Reason::IpLiteral { addr });
    };
    match check_name(net, &name, port) {
        Verdict::Allow(r) if matches!(r.pattern, HostPattern::Exact(_)) => Verdict::Allow(r),
        Verdict::Deny(d @ Reason::Denied { .. }) => Verdict::Deny(d),
        _ => Verdict::Deny(Reason::IpLiteral { addr }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use super::*;

    /// A network policy allowing `allow` and denying `deny`.
    pub(in crate::proxy) fn net(allow: &[&str], deny: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            allow: allow.iter().map(|a| HostRule::parse(a).unwrap()).collect(),
            deny: deny
                .iter()
                .map(|d| HostPattern::parse(d).unwrap())
                .collect(),
            ..NetworkPolicy::default()
        }
    }
    fn n(s: &str) -> HostName {
        HostName::parse(s).unwrap()
    }
    fn p(x: u16) -> Port {
        Port::new(x).unwrap()
    }

    #[test]
    fn table() {
        let pol = net(
            &[
                "api.example.com",
                "*.example.org",
                "plain.example:80",
                "bücher.example",
                "10.213.0.2:80",
            ],
            &["evil.example.org"],
        );
        let rows: &[(&str, u16, bool)] = &[
            ("api.example.com", 443, true),
            ("API.EXAMPLE.COM.", 443, true),
            ("api.example.com", 80, false),
            ("example.com", 443, false),
            ("x.api.example.com", 443, false),
            ("a.example.org", 443, true),
            ("a.b.example.org", 443, true),
            ("example.org", 443, false),
            ("evil-example.org", 443, false),
            ("evil.example.org", 443, false),
            ("plain.example", 80, true),
            ("plain.example", 443, false),
            ("xn--bcher-kva.example", 443, true),
            ("BÜCHER.example", 443, true),
            ("api.example.com.evil.net", 443, false),
        ];
        for (name, port, want) in rows {
            let v = check_name(&pol, &n(name), p(*port));
            assert_eq!(matches!(v, Verdict::Allow(_)), *want, "{name}:{port} → {v}");
        }
        assert!(matches!(
            check_name(&pol, &n("evil.example.org"), p(443)),
            Verdict::Deny(Reason::Denied { .. })
        ));
        assert!(matches!(
            check_name(&pol, &n("plain.example"), p(443)),
            Verdict::Deny(Reason::PortNotAllowed { .. })
        ));
        assert!(matches!(
            check_name(&pol, &n("nope.example"), p(443)),
            Verdict::Deny(Reason::NotListed { .. })
        ));
    }

    #[test]
    fn any_port() {
        let pol = net(
            &["plain.example:80", "*.example.org:22"],
            &["evil.example.org"],
        );
        assert!(matches!(
            check_any_port(&pol, &n("plain.example")),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            check_any_port(&pol, &n("a.example.org")),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            check_any_port(&pol, &n("evil.example.org")),
            Verdict::Deny(Reason::Denied { .. })
        ));
        assert!(matches!(
            check_any_port(&pol, &n("example.org")),
            Verdict::Deny(Reason::NotListed { .. })
        ));
    }

    #[test]
    fn ip_literals_only_when_listed() {
        let pol = net(&["10.213.0.2:80", "*.0.2:80"], &[]);
        assert!(matches!(
            check_ip(&pol, "10.213.0.2".parse().unwrap(), p(80)),
            Verdict::Allow(_)
        ));
        for (ip, port) in [
            ("10.213.0.2", 443),
            ("10.213.0.3", 80),
            ("::1", 80),
            ("1.0.2.0", 80),
        ] {
            assert!(
                matches!(
                    check_ip(&pol, ip.parse().unwrap(), p(port)),
                    Verdict::Deny(Reason::IpLiteral { .. })
                ),
                "{ip}:{port}"
            );
        }
    }
}
