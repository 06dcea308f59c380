//! Reading a log back, as `lockrun audit` does: a regular file only, no
//! more than [`READ_LIMIT`](super::sink::READ_LIMIT) bytes of it and
//! [`LINE_LIMIT`](super::sink::LINE_LIMIT) of a line, each line's seal
//! checked with the key when there is one ([`super::seal`]).
//!
//! A line that is not a record (cut short by a full disk, or not
//! lockrun's) is named and passed over, not the end of the reading: the
//! lines after it are read as usual.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;

use super::seal::{RunSeal, SealKey, Verifier};
use super::sink::{open_for_reading, ReadError, LINE_LIMIT, READ_LIMIT};
use super::{Event, Record};

/// A line passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// 1-based.
    pub line: usize,
    pub why: String,
}

/// A log as read.
pub struct Log {
    /// The records, in the file's order.
    pub records: Vec<Record>,
    /// The lines that are not records.
    pub unreadable: Vec<Unreadable>,
    seals: Option<Verifier>,
}

impl Log {
    /// What was found of `run`'s seals: `None` when no key was given, or
    /// no line named the run.
    #[must_use]
    pub fn seal_of(&self, run: &str) -> Option<&RunSeal> {
        self.seals.as_ref()?.of(run)
    }

    /// The key the seals were checked with, if any.
    #[must_use]
    pub fn key(&self) -> Option<&SealKey> {
        self.seals.as_ref().map(Verifier::key)
    }
}

/// Read the log at `path`, checking seals with `key` when given.
pub fn read(path: &Path, key: Option<SealKey>) -> Result<Log, ReadError> {
    let file = open_for_reading(path)?;
    let mut reader = BufReader::new(file.take(READ_LIMIT));
    let mut log = Log {
        records: Vec::new(),
        unreadable: Vec::new(),
        seals: key.map(Verifier::new),
    };
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let n = (&mut reader)
            .take(LINE_LIMIT as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|source| ReadError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') && buf.len() > LINE_LIMIT {
            skip_line(&mut reader).map_err(|source| ReadError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            log.unreadable.push(Unreadable {
                line: number,
                why: format!("longer than {LINE_LIMIT} bytes, which no line of lockrun's is"),
            });
            continue;
        }
        let raw = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(raw) {
            Ok(rec) => {
                if let (Some(v), Some(run), Some(seq)) =
                    (log.seals.as_mut(), rec.run.as_deref(), rec.seq)
                {
                    let end = matches!(rec.event, Event::RunEnd { .. });
                    v.line(number, raw, run, seq, end);
                }
                log.records.push(rec);
            }
            Err(e) => log.unreadable.push(Unreadable {
                line: number,
                why: e.to_string(),
            }),
        }
    }
    Ok(log)
}

/// Read on to the end of the current line.
fn skip_line(reader: &mut impl std::io::BufRead) -> std::io::Result<()> {
    loop {
        let (done, used) = {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            }
        };
        reader.consume(used);
        if done {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;
    use crate::testing::Scratch;

    #[test]
    fn a_line_cut_short_or_too_long_is_named_and_the_rest_is_read() {
        let scratch = Scratch::new("read-tolerant");
        let path = scratch.path().join("log");
        let good = r#"{"ts_ms":1,"event":"kernel_events_lost","count":2}"#;
        let long = "x".repeat(LINE_LIMIT + 10);
        std::fs::write(
            &path,
            format!("{good}\n{{\"ts_ms\":2,\"ev\n{long}\n\n{good}\n{{\"half\":"),
        )
        .unwrap();
        let got = read(&path, None).unwrap();
        assert_eq!(got.records.len(), 2);
        let lines: Vec<usize> = got.unreadable.iter().map(|u| u.line).collect();
        assert_eq!(lines, vec![2, 3, 6]);
        assert!(
            got.unreadable[1].why.contains("longer than"),
            "{:?}",
            got.unreadable
        );
    }
}
