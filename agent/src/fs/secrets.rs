//! The machine's own secrets ([`MACHINE_SECRETS`]), masked in every run
//! whatever the policy says: each found is bound over by an empty file or
//! dir of mode 0000 ([`Sealed`]).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::outermost;

/// A path where a machine keeps secrets of its own, and what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineSecret {
    pub path: &'static str,
    pub holds: &'static str,
}

/// The machine's own secrets, masked in every run whatever the policy says.
///
/// A run is often uid 0, and uid 0 without capabilities still passes the
/// owner's permission bits of every file root owns: `/etc/shadow` (0640
/// root:shadow), the SSH host keys (0600), `/etc/ssl/private` (0710) read
/// as they would for root. Landlock could deny them only by splitting
/// `/etc` and `/var/lib` into a rule per entry (a hundred rules or more,
/// more than the rest of the walk every run waits for). So each that exists is masked in
/// the run's mount namespace instead ([`masks`]), under a bind of an
/// empty dir or file of mode 0000 (a bind is cheaper than a tmpfs of
/// its own). Both answer `EACCES`, as a denial does, but the kernel
/// records nothing (the refusal is the permission bits', not Landlock's).
pub const MACHINE_SECRETS: [MachineSecret; 22] = [
    secret("/etc/shadow", "password hashes"),
    secret("/etc/shadow-", "password hashes"),
    secret("/etc/gshadow", "group password hashes"),
    secret("/etc/gshadow-", "group password hashes"),
    secret("/etc/security/opasswd", "old password hashes"),
    secret("/etc/ssh/ssh_host_rsa_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_ecdsa_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_ed25519_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_dsa_key", "the host's SSH keys"),
    secret("/etc/ssl/private", "TLS private keys"),
    secret("/etc/pki/tls/private", "TLS private keys"),
    secret("/etc/letsencrypt", "TLS private keys"),
    secret("/etc/wireguard", "WireGuard keys"),
    secret(
        "/etc/NetworkManager/system-connections",
        "network passwords",
    ),
    secret("/etc/kubernetes", "Kubernetes cluster credentials"),
    secret("/var/lib/kubelet", "Kubernetes pods' secrets"),
    secret("/var/lib/docker", "containers' files and secrets"),
    secret("/var/lib/containerd", "containers' files and secrets"),
    secret("/var/lib/cloud", "cloud-init's user data"),
    secret("/var/log/audit", "the audit log: other runs' refusals"),
    secret("/var/log/journal", "every service's log"),
    secret("/run/log/journal", "every service's log"),
];

const fn secret(path: &'static str, holds: &'static str) -> MachineSecret {
    MachineSecret { path, holds }
}

/// How one of [`MACHINE_SECRETS`] is masked where the machine has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// A directory, under a bind of an empty dir of mode 0000.
    Dir(PathBuf),
    /// A file, under a bind of an empty file of mode 0000.
    File(PathBuf),
}

/// The [`MACHINE_SECRETS`] this machine has, each at its canonical path.
/// Most machines have few of them: an absent one costs one `lstat`.
#[must_use]
pub fn machine_secrets() -> Vec<Mask> {
    MACHINE_SECRETS
        .iter()
        .filter(|s| std::fs::symlink_metadata(s.path).is_ok())
        .filter_map(|s| {
            let at = Path::new(s.path).canonicalize().ok()?;
            match std::fs::metadata(&at).ok()? {
                m if m.is_dir() => Some(Mask::Dir(at)),
                m if m.is_file() => Some(Mask::File(at)),
                _ => None,
            }
        })
        .collect()
}

/// Of `found` ([`machine_secrets`]), those to mask, outermost first: none
/// at, beneath or above a writable root (masking it would hide the
/// worktree, or what the caller asked to write), and none at or beneath
/// another.
#[must_use]
pub fn masks(found: Vec<Mask>, writable: &[PathBuf]) -> Vec<Mask> {
    let apart = found.into_iter().filter(|m| {
        let at = m.path();
        !writable
            .iter()
            .any(|w| w.starts_with(at) || at.starts_with(w))
    });
    outermost(apart.collect(), Mask::path)
}

impl Mask {
    /// Where it goes.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Mask::Dir(p) | Mask::File(p) => p,
        }
    }
}

/// `<state>/sealed-file` and `<state>/sealed-dir`: an empty file and dir
/// of mode 0000 whose binds mask the machine's secrets
/// ([`Mask`]). Made by the first run that needs them and kept, rather
/// than made and removed on every run. Each
/// run checks their type and mode (which only root outside could have
/// changed) and puts the mode back to 0000. Beneath the state dir, which a
/// run cannot read; a bind shows one at the masked path only, where its
/// mode refuses a command without capabilities to read, list or enter it
/// (`EACCES`).
pub struct Sealed {
    file: PathBuf,
    dir: PathBuf,
}

impl Sealed {
    pub fn in_state_dir(state_dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: sealed(state_dir, false)?,
            dir: sealed(state_dir, true)?,
        })
    }

    /// What masks `mask`.
    #[must_use]
    pub fn over(&self, mask: &Mask) -> &Path {
        match mask {
            Mask::File(_) => &self.file,
            Mask::Dir(_) => &self.dir,
        }
    }
}

/// One of [`Sealed`]'s two, made or checked.
fn sealed(state_dir: &Path, dir: bool) -> std::io::Result<PathBuf> {
    let at = state_dir.join(if dir { "sealed-dir" } else { "sealed-file" });
    let made = if dir {
        std::fs::DirBuilder::new().mode(0o000).create(&at)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&at)
            .map(drop)
    };
    match made {
        Ok(()) => return Ok(at),
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
    }
    let md = std::fs::symlink_metadata(&at)?;
    if md.is_dir() != dir || !(md.is_dir() || md.is_file()) {
        return Err(std::io::Error::other(format!(
            "{} is not a {}: remove it",
            at.display(),
            if dir { "directory" } else { "file" }
        )));
    }
    if md.permissions().mode() & 0o7777 != 0 {
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o000))?;
    }
    Ok(at)
}
