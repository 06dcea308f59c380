//! Text for a person's terminal, where a run chose part of it.
//!
//! The summary, the warnings and `lockrun audit` name processes, paths,
//! hosts and commands that the confined command chose: a file named
//! `"\e[2J\nlockrun: ok"`, a process that renamed itself. Printed raw, such a
//! name clears the caller's screen, moves its cursor, sets its window title
//! or starts a line of its own that reads like lockrun's. So every line
//! lockrun writes for a person goes through [`escaped`]: a control character
//! (C0, DEL, C1) or a Unicode direction override becomes its Rust escape
//! (`\n`, `\u{1b}`), visible and inert, and one line stays one line.
//! Machine output (the audit log, `--json`) is JSON, which escapes them
//! already; [`lossy`] writes a path there as UTF-8 whatever its bytes.

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;

/// Whether `c` could act on a terminal, or reorder what it shows, rather
/// than be shown: every control character, and the Unicode bidirectional
/// formatting characters, which reverse the text around them in terminals
/// and editors that honour them.
fn acts(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every character that [`acts`] on a terminal written as its
/// escape: borrowed when there is none, as for nearly every line.
#[must_use]
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(acts) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if acts(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Write one line for a person to stderr, escaped ([`escaped`]): what
/// `say!` expands to. A failed write (stderr closed) is not lockrun's to
/// report anywhere else.
pub fn line(args: fmt::Arguments<'_>) {
    let line = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    let mut out = escaped(&line).into_owned();
    out.push('\n');
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// `eprintln!` for a line a person reads: one line, whatever the run chose
/// to put in it ([`escaped`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::shown::line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Paths in the log as UTF-8, bytes that are not replaced by U+FFFD (as
/// `Path::display` does): a path that is not UTF-8 must not cost the line.
/// Read back as written.
pub mod lossy {
    use serde::Serializer;
    use std::path::{Path, PathBuf};

    /// # Errors
    /// Only the serializer's own.
    pub fn path<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_string_lossy())
    }

    /// # Errors
    /// Only the serializer's own.
    pub fn paths<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ps.iter().map(|p| p.to_string_lossy()))
    }

    /// # Errors
    /// Only the serializer's own.
    #[allow(clippy::ref_option)] // serde's `serialize_with` hands `&Option<_>`
    pub fn opt_path<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(&p.to_string_lossy()),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_left_as_it_is() {
        for s in [
            "",
            "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)",
            "é ×2 →",
        ] {
            assert!(matches!(escaped(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn what_acts_on_a_terminal_is_shown_escaped_and_a_line_stays_one_line() {
        let forged = "x\u{1b}[2J\r\nlockrun: all good\u{7}\u{9b}31m\u{202e}gpj.exe\u{7f}";
        let shown = escaped(forged);
        assert_eq!(
            shown,
            "x\\u{1b}[2J\\r\\nlockrun: all good\\u{7}\\u{9b}31m\\u{202e}gpj.exe\\u{7f}"
        );
        assert!(!shown.chars().any(acts), "{shown}");
        assert!(!shown.contains('\n'));
    }
}
