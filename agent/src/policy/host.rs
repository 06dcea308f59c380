//! Host patterns as the proxy matches them: exact names and `*.suffix`
//! patterns, compared case-insensitively, without a trailing dot, in their
//! punycode (ASCII) form. Suffix matching respects the label boundary:
//! `*.example.com` matches `api.example.com`, never `evil-example.com`, and
//! not `example.com` itself.

use std::fmt;

/// A TCP port, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Port(u16);

impl Port {
    pub const HTTPS: Port = Port(443);
    pub const HTTP: Port = Port(80);

    /// `None` for 0.
    #[must_use]
    pub fn new(n: u16) -> Option<Self> {
        (n != 0).then_some(Self(n))
    }

    #[must_use]
    pub fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a host pattern or name was refused at parse time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host name")]
    Empty,
    #[error("`*` may only stand alone as the first label, as in `*.example.com`")]
    MisplacedWildcard,
    #[error("invalid host name: {0}")]
    Invalid(String),
    #[error("invalid port `{0}` (1-65535)")]
    Port(String),
    #[error(
        "`{0}` would allow every name under a top-level domain: a wildcard must leave at least two labels, as in `*.example.com` (lockrun has no public-suffix list, so `*.co.uk` is not refused)"
    )]
    TooWide(String),
}

/// A normalized DNS name: lowercase ASCII (punycode), no trailing dot, every
/// label 1-63 of `[a-z0-9-_]`, not starting or ending with `-`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct HostName(String);

impl HostName {
    /// Parse and normalize a name. IP literals are not names: callers check
    /// for them first.
    pub fn parse(raw: &str) -> Result<Self, HostError> {
        let trimmed = raw.strip_suffix('.').unwrap_or(raw);
        if trimmed.is_empty() {
            return Err(HostError::Empty);
        }
        let ascii = idna::domain_to_ascii_strict(trimmed)
            .or_else(|_| idna::domain_to_ascii(trimmed))
            .map_err(|_| HostError::Invalid(raw.to_owned()))?;
        let ascii = ascii.to_ascii_lowercase();
        if ascii.is_empty() || ascii.len() > 253 {
            return Err(HostError::Invalid(raw.to_owned()));
        }
        for label in ascii.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                });
            if !ok {
                return Err(HostError::Invalid(raw.to_owned()));
            }
        }
        Ok(Self(ascii))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name pattern: one exact name, or every name strictly below a suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(into = "String")]
pub enum HostPattern {
    Exact(HostName),
    /// `*.suffix`: names with at least one more label in front of `suffix`.
    Subdomains(HostName),
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

impl HostPattern {
    pub fn parse(raw: &str) -> Result<Self, HostError> {
        if let Some(rest) = raw.strip_prefix("*.") {
            if rest.contains('*') {
                return Err(HostError::MisplacedWildcard);
            }
            return Ok(Self::Subdomains(HostName::parse(rest)?));
        }
        if raw.contains('*') {
            return Err(HostError::MisplacedWildcard);
        }
        Ok(Self::Exact(HostName::parse(raw)?))
    }

    /// Whether `name` (already normalized) is covered by this pattern.
    #[must_use]
    pub fn matches(&self, name: &HostName) -> bool {
        match self {
            Self::Exact(n) => n == name,
            Self::Subdomains(suffix) => name
                .as_str()
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(n) => write!(f, "{n}"),
            Self::Subdomains(s) => write!(f, "*.{s}"),
        }
    }
}

/// An allow rule: a pattern and the ports it opens. A wildcard in it must
/// leave at least two labels (`*.example.com`): `*.com` would open a whole
/// top-level domain. Deny patterns and private grants' hosts have no such
/// floor (they only narrow what allow rules open).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostRule {
    pub pattern: HostPattern,
    pub ports: Vec<Port>,
}

impl HostRule {
    /// Parse `host`, `host:port` or `*.suffix:port`. Without a port the rule
    /// opens 443 only.
    pub fn parse(raw: &str) -> Result<Self, HostError> {
        let (host, ports) = match raw.rsplit_once(':') {
            Some((h, p)) => {
                let n: u16 = p.parse().map_err(|_| HostError::Port(p.to_owned()))?;
                (
                    h,
                    vec![Port::new(n).ok_or_else(|| HostError::Port(p.to_owned()))?],
                )
            }
            None => (raw, vec![Port::HTTPS]),
        };
        let pattern = HostPattern::parse(host)?;
        if matches!(&pattern, HostPattern::Subdomains(s) if !s.as_str().contains('.')) {
            return Err(HostError::TooWide(host.to_owned()));
        }
        Ok(Self { pattern, ports })
    }

    #[must_use]
    pub fn allows(&self, name: &HostName, port: Port) -> bool {
        self.ports.contains(&port) && self.pattern.matches(name)
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports: Vec<String> = self.ports.iter().map(ToString::to_string).collect();
        write!(f, "{}:{}", self.pattern, ports.join(","))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn name(s: &str) -> HostName {
        HostName::parse(s).unwrap()
    }

    #[test]
    fn suffix_respects_label_boundary() {
        let p = HostPattern::parse("*.example.com").unwrap();
        assert!(p.matches(&name("api.example.com")));
        assert!(p.matches(&name("a.b.example.com")));
        assert!(!p.matches(&name("example.com")));
        assert!(!p.matches(&name("evil-example.com")));
        assert!(!p.matches(&name("example.com.evil.net")));
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(name("API.Example.COM."), name("api.example.com"));
        assert_eq!(name("bücher.example").as_str(), "xn--bcher-kva.example");
        assert_eq!(name("xn--bcher-kva.example"), name("bücher.example"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "*evil", "a.*.com", "*", "", "-a.com", "a..com", "a b.com", "*.*.com",
        ] {
            assert!(
                HostPattern::parse(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn an_allowed_wildcard_leaves_two_labels_a_denied_one_need_not() {
        for wide in ["*.com", "*.co:8080", "*.localhost", "*.рф"] {
            let e = HostRule::parse(wide).unwrap_err();
            assert!(matches!(e, HostError::TooWide(_)), "{wide}: {e}");
        }
        assert_eq!(
            HostRule::parse("*.com").unwrap_err().to_string(),
            "`*.com` would allow every name under a top-level domain: a wildcard must leave at \
             least two labels, as in `*.example.com` (lockrun has no public-suffix list, so \
             `*.co.uk` is not refused)"
        );
        for fine in [
            "*.example.com",
            "*.co.uk",
            "*.0.2:80",
            "com",
            "localhost:8080",
        ] {
            assert!(HostRule::parse(fine).is_ok(), "{fine}");
        }
        assert!(HostPattern::parse("*.com").is_ok());
    }

    #[test]
    fn rules_default_to_443_and_refuse_port_zero() {
        let r = HostRule::parse("api.example.com").unwrap();
        assert!(r.allows(&name("api.example.com"), Port::HTTPS));
        assert!(!r.allows(&name("api.example.com"), Port::HTTP));
        assert!(HostRule::parse("a.com:0").is_err());
        assert!(HostRule::parse("a.com:70000").is_err());
        assert_eq!(
            HostRule::parse("a.com:8080").unwrap().ports,
            vec![Port::new(8080).unwrap()]
        );
    }
}
