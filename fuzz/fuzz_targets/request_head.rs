//! The proxy's request-head parser on arbitrary bytes: never panics, never
//! claims more bytes than it was given, and whatever it accepts is a target
//! that parses back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::proxy::request::{parse_authority, parse_head, Kind, MAX_HEAD};

fuzz_target!(|data: &[u8]| {
    match parse_head(data) {
        Ok(Some(head)) => {
            assert!(head.len <= data.len() && head.len <= MAX_HEAD);
            let target = head.target();
            let again =
                parse_authority(&target.to_string(), None).expect("accepted target reparses");
            assert_eq!(&again, target);
            if let Kind::Forward { path, .. } = &head.kind {
                assert!(path.starts_with('/'));
            }
            // Every strict prefix of an accepted head is incomplete or an error, never a different head.
            if let Ok(Some(h)) = parse_head(&data[..head.len - 1]) {
                panic!("prefix parsed as {h:?}");
            }
        }
        Ok(None) => assert!(data.len() < MAX_HEAD),
        Err(_) => {}
    }
});
