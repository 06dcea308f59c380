//! The DNS wire format, by hand (RFC 1035 §4.1), for the little the run's
//! resolver needs: a query's header and its one question, whose name must
//! not be compressed (no client compresses a query's only name); answers
//! are built here too. Anything else in a query (EDNS's OPT record, other
//! sections) is ignored and not echoed. Untrusted input: the run writes it.
//! Fuzzed (`fuzz/fuzz_targets/dns_query.rs`).

use std::net::Ipv4Addr;

/// The largest query taken (over TCP a message may claim up to 65535 bytes).
pub const MAX_QUERY: usize = 1024;
/// The most bytes of a name on the wire (RFC 1035 §2.3.4).
const MAX_NAME_WIRE: usize = 255;
/// The time an answer may be kept: the address is stable for the run.
pub const TTL: u32 = 300;

/// Record type A.
pub const TYPE_A: u16 = 1;
/// Record type AAAA.
pub const TYPE_AAAA: u16 = 28;
/// Class IN.
pub const CLASS_IN: u16 = 1;

/// A response code (RFC 1035 §4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    ServFail = 2,
    NxDomain = 3,
    NotImp = 4,
    Refused = 5,
}

/// One query, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// The client asked for recursion (echoed).
    pub rd: bool,
    /// The name, lowercase, labels joined by `.`, no trailing dot; empty
    /// for the root.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// The question section as it came (echoed in the answer).
    question: Vec<u8>,
}

/// Why a message is not a query this resolver answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not even a header: nothing to answer.
    #[error("shorter than a DNS header")]
    Short,
    /// A response, not a query: never answered (no loops).
    #[error("a response, not a query")]
    NotQuery,
    /// An opcode other than QUERY: answered `NOTIMP`.
    #[error("opcode {0} is not QUERY")]
    Opcode(u8),
    /// Not one question, or a malformed one: answered `FORMERR`.
    #[error("malformed question: {0}")]
    Question(&'static str),
}

impl WireError {
    /// The answer's code, when the message gets one.
    #[must_use]
    pub fn rcode(&self) -> Option<Rcode> {
        match self {
            Self::Short | Self::NotQuery => None,
            Self::Opcode(_) => Some(Rcode::NotImp),
            Self::Question(_) => Some(Rcode::FormErr),
        }
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// Parse a query message.
pub fn parse_query(msg: &[u8]) -> Result<Query, WireError> {
    if msg.len() < 12 {
        return Err(WireError::Short);
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    if flags & 0x8000 != 0 {
        return Err(WireError::NotQuery);
    }
    let opcode = ((flags >> 11) & 0xf) as u8;
    if opcode != 0 {
        return Err(WireError::Opcode(opcode));
    }
    let rd = flags & 0x0100 != 0;
    if u16::from_be_bytes([msg[4], msg[5]]) != 1 {
        return Err(WireError::Question("not exactly one question"));
    }
    let mut i = 12;
    let mut name = String::new();
    loop {
        let Some(&len) = msg.get(i) else {
            return Err(WireError::Question("name runs past the message"));
        };
        i += 1;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return Err(WireError::Question("compressed or extended label"));
        }
        let label = msg
            .get(i..i + usize::from(len))
            .ok_or(WireError::Question("label runs past the message"))?;
        i += usize::from(len);
        if i - 12 > MAX_NAME_WIRE {
            return Err(WireError::Question("name longer than 255 bytes"));
        }
        if !name.is_empty() {
            name.push('.');
        }
        for &c in label {
            if c == b'.' || !c.is_ascii_graphic() {
                return Err(WireError::Question("a label byte no host name has"));
            }
            name.push(char::from(c.to_ascii_lowercase()));
        }
    }
    if i - 12 > MAX_NAME_WIRE {
        return Err(WireError::Question("name longer than 255 bytes"));
    }
    let qtype = u16_at(msg, i).ok_or(WireError::Question("no type"))?;
    let qclass = u16_at(msg, i + 2).ok_or(WireError::Question("no class"))?;
    Ok(Query {
        id,
        rd,
        name,
        qtype,
        qclass,
        question: msg[12..i + 4].to_vec(),
    })
}

/// The header of an answer to query `id`.
fn header(id: u16, rd: bool, rcode: Rcode, qd: u16, an: u16) -> [u8; 12] {
    // QR, AA, RA; the client's RD.
    let flags: u16 = 0x8000 | 0x0400 | 0x0080 | (u16::from(rd) << 8) | rcode as u16;
    let mut h = [0u8; 12];
    h[0..2].copy_from_slice(&id.to_be_bytes());
    h[2..4].copy_from_slice(&flags.to_be_bytes());
    h[4..6].copy_from_slice(&qd.to_be_bytes());
    h[6..8].copy_from_slice(&an.to_be_bytes());
    h
}

/// The answer to `q`: `rcode`, and an A record for its name when `addr` is given.
#[must_use]
pub fn answer(q: &Query, rcode: Rcode, addr: Option<Ipv4Addr>) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + q.question.len() + 16);
    out.extend_from_slice(&header(q.id, q.rd, rcode, 1, u16::from(addr.is_some())));
    out.extend_from_slice(&q.question);
    if let Some(a) = addr {
        // The name by pointer to the question's (offset 12).
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&a.octets());
    }
    out
}

/// The answer to a message that [`parse_query`] refused with `e`, if it
/// gets one: the header alone, with the message's id.
#[must_use]
pub fn error_answer(msg: &[u8], e: &WireError) -> Option<Vec<u8>> {
    let rcode = e.rcode()?;
    let id = u16_at(msg, 0)?;
    let rd = msg.get(2).is_some_and(|f| f & 1 != 0);
    Some(header(id, rd, rcode, 0, 0).to_vec())
}

#[cfg(test)]
pub(super) mod tests;
