//! What `lockrun audit` advises for each refusal the proxy records: the
//! allowlist's and the address guard's own refusals, as the proxy writes
//! them to the log, through the audit log's explanations.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;

use super::allowlist::Reason;
use super::guard::check_addr;
use crate::audit::explain::tests::{allow, reason};
use crate::audit::explain::{render_text, suggest_proxy, summarize, FsContext, Suggestion};
use crate::audit::{Event, Layer, ProxyEvent, ProxyVerdict, Record};
use crate::policy::{HostName, HostPattern, NetworkPolicy, Port};

/// A refusal as the proxy records it: the allowlist's or the address
/// guard's own `Reason`, in words and as the verdict.
fn proxy(host: &str, port: u16, why: &Reason) -> ProxyEvent {
    ProxyEvent {
        method: "CONNECT".into(),
        host: host.into(),
        port,
        dialed: None,
        allowed: false,
        reason: why.to_string(),
        status: 403,
        verdict: why.verdict(),
        via: Some(crate::audit::ProxyVia::Connect),
        basis: None,
    }
}

/// What the proxy decides for `host` on port 443 under a policy that
/// allows it, resolving to `addr`, on a host whose own addresses are
/// `own`: its refusal (the allowlist and the guard themselves).
fn guarded(host: &str, addr: &str, own: &[&str]) -> ProxyEvent {
    let name = HostName::parse(host).unwrap();
    let own: HashSet<IpAddr> = own.iter().map(|a| a.parse().unwrap()).collect();
    let addr: IpAddr = addr.parse().unwrap();
    let refusal = check_addr(&NetworkPolicy::default(), &name, addr, &own).unwrap_err();
    proxy(
        host,
        443,
        &Reason::Address {
            host: host.into(),
            refusal,
        },
    )
}

/// `lockrun audit` doubles a limit the run reached, and gives no line
/// where memory ran out above the run: a higher limit would not help.
fn not_listed(host: &str, port: u16) -> ProxyEvent {
    proxy(host, port, &Reason::NotListed { host: host.into() })
}
#[test]
fn proxy_host_on_443_is_allowed_by_name() {
    let s = suggest_proxy(&not_listed("api.example.com", 443));
    assert_eq!(
        allow(&s),
        (
            "[network]\nallow = [\"api.example.com\"]",
            Some("--allow-host api.example.com:443")
        )
    );
}

#[test]
fn proxy_host_on_other_port_names_the_port() {
    let s = suggest_proxy(&not_listed("git.example.org", 8443));
    let expected = (
        "[network]\nallow = [\"git.example.org:8443\"]",
        Some("--allow-host git.example.org:8443"),
    );
    assert_eq!(allow(&s), expected);
    let other_port = Reason::PortNotAllowed {
        host: "git.example.org".into(),
        port: Port::new(8443).unwrap(),
        allowed: "443".into(),
    };
    let s = suggest_proxy(&proxy("git.example.org", 8443, &other_port));
    assert_eq!(allow(&s), expected);
}

#[test]
fn proxy_private_address_gets_a_private_grant() {
    let s = suggest_proxy(&guarded("git.internal.example", "10.20.0.5", &[]));
    let Suggestion::Allow { policy, flag, .. } = &s else {
        panic!("{s:?}")
    };
    assert_eq!(
        policy,
        "[[network.private]]\nhosts = [\"git.internal.example\"]\nnetwork = \"10.20.0.5/32\""
    );
    assert_eq!(flag, &None);
    let v6 = suggest_proxy(&guarded("db.internal.example", "fd00::5", &[]));
    assert!(
        allow(&v6).0.ends_with("network = \"fd00::5/128\""),
        "{v6:?}"
    );
    let cgnat = suggest_proxy(&guarded("t.example", "100.64.1.2", &[]));
    assert!(
        allow(&cgnat).0.ends_with("network = \"100.64.1.2/32\""),
        "{cgnat:?}"
    );
    // An IPv6 form carrying a private IPv4 address: the guard judges,
    // and a grant must name, the IPv4 address inside.
    for carrier in ["64:ff9b::a14:5", "2002:a14:5::1", "::ffff:10.20.0.5"] {
        let s = suggest_proxy(&guarded("nas.example", carrier, &[]));
        assert!(
            allow(&s).0.ends_with("network = \"10.20.0.5/32\""),
            "{carrier}: {s:?}"
        );
    }
    // Ranges no grant opens.
    for (addr, what) in [
        ("198.51.100.7", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("224.0.0.1", "multicast"),
        ("0.1.2.3", "this host"),
    ] {
        let s = suggest_proxy(&guarded("x.example", addr, &[]));
        assert!(
            matches!(s, Suggestion::Never { .. }) && reason(&s).contains(what),
            "{addr}: {s:?}"
        );
    }
}

#[test]
fn proxy_never_suggests_loopback_or_the_host() {
    for ev in [
        guarded("localhost", "127.0.0.1", &[]),
        guarded("evil.example", "::ffff:127.0.0.1", &[]),
        guarded("evil.example", "::1", &[]),
        guarded("me.example", "9.9.9.9", &["9.9.9.9"]),
        guarded("me.example", "2606:4700::1111", &["2606:4700::1111"]),
        guarded("meta.example", "169.254.169.254", &[]),
        proxy(
            "127.0.0.1",
            443,
            &Reason::IpLiteral {
                addr: "127.0.0.1".parse().unwrap(),
            },
        ),
    ] {
        let s = suggest_proxy(&ev);
        assert!(
            matches!(s, Suggestion::Never { .. }),
            "{} / {}: {s:?}",
            ev.host,
            ev.reason
        );
    }
    // A public address of this host: refused as the host's own, not
    // as a range.
    let own = guarded("me.example", "8.8.8.8", &["8.8.8.8"]);
    assert_eq!(
        own.verdict,
        ProxyVerdict::Address {
            addr: "8.8.8.8".parse().unwrap(),
            range: None,
            embedded: None,
        }
    );
    assert!(reason(&suggest_proxy(&own)).contains("address of this host (8.8.8.8)"));
}

#[test]
fn proxy_deny_entry_and_bad_requests_explain() {
    let deny = Reason::Denied {
        host: "evil.example.org".into(),
        pattern: HostPattern::parse("*.example.org").unwrap(),
    };
    let d = suggest_proxy(&proxy("evil.example.org", 443, &deny));
    assert!(reason(&d).contains("deny wins"), "{d:?}");
    assert!(reason(&d).contains("`*.example.org`"), "{d:?}");
    let mut bad = not_listed("a.example", 443);
    bad.verdict = ProxyVerdict::BadRequest;
    bad.status = 400;
    assert!(
        reason(&suggest_proxy(&bad)).contains("request itself"),
        "{bad:?}"
    );
    let lit = Reason::IpLiteral {
        addr: "93.184.216.34".parse().unwrap(),
    };
    let lit = suggest_proxy(&proxy("93.184.216.34", 443, &lit));
    assert!(reason(&lit).contains("host names only"), "{lit:?}");
}

/// An allowed host whose name did not resolve was refused by no one:
/// no line to allow it (it is allowed), and not listed as a refusal.
#[test]
fn an_upstream_failure_is_not_a_refusal_and_suggests_nothing() {
    let mut ev = not_listed("api.example.com", 443);
    ev.verdict = ProxyVerdict::UpstreamFailed;
    ev.allowed = true;
    ev.status = 502;
    ev.reason = "resolving api.example.com failed: Name or service not known".into();
    assert!(!ev.refused());
    let s = suggest_proxy(&ev);
    assert!(reason(&s).contains("the policy allowed it"), "{s:?}");
    // The credentials challenge is no refusal either; wrong ones are.
    ev.verdict = ProxyVerdict::NoCredentials;
    ev.allowed = false;
    ev.status = 407;
    assert!(!ev.refused());
    ev.verdict = ProxyVerdict::WrongCredentials;
    assert!(ev.refused());
}

/// `lockrun audit` shows requests allowed whose upstream failed, apart
/// from the refusals and without advice, grouped and counted, also in
/// a run that refused nothing.
#[test]
fn upstream_failures_are_listed_apart_from_refusals() {
    let line = |e: Event| Record {
        ts_ms: 0,
        event: e,
        run: None,
        seq: None,
    };
    let mut failed = not_listed("api.example.com", 443);
    failed.verdict = ProxyVerdict::UpstreamFailed;
    failed.allowed = true;
    failed.status = 502;
    failed.reason = "allowed by `api.example.com`; upstream: resolving api.example.com failed: \
                     Name or service not known"
        .into();
    let start = |id: &str| {
        line(Event::RunStart {
            run_id: id.into(),
            command: vec!["curl".into()],
            policy: vec![],
            worktree: "/w".into(),
            seal_key: None,
        })
    };
    let records = vec![
        start("r1"),
        line(Event::Proxy(failed.clone())),
        line(Event::Proxy(failed.clone())),
        line(Event::Proxy(not_listed("evil.example", 443))),
        start("r2"),
        line(Event::Proxy(failed)),
    ];
    let runs = summarize(&records, |_, _| FsContext::default(), &|_: &Path| false);
    assert_eq!(runs[0].refused.get(&Layer::Proxy), Some(&1));
    assert_eq!(runs[0].refusals.len(), 1);
    assert_eq!(runs[0].upstream_failures.len(), 1);
    assert_eq!(runs[0].upstream_failures[0].count, 2);
    assert!(runs[1].refused.is_empty() && runs[1].refusals.is_empty());
    let text = render_text(&runs);
    let said = "  allowed, but failed upstream (not refused; no policy line changes these):\n    \
                api.example.com:443 — CONNECT → 502: allowed by `api.example.com`; upstream: \
                resolving api.example.com failed: Name or service not known";
    let (r1, r2) = text.split_once("\nrun r2").unwrap();
    assert!(r1.contains("evil.example:443 — CONNECT → 403"), "{text}");
    assert!(r1.contains(&format!("{said} ×2\n")), "{text}");
    assert!(!r1.contains("allow = [\"api.example.com"), "{text}");
    assert!(r2.contains("nothing refused"), "{text}");
    assert!(r2.ends_with(&format!("{said}\n")), "{text}");
}

/// `lockrun audit` on the transparent path and the run's resolver: each
/// refusal says how it came and what it rested on; a name the resolver
/// refused is advised by name (the port comes with the connect), a
/// fronted connection gets no line; a record of an older lockrun (no
/// `via`) still reads as before.
#[test]
fn transparent_and_dns_refusals_say_how_they_came() {
    use crate::audit::{ProxyBasis, ProxyVia};
    let line = |e: ProxyEvent| Record {
        ts_ms: 0,
        event: Event::Proxy(e),
        run: None,
        seq: None,
    };
    let mut dns = not_listed("unlisted.example", 0);
    dns.method = String::new();
    dns.status = 0;
    dns.via = Some(ProxyVia::Dns);
    let mut port = proxy(
        "git.example",
        2222,
        &Reason::PortNotAllowed {
            host: "git.example".into(),
            port: Port::new(2222).unwrap(),
            allowed: "22".into(),
        },
    );
    port.method = String::new();
    port.status = 0;
    port.via = Some(ProxyVia::Transparent);
    port.basis = Some(ProxyBasis::ResolvedName);
    let mut fronted = port.clone();
    fronted.port = 443;
    fronted.verdict = ProxyVerdict::Fronted;
    fronted.basis = Some(ProxyBasis::Sni);
    fronted.reason = "the connection to git.example named evil.example (TLS server name): \
                      fronted, refused"
        .into();
    assert_eq!(dns.target(), "unlisted.example (DNS)");
    assert_eq!(
        port.detail(),
        "transparent, by the name resolved → closed: git.example is allowed only on port(s) 22, \
         not 2222"
    );
    let s = suggest_proxy(&dns);
    assert_eq!(
        allow(&s),
        (
            "[network]\nallow = [\"unlisted.example\"]",
            Some("--allow-host unlisted.example:443")
        )
    );
    assert!(matches!(suggest_proxy(&fronted), Suggestion::Never { .. }));
    let runs = summarize(
        &[line(dns), line(port), line(fronted)],
        |_, _| FsContext::default(),
        &|_: &Path| false,
    );
    let text = render_text(&runs);
    assert!(
        text.contains("unlisted.example (DNS) — DNS query → NXDOMAIN: unlisted.example is not in the allowlist"),
        "{text}"
    );
    assert!(
        text.contains("git.example:2222 — transparent, by the name resolved → closed"),
        "{text}"
    );
    assert!(
        text.contains("git.example:443 — transparent, by TLS server name → closed"),
        "{text}"
    );
    // An older lockrun's line, without the new fields.
    let old = r#"{"ts_ms":1,"event":"proxy","method":"CONNECT","host":"a.example","port":443,"dialed":null,"allowed":false,"reason":"a.example is not in the allowlist","status":403,"verdict":{"kind":"not_listed"}}"#;
    let r: Record = serde_json::from_str(old).unwrap();
    let Event::Proxy(p) = r.event else {
        panic!("{old}")
    };
    assert_eq!((p.via, p.basis), (None, None));
    assert_eq!(
        p.detail(),
        "CONNECT → 403: a.example is not in the allowlist"
    );
}
