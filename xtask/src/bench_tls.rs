//! `cargo xtask bench`: what TLS inspection adds (issue 60), in the same
//! run as the tunnel it is compared with. The bench's test host serves
//! HTTPS on :443 (`openssl s_server -WWW`: one connection per request,
//! closed after the answer, so both paths pay a fresh handshake each time)
//! under two names: `bench.test`, a tunnel as any host, and `inspect.test`,
//! which the policy gives a request rule (`GET /**`), so the proxy
//! terminates its TLS, judges each request and re-encrypts it upstream
//! (verified against the bench's own CA, `[network] tls_ca`). One lockrun
//! run, curl inside: per round, [`REQUESTS`] small requests to each name
//! (their latency, `time_total`: CONNECT, handshake, request, answer) and a
//! [`BIG`] download from each (its rate), the names alternating.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use super::{sh, wait_port, Reaped, HOST_IP, NET};

const TUNNELLED: &str = "bench.test";
const INSPECTED: &str = "inspect.test";
const ROUNDS: u32 = 5;
const REQUESTS: u32 = 40;
const BIG: u64 = 64 << 20;

/// One name's figures.
struct Figures {
    /// Every small request's latency, in ms, sorted.
    ms: Vec<f64>,
    /// The download rates, MiB/s.
    mibps: Vec<f64>,
}

impl Figures {
    /// The latency at `permille` of the sorted requests.
    fn pct(&self, permille: usize) -> f64 {
        if self.ms.is_empty() {
            return f64::NAN;
        }
        self.ms[(self.ms.len() - 1) * permille / 1000]
    }
    fn best(&self) -> f64 {
        self.mibps.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// Measure both names in the test host's namespace `ns`; the Markdown
/// section, or why not.
pub(super) fn section(lockrun: &Path, dir: &Path, ns: &str) -> String {
    match measure(lockrun, &dir.join("tls"), ns) {
        Ok((tunnel, inspected)) => report(&tunnel, &inspected),
        Err(e) => format!("\n### TLS inspection\n\nNot measured: {e:#}\n"),
    }
}

fn measure(lockrun: &Path, dir: &Path, ns: &str) -> Result<(Figures, Figures)> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).with_context(|| format!("creating {}", www.display()))?;
    let (ca, cert, key) = certificates(dir)?;
    let (ca, c, k) = (
        ca.to_str().unwrap_or(""),
        cert.to_str().unwrap_or(""),
        key.to_str().unwrap_or(""),
    );
    std::fs::write(www.join("small"), "ok")?;
    std::fs::write(www.join("big"), vec![0u8; usize::try_from(BIG)?])?;
    let _server = Reaped(
        Command::new("ip")
            .args([
                "netns", "exec", ns, "openssl", "s_server", "-accept", "443", "-quiet", "-WWW",
            ])
            .args(["-cert", c, "-key", k])
            .current_dir(&www)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting openssl s_server")?,
    );
    wait_port(SocketAddr::new(HOST_IP.parse()?, 443), "the HTTPS upstream")?;

    let policy = dir.join("tls.toml");
    std::fs::write(
        &policy,
        format!(
            "[network]\nallow = [\"{TUNNELLED}\", \"{INSPECTED}\"]\ntls_ca = \"{ca}\"\n\
             [[network.private]]\nhosts = [\"{TUNNELLED}\", \"{INSPECTED}\"]\nnetwork = \"{NET}\"\n\
             [network.resolve]\n\"{TUNNELLED}\" = [\"{HOST_IP}\"]\n\"{INSPECTED}\" = [\"{HOST_IP}\"]\n\
             [network.requests.\"{INSPECTED}\"]\nallow = [\"GET /**\"]\n"
        ),
    )?;
    let wt = dir.join("wt");
    std::fs::create_dir_all(&wt)?;
    std::fs::create_dir_all(dir.join("state"))?;
    let urls = |host: &str| {
        (0..REQUESTS)
            .map(|_| format!("https://{host}/small"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut script = format!(
        "set -e\ncat \"$SSL_CERT_FILE\" {ca} > \"$TMPDIR/both.pem\"\n\
         get() {{ curl -fsS --cacert \"$TMPDIR/both.pem\" \"$@\"; }}\n"
    );
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 {
            [TUNNELLED, INSPECTED]
        } else {
            [INSPECTED, TUNNELLED]
        };
        for host in order {
            writeln!(
                script,
                "get -w '{host} ms %{{time_total}}\\n' -o /dev/null {}",
                urls(host)
                    .split(' ')
                    .collect::<Vec<_>>()
                    .join(" -o /dev/null ")
            )?;
            writeln!(
                script,
                "get -w '{host} bps %{{speed_download}}\\n' -o /dev/null https://{host}/big"
            )?;
        }
    }
    let out = Command::new(lockrun)
        .arg("--worktree")
        .arg(&wt)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--policy")
        .arg(&policy)
        .args(["--", "sh", "-c", &script])
        .current_dir(&wt)
        .output()
        .context("running lockrun")?;
    if !out.status.success() {
        bail!(
            "lockrun exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok((parse(&text, TUNNELLED), parse(&text, INSPECTED)))
}

/// A CA, and a certificate it signs for both names (an end entity: a
/// self-signed `req -x509` one is a CA, which a verifier refuses as a
/// server's), as PEM files in `dir`.
fn certificates(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let p = |n: &str| dir.join(n);
    let s = |path: &PathBuf| path.to_str().unwrap_or("").to_owned();
    let (ca, ca_key, cert, key, csr, ext) = (
        p("ca.pem"),
        p("ca.key"),
        p("cert.pem"),
        p("key.pem"),
        p("leaf.csr"),
        p("leaf.ext"),
    );
    std::fs::write(
        &ext,
        format!(
            "subjectAltName=DNS:{TUNNELLED},DNS:{INSPECTED}\nbasicConstraints=CA:FALSE\n\
             extendedKeyUsage=serverAuth\n"
        ),
    )?;
    let (ca_s, ca_key_s) = (s(&ca), s(&ca_key));
    let (key_s, csr_s, cert_s, ext_s) = (s(&key), s(&csr), s(&cert), s(&ext));
    // An EC P-256 key each, unencrypted.
    let req = |extra: &[&str]| {
        let mut a = vec!["openssl", "req", "-newkey", "ec", "-nodes"];
        a.extend(["-pkeyopt", "ec_paramgen_curve:P-256"]);
        a.extend(extra);
        sh(&a)
    };
    req(&[
        "-x509",
        "-keyout",
        &ca_key_s,
        "-out",
        &ca_s,
        "-subj",
        "/CN=lockrun bench CA",
        "-days",
        "2",
    ])?;
    req(&[
        "-keyout",
        &key_s,
        "-out",
        &csr_s,
        "-subj",
        "/CN=lockrun bench",
    ])?;
    sh(&[
        "openssl",
        "x509",
        "-req",
        "-in",
        &csr_s,
        "-CA",
        &ca_s,
        "-CAkey",
        &ca_key_s,
        "-CAcreateserial",
        "-out",
        &cert_s,
        "-days",
        "2",
        "-extfile",
        &ext_s,
    ])?;
    Ok((ca, cert, key))
}

fn parse(text: &str, host: &str) -> Figures {
    let mut f = Figures {
        ms: Vec::new(),
        mibps: Vec::new(),
    };
    for l in text.lines() {
        let mut w = l.split_whitespace();
        if w.next() != Some(host) {
            continue;
        }
        let (kind, v) = (w.next(), w.next().and_then(|v| v.parse::<f64>().ok()));
        match (kind, v) {
            (Some("ms"), Some(s)) => f.ms.push(s * 1000.0),
            (Some("bps"), Some(b)) => f.mibps.push(b / f64::from(1 << 20)),
            _ => {}
        }
    }
    f.ms.sort_by(f64::total_cmp);
    f
}

fn report(tunnel: &Figures, inspected: &Figures) -> String {
    let mut s = String::from("\n### TLS inspection\n\n");
    let _ = writeln!(
        s,
        "| path | requests | p50 ms | p99 ms | {} MiB download, MiB/s (best of {ROUNDS}) |",
        BIG >> 20
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (name, f) in [
        ("tunnel (CONNECT, TLS end to end)", tunnel),
        (
            "inspected (TLS terminated, judged, re-encrypted)",
            inspected,
        ),
    ] {
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.0} |",
            f.ms.len(),
            f.pct(500),
            f.pct(990),
            f.best()
        );
    }
    let _ = writeln!(
        s,
        "\nAdded by inspection: p50 {:+.2} ms, p99 {:+.2} ms; the download at {:.2}× the tunnel's \
         rate. Each request is a fresh connection on both paths (the upstream, `openssl s_server \
         -WWW`, closes after each answer): the inspected path pays two handshakes (client–proxy, \
         proxy–upstream) where the tunnel pays one. curl inside one lockrun run, {ROUNDS} rounds \
         of {REQUESTS} requests and a download per name, the names alternating.",
        inspected.pct(500) - tunnel.pct(500),
        inspected.pct(990) - tunnel.pct(990),
        inspected.best() / tunnel.best()
    );
    s
}
