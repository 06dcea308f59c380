//! The special-purpose address ranges, and the one pure function that
//! knows them: [`classify`]. Each range has a row in its test table. IPv6
//! forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64,
//! 6to4, Teredo) are decoded and the IPv4 address inside is judged.
//!
//! The proxy's address guard ([`crate::proxy::guard`]) decides with it, the
//! audit log records the [`Range`] a refused address lay in, and `lockrun
//! audit` explains a refusal from it: one classification for all three.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A special-purpose range the proxy never dials (unless granted, for the
/// private ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    Loopback,
    Unspecified,
    /// `0.0.0.0/8` ("this network").
    ThisNetwork,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT.
    SharedCgnat,
    /// `169.254/16` and `fe80::/10` (cloud metadata lives here).
    LinkLocal,
    /// `192.0.0.0/24`, IETF protocol assignments.
    IetfProtocol,
    /// `192.88.99.0/24`, the deprecated 6to4 relay anycast.
    Relay6to4,
    /// `240.0.0.0/4` (without the broadcast address).
    Reserved,
    Broadcast,
    Multicast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`.
    Documentation,
    /// `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// `fc00::/7`.
    UniqueLocal,
    /// `fec0::/10`, deprecated site-local.
    SiteLocal,
    /// `100::/64`, discard-only.
    Discard,
    /// `64:ff9b:1::/48`, local-use NAT64.
    Nat64Local,
}

impl Range {
    /// Whether a [`PrivateGrant`](crate::policy::PrivateGrant) may open it.
    #[must_use]
    pub fn grantable(self) -> bool {
        matches!(self, Self::Private | Self::SharedCgnat | Self::UniqueLocal)
    }

    /// Its name in words, as refusals say it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Unspecified => "unspecified",
            Self::ThisNetwork => "\"this network\" (0/8)",
            Self::Private => "private network (RFC 1918)",
            Self::SharedCgnat => "shared address space (CGNAT 100.64/10)",
            Self::LinkLocal => "link-local",
            Self::IetfProtocol => "IETF protocol assignments (192.0.0/24)",
            Self::Relay6to4 => "6to4 relay anycast",
            Self::Reserved => "reserved (240/4)",
            Self::Broadcast => "broadcast",
            Self::Multicast => "multicast",
            Self::Documentation => "documentation",
            Self::Benchmarking => "benchmarking",
            Self::UniqueLocal => "unique local (fc00::/7)",
            Self::SiteLocal => "site-local (fec0::/10)",
            Self::Discard => "discard-only (100::/64)",
            Self::Nat64Local => "local-use NAT64 (64:ff9b:1::/48)",
        }
    }
}

/// An IPv6 form that carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Embedding {
    Ipv4Mapped,
    Ipv4Compatible,
    Nat64,
    SixToFour,
    Teredo,
}

impl Embedding {
    fn name(self) -> &'static str {
        match self {
            Self::Ipv4Mapped => "IPv4-mapped",
            Self::Ipv4Compatible => "IPv4-compatible",
            Self::Nat64 => "NAT64",
            Self::SixToFour => "6to4",
            Self::Teredo => "Teredo",
        }
    }
}

/// A special address: its range, and the IPv6 form it was found inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Special {
    pub range: Range,
    pub via: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            None => f.write_str(self.range.name()),
            Some((e, v4)) => write!(f, "{} ({v4} inside {} IPv6)", self.range.name(), e.name()),
        }
    }
}

fn classify_v4(a: Ipv4Addr) -> Option<Range> {
    let o = a.octets();
    let in_net = |net: [u8; 4], bits: u32| {
        let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
        u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
    };
    Some(match o {
        [0, 0, 0, 0] => Range::Unspecified,
        [0, ..] => Range::ThisNetwork,
        [127, ..] => Range::Loopback,
        [10, ..] | [192, 168, ..] => Range::Private,
        [172, b, ..] if (16..32).contains(&b) => Range::Private,
        [169, 254, ..] => Range::LinkLocal,
        [255, 255, 255, 255] => Range::Broadcast,
        _ if in_net([100, 64, 0, 0], 10) => Range::SharedCgnat,
        [192, 0, 0, _] => Range::IetfProtocol,
        [192, 88, 99, _] => Range::Relay6to4,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Range::Documentation,
        [198, 18 | 19, ..] => Range::Benchmarking,
        [224..=239, ..] => Range::Multicast,
        [240..=255, ..] => Range::Reserved,
        _ => return None,
    })
}

/// Classify an address. `None`: an ordinary, globally routable address.
#[must_use]
pub fn classify(ip: IpAddr) -> Option<Special> {
    let v6 = match ip {
        IpAddr::V4(a) => return classify_v4(a).map(|range| Special { range, via: None }),
        IpAddr::V6(a) => a,
    };
    let bits = u128::from(v6);
    let seg = v6.segments();
    let plain = |range| Some(Special { range, via: None });
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let embedded = |e: Embedding, v4: Ipv4Addr| {
        classify_v4(v4).map(|range| Special {
            range,
            via: Some((e, v4)),
        })
    };
    let prefix = |net: u128, len: u32| {
        let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
        bits & mask == net & mask
    };
    if v6 == Ipv6Addr::UNSPECIFIED {
        return plain(Range::Unspecified);
    }
    if v6 == Ipv6Addr::LOCALHOST {
        return plain(Range::Loopback);
    }
    if prefix(0xffff << 32, 96) {
        return embedded(Embedding::Ipv4Mapped, low32);
    }
    if prefix(0, 96) {
        // IPv4-compatible (deprecated): judge the IPv4 inside; never plainly public.
        return embedded(Embedding::Ipv4Compatible, low32).or(Some(Special {
            range: Range::Reserved,
            via: Some((Embedding::Ipv4Compatible, low32)),
        }));
    }
    if prefix(0x0064_ff9b << 96, 96) {
        return embedded(Embedding::Nat64, low32);
    }
    if prefix(0x0064_ff9b_0001 << 80, 48) {
        return plain(Range::Nat64Local);
    }
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return embedded(Embedding::SixToFour, v4);
    }
    if seg[0] == 0x2001 && seg[1] == 0 {
        // Teredo: the client's IPv4 address is the last 32 bits, inverted.
        return embedded(
            Embedding::Teredo,
            Ipv4Addr::from(!((bits & 0xffff_ffff) as u32)),
        );
    }
    if prefix(0x2001_0db8 << 96, 32) {
        return plain(Range::Documentation);
    }
    if prefix(0x2001_0002 << 96, 48) {
        return plain(Range::Benchmarking);
    }
    if prefix(0x0100 << 112, 64) {
        return plain(Range::Discard);
    }
    match seg[0] {
        s if s & 0xfe00 == 0xfc00 => plain(Range::UniqueLocal),
        s if s & 0xffc0 == 0xfe80 => plain(Range::LinkLocal),
        s if s & 0xffc0 == 0xfec0 => plain(Range::SiteLocal),
        s if s & 0xff00 == 0xff00 => plain(Range::Multicast),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn c(s: &str) -> Option<Range> {
        classify(s.parse().unwrap()).map(|s| s.range)
    }

    #[test]
    fn classification_table() {
        use Range as R;
        let rows: &[(&str, Option<Range>)] = &[
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("127.0.0.1", Some(R::Loopback)),
            ("127.255.255.254", Some(R::Loopback)),
            ("0.0.0.0", Some(R::Unspecified)),
            ("0.1.2.3", Some(R::ThisNetwork)),
            ("10.0.0.1", Some(R::Private)),
            ("172.16.0.1", Some(R::Private)),
            ("172.31.255.255", Some(R::Private)),
            ("172.32.0.1", None),
            ("172.15.0.1", None),
            ("192.168.1.1", Some(R::Private)),
            ("169.254.169.254", Some(R::LinkLocal)),
            ("100.64.0.1", Some(R::SharedCgnat)),
            ("100.127.255.255", Some(R::SharedCgnat)),
            ("100.128.0.1", None),
            ("100.63.255.255", None),
            ("192.0.0.8", Some(R::IetfProtocol)),
            ("192.88.99.1", Some(R::Relay6to4)),
            ("192.0.2.1", Some(R::Documentation)),
            ("198.51.100.1", Some(R::Documentation)),
            ("203.0.113.1", Some(R::Documentation)),
            ("198.18.0.1", Some(R::Benchmarking)),
            ("198.19.255.255", Some(R::Benchmarking)),
            ("198.20.0.1", None),
            ("224.0.0.1", Some(R::Multicast)),
            ("239.255.255.250", Some(R::Multicast)),
            ("240.0.0.1", Some(R::Reserved)),
            ("255.255.255.255", Some(R::Broadcast)),
            ("::", Some(R::Unspecified)),
            ("::1", Some(R::Loopback)),
            ("2606:4700::1111", None),
            ("::ffff:127.0.0.1", Some(R::Loopback)),
            ("::ffff:10.0.0.1", Some(R::Private)),
            ("::ffff:169.254.169.254", Some(R::LinkLocal)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(R::Loopback)),
            ("::8.8.8.8", Some(R::Reserved)),
            ("64:ff9b::127.0.0.1", Some(R::Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(R::LinkLocal)),
            ("64:ff9b::8.8.8.8", None),
            ("64:ff9b:1::1", Some(R::Nat64Local)),
            ("2002:7f00:1::", Some(R::Loopback)),
            ("2002:a00:1::1", Some(R::Private)),
            ("2002:808:808::1", None),
            // Teredo: server 65.54.227.120, client 127.0.0.1 inverted = 80ff:fffe.
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Some(R::Loopback)),
            ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
            ("2001:db8::1", Some(R::Documentation)),
            ("2001:2::1", Some(R::Benchmarking)),
            ("2001:3::1", None),
            ("100::1", Some(R::Discard)),
            ("fc00::1", Some(R::UniqueLocal)),
            ("fd12:3456::1", Some(R::UniqueLocal)),
            ("fe80::1", Some(R::LinkLocal)),
            ("febf::1", Some(R::LinkLocal)),
            ("fec0::1", Some(R::SiteLocal)),
            ("ff02::1", Some(R::Multicast)),
        ];
        for (ip, want) in rows {
            assert_eq!(c(ip), *want, "{ip}");
        }
        let s = classify("::ffff:127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(s.via, Some((Embedding::Ipv4Mapped, Ipv4Addr::LOCALHOST)));
        assert_eq!(
            s.to_string(),
            "loopback (127.0.0.1 inside IPv4-mapped IPv6)"
        );
    }
}
