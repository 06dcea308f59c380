//! The walk from each granted root down to the denied paths: what it
//! grants, lists and finds ([`Plan`]), entry by entry ([`Entry`]).

use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use landlock::{AccessFs, PathBeneath, RulesetCreated, RulesetCreatedAttr};

use super::{abi, rights, Crowded, FsError, Grant, Narrowed, OwnFs, CROWDED_ENTRIES, DEV_READABLE};
use crate::stdio::{Access, Handling, Kind, Stream};
use crate::sys::supervisor_calls::openat2;

/// The walk's findings. With a ruleset, each rule goes into it as soon as its
/// path is opened, and the descriptor is closed at once: a listed dir may
/// hold thousands of entries (a shared `/tmp` above a state dir), more than
/// a 1024-descriptor limit.
#[derive(Default)]
pub(super) struct Plan {
    /// Where the rules go; `None` when only the findings are wanted.
    pub(super) ruleset: Option<RulesetCreated>,
    /// Every path that received a rule, and which.
    pub(super) grants: Vec<(PathBuf, Grant)>,
    /// The writable dirs listed instead of granted whole, in walk order.
    pub(super) narrowed: Vec<Narrowed>,
    /// The listed dirs of at least [`CROWDED_ENTRIES`] entries.
    pub(super) crowded: Vec<Crowded>,
    /// The time spent listing dirs and granting their entries, so far.
    pub(super) listed: std::time::Duration,
    /// `(st_dev, st_ino)` of every object granted a write right outside the
    /// writable roots (devices, terminals, the FIFOs the caller's stdio
    /// writes to).
    pub(super) written_outside: Vec<(u64, u64)>,
    /// The machine's filesystems there get no rule: the run has its own.
    pub(super) own: Vec<OwnFs>,
    /// The denied paths the walk found in the dirs it listed: those that exist.
    pub(super) denied_found: Vec<PathBuf>,
}

impl Plan {
    pub(super) fn adding_to(ruleset: RulesetCreated) -> Self {
        Self {
            ruleset: Some(ruleset),
            ..Self::default()
        }
    }

    /// The dirs the walk listed in writable roots, by path, each once.
    pub(super) fn take_narrowed(&mut self) -> Vec<Narrowed> {
        let mut n = std::mem::take(&mut self.narrowed);
        n.sort_by(|a, b| a.dir.cmp(&b.dir));
        n.dedup_by(|a, b| a.dir == b.dir);
        n
    }

    /// The crowded dirs, each once: a dir listed by both the read walk and
    /// a writable root's costs both times.
    pub(super) fn take_crowded(&mut self) -> Vec<Crowded> {
        let mut merged: Vec<Crowded> = Vec::new();
        for c in std::mem::take(&mut self.crowded) {
            match merged.iter_mut().find(|m| m.dir == c.dir) {
                Some(m) => {
                    m.took = match (m.took, c.took) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                    m.toward.extend(c.toward);
                    m.toward.sort();
                    m.toward.dedup();
                }
                None => merged.push(c),
            }
        }
        merged
    }

    /// Open `path` without following a final symlink and add a rule.
    /// Returns false (and adds nothing) for a symlink: a rule on a symlink
    /// that pointed into a denied dir would grant that dir.
    pub(super) fn push(&mut self, path: &Path, grant: Grant) -> Result<bool, FsError> {
        self.push_known(&Entry::by_path(path), grant)
    }

    /// [`push`](Self::push) for an entry of the walk, opened in the
    /// directory that listed it, with the type the listing gave (no `fstat`
    /// of ours then). Should the entry have been swapped since the listing:
    /// to a symlink, the rule is on the link's own inode (opened
    /// `O_NOFOLLOW`), which no access walks through; from a file to a
    /// directory, it gets the file rights only; to a directory from a
    /// symlink or file's stale type "directory" on a non-directory, the
    /// kernel refuses the rule and the run.
    ///
    /// A socket gets no rule: none of the rights of ABI 7 applies to one
    /// (`open` of a socket fails whatever the rights, `connect` is not a
    /// Landlock right there), and a `/tmp` of a shared machine holds
    /// thousands.
    pub(super) fn push_known(&mut self, entry: &Entry<'_>, grant: Grant) -> Result<bool, FsError> {
        use nix::dir::Type;
        use std::os::unix::fs::FileTypeExt as _;
        if matches!(entry.kind, Some(Type::Symlink | Type::Socket)) {
            return Ok(false);
        }
        let file = entry.open(libc::O_PATH | libc::O_NOFOLLOW)?;
        let is_dir = if let Some(kind) = entry.kind {
            kind == Type::Directory
        } else {
            let ft = file
                .metadata()
                .map_err(|source| FsError::Open {
                    path: entry.path.to_path_buf(),
                    source,
                })?
                .file_type();
            if ft.is_symlink() || ft.is_socket() {
                return Ok(false);
            }
            ft.is_dir()
        };
        self.add(entry.path, &file, grant, is_dir)?;
        Ok(true)
    }

    /// Add the rule for `file` (opened `O_PATH`), shown as `path`.
    pub(super) fn add(
        &mut self,
        path: &Path,
        file: &std::fs::File,
        grant: Grant,
        is_dir: bool,
    ) -> Result<(), FsError> {
        if let Some(ruleset) = self.ruleset.take() {
            let mut access = rights(grant);
            if !is_dir {
                access &= AccessFs::from_file(abi());
            }
            self.ruleset = Some(
                ruleset
                    .add_rule(PathBeneath::new(file.as_fd(), access))
                    .map_err(|source| FsError::Rule {
                        path: path.to_path_buf(),
                        source,
                    })?,
            );
        }
        if matches!(grant, Grant::Device | Grant::Tty | Grant::Stdio) {
            use std::os::unix::fs::MetadataExt as _;
            let st = file.metadata().map_err(|source| FsError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            self.written_outside.push((st.dev(), st.ino()));
        }
        self.grants.push((path.to_path_buf(), grant));
        Ok(())
    }

    /// The caller's stdio descriptor `stream`, as the command gets it
    /// ([`crate::stdio`]): the same file, reached through the read-only
    /// mount lockrun hands it on, where the walk up from it ends at the
    /// file itself; so it is granted by its inode, reached through the
    /// descriptor (`/proc/self/fd/N`: the same inode, whatever its name
    /// now). Its pty ([`Grant::Tty`], `/dev/pts/N`, also named
    /// `/dev/console` inside); the FIFO it is open on for writing
    /// ([`Grant::Stdio`]); the regular file or FIFO it is open on for
    /// reading ([`Grant::StdioRead`]). Nothing else: a pipe or socket needs
    /// no rule, a regular file open for writing reaches the command as
    /// lockrun's relay (a pipe), a device is not granted by the caller's
    /// redirection, nor a directory, whose rule would hold beneath it, in
    /// the machine's namespace too.
    pub(super) fn push_stdio(&mut self, stream: Stream) -> Result<(), FsError> {
        let Ok(Some(d)) = crate::stdio::describe(stream) else {
            return Ok(()); // closed, or nothing to reach it by
        };
        if d.handling() != Handling::Reopened {
            return Ok(());
        }
        if d.name.starts_with("/dev/pts/") {
            if self.grants.iter().any(|(p, _)| *p == d.name) {
                return Ok(()); // the same terminal on another descriptor
            }
            return self.push_if_exists(&d.name, Grant::Tty);
        }
        let grants = match (d.kind, d.access) {
            (Kind::Regular, Access::Read) => vec![Grant::StdioRead],
            (Kind::Fifo, access) => [
                access.reads().then_some(Grant::StdioRead),
                access.writes().then_some(Grant::Stdio),
            ]
            .into_iter()
            .flatten()
            .collect(),
            _ => return Ok(()),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(format!("/proc/self/fd/{}", stream.fd().as_raw_fd()))
            .map_err(|source| FsError::Open {
                path: d.name.clone(),
                source,
            })?;
        for grant in grants {
            // The same file or FIFO on another descriptor, as open.
            if !self.grants.iter().any(|(p, g)| *p == d.name && *g == grant) {
                self.add(&d.name, &file, grant, false)?;
            }
        }
        Ok(())
    }

    /// Queue a rule for a fixed system path (a device), following symlinks
    /// (`/dev/ptmx` is often `pts/ptmx`); absent ones are skipped.
    pub(super) fn push_if_exists(&mut self, path: &Path, grant: Grant) -> Result<(), FsError> {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        match self.push(&path, grant) {
            Err(FsError::Open { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) =>
            {
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }

    /// Grant `grant` beneath `root`, except beneath every path of `denied`:
    /// a root with no denied path beneath it gets one rule; otherwise it is
    /// listed and each entry handled the same way (denied entries get nothing).
    pub(super) fn grant_except(
        &mut self,
        root: &Path,
        grant: Grant,
        denied: &BTreeSet<PathBuf>,
    ) -> Result<(), FsError> {
        self.grant_except_known(&Entry::by_path(root), grant, denied)
    }

    /// [`grant_except`](Self::grant_except) for an entry of the walk.
    pub(super) fn grant_except_known(
        &mut self,
        entry: &Entry<'_>,
        grant: Grant,
        denied: &BTreeSet<PathBuf>,
    ) -> Result<(), FsError> {
        use std::os::unix::ffi::OsStrExt as _;
        let root = entry.path;
        // By bytes: the set's own lookup compares paths component by
        // component, and the walk asks for every entry it lists.
        if denied
            .iter()
            .any(|d| d.as_os_str().as_bytes() == root.as_os_str().as_bytes())
        {
            self.denied_found.push(root.to_path_buf());
            return Ok(());
        }
        // The machine's /proc is out of sight (its processes are the
        // point): the run's own is granted in the child.
        if root == OwnFs::Processes.path() && self.own.contains(&OwnFs::Processes) {
            return Ok(());
        }
        if grant == Grant::Read && root == Path::new("/dev") {
            // Listable, and readable only where DEV_READABLE says.
            self.push(root, Grant::List)?;
            for name in DEV_READABLE {
                let dev = root.join(name);
                // The machine's /dev/shm and /dev/pts are out of sight, also
                // through /proc/<pid>/root: the run's own are granted in
                // the child.
                if self.own.iter().any(|o| o.path() == dev) {
                    continue;
                }
                // Other processes' terminals (uid 0 owns root's) must not be
                // opened for reading, which would take their keystrokes:
                // the machine's /dev/pts is listable only; the caller's own
                // terminal is granted by its inode (`push_stdio`).
                let grant = if dev == OwnFs::Terminals.path() {
                    Grant::List
                } else {
                    grant
                };
                match self.grant_except(&dev, grant, denied) {
                    Err(FsError::Open { source, .. })
                        if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) => {}
                    r => r?,
                }
            }
            return Ok(());
        }
        let Some(inner) = denied.iter().find(|d| strictly_beneath(d, root)) else {
            self.push_known(entry, grant)?;
            return Ok(());
        };
        let list_error = |source| FsError::List {
            path: root.to_path_buf(),
            denied: inner.clone(),
            source,
        };
        // The directory itself, not what a symlink there points to: the
        // listing and every rule beneath are taken through this descriptor,
        // so a path swapped meanwhile cannot redirect them.
        let dir = match entry.open(libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
            Ok(dir) => dir,
            // A file (or symlink) cannot hold the denied path: grant it as
            // any other entry (a symlink gets nothing). Something made there
            // later is a new inode, without a rule.
            Err(FsError::Open { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) =>
            {
                self.push_known(
                    &Entry {
                        kind: None,
                        ..*entry
                    },
                    grant,
                )?;
                return Ok(());
            }
            // Vanished since its parent was listed: the caller's to judge.
            Err(FsError::Open { path, source }) if source.raw_os_error() == Some(libc::ENOENT) => {
                return Err(FsError::Open { path, source });
            }
            Err(FsError::Open { source, .. }) => return Err(list_error(source)),
            Err(e) => return Err(e),
        };
        if grant == Grant::Read {
            // Listable, as every dir is outside the run: Landlock cannot
            // take a right away beneath a rule that grants it, so this one
            // also lets the denied entries beneath be listed (their names,
            // never what they hold), which the read walk could only avoid
            // by refusing `ls /`, `ls ~` and `find /` in every run.
            self.add(root, &dir, Grant::List, true)?;
        }
        if grant == Grant::ReadWrite {
            self.narrowed.push(Narrowed {
                dir: root.to_path_buf(),
                denied: denied
                    .iter()
                    .filter(|d| strictly_beneath(d, root))
                    .cloned()
                    .collect(),
            });
        }
        let opener = dir.try_clone().map_err(list_error)?;
        let mut listing =
            nix::dir::Dir::from(dir).map_err(|e| list_error(std::io::Error::from(e)))?;
        let (started, listed_before, mut entries) =
            (std::time::Instant::now(), self.listed, 0usize);
        for item in listing.iter() {
            let item = item.map_err(|e| list_error(std::io::Error::from(e)))?;
            let name = item.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            entries += 1;
            let child = root.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let child = Entry {
                path: &child,
                at: Some((opener.as_fd(), name)),
                kind: item.file_type(),
            };
            match self.grant_except_known(&child, grant, denied) {
                // Vanished between listing and opening: nothing to grant.
                Err(FsError::Open { source, .. })
                    if source.raw_os_error() == Some(libc::ENOENT) => {}
                r => r?,
            }
        }
        self.note_listed(root, entries, denied, started, listed_before);
        Ok(())
    }

    /// Account for a listed dir: its own time (the dirs listed beneath it
    /// count for themselves), and a [`Crowded`] finding if it held at least
    /// [`CROWDED_ENTRIES`] entries.
    pub(super) fn note_listed(
        &mut self,
        root: &Path,
        entries: usize,
        denied: &BTreeSet<PathBuf>,
        started: std::time::Instant,
        listed_before: std::time::Duration,
    ) {
        use std::os::unix::ffi::OsStrExt as _;
        let total = started.elapsed();
        let took = total.saturating_sub(self.listed.saturating_sub(listed_before));
        self.listed = listed_before + total;
        if entries < CROWDED_ENTRIES {
            return;
        }
        let prefix = root.as_os_str().as_bytes().len();
        let mut toward: Vec<PathBuf> = denied
            .iter()
            .filter(|d| strictly_beneath(d, root))
            .filter_map(|d| {
                let rest = d.as_os_str().as_bytes().get(prefix..)?;
                let name = rest.strip_prefix(b"/").unwrap_or(rest);
                let name = name.split(|b| *b == b'/').next()?;
                Some(root.join(std::ffi::OsStr::from_bytes(name)))
            })
            .collect();
        toward.sort();
        toward.dedup();
        self.crowded.push(Crowded {
            dir: root.to_path_buf(),
            entries,
            toward,
            took: self.ruleset.is_some().then_some(took),
        });
    }
}

/// A path the walk grants or lists: by its absolute path, or as an entry of
/// the directory that listed it (opened there, by name), with the type the
/// listing gave, if any.
#[derive(Clone, Copy)]
pub(super) struct Entry<'a> {
    pub(super) path: &'a Path,
    pub(super) at: Option<(std::os::fd::BorrowedFd<'a>, &'a std::ffi::CStr)>,
    pub(super) kind: Option<nix::dir::Type>,
}

impl<'a> Entry<'a> {
    pub(super) fn by_path(path: &'a Path) -> Self {
        Self {
            path,
            at: None,
            kind: None,
        }
    }

    /// Open the entry itself with `flags` (and `O_CLOEXEC`).
    pub(super) fn open(&self, flags: libc::c_int) -> Result<std::fs::File, FsError> {
        let opened = match self.at {
            Some((dir, name)) => openat2(dir, name, flags, 0).map(Into::into),
            None => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags | libc::O_CLOEXEC)
                .open(self.path),
        };
        opened.map_err(|source| FsError::Open {
            path: self.path.to_path_buf(),
            source,
        })
    }
}

/// Whether `path` lies strictly beneath `dir`, by bytes (both absolute and
/// canonical, as the walk's paths are): `Path::starts_with` parses both into
/// components, and the walk asks this for every entry and every denied path.
pub(super) fn strictly_beneath(path: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let d = d.strip_suffix(b"/").unwrap_or(d);
    p.len() > d.len() + 1 && p.starts_with(d) && p[d.len()] == b'/'
}
