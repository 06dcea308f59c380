//! The origin-form head parser used inside an inspected tunnel, on
//! arbitrary bytes: never panics, never claims more bytes than it was given,
//! and whatever it accepts goes to the tunnel's own target with a path that
//! starts with `/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::proxy::request::{parse_authority, parse_origin_head, Kind, MAX_HEAD};

fuzz_target!(|data: &[u8]| {
    let connect = parse_authority("api.example.com:443", None).expect("a valid authority");
    match parse_origin_head(data, &connect) {
        Ok(Some(head)) => {
            assert!(head.len <= data.len() && head.len <= MAX_HEAD);
            assert_eq!(head.target(), &connect);
            let Kind::Forward { path, .. } = &head.kind else {
                panic!("not a forwarded request: {head:?}");
            };
            assert!(path.starts_with('/'));
            if let Ok(Some(h)) = parse_origin_head(&data[..head.len - 1], &connect) {
                panic!("prefix parsed as {h:?}");
            }
        }
        Ok(None) => assert!(data.len() < MAX_HEAD),
        Err(_) => {}
    }
});
