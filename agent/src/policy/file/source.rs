//! One policy source read and parsed: a preset, or a file (a regular
//! file of bounded size), its TOML parsed into the raw policy, with the
//! line and column of an error and the key that was likely meant.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{PolicyError, RawPolicy, MAX_POLICY_BYTES, PRESETS};
use crate::regular_file::read_text;

/// One policy source: where it came from and its parsed text.
pub(super) struct Source {
    pub origin: String,
    pub dir: Option<PathBuf>,
    pub raw: RawPolicy,
}

/// One policy: the preset `name`, or the file it names (relative to
/// `base`), which `by` extends, if any. A file is read as a regular file
/// of at most [`MAX_POLICY_BYTES`] ([`crate::regular_file`]).
pub(super) fn read_source(
    name: &str,
    base: Option<&Path>,
    by: Option<&str>,
) -> Result<Source, PolicyError> {
    let looks_like_path =
        name.contains('/') || Path::new(name).extension().is_some_and(|e| e == "toml");
    let (origin, dir, text) = if looks_like_path {
        // Without its `.` components (`./x.toml`), as a message shows it.
        let p: PathBuf = match base {
            Some(b) if Path::new(name).is_relative() => b.join(name),
            _ => PathBuf::from(name),
        }
        .components()
        .collect();
        let text = read_text(&p, MAX_POLICY_BYTES).map_err(|source| PolicyError::Read {
            path: p.clone(),
            by: by.map(str::to_owned),
            source,
        })?;
        let canon = p.canonicalize().unwrap_or_else(|_| p.clone());
        (
            canon.display().to_string(),
            canon.parent().map(Path::to_path_buf),
            text,
        )
    } else if let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == name) {
        (format!("preset:{name}"), None, (*text).to_owned())
    } else {
        let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
        return Err(PolicyError::NoPreset {
            name: name.to_owned(),
            by: by.map(str::to_owned),
            presets: names.join(", "),
        });
    };
    let raw = parse_text(&origin, &text)?;
    Ok(Source { origin, dir, raw })
}

pub(super) fn parse_text(origin: &str, text: &str) -> Result<RawPolicy, PolicyError> {
    toml::from_str::<RawPolicy>(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |sp| line_col(text, sp.start));
        // One line: the parser's may span several ("invalid table
        // header\nexpected `.`, `]`").
        let mut message = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        if let Some(hint) = suggest_key(&message) {
            let _ = write!(message, " (did you mean `{hint}`?)");
        }
        PolicyError::Syntax {
            origin: origin.to_owned(),
            line,
            column,
            message,
        }
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, column)
}

/// From serde's "unknown field `x`, expected one of `a`, `b`", the expected
/// key nearest to `x` by edit distance.
fn suggest_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    expected
        .into_iter()
        .map(|k| (edit_distance(unknown, k), k))
        .filter(|(d, k)| *d <= k.len().max(unknown.len()) / 2 + 1)
        .min()
        .map(|(_, k)| k.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
