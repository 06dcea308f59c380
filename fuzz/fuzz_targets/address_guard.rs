//! The address guard on arbitrary IPv6 addresses: an IPv6 address that
//! embeds an IPv4 address is never judged more leniently than that IPv4
//! address itself (mapped, compatible, NAT64, 6to4, Teredo).
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use lockrun::proxy::guard::classify;

fuzz_target!(|data: [u8; 16]| {
    let v6 = Ipv6Addr::from(data);
    let c = classify(IpAddr::V6(v6));
    if let Some(special) = c {
        if let Some((_, v4)) = special.via {
            if let Some(inner) = classify(IpAddr::V4(v4)) {
                assert_eq!(inner.range, special.range);
            }
        }
    }
    let low = Ipv4Addr::from(u32::from_be_bytes([data[12], data[13], data[14], data[15]]));
    for v6 in [low.to_ipv6_mapped(), low.to_ipv6_compatible()] {
        if classify(IpAddr::V4(low)).is_some() {
            assert!(classify(IpAddr::V6(v6)).is_some(), "{v6} escapes as {low}");
        }
    }
});
