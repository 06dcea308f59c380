//! The run's resolver on arbitrary messages: parsing never panics; a parsed
//! query's name is lowercase printable ASCII without empty labels, and
//! every answer built for it parses back as an answer to the same question
//! (never as a query: the resolver never answers an answer).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::proxy::dns::wire::{answer, error_answer, parse_query, Rcode, WireError};

fuzz_target!(|data: &[u8]| {
    match parse_query(data) {
        Ok(q) => {
            assert!(q
                .name
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
            assert!(q.name.is_empty() || !q.name.split('.').any(str::is_empty));
            assert!(q.name.len() <= 254);
            for (rcode, addr) in [
                (Rcode::NoError, Some(std::net::Ipv4Addr::new(198, 18, 0, 1))),
                (Rcode::NoError, None),
                (Rcode::NxDomain, None),
            ] {
                let a = answer(&q, rcode, addr);
                assert_eq!(&a[0..2], &data[0..2]);
                assert_eq!(parse_query(&a), Err(WireError::NotQuery));
                assert_eq!(a[3] & 0xf, rcode as u8);
            }
        }
        Err(e) => {
            if let Some(a) = error_answer(data, &e) {
                assert_eq!(a.len(), 12);
                assert_eq!(&a[0..2], &data[0..2]);
            }
        }
    }
});
