//! What the proxy judges inside a host's requests: the run's secrets (a
//! placeholder in the run, the real value put in by the proxy for the
//! hosts the secret is bound to, refused to any other) and the policy's
//! request rules (method and path). A host with either is one whose TLS the
//! proxy terminates ([`Inspector::inspects`]); plain-HTTP requests are
//! judged the same way.

use crate::audit::ProxyVerdict;
use crate::proxy::request::Host;

/// The secrets and request rules of one run, by host. Empty: every host
/// is a tunnel, as without it.
#[derive(Debug, Default)]
pub struct Inspector {
    /// TEST HOOK (helper "tls"): see [`TestHook`].
    test: Option<TestHook>,
}

// ---- TEST HOOK (helper "tls"), until the real Inspector lands: merge away.
// `weaken-for-tests` builds only: `LOCKRUN_TEST_INSPECT=host,host` makes
// those hosts inspected; `LOCKRUN_TEST_SECRET=placeholder=value` replaces
// the placeholder by the value in their headers and refuses it to any other
// host (SecretElsewhere); a path beginning `/refused` to an inspected host
// is refused as by a request rule (RuleRefused).
#[derive(Debug)]
#[cfg_attr(not(feature = "weaken-for-tests"), allow(dead_code))]
struct TestHook {
    hosts: Vec<String>,
    placeholder: String,
    value: String,
}

impl Inspector {
    /// The test hook from the environment (`weaken-for-tests` builds only).
    #[cfg(feature = "weaken-for-tests")]
    #[must_use]
    pub fn from_test_env() -> Option<Self> {
        let hosts = std::env::var("LOCKRUN_TEST_INSPECT").ok()?;
        let secret = std::env::var("LOCKRUN_TEST_SECRET").unwrap_or_default();
        let (placeholder, value) = secret.split_once('=').unwrap_or(("", ""));
        Some(Self {
            test: Some(TestHook {
                hosts: hosts.split(',').map(str::to_owned).collect(),
                placeholder: placeholder.to_owned(),
                value: value.to_owned(),
            }),
        })
    }

    fn test_judge(
        t: &TestHook,
        host: &Host,
        method: &str,
        path: &str,
        headers: &mut [(String, Vec<u8>)],
    ) -> Result<Judged, Refused> {
        let host = host.to_string();
        let bound = t.hosts.contains(&host);
        if bound && path.starts_with("/refused") {
            return Err(Refused {
                status: 403,
                reason: format!("no request rule of {host} allows {method} {path} (test hook)"),
                verdict: ProxyVerdict::RuleRefused,
            });
        }
        for (_, v) in headers.iter_mut() {
            let text = String::from_utf8_lossy(v).into_owned();
            if t.placeholder.is_empty() || !text.contains(&t.placeholder) {
                continue;
            }
            if !bound {
                return Err(Refused {
                    status: 403,
                    reason: format!(
                        "the test secret's placeholder to {host}, a host it is not bound to"
                    ),
                    verdict: ProxyVerdict::SecretElsewhere,
                });
            }
            *v = text.replace(&t.placeholder, &t.value).into_bytes();
        }
        Ok(Judged {
            rule: bound.then(|| "test hook".to_owned()),
            body: None,
        })
    }
}
// ---- end of TEST HOOK

/// One request inside, allowed: what allowed it, and the rewriting of its
/// body when a secret is put in there.
#[derive(Debug, Default)]
pub struct Judged {
    /// The request rule that allowed it (`None`: the host has no rules).
    pub rule: Option<String>,
    /// Rewrites the body (placeholders bound to this host put in, any
    /// other refused); `None`: the body goes as it came.
    pub body: Option<BodyRewriter>,
}

/// A request refused inside: answered with `status` (403), recorded with
/// `verdict` and `reason`. The reason never holds a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
    pub verdict: ProxyVerdict,
}

/// Rewrites a request body as it streams through; placeholders are the
/// length of their values, so the body's length never changes.
#[derive(Debug, Default)]
pub struct BodyRewriter {}

impl BodyRewriter {
    /// Take `chunk`; append to `out` what may go upstream now (a tail that
    /// may begin a placeholder is held back for the next chunk).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), Refused> {
        out.extend_from_slice(chunk);
        Ok(())
    }

    /// The body has ended: append what was held back.
    pub fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), Refused> {
        Ok(())
    }
}

impl Inspector {
    /// Whether nothing is judged inside any host.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.test.is_none()
    }

    /// Whether the proxy must see inside `host`'s TLS: a secret is bound
    /// to it, or it has request rules.
    #[must_use]
    pub fn inspects(&self, host: &Host) -> bool {
        self.test
            .as_ref()
            .is_some_and(|t| t.hosts.contains(&host.to_string()))
    }

    /// Judge one request to `host` (inside its TLS, or plain HTTP): its
    /// rules first, then the placeholders in `path` and `headers`: those
    /// bound to `host` replaced by their values in the headers, any other
    /// refused.
    pub fn judge(
        &self,
        host: &Host,
        method: &str,
        path: &str,
        headers: &mut [(String, Vec<u8>)],
    ) -> Result<Judged, Refused> {
        if let Some(t) = &self.test {
            return Self::test_judge(t, host, method, path, headers);
        }
        Ok(Judged::default())
    }
}
