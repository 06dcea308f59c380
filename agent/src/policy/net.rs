//! IP networks (`10.0.0.0/8`, `fd00::/8`) as written in policies.

use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(into = "String")]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl From<IpNet> for String {
    fn from(n: IpNet) -> String {
        n.to_string()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid network `{0}`: expected ADDRESS/PREFIX with the host bits zero")]
pub struct IpNetError(pub String);

impl IpNet {
    pub fn parse(raw: &str) -> Result<Self, IpNetError> {
        let err = || IpNetError(raw.to_owned());
        let (a, p) = raw.split_once('/').ok_or_else(err)?;
        let addr: IpAddr = a.parse().map_err(|_| err())?;
        let prefix: u8 = p.parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(err());
        }
        let net = Self { addr, prefix };
        if !net.contains(addr) || net.network() != addr {
            return Err(err());
        }
        Ok(net)
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// Whether `ip` lies in this network. An IPv4 network never contains an
    /// IPv6 address and vice versa: callers unwrap embedded IPv4 first.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// The network's last address (its first is [`addr`](Self::addr)).
    #[must_use]
    pub fn last(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let host = u32::MAX.checked_shr(u32::from(self.prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(a) | host).into())
            }
            IpAddr::V6(a) => {
                let host = u128::MAX.checked_shr(u32::from(self.prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(a) | host).into())
            }
        }
    }

    #[must_use]
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    #[must_use]
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn parses_and_contains() {
        let n = IpNet::parse("10.200.0.0/16").unwrap();
        assert!(n.contains("10.200.3.4".parse().unwrap()));
        assert!(!n.contains("10.201.0.1".parse().unwrap()));
        assert!(!n.contains("::ffff:10.200.0.1".parse().unwrap()));
        let z = IpNet::parse("0.0.0.0/0").unwrap();
        assert!(z.contains("1.2.3.4".parse().unwrap()));
        let v6 = IpNet::parse("fd00:1::/32").unwrap();
        assert!(v6.contains("fd00:1::5".parse().unwrap()));
    }

    #[test]
    fn the_last_address_sets_every_host_bit() {
        for (net, last) in [
            ("10.0.0.0/8", "10.255.255.255"),
            ("10.0.0.5/32", "10.0.0.5"),
            ("0.0.0.0/0", "255.255.255.255"),
            ("fd00::/8", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            ("::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            ("::1/128", "::1"),
        ] {
            assert_eq!(
                IpNet::parse(net).unwrap().last(),
                last.parse::<IpAddr>().unwrap(),
                "{net}"
            );
        }
    }

    #[test]
    fn refuses_host_bits_and_bad_prefixes() {
        for bad in ["10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0", "x/8"] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
    }
}
