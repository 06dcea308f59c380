//! The inspector on plain-HTTP forwarded requests, with the real proxy, curl
//! and a test host that echoes what it got: a secret's placeholder becomes
//! its value for the hosts it is bound to (headers, query, body where the
//! secret says so, Content-Length and chunked bodies alike), is refused to
//! any other allowed host (403, `secret_elsewhere`, the host never reached),
//! and a host's request rules refuse what they do not allow (403,
//! `rule_refused`, the reason naming method, path and host). An answer
//! that echoes the value reaches the client with the placeholder in its
//! place. The audit log never holds the value.

use std::collections::BTreeMap;

use lockrun::audit::ProxyVerdict;
use lockrun::policy::{HostPattern, RequestRule};
use lockrun::proxy::inspector::{Inspector, SecretValue};

use crate::support::proxy::{can_netns, Scratch, TestHost};
use crate::{client, policy, run, Proxy, RANGE};

const VALUE: &str = "sk-ant-api03-REALsecretVALUE0123456789abcdef";

/// Echoes `x-api-key`, the path and the body, for any method, in its
/// answer and on stderr (`GOT …`: what it really got).
const ECHO: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def echo(self):
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            body = b''
            while True:
                n = int(self.rfile.readline().split(b';')[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get('Content-Length', '0')))
        msg = b'key=%s path=%s body=%s\n' % (self.headers.get('x-api-key', '-').encode(), self.path.encode(), body)
        sys.stderr.write('GOT ' + msg.decode())
        sys.stderr.flush()
        self.send_response(200)
        self.send_header('Content-Length', str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)
    do_GET = echo
    do_POST = echo
    do_DELETE = echo
    def log_message(self, fmt, *args):
        sys.stderr.write('"' + self.requestline + '"\n')
        sys.stderr.flush()
http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()
"#;

fn curl(proxy: &Proxy, args: &[&str]) -> std::process::Command {
    let mut c = client("curl");
    c.args([
        "-sS",
        "-x",
        &proxy.proxy.url(),
        "-w",
        "\nstatus=%{http_code}\n",
    ])
    .args(args);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_become_values_for_their_host_only_and_rules_refuse() {
    let test = "placeholders_become_values_for_their_host_only_and_rules_refuse";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    let log = std::fs::File::create(th.access_log()).unwrap();
    th.serve_python(ECHO, 8080, log);
    // Three names for the one test host: the secret's, another allowed
    // one, and one with request rules.
    let ip = [th.ns_ip];
    let hosts = ["key.test", "other.test", "ruled.test"];
    let allow: Vec<String> = hosts.iter().map(|h| format!("{h}:8080")).collect();
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let resolve: Vec<(&str, &[std::net::IpAddr])> = hosts.iter().map(|h| (*h, &ip[..])).collect();
    let network = policy(&allow, &resolve, Some((&hosts, th.net)));
    let mut rules = BTreeMap::new();
    rules.insert(
        HostPattern::parse("ruled.test").unwrap(),
        vec![RequestRule::parse("GET /ok/**").unwrap()],
    );
    let inspector = Inspector::new(
        vec![SecretValue {
            env: "ANTHROPIC_API_KEY".into(),
            hosts: vec![HostPattern::parse("key.test").unwrap()],
            value: VALUE.as_bytes().to_vec(),
            body: true,
        }],
        rules,
    )
    .unwrap();
    let ph = inspector.placeholders().next().unwrap().1.to_owned();
    assert_eq!(ph.len(), VALUE.len());
    assert_ne!(ph, VALUE);
    assert!(ph.starts_with("sk-ant-api03-"));
    let p = Proxy::start(network, |c| c.inspector = std::sync::Arc::new(inspector));
    let header = format!("x-api-key: {ph}");

    // The bound host: the value in the header, the query and both kinds of body.
    let data = Scratch::new("secrets-body");
    let file = data.0.join("body");
    std::fs::write(&file, format!("{{\"k\":\"{ph}\"}}")).unwrap();
    let body_arg = format!("@{}", file.display());
    let query = format!("http://key.test:8080/v1?k={ph}");
    for chunked in [false, true] {
        let mut args = vec!["-H", &header, "--data-binary", &body_arg, &query];
        if chunked {
            args.splice(0..0, ["-H", "Transfer-Encoding: chunked"]);
        }
        let out = run(curl(&p, &args)).await;
        let said = String::from_utf8_lossy(&out.stdout);
        // The host got the value; its answer, echoing it, reaches the
        // client with the placeholder in its place.
        let got = std::fs::read_to_string(th.access_log()).unwrap();
        let want = format!("GOT key={VALUE} path=/v1?k={VALUE} body={{\"k\":\"{VALUE}\"}}\n");
        assert_eq!(
            got.matches(&want).count(),
            usize::from(chunked) + 1,
            "{got}"
        );
        assert_eq!(
            said,
            format!("key={ph} path=/v1?k={ph} body={{\"k\":\"{ph}\"}}\n\nstatus=200\n"),
            "chunked {chunked}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Another allowed host: refused, never reached.
    let before = th.requests().len();
    for args in [
        vec!["-H", &header, "http://other.test:8080/collect"],
        vec!["--data-binary", &body_arg, "http://other.test:8080/collect"],
    ] {
        let out = run(curl(&p, &args)).await;
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.ends_with("status=403\n"), "{said}");
        assert!(said.contains("ANTHROPIC_API_KEY"), "{said}");
    }
    assert_eq!(th.requests().len(), before, "{:?}", th.requests());
    let ev = p.events();
    let elsewhere: Vec<_> = ev
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::SecretElsewhere)
        .collect();
    assert_eq!(elsewhere.len(), 2, "{ev:?}");
    assert!(elsewhere
        .iter()
        .all(|e| !e.allowed && e.status == 403 && e.host == "other.test"));

    // Request rules: what they allow goes, the rest is refused, named.
    let ok = run(curl(&p, &["http://ruled.test:8080/ok/a/b"])).await;
    assert!(String::from_utf8_lossy(&ok.stdout).ends_with("status=200\n"));
    let no = run(curl(
        &p,
        &["-X", "DELETE", "http://ruled.test:8080/repos/x"],
    ))
    .await;
    assert!(String::from_utf8_lossy(&no.stdout).ends_with("status=403\n"));
    let dots = run(curl(
        &p,
        &["--path-as-is", "http://ruled.test:8080/ok/../admin"],
    ))
    .await;
    assert!(String::from_utf8_lossy(&dots.stdout).ends_with("status=403\n"));
    let ev = p.events();
    let by_rules: Vec<_> = ev
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::RuleRefused)
        .collect();
    assert_eq!(by_rules.len(), 2, "{ev:?}");
    assert!(
        by_rules[0].reason.contains("DELETE /repos/x")
            && by_rules[0].reason.contains("no rule of ruled.test"),
        "{}",
        by_rules[0].reason
    );
    assert!(
        by_rules[1].reason.contains("`..`"),
        "{}",
        by_rules[1].reason
    );
    assert!(ev
        .iter()
        .any(|e| e.allowed && e.reason.contains("`GET /ok/**` of ruled.test")));

    // The value is nowhere in the audit log (the placeholder may be: it is
    // what the run sent).
    let audit = std::fs::read_to_string(&p.audit_path).unwrap();
    assert!(!audit.is_empty());
    assert!(!audit.contains(VALUE), "the audit log holds the value");
}
