//! The seal on each line of an audit log: what lets a reader tell a line
//! lockrun wrote, unaltered, from one anybody else wrote or changed.
//!
//! A log lies where no run may write ([`super::sink`] refuses any other
//! place), but runs of other worktrees, other tools and people may; and a
//! log is read long after, often elsewhere. So each line carries its run's
//! id, its place in that run's lines (`seq`, from 0) and last a `seal`: an
//! HMAC-SHA-256 of everything before it, keyed with the state dir's
//! `audit-key`. The key is 32 random bytes, made by the first run that
//! keeps a log, readable only by its owner; the state dir is denied to
//! every run (Landlock), so no run can read it to seal a line of its own.
//! [`Verifier`] checks a log with the key: a line whose seal does not hold
//! was forged or changed, a gap in a run's `seq` is a line removed, and a
//! run without its `run_end` was cut short (or its lockrun killed).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

use crate::sys::rename_noreplace;

/// The key's file in the state dir.
pub const KEY_FILE: &str = "audit-key";

const KEY_BYTES: usize = 32;

/// `,"seal":"` + 64 hex digits + `"}`: how every sealed line ends.
const SEAL_PREFIX: &[u8] = b",\"seal\":\"";
const SEAL_HEX: usize = 64;
const SEAL_SUFFIX_LEN: usize = SEAL_PREFIX.len() + SEAL_HEX + 2;

/// Why the state dir's key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{path} is not a key lockrun made: {why} (remove it, and lockrun makes a new one; logs \
         sealed with the old one then no longer verify)"
    )]
    NotOurs { path: PathBuf, why: &'static str },
}

/// The state dir's key, which seals every line lockrun writes to a log.
pub struct SealKey {
    key: [u8; KEY_BYTES],
    path: PathBuf,
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealKey")
            .field("path", &self.path)
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

impl SealKey {
    /// The key of `state_dir` (a dir that exists), made there first if it
    /// has none: written whole under a name of this process's, then moved
    /// in place without replacing, so that two runs making it at once end
    /// with the one key, and no reader ever sees half of one.
    pub fn of_state_dir(state_dir: &Path) -> Result<Self, KeyError> {
        let path = state_dir.join(KEY_FILE);
        match Self::read(&path) {
            Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let io = |source| KeyError::Io {
            path: path.clone(),
            source,
        };
        let mut key = [0u8; KEY_BYTES];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(io)?;
        let new = state_dir.join(format!(".{KEY_FILE}-{}", std::process::id()));
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&new)
            .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()))
            .and_then(|()| rename_noreplace(&new, &path));
        let _ = std::fs::remove_file(&new);
        match made {
            Ok(()) => Ok(Self { key, path }),
            // Another run made it first: theirs is the key.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Self::read(&path),
            Err(e) => Err(io(e)),
        }
    }

    /// The key at `path`: a regular file of 32 bytes, not a link, owned by
    /// this user and readable by no one else, as lockrun makes it.
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let not_ours = |why| KeyError::NotOurs {
            path: path.to_path_buf(),
            why,
        };
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(not_ours("not a regular file"));
        }
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(not_ours("owned by another user"));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(not_ours("readable or writable by others than its owner"));
        }
        if meta.len() != KEY_BYTES as u64 {
            return Err(not_ours("not 32 bytes long"));
        }
        let mut key = [0u8; KEY_BYTES];
        f.read_exact(&mut key).map_err(io)?;
        Ok(Self {
            key,
            path: path.to_path_buf(),
        })
    }

    /// Where the key is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A short name of the key, which a run's `run_start` records: 16 hex
    /// digits of a hash of it, which tell nothing of the key itself.
    #[must_use]
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"lockrun audit key id\0");
        h.update(self.key);
        hex(&h.finalize()[..8])
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        // A key of any length is accepted by HMAC.
        let mut m = <Hmac<Sha256> as hmac::Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of every length"));
        m.update(body);
        m
    }

    /// `body`, one JSON object (`{…}`, with the line's `run` and `seq`),
    /// with its seal as the object's last member: the line as written,
    /// without its newline.
    #[must_use]
    pub fn seal(&self, body: &[u8]) -> Vec<u8> {
        let tag = hex(&self.mac(body).finalize().into_bytes());
        let open = body.strip_suffix(b"}").unwrap_or(body);
        let mut line = Vec::with_capacity(open.len() + SEAL_SUFFIX_LEN);
        line.extend_from_slice(open);
        line.extend_from_slice(SEAL_PREFIX);
        line.extend_from_slice(tag.as_bytes());
        line.extend_from_slice(b"\"}");
        line
    }

    /// Whether `line` (without its newline) carries a seal this key made
    /// over the rest of it. `None` when it carries no seal at all.
    #[must_use]
    pub fn holds(&self, line: &[u8]) -> Option<bool> {
        let (body, tag) = unseal(line)?;
        let Some(tag) = unhex(tag) else {
            return Some(false);
        };
        Some(self.mac(&body).verify_slice(&tag).is_ok())
    }
}

/// The body a sealed line's seal was made over, and the seal's hex digits.
fn unseal(line: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let at = line.len().checked_sub(SEAL_SUFFIX_LEN)?;
    let (open, suffix) = line.split_at(at);
    let tag = suffix.strip_prefix(SEAL_PREFIX)?.strip_suffix(b"\"}")?;
    let mut body = open.to_vec();
    body.push(b'}');
    Some((body, tag))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

/// What a reader found of one run's lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSeal {
    /// Lines whose seal held.
    pub sealed: u64,
    /// Line numbers (1-based, in the file) whose seal did not hold: forged,
    /// or changed after lockrun wrote them.
    pub broken: Vec<usize>,
    /// Lines of the run missing before the one at each line number (a gap
    /// in `seq`), and how many: removed from the file, or never written
    /// (lockrun said so on stderr when a write failed).
    pub missing: Vec<(usize, u64)>,
    /// Line numbers whose `seq` came before one already seen: reordered or
    /// repeated.
    pub out_of_order: Vec<usize>,
    /// The run's last line was its `run_end`.
    pub ended: bool,
}

impl RunSeal {
    /// Every line of the run is there, unaltered, in order, to its end.
    #[must_use]
    pub fn whole(&self) -> bool {
        self.broken.is_empty()
            && self.missing.is_empty()
            && self.out_of_order.is_empty()
            && self.ended
    }
}

impl fmt::Display for RunSeal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.whole() {
            return write!(
                f,
                "verified: all {} lines written by lockrun, unaltered",
                self.sealed
            );
        }
        let mut said = Vec::new();
        if !self.broken.is_empty() {
            said.push(format!(
                "NOT written by lockrun, or altered since: {} {}",
                if self.broken.len() == 1 {
                    "line"
                } else {
                    "lines"
                },
                list(&self.broken)
            ));
        }
        for (at, n) in &self.missing {
            said.push(format!(
                "{n} {} of this run missing before line {at} (removed, or never written)",
                if *n == 1 { "line" } else { "lines" }
            ));
        }
        if !self.out_of_order.is_empty() {
            said.push(format!(
                "out of order or repeated: {} {}",
                if self.out_of_order.len() == 1 {
                    "line"
                } else {
                    "lines"
                },
                list(&self.out_of_order)
            ));
        }
        if !self.ended {
            said.push(
                "no run_end: the log was cut short, or the run's lockrun was killed or still runs"
                    .to_owned(),
            );
        }
        f.write_str(&said.join("; "))
    }
}

/// At most the first ten line numbers, and how many more.
fn list(lines: &[usize]) -> String {
    let shown: Vec<String> = lines.iter().take(10).map(ToString::to_string).collect();
    match lines.len() {
        n if n > 10 => format!("{} and {} more", shown.join(", "), n - 10),
        _ => shown.join(", "),
    }
}

/// Checks a log's lines as they are read, run by run.
pub struct Verifier {
    key: SealKey,
    runs: BTreeMap<String, (RunSeal, Option<u64>)>,
}

impl Verifier {
    #[must_use]
    pub fn new(key: SealKey) -> Self {
        Self {
            key,
            runs: BTreeMap::new(),
        }
    }

    /// Judge the line at `number` (1-based), raw as read, which named `run`
    /// and `seq`; `end` when it is the run's `run_end`.
    pub fn line(&mut self, number: usize, raw: &[u8], run: &str, seq: u64, end: bool) {
        let (seal, next) = self.runs.entry(run.to_owned()).or_default();
        if self.key.holds(raw) != Some(true) {
            seal.broken.push(number);
            return;
        }
        seal.sealed += 1;
        let expected = next.unwrap_or(0);
        if seq < expected {
            seal.out_of_order.push(number);
            return;
        }
        if seq > expected {
            seal.missing.push((number, seq - expected));
        }
        *next = Some(seq + 1);
        seal.ended = end;
    }

    /// The key lines are checked with.
    #[must_use]
    pub fn key(&self) -> &SealKey {
        &self.key
    }

    /// What was found of `run`: `None` for a run none of whose lines named it.
    #[must_use]
    pub fn of(&self, run: &str) -> Option<&RunSeal> {
        self.runs.get(run).map(|(s, _)| s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;
    use crate::testing::Scratch;

    fn key(byte: u8) -> SealKey {
        SealKey {
            key: [byte; KEY_BYTES],
            path: PathBuf::from("/state/audit-key"),
        }
    }

    #[test]
    fn a_sealed_line_is_its_body_with_the_seal_last_and_holds_only_as_written() {
        let k = key(7);
        let body = br#"{"ts_ms":1,"event":"run_end","run":"r","seq":3}"#;
        let line = k.seal(body);
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.starts_with(r#"{"ts_ms":1,"event":"run_end","run":"r","seq":3,"seal":""#));
        assert!(serde_json::from_slice::<serde_json::Value>(&line).is_ok());
        assert_eq!(k.holds(&line), Some(true));
        // Another key's, a changed byte, a body without a seal.
        assert_eq!(key(8).holds(&line), Some(false));
        let changed = text.replace("\"seq\":3", "\"seq\":4");
        assert_eq!(k.holds(changed.as_bytes()), Some(false));
        assert_eq!(k.holds(body), None);
    }

    #[test]
    fn the_verifier_names_forged_missing_reordered_lines_and_a_run_cut_short() {
        let k = key(1);
        let line = |seq: u64| k.seal(format!(r#"{{"run":"a","seq":{seq}}}"#).as_bytes());
        let mut v = Verifier::new(key(1));
        v.line(1, &line(0), "a", 0, false);
        v.line(2, &line(1), "a", 1, false);
        v.line(3, br#"{"run":"a","seq":2,"seal":"00"}"#, "a", 2, false);
        v.line(4, &line(5), "a", 5, false);
        v.line(5, &line(4), "a", 4, true);
        let seal = v.of("a").unwrap();
        assert_eq!(seal.broken, vec![3]);
        assert_eq!(seal.missing, vec![(4, 3)]);
        assert_eq!(seal.out_of_order, vec![5]);
        assert!(!seal.whole());
        let said = seal.to_string();
        assert!(
            said.contains("NOT written by lockrun, or altered since: line 3"),
            "{said}"
        );
        assert!(
            said.contains("3 lines of this run missing before line 4"),
            "{said}"
        );

        let mut v = Verifier::new(key(1));
        v.line(1, &line(0), "a", 0, false);
        v.line(2, &line(1), "a", 1, true);
        assert!(v.of("a").unwrap().whole());
        assert_eq!(
            v.of("a").unwrap().to_string(),
            "verified: all 2 lines written by lockrun, unaltered"
        );
        let mut v = Verifier::new(key(1));
        v.line(1, &line(0), "a", 0, false);
        assert!(v.of("a").unwrap().to_string().starts_with("no run_end"));
    }

    #[test]
    fn a_key_is_made_once_and_read_back_by_every_later_run() {
        let scratch = Scratch::new("seal-key");
        let made = SealKey::of_state_dir(scratch.path()).unwrap();
        let again = SealKey::of_state_dir(scratch.path()).unwrap();
        assert_eq!(made.id(), again.id());
        let meta = std::fs::metadata(scratch.path().join(KEY_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o400);
        // Nothing of the making is left beside it.
        let names: Vec<_> = std::fs::read_dir(scratch.path())
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_key_others_may_read_or_a_link_is_not_taken() {
        let scratch = Scratch::new("seal-key-bad");
        let path = scratch.path().join(KEY_FILE);
        std::fs::write(&path, [0u8; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            SealKey::read(&path),
            Err(KeyError::NotOurs { why, .. }) if why.contains("readable or writable by others")
        ));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(matches!(
            SealKey::read(&path),
            Err(KeyError::Io { source, .. }) if source.raw_os_error() == Some(libc::ELOOP)
        ));
    }
}
