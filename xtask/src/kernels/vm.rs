//! One boot of a kernel under qemu, on this machine's own root filesystem.
//!
//! TCG (software emulation): this VM's `/dev/kvm` is paravirtual and cannot
//! run a stock kernel. The guest sees the host's `/` read-only over 9p under
//! a tmpfs overlay, so every write it makes is thrown away at power-off, and
//! a share of the run's own (the run dir's `share/`, read-write, at
//! `/run/xtask` inside) that carries stage 2, the plan, and back the output
//! and the status. The output is followed while the guest runs.
//!
//! qemu is killed on every way out: when the time is up, when this process
//! unwinds ([`Qemu`]'s drop), and when it dies (`setpriv --pdeathsig KILL`,
//! the kernel's signal on the death of the thread that started it: the
//! main thread). One kernel VM runs at a time on a machine (a lock on the
//! qemu binary): each takes the cores it is given.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::image::Kernel;

const QEMU: &str = "qemu-system-x86_64";

/// Kernel command line, but for `lsm=`: the serial console, power off on
/// panic (qemu's `-no-reboot` turns the reboot into an exit), and kernel
/// audit on from boot, as a test expects.
const CMDLINE: &str = "console=ttyS0 panic=-1 loglevel=4 8250.nr_uarts=1 audit=1";

/// The LSMs booted unless told otherwise: those lockrun relies on
/// (Landlock, BPF) and Debian's others.
pub const LSM: &str = "landlock,lockdown,yama,bpf";

/// How a VM is sized and bounded, and which LSMs it boots.
pub struct Limits {
    pub memory: String,
    pub cpus: u32,
    pub timeout: Duration,
    pub lsm: String,
}

/// How a boot ended.
pub struct Outcome {
    /// From qemu's start to stage 2's first line.
    pub boot: Option<Duration>,
    pub total: Duration,
    pub timed_out: bool,
}

/// A running qemu, killed and reaped when dropped.
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Boot `kernel` with the run dir `run` (whose `share/` holds stage 2 and
/// the plan), hand each line of `share/output` to `on_line` as it comes,
/// and return once the guest has powered off or the time is up.
pub fn boot(
    kernel: &Kernel,
    run: &Path,
    limits: &Limits,
    mut on_line: impl FnMut(&str),
) -> Result<Outcome> {
    let share = run.join("share");
    let output = share.join("output");
    let status = share.join("status");
    File::create(&output)?;
    let disk = run.join("scratch.img");
    // An empty disk, as hosts have one (/dev/vda).
    File::create(&disk)?.set_len(1 << 20)?;
    // The guest's /tmp (/dev/vdb): ext4, as this machine's /tmp is (on /).
    // A tmpfs lacks what tests judge there on older kernels (user xattrs
    // on tmpfs: Linux 6.6). Sparse: it takes what the tests write.
    let tmp = run.join("tmp.img");
    File::create(&tmp)?.set_len(8 << 30)?;
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-m", "0"])
        .arg(&tmp)
        .status()
        .context("mkfs.ext4 (e2fsprogs) for the guest's /tmp")?;
    anyhow::ensure!(mkfs.success(), "mkfs.ext4 of the guest's /tmp failed");
    let mut c = Command::new("setpriv");
    c.args(["--pdeathsig", "KILL", "--", QEMU])
        .args(accel(limits.cpus))
        .args(["-m", &limits.memory, "-smp", &limits.cpus.to_string()])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", qemu_escape(&run.join("console.log"))))
        .arg("-kernel")
        .arg(&kernel.boot)
        .arg("-initrd")
        .arg(&kernel.initramfs)
        .arg("-append")
        .arg(format!("{CMDLINE} lsm={}", limits.lsm))
        .arg("-virtfs")
        .arg("local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap")
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=xtask,security_model=none,multidevs=remap",
            qemu_escape(&share)
        ))
        .arg("-drive")
        .arg(format!("file={},if=virtio,format=raw", qemu_escape(&disk)))
        .arg("-drive")
        .arg(format!("file={},if=virtio,format=raw", qemu_escape(&tmp)))
        .stdin(Stdio::null());
    let log = File::create(run.join("qemu.log"))?;
    c.stdout(log.try_clone()?).stderr(log);
    let start = Instant::now();
    let mut qemu = Qemu(c.spawn().context("starting qemu (through setpriv)")?);
    let mut follow = Follower::new(output);
    let mut outcome = Outcome {
        boot: None,
        total: Duration::ZERO,
        timed_out: false,
    };
    loop {
        follow.poll(&mut on_line)?;
        if outcome.boot.is_none() && status.is_file() {
            outcome.boot = Some(start.elapsed());
        }
        if qemu.0.try_wait()?.is_some() {
            break;
        }
        if start.elapsed() > limits.timeout {
            outcome.timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(qemu);
    follow.poll(&mut on_line)?;
    follow.finish(&mut on_line);
    outcome.total = start.elapsed();
    Ok(outcome)
}

/// TCG, multi-threaded when there is more than one CPU.
fn accel(cpus: u32) -> [&'static str; 4] {
    let tcg = if cpus > 1 {
        "tcg,thread=multi"
    } else {
        "tcg,thread=single"
    };
    ["-accel", tcg, "-cpu", "max"]
}

/// A path as a qemu option value (a `,` doubled).
fn qemu_escape(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

/// Wait until no other xtask runs kernel VMs on this machine (the one
/// holding this boots its own, see `TOGETHER`): an exclusive lock on qemu's
/// binary (which every such VM runs, and which is there to lock without a
/// file of ours outside the project), held until dropped.
pub fn lock() -> Result<File> {
    let path = which(QEMU).with_context(|| format!("{QEMU} not found"))?;
    let f = File::open(&path)?;
    if f.try_lock().is_err() {
        eprintln!("xtask: another kernel VM runs on this machine; waiting for it to end");
        f.lock()?;
    }
    Ok(f)
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Lines of a file another writer appends to, read as they come.
struct Follower {
    path: PathBuf,
    file: Option<File>,
    partial: Vec<u8>,
}

impl Follower {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            partial: Vec::new(),
        }
    }

    /// Hand every complete new line to `on_line`.
    fn poll(&mut self, on_line: &mut impl FnMut(&str)) -> Result<()> {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        f.read_to_end(&mut self.partial)?;
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            on_line(String::from_utf8_lossy(&line[..nl]).as_ref());
        }
        Ok(())
    }

    /// Hand over the last line, if it had no newline.
    fn finish(&mut self, on_line: &mut impl FnMut(&str)) {
        if !self.partial.is_empty() {
            on_line(String::from_utf8_lossy(&self.partial).as_ref());
            self.partial.clear();
        }
    }
}
