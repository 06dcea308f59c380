//! The address guard, after DNS: every address an allowed name resolves to is
//! judged before anything is dialed, and one refused address refuses the
//! whole request (a mixed answer is how DNS rebinding gets a foot in).
//!
//! The special ranges are judged by [`classify`], the one pure function that
//! knows them ([`crate::audit::ranges`], where the audit log's explanations
//! read them too). Besides the ranges, the host's own
//! addresses (every interface, read with `getifaddrs(3)`, refreshed at most
//! once a second) are refused: a public address of this machine is still
//! this machine. A [`PrivateGrant`](crate::policy::PrivateGrant) lets the
//! hosts it names reach its private network (RFC 1918, CGNAT, ULA) and
//! nothing else; loopback, link-local, the host's own addresses and the rest
//! are never granted.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::audit::ranges::{classify, Embedding, Range, Special};
use crate::policy::{HostName, NetworkPolicy};

/// Why the guard refused an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrRefusal {
    #[error("{addr}, {special}")]
    Special { addr: IpAddr, special: Special },
    #[error("{addr}, an address of this host")]
    OwnHost { addr: IpAddr },
}

/// Judge one address for `name` (the requested name, or the listed IP
/// literal's name): `Ok` when it may be dialed.
pub fn check_addr<S: BuildHasher>(
    net: &NetworkPolicy,
    name: &HostName,
    addr: IpAddr,
    own: &HashSet<IpAddr, S>,
) -> Result<(), AddrRefusal> {
    let special = classify(addr);
    let inner = match special.and_then(|s| s.via) {
        Some((_, v4)) => IpAddr::V4(v4),
        None => addr.to_canonical(),
    };
    if let Some(special) = special {
        let granted = special.range.grantable()
            && net.private.iter().any(|g| {
                g.hosts.iter().any(|h| h.matches(name))
                    && (g.network.contains(inner) || g.network.contains(addr))
            });
        if !granted {
            return Err(AddrRefusal::Special { addr, special });
        }
    }
    // Checked after the ranges (whose reasons say more) and before any grant
    // takes effect: a granted network never opens this host's own addresses.
    if own.contains(&addr) || own.contains(&inner) {
        return Err(AddrRefusal::OwnHost { addr });
    }
    Ok(())
}

/// Judge a whole answer: every address must pass, or none is used.
pub fn check_answer<S: BuildHasher>(
    net: &NetworkPolicy,
    name: &HostName,
    addrs: &[IpAddr],
    own: &HashSet<IpAddr, S>,
) -> Result<(), AddrRefusal> {
    addrs
        .iter()
        .try_for_each(|a| check_addr(net, name, *a, own))
}

/// The host's own addresses, read from every interface, cached for a second.
pub struct OwnAddresses {
    cache: Mutex<Option<(Instant, HashSet<IpAddr>)>>,
}

/// How long a reading of the host's addresses is reused.
const OWN_REFRESH: Duration = Duration::from_secs(1);

impl OwnAddresses {
    #[must_use]
    pub fn new() -> Self {
        Self {
            cache: Mutex::new(None),
        }
    }

    /// The current set. A failing `getifaddrs` is an error: the caller
    /// refuses the request rather than judging without it.
    pub fn get(&self) -> Result<HashSet<IpAddr>, nix::Error> {
        let mut guard = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, set)) = guard.as_ref() {
            if at.elapsed() < OWN_REFRESH {
                return Ok(set.clone());
            }
        }
        let set = read_own()?;
        *guard = Some((Instant::now(), set.clone()));
        Ok(set)
    }
}

impl Default for OwnAddresses {
    fn default() -> Self {
        Self::new()
    }
}

fn read_own() -> Result<HashSet<IpAddr>, nix::Error> {
    let mut set = HashSet::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let Some(a) = ifa.address else { continue };
        if let Some(v4) = a.as_sockaddr_in() {
            set.insert(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = a.as_sockaddr_in6() {
            set.insert(IpAddr::V6(v6.ip()));
        }
    }
    Ok(set)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::policy::{HostPattern, IpNet, PrivateGrant};

    fn n(s: &str) -> HostName {
        HostName::parse(s).unwrap()
    }

    #[test]
    fn grants_own_addresses_and_mixed_answers() {
        let net = NetworkPolicy {
            private: vec![PrivateGrant {
                hosts: vec![HostPattern::parse("git.internal").unwrap()],
                network: IpNet::parse("10.213.0.0/24").unwrap(),
            }],
            ..NetworkPolicy::default()
        };
        let own: HashSet<IpAddr> = ["10.213.0.1", "93.184.1.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let ok = |name: &str, a: &str| check_addr(&net, &n(name), a.parse().unwrap(), &own).is_ok();
        assert!(ok("git.internal", "10.213.0.2"));
        assert!(ok("git.internal", "::ffff:10.213.0.2"));
        assert!(!ok("other.internal", "10.213.0.2"));
        assert!(!ok("git.internal", "10.213.1.2"));
        assert!(
            !ok("git.internal", "10.213.0.1"),
            "own address inside the grant"
        );
        assert!(!ok("git.internal", "::ffff:10.213.0.1"));
        assert!(!ok("any.example", "93.184.1.1"), "own public address");
        assert!(!ok("git.internal", "127.0.0.1"));
        assert!(ok("any.example", "8.8.8.8"));
        let mixed: Vec<IpAddr> = vec![
            "8.8.8.8".parse().unwrap(),
            "::ffff:127.0.0.1".parse().unwrap(),
        ];
        assert_eq!(
            check_answer(&net, &n("any.example"), &mixed, &own),
            Err(AddrRefusal::Special {
                addr: mixed[1],
                special: classify(mixed[1]).unwrap()
            })
        );
    }

    #[test]
    fn own_addresses_include_loopback() {
        let set = OwnAddresses::new().get().unwrap();
        assert!(set.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
}
