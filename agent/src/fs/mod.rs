//! Filesystem confinement with Landlock, at the ABI of the running kernel
//! ([`crate::kernel`]: every right up to ABI 7, Linux 6.15; scoping from
//! ABI 6, Linux 6.12; at least ABI 1, Linux 5.13). What an older ABI
//! lacks is held another way, or named as a gap the policy must accept:
//! without the truncate right (ABI < 3, Linux < 6.2) the seccomp
//! supervisor truncates for the command only beneath the writable roots
//! ([`crate::supervise::truncate`]); without the device ioctl right (ABI
//! < 5, Linux < 6.10) device files are opened only under `/dev`, where the
//! rules here name the few a run may open: the child makes every other
//! mount of its namespace `nodev`
//! ([`crate::kernel::Kernel::devices_only_in_dev`]), beneath the writable
//! roots too.
//!
//! What it enforces:
//! - **writes** (every write right of ABI 7: write, truncate, remove, make
//!   any kind of node, refer, ioctl on devices) only beneath the worktree, the
//!   run's temp dir, `fs.writable`, and the few device files a shell needs
//!   (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`, `/dev/ptmx`, and the
//!   pty on the caller's stdio — only read/write, plus `ioctl_dev`);
//! - **reads** (read file, read dir, execute) everywhere except the denied
//!   paths: the secret floor, `fs.deny_read`, and `<state>/runs` (other runs;
//!   the run's own temp dir is granted again beneath it). Landlock only
//!   allows, so a denied path is enforced by granting its siblings, on the way
//!   down from each granted root; the ancestors of a denied path get the
//!   listing right alone, so `ls /` and `find /` work. Landlock cannot take
//!   a right away beneath a rule that grants it: the denied dirs beneath are
//!   listable too (the names in `~/.ssh`, never what the files hold; an
//!   `inotify` watch there stays refused, [`crate::supervise`]). Inside a
//!   writable tree the dirs between a writable root and a denied path
//!   beneath it get no write rule of their own, so new entries cannot be made directly in them (existing entries stay
//!   writable); each run warns of such dirs before the command starts
//!   ([`Narrowed`]). A listing that fails refuses the run.
//! - **scoping**: no signals and no abstract unix socket connects to
//!   processes outside the sandbox (`Scope::Signal | Scope::AbstractUnixSocket`).
//!
//! Every right of the ABI in use is a hard requirement: a kernel that cannot
//! enforce one of them (or whose ABI is below `run.landlock_abi`) refuses
//! the run. The ruleset is
//! built here, in the parent; the child only calls `landlock_restrict_self`
//! on [`FsSandbox::ruleset_fd`] (see [`crate::sys`]).
//!
//! Not covered by Landlock (known limits, enforced elsewhere or not at all):
//! metadata changes (`chmod`, `chown`, `utimes`, `setxattr`, `removexattr`,
//! and the inode-attribute ioctls, `FS_IOC_SETFLAGS` for `chattr`, …) —
//! every mount of the run's namespace is read-only but the writable roots
//! ([`crate::sys::ReadOnlyOutside`]), so the kernel refuses them outside
//! (`EROFS`); where it cannot record those refusals, the seccomp supervisor
//! ([`crate::supervise`]) performs them for the command only beneath
//! [`FsSandbox::writable_roots`] instead. Set-id bits stay refused, but
//! set-group-ID on a directory ([`crate::seccomp::set_id_refused`]).
//! Hard links that already exist outside
//! a denied dir are not refused by Landlock, which decides by path: their
//! inodes are guarded instead ([`links`]: fanotify permission events). The
//! command cannot make one: Landlock refuses a link that would widen a
//! file's rights.

pub mod links;
mod mounts;
mod secrets;
mod walk;

pub use mounts::{empty_fs, hidden_mounts, own_filesystems, HiddenFs, OwnFs, HIDDEN_FS};
pub use secrets::{machine_secrets, masks, MachineSecret, Mask, Sealed, MACHINE_SECRETS};
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    Scope, ABI,
};
use walk::{strictly_beneath, Plan};

use crate::kernel::{Features, NoLandlock};
use crate::policy::Policy;

/// The ABI whose rights lockrun handles: the kernel's
/// ([`crate::kernel::Features::landlock`]), at most the newest lockrun knows.
fn abi() -> ABI {
    match Features::get().landlock_abi() {
        0 | 1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Whether the ABI in use scopes signals and abstract unix sockets (ABI 6).
fn scoping() -> bool {
    Features::get().landlock_abi() >= 6
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(
        "Landlock, which confines the run's writes, is not available in this kernel: {0}; lockrun will not run the command unconfined"
    )]
    Unavailable(NoLandlock),
    #[error(
        "the kernel's Landlock ABI is {have}, the policy demands {want} (use a newer kernel, or lower run.landlock_abi knowing what is lost; lockrun will not run the command with less)"
    )]
    AbiTooOld { have: i32, want: u8 },
    #[error(
        "landlock_create_ruleset: {0} (this kernel cannot enforce every filesystem right of its own ABI)"
    )]
    Ruleset(#[source] landlock::RulesetError),
    #[error("landlock_add_rule for {path}: {source}")]
    Rule {
        path: PathBuf,
        source: landlock::RulesetError,
    },
    #[error("open {path} (O_PATH|O_NOFOLLOW): {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listing {path} to deny {denied}: {source} (a deny list that cannot be built refuses the run)")]
    List {
        path: PathBuf,
        denied: PathBuf,
        source: std::io::Error,
    },
    #[error("the ruleset has no file descriptor (Landlock unsupported)")]
    NoFd,
    #[error(transparent)]
    OtherNames(#[from] links::LinksError),
    #[error(
        "the thread building the Landlock ruleset panicked (a bug in lockrun; please report it)"
    )]
    WalkPanicked,
}

/// A Landlock ruleset built in the parent, ready for `restrict_self` in the child.
#[derive(Debug)]
pub struct FsSandbox {
    ruleset: OwnedFd,
    /// What was granted, for `policy show` and debugging.
    grants: Vec<(PathBuf, Grant)>,
    /// The writable roots that exist, canonical (for the seccomp supervisor).
    writable: Vec<PathBuf>,
    /// The filesystems the run gets of its own ([`own_filesystems`]).
    own: Vec<OwnFs>,
    /// The denied-read paths, canonical.
    denied: Vec<PathBuf>,
    /// Those of them that exist, as the walk found them.
    denied_found: Vec<PathBuf>,
    /// The writable dirs that could not be granted whole.
    narrowed: Vec<Narrowed>,
    /// The listed dirs whose entries cost each run many rules.
    crowded: Vec<Crowded>,
    /// `(st_dev, st_ino)` of what may be written outside the writable roots.
    written_outside: Vec<(u64, u64)>,
}

/// The kind of rule a path received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Read,
    ReadWrite,
    Device,
    Tty,
    /// List a directory (and the directories beneath), read nothing in it: `/dev`.
    List,
    /// Write and truncate, not read: the FIFO the caller's stdio is open on
    /// for writing, reached through the read-only mount lockrun hands it on
    /// ([`crate::stdio`]), so that `> /dev/stdout` and `tee /dev/stderr`
    /// reach it as they do outside. The command can do as much through the
    /// descriptor it inherits. (A regular file open for writing reaches the
    /// command as lockrun's relay, a pipe, which needs no rule.)
    Stdio,
    /// Read, not write: the regular file or FIFO the caller's stdio is open
    /// on for reading, reached likewise, so that `/dev/stdin` reaches it as
    /// it does outside: the clone's walk up ends at the file, and none of
    /// the rules of the dirs above it holds there.
    StdioRead,
}

fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::from_read(abi())
}

fn all_rights() -> BitFlags<AccessFs> {
    AccessFs::from_all(abi())
}

/// The Landlock filesystem rights a run's ruleset handles (every right of
/// the pinned ABI), as the kernel's bits.
#[must_use]
pub fn handled_rights() -> u64 {
    all_rights().bits()
}

/// Reading a file, and nothing else, as the kernel's bits: the run's CA
/// bundle in its run dir, which the run may read and not write.
#[must_use]
pub fn read_file_rights() -> u64 {
    (all_rights() & AccessFs::ReadFile).bits()
}

/// The rights `grant` gives, as the kernel's bits.
#[must_use]
pub fn grant_rights(grant: Grant) -> u64 {
    rights(grant).bits()
}

fn rights(grant: Grant) -> BitFlags<AccessFs> {
    all_rights() & granted(grant)
}

/// What `grant` gives, of every right lockrun knows: [`rights`] keeps
/// those the ABI in use handles.
fn granted(grant: Grant) -> BitFlags<AccessFs> {
    match grant {
        Grant::Read => read_rights(),
        Grant::ReadWrite => all_rights(),
        // Terminals need their ioctls. null/zero/full have none of their own:
        // granting ioctl_dev there only keeps isatty() probes (TCGETS →
        // ENOTTY) from being logged as refusals.
        Grant::Device | Grant::Tty => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        Grant::List => AccessFs::ReadDir.into(),
        Grant::Stdio => AccessFs::WriteFile | AccessFs::Truncate,
        Grant::StdioRead => AccessFs::ReadFile.into(),
    }
}

/// What of `/dev` a run may read (besides the devices it may also write).
///
/// A run is uid 0 without capabilities, and uid 0 owns root's device nodes:
/// reading everywhere would hand it the console's screen and keystrokes
/// (`/dev/vcs*`, `/dev/tty[0-9]*`, `/dev/ttyS*`), raw disks (every file's
/// bytes, whatever the deny list), and more. So `/dev` is listable, and
/// readable only here — the set a build or a shell uses, as bubblewrap's
/// `--dev` provides. Refused elsewhere in `/dev`: EACCES. Not the machine's
/// `/dev/mqueue` (a queue's file, opened for reading, receives its
/// messages: the run has its own, [`OwnFs::MessageQueues`]) nor
/// `/dev/hugepages` (other processes' huge-page-backed memory, as files).
pub const DEV_READABLE: [&str; 13] = [
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
    "stdout", "stderr",
];

/// The devices of `/dev` a run may read, write and drive by ioctl
/// ([`Grant::Device`]).
pub const DEVICES: [&str; 3] = ["null", "zero", "full"];

/// The terminals of `/dev` a run may open ([`Grant::Tty`]), besides its own
/// in `/dev/pts` and the caller's.
pub const TERMINALS: [&str; 2] = ["tty", "ptmx"];

/// `items` outermost first (fewest path components), without any at or
/// beneath one before it: mounting over that one hides it too.
fn outermost<T>(mut items: Vec<T>, path: impl Fn(&T) -> &Path) -> Vec<T> {
    items.sort_by_key(|i| path(i).components().count());
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.iter().any(|o| path(&i).starts_with(path(o))) {
            out.push(i);
        }
    }
    out
}

/// The Landlock ABI in use ([`crate::kernel`]), or why there is none.
pub fn kernel_abi() -> Result<i32, FsError> {
    Features::get()
        .landlock
        .map(i32::from)
        .map_err(FsError::Unavailable)
}

/// Whether this kernel's Landlock is there and at least the ABI `policy`
/// demands (`run.landlock_abi`).
pub fn check_abi(policy: &Policy) -> Result<(), FsError> {
    let have = kernel_abi()?;
    if have < i32::from(policy.run.landlock_abi) {
        return Err(FsError::AbiTooOld {
            have,
            want: policy.run.landlock_abi,
        });
    }
    Ok(())
}

/// A ruleset's walk halfway: the read rules made (the walk from `/` around
/// the denied paths, nearly all of its rules), the writable roots not yet
/// ([`ReadWalk::finish`]). What a run starts before its run dir exists,
/// whose temp dir is one of those roots.
pub struct ReadWalk {
    plan: Plan,
    denied: BTreeSet<PathBuf>,
    own: Vec<OwnFs>,
    /// What [`Roots::writable_of`] is asked again once the run dir is made.
    run_tmp: PathBuf,
    runs_dir: PathBuf,
}

impl ReadWalk {
    /// The writable roots' rules, the devices' and the caller's stdio
    /// files': the ruleset done, for the `policy` the walk was begun for.
    /// `run_tmp` must exist now. Should the
    /// writable roots found now ask for other filesystems of the run's own
    /// than those the read walk left out (`run_tmp` was not canonical, so
    /// its path was not the one [`FsSandbox::begin`] judged), the whole
    /// walk is made again, as [`FsSandbox::prepare`] makes it.
    pub fn finish(self, policy: &Policy) -> Result<FsSandbox, FsError> {
        let writable = Roots::writable_of(policy, &self.run_tmp);
        if own_filesystems(&writable) != self.own {
            return FsSandbox::prepare(policy, &self.run_tmp, &self.runs_dir);
        }
        FsSandbox::complete(self.plan, writable, self.denied, self.own)
    }
}

impl FsSandbox {
    /// Build the ruleset for `policy`, with `run_tmp` writable and the rest of
    /// the state dir (other runs under `runs_dir`, other agents' dirs)
    /// unreadable; writable paths beneath it (a preset's agent dir) stay open.
    pub fn prepare(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Result<Self, FsError> {
        let roots = Roots::of(policy, run_tmp, runs_dir);
        let writable = roots.writable.clone();
        let walk = Self::walk_read(policy, run_tmp, runs_dir, roots)?;
        Self::complete(walk.plan, writable, walk.denied, walk.own)
    }

    /// [`prepare`](Self::prepare)'s walk from `/`, for a run whose temp
    /// dir is to be `run_tmp` (canonical: beneath the canonical `runs_dir`)
    /// and need not exist yet; [`ReadWalk::finish`] adds the rest once it
    /// does. Nothing of the read walk depends on the temp dir but its
    /// path: a denied path written `{tmp}/…`, and whether the run gets a
    /// filesystem of its own where it lies (a state dir on `/dev/shm`).
    pub fn begin(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Result<ReadWalk, FsError> {
        let mut roots = Roots::of(policy, run_tmp, runs_dir);
        if !roots.writable.iter().any(|w| w == run_tmp) {
            roots.writable.push(run_tmp.to_path_buf());
        }
        Self::walk_read(policy, run_tmp, runs_dir, roots)
    }

    fn walk_read(
        policy: &Policy,
        run_tmp: &Path,
        runs_dir: &Path,
        roots: Roots,
    ) -> Result<ReadWalk, FsError> {
        check_abi(policy)?;

        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all_rights());
        let ruleset = if scoping() {
            ruleset.and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        } else {
            ruleset
        };
        let ruleset: RulesetCreated = ruleset
            .and_then(Ruleset::create)
            .map_err(FsError::Ruleset)?;
        let own = own_filesystems(&roots.writable);
        let mut plan = Plan::adding_to(ruleset);
        plan.own.clone_from(&own);
        plan.grant_except(Path::new("/"), Grant::Read, &roots.denied)?;
        Ok(ReadWalk {
            plan,
            denied: roots.denied,
            own,
            run_tmp: run_tmp.to_path_buf(),
            runs_dir: runs_dir.to_path_buf(),
        })
    }

    /// The rest of [`prepare`](Self::prepare) once the read rules are in
    /// `plan`: the `writable` roots (existing, canonical) split around the
    /// `denied` paths beneath them, the devices, the caller's stdio.
    fn complete(
        mut plan: Plan,
        writable: Vec<PathBuf>,
        denied: BTreeSet<PathBuf>,
        own: Vec<OwnFs>,
    ) -> Result<Self, FsError> {
        let roots = Roots { denied, writable };
        roots.grant_writable(&mut plan)?;
        for dev in DEVICES {
            plan.push_if_exists(&Path::new("/dev").join(dev), Grant::Device)?;
        }
        for tty in TERMINALS {
            plan.push_if_exists(&Path::new("/dev").join(tty), Grant::Tty)?;
        }
        for stream in crate::stdio::Stream::ALL {
            plan.push_stdio(stream)?;
        }
        let narrowed = plan.take_narrowed();
        let crowded = plan.take_crowded();
        let fd: Option<OwnedFd> = plan.ruleset.take().and_then(Into::into);
        Ok(Self {
            ruleset: fd.ok_or(FsError::NoFd)?,
            grants: plan.grants,
            narrowed,
            crowded,
            written_outside: plan.written_outside,
            writable: roots.writable,
            own,
            denied: roots.denied.into_iter().collect(),
            denied_found: {
                let mut d = plan.denied_found;
                d.sort();
                d.dedup();
                d
            },
        })
    }

    /// The filesystems the run gets of its own, mounted by the child
    /// ([`crate::sys::OwnMount`]); the machine's where one is not listed.
    #[must_use]
    pub fn own_filesystems(&self) -> &[OwnFs] {
        &self.own
    }

    /// The ruleset's descriptor, for `landlock_restrict_self` in the child.
    #[must_use]
    pub fn ruleset_fd(&self) -> &OwnedFd {
        &self.ruleset
    }

    /// Every path that received a rule, and which.
    #[must_use]
    pub fn grants(&self) -> &[(PathBuf, Grant)] {
        &self.grants
    }

    /// The writable roots that exist (canonical): where the seccomp
    /// supervisor performs metadata changes for the command.
    #[must_use]
    pub fn writable_roots(&self) -> &[PathBuf] {
        &self.writable
    }

    /// The denied-read paths that exist, as the walk found them listing
    /// their parents (canonical; one beneath another is not listed, nor found).
    #[must_use]
    pub fn denied_found(&self) -> &[PathBuf] {
        &self.denied_found
    }

    /// The denied-read paths (canonical): nothing beneath them is writable.
    #[must_use]
    pub fn denied(&self) -> &[PathBuf] {
        &self.denied
    }

    /// `(st_dev, st_ino)` of the objects the command may write outside the
    /// writable roots: the devices, the terminals and the FIFOs the
    /// caller's stdio writes to (a rule on a file holds for its inode,
    /// whatever name reaches it); no regular file: one the caller's stdio
    /// is open on for writing reaches the command as lockrun's relay, a
    /// pipe ([`crate::stdio`]). So a regular file the command holds open
    /// for writing lies beneath a writable root, or did when it was opened.
    #[must_use]
    pub fn written_outside(&self) -> &[(u64, u64)] {
        &self.written_outside
    }

    /// The writable dirs that could not be granted whole (see [`Narrowed`]).
    #[must_use]
    pub fn narrowed(&self) -> &[Narrowed] {
        &self.narrowed
    }

    /// The dirs the walk listed that hold so many entries that granting
    /// them one by one is a noticeable part of every run's start-up.
    #[must_use]
    pub fn crowded(&self) -> &[Crowded] {
        &self.crowded
    }

    /// Give up the ruleset descriptor (moved into the child's plan).
    #[must_use]
    pub fn into_fd(self) -> OwnedFd {
        self.ruleset
    }
}

/// The roots of a run's ruleset: what is denied, and what is writable.
struct Roots {
    /// Denied paths, as written and canonical ([`canonical_set`]).
    denied: BTreeSet<PathBuf>,
    /// Writable paths that exist (canonical). Each is granted whole unless
    /// a denied path lies beneath it, whether or not it lies beneath one
    /// itself: the more specific grant wins (the run's own tmp beneath
    /// `<state>/runs`, `{state}/agents/<name>`), and the more specific
    /// denial beneath it wins again.
    writable: Vec<PathBuf>,
}

impl Roots {
    fn of(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Self {
        let mut denied: Vec<PathBuf> = Policy::secret_floor(&policy.home);
        denied.extend(policy.fs.deny_read.iter().map(|p| p.resolve(run_tmp)));
        denied.push(runs_dir.to_path_buf());
        denied.push(policy.run.state_dir.clone());
        let denied = canonical_set(&denied);
        let writable = Self::writable_of(policy, run_tmp);
        Self { denied, writable }
    }

    /// The writable roots alone, canonical: what [`ReadWalk::finish`]
    /// asks again once the temp dir exists (the denied paths it keeps
    /// from the walk).
    fn writable_of(policy: &Policy, run_tmp: &Path) -> Vec<PathBuf> {
        let mut writable = vec![policy.worktree.clone(), run_tmp.to_path_buf()];
        writable.extend(policy.fs.writable.iter().map(|p| p.resolve(run_tmp)));
        // A writable path that does not exist grants nothing (like a bind
        // of nothing).
        writable
            .iter()
            .filter_map(|w| w.canonicalize().ok())
            .collect()
    }

    /// Add the writable roots' rules: whole, or split around the denied
    /// paths beneath them (which records the dirs it lists in
    /// [`Plan::narrowed`]). Only the denied paths beneath a root count for
    /// it: one it lies in is what its grant overrides.
    fn grant_writable(&self, plan: &mut Plan) -> Result<(), FsError> {
        for root in &self.writable {
            let beneath: BTreeSet<PathBuf> = self
                .denied
                .iter()
                .filter(|d| strictly_beneath(d, root))
                .cloned()
                .collect();
            plan.grant_except(root, Grant::ReadWrite, &beneath)?;
        }
        Ok(())
    }
}

/// A writable dir that Landlock cannot grant whole, in the audit log's words.
pub use crate::audit::Narrowed;

/// `paths`, shown and joined with `, `.
fn joined(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// A directory listed on the way to a denied path that holds so many
/// entries (at least [`CROWDED_ENTRIES`]) that the rule for each, made on
/// every run, shows in the start-up: a state dir in a shared `/tmp` of
/// thousands of entries costs every run a rule for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crowded {
    pub dir: PathBuf,
    /// Its entries, each granted by a rule of its own (or skipped: a symlink,
    /// a socket).
    pub entries: usize,
    /// Its entries at or beneath which a denied path lies: what made the
    /// walk list it.
    pub toward: Vec<PathBuf>,
    /// What listing it and granting its entries took in this run (the dirs
    /// listed beneath it not included); `None` for a walk that made no rules
    /// (`policy show`).
    pub took: Option<std::time::Duration>,
}

/// From how many entries a listed dir is [`Crowded`].
pub const CROWDED_ENTRIES: usize = 1000;

impl std::fmt::Display for Crowded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{dir} holds {n} entries, and each gets a Landlock rule of its own on every run",
            dir = self.dir.display(),
            n = self.entries,
        )?;
        if let Some(took) = self.took {
            write!(f, " ({:.1} ms in this one)", took.as_secs_f64() * 1000.0)?;
        }
        write!(
            f,
            ", because denied paths lie at or beneath {toward} (Landlock only grants, so a \
             denied path's siblings are granted one by one); a state dir (--state-dir) or denied \
             path in a less crowded directory starts faster",
            toward = joined(&self.toward)
        )
    }
}

/// What the walk a run makes finds in `policy`, here, before any run: the
/// writable dirs it cannot grant whole ([`Narrowed`]) and the crowded dirs
/// it lists ([`Crowded`]). What `policy show` warns of.
#[derive(Debug, Default)]
pub struct Findings {
    pub narrowed: Vec<Narrowed>,
    pub crowded: Vec<Crowded>,
}

/// The [`Findings`] of the walk a run makes for `policy`, made without a
/// ruleset. A dir that cannot be listed ends that part of the walk here; a
/// run refuses to start then, with its reason.
#[must_use]
pub fn findings(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Findings {
    let roots = Roots::of(policy, run_tmp, runs_dir);
    let mut plan = Plan::default();
    let _ = plan.grant_except(Path::new("/"), Grant::Read, &roots.denied);
    let _ = roots.grant_writable(&mut plan);
    Findings {
        narrowed: plan.take_narrowed(),
        crowded: plan.take_crowded(),
    }
}

/// Denied paths as written and canonical (a symlinked `~/.ssh` denies its
/// target). A path that does not exist yet is canonicalized through its
/// deepest existing ancestor, so that its real parent is still split and
/// creating it later does not expose it.
fn canonical_set(paths: &[PathBuf]) -> BTreeSet<PathBuf> {
    // The secret floor is ~20 paths under the same home, most of them
    // absent: each prefix is resolved once, with one `readlink` (realpath
    // would take one per component, for every path).
    let mut resolved = std::collections::HashMap::new();
    let mut out = BTreeSet::new();
    for p in paths {
        out.insert(p.clone());
        out.insert(resolve(p, &mut resolved));
    }
    out
}

/// `path` canonical, one component at a time on its resolved parent: a
/// component that is a symlink is resolved whole (`realpath`), one that is
/// not, or is absent, stands as it is. `cache` holds every prefix resolved.
fn resolve(path: &Path, cache: &mut std::collections::HashMap<PathBuf, PathBuf>) -> PathBuf {
    if let Some(c) = cache.get(path) {
        return c.clone();
    }
    let c = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if path.is_absolute() => {
            let joined = resolve(parent, cache).join(name);
            if std::fs::read_link(&joined).is_ok() {
                // A dangling link stands for itself.
                joined.canonicalize().unwrap_or(joined)
            } else {
                joined
            }
        }
        // `/`, a path ending in `..`, or a relative one.
        _ => path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
    };
    cache.insert(path.to_path_buf(), c.clone());
    c
}

#[cfg(test)]
mod tests;
