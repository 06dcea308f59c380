//! Request rules: which requests a host takes, by method and path
//! (`[network.requests."api.github.com"] allow = ["GET /repos/*/contents/**"]`),
//! and the path of a request as they judge it. Pure: no I/O.
//!
//! A rule's method is exact (`GET`) or `*` (any). Its path is a glob on
//! the request's path without its query: `*` stands for one segment or a
//! part of one (never a `/`), `**` (a whole segment) for any number of
//! segments, none included. A request's path that could mean two things
//! (a `.` or `..` segment, an encoded `/` or `\`, an empty segment inside,
//! or not starting with `/`) is refused before any rule is asked: the
//! upstream might resolve it to a path no rule allows.

use std::fmt;

/// One `METHOD /path/glob` of a host's `allow`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(into = "String")]
pub struct RequestRule {
    /// `None`: any method (`*`).
    method: Option<String>,
    /// The path's segments, after the leading `/`.
    segments: Vec<String>,
}

impl From<RequestRule> for String {
    fn from(r: RequestRule) -> String {
        r.to_string()
    }
}

impl fmt::Display for RequestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} /{}",
            self.method.as_deref().unwrap_or("*"),
            self.segments.join("/")
        )
    }
}

/// Why a request's path is refused before any rule is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AmbiguousPath {
    #[error("does not start with /")]
    NotAbsolute,
    #[error("has a `.` or `..` segment")]
    DotSegment,
    #[error("has an encoded `/` or `\\` (%2F, %5C) or a `\\`")]
    EncodedSeparator,
    #[error("has an empty segment (`//`)")]
    EmptySegment,
    #[error("has a control character, a space or a `#`")]
    BadByte,
}

impl RequestRule {
    /// Parse `METHOD /path/glob`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (method, path) = raw.split_once(' ').ok_or_else(|| {
            format!("`{raw}`: write METHOD /PATH, as in `GET /repos/*/contents/**`")
        })?;
        let method = match method {
            "*" => None,
            m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => Some(m.to_owned()),
            m => {
                return Err(format!(
                    "`{raw}`: `{m}` is not a method: an upper-case method (GET, POST, …) or `*`"
                ))
            }
        };
        let Some(rest) = path.strip_prefix('/') else {
            return Err(format!("`{raw}`: the path must start with /"));
        };
        if path.contains('?') || path.contains('#') {
            return Err(format!(
                "`{raw}`: a rule matches the path alone; leave out the query (`?…`)"
            ));
        }
        let segments: Vec<String> = rest.split('/').map(str::to_owned).collect();
        match normalized(path) {
            Ok(_) => {}
            Err(e) => return Err(format!("`{raw}`: the path {e}")),
        }
        for s in &segments {
            if s.contains("**") && s != "**" {
                return Err(format!(
                    "`{raw}`: `**` stands alone as a whole segment (`/a/**/b`); `*` matches within one"
                ));
            }
        }
        Ok(Self { method, segments })
    }

    /// The method the rule takes; `None`: any.
    #[must_use]
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// Whether it allows `method` on the request path `path` (already
    /// [`normalized`], without its query).
    #[must_use]
    pub fn allows(&self, method: &str, path: &str) -> bool {
        if self.method.as_deref().is_some_and(|m| m != method) {
            return false;
        }
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let got: Vec<&str> = rest.split('/').collect();
        let want: Vec<&str> = self.segments.iter().map(String::as_str).collect();
        segments_match(&want, &got)
    }
}

/// Whether the glob segments `want` match the segments `got`.
fn segments_match(want: &[&str], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((&"**", rest)) => (0..=got.len()).any(|skip| segments_match(rest, &got[skip..])),
        Some((w, rest)) => match got.split_first() {
            Some((g, grest)) => {
                segment_match(w.as_bytes(), g.as_bytes()) && segments_match(rest, grest)
            }
            None => false,
        },
    }
}

/// Whether one segment glob (`*` any run of bytes) matches one segment.
fn segment_match(want: &[u8], got: &[u8]) -> bool {
    // Iterative, with the last `*` to fall back on: linear-ish, no recursion.
    let (mut w, mut g) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while g < got.len() {
        if w < want.len() && want[w] == b'*' {
            star = Some((w, g));
            w += 1;
        } else if w < want.len() && want[w] == got[g] {
            w += 1;
            g += 1;
        } else if let Some((sw, sg)) = star {
            w = sw + 1;
            g = sg + 1;
            star = Some((sw, sg + 1));
        } else {
            return false;
        }
    }
    want[w..].iter().all(|&b| b == b'*')
}

/// The path of a request target (`/a/b?q=1`) without its query, or why it
/// is ambiguous. Percent-encoding is left as sent (a rule written with a
/// plain letter does not match its encoding: refused, never widened),
/// but for what would change the segments: an encoded `/` or `\`, and an
/// encoded `.` making a dot segment.
pub fn normalized(target: &str) -> Result<&str, AmbiguousPath> {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if !path.starts_with('/') {
        return Err(AmbiguousPath::NotAbsolute);
    }
    if path
        .bytes()
        .any(|b| b.is_ascii_control() || b == b' ' || b == b'#' || b >= 0x80)
    {
        return Err(AmbiguousPath::BadByte);
    }
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") || path.contains('\\') {
        return Err(AmbiguousPath::EncodedSeparator);
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    for (i, s) in segments.iter().enumerate() {
        let decoded = s.to_ascii_lowercase().replace("%2e", ".");
        if decoded == "." || decoded == ".." {
            return Err(AmbiguousPath::DotSegment);
        }
        // `/` alone, and a trailing `/`, are one empty segment at the end.
        if s.is_empty() && i + 1 != segments.len() {
            return Err(AmbiguousPath::EmptySegment);
        }
    }
    Ok(path)
}

/// A rule that would allow `method` on `path`: each segment that looks
/// like an id (digits, a hash, a UUID, a long mixed token) as `*`.
#[must_use]
pub fn suggested(method: &str, path: &str) -> String {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .map(|s| if id_like(s) { "*" } else { s })
        .collect();
    let method = if method.is_empty() { "*" } else { method };
    format!("{method} /{}", segments.join("/"))
}

fn id_like(s: &str) -> bool {
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let hexish = s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    !s.is_empty()
        && (s.bytes().all(|b| b.is_ascii_digit())
            || (hexish && s.len() >= 16)
            || (s.len() >= 20 && digits >= 4))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn allows(rule: &str, method: &str, path: &str) -> bool {
        RequestRule::parse(rule)
            .unwrap()
            .allows(method, normalized(path).unwrap())
    }

    #[test]
    fn star_is_one_segment_or_part_of_one() {
        assert!(allows("GET /repos/*/contents", "GET", "/repos/a/contents"));
        assert!(!allows(
            "GET /repos/*/contents",
            "GET",
            "/repos/a/b/contents"
        ));
        assert!(allows("GET /v1/*.json", "GET", "/v1/x.json"));
        assert!(!allows("GET /v1/*.json", "GET", "/v1/x.jsonx"));
        assert!(allows("GET /v1/a*b*c", "GET", "/v1/aXbYc"));
        assert!(!allows("GET /v1/a*b*c", "GET", "/v1/aXbY"));
        // `*` may match an empty part, but a segment must be there.
        assert!(allows("GET /v1/*", "GET", "/v1/"));
        assert!(!allows("GET /v1/*", "GET", "/v1"));
    }

    #[test]
    fn double_star_is_any_number_of_segments() {
        let r = "GET /repos/*/contents/**";
        assert!(allows(r, "GET", "/repos/a/contents"));
        assert!(allows(r, "GET", "/repos/a/contents/x"));
        assert!(allows(r, "GET", "/repos/a/contents/x/y/z?ref=main"));
        assert!(!allows(r, "GET", "/repos/a/issues/1"));
        assert!(allows("* /**", "DELETE", "/anything/at/all"));
        assert!(allows("GET /a/**/z", "GET", "/a/z"));
        assert!(allows("GET /a/**/z", "GET", "/a/b/c/z"));
        assert!(!allows("GET /a/**/z", "GET", "/a/b/c/y"));
    }

    #[test]
    fn the_method_is_exact_or_any() {
        assert!(allows("POST /graphql", "POST", "/graphql"));
        assert!(!allows("POST /graphql", "GET", "/graphql"));
        assert!(!allows("POST /graphql", "post", "/graphql"));
        assert!(allows("* /graphql", "PATCH", "/graphql"));
        // The query is not the path.
        assert!(allows("POST /graphql", "POST", "/graphql?x=/etc"));
        assert!(!allows("POST /graphql", "POST", "/graphql/x"));
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        for (p, why) in [
            ("repos/a", AmbiguousPath::NotAbsolute),
            ("*", AmbiguousPath::NotAbsolute),
            ("http://h/x", AmbiguousPath::NotAbsolute),
            ("/repos/../gists", AmbiguousPath::DotSegment),
            ("/repos/./a", AmbiguousPath::DotSegment),
            ("/repos/%2e%2E/gists", AmbiguousPath::DotSegment),
            ("/repos/.%2e", AmbiguousPath::DotSegment),
            ("/repos/..", AmbiguousPath::DotSegment),
            ("/repos/a%2Fb", AmbiguousPath::EncodedSeparator),
            ("/repos/a%2fb", AmbiguousPath::EncodedSeparator),
            ("/repos/a%5Cb", AmbiguousPath::EncodedSeparator),
            ("/repos/a\\b", AmbiguousPath::EncodedSeparator),
            ("/repos//a", AmbiguousPath::EmptySegment),
            ("//a", AmbiguousPath::EmptySegment),
            ("/a\tb", AmbiguousPath::BadByte),
            ("/a#b", AmbiguousPath::BadByte),
        ] {
            assert_eq!(normalized(p), Err(why), "{p}");
        }
        // Dots inside a segment, and in the query, are no dot segment.
        assert_eq!(normalized("/a/..b/c.d"), Ok("/a/..b/c.d"));
        assert_eq!(normalized("/a?p=../..%2f"), Ok("/a"));
        assert_eq!(normalized("/"), Ok("/"));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        for (bad, says) in [
            ("GET", "METHOD /PATH"),
            ("get /x", "not a method"),
            ("GET x", "start with /"),
            ("GET /x?y=1", "query"),
            ("GET /a/../b", "`.` or `..`"),
            ("GET /a/x**", "stands alone"),
            ("GET /a//b", "empty segment"),
        ] {
            let err = RequestRule::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!(
            RequestRule::parse("* /a/**").unwrap().to_string(),
            "* /a/**"
        );
    }

    #[test]
    fn suggestions_star_id_like_segments() {
        assert_eq!(
            suggested("GET", "/repos/o/r/issues/1234?x=1"),
            "GET /repos/o/r/issues/*"
        );
        assert_eq!(suggested("POST", "/v1/messages"), "POST /v1/messages");
        assert_eq!(
            suggested("GET", "/gists/aa5a315d61ae9438b18d"),
            "GET /gists/*"
        );
        let s = suggested("GET", "/x/123e4567-e89b-12d3-a456-426614174000");
        assert_eq!(s, "GET /x/*");
        assert!(allows(&s, "GET", "/x/123e4567-e89b-12d3-a456-426614174000"));
    }
}
