//! The transparent path's sniffer on arbitrary first bytes: never panics;
//! a verdict other than "need more" stays the same when more bytes follow
//! (the proxy judges as soon as it can, so a later byte must not change
//! what was already judged: the proxy reads at most MAX_SNIFF), and a server name is printable ASCII.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::proxy::sniff::{sniff, Sniffed, MAX_SNIFF};

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(MAX_SNIFF)];
    let whole = sniff(data);
    if let Sniffed::Tls(Some(n)) = &whole {
        assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic()));
    }
    // The first prefix with a verdict has the verdict of the whole.
    for cut in 0..data.len() {
        match sniff(&data[..cut]) {
            Sniffed::NeedMore => {}
            v => {
                assert_eq!(v, whole, "prefix of {cut} bytes");
                break;
            }
        }
    }
});
