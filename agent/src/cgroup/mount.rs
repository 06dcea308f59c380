//! Where the cgroup hierarchies are mounted, from `statfs` and
//! `/proc/self/mountinfo`: cgroup2 for the run's cgroup, and the v1
//! hierarchies ([`super::v1`]) where a limit's controller is only there.

use std::fs;
use std::path::PathBuf;

use super::CgroupError;

/// Where cgroup2 is mounted: one of the two usual places when `statfs`
/// says it holds cgroup2 (`/sys/fs/cgroup` on pure v2 hosts,
/// `/sys/fs/cgroup/unified` on hybrid ones), else the first cgroup2 mount
/// in `/proc/self/mountinfo` (the kernel formats every mount for a read of
/// it). Found once per process: a run asks several times.
pub fn cgroup2_mount() -> Result<PathBuf, CgroupError> {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(p) = FOUND.get() {
        return Ok(p.clone());
    }
    let usual = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|p| {
            nix::sys::statfs::statfs(*p)
                .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
        });
    let p = if let Some(p) = usual {
        PathBuf::from(p)
    } else {
        let info = fs::read_to_string("/proc/self/mountinfo").map_err(CgroupError::MountInfo)?;
        parse_cgroup2_mount(&info).ok_or(CgroupError::NoCgroup2)?
    };
    Ok(FOUND.get_or_init(|| p).clone())
}

/// The first cgroup2 mount point in a mountinfo text.
pub(super) fn parse_cgroup2_mount(info: &str) -> Option<PathBuf> {
    mounts(info).find_map(|m| (m.fstype == "cgroup2").then_some(m.at))
}

/// A mount of a mountinfo text (fields: see proc(5)).
pub(super) struct Mount<'a> {
    /// Where it is mounted.
    pub(super) at: PathBuf,
    /// The directory of its filesystem mounted there (`/` but for a bind
    /// mount of a part of it).
    pub(super) root: PathBuf,
    pub(super) fstype: &'a str,
    /// The super options.
    pub(super) options: &'a str,
}

/// Each mount of a mountinfo text.
pub(super) fn mounts(info: &str) -> impl Iterator<Item = Mount<'_>> {
    info.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let fstype = right.next()?;
        let options = right.nth(1).unwrap_or_default();
        let mut left = left.split_whitespace();
        let root = left.nth(3)?;
        let at = left.next()?;
        Some(Mount {
            at: PathBuf::from(unescape_mountinfo(at)),
            root: PathBuf::from(unescape_mountinfo(root)),
            fstype,
            options,
        })
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|oct| u8::from_str_radix(oct, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_on_hybrid_and_pure_hosts() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n";
        assert_eq!(
            parse_cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure =
            "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_cgroup2_mount(pure),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            parse_cgroup2_mount("1 0 0:1 / / rw - ext4 /dev/sda rw\n"),
            None
        );
        let escaped = "30 1 0:26 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(
            parse_cgroup2_mount(escaped),
            Some(PathBuf::from("/mnt/my cg"))
        );
    }
}
