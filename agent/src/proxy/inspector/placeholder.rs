//! A secret's placeholder: the value's length and shape, its prefix kept
//! (`sk-ant-api03-`, `ghp_`, `github_pat_`: up to and including the last
//! `-` or `_` within the first 16 bytes), each letter after it a random
//! letter of the same case, each digit a random digit, every other byte
//! kept. Random from the kernel's CSPRNG, so unique per run; never the
//! value, nor inside or around another secret's value or placeholder.

use std::io::Read;

/// The fewest random positions a placeholder must have: fewer, and it
/// could be guessed, or occur by chance.
pub const LEAST_RANDOM: usize = 8;

/// The longest prefix kept as it is.
const PREFIX_WITHIN: usize = 16;

/// Why a value cannot be hidden behind a placeholder. Never holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("the value holds a byte that is not printable ASCII (a space, a control character or non-ASCII); lockrun only hides tokens")]
    NotPrintable,
    #[error("the value is too short to hide: {0} letters or digits after its prefix, fewer than {LEAST_RANDOM}")]
    TooShort(usize),
    #[error("no placeholder distinct from the run's other secrets could be made")]
    NoDistinct,
    #[error("the kernel's random numbers could not be read: {0}")]
    Random(String),
}

/// How many leading bytes of `value` are kept.
#[must_use]
pub fn prefix_len(value: &[u8]) -> usize {
    value
        .iter()
        .take(PREFIX_WITHIN)
        .rposition(|&b| b == b'-' || b == b'_')
        .map_or(0, |i| i + 1)
}

/// A placeholder for `value`, distinct from every slice in `taken` (and
/// neither inside one nor holding one).
pub fn make(value: &[u8], taken: &[&[u8]]) -> Result<Vec<u8>, Unfit> {
    if value.iter().any(|&b| !(0x21..=0x7e).contains(&b)) {
        return Err(Unfit::NotPrintable);
    }
    let keep = prefix_len(value);
    let random = value[keep..]
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .count();
    if random < LEAST_RANDOM {
        return Err(Unfit::TooShort(random));
    }
    let mut urandom =
        std::fs::File::open("/dev/urandom").map_err(|e| Unfit::Random(e.to_string()))?;
    for _ in 0..16 {
        let p = shaped(value, keep, &mut urandom)?;
        let clashes = p == value
            || taken
                .iter()
                .any(|t| !t.is_empty() && (holds(t, &p) || holds(&p, t)));
        if !clashes {
            return Ok(p);
        }
    }
    Err(Unfit::NoDistinct)
}

fn holds(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}

/// One draw: `value`'s shape after its first `keep` bytes.
fn shaped(value: &[u8], keep: usize, random: &mut impl Read) -> Result<Vec<u8>, Unfit> {
    let mut out = value[..keep].to_vec();
    let mut pool = [0u8; 64];
    let mut at = pool.len();
    // A uniform draw below `n` (rejecting the bytes that would bias it).
    let mut draw = |n: u8| -> Result<u8, Unfit> {
        let limit = 256 - 256 % u16::from(n);
        loop {
            if at == pool.len() {
                random
                    .read_exact(&mut pool)
                    .map_err(|e| Unfit::Random(e.to_string()))?;
                at = 0;
            }
            let b = pool[at];
            at += 1;
            if u16::from(b) < limit {
                return Ok(b % n);
            }
        }
    };
    for &b in &value[keep..] {
        out.push(match b {
            b'a'..=b'z' => b'a' + draw(26)?,
            b'A'..=b'Z' => b'A' + draw(26)?,
            b'0'..=b'9' => b'0' + draw(10)?,
            other => other,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn the_shape_and_prefix_are_kept() {
        let v = b"sk-ant-api03-AbCdEfGh12345678_xyz-Q";
        let p = make(v, &[]).unwrap();
        assert_eq!(p.len(), v.len());
        assert!(p.starts_with(b"sk-ant-api03-"));
        assert_ne!(&p[..], &v[..]);
        for (a, b) in v.iter().zip(&p) {
            assert_eq!(a.is_ascii_lowercase(), b.is_ascii_lowercase());
            assert_eq!(a.is_ascii_uppercase(), b.is_ascii_uppercase());
            assert_eq!(a.is_ascii_digit(), b.is_ascii_digit());
            if !a.is_ascii_alphanumeric() {
                assert_eq!(a, b);
            }
        }
        assert_eq!(prefix_len(b"ghp_abcdefghijklmnop"), 4);
        assert_eq!(prefix_len(b"github_pat_11ABCDEFG_xyz"), 11);
        assert_eq!(prefix_len(b"abcdefghijklmnopq_rs"), 0);
        assert!(make(b"ghp_abcdefghijklmnop", &[])
            .unwrap()
            .starts_with(b"ghp_"));
    }

    #[test]
    fn placeholders_differ_run_to_run() {
        let v = b"ghp_0123456789abcdefABCDEF";
        let a = make(v, &[]).unwrap();
        let b = make(v, &[]).unwrap();
        assert_ne!(a, b, "two draws of 22 random positions");
    }

    #[test]
    fn unfit_values_are_refused_without_saying_them() {
        assert_eq!(make(b"sk-abc1234", &[]), Err(Unfit::TooShort(7)));
        assert_eq!(make(b"abc def ghi jkl", &[]), Err(Unfit::NotPrintable));
        assert_eq!(
            make("ключключключ".as_bytes(), &[]),
            Err(Unfit::NotPrintable)
        );
        let e = make(b"hunter2-----x", &[]).unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_taken_value_is_never_drawn() {
        // Eight binary-ish positions would clash often: digits only, one
        // taken per draw, still never returned.
        let v = b"00000000";
        let mut taken: Vec<Vec<u8>> = vec![v.to_vec()];
        for _ in 0..50 {
            let refs: Vec<&[u8]> = taken.iter().map(Vec::as_slice).collect();
            let p = make(v, &refs).unwrap();
            assert!(!taken.contains(&p));
            taken.push(p);
        }
    }
}
