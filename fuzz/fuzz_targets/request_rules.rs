//! Request rules and the request path they judge, on arbitrary text: never
//! panic; a path accepted as unambiguous has no dot segment, no encoded
//! separator and no empty inner segment; `* /**` allows every such path;
//! a rule that parses prints back to itself; and the rule suggested for a
//! refused request allows it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockrun::policy::requests::{normalized, suggested};
use lockrun::policy::RequestRule;

fuzz_target!(|data: (&str, &str, &str)| {
    let (rule, method, path) = data;
    if let Ok(r) = RequestRule::parse(rule) {
        let again = RequestRule::parse(&r.to_string()).expect("a printed rule parses");
        assert_eq!(again, r);
        if let Ok(p) = normalized(path) {
            let _ = r.allows(method, p);
        }
    }
    if let Ok(p) = normalized(path) {
        assert!(p.starts_with('/') && !p.contains('?'));
        let lower = p.to_ascii_lowercase();
        assert!(!lower.contains("%2f") && !lower.contains("%5c") && !p.contains('\\'));
        let segs: Vec<&str> = p[1..].split('/').collect();
        for (i, s) in segs.iter().enumerate() {
            let d = s.to_ascii_lowercase().replace("%2e", ".");
            assert!(d != "." && d != "..");
            assert!(!s.is_empty() || i + 1 == segs.len());
        }
        let any = RequestRule::parse("* /**").unwrap();
        assert!(any.allows(method, p));
        let m: String = method.chars().filter(char::is_ascii_uppercase).collect();
        if !m.is_empty() {
            if let Ok(s) = RequestRule::parse(&suggested(&m, p)) {
                assert!(s.allows(&m, p), "{s} does not allow {m} {p}");
            }
        }
    }
});
