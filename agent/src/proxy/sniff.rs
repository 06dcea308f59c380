//! What a transparent connection's first bytes say about the host the
//! client means (issue 59): a TLS `ClientHello`'s server name (RFC 8446
//! §4.1.2, RFC 6066 §3) or an HTTP/1 request's `Host` (and an absolute-form
//! target's host). The transparent path compares it with the name the
//! connection's address was handed out for and refuses a connection that
//! names another: a fronted connection. Anything else (SSH, a database's
//! protocol, HTTP/2 with prior knowledge, whose authority is compressed)
//! names no host, and is judged by the address's name alone.
//!
//! Hand-written; the input is the run's. Fuzzed (`fuzz/fuzz_targets/sniff.rs`).

/// The most bytes read before a verdict: a `ClientHello` with large key
/// shares spans a few KiB; an HTTP head is bounded like the proxy's.
pub const MAX_SNIFF: usize = 32 * 1024;

/// The longest request line taken, its CRLF included.
const MAX_LINE: usize = 8192;

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// A TLS `ClientHello`, with its server name if it carries one (ASCII,
    /// as sent).
    Tls(Option<String>),
    /// An HTTP/1 request head, with the hosts it names: the `Host` header's
    /// (without port) and the absolute-form target's, each as sent.
    Http(Vec<String>),
    /// Neither: no host named.
    Other,
    /// It began as TLS or HTTP but is malformed, or longer than
    /// [`MAX_SNIFF`] before it could be judged.
    Malformed(&'static str),
}

/// Judge the first bytes of a connection.
#[must_use]
pub fn sniff(b: &[u8]) -> Sniffed {
    let Some(&first) = b.first() else {
        return Sniffed::NeedMore;
    };
    let verdict = if first == 0x16 {
        tls(b)
    } else if first.is_ascii_uppercase() {
        http(b)
    } else {
        Sniffed::Other
    };
    match verdict {
        Sniffed::NeedMore if b.len() >= MAX_SNIFF => Sniffed::Malformed("too long to judge"),
        v => v,
    }
}

/// A cursor over bytes: every read checks its bounds.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
    /// A vector with a length prefix of `len_bytes`.
    fn vec(&mut self, len_bytes: usize) -> Option<&'a [u8]> {
        let n = match len_bytes {
            1 => self.u8()?,
            2 => self.u16()?,
            _ => self.u24()?,
        };
        self.take(n)
    }
}

/// The handshake bytes of the TLS records at the start of `b`, and whether
/// the records seen so far are complete.
fn tls(b: &[u8]) -> Sniffed {
    let mut hs = Vec::new();
    let mut rest = b;
    // The handshake message's length, once its header is in.
    loop {
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Sniffed::Malformed("TLS handshake that is not a ClientHello");
            }
            let len = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
            if hs.len() >= 4 + len {
                return client_hello(&hs[4..4 + len]);
            }
        }
        if rest.is_empty() {
            return Sniffed::NeedMore;
        }
        if rest[0] != 0x16 {
            return Sniffed::Malformed("TLS record that is not a handshake");
        }
        if rest.len() >= 2 && rest[1] != 3 {
            return Sniffed::Malformed("not TLS");
        }
        if rest.len() < 5 {
            return Sniffed::NeedMore;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > 16384 + 256 {
            return Sniffed::Malformed("TLS record length");
        }
        let Some(body) = rest.get(5..5 + len) else {
            return Sniffed::NeedMore;
        };
        hs.extend_from_slice(body);
        rest = &rest[5 + len..];
    }
}

/// The server name of a `ClientHello` body.
fn client_hello(body: &[u8]) -> Sniffed {
    const BAD: Sniffed = Sniffed::Malformed("ClientHello");
    let mut c = Cur(body);
    let parsed = (|| {
        c.take(2 + 32)?; // version, random
        c.vec(1)?; // session id
        c.vec(2)?; // cipher suites
        c.vec(1)?; // compression methods
        if c.0.is_empty() {
            return Some(None); // no extensions
        }
        let mut exts = Cur(c.vec(2)?);
        let mut name = None;
        while !exts.0.is_empty() {
            let kind = exts.u16()?;
            let data = exts.vec(2)?;
            if kind != 0 {
                continue;
            }
            if name.is_some() {
                return None; // a second server_name extension
            }
            let mut list = Cur(Cur(data).vec(2)?);
            while !list.0.is_empty() {
                let t = list.u8()?;
                let n = list.vec(2)?;
                if t == 0 {
                    if name.is_some() {
                        return None; // two host names
                    }
                    name = Some(n);
                }
            }
        }
        Some(name)
    })();
    match parsed {
        None => BAD,
        Some(None) => Sniffed::Tls(None),
        Some(Some(n)) if !n.is_empty() && n.iter().all(u8::is_ascii_graphic) => {
            Sniffed::Tls(Some(String::from_utf8_lossy(n).into_owned()))
        }
        Some(Some(_)) => Sniffed::Malformed("server name with bytes no host name has"),
    }
}

/// An HTTP/1 request head's hosts.
fn http(b: &[u8]) -> Sniffed {
    // The method: uppercase letters and a space, as HTTP/1 clients send.
    let method_end = b
        .iter()
        .position(|c| !c.is_ascii_uppercase())
        .unwrap_or(b.len());
    if method_end == b.len() {
        return if method_end > 16 {
            Sniffed::Other
        } else {
            Sniffed::NeedMore
        };
    }
    if b[method_end] != b' ' || method_end > 16 {
        return Sniffed::Other;
    }
    // The request line ends within its first MAX_LINE bytes (judged on
    // those only, so that more bytes never change the verdict).
    let Some(line_end) = find(&b[..b.len().min(MAX_LINE)], b"\r\n") else {
        return if b.len() >= MAX_LINE {
            Sniffed::Malformed("request line too long")
        } else {
            Sniffed::NeedMore
        };
    };
    let line = &b[..line_end];
    let mut parts = line.split(|&c| c == b' ');
    let (Some(_), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Sniffed::Other;
    };
    if !version.starts_with(b"HTTP/1.") {
        // HTTP/2's preface (`PRI * HTTP/2.0`) and other protocols.
        return Sniffed::Other;
    }
    let Some(head_end) = find(b, b"\r\n\r\n") else {
        return Sniffed::NeedMore;
    };
    let mut hosts = Vec::new();
    if let Some(h) = absolute_host(target) {
        hosts.push(h);
    }
    // The header lines, each with its CRLF (none when the head has none).
    for line in b[line_end + 2..head_end + 2].split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return Sniffed::Malformed("header line without a colon");
        };
        if line[..colon].eq_ignore_ascii_case(b"host") {
            let v = line[colon + 1..].trim_ascii();
            if v.is_empty() || !v.iter().all(u8::is_ascii_graphic) {
                return Sniffed::Malformed("Host header");
            }
            hosts.push(strip_port(&String::from_utf8_lossy(v)));
        }
    }
    Sniffed::Http(hosts)
}

fn find(b: &[u8], what: &[u8]) -> Option<usize> {
    b.windows(what.len()).position(|w| w == what)
}

/// The host of an absolute-form target (`http://host:port/path`).
fn absolute_host(target: &[u8]) -> Option<String> {
    let t = String::from_utf8_lossy(target);
    let lower = t.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    Some(strip_port(authority))
}

/// `host:port` → `host`; `[v6]:port` → `[v6]`.
fn strip_port(hostport: &str) -> String {
    if hostport.starts_with('[') {
        return match hostport.find(']') {
            Some(i) => hostport[..=i].to_owned(),
            None => hostport.to_owned(),
        };
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => h.to_owned(),
        _ => hostport.to_owned(),
    }
}

#[cfg(test)]
mod tests;
