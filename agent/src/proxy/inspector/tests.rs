#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use super::*;
use crate::policy::HostName;

const ANTHROPIC: &[u8] = b"sk-ant-api03-REALrealREAL0123456789";
const GITHUB: &[u8] = b"ghp_REALgithubTOKEN0123456789";

fn host(n: &str) -> Host {
    Host::Name(HostName::parse(n).unwrap())
}

fn pattern(p: &str) -> HostPattern {
    HostPattern::parse(p).unwrap()
}

fn inspector(body: bool) -> Inspector {
    let mut rules = BTreeMap::new();
    rules.insert(
        pattern("api.github.com"),
        vec![
            RequestRule::parse("GET /repos/*/*/contents/**").unwrap(),
            RequestRule::parse("POST /graphql").unwrap(),
        ],
    );
    Inspector::new(
        vec![
            SecretValue {
                env: "ANTHROPIC_API_KEY".into(),
                hosts: vec![pattern("api.anthropic.com")],
                value: ANTHROPIC.to_vec(),
                body,
            },
            SecretValue {
                env: "GITHUB_TOKEN".into(),
                hosts: vec![
                    pattern("api.github.com"),
                    pattern("*.githubusercontent.com"),
                ],
                value: GITHUB.to_vec(),
                body: false,
            },
        ],
        rules,
    )
    .unwrap()
}

fn placeholder(i: &Inspector, env: &str) -> Vec<u8> {
    i.placeholders()
        .find(|(e, _)| *e == env)
        .unwrap()
        .1
        .as_bytes()
        .to_vec()
}

fn headers(pairs: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
        .collect()
}

#[test]
fn a_bound_placeholder_is_replaced_in_headers_only_for_its_hosts() {
    let i = inspector(false);
    let ph = placeholder(&i, "ANTHROPIC_API_KEY");
    assert_eq!(ph.len(), ANTHROPIC.len());
    let mut h = headers(&[("x-api-key", &ph), ("accept", b"*/*")]);
    let j = i
        .judge(&host("api.anthropic.com"), "POST", "/v1/messages", &mut h)
        .unwrap();
    assert_eq!(h[0].1, ANTHROPIC);
    assert_eq!(h[1].1, b"*/*");
    assert_eq!(j.rule, None);
    assert!(j.path.is_none());
    // Inside a longer value (`Bearer …`), too.
    let mut bearer = b"Bearer ".to_vec();
    bearer.extend_from_slice(&placeholder(&i, "GITHUB_TOKEN"));
    let mut h = headers(&[("Authorization", &bearer)]);
    i.judge(&host("raw.githubusercontent.com"), "GET", "/x", &mut h)
        .unwrap();
    assert_eq!(&h[0].1[7..], GITHUB);
}

#[test]
fn a_placeholder_to_another_host_is_refused_naming_the_variable_only() {
    let i = inspector(false);
    let ph = placeholder(&i, "ANTHROPIC_API_KEY");
    let mut h = headers(&[("x-api-key", &ph)]);
    let e = i
        .judge(&host("evil.example.com"), "POST", "/collect", &mut h)
        .unwrap_err();
    assert_eq!(e.status, 403);
    assert_eq!(e.verdict, ProxyVerdict::SecretElsewhere);
    assert!(
        e.reason.contains("ANTHROPIC_API_KEY") && e.reason.contains("header x-api-key"),
        "{}",
        e.reason
    );
    assert!(!e
        .reason
        .as_bytes()
        .windows(ph.len())
        .any(|w| w == ph.as_slice()));
    assert!(!i.holds_a_value(e.reason.as_bytes()));
    // The header is left as it came: no value put in on a refusal.
    assert_eq!(h[0].1, ph);
    // In the query, and to an IP literal.
    let path = format!("/c?k={}", String::from_utf8_lossy(&ph));
    let e = i
        .judge(&host("evil.example.com"), "GET", &path, &mut [])
        .unwrap_err();
    assert_eq!(e.verdict, ProxyVerdict::SecretElsewhere);
    assert!(e.reason.contains("path or query"), "{}", e.reason);
    let ip = Host::Ip("10.0.0.1".parse().unwrap());
    let mut h = headers(&[("x-api-key", &ph)]);
    assert!(i.judge(&ip, "GET", "/", &mut h).is_err());
    // The bound host gets the value in the query.
    let j = i
        .judge(&host("api.anthropic.com"), "GET", &path, &mut [])
        .unwrap();
    assert_eq!(
        j.path.unwrap(),
        format!("/c?k={}", String::from_utf8_lossy(ANTHROPIC))
    );
}

#[test]
fn rules_refuse_what_they_do_not_allow_and_name_the_host() {
    let i = inspector(false);
    let gh = host("api.github.com");
    let j = i
        .judge(&gh, "GET", "/repos/o/r/contents/src/main.rs?ref=x", &mut [])
        .unwrap();
    assert_eq!(
        j.rule.as_deref(),
        Some("`GET /repos/*/*/contents/**` of api.github.com")
    );
    for (m, p) in [
        ("POST", "/gists"),
        ("PATCH", "/repos/o/r/issues/1"),
        ("GET", "/graphql"),
    ] {
        let e = i.judge(&gh, m, p, &mut []).unwrap_err();
        assert_eq!(e.verdict, ProxyVerdict::RuleRefused);
        assert_eq!(e.status, 403);
        assert!(
            e.reason.contains(m)
                && e.reason.contains(p)
                && e.reason.contains("no rule of api.github.com"),
            "{}",
            e.reason
        );
    }
    // An ambiguous path is refused before any rule is asked.
    let e = i
        .judge(&gh, "GET", "/repos/o/r/contents/../../../gists", &mut [])
        .unwrap_err();
    assert_eq!(e.verdict, ProxyVerdict::RuleRefused);
    assert!(e.reason.contains("`..`"), "{}", e.reason);
    let e = i
        .judge(&gh, "GET", "/repos/o/r/contents/a%2F..%2F..", &mut [])
        .unwrap_err();
    assert_eq!(e.verdict, ProxyVerdict::RuleRefused);
    // A host without rules takes anything.
    assert!(i
        .judge(&host("api.anthropic.com"), "DELETE", "/x", &mut [])
        .is_ok());
}

#[test]
fn what_is_inspected() {
    let i = inspector(false);
    assert!(!i.is_empty());
    assert!(i.inspects(&host("api.anthropic.com")));
    assert!(i.inspects(&host("api.github.com")));
    assert!(i.inspects(&host("objects.githubusercontent.com")));
    assert!(!i.inspects(&host("githubusercontent.com")));
    assert!(!i.inspects(&host("example.com")));
    assert!(!i.inspects(&Host::Ip("1.1.1.1".parse().unwrap())));
    assert!(Inspector::default().is_empty());
    // What the run's CA may vouch for: each name once, a wildcard's suffix.
    assert_eq!(
        i.inspected_names(),
        [
            "api.anthropic.com",
            "api.github.com",
            "githubusercontent.com"
        ]
    );
    let dbg = format!("{i:?}");
    assert!(!i.holds_a_value(dbg.as_bytes()), "{dbg}");
}

/// `body` fed in pieces of `step` bytes, then finished.
fn rewrite(r: &mut BodyRewriter, body: &[u8], step: usize) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::new();
    for c in body.chunks(step) {
        r.feed(c, &mut out)?;
    }
    r.finish(&mut out)?;
    Ok(out)
}

#[test]
fn the_body_gets_the_value_across_any_split_when_the_secret_says_so() {
    let i = inspector(true);
    let ph = placeholder(&i, "ANTHROPIC_API_KEY");
    let mut body = b"{\"key\":\"".to_vec();
    body.extend_from_slice(&ph);
    body.extend_from_slice(b"\",\"again\":\"");
    body.extend_from_slice(&ph);
    body.extend_from_slice(b"\"}");
    let mut want = b"{\"key\":\"".to_vec();
    want.extend_from_slice(ANTHROPIC);
    want.extend_from_slice(b"\",\"again\":\"");
    want.extend_from_slice(ANTHROPIC);
    want.extend_from_slice(b"\"}");
    for step in 1..=body.len() {
        let mut r = i
            .judge(&host("api.anthropic.com"), "POST", "/v1/x", &mut [])
            .unwrap()
            .body
            .unwrap();
        assert_eq!(rewrite(&mut r, &body, step).unwrap(), want, "step {step}");
    }
    // `body = false` (the default): left as it is in a bound host's body
    // (the other secret, bound elsewhere, is still sought there).
    let i = inspector(false);
    let ph = placeholder(&i, "ANTHROPIC_API_KEY");
    let mut r = i
        .judge(&host("api.anthropic.com"), "POST", "/v1/x", &mut [])
        .unwrap()
        .body
        .unwrap();
    assert_eq!(rewrite(&mut r, &ph, 7).unwrap(), ph);
    let gh = placeholder(&i, "GITHUB_TOKEN");
    let e = rewrite(&mut r, &gh, 7).unwrap_err();
    assert_eq!(e.verdict, ProxyVerdict::SecretElsewhere);
}

#[test]
fn a_foreign_placeholder_in_a_body_is_refused_across_any_split() {
    let i = inspector(true);
    let ph = placeholder(&i, "GITHUB_TOKEN");
    let mut body = b"x".repeat(100);
    body.extend_from_slice(&ph);
    body.extend_from_slice(b"tail");
    for step in [1, 2, 5, 13, 64, 1000] {
        let mut r = i
            .judge(&host("gist.example.com"), "POST", "/", &mut [])
            .unwrap()
            .body
            .unwrap();
        let mut out = Vec::new();
        let mut refused = None;
        for c in body.chunks(step) {
            if let Err(e) = r.feed(c, &mut out) {
                refused = Some(e);
                break;
            }
        }
        let e = refused.or_else(|| r.finish(&mut out).err()).unwrap();
        assert_eq!(e.verdict, ProxyVerdict::SecretElsewhere);
        assert!(e.reason.contains("GITHUB_TOKEN"), "{}", e.reason);
        // Nothing of the placeholder went out before the refusal.
        assert!(out.len() < 100 + ph.len(), "step {step}");
    }
    // A body without placeholders comes through whole, in any pieces.
    let plain = b"hello world, nothing secret here".repeat(10);
    let mut r = i
        .judge(&host("gist.example.com"), "POST", "/", &mut [])
        .unwrap()
        .body
        .unwrap();
    assert_eq!(rewrite(&mut r, &plain, 3).unwrap(), plain);
}

#[test]
fn no_secrets_no_body_rewriter() {
    let i = Inspector::default();
    let j = i
        .judge(&host("a.example.com"), "GET", "/", &mut [])
        .unwrap();
    assert!(j.body.is_none() && j.rule.is_none() && j.path.is_none());
}

#[test]
fn from_policy_reads_the_variable_and_skips_an_optional_unset_one() {
    let dir = std::env::temp_dir().join(format!("lockrun-insp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, b"ghp_FROMfileFROMfile0123\n").unwrap();
    let mut policy = crate::policy::load(
        None,
        &crate::policy::Overrides {
            worktree: Some(dir.clone()),
            state_dir: Some(dir.join("state")),
            allow_host: vec!["api.example.com".into()],
            secrets: vec!["REQ_KEY@api.example.com".into()],
            ..Default::default()
        },
    )
    .unwrap();
    let spec = |file: Option<PathBuf>, optional| crate::policy::SecretSpec {
        hosts: vec![pattern("api.example.com")],
        file,
        body: false,
        optional,
    };
    policy.secrets.insert("OPT_KEY".into(), spec(None, true));
    policy
        .secrets
        .insert("FILE_KEY".into(), spec(Some(file.clone()), false));
    let env = |k: &str| (k == "REQ_KEY").then(|| OsString::from("sk-REQUIREDrequired0123"));
    let (i, skipped) = Inspector::from_policy(&policy, env).unwrap();
    assert_eq!(skipped, ["OPT_KEY"]);
    let names: Vec<&str> = i.placeholders().map(|(e, _)| e).collect();
    assert_eq!(names, ["FILE_KEY", "REQ_KEY"]);
    assert!(i.holds_a_value(b"..ghp_FROMfileFROMfile0123.."));
    assert!(!i.holds_a_value(b"ghp_FROMfileFROMfile0123\n"[..10].as_ref()));
    let e = Inspector::from_policy(&policy, |_| None).unwrap_err();
    assert!(
        matches!(e, SecretError::Unset { ref env } if env == "REQ_KEY"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_host_bound_to_every_secret_without_bodies_gets_no_rewriter() {
    let i = Inspector::new(
        vec![SecretValue {
            env: "K".into(),
            hosts: vec![pattern("api.example.com")],
            value: b"k-0123456789abcdef".to_vec(),
            body: false,
        }],
        BTreeMap::new(),
    )
    .unwrap();
    let j = i
        .judge(&host("api.example.com"), "POST", "/", &mut [])
        .unwrap();
    assert!(j.body.is_none());
    let other = i.judge(&host("other.example.com"), "POST", "/", &mut []);
    assert!(other.unwrap().body.is_some());
}

#[test]
fn an_answer_echoing_the_value_reaches_the_run_masked() {
    let i = inspector(false);
    let ph = placeholder(&i, "ANTHROPIC_API_KEY");
    let anthropic = host("api.anthropic.com");
    let mut body = b"data: {\"error\":\"invalid key ".to_vec();
    body.extend_from_slice(ANTHROPIC);
    body.extend_from_slice(b"\"}\n\n");
    let mut want = b"data: {\"error\":\"invalid key ".to_vec();
    want.extend_from_slice(&ph);
    want.extend_from_slice(b"\"}\n\n");
    for step in [1, 3, 17, 1000] {
        let mut m = i.masker(&anthropic).unwrap();
        assert_eq!(rewrite(&mut m, &body, step).unwrap(), want, "step {step}");
    }
    let mut h = headers(&[("x-echo", ANTHROPIC)]);
    i.mask_headers(&anthropic, &mut h);
    assert_eq!(h[0].1, ph);
    // Another host's answers are not touched (it never got the value).
    assert!(i.masker(&host("example.com")).is_none());
}

/// An event's end is never held back: the tail held is only what could
/// still become a placeholder (no space, no newline).
#[test]
fn a_line_end_is_never_held_back() {
    let i = inspector(true);
    let mut m = i.masker(&host("api.anthropic.com")).unwrap();
    let mut out = Vec::new();
    m.feed(b"event: a\ndata: {\"x\":1}\n\n", &mut out).unwrap();
    assert_eq!(out, b"event: a\ndata: {\"x\":1}\n\n");
    out.clear();
    m.feed(b"data: sk-ant", &mut out).unwrap();
    assert_eq!(out, b"data: ");
    m.finish(&mut out).unwrap();
    assert_eq!(out, b"data: sk-ant");
}

/// `Authorization: Basic base64(user:token)`, as git sends a token: the
/// placeholder inside is put in for its host, refused to another.
#[test]
fn a_placeholder_inside_basic_credentials_is_judged() {
    let i = inspector(false);
    let ph = placeholder(&i, "GITHUB_TOKEN");
    let mut creds = b"x-access-token:".to_vec();
    creds.extend_from_slice(&ph);
    let basic = format!("Basic {}", crate::proxy::server::base64(&creds));
    let mut h = headers(&[("Authorization", basic.as_bytes())]);
    i.judge(&host("api.github.com"), "POST", "/graphql", &mut h)
        .unwrap();
    let mut want = b"x-access-token:".to_vec();
    want.extend_from_slice(GITHUB);
    assert_eq!(
        h[0].1,
        format!("Basic {}", crate::proxy::server::base64(&want)).into_bytes()
    );
    assert_eq!(h[0].1.len(), basic.len());
    let mut h = headers(&[("authorization", basic.as_bytes())]);
    let e = i
        .judge(&host("gist.example.com"), "POST", "/", &mut h)
        .unwrap_err();
    assert_eq!(e.verdict, ProxyVerdict::SecretElsewhere);
    assert!(e.reason.contains("Basic"), "{}", e.reason);
    // Every length of padding decodes back.
    for n in 0..7 {
        let raw: Vec<u8> = (0..n).map(|b| b * 37).collect();
        let enc = crate::proxy::server::base64(&raw);
        assert_eq!(base64_decoded(enc.as_bytes()).unwrap(), raw);
    }
    assert!(base64_decoded(b"abc").is_none() && base64_decoded(b"a=bc").is_none());
}

#[test]
fn nothing_shown_holds_a_value() {
    let i = inspector(true);
    let j = i
        .judge(&host("api.anthropic.com"), "POST", "/", &mut [])
        .unwrap();
    let m = i.masker(&host("api.anthropic.com")).unwrap();
    for shown in [format!("{i:?}"), format!("{j:?}"), format!("{m:?}")] {
        assert!(!i.holds_a_value(shown.as_bytes()), "{shown}");
    }
}
