//! What the proxy judges inside a host's requests: the run's secrets (a
//! placeholder in the run, the real value put in by the proxy for the
//! hosts the secret is bound to, refused to any other) and the policy's
//! request rules (method and path). A host with either is one whose TLS the
//! proxy terminates ([`Inspector::inspects`]); plain-HTTP requests are
//! judged the same way.
//!
//! A secret's value lives here only, in lockrun's memory: never in the
//! run's environment, a file, the audit log or anything lockrun says. Its
//! placeholder has the value's length and shape ([`placeholder`]), so a
//! header or a body keeps its length when one is put in for the other.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::audit::ProxyVerdict;
use crate::policy::requests::normalized;
use crate::policy::{HostPattern, Policy, RequestRule};
use crate::proxy::request::Host;

pub mod placeholder;

/// The bytes a value (and so its placeholder) may hold ([`placeholder`]).
const TOKEN: std::ops::RangeInclusive<u8> = 0x21..=0x7e;

/// The largest secret value read from a file.
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// One secret of the run: its variable, the hosts it goes to, its value
/// and the placeholder the run holds instead.
pub struct Secret {
    env: String,
    hosts: Vec<HostPattern>,
    value: Vec<u8>,
    placeholder: Vec<u8>,
    body: bool,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("env", &self.env)
            .field("hosts", &self.hosts)
            .field("value", &"<not shown>")
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.value.fill(0);
        std::hint::black_box(&self.value);
    }
}

impl Secret {
    /// Whether the value goes to `host`.
    fn bound_to(&self, host: &Host) -> bool {
        match host {
            Host::Name(n) => self.hosts.iter().any(|p| p.matches(n)),
            Host::Ip(_) => false,
        }
    }
}

/// A secret's value, as [`Inspector::new`] takes it.
pub struct SecretValue {
    pub env: String,
    pub hosts: Vec<HostPattern>,
    pub value: Vec<u8>,
    pub body: bool,
}

/// Why the run's secrets could not be taken. Never holds a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret {env}: the variable is not set (or empty) in lockrun's environment; set it, or mark the secret `optional = true` in the policy")]
    Unset { env: String },
    #[error("secret {env}: cannot read {path}: {source}")]
    File {
        env: String,
        path: PathBuf,
        source: crate::regular_file::ReadError,
    },
    #[error("secret {env}: {why}")]
    Unfit {
        env: String,
        why: placeholder::Unfit,
    },
}

/// The secrets and request rules of one run, by host. Empty: every host
/// is a tunnel, as without it.
#[derive(Debug, Default)]
pub struct Inspector {
    secrets: Vec<Secret>,
    rules: BTreeMap<HostPattern, Vec<RequestRule>>,
}

/// One request inside, allowed: what allowed it, and the rewriting of its
/// body when a secret is put in there.
#[derive(Debug, Default)]
pub struct Judged {
    /// The request rule that allowed it (`None`: the host has no rules).
    pub rule: Option<String>,
    /// Rewrites the body (placeholders bound to this host put in, any
    /// other refused); `None`: the body goes as it came.
    pub body: Option<BodyRewriter>,
    /// The request target (path and query) with the placeholders bound to
    /// this host replaced by their values; `None`: it goes as it came.
    pub path: Option<String>,
}

/// A request refused inside: answered with `status` (403), recorded with
/// `verdict` and `reason`. The reason never holds a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
    pub verdict: ProxyVerdict,
}

impl Refused {
    fn rule(reason: String) -> Self {
        Self {
            status: 403,
            reason,
            verdict: ProxyVerdict::RuleRefused,
        }
    }

    fn elsewhere(env: &str, host: &Host, where_: &str) -> Self {
        Self {
            status: 403,
            reason: format!(
                "the placeholder of secret {env} in the request's {where_} to {host}, which {env} is not bound to"
            ),
            verdict: ProxyVerdict::SecretElsewhere,
        }
    }
}

/// One placeholder a [`BodyRewriter`] looks for: replaced by `value`
/// (bound to the host, `body = true`), or refused (`None`: not bound). A
/// masker ([`Inspector::masker`]) seeks values, and puts placeholders in.
struct Sought {
    env: String,
    placeholder: Vec<u8>,
    value: Option<Vec<u8>>,
}

impl fmt::Debug for Sought {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sought")
            .field("env", &self.env)
            .field("put_in", &self.value.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Sought {
    fn drop(&mut self) {
        if let Some(v) = &mut self.value {
            v.fill(0);
            std::hint::black_box(v);
        }
    }
}

/// Rewrites a request body as it streams through; placeholders are the
/// length of their values, so the body's length never changes.
#[derive(Default)]
pub struct BodyRewriter {
    sought: Vec<Sought>,
    host: String,
    /// Bytes received, not yet sent: a tail that may begin a placeholder.
    held: Vec<u8>,
    /// How many bytes at the front of `held` are no placeholder's start
    /// (they were judged, or are a value put in).
    judged: usize,
}

impl fmt::Debug for BodyRewriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the bytes held: a value put in may be among them.
        f.debug_struct("BodyRewriter")
            .field("sought", &self.sought)
            .field("host", &self.host)
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl BodyRewriter {
    /// The longest placeholder sought.
    fn longest(&self) -> usize {
        self.sought
            .iter()
            .map(|s| s.placeholder.len())
            .max()
            .unwrap_or(0)
    }

    /// Judge every placeholder that starts in `held[self.judged..upto]`
    /// and lies whole in `held`, putting values in, refusing foreign ones.
    fn judge(&mut self, upto: usize) -> Result<(), Refused> {
        let mut i = self.judged;
        'at: while i < upto {
            for s in &self.sought {
                let n = s.placeholder.len();
                if self.held.len() - i >= n && self.held[i..i + n] == s.placeholder[..] {
                    let Some(v) = &s.value else {
                        return Err(Refused {
                            status: 403,
                            reason: format!(
                                "the placeholder of secret {} in the request's body to {}, which {} is not bound to",
                                s.env, self.host, s.env
                            ),
                            verdict: ProxyVerdict::SecretElsewhere,
                        });
                    };
                    self.held[i..i + n].copy_from_slice(v);
                    i += n;
                    continue 'at;
                }
            }
            i += 1;
        }
        self.judged = i;
        Ok(())
    }

    /// Take `chunk`; append to `out` what may go upstream now (a tail that
    /// may begin a placeholder is held back for the next chunk).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), Refused> {
        self.held.extend_from_slice(chunk);
        // A placeholder (and a value) is printable ASCII without spaces:
        // one that may go on in the next chunk lies in the tail after the
        // last byte of any other kind, so a line's or an event's end
        // (SSE's `\n\n`) is never held back.
        let token_tail = self
            .held
            .iter()
            .rposition(|b| !TOKEN.contains(b))
            .map_or(self.held.len(), |i| self.held.len() - i - 1);
        let keep = self.longest().saturating_sub(1).min(token_tail);
        // A placeholder starting before `ready` lies whole in `held`.
        let ready = self.held.len().saturating_sub(keep);
        self.judge(ready)?;
        // Everything judged is final: no placeholder starts there, or it
        // is a value put in (which may reach past `ready`).
        let send = self.judged;
        out.extend_from_slice(&self.held[..send]);
        self.held.drain(..send);
        self.judged -= send;
        Ok(())
    }

    /// The body has ended: append what was held back.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Refused> {
        let end = self.held.len();
        self.judge(end)?;
        out.append(&mut self.held);
        self.judged = 0;
        Ok(())
    }
}

impl Inspector {
    /// The inspector of `secrets` and `rules`, a placeholder made for each
    /// secret (distinct from every other value and placeholder).
    pub fn new(
        secrets: Vec<SecretValue>,
        rules: BTreeMap<HostPattern, Vec<RequestRule>>,
    ) -> Result<Self, SecretError> {
        let mut made: Vec<Secret> = Vec::new();
        let values: Vec<&[u8]> = secrets.iter().map(|s| s.value.as_slice()).collect();
        for s in &secrets {
            let taken: Vec<&[u8]> = values
                .iter()
                .copied()
                .chain(made.iter().map(|m| m.placeholder.as_slice()))
                .collect();
            let placeholder =
                placeholder::make(&s.value, &taken).map_err(|why| SecretError::Unfit {
                    env: s.env.clone(),
                    why,
                })?;
            made.push(Secret {
                env: s.env.clone(),
                hosts: s.hosts.clone(),
                value: s.value.clone(),
                placeholder,
                body: s.body,
            });
        }
        drop(secrets);
        Ok(Self {
            secrets: made,
            rules,
        })
    }

    /// The inspector of `policy`: each secret's value read from `env` (the
    /// variable) or its file. A variable unset or empty refuses the run,
    /// but for an optional secret, which is left out: `skipped` says which.
    pub fn from_policy(
        policy: &Policy,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<(Self, Vec<String>), SecretError> {
        let mut values = Vec::new();
        let mut skipped = Vec::new();
        for (name, spec) in &policy.secrets {
            let value = match &spec.file {
                Some(path) => Some(read_file(name, path)?),
                None => env(name).map(std::os::unix::ffi::OsStringExt::into_vec),
            }
            .filter(|v| !v.is_empty());
            match value {
                Some(value) => values.push(SecretValue {
                    env: name.clone(),
                    hosts: spec.hosts.clone(),
                    value,
                    body: spec.body,
                }),
                None if spec.optional => skipped.push(name.clone()),
                None => return Err(SecretError::Unset { env: name.clone() }),
            }
        }
        Ok((Self::new(values, policy.network.requests.clone())?, skipped))
    }

    /// Each secret's variable and the placeholder the run gets in it.
    pub fn placeholders(&self) -> impl Iterator<Item = (&str, &str)> {
        self.secrets.iter().map(|s| {
            (
                s.env.as_str(),
                // Printable ASCII, as made ([`placeholder::make`]).
                std::str::from_utf8(&s.placeholder).unwrap_or_default(),
            )
        })
    }

    /// Whether `bytes` hold any secret's value (for checks of what lockrun
    /// writes or says; never says which).
    #[must_use]
    pub fn holds_a_value(&self, bytes: &[u8]) -> bool {
        self.secrets.iter().any(|s| {
            bytes
                .windows(s.value.len())
                .any(|w| w == s.value.as_slice())
        })
    }

    /// What masks the values of the secrets bound to `host` in its
    /// answers (headers and body): each replaced by its placeholder, so
    /// that an upstream that echoes a key (an error message quoting it)
    /// never hands the run the value. `None`: no secret is bound to it.
    #[must_use]
    pub fn masker(&self, host: &Host) -> Option<BodyRewriter> {
        let sought: Vec<Sought> = self
            .secrets
            .iter()
            .filter(|s| s.bound_to(host))
            .map(|s| Sought {
                env: s.env.clone(),
                placeholder: s.value.clone(),
                value: Some(s.placeholder.clone()),
            })
            .collect();
        (!sought.is_empty()).then(|| BodyRewriter {
            sought,
            host: host.to_string(),
            held: Vec::new(),
            judged: 0,
        })
    }

    /// `headers` of an answer from `host`, each value of a secret bound to
    /// it replaced by its placeholder ([`Inspector::masker`]).
    pub fn mask_headers(&self, host: &Host, headers: &mut [(String, Vec<u8>)]) {
        for s in self.secrets.iter().filter(|s| s.bound_to(host)) {
            for (_, v) in headers.iter_mut() {
                if contains(v, &s.value) {
                    *v = replaced(v, &s.value, &s.placeholder);
                }
            }
        }
    }

    /// Whether nothing is judged inside any host.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.rules.is_empty()
    }

    /// Whether the proxy must see inside `host`'s TLS: a secret is bound
    /// to it, or it has request rules.
    #[must_use]
    pub fn inspects(&self, host: &Host) -> bool {
        self.secrets.iter().any(|s| s.bound_to(host)) || self.rules_of(host).is_some()
    }

    /// The names under which every host it inspects lies: each pattern's
    /// name (`*.suffix`: the suffix), sorted, once each. What the run's CA
    /// may vouch for.
    #[must_use]
    pub fn inspected_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .secrets
            .iter()
            .flat_map(|s| s.hosts.iter())
            .chain(self.rules.keys())
            .map(|p| match p {
                HostPattern::Exact(n) | HostPattern::Subdomains(n) => n.as_str().to_owned(),
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The rules of `host`, and the pattern they are written for (the
    /// exact name's first, else the narrowest wildcard's).
    fn rules_of(&self, host: &Host) -> Option<(&HostPattern, &[RequestRule])> {
        let Host::Name(n) = host else { return None };
        self.rules
            .iter()
            .filter(|(p, _)| p.matches(n))
            .max_by_key(|(p, _)| match p {
                HostPattern::Exact(_) => usize::MAX,
                HostPattern::Subdomains(s) => s.as_str().len(),
            })
            .map(|(p, r)| (p, r.as_slice()))
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
        let rule = match self.rules_of(host) {
            None => None,
            Some((pattern, rules)) => {
                let p = normalized(path).map_err(|why| {
                    Refused::rule(format!(
                        "{method} {}: the path {why}, which the rules of {pattern} cannot judge",
                        shown_path(path)
                    ))
                })?;
                match rules.iter().find(|r| r.allows(method, p)) {
                    Some(r) => Some(format!("`{r}` of {pattern}")),
                    None => {
                        return Err(Refused::rule(format!(
                            "{method} {}: no rule of {pattern} allows it",
                            shown_path(p)
                        )))
                    }
                }
            }
        };
        self.judge_basic(host, headers)?;
        let mut new_path: Option<Vec<u8>> = None;
        for s in &self.secrets {
            let bound = s.bound_to(host);
            let target = new_path.as_deref().unwrap_or(path.as_bytes());
            if contains(target, &s.placeholder) {
                if !bound {
                    return Err(Refused::elsewhere(&s.env, host, "path or query"));
                }
                new_path = Some(replaced(target, &s.placeholder, &s.value));
            }
            for (name, v) in headers.iter_mut() {
                if contains(v, &s.placeholder) {
                    if !bound {
                        return Err(Refused::elsewhere(
                            &s.env,
                            host,
                            &format!("header {}", name.to_ascii_lowercase()),
                        ));
                    }
                    *v = replaced(v, &s.placeholder, &s.value);
                }
            }
        }
        // In the body: a placeholder bound to this host is replaced where
        // its secret says `body = true`, else left as it is (the run may
        // tell its own API what its variable holds); any other is refused.
        let sought: Vec<Sought> = self
            .secrets
            .iter()
            .filter_map(|s| match (s.bound_to(host), s.body) {
                (true, false) => None,
                (bound, _) => Some(Sought {
                    env: s.env.clone(),
                    placeholder: s.placeholder.clone(),
                    value: bound.then(|| s.value.clone()),
                }),
            })
            .collect();
        let body = (!sought.is_empty()).then(|| BodyRewriter {
            sought,
            host: host.to_string(),
            held: Vec::new(),
            judged: 0,
        });
        Ok(Judged {
            rule,
            body,
            path: new_path.map(|p| String::from_utf8_lossy(&p).into_owned()),
        })
    }
}

impl Inspector {
    /// Placeholders inside `Authorization: Basic` (base64 of `user:token`,
    /// as git sends a token): judged as in any header, the credentials
    /// encoded again (the same length: the value is the placeholder's).
    fn judge_basic(&self, host: &Host, headers: &mut [(String, Vec<u8>)]) -> Result<(), Refused> {
        for (name, v) in headers.iter_mut() {
            if !name.eq_ignore_ascii_case("authorization") {
                continue;
            }
            let Some(mut creds) = basic_credentials(v) else {
                continue;
            };
            let mut changed = false;
            for s in &self.secrets {
                if contains(&creds, &s.placeholder) {
                    if !s.bound_to(host) {
                        return Err(Refused::elsewhere(
                            &s.env,
                            host,
                            "header authorization (Basic)",
                        ));
                    }
                    creds = replaced(&creds, &s.placeholder, &s.value);
                    changed = true;
                }
            }
            if changed {
                *v = format!("Basic {}", crate::proxy::server::base64(&creds)).into_bytes();
            }
            creds.fill(0);
        }
        Ok(())
    }
}

/// The decoded credentials of a `Basic` authorization value.
fn basic_credentials(v: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(v).ok()?.trim();
    let (scheme, b64) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64_decoded(b64.trim().as_bytes())
}

/// Standard base64, padded; `None` for anything else.
fn base64_decoded(b: &[u8]) -> Option<Vec<u8>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, q) in b.chunks(4).enumerate() {
        let last = i + 1 == b.len() / 4;
        let pad = q.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// A request path as a refusal shows it: at most 200 bytes, its query
/// left out (it may hold anything the run put there).
fn shown_path(path: &str) -> String {
    let p = path.split_once('?').map_or(path, |(p, _)| p);
    let mut end = p.len().min(200);
    while !p.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < p.len() { "…" } else { "" };
    crate::shown::escaped(&p[..end]).into_owned() + cut
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// `hay` with every `from` replaced by `to` (of the same length).
fn replaced(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = hay.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if out[i..i + from.len()] == *from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

/// A secret's value from its file: the whole file, a final newline
/// dropped.
fn read_file(env: &str, path: &Path) -> Result<Vec<u8>, SecretError> {
    let mut v =
        crate::regular_file::read(path, MAX_SECRET_FILE).map_err(|source| SecretError::File {
            env: env.to_owned(),
            path: path.to_path_buf(),
            source,
        })?;
    while v.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        v.pop();
    }
    Ok(v)
}

#[cfg(test)]
mod tests;
