//! A link or rename across two directories, as the refusal Landlock would
//! have logged (`fs.refer`), where it is Landlock's: below ABI 7 the run's
//! [`Refused::Refer`](super::rules::Refused::Refer) rule records every
//! `link`, `linkat`, `rename`, `renameat` and `renameat2` of the run's
//! refused with `EXDEV`, and most of those are no refusal of the run's.
//!
//! The kernel answers such a call `EXDEV` at three checks, in this order
//! (`do_linkat`, `do_renameat2`):
//! 1. **the mounts**: the old and the new name (a rename: their
//!    directories) on two mounts, `old.mnt != new.mnt`, before any
//!    security hook: every move across filesystems, and across two
//!    mounts of one (a bind mount, btrfs subvolumes mounted apart);
//! 2. **Landlock** (`security_path_link`, `security_path_rename`): a file
//!    taken from one directory to another (reparented) whose rights would
//!    grow where it goes, or where either directory lacks `fs.refer`; but
//!    `EACCES` where the call lacks another right it asks (a name made,
//!    one removed), which the [`Refused::Files`](super::rules::Refused::Files)
//!    rule records;
//! 3. **the filesystem**: overlayfs renaming a directory, btrfs linking or
//!    renaming across subvolumes of one mount, after the hook.
//!
//! So a record is Landlock's refusal where the two names are on one
//! mount (1 passed) and Landlock, asked, refuses it (3 was not reached).
//! Both are judged here, from the records and what lockrun finds now:
//! - **One mount**: each name the record gives (a link's old file and its
//!   new name's directory, a rename's two directories) is opened where
//!   lockrun sees it (`O_PATH`, in lockrun's mount namespace, which the
//!   run's copies: its own mounts are of filesystems of their own, or
//!   masks whose inode is not the one masked) and taken only if its device
//!   (its mount's, as `/proc/self/mountinfo` shows it: what kernel audit
//!   records, which a btrfs subvolume's `st_dev` is not) and inode are
//!   those the record gives; then the two mount ids
//!   (`/proc/self/fdinfo`) must be one. A name that is gone or changed,
//!   or two mounts: not Landlock's, dropped. (Not "one device with one
//!   mount": a run's masks of the machine's secrets are binds from the
//!   state dir's filesystem, the home disk's, and hosts bind their own,
//!   so that filesystem has several mounts in nearly every run.)
//! - **Landlock refuses**: its decision, for the one layer lockrun's
//!   ruleset is, from what the ruleset grants at each directory ([`Granted`]:
//!   every rule at or above it, as Landlock's walk to the root collects
//!   them): allowed where both directories hold every right the ruleset
//!   handles; else where, of the rights that matter for what is moved
//!   (a file's, or every right for a directory), the new directory grants
//!   none the old one (or the file's own rule) lacks, and both grant
//!   `fs.refer` (`blockers`). Otherwise refused, and named as Landlock's
//!   record names it: the directory that was not allowed (the old one
//!   where both were not), with every handled right it lacks, or
//!   `fs.refer` alone where only that was missing. Where Landlock
//!   allows, the `EXDEV` was the filesystem's: dropped.
//!
//! The same decision names a link or rename across two directories
//! refused with `EACCES` (`refused_eacces`): where Landlock, asked,
//! refuses it (it is asked before the permission bits are), its records
//! name each directory it refused with what it checked there: every
//! right the directory lacks where the file would gain some, else what
//! the call asks there and `fs.refer`. Where it allows it, the permission
//! bits refused, and [`super::records`] names the call as before. Such a
//! call met no mount check (that is `EXDEV`): a name not found as the
//! record gives it is taken as recorded.
//!
//! The paths are as lockrun finds them (`/proc/self/fd`: symlinks
//! resolved), as Landlock names a directory. A rename's moved file is not
//! in its records: it is judged as a file without a rule of its own
//! (lockrun's ruleset has rules on files only for the devices, the
//! caller's stdio, and the entries of a dir Landlock cannot grant whole,
//! [`crate::fs::Narrowed`], out of which a rename is refused `EACCES`).

use std::path::{Path, PathBuf};

use super::records::{Call, Ctx, DevIno, Item, Kind};
use super::Watch;

/// Landlock's filesystem rights, as its bits, and as its records name them
/// (`LANDLOCK_ACCESS_FS_*`, in their order).
pub const RIGHTS: [(u64, &str); 16] = [
    (1 << 0, "fs.execute"),
    (1 << 1, "fs.write_file"),
    (1 << 2, "fs.read_file"),
    (1 << 3, "fs.read_dir"),
    (1 << 4, "fs.remove_dir"),
    (1 << 5, "fs.remove_file"),
    (1 << 6, "fs.make_char"),
    (1 << 7, "fs.make_dir"),
    (1 << 8, "fs.make_reg"),
    (1 << 9, "fs.make_sock"),
    (1 << 10, "fs.make_fifo"),
    (1 << 11, "fs.make_block"),
    (1 << 12, "fs.make_sym"),
    (1 << 13, "fs.refer"),
    (1 << 14, "fs.truncate"),
    (1 << 15, "fs.ioctl_dev"),
];

/// `LANDLOCK_ACCESS_FS_REFER`, `_REMOVE_FILE`, `_MAKE_REG`.
const REFER: u64 = 1 << 13;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_REG: u64 = 1 << 8;

/// The rights that apply to a file (Landlock's `ACCESS_FILE`): execute,
/// write, read, truncate, ioctl on a device.
const FILE_RIGHTS: u64 = 1 | 1 << 1 | 1 << 2 | 1 << 14 | 1 << 15;

/// `renameat2`'s `RENAME_EXCHANGE`; `linkat`'s `AT_SYMLINK_FOLLOW`.
const RENAME_EXCHANGE: u64 = 2;
const AT_SYMLINK_FOLLOW: u64 = 0x400;

/// What the run's Landlock ruleset grants, by path: the rights (Landlock's
/// bits) of the rule on each path that has one, and every right the
/// ruleset handles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    pub handled: u64,
    pub rules: Vec<(PathBuf, u64)>,
}

impl Granted {
    /// The rights granted at `path`: those of the rules at it and above
    /// it, which Landlock's walk to the root collects (one layer).
    #[must_use]
    pub fn at(&self, path: &Path) -> u64 {
        self.rules
            .iter()
            .filter(|(p, _)| path.starts_with(p))
            .fold(0, |r, (_, rights)| r | rights)
            & self.handled
    }

    /// The rights of the rule on `path` itself, if it has one.
    fn own(&self, path: &Path) -> u64 {
        self.rules
            .iter()
            .filter(|(p, _)| p == path)
            .fold(0, |r, (_, rights)| r | rights)
            & self.handled
    }
}

/// A file as lockrun finds it now ([`super::records::Look::found`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its mount's device (as kernel audit records it) and its inode.
    pub dev_ino: DevIno,
    /// Its mount's id.
    pub mount: u64,
    /// Its path, symlinks resolved.
    pub path: PathBuf,
}

/// Landlock's names of the rights in `bits`, in its order.
#[must_use]
pub fn names(bits: u64) -> Vec<String> {
    RIGHTS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

/// The refusal a link or rename refused with `EXDEV` was, if it was
/// Landlock's (see the module's docs): the directories Landlock's records
/// name, each with the rights it names there. `None` for the kernel's own
/// refusal of a move across mounts, the filesystem's, and a call whose
/// names cannot be found as the record gives them.
pub(super) fn refused(call: Call, ctx: &Ctx<'_>, watch: &Watch) -> Option<Vec<Named>> {
    let moved = moved(call, ctx, watch, true)?;
    // Two mounts: the kernel's refusal, before Landlock was asked.
    if moved.mounts.0 != moved.mounts.1 {
        return None;
    }
    named(&moved, watch)
}

/// What Landlock's records name for a link or rename across two
/// directories refused with `EACCES`, where Landlock refuses it: the
/// directories it names, each with the rights it names there (the name
/// made or removed, and `fs.refer`; every right the file would gain
/// where it would gain some). `None` where Landlock allows it (the
/// permission bits refused), or within one directory, which Landlock
/// judges by the name made and removed alone ([`super::records`] names
/// those).
pub(super) fn refused_eacces(call: Call, ctx: &Ctx<'_>, watch: &Watch) -> Option<Vec<Named>> {
    named(&moved(call, ctx, watch, false)?, watch)
}

/// A directory a record names, with the rights it names there.
pub(super) type Named = (String, Vec<String>);

/// Landlock's records of `moved`, if it refuses it: the old directory's,
/// then the new one's. None for a move within one directory.
fn named(moved: &Moved, watch: &Watch) -> Option<Vec<Named>> {
    if moved.from == moved.to {
        return None;
    }
    let granted = &watch.granted;
    let (old, new) = blockers(
        Rights {
            from: granted.at(&moved.from),
            child: moved.child,
            to: granted.at(&moved.to),
            handled: granted.handled,
        },
        moved.asked,
        moved.dir,
        moved.exchange,
    )?;
    let record = |dir: &Path, bits| (dir.to_string_lossy().into_owned(), names(bits));
    let mut records = Vec::new();
    if old != 0 {
        records.push(record(&moved.from, old));
    }
    if new != 0 {
        records.push(record(&moved.to, new));
    }
    Some(records)
}

/// The directories a link or rename moves a file between, from its
/// records: each name found where lockrun sees it with the device and
/// inode the record gives ([`Found`]); where one is not and `strict` is
/// not asked, the name as the record gives it, on no mount known.
fn moved(call: Call, ctx: &Ctx<'_>, watch: &Watch, strict: bool) -> Option<Moved> {
    // The path, and the mount, of `item`: found, or as recorded.
    let locate = |item: &Item<'_>, dirfd: Option<usize>, follow: bool| -> Option<(PathBuf, u64)> {
        match found(ctx, item, dirfd, follow) {
            Some(f) => Some((f.path, f.mount)),
            None if strict => None,
            None => Some((ctx.path(item, dirfd)?.into(), 0)),
        }
    };
    match call {
        Call::Link {
            old_dirfd,
            new_dirfd,
            flags,
        } => {
            let (_, old) = ctx.first(Kind::Normal)?;
            let (_, new) = ctx.first(Kind::Parent)?;
            let follow = flags.is_some_and(|i| (ctx.arg)(i) & AT_SYMLINK_FOLLOW != 0);
            let (file, file_mount) = locate(old, old_dirfd, follow)?;
            let (to, to_mount) = locate(new, new_dirfd, true)?;
            let made = old
                .mode
                .map_or(MAKE_REG, |m| right(super::records::made_as(m)));
            Some(Moved {
                from: file.parent()?.to_path_buf(),
                to,
                // A rule on a file grants it a file's rights only.
                child: watch.granted.own(&file) & FILE_RIGHTS,
                dir: old.is_dir() == Some(true),
                mounts: (file_mount, to_mount),
                asked: (0, made),
                exchange: false,
            })
        }
        Call::Rename {
            old_dirfd,
            new_dirfd,
            flags,
        } => {
            let parents: Vec<&Item<'_>> = ctx
                .items
                .iter()
                .filter(|i| i.kind == Kind::Parent)
                .collect();
            let [a, b] = parents.as_slice() else {
                return None;
            };
            let (old, new) = if super::records::RENAME_NEW_FIRST {
                (*b, *a)
            } else {
                (*a, *b)
            };
            let (from, from_mount) = locate(old, old_dirfd, true)?;
            let (to, to_mount) = locate(new, new_dirfd, true)?;
            let exchange = flags.is_some_and(|i| (ctx.arg)(i) & RENAME_EXCHANGE != 0);
            // Judged as a file's (see the module's docs); an exchange
            // makes and removes one in each.
            let both = REMOVE_FILE | MAKE_REG;
            Some(Moved {
                from,
                to,
                child: 0,
                dir: false,
                mounts: (from_mount, to_mount),
                asked: if exchange {
                    (both, both)
                } else {
                    (REMOVE_FILE, MAKE_REG)
                },
                exchange,
            })
        }
        _ => None,
    }
}

/// A file moved (linked or renamed) from one directory to another, as
/// found.
struct Moved {
    from: PathBuf,
    to: PathBuf,
    /// The rights of the file's own rule.
    child: u64,
    /// Whether it is a directory.
    dir: bool,
    /// The mounts of the old and the new name (0: not known).
    mounts: (u64, u64),
    /// The rights the call asks of the old and the new directory, but
    /// `fs.refer`: a name removed, one made.
    asked: (u64, u64),
    /// `RENAME_EXCHANGE`: each goes where the other was.
    exchange: bool,
}

/// The path of `item`, named relative to the descriptor in argument
/// `dirfd`, found as the record gives it.
fn found(ctx: &Ctx<'_>, item: &Item<'_>, dirfd: Option<usize>, follow: bool) -> Option<Found> {
    let want = item.dev_ino?;
    let path = ctx.path(item, dirfd)?;
    ctx.look.found(&path, follow).filter(|f| f.dev_ino == want)
}

/// The bit of the right Landlock names `name`.
fn right(name: &str) -> u64 {
    RIGHTS
        .iter()
        .find(|(_, n)| *n == name)
        .map_or(0, |(bit, _)| *bit)
}

/// What the ruleset grants where a file is moved: at its old directory,
/// by its own rule, at its new directory; and every right it handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rights {
    pub from: u64,
    pub child: u64,
    pub to: u64,
    pub handled: u64,
}

/// Landlock's decision on moving a file (a directory if `dir`; each way,
/// if `exchange`) between two directories of one mount, for one layer
/// (`current_check_refer_path`, `is_access_to_paths_allowed`,
/// `no_more_access`), the call asking `asked` of the old and the new
/// directory besides `fs.refer`: `None` where Landlock allows it; else the
/// rights its records name at the old directory and at the new one (0: no
/// record there).
///
/// - Both directories hold every handled right: allowed.
/// - Else, where the new directory grants no right the old one (with the
///   file's own rule) lacks, of those that matter for what is moved (a
///   file's rights; every right for a directory), and, for an exchange,
///   the other way too, only what the call asks is checked, `fs.refer`
///   with it: each directory lacking some is named with those.
/// - Else (the file would gain a right): refused, and each directory not
///   holding every handled right is named with each it lacks.
///
/// Landlock answers `EACCES` where a right asked but `fs.refer` lacks,
/// `EXDEV` where only `fs.refer` or the file's gain refused it.
pub(super) fn blockers(
    r: Rights,
    asked: (u64, u64),
    dir: bool,
    exchange: bool,
) -> Option<(u64, u64)> {
    let full = |g: u64| g & r.handled == r.handled;
    if full(r.from) && full(r.to) {
        return None;
    }
    let compared = if dir {
        r.handled
    } else {
        FILE_RIGHTS & r.handled
    };
    let gains = |from: u64, to: u64| to & compared & !from != 0;
    let no_more = !(gains(r.from | r.child, r.to) || exchange && gains(r.to, r.from));
    let (old, new) = if no_more {
        let lacks = |asked: u64, g: u64| (asked | REFER) & r.handled & !g;
        (lacks(asked.0, r.from), lacks(asked.1, r.to))
    } else {
        let lacks = |g: u64| if full(g) { 0 } else { r.handled & !g };
        (lacks(r.from), lacks(r.to))
    };
    (old | new != 0).then_some((old, new))
}

/// The mount's device of the mount `id` in `mountinfo`
/// (`/proc/self/mountinfo`'s text): its third field, `major:minor`.
#[must_use]
pub fn mount_dev(mountinfo: &str, id: u64) -> Option<(u32, u32)> {
    mountinfo.lines().find_map(|line| {
        let mut f = line.split(' ');
        (f.next()?.parse::<u64>().ok()? == id).then_some(())?;
        let (major, minor) = f.nth(1)?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

#[cfg(test)]
mod tests;
