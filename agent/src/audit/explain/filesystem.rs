//! What `lockrun audit` suggests for a filesystem refusal (the nearest
//! directory to make writable, or why not), and for a reach outside the
//! run, which nothing allows.

use std::path::{Path, PathBuf};

use super::{DenySource, FsContext, Suggestion};
use crate::audit::{FsEvent, ScopeTarget};
use crate::policy::runs_later;

const READ_RIGHTS: &[&str] = &["fs.read_file", "fs.read_dir", "fs.execute"];

/// Whether any refused right is more than reading (writing, creating,
/// removing, renaming, truncating, device ioctls).
fn is_write(access: &[String]) -> bool {
    access.iter().any(|a| !READ_RIGHTS.contains(&a.as_str()))
}

/// A reach outside the run is never allowed: a run is a box around its
/// processes, and lockrun has no option to open it.
#[must_use]
pub fn suggest_scope(target: &ScopeTarget) -> Suggestion {
    let what = match target {
        ScopeTarget::Signal { .. } => "signal a process",
        ScopeTarget::AbstractUnixSocket { .. } => "connect to an abstract unix socket",
        ScopeTarget::Ptrace { .. } => "trace or inspect a process (its memory, environment, files)",
    };
    Suggestion::Never {
        reason: format!(
            "a run may not {what} outside it (Landlock); no policy allows it. Start the \
             other process inside the same run, or talk to it through a pathname socket in the \
             worktree or the run's temp dir."
        ),
    }
}

/// The line that would allow a filesystem refusal, or why there is none.
#[must_use]
pub fn suggest_fs(ev: &FsEvent, ctx: &FsContext, is_dir: &dyn Fn(&Path) -> bool) -> Suggestion {
    let Some(raw) = ev.path.as_deref() else {
        return Suggestion::Explain {
            reason: format!(
                "the kernel did not name the path; the raw record may say more: {}",
                ev.raw
            ),
        };
    };
    if let Some(denied) = &ev.other_name_of {
        return Suggestion::Explain {
            reason: format!(
                "{raw} is another name (a hard link) of {denied}, which is denied: Landlock \
                 decides by path, so lockrun guards the file itself and refuses the run every \
                 name of it outside its writable roots. Remove the link if it need not exist \
                 (`find / -xdev -samefile {denied}` lists its names), or give the command a copy."
            ),
        };
    }
    let path = Path::new(raw);
    let deny = ctx.deny_entry_for(path);
    if !is_write(&ev.access) {
        if deny.is_none() && ev.access.iter().all(|a| a == "fs.read_dir") {
            if let Some(below) = ctx.deny_entry_below(path) {
                return listed_above(raw, below);
            }
        }
        return refused_read(raw, deny);
    }
    if let Some((entry, source)) = deny {
        return Suggestion::Warn {
            reason: format!(
                "{raw} is under the deny-read entry {} ({}); lockrun will not suggest making it \
                 writable.",
                entry.display(),
                source.said()
            ),
        };
    }
    if let Some(state) = ctx.state_dir_for(path) {
        return Suggestion::Warn {
            reason: format!(
                "{raw} is inside lockrun's state dir {}; point the program at the worktree or \
                 its temp dir ({{tmp}}) instead.",
                state.display()
            ),
        };
    }
    // Creating, removing or linking is checked on the directory, and that is
    // the path Landlock names (audit/kernel/); other rights name the file.
    let names_dir = ev
        .access
        .iter()
        .any(|a| a.starts_with("fs.make_") || a.starts_with("fs.remove_") || a == "fs.refer");
    if let Some(n) = ctx.narrowed.iter().find(|n| names_dir && n.dir == path) {
        let denied: Vec<String> = n.denied.iter().map(|d| d.display().to_string()).collect();
        return Suggestion::Never {
            reason: format!(
                "{raw} is writable but holds the denied {}: Landlock cannot grant it whole, so no \
                 policy line lets a command create, remove or rename directly in it. Have the \
                 command work in a subdirectory, or move what must not be read out of the \
                 writable dir and drop its deny-read entry.",
                denied.join(", ")
            ),
        };
    }
    let dir = if names_dir || is_dir(path) {
        path.to_path_buf()
    } else {
        path.parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    };
    if let Some(warning) = not_to_open(&dir, raw, &ctx.home) {
        return warning;
    }
    let in_policy = match dir.strip_prefix(&ctx.home) {
        Ok(rel) if !ctx.home.as_os_str().is_empty() => format!("{{home}}/{}", rel.display()),
        _ => dir.display().to_string(),
    };
    Suggestion::Allow {
        policy: format!("[filesystem]\nwritable = [{}]", toml_string(&in_policy)),
        flag: Some(format!("--allow-write {}", dir.display())),
        note: link_note(ev, &dir),
    }
}

/// `s` as a TOML string, quoted and escaped as a policy file needs it: a
/// path the run chose may hold a quote, a backslash or a newline.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Why a refused read is not suggested, or what would allow it, by the
/// deny-read entry it lies under (if any).
fn refused_read(raw: &str, deny: Option<&(PathBuf, DenySource)>) -> Suggestion {
    match deny {
        Some((entry, DenySource::SecretFloor)) => Suggestion::Never {
            reason: format!(
                "{raw} is under {}, one of the secrets lockrun always denies; no policy can \
                 open it. Give the command what it needs another way (e.g. an env var with a \
                 scoped token).",
                entry.display()
            ),
        },
        Some((entry, DenySource::Policy)) => Suggestion::Explain {
            reason: format!(
                "{raw} is under the deny-read entry {} of the run's policy ([filesystem] \
                 deny_read); remove that entry if the command really needs it.",
                entry.display()
            ),
        },
        Some((entry, DenySource::StateDir)) => Suggestion::Never {
            reason: format!(
                "{raw} is inside lockrun's state dir {} (other runs and agents); it is never \
                 readable from a run.",
                entry.display()
            ),
        },
        None => Suggestion::Explain {
            reason: format!(
                "{raw} is not under any deny-read entry visible here (secrets, the policy \
                 file as it is now, the state dir); the run may have had a --deny-read flag, \
                 which the log does not record."
            ),
        },
    }
}

/// A refused listing of a dir above the deny-read entry `below`: what a
/// lockrun build before the listing right was granted there did
/// ([`crate::fs`]: the dirs on the way down to a denied path then got no
/// rule of their own). Not the policy's doing, and not the case any more.
fn listed_above(raw: &str, below: &(PathBuf, DenySource)) -> Suggestion {
    Suggestion::Explain {
        reason: format!(
            "{raw} lies above the deny-read entry {} ({}): the lockrun that ran this gave the \
             dirs on the way down to a denied path no listing right (Landlock only grants, so \
             their entries were granted one by one around the denied one). Nothing in the policy \
             refused it, and a run of a lockrun that grants those dirs the listing right (the \
             names of the denied entries listed, never what they hold) lists it.",
            below.0.display(),
            below.1.said()
        ),
    }
}

/// With `fs.refer` among the blockers the refusal was a hard link or rename
/// that would give the file rights it lacks in `dir` (Landlock answers
/// EXDEV): what was refused, beside the line that would allow it.
fn link_note(ev: &FsEvent, dir: &Path) -> Option<String> {
    ev.access.iter().any(|a| a == "fs.refer").then(|| {
        format!(
            "the command hard-linked or renamed a file from {} into a writable dir, where it \
             would gain rights it lacks here; Landlock refuses that with EXDEV, and most \
             tools then copy instead (`git clone` of a local path does; `--no-hardlinks` \
             skips the attempt). Make it writable only if the command should also write \
             there.",
            dir.display()
        )
    })
}

/// Why making `dir` writable for the refused `raw` should not be suggested:
/// it opens far more than the file, or reaches where code runs later.
fn not_to_open(dir: &Path, raw: &str, home: &Path) -> Option<Suggestion> {
    if SHARED_MEMORY.iter().any(|s| dir.starts_with(s)) {
        return Some(Suggestion::Warn {
            reason: format!(
                "{} is shared by every process on this machine: POSIX shared memory \
                 and named semaphores (Python multiprocessing's locks, queues and process pools, \
                 browsers) are made there. A run normally gets a private one (a tmpfs in a mount \
                 namespace of its own); this one did not, because a writable path of the run lies \
                 in or above it (a worktree on /dev/shm would be hidden by a private one). Made \
                 writable, the command could read \
                 and change what other processes and other runs keep there. Move the worktree off \
                 /dev/shm, or accept that sharing knowingly: --allow-write {}.",
                dir.display(),
                dir.display()
            ),
        });
    }
    if is_too_broad(dir, home) {
        // A refusal to make or remove something names the directory itself.
        let what = if Path::new(raw) == dir {
            format!("making {} writable", dir.display())
        } else {
            format!(
                "the nearest directory of {raw} is {}; making it writable",
                dir.display()
            )
        };
        return Some(Suggestion::Warn {
            reason: format!(
                "{what} would open far more than this needs. Point the program at the worktree \
                 or the run's temp dir ($TMPDIR; `{{tmp}}` in a policy's [env]), usually through \
                 its own environment variable."
            ),
        });
    }
    let place = runs_later::overlapping(dir, home)?;
    let instead = place
        .instead
        .map_or_else(String::new, |i| format!(" Instead: {i}."));
    Some(Suggestion::Warn {
        reason: format!(
            "making {} writable would reach {} ({}): what a command leaves there runs later, \
             outside the sandbox.{instead}",
            dir.display(),
            place.path.display(),
            place.runner,
        ),
    })
}

/// Shared-memory filesystems: one per machine, shared by every process.
const SHARED_MEMORY: &[&str] = &["/dev/shm", "/run/shm"];

fn is_too_broad(dir: &Path, home: &Path) -> bool {
    const SYSTEM: &[&str] = &[
        "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var", "/boot", "/proc", "/sys",
        "/dev", "/run", "/home", "/root", "/opt", "/srv", "/tmp", "/mnt", "/media",
    ];
    dir == home || SYSTEM.iter().any(|s| dir == Path::new(s))
}
