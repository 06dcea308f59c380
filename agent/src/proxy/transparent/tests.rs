#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn n(s: &str) -> HostName {
    HostName::parse(s).unwrap()
}

#[test]
fn judging_first_bytes() {
    let name = n("api.example.com");
    let ok = |s: Sniffed| judge(s, &name).ok();
    assert_eq!(ok(Sniffed::Other), Some(ProxyBasis::ResolvedName));
    assert_eq!(ok(Sniffed::Tls(None)), Some(ProxyBasis::ResolvedName));
    assert_eq!(ok(Sniffed::Http(vec![])), Some(ProxyBasis::ResolvedName));
    assert_eq!(
        ok(Sniffed::Tls(Some("API.example.com.".into()))),
        Some(ProxyBasis::Sni)
    );
    assert_eq!(
        ok(Sniffed::Http(vec![
            "api.example.com".into(),
            "Api.Example.Com".into()
        ])),
        Some(ProxyBasis::Host)
    );
    for fronted in [
        Sniffed::Tls(Some("evil.example".into())),
        Sniffed::Tls(Some("10.0.0.1".into())),
        Sniffed::Http(vec!["api.example.com".into(), "evil.example".into()]),
        Sniffed::Http(vec!["[::1]".into()]),
    ] {
        assert!(
            matches!(
                judge(fronted.clone(), &name),
                Err(Judged::Refused(ProxyVerdict::Fronted, _, Some(_)))
            ),
            "{fronted:?}"
        );
    }
    assert!(matches!(
        judge(Sniffed::Malformed("x"), &name),
        Err(Judged::Refused(ProxyVerdict::BadRequest, _, None))
    ));
}
