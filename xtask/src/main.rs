//! `cargo xtask build | test | run -- <lockrun args>`: the one entry point.
//!
//! - `build`: installs what a fresh Debian 12 root machine lacks (LLVM 22 dev
//!   files, bpf-linker 0.13.0 built against them, rust-src), compiles
//!   `ebpf/programs` for `bpfel-unknown-none` (stable toolchain with
//!   `RUSTC_BOOTSTRAP=1 -Z build-std=core`), then builds the agent, which
//!   embeds the object (`LOCKRUN_EBPF_OBJECT`, read by agent/build.rs).
//! - `test`: build, mount bpffs if needed, `cargo test --workspace`.
//!   `test --kernel K`: the same test binaries inside another kernel, booted
//!   under qemu (`kernels/`, docs/kernels.md).
//! - `kernels fetch | run | table`: download the kernels of the matrix; run
//!   one command inside one; README's table of kernels × promises from the
//!   results.
//! - `run`: build, then run `target/<host>/<profile>/lockrun` with the given args.
//!
//! The agent and its tests are built for the host's target named
//! explicitly (`--target x86_64-unknown-linux-gnu`), linked statically
//! (`crt-static`: a static-pie against glibc): a dynamically linked
//! lockrun spends part of each run's start-up in the dynamic loader
//! (mapping libc and libm, their relocations) before its `main`. Naming the target
//! keeps the flag off the build scripts and proc-macros, which must stay
//! dynamic. glibc's `files` and `dns` lookups (the home directory,
//! `getaddrinfo`) are built into its static library; another NSS module
//! named in `nsswitch.conf` is loaded at run time from the glibc lockrun
//! was built against, the one on the machine that built it.

mod bench;
mod bench_proxy;
mod kernels;
#[cfg(test)]
mod layers;
mod tally;
mod test_python;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const BPF_LINKER: &str = "bpf-linker@0.13.0";
const EBPF_TARGET: &str = "bpfel-unknown-none";
const TOOLCHAIN: &str = "stable";

/// The host's target triple: what the agent and its tests are built for
/// (lockrun is Linux-only, built with glibc).
fn host_target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// `bin` copied into `dir` (made if missing), replacing an older copy; its path.
fn installed_copy(bin: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let to = dir.join(bin.file_name().context("a binary's path has a file name")?);
    let _ = std::fs::remove_file(&to);
    std::fs::copy(bin, &to)
        .with_context(|| format!("copying {} to {}", bin.display(), to.display()))?;
    Ok(to)
}

/// Where the agent's binaries are: `target/<host>/<profile>`.
fn agent_bin_dir(root: &Path, release: bool) -> PathBuf {
    root.join("target")
        .join(host_target())
        .join(if release { "release" } else { "debug" })
}

/// `cargo <sub>` for the agent: built for the host's target named
/// explicitly, and linked statically (see the module docs).
fn agent_cargo(root: &Path, sub: &str) -> Command {
    let target = host_target();
    let mut c = cargo(root);
    c.args([sub, "--target", &target]).env(
        format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            target.to_uppercase().replace('-', "_")
        ),
        "-C target-feature=+crt-static",
    );
    c
}

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Build, test and run lockrun")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install missing build tools, build the eBPF object and the agent.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Build, mount bpffs if needed, run the workspace tests.
    Test {
        #[arg(long)]
        release: bool,
        /// Run the test binaries inside this kernel (booted under qemu)
        /// instead: a series of the matrix (6.1, 6.12, 6.16, 6.18; downloaded
        /// when missing), a linux-image .deb, or an extracted package's
        /// directory. Repeat for several, one after another.
        #[arg(long, value_name = "KERNEL")]
        kernel: Vec<String>,
        /// With --kernel: only these test binaries (an integration test's
        /// name, e.g. `net`; `lib:<crate>`, `bin:<name>` for unit tests).
        #[arg(long, value_delimiter = ',', requires = "kernel")]
        only: Vec<String>,
        /// With --kernel: all test binaries but these.
        #[arg(long, value_delimiter = ',', requires = "kernel")]
        except: Vec<String>,
        /// With --kernel: the limit for each kernel's whole run, in minutes.
        #[arg(long, default_value_t = 120, requires = "kernel")]
        timeout: u64,
        /// With --kernel: boot with these LSMs (`lsm=`) instead of
        /// landlock,lockdown,yama,bpf; e.g. without landlock, to see lockrun
        /// refuse a kernel without it. Results and logs are kept apart.
        #[arg(long, requires = "kernel")]
        lsm: Option<String>,
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Other kernels: download them, run a command inside one, tabulate the results.
    Kernels {
        #[command(subcommand)]
        cmd: KernelsCmd,
    },
    /// cargo's test runner while `test --kernel` lists the test binaries.
    #[command(hide = true)]
    KernelRecord {
        file: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<std::ffi::OsString>,
    },
    /// Measure lockrun against bare and its peers (release build), in one run;
    /// prints a Markdown report (also written to target/bench/report.md, and
    /// as docs/performance.md).
    Bench {
        /// Repetitions per start-up figure.
        #[arg(long, default_value_t = 30)]
        reps: usize,
        /// Only the proxy's figures (written to target/bench/proxy.md).
        #[arg(long)]
        proxy_only: bool,
    },
    /// Run each cargo-fuzz target (request head, host:port, address guard,
    /// DNS query, first-bytes sniffer) for a while; non-zero on a finding.
    /// Installs cargo-fuzz if missing.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// Build, then run lockrun with these arguments.
    Run {
        #[arg(long)]
        release: bool,
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum KernelsCmd {
    /// Download (never install) Debian's kernel packages of the matrix into
    /// target/kernels (or `$LOCKRUN_KERNELS_DIR`); installs qemu,
    /// busybox-static, kmod, xz-utils and zstd where missing.
    Fetch {
        /// Series to fetch (6.1, 6.12, 6.16, 6.18); all when none.
        series: Vec<String>,
    },
    /// Boot a kernel and run one command inside, as root on this machine's
    /// root filesystem (its writes are thrown away), in this directory, with
    /// this environment; its stdout and stderr together on stdout; exits
    /// with its status (125: the VM stopped first).
    Run {
        /// A series of the matrix, a linux-image .deb or an extracted dir.
        kernel: String,
        /// The limit for the whole boot, in minutes.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Write README.md's table of kernels × promises (between its
    /// `kernels:begin` and `kernels:end` markers) from the results of
    /// `test --kernel`: the newest whole-suite run of each series.
    Table {
        /// Only compare: exit 1 when README.md's table is not the results'.
        #[arg(long)]
        check: bool,
        /// Where the results-*.json are [default: target/kernels].
        #[arg(long, value_name = "DIR")]
        results: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask bench`: the report into `target/bench/`.
fn bench_cmd(root: &Path, reps: usize, proxy_only: bool) -> Result<ExitCode> {
    build(root, true)?;
    ensure_bpffs()?;
    // Measured as installed, as the peers are: a copy of the
    // binary (what `install` and `cargo install` make): run from the
    // linker's own output file, each start is measurably slower than
    // from a copy of it.
    let lockrun = installed_copy(
        &agent_bin_dir(root, true).join("lockrun"),
        &root.join("target/bench/bin"),
    )?;
    let _srt = bench::SrtLeftovers::snapshot();
    if proxy_only {
        let proxy = bench_proxy::run(&lockrun, root)?;
        println!("{proxy}");
        std::fs::create_dir_all(root.join("target/bench"))?;
        std::fs::write(root.join("target/bench/proxy.md"), &proxy)?;
        return Ok(ExitCode::SUCCESS);
    }
    let opts = bench::Options {
        lockrun: lockrun.clone(),
        workspace: root.to_path_buf(),
        reps,
    };
    let mut report = bench::run(&opts)?;
    let proxy = bench_proxy::run(&lockrun, root)?;
    println!("{proxy}");
    report.push('\n');
    report.push_str(&proxy);
    std::fs::write(root.join("target/bench/report.md"), &report)?;
    std::fs::write(
        root.join("docs/performance.md"),
        performance_page(root, &report),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// docs/performance.md, whole: what the figures are, the run they come
/// from (date, commit, load at its end), then the bench's report. Written
/// by each `cargo xtask bench`; never edited by hand.
fn performance_page(root: &Path, report: &str) -> String {
    let out = |cmd: &mut Command| {
        cmd.output()
            .ok()
            .filter(|o| o.status.success())
            .map_or_else(
                || "unknown".to_owned(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            )
    };
    let date = out(Command::new("date").args(["-u", "+%Y-%m-%d"]));
    let commit = out(Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root));
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    format!(
        "# Performance\n\n\
         Written by `cargo xtask bench` (release build; lockrun against bare and its peers in one \
         run), on {date} at {commit}, load average {load} at its end. Rows of one run compare; runs \
         do not: the VM is shared and its host's load moves every figure. Re-run the bench to \
         refresh this page; `cargo xtask bench --proxy-only` runs the proxy's part alone.\n\n{report}"
    )
}

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    if let Cmd::KernelRecord { file, argv } = &cli.cmd {
        kernels::suite::record(file, argv)?;
        return Ok(ExitCode::SUCCESS);
    }
    let root = workspace_root()?;
    match cli.cmd {
        Cmd::Build { release } => {
            build(&root, release)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Test {
            release,
            kernel,
            only,
            except,
            timeout,
            lsm,
            args,
        } => {
            let obj = build(&root, release)?;
            ensure_test_tools(&root)?;
            let mut c = suite_cargo(&root, release, &obj);
            if let Some(path) = test_python::tests_path(&tests_tmp(&root)) {
                c.env("PATH", path);
            }
            if !kernel.is_empty() {
                let limits = kernels::RunLimits {
                    total: Duration::from_secs(timeout * 60),
                    each: Duration::from_secs(timeout * 60).min(PER_BINARY_LIMIT),
                    lsm,
                };
                let choice = kernels::Choice { only, except };
                let lockrun = agent_bin_dir(&root, release).join("lockrun");
                return kernels::test(&root, c, &kernel, &choice, &args, &limits, &lockrun);
            }
            ensure_bpffs()?;
            if !args.is_empty() {
                c.arg("--").args(&args);
            }
            let (status, tally) = tally::run_tallied(&mut c)?;
            if !status.success() {
                println!("{}", tally.closing_line(1, ""));
                return Ok(exit_of(status.code()));
            }
            // A short fuzz run of the proxy's parsers belongs to the suite.
            fuzz(&root, 10)?;
            // One closing line for the whole suite (cargo's last line is a
            // doc-test summary, often `0 passed`).
            println!("{}", tally.closing_line(0, ""));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Fuzz { seconds } => {
            fuzz(&root, seconds)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { reps, proxy_only } => bench_cmd(&root, reps, proxy_only),
        Cmd::Kernels {
            cmd: KernelsCmd::Fetch { series },
        } => {
            kernels::fetch_cmd(&root, &series)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Kernels {
            cmd:
                KernelsCmd::Run {
                    kernel,
                    timeout,
                    command,
                },
        } => kernels::run_cmd(&root, &kernel, &command, Duration::from_secs(timeout * 60)),
        Cmd::Kernels {
            cmd: KernelsCmd::Table { check, results },
        } => kernels::table::table_cmd(&root, results, check),
        Cmd::KernelRecord { .. } => unreachable!("dispatched above"),
        Cmd::Run { release, args } => {
            build(&root, release)?;
            let bin = agent_bin_dir(&root, release).join("lockrun");
            let status = Command::new(&bin)
                .args(&args)
                .status()
                .with_context(|| format!("running {}", bin.display()))?;
            Ok(exit_of(status.code()))
        }
    }
}

/// A test binary's limit inside another kernel.
const PER_BINARY_LIMIT: Duration = Duration::from_mins(30);

/// The suite's `cargo test` (without `-- args`): the same for the native run
/// and for a run inside another kernel.
fn suite_cargo(root: &Path, release: bool, obj: &Path) -> Command {
    let mut c = agent_cargo(root, "test");
    // The test-only feature lets tests/doctor.rs prove the canary
    // catches a weakened sandbox; release builds never have it.
    c.args([
        // Every test binary runs, so one red run names every failure.
        "--no-fail-fast",
        "--workspace",
        "--features",
        "lockrun/weaken-for-tests",
    ]);
    if release {
        c.arg("--release");
    }
    c.env("LOCKRUN_EBPF_OBJECT", obj);
    c
}

fn exit_of(code: Option<i32>) -> ExitCode {
    ExitCode::from(code.and_then(|c| u8::try_from(c).ok()).unwrap_or(1))
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .context("CARGO_MANIFEST_DIR is not set: run this through `cargo xtask`")?;
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

/// A `cargo` command run through rustup's proxy, with the environment of the
/// outer `cargo xtask` invocation scrubbed of what would leak into it.
fn cargo(dir: &Path) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTUP_TOOLCHAIN",
    ] {
        c.env_remove(var);
    }
    c
}

/// The cargo-fuzz targets under fuzz/.
const FUZZ_TARGETS: &[&str] = &[
    "request_head",
    "origin_head",
    "authority",
    "address_guard",
    "dns_query",
    "sniff",
    "request_rules",
];

/// Run every fuzz target for `seconds` (libFuzzer needs the nightly toolchain).
fn fuzz(root: &Path, seconds: u64) -> Result<()> {
    if !on_path("cargo-fuzz") {
        eprintln!("xtask: installing cargo-fuzz");
        run(
            Command::new("cargo")
                .args(["install", "cargo-fuzz", "--locked"])
                .env_remove("RUSTUP_TOOLCHAIN"),
            "cargo install cargo-fuzz",
        )?;
    }
    for t in FUZZ_TARGETS {
        eprintln!("xtask: fuzzing {t} for {seconds} s");
        run(
            Command::new("cargo")
                .args([
                    "+nightly",
                    "fuzz",
                    "run",
                    "-O",
                    t,
                    "--",
                    &format!("-max_total_time={seconds}"),
                ])
                .current_dir(root.join("fuzz"))
                .env_remove("RUSTUP_TOOLCHAIN")
                .stdout(Stdio::null()),
            &format!(
                "fuzzing {t} (the build failed, or a finding is in fuzz/artifacts/{t}/: see above)"
            ),
        )?;
    }
    eprintln!("xtask: fuzzing: no findings");
    Ok(())
}

/// Run a command, failing with its name and status when it fails.
fn run(c: &mut Command, what: &str) -> Result<()> {
    let status = c.status().with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn on_path(bin: &str) -> bool {
    let home_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin").join(bin));
    if home_bin.is_some_and(|p| p.is_file()) {
        return true;
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

fn ensure_tools() -> Result<()> {
    if !Path::new(LLVM_PREFIX).join("bin/llvm-config").exists() {
        eprintln!("xtask: installing llvm-22-dev (bpf-linker links against it)");
        run(
            Command::new("apt-get").arg("update").arg("-qq"),
            "apt-get update",
        )?;
        run(
            Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "llvm-22-dev",
                ])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get install llvm-22-dev (is the LLVM apt repository configured?)",
        )?;
    }
    if !on_path("bpf-linker") {
        eprintln!("xtask: installing {BPF_LINKER} against LLVM 22 (about a minute)");
        run(
            Command::new("cargo")
                .args([
                    "install",
                    BPF_LINKER,
                    "--locked",
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env_remove("RUSTUP_TOOLCHAIN"),
            "cargo install bpf-linker",
        )?;
    }
    let installed = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", TOOLCHAIN])
        .stderr(Stdio::null())
        .output()
        .context("cannot run rustup (is rustup installed?)")?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.starts_with("rust-src"))
    {
        eprintln!("xtask: adding rust-src to the {TOOLCHAIN} toolchain (for -Z build-std=core)");
        run(
            Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", TOOLCHAIN]),
            "rustup component add rust-src",
        )?;
    }
    Ok(())
}

/// The packages unpacked for the SSH tests: the server and the one library
/// it links that a machine without an SSH server lacks.
const SSH_SERVER_DEBS: [&str; 2] = ["openssh-server", "libwrap0"];

/// The tests' own temp dir, `target/<host>/tmp` (cargo's
/// `CARGO_TARGET_TMPDIR` for them): what they run beside lockrun.
fn tests_tmp(root: &Path) -> PathBuf {
    root.join("target").join(host_target()).join("tmp")
}

/// What the suite runs besides what the build needs: `sshd`, the real SSH
/// server `tests/proxy_e2e/transparent.rs` clones a repository from, in a
/// network namespace of the test's own. Unpacked from Debian's packages
/// ([`SSH_SERVER_DEBS`]) into `target/<host>/tmp/openssh-server/` (the
/// tests' `CARGO_TARGET_TMPDIR`; the test points the loader at its library
/// dirs), never installed: installing it would start an SSH service on the
/// user's machine, and leave its host keys and config behind.
fn ensure_test_tools(root: &Path) -> Result<()> {
    let tmp = tests_tmp(root);
    let dir = tmp.join("openssh-server");
    let done = dir.join(".unpacked");
    if std::fs::read_to_string(&done).is_ok_and(|d| d == SSH_SERVER_DEBS.join(" ")) {
        return Ok(());
    }
    eprintln!(
        "xtask: unpacking openssh-server into {} (the SSH tests' server)",
        dir.display()
    );
    let debs = tmp.join("openssh-server-deb");
    let _ = std::fs::remove_dir_all(&debs);
    std::fs::create_dir_all(&debs)?;
    let download = || {
        Command::new("apt-get")
            // As root, apt's own sandbox user could not write here; no warning.
            .args(["-o", "APT::Sandbox::User=root", "download", "-qq"])
            .args(SSH_SERVER_DEBS)
            .current_dir(&debs)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !download() {
        run(
            Command::new("apt-get").arg("update").arg("-qq"),
            "apt-get update",
        )?;
        if !download() {
            bail!("apt-get download {} failed", SSH_SERVER_DEBS.join(" "));
        }
    }
    let unpacking = tmp.join("openssh-server.part");
    let _ = std::fs::remove_dir_all(&unpacking);
    for name in SSH_SERVER_DEBS {
        let deb = std::fs::read_dir(&debs)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|e| e == "deb")
                    && p.file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| f.starts_with(&format!("{name}_")))
            })
            .with_context(|| format!("apt-get download left no {name} .deb"))?;
        run(
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacking),
            &format!("dpkg-deb -x {name}"),
        )?;
    }
    std::fs::write(unpacking.join(".unpacked"), SSH_SERVER_DEBS.join(" "))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&unpacking, &dir)?;
    let _ = std::fs::remove_dir_all(&debs);
    Ok(())
}

/// Build everything; returns the eBPF object's path.
fn build(root: &Path, release: bool) -> Result<PathBuf> {
    ensure_tools()?;
    let target_dir = root.join("target/ebpf");
    let mut c = cargo(&root.join("ebpf/programs"));
    c.args([
        "build",
        "--quiet",
        "--release",
        "--target",
        EBPF_TARGET,
        "-Z",
        "build-std=core",
    ])
    .arg("--target-dir")
    .arg(&target_dir)
    .env("RUSTUP_TOOLCHAIN", TOOLCHAIN)
    .env("RUSTC_BOOTSTRAP", "1")
    .env("RUSTFLAGS", "-C debuginfo=2 -C link-arg=--btf");
    run(&mut c, "building the eBPF programs (ebpf/programs)")?;
    let obj = target_dir
        .join(EBPF_TARGET)
        .join("release")
        .join("lockrun-ebpf");
    if !obj.is_file() {
        bail!("the eBPF build succeeded but {} is missing", obj.display());
    }
    let mut c = agent_cargo(root, "build");
    c.args(["--quiet", "-p", "lockrun"]);
    if release {
        c.arg("--release");
    }
    c.env("LOCKRUN_EBPF_OBJECT", &obj);
    run(&mut c, "building the agent (cargo build -p lockrun)")?;
    Ok(obj)
}

fn ensure_bpffs() -> Result<()> {
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let mounted = info.lines().any(|l| {
        l.split_once(" - ").is_some_and(|(left, right)| {
            left.split_whitespace().nth(4) == Some("/sys/fs/bpf")
                && right.split_whitespace().next() == Some("bpf")
        })
    });
    if mounted {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().ok();
    if root.is_some_and(|o| o.stdout.as_slice() != b"0\n") {
        eprintln!("xtask: not root: bpffs not mounted; kernel tests will say why they skip");
        return Ok(());
    }
    run(
        Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"].map(OsStr::new)),
        "mount -t bpf bpf /sys/fs/bpf",
    )
}
