//! What a policy allows that the address guard ([`super::guard`]) would
//! refuse on every request: refused once, when the policy loads, with the
//! guard's own reason and what to write instead. Judged with the guard's
//! one classifier ([`classify`]) and its one check ([`check_addr`]), and
//! this host's addresses as the guard reads them ([`OwnAddresses`]).
//!
//! - An allowed IP literal (`allow = ["10.0.0.5:80"]`): the guard must
//!   pass it: not loopback, unspecified, link-local or another range it
//!   never dials, not a private address without a grant naming it, not an
//!   address of this host. Loopback services belong in `local = [...]`.
//! - A private grant's network (`[[network.private]]`) must lie within one
//!   range a grant can open (RFC 1918, CGNAT `100.64/10`, ULA `fc00::/7`): not
//!   every address (`0.0.0.0/0`, `::/0`), nothing the guard never opens
//!   (loopback, link-local, ...), not a public network (which needs no
//!   grant), not one address of this host.
//!
//! Names are not judged here: what a name resolves to is known only per
//! request, and the policy's fixed answers (`[network.resolve]`) stand for
//! DNS's, judged per request like them.

use std::collections::HashSet;
use std::net::IpAddr;

use super::guard::{check_addr, classify, AddrRefusal, OwnAddresses, Range, Special};
use crate::policy::{HostName, HostPattern, HostRule, IpNet, NetworkPolicy, PrivateGrant};

/// Why a private grant's network is not one the guard can open for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantFault {
    /// `0.0.0.0/0`, `::/0`.
    EveryAddress,
    /// It holds an address of a range no grant opens.
    Holds { addr: IpAddr, special: Special },
    /// A public network: its addresses are dialed without a grant.
    Public,
    /// It reaches beyond the one private range it starts or ends in.
    Beyond(Range),
    /// Its one address is this host's.
    OwnHost,
}

/// An entry of the policy the proxy could never reach.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    #[error(
        "allowed host `{rule}` can never be reached: on every request the proxy refuses {refusal}; {}",
        literal_instead(.rule, .refusal)
    )]
    Literal {
        rule: HostRule,
        refusal: AddrRefusal,
    },
    #[error("network.private `{}` for {}: {}", .grant.network, hosts(.grant), grant_fault(.fault))]
    Grant {
        grant: PrivateGrant,
        fault: GrantFault,
    },
    #[error(
        "cannot read this host's addresses to check the policy's IP addresses (getifaddrs: {0})"
    )]
    OwnAddresses(nix::Error),
}

fn hosts(g: &PrivateGrant) -> String {
    let names: Vec<String> = g.hosts.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// `local = ["ADDR:PORT"]` for a loopback literal's rule.
fn local_form(rule: &HostRule) -> String {
    let port = rule.ports.first().map_or(443, |p| p.get());
    format!("{}:{port}", rule.pattern)
}

fn literal_instead(rule: &HostRule, refusal: &AddrRefusal) -> String {
    match refusal {
        AddrRefusal::Special { special, .. } if special.range == Range::Loopback => {
            let local = local_form(rule);
            format!("a loopback service belongs in `local = [\"{local}\"]` (--allow-local {local})")
        }
        AddrRefusal::Special { special, .. } if special.range.grantable() => format!(
            "it is dialed only for the hosts a grant names: add a [[network.private]] with hosts = [\"{}\"] and the network it lies in",
            rule.pattern
        ),
        AddrRefusal::Special { .. } => "allow the host by its name instead".to_owned(),
        AddrRefusal::OwnHost { .. } => {
            "a service of this host belongs in `local`, on loopback".to_owned()
        }
    }
}

fn grant_fault(fault: &GrantFault) -> String {
    const OPENS: &str = "a grant opens one private network (RFC 1918, CGNAT 100.64/10 or ULA fc00::/7) to the hosts it names";
    match fault {
        GrantFault::EveryAddress => {
            format!("is every address; {OPENS}: write that network, such as 10.20.0.0/16")
        }
        GrantFault::Holds { addr, special } if special.range == Range::Loopback => format!(
            "holds {addr}, {special}, which no grant opens; loopback services belong in `local = [\"ADDRESS:PORT\"]`"
        ),
        GrantFault::Holds { addr, special } => format!(
            "holds {addr}, {special}, which no grant opens; write the private network the hosts live in"
        ),
        GrantFault::Public => "is public: the proxy dials public addresses without a grant, so it opens nothing; allow the hosts by name only".to_owned(),
        GrantFault::Beyond(range) => format!(
            "reaches beyond the {} it starts or ends in; {OPENS}: write that part of it only",
            range.name()
        ),
        GrantFault::OwnHost => {
            "is an address of this host, which no grant opens; a service of this host belongs in `local`, on loopback".to_owned()
        }
    }
}

/// The IPv4 address an allow rule names, if it names one (an IPv6 literal
/// cannot be written as a host pattern).
fn literal(rule: &HostRule) -> Option<(HostName, IpAddr)> {
    match &rule.pattern {
        HostPattern::Exact(name) => Some((name.clone(), name.as_str().parse().ok()?)),
        HostPattern::Subdomains(_) => None,
    }
}

/// Whether `net` is one address, the whole of it.
fn single(net: IpNet) -> bool {
    net.addr() == net.last()
}

/// What is wrong with a grant's network, but for this host's addresses.
fn fault_of(network: IpNet) -> Option<GrantFault> {
    if network.prefix() == 0 {
        return Some(GrantFault::EveryAddress);
    }
    let (first, last) = (network.addr(), network.last());
    let (at_first, at_last) = (classify(first), classify(last));
    for (addr, special) in [(first, at_first), (last, at_last)] {
        if let Some(special) = special.filter(|s| !s.range.grantable()) {
            return Some(GrantFault::Holds { addr, special });
        }
    }
    // Both ends in one private range: a network (aligned) lies within it.
    match (at_first, at_last) {
        (None, None) => Some(GrantFault::Public),
        (Some(a), Some(b)) if a.range == b.range => None,
        (Some(a), _) | (None, Some(a)) => Some(GrantFault::Beyond(a.range)),
    }
}

/// Refuse the first entry of `net` the guard would refuse on every
/// request, judged against this host's addresses as `own` reads them
/// (asked only when an entry needs them).
pub fn check_with(
    net: &NetworkPolicy,
    own: impl FnOnce() -> Result<HashSet<IpAddr>, nix::Error>,
) -> Result<(), Unreachable> {
    for grant in &net.private {
        if let Some(fault) = fault_of(grant.network) {
            return Err(Unreachable::Grant {
                grant: grant.clone(),
                fault,
            });
        }
    }
    let literals: Vec<(&HostRule, HostName, IpAddr)> = net
        .allow
        .iter()
        .filter_map(|r| literal(r).map(|(n, a)| (r, n, a)))
        .collect();
    let singles: Vec<&PrivateGrant> = net.private.iter().filter(|g| single(g.network)).collect();
    if literals.is_empty() && singles.is_empty() {
        return Ok(());
    }
    let own = own().map_err(Unreachable::OwnAddresses)?;
    if let Some(grant) = singles.iter().find(|g| own.contains(&g.network.addr())) {
        return Err(Unreachable::Grant {
            grant: (*grant).clone(),
            fault: GrantFault::OwnHost,
        });
    }
    for (rule, name, addr) in literals {
        check_addr(net, &name, addr, &own).map_err(|refusal| Unreachable::Literal {
            rule: rule.clone(),
            refusal,
        })?;
    }
    Ok(())
}

/// [`check_with`] this host's addresses, read as the guard reads them.
pub fn check(net: &NetworkPolicy) -> Result<(), Unreachable> {
    check_with(net, || OwnAddresses::new().get())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn net(allow: &[&str], grants: &[(&str, &str)]) -> NetworkPolicy {
        NetworkPolicy {
            allow: allow.iter().map(|a| HostRule::parse(a).unwrap()).collect(),
            private: grants
                .iter()
                .map(|(h, n)| PrivateGrant {
                    hosts: vec![HostPattern::parse(h).unwrap()],
                    network: IpNet::parse(n).unwrap(),
                })
                .collect(),
            ..NetworkPolicy::default()
        }
    }

    #[allow(clippy::unnecessary_wraps)] // as OwnAddresses::get answers
    fn own() -> Result<HashSet<IpAddr>, nix::Error> {
        Ok(["127.0.0.1", "::1", "10.9.0.1", "93.184.1.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect())
    }

    fn refused(allow: &[&str], grants: &[(&str, &str)]) -> Option<String> {
        check_with(&net(allow, grants), own)
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn grants_lie_within_one_private_range() {
        for (network, want) in [
            ("0.0.0.0/0", "is every address"),
            ("::/0", "is every address"),
            ("0.0.0.0/1", "holds 0.0.0.0, unspecified"),
            ("127.0.0.0/8", "holds 127.0.0.0, loopback, which no grant opens; loopback services belong in `local"),
            ("96.0.0.0/3", "holds 127.255.255.255, loopback"),
            ("169.254.0.0/16", "holds 169.254.0.0, link-local"),
            ("::ffff:127.0.0.0/104", "loopback (127.0.0.0 inside IPv4-mapped IPv6)"),
            ("8.8.8.0/24", "network.private `8.8.8.0/24` for git.internal.example: is public"),
            ("10.0.0.0/7", "reaches beyond the private network (RFC 1918)"),
            ("10.9.0.1/32", "is an address of this host"),
        ] {
            let got = refused(&[], &[("git.internal.example", network)]);
            assert!(got.as_deref().is_some_and(|g| g.contains(want)), "{network}: {got:?}");
        }
        for network in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.7.0/24",
            "100.64.0.0/10",
            "fd00::/8",
            "fd13:213:1::/64",
            "10.9.0.2/32",
            "::ffff:10.0.0.0/104",
        ] {
            assert_eq!(
                refused(&[], &[("git.internal.example", network)]),
                None,
                "{network}"
            );
        }
    }

    #[test]
    fn allowed_literals_are_those_the_guard_passes() {
        for (allow, want) in [
            ("127.0.0.1:8080", "`127.0.0.1:8080` can never be reached: on every request the proxy refuses 127.0.0.1, loopback; a loopback service belongs in `local = [\"127.0.0.1:8080\"]` (--allow-local 127.0.0.1:8080)"),
            ("0.0.0.0", "0.0.0.0, unspecified"),
            ("169.254.169.254:80", "169.254.169.254, link-local"),
            ("10.1.2.3:80", "10.1.2.3, private network (RFC 1918); it is dialed only for the hosts a grant names"),
            ("93.184.1.1", "93.184.1.1, an address of this host"),
        ] {
            let got = refused(&[allow], &[]);
            assert!(got.as_deref().is_some_and(|g| g.contains(want)), "{allow}: {got:?}");
        }
        assert_eq!(
            refused(
                &["8.8.8.8", "10.1.2.3:80", "api.example.com", "*.0.2:80"],
                &[("10.1.2.3", "10.1.2.0/24")]
            ),
            None
        );
        // This host's address inside a grant is still this host.
        let got = refused(&["10.9.0.1:80"], &[("10.9.0.1", "10.9.0.0/24")]).unwrap();
        assert!(got.contains("10.9.0.1, an address of this host"), "{got}");
    }

    #[test]
    fn this_hosts_addresses_are_read_only_when_needed() {
        let unreadable = || Err(nix::Error::EPERM);
        assert!(check_with(
            &net(&["api.example.com"], &[("a.example", "10.0.0.0/8")]),
            unreadable
        )
        .is_ok());
        assert!(matches!(
            check_with(&net(&["8.8.8.8"], &[]), unreadable),
            Err(Unreachable::OwnAddresses(_))
        ));
    }
}
