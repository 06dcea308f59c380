//! A kernel made bootable: a Debian kernel package extracted (`dpkg-deb -x`,
//! never installed), its modules indexed (`depmod`), its uncompressed
//! `vmlinux` taken out of `vmlinuz`, and an initramfs of a static busybox,
//! the modules that reach the host's root (virtio, 9p, overlay) and
//! [`STAGE1`]. All of it is cached beside the package, rebuilt when the
//! package or the init changes.
//!
//! Booting `vmlinux` through its PVH entry skips the decompressor, which is
//! slow under TCG (the emulation a stock kernel needs on this VM); a kernel
//! without `CONFIG_PVH` boots its `vmlinuz`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use super::{cpio, Cache};

/// The guest's first init (busybox sh in the initramfs): reaches the host's
/// root and switches to stage 2 there.
pub const STAGE1: &str = include_str!("stage1.sh");

/// The modules stage 1 loads, with what they depend on, in order (ext4:
/// the guest's /tmp, mounted by stage 2).
const INITRAMFS_MODULES: [&str; 6] = [
    "virtio_pci",
    "virtio_blk",
    "9pnet_virtio",
    "9p",
    "overlay",
    "ext4",
];

/// A kernel ready to boot.
pub struct Kernel {
    /// Its release, `uname -r` inside (`6.1.0-57-amd64`).
    pub release: String,
    /// What qemu's `-kernel` boots: `vmlinux` (PVH) or `vmlinuz`.
    pub boot: PathBuf,
    pub initramfs: PathBuf,
    /// `lib/modules/<release>` of the package, for the guest's /lib/modules.
    pub modules: PathBuf,
}

/// Prepare the kernel of a `.deb` or of an extracted package's directory.
pub fn prepare(cache: &Cache, source: &Path) -> Result<Kernel> {
    let _lock = cache.lock()?;
    let (root, work) = if source.is_dir() {
        let work = cache.kernels().join(format!("dir-{}", path_hash(source)));
        (source.to_path_buf(), work)
    } else if source.extension().is_some_and(|e| e == "deb") {
        let work = cache.work_of_deb(source);
        (extract(source, &work)?, work)
    } else {
        bail!(
            "{}: give a kernel series (6.1, 6.12, 6.16, 6.18), a linux-image .deb or an extracted package's directory",
            source.display()
        );
    };
    let vmlinuz = find_vmlinuz(&root)?;
    let release = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .context("vmlinuz-<release>")?
        .to_owned();
    let base = ["", "usr"]
        .iter()
        .map(|u| root.join(u))
        .find(|b| b.join("lib/modules").join(&release).is_dir())
        .with_context(|| format!("no lib/modules/{release} in {}", root.display()))?;
    let modules = base.join("lib/modules").join(&release);
    if !modules.join("modules.dep").is_file() {
        crate::run(
            Command::new("depmod").arg("-b").arg(&base).arg(&release),
            &format!("depmod for {release}"),
        )?;
    }
    std::fs::create_dir_all(&work)?;
    let stamp_text = format!(
        "{}\n{:?}\n{:?}\n{STAGE1}",
        vmlinuz.display(),
        std::fs::metadata(&vmlinuz)?.modified()?,
        INITRAMFS_MODULES
    );
    let stamp = work.join("stamp");
    let initramfs = work.join("initramfs.cpio");
    let unpacked = work.join("vmlinux");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(stamp_text.as_str()) {
        eprintln!("xtask: preparing kernel {release} (vmlinux, initramfs)");
        let _ = std::fs::remove_file(&stamp);
        let pvh = std::fs::read_to_string(root.join("boot").join(format!("config-{release}")))
            .is_ok_and(|c| c.lines().any(|l| l == "CONFIG_PVH=y"));
        let _ = std::fs::remove_file(&unpacked);
        if pvh {
            if let Some(elf) = uncompressed(&vmlinuz)? {
                std::fs::write(&unpacked, elf)?;
            }
        }
        write_initramfs(&initramfs, &base, &release)?;
        std::fs::write(&stamp, stamp_text)?;
    }
    let boot = if unpacked.is_file() {
        unpacked
    } else {
        vmlinuz
    };
    Ok(Kernel {
        release,
        boot,
        initramfs,
        modules,
    })
}

/// A path's hash, to name the cache entry of a directory given by the user.
fn path_hash(p: &Path) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::hash::DefaultHasher::new();
    p.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// `work/root`: the package extracted (once; a half-done extraction is redone).
fn extract(deb: &Path, work: &Path) -> Result<PathBuf> {
    let root = work.join("root");
    let done = work.join("extracted");
    if done.is_file() {
        return Ok(root);
    }
    eprintln!("xtask: extracting {}", deb.display());
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(&root)?;
    crate::run(
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root),
        &format!("dpkg-deb -x {}", deb.display()),
    )?;
    std::fs::write(&done, "")?;
    Ok(root)
}

fn find_vmlinuz(root: &Path) -> Result<PathBuf> {
    let boot = root.join("boot");
    std::fs::read_dir(&boot)
        .with_context(|| format!("no boot/ in {}", root.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no boot/vmlinuz-* in {}", root.display()))
}

/// The ELF image inside a `bzImage`: the payload after the first xz, zstd
/// or gzip magic that decompresses to an ELF file (the decompressor's
/// complaints about the trailing bytes are expected and ignored).
fn uncompressed(vmlinuz: &Path) -> Result<Option<Vec<u8>>> {
    const FORMATS: [(&[u8], &str); 3] = [
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\x1f\x8b\x08", "gzip"),
    ];
    let image = std::fs::read(vmlinuz)?;
    for (magic, tool) in FORMATS {
        for at in image
            .windows(magic.len())
            .enumerate()
            .filter(|(_, w)| *w == magic)
            .map(|(i, _)| i)
        {
            let out = pipe_through(Command::new(tool).args(["-dcq"]), &image[at..])?;
            if out.starts_with(b"\x7fELF") {
                return Ok(Some(out));
            }
        }
    }
    eprintln!(
        "xtask: warning: no ELF image found in {}; booting it compressed",
        vmlinuz.display()
    );
    Ok(None)
}

/// `c`'s stdout when fed `input`.
fn pipe_through(c: &mut Command, input: &[u8]) -> Result<Vec<u8>> {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {c:?}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            // The decompressor stops reading at the end of its stream.
            let _ = stdin.write_all(input);
        });
        child.wait_with_output()
    })?;
    Ok(out.stdout)
}

/// The initramfs: `/init` (stage 1), `/bin/busybox` (static), the modules
/// in `/mods` (decompressed: busybox's insmod cannot), their load order in
/// `/mods.order`. Uncompressed: the kernel unpacks a plain newc archive.
fn write_initramfs(to: &Path, base: &Path, release: &str) -> Result<()> {
    let busybox = static_busybox()?;
    let mut archive = cpio::Writer::default();
    archive.dir("bin");
    archive.dir("mods");
    archive.file("init", 0o755, STAGE1.as_bytes());
    archive.file("bin/busybox", 0o755, &std::fs::read(&busybox)?);
    let mut order = String::new();
    for path in module_files(base, release)? {
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("module name")?;
        let (name, tool) = match file.rsplit_once('.') {
            Some((n, "xz")) => (n, Some("xz")),
            Some((n, "zst")) => (n, Some("zstd")),
            Some((n, "gz")) => (n, Some("gzip")),
            _ => (file, None),
        };
        let raw = std::fs::read(&path)?;
        let data = match tool {
            Some(t) => pipe_through(Command::new(t).arg("-dc"), &raw)?,
            None => raw,
        };
        archive.file(&format!("mods/{name}"), 0o644, &data);
        order.push_str(name);
        order.push('\n');
    }
    archive.file("mods.order", 0o644, order.as_bytes());
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, archive.finish())?;
    std::fs::rename(&tmp, to)?;
    Ok(())
}

/// The module files of [`INITRAMFS_MODULES`] and what they depend on, each
/// once, dependencies first (`modprobe --show-depends`; built-in ones have
/// no file).
fn module_files(base: &Path, release: &str) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for m in INITRAMFS_MODULES {
        let out = Command::new("modprobe")
            .arg("-d")
            .arg(base)
            .args(["-S", release, "--show-depends", m])
            .output()
            .context("running modprobe --show-depends")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() && !text.contains("builtin") {
            bail!(
                "modprobe --show-depends {m} for {release} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        for l in text.lines() {
            if let Some(f) = l.strip_prefix("insmod ") {
                let f = PathBuf::from(f.split_whitespace().next().unwrap_or(f));
                if !files.contains(&f) {
                    files.push(f);
                }
            }
        }
    }
    Ok(files)
}

/// The host's busybox, which must be static (the initramfs has no libc).
fn static_busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("no busybox: apt-get install busybox-static")?;
    let elf = std::fs::read(&path)?;
    if has_interpreter(&elf) {
        bail!(
            "{} is dynamically linked; the initramfs needs a static one (apt-get install busybox-static)",
            path.display()
        );
    }
    Ok(path)
}

/// Whether a 64-bit ELF file names a program interpreter (`PT_INTERP`):
/// a dynamically linked executable.
fn has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return true;
    };
    (0..usize::from(phnum)).any(|i| {
        let at = usize::try_from(phoff).unwrap_or(usize::MAX) + i * usize::from(phentsize);
        elf.get(at..at + 4) == Some(&3u32.to_le_bytes()[..])
    })
}
