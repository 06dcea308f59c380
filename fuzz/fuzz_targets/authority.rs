//! `host:port` parsing on arbitrary text: never panics; accepted targets
//! carry no userinfo, path or brackets around a name, and print back to
//! something that parses to the same target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::policy::Port;
use lockrun::proxy::request::{parse_authority, Host};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for default in [None, Some(Port::HTTP)] {
        if let Ok(t) = parse_authority(text, default) {
            assert!(!text.contains(['@', '/', '?', '#']));
            if let Host::Name(n) = &t.host {
                assert!(n
                    .as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)));
            }
            let again = parse_authority(&t.to_string(), None).expect("printed target reparses");
            assert_eq!(again, t);
        }
    }
});
