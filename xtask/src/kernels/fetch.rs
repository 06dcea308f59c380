//! `cargo xtask kernels fetch`: downloads — never installs — Debian's kernel
//! packages of the matrix into the cache, and installs the host tools that
//! boot them (qemu, a static busybox, kmod, xz, zstd).
//!
//! apt runs under a configuration of its own (`<cache>/apt`): its own sources
//! list, state, lists and archives, so nothing of the host's apt changes and
//! nothing is installed. Its sources name the matrix's suites of the Debian
//! mirror the host's apt already uses (read from `/etc/apt`: no mirror's name
//! is written here), signed by the keys the host's apt trusts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use super::Cache;

/// One kernel of the matrix: its series (what `--kernel` names) and the
/// Debian suite whose newest `linux-image-<series>.*-amd64` it is.
pub struct Series {
    pub name: &'static str,
    pub suite: &'static str,
}

/// The matrix: the kernels lockrun's users run (issue 56), oldest first.
pub const MATRIX: [Series; 4] = [
    Series {
        name: "6.1",
        suite: "bookworm-security",
    },
    Series {
        name: "6.12",
        suite: "trixie",
    },
    Series {
        name: "6.16",
        suite: "trixie-backports",
    },
    Series {
        name: "6.18",
        suite: "trixie-backports",
    },
];

/// Host packages the kernel runs need, and a command each provides.
const HOST_TOOLS: [(&str, &str); 6] = [
    ("qemu-system-x86", "qemu-system-x86_64"),
    ("e2fsprogs", "mkfs.ext4"),
    ("busybox-static", "busybox"),
    ("kmod", "modprobe"),
    ("xz-utils", "xz"),
    ("zstd", "zstd"),
];

/// The series named `name` (`6.1`, `6.12`, …).
pub fn series(name: &str) -> Option<&'static Series> {
    MATRIX.iter().find(|s| s.name == name)
}

/// The series a package name belongs to: `linux-image-<version>-amd64` with
/// a version of the series (`6.1.0-57`, `6.18.15+deb13`) and nothing else
/// (no `-rt`, `-cloud`, `-dbg`, `-unsigned` flavours).
fn series_of_package(pkg: &str) -> Option<&'static Series> {
    let version = pkg.strip_prefix("linux-image-")?.strip_suffix("-amd64")?;
    let plain = version.split_once("+deb").map_or(version, |(v, deb)| {
        if deb.bytes().all(|b| b.is_ascii_digit()) {
            v
        } else {
            version
        }
    });
    if !plain
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return None;
    }
    MATRIX.iter().find(|s| {
        plain
            .strip_prefix(s.name)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// A Debian version's numbers in order (`6.16.12-1~bpo13+1` → 6 16 12 1 13
/// 1): enough to order the builds of one kernel series.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap_or(u64::MAX))
        .collect()
}

/// The package name of a downloaded `.deb` (`<name>_<version>_<arch>.deb`).
fn package_of_deb(path: &Path) -> Option<&str> {
    let file = path.file_name()?.to_str()?;
    let stem = file.strip_suffix(".deb")?;
    Some(stem.split('_').next().unwrap_or(stem))
}

/// The cached package of `series`, if one was downloaded.
pub fn cached(cache: &Cache, series: &Series) -> Option<PathBuf> {
    let mut debs: Vec<PathBuf> = std::fs::read_dir(cache.debs())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            package_of_deb(p)
                .and_then(series_of_package)
                .is_some_and(|s| s.name == series.name)
        })
        .collect();
    debs.sort_by_key(|p| version_key(&p.file_name().unwrap_or_default().to_string_lossy()));
    debs.pop()
}

/// Install the host packages that fetching and booting need, where missing.
pub fn ensure_host_tools() -> Result<()> {
    let missing: Vec<&str> = HOST_TOOLS
        .iter()
        .filter(|(pkg, _)| !dpkg_installed(pkg))
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !super::is_root() {
        bail!(
            "the kernel runs need {} (apt-get install -y --no-install-recommends {}): run as root",
            missing.join(", "),
            missing.join(" ")
        );
    }
    eprintln!(
        "xtask: installing {} (the kernel runs need them)",
        missing.join(", ")
    );
    crate::run(
        Command::new("apt-get").args(["update", "-qq"]),
        "apt-get update",
    )?;
    crate::run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        &format!("apt-get install {}", missing.join(" ")),
    )
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Abbrev}", pkg])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"ii"))
}

/// Download the newest package of each series into the cache (a series
/// already downloaded at that version is kept); the packages, in order.
/// Offline, the cached packages do, with a warning; a missing one is an error.
pub fn fetch(cache: &Cache, wanted: &[&'static Series]) -> Result<Vec<PathBuf>> {
    ensure_host_tools()?;
    let _lock = cache.lock()?;
    let arch = dpkg_architecture()?;
    if arch != "amd64" {
        bail!("the kernel matrix is Debian's amd64 kernels booted by qemu-system-x86_64; this host is {arch}");
    }
    let apt = AptConfig::write(cache, wanted)?;
    if let Err(e) = apt.update() {
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|s| cached(cache, s).is_none())
            .map(|s| s.name)
            .collect();
        if !missing.is_empty() {
            bail!(
                "{e:#}\nno package of {} is cached in {}: connect this machine and fetch again",
                missing.join(", "),
                cache.debs().display()
            );
        }
        eprintln!("xtask: warning: {e:#}; using the cached packages");
        return Ok(wanted.iter().filter_map(|s| cached(cache, s)).collect());
    }
    wanted.iter().map(|s| apt.download(cache, s)).collect()
}

fn dpkg_architecture() -> Result<String> {
    let out = Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .context("running dpkg --print-architecture (the kernel matrix needs a Debian host)")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The cache's own apt configuration.
struct AptConfig {
    file: PathBuf,
}

impl AptConfig {
    /// Write `<cache>/apt`: a sources list naming the suites of `wanted` on
    /// the host's Debian mirrors, and a config whose every dir is its own.
    fn write(cache: &Cache, wanted: &[&Series]) -> Result<Self> {
        let dir = cache.dir.join("apt");
        for d in [
            "etc/apt.conf.d",
            "etc/sources.list.d",
            "etc/preferences.d",
            "state/lists/partial",
            "cache/archives/partial",
        ] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        let mirrors = HostMirrors::read()?;
        let mut list = String::new();
        let mut suites: Vec<&str> = wanted.iter().map(|s| s.suite).collect();
        suites.dedup();
        for suite in suites {
            let source = if suite.ends_with("-security") {
                mirrors.security.as_ref()
            } else {
                mirrors.main.as_ref()
            }
            .with_context(|| {
                format!("no Debian source in /etc/apt serves {suite} (a deb line or .sources stanza of Debian's {})",
                    if suite.ends_with("-security") { "security archive" } else { "main archive" })
            })?;
            let signed = source
                .signed_by
                .as_deref()
                .map(|k| format!(" [signed-by={k}]"))
                .unwrap_or_default();
            let _ = writeln!(list, "deb{signed} {} {suite} main", source.uri);
        }
        std::fs::write(dir.join("etc/sources.list"), list)?;
        let state = dir.join("state");
        let status = state.join("status");
        if !status.exists() {
            std::fs::write(&status, "")?;
        }
        let d = dir.to_str().context("the cache's path is not UTF-8")?;
        if d.contains('"') {
            bail!("the cache's path {d} has a '\"', which apt's configuration cannot quote");
        }
        // Keys: those the host's apt trusts (a source's own signed-by wins).
        let conf = format!(
            "Dir::Etc \"{d}/etc\";\n\
             Dir::Etc::sourcelist \"{d}/etc/sources.list\";\n\
             Dir::Etc::sourceparts \"{d}/etc/sources.list.d\";\n\
             Dir::Etc::parts \"{d}/etc/apt.conf.d\";\n\
             Dir::Etc::preferences \"{d}/etc/preferences\";\n\
             Dir::Etc::preferencesparts \"{d}/etc/preferences.d\";\n\
             Dir::Etc::trusted \"/etc/apt/trusted.gpg\";\n\
             Dir::Etc::trustedparts \"/etc/apt/trusted.gpg.d\";\n\
             Dir::State \"{d}/state\";\n\
             Dir::State::status \"{d}/state/status\";\n\
             Dir::Cache \"{d}/cache\";\n\
             APT::Architecture \"amd64\";\n\
             APT::Architectures {{ \"amd64\"; }};\n\
             Acquire::Languages \"none\";\n\
             APT::Sandbox::User \"root\";\n"
        );
        let file = dir.join("apt.conf");
        std::fs::write(&file, conf)?;
        Ok(Self { file })
    }

    fn apt(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("APT_CONFIG", &self.file);
        c
    }

    fn update(&self) -> Result<()> {
        let out = self
            .apt("apt-get")
            .args(["update", "-q", "-o", "APT::Update::Error-Mode=any"])
            .stdin(Stdio::null())
            .output()
            .context("running apt-get update")?;
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || err.contains("Failed to fetch") {
            let why: Vec<&str> = err
                .lines()
                .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
                .take(3)
                .collect();
            bail!(
                "cannot download Debian's package lists (offline, or the mirror is unreachable): {}",
                why.join(" ")
            );
        }
        Ok(())
    }

    /// The newest package of `series` in its suite, downloaded unless the
    /// cache has it; older packages of the series are removed.
    fn download(&self, cache: &Cache, series: &Series) -> Result<PathBuf> {
        let (pkg, version) = self.newest(series)?;
        let debs = cache.debs();
        let partial = debs.join("partial");
        std::fs::create_dir_all(&partial)?;
        let have = std::fs::read_dir(&debs)?
            .flatten()
            .map(|e| e.path())
            .find(|p| package_of_deb(p) == Some(pkg.as_str()));
        let deb = if let Some(deb) = have {
            eprintln!("xtask: {}: {} (cached)", series.name, file_name(&deb));
            deb
        } else {
            eprintln!(
                "xtask: {}: downloading {pkg} {version} ({})",
                series.name, series.suite
            );
            let _ = std::fs::remove_dir_all(&partial);
            std::fs::create_dir_all(&partial)?;
            crate::run(
                self.apt("apt-get")
                    .args(["download", "-qq", &format!("{pkg}={version}")])
                    .current_dir(&partial)
                    .stdin(Stdio::null()),
                &format!("apt-get download {pkg}"),
            )?;
            let got = std::fs::read_dir(&partial)?
                .flatten()
                .map(|e| e.path())
                .find(|p| package_of_deb(p) == Some(pkg.as_str()))
                .with_context(|| format!("apt-get download left no {pkg} .deb"))?;
            let deb = debs.join(got.file_name().context("a file name")?);
            std::fs::rename(&got, &deb)?;
            deb
        };
        let _ = std::fs::remove_dir_all(&partial);
        for old in std::fs::read_dir(&debs)?.flatten().map(|e| e.path()) {
            let same_series = package_of_deb(&old)
                .and_then(series_of_package)
                .is_some_and(|s| s.name == series.name);
            if same_series && old != deb {
                eprintln!(
                    "xtask: {}: removing the older {}",
                    series.name,
                    file_name(&old)
                );
                std::fs::remove_file(&old)?;
                cache.forget(&old);
            }
        }
        Ok(deb)
    }

    /// The newest `(package, version)` of `series` in its suite.
    fn newest(&self, series: &Series) -> Result<(String, String)> {
        let out = self
            .apt("apt-cache")
            .args(["pkgnames", &format!("linux-image-{}.", series.name)])
            .output()
            .context("running apt-cache pkgnames")?;
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|n| series_of_package(n).is_some_and(|s| s.name == series.name))
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            bail!("no linux-image-{}.*-amd64 in {}", series.name, series.suite);
        }
        let out = self
            .apt("apt-cache")
            .arg("madison")
            .args(&names)
            .output()
            .context("running apt-cache madison")?;
        // `<package> | <version> | <uri> <suite>/<component> <arch> Packages`
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut cols = l.split('|').map(str::trim);
                let (pkg, version, from) = (cols.next()?, cols.next()?, cols.next()?);
                let suite = from.split_whitespace().nth(1)?.split('/').next()?;
                (suite == series.suite).then(|| (pkg.to_owned(), version.to_owned()))
            })
            .max_by_key(|(_, v)| version_key(v))
            .with_context(|| format!("no linux-image-{}.*-amd64 in {}", series.name, series.suite))
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// A Debian archive the host's apt uses.
struct Mirror {
    uri: String,
    signed_by: Option<String>,
}

/// The host's Debian archives: the main one (`bookworm`, `trixie`, … and
/// their `-updates`/`-backports`) and the security one (`*-security`).
struct HostMirrors {
    main: Option<Mirror>,
    security: Option<Mirror>,
}

/// One `deb` source of the host: its URIs, suites and key file.
struct Source {
    uris: Vec<String>,
    suites: Vec<String>,
    signed_by: Option<String>,
}

impl HostMirrors {
    fn read() -> Result<Self> {
        let mut sources = Vec::new();
        if let Ok(text) = std::fs::read_to_string("/etc/apt/sources.list") {
            sources.extend(one_line_sources(&text));
        }
        let mut parts: Vec<PathBuf> = std::fs::read_dir("/etc/apt/sources.list.d")
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        parts.sort();
        for p in parts {
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            match p.extension().and_then(|e| e.to_str()) {
                Some("list") => sources.extend(one_line_sources(&text)),
                Some("sources") => sources.extend(deb822_sources(&text)),
                _ => {}
            }
        }
        let pick = |security: bool| {
            sources.iter().find_map(|s| {
                let serves = s
                    .suites
                    .iter()
                    .any(|x| is_debian_suite(x) && x.ends_with("-security") == security);
                let uri = s.uris.first()?;
                serves.then(|| Mirror {
                    uri: uri.trim_end_matches('/').to_owned(),
                    signed_by: s.signed_by.clone(),
                })
            })
        };
        let mirrors = Self {
            main: pick(false),
            security: pick(true),
        };
        if mirrors.main.is_none() && mirrors.security.is_none() {
            bail!("no Debian source in /etc/apt/sources.list or /etc/apt/sources.list.d: the kernel packages come from the Debian mirror this machine's apt uses");
        }
        Ok(mirrors)
    }
}

/// A Debian suite name: a release's codename or alias, with or without
/// `-updates`, `-backports`, `-security`.
fn is_debian_suite(s: &str) -> bool {
    const RELEASES: [&str; 11] = [
        "buster",
        "bullseye",
        "bookworm",
        "trixie",
        "forky",
        "duke",
        "sid",
        "stable",
        "oldstable",
        "testing",
        "unstable",
    ];
    RELEASES.contains(&s.split('-').next().unwrap_or(s))
}

/// `deb [opts] uri suite component…` lines.
fn one_line_sources(text: &str) -> Vec<Source> {
    text.lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.trim();
            let rest = l.strip_prefix("deb ")?.trim_start();
            let (opts, rest) = match rest.strip_prefix('[') {
                Some(r) => r.split_once(']')?,
                None => ("", rest),
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.to_owned();
            let suite = words.next()?.to_owned();
            let signed_by = opts
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .map(str::to_owned);
            Some(Source {
                uris: vec![uri],
                suites: vec![suite],
                signed_by,
            })
        })
        .collect()
}

/// deb822 stanzas (`Types:`, `URIs:`, `Suites:`, `Signed-By:`, `Enabled:`).
fn deb822_sources(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    for stanza in lines.split(|l| l.trim().is_empty()) {
        let field = |name: &str| {
            stanza.iter().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (!l.starts_with([' ', '\t']) && k.trim().eq_ignore_ascii_case(name))
                    .then(|| v.trim().to_owned())
            })
        };
        let words = |name: &str| -> Vec<String> {
            field(name)
                .map(|v| v.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        if !words("Types").iter().any(|t| t == "deb")
            || field("Enabled").is_some_and(|e| e.eq_ignore_ascii_case("no"))
        {
            continue;
        }
        // A key file's path; an inline key (continuation lines) is left to
        // the host's trusted keys.
        let signed_by = field("Signed-By").filter(|v| v.starts_with('/'));
        out.push(Source {
            uris: words("URIs"),
            suites: words("Suites"),
            signed_by,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_of_the_matrix_and_no_others() {
        let s = |p| series_of_package(p).map(|s| s.name);
        assert_eq!(s("linux-image-6.1.0-57-amd64"), Some("6.1"));
        assert_eq!(s("linux-image-6.12.117+deb13-amd64"), Some("6.12"));
        assert_eq!(s("linux-image-6.16.12+deb13-amd64"), Some("6.16"));
        assert_eq!(s("linux-image-6.18.15+deb13-amd64"), Some("6.18"));
        assert_eq!(s("linux-image-6.1.0-57-rt-amd64"), None);
        assert_eq!(s("linux-image-6.1.0-57-cloud-amd64"), None);
        assert_eq!(s("linux-image-6.12.117+deb13-amd64-unsigned"), None);
        assert_eq!(s("linux-image-6.12-amd64"), None);
        assert_eq!(s("linux-image-6.19.6+deb13-amd64"), None);
    }

    #[test]
    fn versions_order_within_a_series() {
        assert!(version_key("6.16.12-1~bpo13+1") > version_key("6.16.3-1~bpo13+1"));
        assert!(version_key("6.1.192-3") > version_key("6.1.172-1"));
    }

    #[test]
    fn sources_of_both_formats() {
        let one = one_line_sources(
            "# x\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n\
             deb-src http://m.example/debian bookworm main\n",
        );
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].uris, ["http://m.example/debian"]);
        assert_eq!(one[0].signed_by.as_deref(), Some("/k.gpg"));
        let stanzas = deb822_sources(
            "Types: deb\n# http://old.example/debian\nURIs: http://m.example/debian\n\
             Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /k.gpg\n\n\
             Types: deb\nURIs: http://m.example/debian-security\nSuites: bookworm-security\n\
             Components: main\nEnabled: yes\n\n\
             Types: deb\nURIs: http://x.example/\nSuites: nodistro\nEnabled: no\n",
        );
        assert_eq!(stanzas.len(), 2);
        assert_eq!(stanzas[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(stanzas[1].uris, ["http://m.example/debian-security"]);
        assert!(stanzas[1].signed_by.is_none());
    }
}
