//! A refused call's kernel audit records, as the filesystem refusal
//! Landlock would have logged: the process (`SYSCALL`'s pid and comm), the
//! path (a `PATH` item, joined with `CWD`), and the access in Landlock's
//! words, derived from the call and its arguments:
//!
//! | call | path | access |
//! |---|---|---|
//! | `open`, `openat`, `creat` of a file that is there | the file | by `O_ACCMODE`: `fs.read_file` (`fs.read_dir` for a directory or `O_DIRECTORY`), `fs.write_file`; `fs.truncate` with `O_TRUNC` |
//! | the same, `O_CREAT`, of a file that is not | its directory | `fs.make_reg` |
//! | `O_TMPFILE` | the directory | `fs.make_reg` |
//! | `mkdir(at)` | its directory | `fs.make_dir` |
//! | `mknod(at)` | its directory | by the mode: `fs.make_reg`, `fs.make_char`, `fs.make_block`, `fs.make_fifo`, `fs.make_sock` |
//! | `symlink(at)` | its directory | `fs.make_sym` |
//! | `unlink`, `unlinkat`; `rmdir`, `unlinkat(AT_REMOVEDIR)` | its directory | `fs.remove_file`; `fs.remove_dir` |
//! | `link`, `linkat`, `rename`, `renameat`, `renameat2` across two directories that Landlock refuses, as the run's ruleset decides it ([`super::refer`]) | each directory Landlock's records name, the source's first: one event each | where the file would gain rights: every right the ruleset handles that the directory lacks; else what the call asks there that it lacks, with `fs.refer` (a rename is judged as of a file) |
//! | the same refused with `EXDEV` (the run's `Refer` rule) | only on one mount, where Landlock refuses ([`super::refer`]); any other is left out | as above: `fs.refer` alone where the file would gain none |
//! | `rename`, `renameat`, `renameat2` Landlock allows (the permission bits refused), or within one directory | the directory outside the writable paths (the source's, when both are) | `fs.remove_file` in the source's, `fs.make_reg` in the target's (both when it is one) |
//! | `link`, `linkat` likewise | the new name's directory | by the file's type: `fs.make_reg`, `fs.make_sym`, … |
//! | `execve`, `execveat` | the file | `fs.execute` |
//! | `truncate`; `ftruncate` | the file; the descriptor's file | `fs.truncate` |
//! | `ioctl` | the descriptor's file | `fs.ioctl_dev` |
//! | `fchmod`, `fchown`, `fsetxattr`, `fremovexattr` | the descriptor's file | `metadata.chmod`, `metadata.chown`, `metadata.setxattr`, `metadata.removexattr` |
//! | any other call that named a file | the file (or its directory) | `syscall.<number>` |
//!
//! The calls that change a file's metadata by its name (`chmod`,
//! `fchmodat(2)`, `chown`, `lchown`, `fchownat`, `utime(s)`, `futimesat`,
//! `utimensat`, `(l)setxattr`, `setxattrat`, `(l)removexattr`,
//! `removexattrat`) are in the table as the supervisor names them
//! (`metadata.chmod`, …) for a refusal by a read-only mount ([`read_only`]);
//! Landlock has no right for them, so kernel audit's `EACCES` of one is a
//! directory's on the way (its permission bits), and stays named by its
//! number.
//!
//! `access` and `faccessat(2)` ask, and are not refusals; a call that named
//! no file (no `PATH` item) is not a filesystem refusal. Both are left out.
//! A call whose `PATH` records did not all come (lost on their way, which
//! the reader tells, or left out by a host rule of the filesystem list) is
//! kept without its path, and, for an open, a rename or a link, whose
//! access hangs on what the kernel found, named by its number; refused
//! with `EXDEV`, it cannot be told from a move across mounts, and is left
//! out.
//!
//! A rename's records name both directories, in the order the kernel
//! copied the two names in (`do_renameat2(…, getname(oldname), …,
//! getname(newname), …)`: the order its compiler evaluates the arguments
//! in). The distributions' kernels, built with GCC, copy the new name
//! first, and that is the order read here ([`RENAME_NEW_FIRST`]); the
//! directory named is chosen by the run's writable paths, not by the
//! order, so a kernel that copied them the other way would swap only
//! `fs.remove_file` and `fs.make_reg`.

use std::path::Path;

use super::super::kernel::AuditRecord;
use super::super::FsEvent;
use super::refer::Found;
use super::Watch;

const SYSCALL: u16 = 1300;
const PATH: u16 = 1302;
const CWD: u16 = 1307;

/// The kernel names a rename's new name first (see the module's docs).
pub const RENAME_NEW_FIRST: bool = true;

/// A device (major, minor) and inode number.
pub type DevIno = (u32, u32, u64);

/// Where, as a process sees it: a path from its root, or one beneath a
/// descriptor it holds (empty: the descriptor's file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At<'a> {
    Root(&'a str),
    Fd(i32, &'a str),
}

/// What the reader asks of a refusal's process, which may still run, and
/// of the process it aimed at.
pub trait Look {
    /// Where descriptor `fd` of process `pid` leads, as it names it.
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String>;
    /// The device and inode at `at`, as process `pid` sees it.
    fn dev_ino(&self, pid: u32, at: &At<'_>) -> Option<DevIno>;
    /// The name (`comm`) of process `pid`.
    fn comm(&self, _pid: u32) -> Option<String> {
        None
    }
    /// The process the pidfd `fd` of process `pid` refers to.
    fn pidfd_pid(&self, _pid: u32, _fd: i32) -> Option<u32> {
        None
    }
    /// The cgroups of process `pid` (`/proc/<pid>/cgroup`).
    fn cgroups(&self, _pid: u32) -> Option<String> {
        None
    }
    /// The working directory of process (or thread) `pid`, while it runs.
    fn cwd(&self, _pid: u32) -> Option<String> {
        None
    }
    /// The file at `path` as lockrun finds it now, in its own mount
    /// namespace: its mount's device and its inode, its mount, its path
    /// with symlinks resolved (the last one only if `follow`).
    fn found(&self, _path: &str, _follow: bool) -> Option<Found> {
        None
    }
}

/// [`Look`] through `/proc/<pid>`: `fd/<n>` and `root/`, which follow the
/// process's own descriptors and mounts; `comm`, `fdinfo/<n>`, `cgroup`.
pub struct Proc;

impl Look for Proc {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        let p = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        let p = p.to_string_lossy();
        (p.starts_with('/') && !p.ends_with(" (deleted)")).then(|| p.into_owned())
    }

    fn dev_ino(&self, pid: u32, at: &At<'_>) -> Option<DevIno> {
        use std::os::unix::fs::MetadataExt as _;
        let path = match at {
            At::Root(p) => format!("/proc/{pid}/root{p}"),
            At::Fd(fd, "") => format!("/proc/{pid}/fd/{fd}"),
            At::Fd(fd, rel) => format!("/proc/{pid}/fd/{fd}/{rel}"),
        };
        let m = std::fs::metadata(path).ok()?;
        let dev = m.dev();
        Some((
            nix::sys::stat::major(dev) as u32,
            nix::sys::stat::minor(dev) as u32,
            m.ino(),
        ))
    }

    fn comm(&self, pid: u32) -> Option<String> {
        let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        Some(c.trim_end_matches('\n').to_owned())
    }

    fn pidfd_pid(&self, pid: u32, fd: i32) -> Option<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|p| p.trim().parse().ok())
    }

    fn cgroups(&self, pid: u32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
    }

    fn cwd(&self, pid: u32) -> Option<String> {
        let p = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        let p = p.to_string_lossy();
        (p.starts_with('/') && !p.ends_with(" (deleted)")).then(|| p.into_owned())
    }

    fn found(&self, path: &str, follow: bool) -> Option<Found> {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | nofollow)
            .open(path)
            .ok()?;
        let ino = file.metadata().ok()?.ino();
        let fd = file.as_raw_fd();
        let mount: u64 = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))
            .and_then(|m| m.trim().parse().ok())?;
        let at = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        let shown = at.to_string_lossy();
        if !shown.starts_with('/') || shown.ends_with(" (deleted)") {
            return None;
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (major, minor) = super::refer::mount_dev(&mountinfo, mount)?;
        Some(Found {
            dev_ino: (major, minor, ino),
            mount,
            path: at,
        })
    }
}

/// The kind of a `PATH` item (`nametype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The file the call named.
    Normal,
    /// The directory a name is made in or removed from.
    Parent,
    /// Any other (`DELETE`, `CREATE`, `UNKNOWN`: a name not looked up).
    Other,
}

/// One `PATH` item.
#[derive(Debug)]
pub(super) struct Item<'a> {
    /// As the kernel printed it: the name given, its directory part (with
    /// the slash) for a parent, or the working directory for a parent
    /// named by its last component alone.
    name: Option<&'a str>,
    pub(super) kind: Kind,
    pub(super) mode: Option<u32>,
    pub(super) dev_ino: Option<DevIno>,
}

impl<'a> Item<'a> {
    fn of(r: &'a AuditRecord) -> Self {
        let f = |k: &str| r.fields.get(k).map(String::as_str);
        let dev = f("dev").and_then(|d| {
            let (maj, min) = d.split_once(':')?;
            Some((
                u32::from_str_radix(maj, 16).ok()?,
                u32::from_str_radix(min, 16).ok()?,
            ))
        });
        let ino = f("inode").and_then(|i| i.parse::<u64>().ok());
        Self {
            name: f("name").filter(|n| *n != "(null)" && !n.is_empty()),
            kind: match f("nametype") {
                Some("NORMAL") => Kind::Normal,
                Some("PARENT") => Kind::Parent,
                _ => Kind::Other,
            },
            mode: f("mode").and_then(|m| u32::from_str_radix(m, 8).ok()),
            dev_ino: dev.zip(ino).map(|((maj, min), ino)| (maj, min, ino)),
        }
    }

    pub(super) fn is_dir(&self) -> Option<bool> {
        self.mode.map(|m| m & libc::S_IFMT == libc::S_IFDIR)
    }
}

/// The calls whose refusal is named in Landlock's words; the argument
/// (index) holding each name's directory descriptor, where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// `flags`: the argument holding the open's flags, or the flags.
    Open {
        flags: Flags,
        dirfd: Option<usize>,
    },
    /// `mkdir(at)` (`fs.make_dir`), `symlink(at)` (`fs.make_sym`).
    Make {
        access: &'static str,
        dirfd: Option<usize>,
    },
    Mknod {
        mode: usize,
        dirfd: Option<usize>,
    },
    /// `flags`: the argument holding `unlinkat`'s flags; `dir`: `rmdir`.
    Remove {
        dirfd: Option<usize>,
        flags: Option<usize>,
        dir: bool,
    },
    /// `flags`: the argument holding `renameat2`'s flags.
    Rename {
        old_dirfd: Option<usize>,
        new_dirfd: Option<usize>,
        flags: Option<usize>,
    },
    /// `flags`: the argument holding `linkat`'s flags.
    Link {
        old_dirfd: Option<usize>,
        new_dirfd: Option<usize>,
        flags: Option<usize>,
    },
    Exec {
        dirfd: Option<usize>,
    },
    Truncate,
    /// A call on a descriptor (argument 0): `ftruncate`, `ioctl`, and the
    /// metadata changes `fchmod`, `fchown`, `fsetxattr`, `fremovexattr`.
    OnFd {
        access: &'static str,
    },
    /// A change of the metadata of the file a call names (`chmod`, …, see
    /// the module's docs), relative to the descriptor in argument `dirfd`;
    /// a call that names no path there (`utimensat(fd, NULL, …)`) is on
    /// that descriptor.
    Meta {
        access: &'static str,
        dirfd: Option<usize>,
    },
    /// `access`, `faccessat`, `faccessat2`: a question, not a refusal.
    Query,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flags {
    Arg(usize),
    Fixed(u64),
}

impl Flags {
    /// The flags of a call whose arguments are `arg`.
    pub(super) fn of(self, arg: &dyn Fn(usize) -> u64) -> u64 {
        match self {
            Self::Arg(i) => arg(i),
            Self::Fixed(f) => f,
        }
    }
}

impl Call {
    #[allow(clippy::too_many_lines)] // one arm per call, in one table
    fn of(nr: i64) -> Self {
        use lockrun_seccomp::{SYS_FCHMODAT2, SYS_REMOVEXATTRAT, SYS_SETXATTRAT};
        use Call::{
            Exec, Link, Make, Meta, Mknod, OnFd, Open, Other, Query, Remove, Rename, Truncate,
        };
        const CHMOD: &str = "metadata.chmod";
        const CHOWN: &str = "metadata.chown";
        const UTIMES: &str = "metadata.utimes";
        const SETXATTR: &str = "metadata.setxattr";
        const REMOVEXATTR: &str = "metadata.removexattr";
        match nr {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => Open {
                flags: Flags::Arg(1),
                dirfd: None,
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => Open {
                flags: Flags::Fixed((libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64),
                dirfd: None,
            },
            libc::SYS_openat => Open {
                flags: Flags::Arg(2),
                dirfd: Some(0),
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mkdir => Make {
                access: "fs.make_dir",
                dirfd: None,
            },
            libc::SYS_mkdirat => Make {
                access: "fs.make_dir",
                dirfd: Some(0),
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_symlink => Make {
                access: "fs.make_sym",
                dirfd: None,
            },
            libc::SYS_symlinkat => Make {
                access: "fs.make_sym",
                dirfd: Some(1),
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mknod => Mknod {
                mode: 1,
                dirfd: None,
            },
            libc::SYS_mknodat => Mknod {
                mode: 2,
                dirfd: Some(0),
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_unlink => Remove {
                dirfd: None,
                flags: None,
                dir: false,
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rmdir => Remove {
                dirfd: None,
                flags: None,
                dir: true,
            },
            libc::SYS_unlinkat => Remove {
                dirfd: Some(0),
                flags: Some(2),
                dir: false,
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rename => Rename {
                old_dirfd: None,
                new_dirfd: None,
                flags: None,
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_renameat => Rename {
                old_dirfd: Some(0),
                new_dirfd: Some(2),
                flags: None,
            },
            libc::SYS_renameat2 => Rename {
                old_dirfd: Some(0),
                new_dirfd: Some(2),
                flags: Some(4),
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_link => Link {
                old_dirfd: None,
                new_dirfd: None,
                flags: None,
            },
            libc::SYS_linkat => Link {
                old_dirfd: Some(0),
                new_dirfd: Some(2),
                flags: Some(4),
            },
            libc::SYS_execve => Exec { dirfd: None },
            libc::SYS_execveat => Exec { dirfd: Some(0) },
            libc::SYS_truncate => Truncate,
            libc::SYS_ftruncate => OnFd {
                access: "fs.truncate",
            },
            libc::SYS_ioctl => OnFd {
                access: "fs.ioctl_dev",
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_access => Query,
            libc::SYS_faccessat | libc::SYS_faccessat2 => Query,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod => Meta {
                access: CHMOD,
                dirfd: None,
            },
            libc::SYS_fchmodat | SYS_FCHMODAT2 => Meta {
                access: CHMOD,
                dirfd: Some(0),
            },
            libc::SYS_fchmod => OnFd { access: CHMOD },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chown | libc::SYS_lchown => Meta {
                access: CHOWN,
                dirfd: None,
            },
            libc::SYS_fchownat => Meta {
                access: CHOWN,
                dirfd: Some(0),
            },
            libc::SYS_fchown => OnFd { access: CHOWN },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_utime | libc::SYS_utimes => Meta {
                access: UTIMES,
                dirfd: None,
            },
            #[cfg(target_arch = "x86_64")]
            libc::SYS_futimesat => Meta {
                access: UTIMES,
                dirfd: Some(0),
            },
            libc::SYS_utimensat => Meta {
                access: UTIMES,
                dirfd: Some(0),
            },
            libc::SYS_setxattr | libc::SYS_lsetxattr => Meta {
                access: SETXATTR,
                dirfd: None,
            },
            SYS_SETXATTRAT => Meta {
                access: SETXATTR,
                dirfd: Some(0),
            },
            libc::SYS_fsetxattr => OnFd { access: SETXATTR },
            libc::SYS_removexattr | libc::SYS_lremovexattr => Meta {
                access: REMOVEXATTR,
                dirfd: None,
            },
            SYS_REMOVEXATTRAT => Meta {
                access: REMOVEXATTR,
                dirfd: Some(0),
            },
            libc::SYS_fremovexattr => OnFd {
                access: REMOVEXATTR,
            },
            _ => Other,
        }
    }

    /// The call as kernel audit's `EACCES` of it is named: a metadata
    /// change by name as any other call (Landlock has no right for it; a
    /// directory's permission bits on the way refused it).
    fn for_eacces(self) -> Self {
        match self {
            Call::Meta { .. } => Call::Other,
            c => c,
        }
    }
}

/// A field of a record.
fn field<'a>(r: &'a AuditRecord, key: &str) -> Option<&'a str> {
    r.fields.get(key).map(String::as_str)
}

/// The filesystem refusal told by one event's records (`group`, one
/// serial), if it is a refused call of the watched run: a `SYSCALL` of
/// its login uid, this build's architecture and `exit=-13` (`EACCES`)
/// that named a file, or `exit=-18` (`EXDEV`) of a link or rename that
/// Landlock refused ([`super::refer`]); none for any other. One event,
/// or, for a link or rename across two directories that Landlock
/// refused, one for each it names, as its own records do.
pub(in crate::audit) fn refusal(
    group: &[AuditRecord],
    watch: &Watch,
    look: &dyn Look,
) -> Vec<FsEvent> {
    refusals(group, watch, look).unwrap_or_default()
}

fn refusals(group: &[AuditRecord], watch: &Watch, look: &dyn Look) -> Option<Vec<FsEvent>> {
    let sys = group.iter().find(|r| r.ty == SYSCALL)?;
    let login_uid = watch.login_uid.to_string();
    let arch = format!("{:x}", super::rules::ARCH);
    if field(sys, "auid") != Some(login_uid.as_str()) || field(sys, "arch") != Some(arch.as_str()) {
        return None;
    }
    let exdev = match field(sys, "exit") {
        Some("-13") => false,
        Some("-18") => true,
        _ => return None,
    };
    let nr: i64 = field(sys, "syscall")?.parse().ok()?;
    let arg = |i: usize| {
        field(sys, &format!("a{i}"))
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .unwrap_or(0)
    };
    let pid: u32 = field(sys, "pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let items_named = field(sys, "items")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let cwd = group
        .iter()
        .find(|r| r.ty == CWD)
        .and_then(|r| field(r, "cwd"));
    let mut paths: Vec<&AuditRecord> = group.iter().filter(|r| r.ty == PATH).collect();
    paths.sort_by_key(|r| field(r, "item").and_then(|i| i.parse::<u32>().ok()));
    let items: Vec<Item<'_>> = paths.iter().map(|r| Item::of(r)).collect();
    let call = Call::of(nr).for_eacces();
    if call == Call::Query || (items_named == 0 && !matches!(call, Call::OnFd { .. })) {
        return None;
    }
    // Fewer PATH records than the call named: some were lost on their way
    // (an overflow, which the reader tells), or a host rule of the
    // filesystem list left them out. The call was refused all the same;
    // its path is not named, nor an access that hangs on what it found.
    let incomplete = items.len() < items_named;
    let ctx = Ctx {
        items: &items,
        cwd,
        pid,
        arg: &arg,
        look,
    };
    // A link or rename across two directories that Landlock refused, as
    // its records name it; with EXDEV, Landlock's only where its names
    // were all read and are found ([`super::refer`]).
    let refer = if exdev {
        if incomplete {
            return None;
        }
        Some(super::refer::refused(call, &ctx, watch)?)
    } else if incomplete {
        None
    } else {
        super::refer::refused_eacces(call, &ctx, watch)
    };
    let named: Vec<(Option<String>, Vec<String>)> = if let Some(named) = refer {
        named.into_iter().map(|(p, a)| (Some(p), a)).collect()
    } else {
        let (path, access) = judged(call, &ctx, &watch.writable);
        let found_decides = matches!(
            call,
            Call::Open { .. } | Call::Rename { .. } | Call::Link { .. }
        );
        let (path, access) = if incomplete {
            (None, if found_decides { Vec::new() } else { access })
        } else {
            (path, access)
        };
        let access = if access.is_empty() {
            vec![format!("syscall.{nr}")]
        } else {
            access.into_iter().map(str::to_owned).collect()
        };
        vec![(path, access)]
    };
    let raw: Vec<&str> = group
        .iter()
        .filter(|r| matches!(r.ty, SYSCALL | CWD | PATH))
        .map(|r| r.text.as_str())
        .collect();
    let raw = raw.join("\n");
    let comm = field(sys, "comm").unwrap_or_default();
    Some(
        named
            .into_iter()
            .map(|(path, access)| FsEvent {
                pid,
                comm: comm.to_owned(),
                path,
                access,
                raw: raw.clone(),
                other_name_of: None,
                errno: None,
            })
            .collect(),
    )
}

/// Where a call of kind `call` was refused, and what it asked there, in
/// Landlock's words (none where they do not say).
fn judged(
    call: Call,
    ctx: &Ctx<'_>,
    writable: &[std::path::PathBuf],
) -> (Option<String>, Vec<&'static str>) {
    let arg = ctx.arg;
    match call {
        Call::Open { flags, dirfd } => {
            let flags = flags.of(arg);
            open(ctx, flags, dirfd)
        }
        Call::Make { access, dirfd } => (ctx.parent(dirfd), vec![access]),
        Call::Mknod { mode, dirfd } => (ctx.parent(dirfd), vec![made_as(arg(mode) as u32)]),
        Call::Remove { dirfd, flags, dir } => {
            let dir = dir || flags.is_some_and(|i| arg(i) & libc::AT_REMOVEDIR as u64 != 0);
            (
                ctx.parent(dirfd),
                vec![if dir {
                    "fs.remove_dir"
                } else {
                    "fs.remove_file"
                }],
            )
        }
        Call::Rename {
            old_dirfd,
            new_dirfd,
            ..
        } => rename(ctx, old_dirfd, new_dirfd, writable),
        Call::Link { new_dirfd, .. } => {
            let made = ctx
                .first(Kind::Normal)
                .and_then(|(_, i)| i.mode)
                .map_or("fs.make_reg", made_as);
            (ctx.parent(new_dirfd), vec![made])
        }
        Call::Exec { dirfd } => (ctx.file(dirfd), vec!["fs.execute"]),
        Call::Truncate => (ctx.file(None), vec!["fs.truncate"]),
        Call::OnFd { access } => (ctx.look.fd_path(ctx.pid, arg(0) as i32), vec![access]),
        Call::Meta { access, dirfd } => (ctx.file(dirfd), vec![access]),
        Call::Query | Call::Other => (ctx.any(), Vec::new()),
    }
}

/// One refused call's items and how to find its paths.
pub(super) struct Ctx<'a> {
    pub(super) items: &'a [Item<'a>],
    cwd: Option<&'a str>,
    pid: u32,
    pub(super) arg: &'a dyn Fn(usize) -> u64,
    pub(super) look: &'a dyn Look,
}

impl Ctx<'_> {
    /// The first item of `kind`, with its place.
    pub(super) fn first(&self, kind: Kind) -> Option<(usize, &Item<'_>)> {
        self.items.iter().enumerate().find(|(_, i)| i.kind == kind)
    }

    /// The path of the first parent item (the directory a name is made in
    /// or removed from), the name relative to the descriptor in argument
    /// `dirfd`.
    fn parent(&self, dirfd: Option<usize>) -> Option<String> {
        let (_, item) = self.first(Kind::Parent)?;
        self.path(item, dirfd)
    }

    /// The path of the file the call named: its first normal item, or the
    /// first of any kind.
    fn file(&self, dirfd: Option<usize>) -> Option<String> {
        let item = self
            .first(Kind::Normal)
            .map(|(_, i)| i)
            .or_else(|| self.items.first())?;
        self.path(item, dirfd)
    }

    /// The file, or else its directory, or else any item named.
    fn any(&self) -> Option<String> {
        let item = self
            .first(Kind::Normal)
            .or_else(|| self.first(Kind::Parent))
            .map(|(_, i)| i)
            .or_else(|| self.items.first())?;
        // Which argument held its descriptor is not known: only a name
        // that needs none is named.
        let name = item.name?;
        (name.starts_with('/') || self.cwd.is_some()).then_some(())?;
        self.path(item, None)
    }

    /// `item`'s path: as printed when absolute, else joined with the
    /// working directory, or, when the call named a directory descriptor
    /// in argument `dirfd`, found through it (see [`through_fd`]).
    pub(super) fn path(&self, item: &Item<'_>, dirfd: Option<usize>) -> Option<String> {
        let name = item.name?;
        let fd = dirfd
            .map(|i| (self.arg)(i) as i32)
            .filter(|fd| *fd != libc::AT_FDCWD);
        match fd {
            Some(fd) => through_fd(item, name, fd, self.pid, self.look),
            None if name.starts_with('/') => Some(clean(name)),
            None => Some(clean(&format!("{}/{name}", self.cwd?))),
        }
    }
}

/// The path of `item`, named relative to descriptor `fd` of process
/// `pid`: the descriptor's path joined with the name, taken only where
/// the device and inode found there are the item's (the process may have
/// closed it, or used its number again, since). For a parent named by its
/// last component alone the kernel printed the working directory; the
/// directory is the descriptor's. An item with no inode (a name not
/// found) is taken as it comes.
fn through_fd(item: &Item<'_>, name: &str, fd: i32, pid: u32, look: &dyn Look) -> Option<String> {
    let base = || look.fd_path(pid, fd);
    let mut candidates: Vec<(String, At<'_>)> = Vec::new();
    if item.kind == Kind::Parent && !name.ends_with('/') {
        candidates.push((base()?, At::Fd(fd, "")));
    } else if name.starts_with('/') {
        candidates.push((clean(name), At::Root(name)));
    } else {
        candidates.push((clean(&format!("{}/{name}", base()?)), At::Fd(fd, name)));
    }
    let Some(want) = item.dev_ino else {
        return candidates.into_iter().next().map(|(p, _)| p);
    };
    candidates
        .into_iter()
        .find(|(_, at)| look.dev_ino(pid, at) == Some(want))
        .map(|(p, _)| p)
}

/// An open's refusal: of the file, when it is there (by its flags), else
/// the making of it in its directory (`O_CREAT`).
fn open(ctx: &Ctx<'_>, flags: u64, dirfd: Option<usize>) -> (Option<String>, Vec<&'static str>) {
    let tmpfile = libc::O_TMPFILE as u64;
    if flags & tmpfile == tmpfile {
        return (ctx.file(dirfd), vec!["fs.make_reg"]);
    }
    if let Some((_, file)) = ctx.first(Kind::Normal) {
        return (ctx.path(file, dirfd), opened_as(flags, file.is_dir()));
    }
    if flags & libc::O_CREAT as u64 != 0 && ctx.first(Kind::Parent).is_some() {
        return (ctx.parent(dirfd), vec!["fs.make_reg"]);
    }
    (ctx.file(dirfd), opened_as(flags, None))
}

/// What an open with `flags` asks of a file (a directory if `dir`).
fn opened_as(flags: u64, dir: Option<bool>) -> Vec<&'static str> {
    if flags & libc::O_PATH as u64 != 0 {
        return Vec::new();
    }
    let dir = dir == Some(true) || flags & libc::O_DIRECTORY as u64 != 0;
    let acc = flags & libc::O_ACCMODE as u64;
    let mut access = Vec::new();
    if acc == libc::O_RDONLY as u64 || acc == libc::O_RDWR as u64 {
        access.push(if dir { "fs.read_dir" } else { "fs.read_file" });
    }
    if acc == libc::O_WRONLY as u64 || acc == libc::O_RDWR as u64 {
        access.push("fs.write_file");
    }
    if flags & libc::O_TRUNC as u64 != 0 && !dir {
        access.push("fs.truncate");
    }
    access
}

/// What making a file of `mode` (its type bits) asks of its directory.
pub(super) fn made_as(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "fs.make_dir",
        libc::S_IFCHR => "fs.make_char",
        libc::S_IFBLK => "fs.make_block",
        libc::S_IFIFO => "fs.make_fifo",
        libc::S_IFSOCK => "fs.make_sock",
        libc::S_IFLNK => "fs.make_sym",
        _ => "fs.make_reg",
    }
}

/// A rename's refusal: of its two directories (see the module's docs for
/// their order), the first of the source's and the target's outside the
/// writable paths, or the source's when neither is, with what the rename
/// removes from it or makes in it; both when they are one.
fn rename(
    ctx: &Ctx<'_>,
    old_dirfd: Option<usize>,
    new_dirfd: Option<usize>,
    writable: &[std::path::PathBuf],
) -> (Option<String>, Vec<&'static str>) {
    let parents: Vec<&Item<'_>> = ctx
        .items
        .iter()
        .filter(|i| i.kind == Kind::Parent)
        .collect();
    let (old, new) = match parents.as_slice() {
        [a, b, ..] if RENAME_NEW_FIRST => (*b, *a),
        [a, b, ..] => (*a, *b),
        [one] => (*one, *one),
        [] => return (ctx.any(), vec!["fs.remove_file", "fs.make_reg"]),
    };
    let old = ctx.path(old, old_dirfd);
    let new = ctx.path(new, new_dirfd);
    if old.is_some() && old == new {
        return (old, vec!["fs.remove_file", "fs.make_reg"]);
    }
    let outside = |p: &Option<String>| {
        p.as_deref()
            .is_some_and(|p| !writable.iter().any(|w| Path::new(p).starts_with(w)))
    };
    if !outside(&old) && outside(&new) {
        (new, vec!["fs.make_reg"])
    } else {
        (old, vec!["fs.remove_file"])
    }
}

/// A path with `.`, `..` and repeated or trailing slashes taken out, as
/// written (a `..` after a symlink is not followed).
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

pub mod read_only;
#[cfg(test)]
mod tests;
