//! The run's name table: each allowed name the run's resolver answered
//! gets one address of [`FAKE_V4_NET`]/[`FAKE_V4_PREFIX_LEN`] (198.18.0.0/15,
//! RFC 2544, never routed), stable for the run, and the proxy maps a
//! connection to that address back to the name (issue 59). The kernel's
//! connect hooks send every TCP connect to that network to the proxy's
//! transparent listener; an address the table never handed out leads to no
//! name and is refused there.
//!
//! The table holds at most [`MAX_NAMES`] names: a run that asks for more
//! (a wildcard rule lets it make up names) gets no address for the rest
//! (`SERVFAIL`), rather than growing the table without bound.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, PoisonError};

use lockrun_common::{FAKE_V4_NET, FAKE_V4_PREFIX_LEN};

use crate::policy::HostName;

/// The most names one run's table holds.
pub const MAX_NAMES: usize = 65536;

/// The table is full: no address for another name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the run's name table is full ({MAX_NAMES} names)")]
pub struct TableFull;

/// Allowed names and the addresses handed out for them, both ways.
#[derive(Debug, Default)]
pub struct NameTable {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_name: HashMap<HostName, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, HostName>,
}

/// The network's first address, as a number.
fn base() -> u32 {
    u32::from(Ipv4Addr::from(FAKE_V4_NET))
}

/// The network's mask.
fn mask() -> u32 {
    u32::MAX << (32 - u32::from(FAKE_V4_PREFIX_LEN))
}

/// `addr` is in 198.18.0.0/15 (an IPv4-mapped IPv6 form counts as its IPv4 address).
#[must_use]
pub fn is_fake(addr: IpAddr) -> bool {
    fake_v4(addr).is_some()
}

/// The IPv4 address of 198.18.0.0/15 that `addr` is (or carries, mapped).
#[must_use]
pub fn fake_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let v4 = match addr {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped()?,
    };
    (u32::from(v4) & mask() == base()).then_some(v4)
}

impl NameTable {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The address of `name`: the one it already has, or the next free one
    /// (the network's first and last addresses are never handed out).
    pub fn address_for(&self, name: &HostName) -> Result<Ipv4Addr, TableFull> {
        let mut t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = t.by_name.get(name) {
            return Ok(*a);
        }
        if t.by_name.len() >= MAX_NAMES {
            return Err(TableFull);
        }
        let n = u32::try_from(t.by_name.len()).map_err(|_| TableFull)?;
        let addr = Ipv4Addr::from(base() + 1 + n);
        debug_assert!(is_fake(IpAddr::V4(addr)));
        t.by_name.insert(name.clone(), addr);
        t.by_addr.insert(addr, name.clone());
        Ok(addr)
    }

    /// The name `addr` was handed out for, if it was.
    #[must_use]
    pub fn name_of(&self, addr: IpAddr) -> Option<HostName> {
        let v4 = fake_v4(addr)?;
        let t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        t.by_addr.get(&v4).cloned()
    }

    /// Names handed an address so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_name
            .len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn n(s: &str) -> HostName {
        HostName::parse(s).unwrap()
    }

    #[test]
    fn stable_both_ways() {
        let t = NameTable::new();
        let a = t.address_for(&n("a.example")).unwrap();
        let b = t.address_for(&n("b.example")).unwrap();
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(b, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(t.address_for(&n("A.example.")).unwrap(), a);
        assert_eq!(t.name_of(IpAddr::V4(a)), Some(n("a.example")));
        let mapped = IpAddr::V6(a.to_ipv6_mapped());
        assert_eq!(t.name_of(mapped), Some(n("a.example")));
        assert_eq!(t.name_of("198.18.0.3".parse().unwrap()), None);
        assert_eq!(t.name_of("10.0.0.1".parse().unwrap()), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_network() {
        for (a, fake) in [
            ("198.18.0.0", true),
            ("198.19.255.255", true),
            ("198.17.255.255", false),
            ("198.20.0.0", false),
            ("::ffff:198.19.1.2", true),
            ("::198.19.1.2", false),
            ("2001:db8::1", false),
        ] {
            assert_eq!(is_fake(a.parse().unwrap()), fake, "{a}");
        }
    }

    #[test]
    fn bounded() {
        let t = NameTable::new();
        for i in 0..MAX_NAMES {
            let a = t.address_for(&n(&format!("h{i}.example"))).unwrap();
            assert!(is_fake(IpAddr::V4(a)));
            assert_ne!(a, Ipv4Addr::new(198, 19, 255, 255));
        }
        assert_eq!(t.address_for(&n("one-more.example")), Err(TableFull));
        assert!(t.address_for(&n("h7.example")).is_ok());
    }
}
