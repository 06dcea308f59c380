//! `cargo xtask bench`: the proxy's figures against issue 4's targets, in one
//! run of about a minute, as a Markdown section.
//!
//! The upstream is a test host in a network namespace (10.213.252.0/30, a
//! veth pair made here and removed on every path), never loopback: lockrun's
//! address guard refuses loopback, and the bench policy grants exactly that
//! /30. On it runs `bench_proxy.c serve` (compiled here with gcc): HTTP on
//! :80 (`/small`: 2 bytes, `/big`: 512 MiB, one thread per connection,
//! persistent unless the request says `Connection: close`) and
//! a listener on :81 that accepts and holds connections, for idle tunnels.
//!
//! Six paths to it, each measured the same way:
//! - **direct**: the clients outside any sandbox, straight to the host;
//! - **lockrun**: the clients *inside* `lockrun --policy bench.toml -- sh -c …`,
//!   through the run's proxy, as a confined agent would go (the real path:
//!   cgroup hooks, Landlock, seccomp, the proxy on the run's runtime);
//! - **tinyproxy** (installed from the distribution if missing), on a
//!   loopback port, no filtering;
//! - **haproxy, plain TCP relay** (installed from the distribution if
//!   missing), not a peer but a reference: TCP mode, a fixed backend, no
//!   HTTP and no policy, so its figures are what the extra TCP connection
//!   of any proxy costs on this machine;
//! - **sandbox-runtime** (`srt`, installed with npm under
//!   `target/peers`): the clients inside `srt -c …`, through its socat
//!   bridge and its proxy, with the host's IP literal allow-listed (srt
//!   puts private ranges in `no_proxy`; the clients override it);
//! - **lockrun's proxy, clients outside**: the run publishes its proxy URL
//!   and waits; the same clients run outside. Against the lockrun row, this
//!   separates the proxy's cost from the client's confinement.
//!
//! Figures: a 512 MiB download through a CONNECT tunnel (`curl -p`; direct
//! is a plain GET), best of five (two for srt); and requests per second
//! with a new connection per request at concurrency 1 and 50, with p50/p99
//! latency, from `bench_proxy.c load` (C threads, each connecting, sending
//! one GET — absolute-form through a proxy, with the proxy's credentials —
//! reading the whole response, and closing with RST so thousands of short
//! connections leave no `TIME_WAIT` behind; it always asks for
//! `Connection: close`, so the direct path opens one upstream connection per
//! request, while a proxy may keep its own upstream connection for the next
//! request, as lockrun's does), best of five 1 s runs: other
//! tenants of a shared machine only ever slow a path down. The paths are
//! measured in rounds (one run of each per round, in a shuffled order), so
//! the machine's swings fall on every path alike. Then memory per idle tunnel: the
//! lockrun process's `VmRSS` before and after `bench_proxy.c tunnels` opens
//! N idle CONNECT tunnels from inside the run. And what each download cost
//! the whole machine in CPU time (`/proc/stat` around it), with the rate
//! that cost allows at most when every core is busy: a ceiling no proxy
//! design can pass on this machine at that cost.

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

#[path = "bench_tls.rs"]
mod tls;

const SOURCE: &str = include_str!("bench_proxy.c");
const HOST_IP: &str = "10.213.252.2";
const HERE_IP: &str = "10.213.252.1";
const NET: &str = "10.213.252.0/30";
const NAME: &str = "bench.test";
/// The path of a run's clients without proxy variables (issue 59).
const TRANSPARENT: &str = "lockrun, transparent (no proxy variables)";
/// The run's clients through the proxy variables, a CONNECT tunnel per
/// request: what the transparent path's connection rate compares with
/// (the "lockrun" row's requests are forwarded, on kept upstream connections).
const CONNECT_EACH: &str = "lockrun, a CONNECT tunnel per request";
/// Seconds per request-rate measurement, one at each concurrency per round.
const LOAD_SECS: u32 = 1;
/// Rounds, each running every path once (see `in_rounds`); of each path's
/// runs the best counts: other tenants of a shared machine only ever make a
/// path slower.
const ROUNDS: u32 = 5;
const BIG: u64 = 512 << 20;
/// Rounds with a download per path (srt: two, it is slow).
const DOWNLOADS: u32 = ROUNDS;
const SRT_DOWNLOADS: u32 = 2;
/// Issue 4's figure for idle tunnels; scaled down when the fd limit is lower.
const IDLE_TARGET: usize = 10_000;

/// Run the proxy bench with the `lockrun` binary at `lockrun`; scratch files
/// go under `<workspace>/target/bench-proxy`. Returns a Markdown section.
#[allow(clippy::too_many_lines)] // each way to the upstream set up in turn, then the rounds over all of them
pub fn run(lockrun: &Path, workspace: &Path) -> Result<String> {
    if !is_root() {
        bail!("the proxy bench needs root (network namespaces, cgroups, BPF)");
    }
    let lockrun = std::fs::canonicalize(lockrun)
        .with_context(|| format!("{} is not built", lockrun.display()))?;
    let dir = workspace.join("target/bench-proxy");
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["wt", "state"] {
        std::fs::create_dir_all(dir.join(d))
            .with_context(|| format!("creating {}", dir.join(d).display()))?;
    }
    let tool = compile(&dir)?;
    let started = Instant::now();

    let mut host = TestHost::new()?;
    host.serve(&tool)?;

    let idle_n = idle_tunnels_possible();
    let policy = dir.join("bench.toml");
    std::fs::write(
        &policy,
        format!(
            "[network]\nallow = [\"{NAME}:80\", \"{NAME}:81\"]\n\
             [[network.private]]\nhosts = [\"{NAME}\"]\nnetwork = \"{NET}\"\n\
             [network.resolve]\n\"{NAME}\" = [\"{HOST_IP}\"]\n\
             [run]\nmax_connections = {}\n",
            idle_n + 64
        ),
    )?;
    let lr = Lockrun {
        bin: lockrun,
        dir: dir.clone(),
        policy,
    };

    let mut notes = Vec::new();
    // Every path a way to run a script against the upstream; the peers'
    // proxies and the published run live until all rounds are done.
    let mut paths: Vec<Way> = Vec::new();
    paths.push(Way::new("direct", HOST_IP, 80, None, DOWNLOADS, outside));
    let lr_cmd = |s: &str| {
        let mut c = lr.cmd();
        c.args(["--", "sh", "-c", s]);
        Ok(c)
    };
    paths.push(Way::new(
        "lockrun",
        NAME,
        80,
        Some("$HTTP_PROXY".into()),
        DOWNLOADS,
        lr_cmd,
    ));
    // Its requests each in a tunnel of their own (its download is the
    // "lockrun" row's again: one round has it).
    paths.push(Way::new(
        CONNECT_EACH,
        NAME,
        80,
        Some("connect+$HTTP_PROXY".into()),
        1,
        lr_cmd,
    ));
    // The same run's clients without the proxy variables, by name: the
    // kernel brings each connect to the proxy's transparent listener.
    paths.push(Way::new(TRANSPARENT, NAME, 80, None, DOWNLOADS, lr_cmd));
    // The same proxy with the clients outside the run: what the proxy costs
    // apart from the confinement of the client (hooks, seccomp, Landlock).
    let _published = match lr.published() {
        Ok((run, url)) => {
            paths.push(Way::new(
                "lockrun's proxy, clients outside",
                NAME,
                80,
                Some(url),
                DOWNLOADS,
                outside,
            ));
            Some(run)
        }
        Err(e) => {
            notes.push(format!(
                "lockrun's proxy, clients outside: not measured: {e:#}"
            ));
            None
        }
    };
    let _tinyproxy = match Local::tinyproxy(&dir) {
        Ok(tp) => {
            paths.push(Way::new(
                "tinyproxy",
                HOST_IP,
                80,
                Some(format!("http://{}", tp.addr)),
                DOWNLOADS,
                outside,
            ));
            Some(tp)
        }
        Err(e) => {
            notes.push(format!("tinyproxy not measured: {e:#}"));
            None
        }
    };
    // Not a peer: what a mature relay costs here when it does nothing but
    // relay (no HTTP, no policy, no CONNECT), i.e. the price of the second
    // TCP connection every proxy adds.
    let _haproxy = match Local::haproxy(&dir) {
        Ok(hp) => {
            paths.push(Way::new(
                "haproxy, plain TCP relay (reference)",
                "127.0.0.1",
                hp.addr.port(),
                None,
                DOWNLOADS,
                outside,
            ));
            Some(hp)
        }
        Err(e) => {
            notes.push(format!("haproxy (reference) not measured: {e:#}"));
            None
        }
    };
    match Srt::find_or_install(workspace) {
        Ok(srt) => {
            let srt_dir = dir.clone();
            paths.push(Way::new(
                "sandbox-runtime (srt)",
                HOST_IP,
                80,
                Some("$HTTP_PROXY".into()),
                SRT_DOWNLOADS,
                move |s| {
                    let mut c = srt.cmd(&srt_dir)?;
                    c.arg(s);
                    Ok(c)
                },
            ));
        }
        Err(e) => notes.push(format!("sandbox-runtime not measured: {e:#}")),
    }

    let rows = in_rounds(&tool, &mut paths, &mut notes)?;
    let idle = lr.idle_tunnels(&tool, idle_n);
    let inspection = tls::section(&lr.bin, &dir, &host.ns);
    let elapsed = started.elapsed();
    drop(host);
    Ok(report(&rows, &idle, idle_n, &notes, elapsed) + &inspection)
}

/// One path's figures.
struct Row {
    name: String,
    /// MiB/s, best of the runs.
    mibps: f64,
    /// The whole machine's CPU during a download, the median run by cost.
    cpu: Option<Cpu>,
    /// Downloads that did not complete (not counted in `mibps`).
    failed_downloads: u32,
    c1: Load,
    c50: Load,
}

/// What one 512 MiB download cost the whole machine in CPU time, from
/// `/proc/stat` read just before and after it (ticks of `USER_HZ`, 100 per
/// second; busy = user, nice, system, irq, softirq, steal): the client, the
/// upstream, the proxy and the kernel's TCP work, and whatever else runs.
#[derive(Clone, Copy)]
struct Cpu {
    /// CPU seconds per GiB moved.
    s_per_gib: f64,
    /// How many cores were busy on average while it ran.
    cores: f64,
}

impl Cpu {
    /// From two `cpu  user nice system idle iowait irq softirq steal …` lines.
    fn between(before: &str, after: &str) -> Option<Self> {
        let ticks = |line: &str| -> Option<(u64, u64)> {
            let v: Vec<u64> = line
                .strip_prefix("cpu ")?
                .split_whitespace()
                .take(8)
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
                return None;
            };
            let busy = user + nice + system + irq + softirq + steal;
            Some((busy, busy + idle + iowait))
        };
        let ((b0, t0), (b1, t1)) = (ticks(before)?, ticks(after)?);
        let (busy, total) = (b1.checked_sub(b0)?, t1.checked_sub(t0)?);
        if total == 0 {
            return None;
        }
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        #[allow(clippy::cast_precision_loss)]
        let (busy, total, cores, gib) = (
            busy as f64,
            total as f64,
            cores as f64,
            BIG as f64 / f64::from(1 << 30),
        );
        Some(Self {
            s_per_gib: busy / 100.0 / gib,
            cores: busy / total * cores,
        })
    }
}

#[derive(Clone, Copy, Default)]
struct Load {
    rps: f64,
    /// The slowest of the runs' rates: how much the machine swung.
    worst_rps: f64,
    p50_us: f64,
    p99_us: f64,
    err: u64,
}

/// One way to the upstream: a name, and how to run a shell script that
/// reaches it (`proxy`, when set, is a shell word: it may name a variable
/// set inside the sandbox).
struct Way<'a> {
    name: &'static str,
    target: &'static str,
    port: u16,
    proxy: Option<String>,
    /// Rounds that include a download (srt's are slow: fewer).
    downloads: u32,
    cmd: Box<ScriptCmd<'a>>,
    /// Every round's output, parsed once all rounds are done.
    out: String,
}

impl<'a> Way<'a> {
    fn new(
        name: &'static str,
        target: &'static str,
        port: u16,
        proxy: Option<String>,
        downloads: u32,
        cmd: impl Fn(&str) -> Result<Command> + 'a,
    ) -> Self {
        Self {
            name,
            target,
            port,
            proxy,
            downloads,
            cmd: Box::new(cmd),
            out: String::new(),
        }
    }
}

/// How a path runs a script.
type ScriptCmd<'a> = dyn Fn(&str) -> Result<Command> + 'a;

/// A script run outside any sandbox.
#[allow(clippy::unnecessary_wraps)]
fn outside(script: &str) -> Result<Command> {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    Ok(c)
}

/// Every path measured in [`ROUNDS`] rounds: one run of each path per round
/// (a download while the round is within its `downloads`, a load at c=1, a
/// load at c=50), in an order shuffled each round. The machine here swings
/// by 2× over tens of seconds (other tenants); measuring each path's runs
/// back to back put whole swings between paths, and the ratios with them.
/// A path whose run cannot start is dropped with a note.
fn in_rounds(tool: &Path, paths: &mut Vec<Way<'_>>, notes: &mut Vec<String>) -> Result<Vec<Row>> {
    let mut order: Vec<usize> = (0..paths.len()).collect();
    let mut dropped = vec![false; paths.len()];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..ROUNDS {
        crate::bench::shuffle(&mut order, &mut seed);
        for &i in &order {
            let w = &mut paths[i];
            if dropped[i] {
                continue;
            }
            let mut s = script(
                tool,
                w.target,
                w.port,
                w.proxy.as_deref(),
                round < w.downloads,
            );
            if w.name == TRANSPARENT {
                s = transparent(&s, w.target);
            }
            let out = (w.cmd)(&s).and_then(|mut c| {
                c.stdin(Stdio::null())
                    .output()
                    .with_context(|| format!("cannot start {c:?}"))
            });
            match out {
                Ok(o) => {
                    w.out.push_str(&String::from_utf8_lossy(&o.stdout));
                    if !o.status.success() {
                        let _ = writeln!(
                            w.out,
                            "exit {:?}: {}",
                            o.status.code(),
                            String::from_utf8_lossy(&o.stderr).trim()
                        );
                    }
                }
                Err(e) => {
                    notes.push(format!("{} not measured: {e:#}", w.name));
                    dropped[i] = true;
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (i, w) in paths.iter().enumerate() {
        if dropped[i] {
            continue;
        }
        match parse(w.name, &w.out) {
            Ok(r) => rows.push(r),
            // Without direct there is nothing to compare with.
            Err(e) if i == 0 => return Err(e),
            Err(e) => notes.push(format!("{} not measured: {e:#}", w.name)),
        }
    }
    Ok(rows)
}

/// The shell script of one path's round: the download if `download`, then
/// one load at c=1 and one at c=50.
fn script(tool: &Path, target: &str, port: u16, proxy: Option<&str>, download: bool) -> String {
    let t = tool.display();
    let (curl_px, load_px) = match proxy {
        // --noproxy '': srt puts private ranges in no_proxy; go through the proxy anyway.
        Some(p) => {
            // `connect+`: the load tool's tunnel per request; curl tunnels anyway (-p).
            let curl = p.strip_prefix("connect+").unwrap_or(p);
            (format!("-p -x \"{curl}\" --noproxy ''"), format!("\"{p}\""))
        }
        None => (String::new(), String::new()),
    };
    let mut s = String::new();
    // The download between two reads of the machine's CPU time (`read`, a
    // shell builtin: no process of its own in the window).
    if download {
        let _ = writeln!(
            s,
            "read -r s0 </proc/stat; r=$(curl -s {curl_px} -o /dev/null -w '%{{speed_download}} %{{size_download}} %{{http_code}}' http://{target}:{port}/big); read -r s1 </proc/stat; echo \"tput $r|$s0|$s1\""
        );
    }
    for c in [1, 50] {
        let _ = writeln!(
            s,
            "echo \"c{c} $({t} load {target} {port} /small {c} {LOAD_SECS} {load_px})\""
        );
    }
    s
}

/// A round's script for the transparent path: no proxy variables, and the
/// load tool dials the address the run's resolver gives the name, naming
/// the name (curl resolves it itself).
fn transparent(script: &str, name: &str) -> String {
    let unset = "unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy\n";
    let addr = format!("{name}=$(getent ahostsv4 {name} | head -n 1 | cut -d' ' -f1)");
    let load = format!(" load {name} ");
    format!(
        "{unset}{}",
        script.replace(&load, &format!(" load {addr} "))
    )
}

/// One path's figures from the output of all its rounds.
fn parse(name: &str, stdout: &str) -> Result<Row> {
    let fail = || format!("{name}: output: {stdout}");
    let mut best = 0f64;
    let mut failed = 0;
    let mut cpu = Vec::new();
    for l in stdout.lines().filter_map(|l| l.strip_prefix("tput ")) {
        let mut parts = l.split('|');
        let f: Vec<&str> = parts.next().unwrap_or("").split_whitespace().collect();
        if f.len() == 3 && f[1] == BIG.to_string() && f[2] == "200" {
            let bps: f64 = f[0].parse().with_context(fail)?;
            best = best.max(bps / f64::from(1 << 20));
            if let (Some(a), Some(b)) = (parts.next(), parts.next()) {
                cpu.extend(Cpu::between(a, b));
            }
        } else {
            failed += 1;
        }
    }
    if best == 0.0 {
        bail!("no 512 MiB download completed: {}", fail());
    }
    let one = |line: &str| -> Result<Load> {
        let get = |k: &str| -> Result<f64> {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .with_context(|| format!("no {k} in `{line}`"))?
                .parse()
                .with_context(|| format!("{k} in `{line}`"))
        };
        let rps = get("rps")?;
        let l = Load {
            rps,
            worst_rps: rps,
            p50_us: get("p50_us")?,
            p99_us: get("p99_us")?,
            #[allow(clippy::cast_sign_loss)]
            err: get("err")? as u64,
        };
        Ok(l)
    };
    let load = |tag: &str| -> Result<Load> {
        let mut best: Option<Load> = None;
        let mut worst = f64::INFINITY;
        for line in stdout.lines().filter_map(|l| l.strip_prefix(tag)) {
            let l = one(line)?;
            worst = worst.min(l.rps);
            if best.is_none_or(|b| l.rps > b.rps) {
                best = Some(l);
            }
        }
        best.map(|b| Load {
            worst_rps: worst,
            ..b
        })
        .filter(|b| b.rps > 0.0)
        .with_context(|| format!("no request succeeded ({tag}): {}", fail()))
    };
    cpu.sort_by(|a, b| a.s_per_gib.total_cmp(&b.s_per_gib));
    Ok(Row {
        name: name.to_owned(),
        mibps: best,
        cpu: cpu.get(cpu.len() / 2).copied(),
        failed_downloads: failed,
        c1: load("c1 ")?,
        c50: load("c50 ")?,
    })
}

fn failures(r: &Row) -> String {
    let mut f = Vec::new();
    if r.failed_downloads > 0 {
        f.push(format!("{} downloads failed", r.failed_downloads));
    }
    if r.c1.err + r.c50.err > 0 {
        f.push(format!("{} requests failed", r.c1.err + r.c50.err));
    }
    if f.is_empty() {
        String::new()
    } else {
        format!(" ({})", f.join(", "))
    }
}

fn report(
    rows: &[Row],
    idle: &Result<Idle>,
    idle_n: usize,
    notes: &[String],
    took: Duration,
) -> String {
    let mut s = String::from("## Proxy\n\n");
    let d = &rows[0];
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    s.push_str(
        "| path | 512 MiB CONNECT MiB/s | × direct | req/s c=1 | × direct | p50 / p99 µs c=1 | added p50 / p99 µs | req/s c=50 | × direct | p50 / p99 µs c=50 |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} / {:.0} | {:+.0} / {:+.0} | {:.0} | {:.2} | {:.0} / {:.0} |{}",
            r.name,
            r.mibps,
            ratio(r.mibps, d.mibps),
            r.c1.rps,
            ratio(r.c1.rps, d.c1.rps),
            r.c1.p50_us,
            r.c1.p99_us,
            r.c1.p50_us - d.c1.p50_us,
            r.c1.p99_us - d.c1.p99_us,
            r.c50.rps,
            ratio(r.c50.rps, d.c50.rps),
            r.c50.p50_us,
            r.c50.p99_us,
            failures(r)
        );
    }
    s.push('\n');
    cpu_table(&mut s, rows);
    if let Some(l) = rows.iter().find(|r| r.name == "lockrun") {
        targets(&mut s, l, d, idle, idle_n);
        let each = rows.iter().find(|r| r.name == CONNECT_EACH);
        if let (Some(t), Some(e)) = (rows.iter().find(|r| r.name == TRANSPARENT), each) {
            let _ = writeln!(
                s,
                "The transparent path (issue 59: the run's clients without proxy variables, \
                 brought to the proxy by the kernel) reaches {:.2}× the CONNECT tunnel's \
                 throughput, and {:.2}× / {:.2}× the requests/s at c=1 / c=50 of a CONNECT \
                 tunnel per request (each transparent connection is a tunnel of its own too) \
                 in this run.\n",
                ratio(t.mibps, l.mibps),
                ratio(t.c1.rps, e.c1.rps),
                ratio(t.c50.rps, e.c50.rps),
            );
        }
    }
    if let Some(h) = rows.iter().find(|r| r.name.starts_with("haproxy")) {
        let _ = writeln!(
            s,
            "The reference: haproxy relaying plain TCP to the upstream (no HTTP, no CONNECT, no \
             policy, one thread per core) reaches {:.2}× direct throughput and {:.2}× / {:.2}× \
             direct requests/s at c=1 / c=50 in this run: the price, on this machine, of a \
             second TCP connection per client connection, before any proxy work (for plain \
             HTTP, lockrun keeps its upstream connections and pays only the client's).\n",
            ratio(h.mibps, d.mibps),
            ratio(h.c1.rps, d.c1.rps),
            ratio(h.c50.rps, d.c50.rps),
        );
    }
    let swing = |l: &Load| {
        if l.worst_rps > 0.0 {
            l.rps / l.worst_rps
        } else {
            f64::INFINITY
        }
    };
    // Judged on the direct path alone: a proxy's own instability (srt's
    // request rate at c=50 swings by itself) is not the machine's.
    let worst_swing = swing(&d.c1).max(swing(&d.c50));
    if worst_swing > 1.3 {
        let _ = writeln!(
            s,
            "**Noisy machine**: the direct path's request rate varied {worst_swing:.1}× between \
             its own runs (load average {}); request-rate ratios of this run are not \
             trustworthy, the download and memory figures less affected.\n",
            loadavg()
        );
    }
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let _ = writeln!(
        s,
        "Method: upstream in a network namespace over a veth pair ({HOST_IP}); download = \
         `curl` through a CONNECT tunnel (direct: plain GET), best of {DOWNLOADS} (srt: {SRT_DOWNLOADS}); \
         req/s = `bench_proxy.c load`, a new TCP connection per request with \
         `Connection: close`, absolute-form GET through the proxy (which may keep its \
         upstream connection; the upstream keeps it if asked), best of {ROUNDS} runs of {LOAD_SECS} s, with that run's \
         latencies (connect to last byte). Every path is run once per round, {ROUNDS} rounds, \
         in an order shuffled each round, so the machine's swings fall on all paths alike. \
         CPU: the machine's busy ticks in `/proc/stat` read (a shell builtin) just before and \
         after each download, so other tenants' work counts too. \
         Idle tunnels: `VmRSS` of the lockrun process (proxy included) before and after \
         opening them from inside the run; kernel socket buffers are not in RSS. \
         {cores} cores, shared with whatever else runs (load average at the end: {}): \
         compare rows of one run, not runs. Took {:.0} s.",
        loadavg(),
        took.as_secs_f64()
    );
    for n in notes {
        let _ = writeln!(s, "\n{n}");
    }
    s
}

/// The download's CPU cost per path, and the rate it allows at most: every
/// core busy at that cost (a path already at that ceiling cannot go faster
/// on this machine, however its proxy is written).
fn cpu_table(s: &mut String, rows: &[Row]) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let d = &rows[0];
    let _ = writeln!(
        s,
        "Where the download's CPU goes (the whole machine, during the median download by \
         cost):\n\n\
         | path | cores busy | CPU s per GiB | at most, all {cores} cores busy: MiB/s | × direct's rate |\n\
         |---|---:|---:|---:|---:|"
    );
    for r in rows {
        let Some(c) = r.cpu else { continue };
        #[allow(clippy::cast_precision_loss)]
        let ceiling = cores as f64 / c.s_per_gib * 1024.0;
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.3} | {:.0} | {:.2} |",
            r.name,
            c.cores,
            c.s_per_gib,
            ceiling,
            if d.mibps > 0.0 {
                ceiling / d.mibps
            } else {
                0.0
            }
        );
    }
    s.push('\n');
}

/// Issue 4's targets, judged on the lockrun row.
fn targets(s: &mut String, l: &Row, d: &Row, idle: &Result<Idle>, idle_n: usize) {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let tput = ratio(l.mibps, d.mibps);
    let c1 = ratio(l.c1.rps, d.c1.rps);
    let c50 = ratio(l.c50.rps, d.c50.rps);
    let added99 = l.c1.p99_us - d.c1.p99_us;
    let _ = writeln!(s, "Issue 4's targets for lockrun:");
    let _ = writeln!(
        s,
        "- throughput ≥ 0.9× direct: {tput:.2}× — {}",
        verdict(tput >= 0.9)
    );
    let _ = writeln!(
        s,
        "- req/s at c=1 ≥ 0.6× direct: {c1:.2}× — {}",
        verdict(c1 >= 0.6)
    );
    let _ = writeln!(
        s,
        "- req/s at c=50 ≥ 0.8× direct: {c50:.2}× — {}",
        verdict(c50 >= 0.8)
    );
    let _ = writeln!(
        s,
        "- added p99 at c=1 < 1 ms: {added99:+.0} µs — {}",
        verdict(added99 < 1000.0)
    );
    match idle {
        Ok(i) => {
            let per = i.per_tunnel_kib();
            let _ = writeln!(
                s,
                "- memory ≤ 64 KiB per idle tunnel: {per:.1} KiB — {} ({} tunnels open; \
                 lockrun's RSS {} → {} KiB{})",
                verdict(per <= 64.0),
                i.opened,
                i.rss_before_kib,
                i.rss_after_kib,
                if i.opened < IDLE_TARGET {
                    format!(
                        "; scaled from {IDLE_TARGET}: the open-files limit here allows {idle_n}, \
                         each tunnel holding two descriptors in lockrun"
                    )
                } else {
                    String::new()
                }
            );
        }
        Err(e) => {
            let _ = writeln!(s, "- memory per idle tunnel: not measured: {e:#}");
        }
    }
    s.push('\n');
}

// ---- the pieces ----

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.as_slice() == b"0\n")
}

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn compile(dir: &Path) -> Result<PathBuf> {
    crate::bench::compile_c(dir, "bench_proxy", SOURCE, &["-pthread"])
}

fn wait_port(addr: SocketAddr, what: &str) -> Result<()> {
    for _ in 0..100 {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not start listening on {addr}")
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Kill and reap on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lockrun run, ended on drop by creating the files its command waits
/// for (so that lockrun tears its run down itself), killed only if it has
/// not ended 10 s later.
struct Run {
    child: Child,
    release: Vec<PathBuf>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for f in &self.release {
            let _ = std::fs::write(f, "");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The upstream's network namespace and veth pair, removed on drop.
struct TestHost {
    ns: String,
    here: String,
    server: Option<Reaped>,
}

impl TestHost {
    fn new() -> Result<Self> {
        let id = std::process::id();
        let (ns, here, there) = (
            format!("lrbench{id}"),
            format!("lrbh{id}"),
            format!("lrbn{id}"),
        );
        lockrun_leftovers::remove_dead("lrbench", "lrbh");
        let holders = lockrun_leftovers::holders(&format!("{HERE_IP}/30"));
        if !holders.is_empty() {
            bail!("{HERE_IP}/30 is already held by {holders:?}: the bench's test host would not be the one reached");
        }
        let h = Self {
            ns: ns.clone(),
            here: here.clone(),
            server: None,
        };
        let nsx = |a: &[&str]| sh(&[&["ip", "netns", "exec", &ns], a].concat());
        sh(&["ip", "netns", "add", &ns])?;
        sh(&[
            "ip", "link", "add", &here, "type", "veth", "peer", "name", &there,
        ])?;
        sh(&["ip", "link", "set", &there, "netns", &ns])?;
        sh(&["ip", "addr", "add", &format!("{HERE_IP}/30"), "dev", &here])?;
        sh(&["ip", "link", "set", &here, "up"])?;
        nsx(&["ip", "addr", "add", &format!("{HOST_IP}/30"), "dev", &there])?;
        nsx(&["ip", "link", "set", &there, "up"])?;
        nsx(&["ip", "link", "set", "lo", "up"])?;
        Ok(h)
    }

    fn serve(&mut self, tool: &Path) -> Result<()> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(tool)
            .arg("serve")
            .stdout(Stdio::null())
            .spawn()
            .context("starting the upstream")?;
        self.server = Some(Reaped(child));
        wait_port(SocketAddr::new(HOST_IP.parse()?, 80), "the upstream")
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.server.take();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.here])
            .output();
    }
}

fn apt_install(pkgs: &[&str]) -> Result<()> {
    eprintln!("xtask bench: installing {}", pkgs.join(" "));
    let out = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(pkgs)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .context("cannot run apt-get")?;
    if !out.status.success() {
        bail!(
            "apt-get install {} failed: {}",
            pkgs.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// A peer proxy or relay on a loopback port of its own, killed on drop.
struct Local {
    addr: SocketAddr,
    _child: Reaped,
}

impl Local {
    /// Install `bin` (package `bin`) if missing, write `config(port)` to
    /// `dir/conf`, start `bin` with `args` then that file, wait for the port.
    fn start(
        dir: &Path,
        bin: &str,
        conf: &str,
        args: &[&str],
        config: impl FnOnce(u16) -> String,
    ) -> Result<Self> {
        if !on_path(bin) {
            apt_install(&[bin])?;
        }
        let port = free_port()?;
        let conf = dir.join(conf);
        std::fs::write(&conf, config(port))?;
        let child = Command::new(bin)
            .args(args)
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        let child = Reaped(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_port(addr, bin)?;
        Ok(Self {
            addr,
            _child: child,
        })
    }

    /// tinyproxy, no filtering.
    fn tinyproxy(dir: &Path) -> Result<Self> {
        Self::start(dir, "tinyproxy", "tinyproxy.conf", &["-d", "-c"], |port| {
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 1024\n\
                 LogLevel Critical\nDisableViaHeader Yes\nConnectPort 80\n"
            )
        })
    }

    /// haproxy in TCP mode in front of the upstream: the relay floor.
    /// Threads: one per CPU (haproxy's default); splice where it pays.
    fn haproxy(dir: &Path) -> Result<Self> {
        Self::start(dir, "haproxy", "haproxy.cfg", &["-db", "-f"], |port| {
            format!(
                "global\n    maxconn 4000\ndefaults\n    mode tcp\n    timeout connect 5s\n    \
                 timeout client 60s\n    timeout server 60s\n    option splice-auto\n\
                 listen relay\n    bind 127.0.0.1:{port}\n    server upstream {HOST_IP}:80\n"
            )
        })
    }
}

struct Srt {
    bin: PathBuf,
}

impl Srt {
    fn find_or_install(workspace: &Path) -> Result<Self> {
        let prefix = workspace.join("target/peers");
        let bin = prefix.join("node_modules/.bin/srt");
        let missing: Vec<&str> = [
            ("socat", "socat"),
            ("rg", "ripgrep"),
            ("bwrap", "bubblewrap"),
        ]
        .into_iter()
        .filter(|(b, _)| !on_path(b))
        .map(|(_, p)| p)
        .collect();
        if !missing.is_empty() {
            apt_install(&missing)?;
        }
        if !bin.is_file() {
            eprintln!(
                "xtask bench: installing sandbox-runtime under {}",
                prefix.display()
            );
            let out = Command::new("npm")
                .arg("install")
                .arg("--prefix")
                .arg(&prefix)
                .arg("@anthropic-ai/sandbox-runtime")
                .output()
                .context("cannot run npm (is node installed?)")?;
            if !out.status.success() || !bin.is_file() {
                bail!(
                    "npm install @anthropic-ai/sandbox-runtime failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(Self { bin })
    }

    /// `srt -s <settings> -c` — the script follows.
    fn cmd(&self, dir: &Path) -> Result<Command> {
        let settings = dir.join("srt-settings.json");
        std::fs::write(
            &settings,
            format!(
                "{{\"network\": {{\"allowedDomains\": [\"{HOST_IP}\"], \"deniedDomains\": []}},\n\
                 \"filesystem\": {{\"denyRead\": [], \"allowWrite\": [\"{}\"], \"denyWrite\": []}}}}\n",
                dir.display()
            ),
        )?;
        let mut c = Command::new(&self.bin);
        c.arg("-s").arg(settings).arg("-c").current_dir(dir);
        Ok(c)
    }
}

struct Lockrun {
    bin: PathBuf,
    dir: PathBuf,
    policy: PathBuf,
}

struct Idle {
    opened: usize,
    rss_before_kib: u64,
    rss_after_kib: u64,
}

impl Idle {
    #[allow(clippy::cast_precision_loss)]
    fn per_tunnel_kib(&self) -> f64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 / self.opened.max(1) as f64
    }
}

/// How many idle tunnels this process's open-files limit allows: lockrun
/// holds two descriptors per tunnel (client and upstream).
fn idle_tunnels_possible() -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok())
        })
        .unwrap_or(1024);
    IDLE_TARGET.min(limit.saturating_sub(400) / 2)
}

impl Lockrun {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--worktree")
            .arg(self.dir.join("wt"))
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .arg("--policy")
            .arg(&self.policy)
            .current_dir(self.dir.join("wt"));
        c
    }

    /// A run that publishes its proxy URL (secret included) and waits until
    /// dropped: for measuring the proxy from outside.
    fn published(&self) -> Result<(Run, String)> {
        let wt = self.dir.join("wt");
        let (url_file, done) = (wt.join("proxy-url"), wt.join("done"));
        let _ = std::fs::remove_file(&url_file);
        let _ = std::fs::remove_file(&done);
        let mut c = self.cmd();
        c.args(["--", "sh", "-c"])
            .arg(format!(
                "echo \"$HTTP_PROXY\" > {u}.part && mv {u}.part {u}; \
                 while [ ! -e {d} ]; do sleep 0.05; done",
                u = url_file.display(),
                d = done.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut run = Run {
            child: c.spawn().context("starting lockrun")?,
            release: vec![done.clone()],
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !url_file.exists() {
            if run.child.try_wait()?.is_some() || Instant::now() > deadline {
                bail!("the run did not publish its proxy URL");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let url = std::fs::read_to_string(&url_file)?;
        let _ = std::fs::remove_file(&url_file);
        Ok((run, url.trim().to_owned()))
    }

    fn idle_tunnels(&self, tool: &Path, n: usize) -> Result<Idle> {
        let wt = self.dir.join("wt");
        let mut c = self.cmd();
        c.args(["--", "sh", "-c"])
            .arg(format!(
                "exec {} tunnels {n} {NAME}:81 \"$HTTP_PROXY\" {}",
                tool.display(),
                wt.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut run = Run {
            child: c.spawn().context("starting lockrun")?,
            release: vec![wt.join("go-0"), wt.join("go-1")],
        };
        let pid = run.child.id();
        let wait = |f: &str, secs: u64, run: &mut Run| -> Result<()> {
            let deadline = Instant::now() + Duration::from_secs(secs);
            while !wt.join(f).exists() {
                if let Some(st) = run.child.try_wait()? {
                    let mut e = String::new();
                    if let Some(mut s) = run.child.stderr.take() {
                        let _ = s.read_to_string(&mut e);
                    }
                    bail!("the run ended ({st}) before {f}: {e}");
                }
                if Instant::now() > deadline {
                    bail!("no {f} after {secs} s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        };
        wait("opened-0", 30, &mut run)?;
        let rss_before_kib = rss_kib(pid)?;
        std::fs::write(wt.join("go-0"), "")?;
        wait("opened-1", 120, &mut run)?;
        // Let the proxy finish its side of the last handshakes.
        std::thread::sleep(Duration::from_millis(300));
        let rss_after_kib = rss_kib(pid)?;
        std::fs::write(wt.join("go-1"), "")?;
        let mut out = String::new();
        if let Some(mut s) = run.child.stdout.take() {
            s.read_to_string(&mut out)?;
        }
        drop(run);
        let opened: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("opened="))
            .with_context(|| format!("no opened= in `{out}`"))?
            .trim()
            .parse()?;
        if opened < n {
            bail!("only {opened} of {n} tunnels opened");
        }
        Ok(Idle {
            opened,
            rss_before_kib,
            rss_after_kib,
        })
    }
}

/// `/proc/loadavg`'s three averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no VmRSS for pid {pid}"))
}
