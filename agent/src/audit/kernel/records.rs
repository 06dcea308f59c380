//! One kernel audit record parsed: its type, serial and `key=value`
//! fields, hex-encoded values decoded.

use std::collections::HashMap;

/// One parsed audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::audit) struct AuditRecord {
    pub(in crate::audit) ty: u16,
    pub(in crate::audit) serial: u64,
    pub(in crate::audit) fields: HashMap<String, String>,
    pub(in crate::audit) text: String,
}

/// Parse `audit(1795938126.349:3): key=value key="quoted" …`. Values the
/// kernel hex-encodes (untrusted strings with spaces or quotes) are decoded.
pub(in crate::audit) fn parse_record(ty: u16, payload: &[u8]) -> Option<AuditRecord> {
    let text = String::from_utf8_lossy(payload)
        .trim_end_matches('\0')
        .trim()
        .to_owned();
    let rest = text.strip_prefix("audit(")?;
    // An `EOE` record has no body: `audit(…): `, trimmed to `audit(…):`.
    let (stamp, body) = rest
        .split_once("): ")
        .or_else(|| Some((rest.strip_suffix("):")?, "")))?;
    let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
    let mut fields = HashMap::new();
    let mut s = body;
    while let Some(eq) = s.find('=') {
        let key = s[..eq].trim().to_owned();
        let after = &s[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_owned(), &q[end + 1..]),
                None => (q.to_owned(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let raw = &after[..end];
            let decoded = if matches!(
                key.as_str(),
                "path" | "comm" | "ocomm" | "exe" | "name" | "cwd"
            ) {
                unhex(raw)
            } else {
                None
            };
            (decoded.unwrap_or_else(|| raw.to_owned()), &after[end..])
        };
        fields.insert(key, value);
        s = next.trim_start();
    }
    Some(AuditRecord {
        ty,
        serial,
        fields,
        text,
    })
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) || s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
}
