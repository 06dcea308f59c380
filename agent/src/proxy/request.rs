//! Strict parsing of what a client sends the proxy: the request head
//! (`CONNECT host:port` or an absolute-form `GET http://host/path`) and the
//! `host:port` authority inside it.
//!
//! Everything ambiguous is refused rather than guessed: userinfo, paths,
//! queries or fragments in a CONNECT target, brackets around anything but an
//! IPv6 literal, numeric names that a resolver would read as an IPv4 address
//! (`127.1`, `0x7f.0.0.1`, `2130706433`), missing or odd ports (`+443`,
//! `0443`), duplicate or conflicting `Host`, `Content-Length` and
//! `Transfer-Encoding` (request smuggling), and heads over [`MAX_HEAD`].
//! Parsing is pure (no I/O) so that it can be fuzzed (`fuzz/`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::policy::{HostName, Port};

/// The largest request head the proxy reads (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// The most header lines a head may carry.
pub const MAX_HEADERS: usize = 64;

/// Methods forwarded for plain-HTTP absolute-form requests. `CONNECT` opens a
/// tunnel; anything else (`TRACE`, `TRACK`, extension methods) is refused.
pub const FORWARDABLE: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"];

/// Forwardable methods a proxy may send again when a kept upstream
/// connection fails before any answer (RFC 9112 §9.3.1: idempotent; these
/// three are also safe, no side effect expected of them).
pub const RESENDABLE: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

/// The host part of a target: a name (checked against the allowlist before
/// any DNS) or an IP literal (allowed only when the policy lists it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(HostName),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => write!(f, "{n}"),
            Self::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Self::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
        }
    }
}

/// Where a request goes: host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: Port,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Target {
    /// The host as the audit log records it (no brackets).
    #[must_use]
    pub fn host_string(&self) -> String {
        match &self.host {
            Host::Name(n) => n.to_string(),
            Host::Ip(a) => a.to_string(),
        }
    }
}

/// Why a `host:port` authority was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("empty target")]
    Empty,
    #[error("control or whitespace characters in the target")]
    BadChar,
    #[error("the target carries userinfo (`user@host`)")]
    Userinfo,
    #[error("the target carries a path, query or fragment")]
    PathQueryFragment,
    #[error("a bracketed host must be an IPv6 literal without zone")]
    BadBracket,
    #[error("an IPv6 literal must be bracketed")]
    UnbracketedIpv6,
    #[error("the target has no port")]
    MissingPort,
    #[error("invalid port `{0}` (1-65535, digits only)")]
    BadPort(String),
    #[error("invalid host name `{0}`")]
    BadName(String),
    #[error("numeric host name `{0}` (an IP address in another spelling)")]
    NumericName(String),
    #[error("only http:// URLs are forwarded (got `{0}`); use CONNECT for https")]
    Scheme(String),
}

/// Parse an authority `host:port`, `[v6]:port`, or — when `default_port` is
/// given — `host` alone.
pub fn parse_authority(raw: &str, default_port: Option<Port>) -> Result<Target, TargetError> {
    if raw.is_empty() {
        return Err(TargetError::Empty);
    }
    if raw
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'\\')
    {
        return Err(TargetError::BadChar);
    }
    if raw.contains('@') {
        return Err(TargetError::Userinfo);
    }
    if raw.contains(['/', '?', '#']) {
        return Err(TargetError::PathQueryFragment);
    }
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(TargetError::BadBracket)?;
        let ip: Ipv6Addr = inside.parse().map_err(|_| TargetError::BadBracket)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(TargetError::BadBracket)?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        if raw.contains(['[', ']']) {
            return Err(TargetError::BadBracket);
        }
        let (h, p) = match raw.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (raw, None),
        };
        if h.contains(':') {
            return Err(TargetError::UnbracketedIpv6);
        }
        (parse_host(h)?, p)
    };
    let port = match port {
        Some(p) => parse_port(p)?,
        None => default_port.ok_or(TargetError::MissingPort)?,
    };
    Ok(Target { host, port })
}

fn parse_port(p: &str) -> Result<Port, TargetError> {
    let bad = || TargetError::BadPort(p.to_owned());
    if p.is_empty() {
        return Err(TargetError::MissingPort);
    }
    if p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) || p.starts_with('0') {
        return Err(bad());
    }
    p.parse::<u16>().ok().and_then(Port::new).ok_or_else(bad)
}

fn parse_host(h: &str) -> Result<Host, TargetError> {
    if h.is_empty() {
        return Err(TargetError::Empty);
    }
    if let Ok(v4) = h.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    // Judge the normalized form: IDNA maps fullwidth digits and dots
    // (`１２７．０．０．１`) to ASCII, which a resolver would read as an address.
    let name = HostName::parse(h).map_err(|_| TargetError::BadName(h.to_owned()))?;
    let last = name.as_str().rsplit('.').next().unwrap_or_default();
    let hexish = last
        .strip_prefix("0x")
        .is_some_and(|r| r.bytes().all(|b| b.is_ascii_hexdigit()));
    if last.bytes().all(|b| b.is_ascii_digit()) || hexish {
        return Err(TargetError::NumericName(h.to_owned()));
    }
    Ok(Host::Name(name))
}

/// What the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `CONNECT host:port`: open a tunnel.
    Connect(Target),
    /// An absolute-form request to forward: target and origin-form path.
    Forward { target: Target, path: String },
}

/// How a request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

/// A parsed, validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub kind: Kind,
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor: u8,
    /// Every header except `Host`, in order, names as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Body,
    /// The `Proxy-Authorization` value, if any.
    pub proxy_auth: Option<Vec<u8>>,
    /// Whether the client wants the connection kept open after this request.
    pub keep_alive: bool,
    /// Whether the client sent `Expect: 100-continue`.
    pub expect_continue: bool,
    /// Bytes the head took, up to and including the blank line.
    pub len: usize,
}

impl RequestHead {
    #[must_use]
    pub fn target(&self) -> &Target {
        match &self.kind {
            Kind::Connect(t) | Kind::Forward { target: t, .. } => t,
        }
    }

    /// Whether this request may be sent again on a fresh connection after
    /// a kept one failed before answering: a [`RESENDABLE`] method, no body.
    #[must_use]
    pub fn resendable(&self) -> bool {
        self.body == Body::None && RESENDABLE.contains(&self.method.as_str())
    }
}

/// Why a request head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("request head larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("malformed request head: {0}")]
    Malformed(String),
    #[error("method `{0}` is not allowed through the proxy")]
    Method(String),
    #[error("{0}")]
    Target(#[from] TargetError),
    #[error("only HTTP/1.0 and HTTP/1.1 are spoken")]
    Version,
    #[error("ambiguous request: {0}")]
    Smuggling(&'static str),
    #[error("origin-form request (`GET /path`): this is a proxy; send absolute-form `GET http://host/path`")]
    OriginForm,
    #[error("inside an inspected tunnel, only origin-form requests (`GET /path`) are spoken")]
    InsideTunnel,
}

impl HeadError {
    /// The HTTP status the proxy answers with.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Self::Method(_) => 405,
            Self::TooLarge => 431,
            Self::Version => 505,
            _ => 400,
        }
    }
}

/// Parse a request head from the start of `buf`. `Ok(None)` means more bytes
/// are needed (and `buf` is still under [`MAX_HEAD`]).
pub fn parse_head(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    parse(buf, None)
}

/// Parse an origin-form request head (`GET /path`) sent inside an
/// inspected `CONNECT` tunnel to `connect`: its `Host` is required and must
/// name that host (a `Host` without port names the tunnel's port). The
/// same strictness as [`parse_head`] otherwise.
pub fn parse_origin_head(buf: &[u8], connect: &Target) -> Result<Option<RequestHead>, HeadError> {
    parse(buf, Some(connect))
}

#[allow(clippy::too_many_lines)] // one linear pass over the headers reads best whole
fn parse(buf: &[u8], origin: Option<&Target>) -> Result<Option<RequestHead>, HeadError> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut raw);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Ok(None)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Malformed(e.to_string())),
    };
    if len > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let method = req.method.unwrap_or_default().to_owned();
    let path = req.path.unwrap_or_default();
    let Some(minor @ (0 | 1)) = req.version else {
        return Err(HeadError::Version);
    };

    let kind = if let Some(connect) = origin {
        if !FORWARDABLE.contains(&method.as_str()) {
            return Err(HeadError::Method(method));
        }
        if !path.starts_with('/') || path.contains('#') {
            return Err(HeadError::InsideTunnel);
        }
        Kind::Forward {
            target: connect.clone(),
            path: path.to_owned(),
        }
    } else if method == "CONNECT" {
        Kind::Connect(parse_authority(path, None)?)
    } else if FORWARDABLE.contains(&method.as_str()) {
        parse_absolute(path)?
    } else {
        return Err(HeadError::Method(method));
    };

    let mut headers = Vec::new();
    let mut host_hdr: Option<&[u8]> = None;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut te_seen = false;
    let mut proxy_auth = None;
    let mut conn_close = minor == 0;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let name = h.name;
        let value = h.value;
        if name.eq_ignore_ascii_case("host") {
            if host_hdr.is_some() {
                return Err(HeadError::Smuggling("more than one Host header"));
            }
            host_hdr = Some(value);
            continue;
        }
        if name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(value)
                .ok()
                .map(|s| s.trim_matches([' ', '\t']))
                .filter(|s| !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(HeadError::Smuggling("invalid Content-Length"))?;
            if content_length.is_some_and(|c| c != v) {
                return Err(HeadError::Smuggling("conflicting Content-Length headers"));
            }
            content_length = Some(v);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if te_seen {
                return Err(HeadError::Smuggling(
                    "more than one Transfer-Encoding header",
                ));
            }
            te_seen = true;
            let v = String::from_utf8_lossy(value);
            if !v.trim_matches([' ', '\t']).eq_ignore_ascii_case("chunked") {
                return Err(HeadError::Smuggling(
                    "Transfer-Encoding other than exactly `chunked`",
                ));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("proxy-authorization") {
            if proxy_auth.is_some() {
                return Err(HeadError::Smuggling(
                    "more than one Proxy-Authorization header",
                ));
            }
            proxy_auth = Some(value.to_vec());
        } else if name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("proxy-connection")
        {
            for tok in String::from_utf8_lossy(value).split(',') {
                let tok = tok.trim();
                if tok.eq_ignore_ascii_case("close") {
                    conn_close = true;
                } else if tok.eq_ignore_ascii_case("keep-alive") && minor == 0 {
                    conn_close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if String::from_utf8_lossy(value)
                .trim()
                .eq_ignore_ascii_case("100-continue")
            {
                expect_continue = true;
            } else {
                return Err(HeadError::Smuggling("unsupported Expect"));
            }
        }
        headers.push((name.to_owned(), value.to_vec()));
    }
    if chunked && content_length.is_some() {
        return Err(HeadError::Smuggling(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    if chunked && minor == 0 {
        return Err(HeadError::Smuggling("Transfer-Encoding in HTTP/1.0"));
    }
    let body = match (chunked, content_length) {
        (true, _) => Body::Chunked,
        (false, Some(0) | None) => Body::None,
        (false, Some(n)) => Body::Length(n),
    };
    let default_port = match (&kind, origin) {
        (_, Some(connect)) => Some(connect.port),
        (Kind::Connect(_), None) => None,
        (Kind::Forward { .. }, None) => Some(Port::HTTP),
    };
    if let Some(h) = host_hdr {
        let h = std::str::from_utf8(h).map_err(|_| HeadError::Smuggling("Host is not text"))?;
        let target = match &kind {
            Kind::Connect(t) | Kind::Forward { target: t, .. } => t,
        };
        // A CONNECT's Host without a port names the target's host on its
        // port: some clients send the host alone (gemini-cli's
        // `CONNECT host:443` comes with `Host: host`).
        let ht = parse_authority(
            h.trim_matches([' ', '\t']),
            default_port.or(Some(target.port)),
        )
        .map_err(|_| HeadError::Smuggling("invalid Host header"))?;
        let same = ht == *target;
        if !same {
            return Err(HeadError::Smuggling(
                "Host header disagrees with the request target",
            ));
        }
    } else if origin.is_some() {
        return Err(HeadError::Smuggling(
            "a request inside the tunnel without Host",
        ));
    } else if minor == 1 && matches!(kind, Kind::Forward { .. }) {
        return Err(HeadError::Smuggling("HTTP/1.1 request without Host"));
    }
    if matches!(kind, Kind::Connect(_)) && body != Body::None {
        return Err(HeadError::Smuggling("CONNECT with a body"));
    }
    Ok(Some(RequestHead {
        method,
        kind,
        minor,
        headers,
        body,
        proxy_auth,
        keep_alive: !conn_close,
        expect_continue,
        len,
    }))
}

fn parse_absolute(uri: &str) -> Result<Kind, HeadError> {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Err(HeadError::OriginForm);
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(TargetError::Scheme(scheme.to_owned()).into());
    }
    if uri.contains('#') {
        return Err(TargetError::PathQueryFragment.into());
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let target = parse_authority(authority, Some(Port::HTTP))?;
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Ok(Kind::Forward { target, path })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn p(n: u16) -> Port {
        Port::new(n).unwrap()
    }

    #[test]
    fn authorities() {
        let t = parse_authority("API.Example.com.:443", None).unwrap();
        assert_eq!(
            t.host,
            Host::Name(HostName::parse("api.example.com").unwrap())
        );
        assert_eq!(t.port, p(443));
        let t = parse_authority("[::1]:8443", None).unwrap();
        assert_eq!(t.host, Host::Ip("::1".parse().unwrap()));
        let t = parse_authority("1.2.3.4:80", None).unwrap();
        assert_eq!(t.host, Host::Ip("1.2.3.4".parse().unwrap()));
        assert_eq!(
            parse_authority("example.com", Some(Port::HTTP))
                .unwrap()
                .port,
            p(80)
        );
    }

    #[test]
    fn adversarial_authorities_are_refused() {
        use TargetError as E;
        let cases: &[(&str, TargetError)] = &[
            ("", E::Empty),
            ("user@example.com:443", E::Userinfo),
            ("user:pw@example.com:443", E::Userinfo),
            ("example.com:443/path", E::PathQueryFragment),
            ("example.com:443?q", E::PathQueryFragment),
            ("example.com:443#f", E::PathQueryFragment),
            ("[example.com]:443", E::BadBracket),
            ("[127.0.0.1]:443", E::BadBracket),
            ("[fe80::1%eth0]:443", E::BadBracket),
            ("[::1]x:443", E::BadBracket),
            ("[::1", E::BadBracket),
            ("::1:443", E::UnbracketedIpv6),
            ("example.com", E::MissingPort),
            ("example.com:", E::MissingPort),
            ("example.com:0", E::BadPort("0".into())),
            ("example.com:65536", E::BadPort("65536".into())),
            ("example.com:+443", E::BadPort("+443".into())),
            ("example.com:0443", E::BadPort("0443".into())),
            ("example.com:44x", E::BadPort("44x".into())),
            ("127.1:443", E::NumericName("127.1".into())),
            ("2130706433:443", E::NumericName("2130706433".into())),
            ("0x7f.0.0.1:443", E::NumericName("0x7f.0.0.1".into())),
            ("010.0.0.1:443", E::NumericName("010.0.0.1".into())),
            ("exa mple.com:443", E::BadChar),
            ("example.com\r:443", E::BadChar),
            ("ex_-.com..:443", E::BadName("ex_-.com..".into())),
            (
                "１２７．０．０．１:443",
                E::NumericName("１２７．０．０．１".into()),
            ),
            ("0X7F.1:443", E::NumericName("0X7F.1".into())),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_authority(raw, None).as_ref(), Err(want), "{raw:?}");
        }
    }

    fn head(s: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_head(s.as_bytes())
    }

    #[test]
    fn connect_and_forward_heads() {
        let h = head("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nProxy-Authorization: Basic eA==\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!(h.len, "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nProxy-Authorization: Basic eA==\r\n\r\n".len());
        assert_eq!(h.proxy_auth.as_deref(), Some(&b"Basic eA=="[..]));
        assert!(matches!(h.kind, Kind::Connect(_)));
        let h = head(
            "GET http://a.example/x?y HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.body, Body::Length(3));
        match h.kind {
            Kind::Forward { target, path } => {
                assert_eq!(target.port, p(80));
                assert_eq!(path, "/x?y");
            }
            Kind::Connect(_) => panic!(),
        }
        assert!(head("GET http://a.example/ HTTP/1.1\r\nHost: a.ex")
            .unwrap()
            .is_none());
        let h = head("GET http://a.example:8080?q HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
    }

    #[test]
    fn only_bodiless_safe_methods_are_resendable() {
        let cases = [
            (
                "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                true,
            ),
            (
                "HEAD http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                true,
            ),
            (
                "OPTIONS http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                true,
            ),
            (
                "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\n\r\nx",
                false,
            ),
            (
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                false,
            ),
            (
                "PUT http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                false,
            ),
            (
                "DELETE http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                false,
            ),
        ];
        for (req, want) in cases {
            let h = head(req).unwrap().unwrap();
            assert_eq!(h.resendable(), want, "{req:?}");
        }
    }

    #[test]
    fn bad_heads_are_refused_with_their_status() {
        let cases: &[(&str, u16)] = &[
            ("TRACE http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 405),
            ("BREW http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 405),
            ("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
            ("GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
            ("GET http://u@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
            ("GET http://a.example/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", 400),
            ("GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: -1\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1,1\r\n\r\n", 400),
            ("POST http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("CONNECT a.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n", 400),
            ("CONNECT a.example:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 400),
            ("CONNECT a.example HTTP/1.1\r\n\r\n", 400),
            ("CONNECT user@a.example:443 HTTP/1.1\r\n\r\n", 400),
            ("CONNECT a.example:443/x HTTP/1.1\r\n\r\n", 400),
            ("CONNECT [a.example]:443 HTTP/1.1\r\n\r\n", 400),
            ("CONNECT a.example:443 HTTP/2.0\r\n\r\n", 400),
            ("CONNECT a.example:443 HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
            ("CONNECT a.example:443 HTTP/1.1\r\n folded: x\r\n\r\n", 400),
        ];
        for (raw, status) in cases {
            let err = head(raw).expect_err(raw);
            assert_eq!(err.status(), *status, "{raw:?}: {err}");
        }
        let big = format!(
            "GET http://a.example/ HTTP/1.1\r\nX: {}\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert_eq!(head(&big), Err(HeadError::TooLarge));
    }
    #[test]
    fn a_connects_host_without_a_port_names_the_target_on_its_port() {
        for host in ["a.example", "a.example:443", "A.Example."] {
            let raw = format!("CONNECT a.example:443 HTTP/1.1\r\nHost: {host}\r\n\r\n");
            let h = head(&raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
            assert!(
                matches!(h.map(|h| h.kind), Some(Kind::Connect(_))),
                "{raw:?}"
            );
        }
        for host in ["b.example", "a.example:8443", "a.example:"] {
            let raw = format!("CONNECT a.example:443 HTTP/1.1\r\nHost: {host}\r\n\r\n");
            let err = head(&raw).expect_err(&raw);
            assert_eq!(err.status(), 400, "{raw:?}: {err}");
        }
    }

    #[test]
    fn origin_heads_inside_a_tunnel_must_name_its_host() {
        let connect = parse_authority("api.example.com:443", None).unwrap();
        let parse = |raw: &str| parse_origin_head(raw.as_bytes(), &connect);
        let ok = parse(
            "POST /v1/messages?x=1 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            ok.kind,
            Kind::Forward {
                target: connect.clone(),
                path: "/v1/messages?x=1".into()
            }
        );
        assert_eq!(ok.body, Body::Length(3));
        assert!(parse("GET / HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n").is_ok());
        assert_eq!(parse("GET / HTTP/1.1\r\nHost: api.exa"), Ok(None));
        let refused: &[(&str, u16)] = &[
            // Another host, or another port, than the tunnel's.
            ("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n", 400),
            // No Host at all, even in HTTP/1.0.
            ("GET / HTTP/1.0\r\n\r\n", 400),
            // Absolute-form and authority-form are not spoken inside.
            ("GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400),
            ("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 405),
            ("GET * HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400),
            ("TRACE / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 405),
            // Smuggling stays refused inside.
            ("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: api.example.com\r\n\r\n", 400),
        ];
        for (raw, status) in refused {
            let err = parse(raw).expect_err(raw);
            assert_eq!(err.status(), *status, "{raw:?}: {err}");
        }
    }
}
