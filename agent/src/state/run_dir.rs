//! A run's directory beneath the state dir, `<state>/runs/<id>`, with its
//! temp dir and its owner; kept for a later run when the run left it as it
//! got it, and removed otherwise.

use std::os::unix::fs::{DirBuilderExt, MetadataExt as _, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{age, new_run_id, Owner};
use crate::shown::say;
use crate::sys::rename_noreplace;

/// Why a run dir could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error(
        "creating run dir {path}: mkdir: {source} (check that --state-dir is a writable directory)"
    )]
    Make {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source} (check that --state-dir is writable)")]
    Owner {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The run's directory; removed when dropped (every path, incl. a panic).
///
/// Or kept for a later run, when the run ended with its temp dir as it got
/// it: empty, 0700, lockrun's, and nothing made, removed or changed in it
/// (its `ctime` unchanged, which any such change moves once the clock the
/// kernel stamps it by has moved past it: checked as the command starts,
/// [`RunDir::command_starts`]), and no process of the run left
/// ([`RunDir::ended`]). Most commands an agent runs (`git status`, `rg`,
/// `ls`) leave their temp dir so. Then the dir, its `owner` removed, goes to
/// `<state>/spare/` ([`SPARES`], at most [`SPARES_KEPT`]), and a run that
/// starts there takes it by a rename instead of making two directories:
/// on a filesystem mounted with `discard`, each directory made costs a
/// run's start its inode, found past the recently freed ones, and each one
/// removed costs its end its data block, freed and discarded at once. Only a spare younger than half the
/// grace period is taken: renamed into `runs/` it has no `owner` for a
/// moment, and a sweep leaves a dir that young alone without reading it
/// (a run's start sweep and `lockrun gc`, in `crate::run::gc`). `lockrun gc` removes spares older than the
/// grace period. A run cannot reach `<state>/spare` (the state dir is
/// denied to it), and a temp dir it touched is never kept.
pub struct RunDir {
    root: PathBuf,
    tmp: PathBuf,
    id: String,
    /// `<state>/spare`.
    spares: PathBuf,
    /// The temp dir as the run got it: inode, `ctime` (s, ns).
    tmp_was: (u64, i64, i64),
    /// Set by [`RunDir::command_starts`]: a change to the temp dir from
    /// then on moves its `ctime`.
    changes_show: bool,
    /// Set by [`RunDir::ended`]: no process of the run is left.
    ended: bool,
}

/// Where ended runs' dirs wait for later runs ([`RunDir`]): `<state>/spare`.
pub const SPARES: &str = "spare";

/// At most this many spare run dirs are kept.
pub const SPARES_KEPT: usize = 16;

impl RunDir {
    /// Create `<runs>/<id>/tmp` (0700, parents created) and `<runs>/<id>/owner`.
    pub fn create(runs_dir: &Path) -> Result<Self, RunDirError> {
        let id = new_run_id();
        let runs_dir = Self::make_runs_dir(runs_dir, &id)?;
        Self::create_as(&runs_dir, id, Duration::ZERO)
    }

    /// `runs_dir`, made (0700, parents too) where it is missing, and
    /// canonical: where run `id`'s dir is to go (named in the error).
    pub fn make_runs_dir(runs_dir: &Path, id: &str) -> Result<PathBuf, RunDirError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(runs_dir)
            .and_then(|()| runs_dir.canonicalize())
            .map_err(|source| RunDirError::Make {
                path: runs_dir.join(id),
                source,
            })
    }

    /// The temp dir run `id` gets beneath `runs_dir` (canonical, from
    /// [`Self::make_runs_dir`]), before [`Self::create_as`] makes it: its
    /// canonical path too, every component beneath being a new directory.
    #[must_use]
    pub fn tmp_path(runs_dir: &Path, id: &str) -> PathBuf {
        runs_dir.join(id).join("tmp")
    }

    /// Create `<runs>/<id>/tmp` (0700) and `<runs>/<id>/owner` in the
    /// canonical `runs_dir` ([`Self::make_runs_dir`]), or take a spare one
    /// younger than half of `grace` for them (see [`RunDir`]).
    pub fn create_as(runs_dir: &Path, id: String, grace: Duration) -> Result<Self, RunDirError> {
        let root = runs_dir.join(&id);
        let tmp = Self::tmp_path(runs_dir, &id);
        let spares = runs_dir.with_file_name(SPARES);
        let spare = take_spare(&spares, &root, grace);
        if !spare {
            make_private(&root)?;
        }
        // From here on the guard removes what was made.
        let mut dir = Self {
            root: root.clone(),
            tmp: tmp.clone(),
            id,
            spares,
            tmp_was: (0, 0, 0),
            changes_show: false,
            ended: false,
        };
        // A symlink whose target is the owner line: kept in the inode, it
        // costs no data block to write and none to free, as a file's
        // write and removal would. Read by `Owner::of_run_dir`.
        let owner = root.join("owner");
        std::os::unix::fs::symlink(Owner::current().to_line().trim_end(), &owner).map_err(
            |source| RunDirError::Owner {
                path: owner.clone(),
                source,
            },
        )?;
        if !spare {
            make_private(&tmp)?;
        }
        let md = std::fs::symlink_metadata(&tmp).map_err(|source| RunDirError::Make {
            path: tmp.clone(),
            source,
        })?;
        dir.tmp_was = (md.ino(), md.ctime(), md.ctime_nsec());
        Ok(dir)
    }

    /// The command is about to start: nothing of the run has touched the
    /// temp dir yet. The kernel stamps a change's `ctime` by a clock that
    /// moves a tick at a time (a few ms; longer on a busy or emulated
    /// machine): a change within the tick the dir was stamped in leaves its
    /// `ctime` as it was. Only where that clock has moved past the dir's
    /// `ctime` by now does every change of the run show, and only then may
    /// the dir be kept ([`RunDir::keep_for_later`]).
    pub fn command_starts(&mut self) {
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE);
        self.changes_show = now.is_ok_and(|t| past(t, self.tmp_was));
    }

    /// No process of the run is left (its cgroup is empty): from now on,
    /// nothing but lockrun can change the temp dir, and the dir may be
    /// kept for a later run (see [`RunDir`]).
    pub fn ended(&mut self) {
        self.ended = true;
    }

    /// Move the run dir to the spares, when the run ended with its temp dir
    /// as it got it and there is room; `false` (the dir left for removal)
    /// otherwise.
    fn keep_for_later(&self) -> bool {
        let pristine = || {
            std::fs::symlink_metadata(&self.tmp).is_ok_and(|m| {
                as_lockrun_makes(&m) && (m.ino(), m.ctime(), m.ctime_nsec()) == self.tmp_was
            }) && std::fs::read_dir(&self.tmp).is_ok_and(|mut d| d.next().is_none())
        };
        if !self.ended || !self.changes_show || !pristine() {
            return false;
        }
        let kept = match std::fs::read_dir(&self.spares) {
            Ok(d) => d.count(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if make_private(&self.spares).is_err() {
                    return false;
                }
                0
            }
            Err(_) => return false,
        };
        kept < SPARES_KEPT
            && std::fs::remove_file(self.root.join("owner")).is_ok()
            && rename_noreplace(&self.root, &self.spares.join(&self.id)).is_ok()
    }

    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    #[must_use]
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep_for_later() {
            remove_tree(&self.root);
        }
    }
}

/// Whether a temp dir is as lockrun makes one: a dir with no subdir,
/// 0700, lockrun's uid.
fn as_lockrun_makes(m: &std::fs::Metadata) -> bool {
    m.is_dir()
        && m.nlink() == 2
        && m.mode() & 0o7777 == 0o700
        && m.uid() == nix::unistd::geteuid().as_raw()
}

/// Whether the clock reading `now` lies past `ctime` (inode, s, ns).
fn past(now: nix::sys::time::TimeSpec, (_, s, ns): (u64, i64, i64)) -> bool {
    (now.tv_sec(), now.tv_nsec()) > (s, ns)
}

/// `path` made, 0700 (its parent exists): a run dir, its temp dir, the
/// spares' dir.
fn make_private(path: &Path) -> Result<(), RunDirError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|source| RunDirError::Make {
            path: path.to_path_buf(),
            source,
        })
}

/// Take a spare run dir for `root` (see [`RunDir`]): the first in `spares`
/// younger than half of `grace` whose temp dir is as lockrun leaves one
/// (0700, lockrun's uid, empty) and which no other run took first.
fn take_spare(spares: &Path, root: &Path, grace: Duration) -> bool {
    let Ok(entries) = std::fs::read_dir(spares) else {
        return false;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let spare = entry.path();
        let young =
            std::fs::symlink_metadata(&spare).is_ok_and(|m| m.is_dir() && age(&m, now) < grace / 2);
        let tmp_as_left =
            std::fs::symlink_metadata(spare.join("tmp")).is_ok_and(|m| as_lockrun_makes(&m));
        if young && tmp_as_left && rename_noreplace(&spare, root).is_ok() {
            return true;
        }
    }
    false
}

/// Remove the spare run dirs (see [`RunDir`]) older than `grace` beneath
/// `spares`; how many.
#[must_use]
pub fn remove_old_spares(spares: &Path, grace: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(spares) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| age(&m, now) >= grace) {
            remove_tree(&path);
            removed += 1;
        }
    }
    removed
}

/// Make every dir beneath `p` writable again (0700), not following symlinks.
fn open_up(p: &Path) {
    if let Ok(md) = std::fs::symlink_metadata(p) {
        if md.is_dir() {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    open_up(&e.path());
                }
            }
        }
    }
}

/// Remove a tree the command may have made unwritable (mode 000 dirs).
pub(crate) fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() {
        return;
    }
    open_up(path);
    if let Err(e) = std::fs::remove_dir_all(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            say!("lockrun: warning: removing {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run dir of a run that ended with its temp dir as it got it goes
    /// to the spares, and the next run takes it (the same temp dir, empty,
    /// 0700, the new owner); one whose temp dir was written, chmodded or
    /// had an entry made and removed, or whose command never started (the
    /// clock not known to have moved), or whose run is not known to have
    /// ended, is removed; a spare older than half the grace period is not
    /// taken, and `lockrun gc`'s removal takes those older than it.
    #[test]
    fn a_run_dir_is_kept_for_a_later_run_only_as_its_run_got_it() {
        type Touch = fn(&Path);
        let scratch = crate::testing::Scratch::new("spare");
        let base = scratch.path().to_path_buf();
        let runs = RunDir::make_runs_dir(&base.join("runs"), "x").unwrap();
        let spares = base.join(SPARES);
        let grace = Duration::from_hours(1);
        let count = |d: &Path| std::fs::read_dir(d).map_or(0, Iterator::count);
        // A run's dir, its command started once the kernel's clock has
        // moved past the temp dir's ctime (a tick; far longer under
        // emulation at times).
        let fresh = |name: &str| {
            let mut d = RunDir::create_as(&runs, name.into(), grace).unwrap();
            let ticked = || {
                let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE);
                past(now.unwrap(), d.tmp_was)
            };
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while !ticked() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            d.command_starts();
            assert!(
                d.changes_show,
                "the clock moved past the dir's ctime in 10 s"
            );
            d
        };

        // Its command never started: removed (the same holds for a
        // command started within the tick its temp dir was stamped in).
        let mut never = RunDir::create_as(&runs, "never".into(), grace).unwrap();
        never.ended();
        drop(never);
        assert_eq!((count(&runs), count(&spares)), (0, 0), "never started");

        let mut a = fresh("a");
        let ino = std::fs::metadata(a.tmp()).unwrap().ino();
        std::fs::read_dir(a.tmp()).unwrap().for_each(drop); // a listing changes nothing
        a.ended();
        drop(a);
        assert_eq!((count(&runs), count(&spares)), (0, 1), "kept");

        let mut b = fresh("b");
        let md = std::fs::metadata(b.tmp()).unwrap();
        assert_eq!(md.ino(), ino, "the spare was taken");
        assert_eq!(md.mode() & 0o7777, 0o700);
        assert_eq!(count(b.tmp()), 0);
        assert_eq!(count(&spares), 0);
        assert_eq!(Owner::of_run_dir(&runs.join("b")), Some(Owner::current()));

        // Touched in every way a run can touch it: never kept.
        let touches: [(&str, Touch); 3] = [
            ("a file made", |t| {
                std::fs::write(t.join("f"), b"x").unwrap();
            }),
            ("chmod", |t| {
                std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o700)).unwrap();
            }),
            ("an entry made and removed", |t| {
                std::fs::create_dir(t.join("d")).unwrap();
                std::fs::remove_dir(t.join("d")).unwrap();
            }),
        ];
        for (what, touch) in touches {
            touch(b.tmp());
            b.ended();
            drop(b);
            assert_eq!(
                (count(&runs), count(&spares)),
                (0, 0),
                "{what}: removed, not kept"
            );
            b = fresh("b");
        }
        // Not known to have ended (a process of the run may be left): removed.
        drop(b);
        assert_eq!((count(&runs), count(&spares)), (0, 0), "not ended");

        // Old spares: not taken, and removed by gc's pass.
        let mut c = fresh("c");
        c.ended();
        drop(c);
        assert_eq!(count(&spares), 1);
        let old = std::fs::File::open(spares.join("c")).unwrap();
        old.set_modified(std::time::SystemTime::now() - Duration::from_mins(30))
            .unwrap();
        drop(fresh("d"));
        assert_eq!(count(&spares), 1, "older than half the grace: not taken");
        assert_eq!(remove_old_spares(&spares, Duration::from_hours(1)), 0);
        assert_eq!(remove_old_spares(&spares, Duration::from_mins(20)), 1);
        assert_eq!(count(&spares), 0);
    }

    /// Only a clock reading past the temp dir's ctime shows the run's
    /// changes: one equal to it may be the tick a change is stamped in.
    #[test]
    fn only_a_clock_past_the_ctime_shows_changes() {
        let at = |s, ns| nix::sys::time::TimeSpec::new(s, ns);
        let was = (7, 100, 500);
        assert!(!past(at(100, 500), was), "the same tick");
        assert!(!past(at(99, 999_999_999), was), "a clock set back");
        assert!(past(at(100, 501), was));
        assert!(past(at(101, 0), was));
    }

    /// A run dir names its owner by a symlink; one with none, or with a
    /// target that does not parse, names none (and is reaped once old).
    #[test]
    fn a_run_dirs_owner_is_read_from_its_symlink() {
        let scratch = crate::testing::Scratch::new("owner");
        let base = scratch.path().to_path_buf();
        let runs = base.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let dir = RunDir::create(&runs).unwrap();
        let made = runs.join(dir.id());
        assert!(std::fs::symlink_metadata(made.join("owner"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(Owner::of_run_dir(&made), Some(Owner::current()));
        drop(dir);
        assert!(!made.exists());

        let other = base.join("other");
        std::fs::create_dir_all(&other).unwrap();
        assert_eq!(Owner::of_run_dir(&other), None);
        std::os::unix::fs::symlink("123 456", other.join("owner")).unwrap();
        assert_eq!(
            Owner::of_run_dir(&other),
            Some(Owner {
                pid: 123,
                start: 456
            })
        );
        std::fs::remove_file(other.join("owner")).unwrap();
        std::os::unix::fs::symlink("123 x", other.join("owner")).unwrap();
        assert_eq!(Owner::of_run_dir(&other), None);
    }
}
