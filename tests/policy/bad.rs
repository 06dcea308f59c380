//! Every bad policy is refused the same way: 95
//! malformed or contradictory policies and flags — TOML that does not
//! parse, wrong types, unknown keys, values out of range, bad hosts, ports
//! and networks, entries the proxy could never reach, a denied path that is
//! writable, a state dir that holds what commands need, and files that are
//! not policies at all (`/dev/zero`, a FIFO, a directory, a missing file, a
//! looping or endless `extends`). Each is handed to a real run of a command
//! that would leave a marker, and must end with exit status 2 and exactly
//! one line on stderr, `lockrun: …`, saying what is wrong; within a few
//! seconds (killed past 10), its address space capped; and, judged from
//! outside, with nothing run: no marker, no run dir.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::refused;
use refused::{assert_refused, bounded, capped};

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// How long one refusal may take at most (it takes milliseconds): a
/// bound on a hang, not a measure of speed, stretched where the machine is
/// slow (`tests/support/slow.rs`).
fn each() -> Duration {
    crate::support::slow::patience(Duration::from_secs(5))
}

/// One case's own dir: `wt`, `home`, `state`, and its files.
struct Scratch(PathBuf);

impl Scratch {
    fn new(n: usize) -> Self {
        let p = std::env::temp_dir().join(format!("lockrun-bad-policy-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        for d in ["wt", "home", "state"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        Self(p.canonicalize().unwrap())
    }

    fn write(&self, name: &str, text: impl AsRef<[u8]>) -> String {
        let f = self.0.join(name);
        std::fs::write(&f, text).unwrap();
        f.to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a case is given to lockrun.
enum Given {
    /// A policy file of this text (`bad.toml`).
    Toml(&'static str),
    /// Made in the scratch dir: the extra arguments (`--policy …` and flags).
    Made(fn(&Scratch) -> Vec<String>),
}

use Given::{Made, Toml};

/// (name, policy, what the one line must hold)
const CASES: &[(&str, Given, &str)] = &[
    // TOML that does not parse.
    ("unclosed string", Toml("[network]\nallow = [\"a.example.com]\n"), "bad.toml:2:"),
    ("unclosed table", Toml("[network\n"), "bad.toml:1:"),
    ("duplicate key", Toml("[run]\nmax_connections = 1\nmax_connections = 2\n"), "bad.toml:3:"),
    ("duplicate table", Toml("[run]\n[run]\n"), "bad.toml:2:"),
    ("bare word", Toml("allow\n"), "bad.toml:1:"),
    ("bad escape", Toml("[env]\nX = \"\\q\"\n"), "bad.toml:2:"),
    ("integer overflow", Toml("[run]\nmax_connections = 99999999999999999999\n"), "bad.toml:2:"),
    ("nested without end", Toml("x = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"), "bad.toml:1:"),
    ("not UTF-8", Made(|s| vec!["--policy".into(), s.write("bad.toml", b"[run]\n\xff\xfe = 1\n")]), "it is not UTF-8 text"),
    ("NUL byte", Toml("[env]\nX = \"a\0b\"\n"), "bad.toml:2:"),
    // Unknown keys and tables.
    ("unknown top-level key", Toml("colour = \"blue\"\n"), "unknown field `colour`"),
    ("misspelt writable", Toml("[filesystem]\nwriteable = []\n"), "did you mean `writable`"),
    ("misspelt allow", Toml("[network]\nalow = []\n"), "did you mean `allow`"),
    ("unknown table", Toml("[netwrok]\nallow = []\n"), "did you mean `network`"),
    ("dashed key", Toml("[run]\nstate-dir = \"/x\"\n"), "unknown field `state-dir`"),
    ("unknown grant key", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnet = \"10.0.0.0/8\"\n"), "unknown field `net`"),
    // Wrong types.
    ("extends a number", Toml("extends = 5\n"), "invalid type"),
    ("writable a string", Toml("[filesystem]\nwritable = \"/x\"\n"), "invalid type"),
    ("allow a number", Toml("[network]\nallow = [1]\n"), "invalid type"),
    ("idle tunnel a word", Toml("[run]\nidle_tunnel_secs = \"long\"\n"), "invalid type"),
    ("memory a bare number", Toml("[run]\nmax_memory = 8\n"), "a size with its unit"),
    ("tasks a boolean", Toml("[run]\nmax_tasks = true\n"), "a number of tasks"),
    ("env a number", Toml("[env]\nX = 1\n"), "invalid type"),
    ("resolve a string", Toml("[network.resolve]\n\"a.example.com\" = \"192.0.2.1\"\n"), "invalid type"),
    ("filesystem a number", Toml("filesystem = 3\n"), "invalid type"),
    // Values out of range.
    ("no connections", Toml("[run]\nmax_connections = 0\n"), "must be at least 1"),
    ("negative connections", Toml("[run]\nmax_connections = -1\n"), "bad.toml:2:"),
    ("no idle time", Toml("[run]\nidle_tunnel_secs = 0\n"), "must be at least 1"),
    ("Landlock ABI 0", Toml("[run]\nlandlock_abi = 0\n"), "must be at least 1"),
    ("Landlock ABI 300", Toml("[run]\nlandlock_abi = 300\n"), "bad.toml:2:"),
    ("no tasks", Toml("[run]\nmax_tasks = 0\n"), "must be from 1 to"),
    ("tasks beyond the kernel's", Toml("[run]\nmax_tasks = 99999999999\n"), "must be from 1 to"),
    ("too little memory", Toml("[run]\nmax_memory = \"15MiB\"\n"), "below the least"),
    ("more than the machine", Toml("[run]\nmax_memory = \"101%\"\n"), "from 1% to 100%"),
    ("memory beyond range", Toml("[run]\nmax_memory = \"99999999999TiB\"\n"), "not a whole number in range"),
    // Paths.
    ("relative writable", Toml("[filesystem]\nwritable = [\"build/out\"]\n"), "is relative"),
    ("unknown placeholder", Toml("[filesystem]\ndeny_read = [\"{nope}/x\"]\n"), "unknown placeholder"),
    ("out of {tmp}", Toml("[filesystem]\nwritable = [\"{tmp}/../x\"]\n"), "without .."),
    ("state dir in {tmp}", Toml("[run]\nstate_dir = \"{tmp}/state\"\n"), "cannot be under {tmp}"),
    ("relative state dir", Toml("[run]\nstate_dir = \"state\"\n"), "is relative"),
    ("the state dir writable", Toml("[filesystem]\nwritable = [\"{state}\"]\n"), "is lockrun's state dir"),
    ("a run dir writable", Toml("[filesystem]\nwritable = [\"{state}/runs/other\"]\n"), "in the run dirs"),
    // Hosts and ports.
    ("wildcard inside", Toml("[network]\nallow = [\"*evil\"]\n"), "`*` may only stand alone"),
    ("wildcard in the middle", Toml("[network]\nallow = [\"a.*.com\"]\n"), "`*` may only stand alone"),
    ("everything", Toml("[network]\nallow = [\"*\"]\n"), "`*` may only stand alone"),
    ("empty wildcard", Toml("[network]\nallow = [\"*.\"]\n"), "empty host name"),
    ("a top-level domain", Toml("[network]\nallow = [\"*.com\"]\n"), "at least two labels"),
    ("a top-level domain and port", Toml("[network]\nallow = [\"*.co:8080\"]\n"), "at least two labels"),
    ("a space", Toml("[network]\nallow = [\"a b.example\"]\n"), "invalid host name"),
    ("leading hyphen", Toml("[network]\nallow = [\"-a.example\"]\n"), "invalid host name"),
    ("empty label", Toml("[network]\nallow = [\"a..example\"]\n"), "invalid host name"),
    ("label too long", Made(|s| vec!["--policy".into(), s.write("bad.toml", format!("[network]\nallow = [\"{}.example\"]\n", "a".repeat(64)))]), "invalid host name"),
    ("port 0", Toml("[network]\nallow = [\"a.example.com:0\"]\n"), "invalid port `0`"),
    ("port 70000", Toml("[network]\nallow = [\"a.example.com:70000\"]\n"), "invalid port `70000`"),
    ("named port", Toml("[network]\nallow = [\"a.example.com:https\"]\n"), "invalid port `https`"),
    ("negative port", Made(|_| vec!["--allow-host".into(), "a.example.com:-1".into()]), "invalid port `-1`"),
    ("deny two wildcards", Toml("[network]\ndeny = [\"*.*.com\"]\n"), "`*` may only stand alone"),
    ("local not loopback", Toml("[network]\nlocal = [\"192.0.2.1:5432\"]\n"), "only loopback endpoints"),
    ("local without port", Toml("[network]\nlocal = [\"127.0.0.1\"]\n"), "expected ADDRESS:PORT"),
    ("local port 0", Made(|_| vec!["--allow-local".into(), "127.0.0.1:0".into()]), "port 0"),
    ("resolve not an address", Toml("[network.resolve]\n\"a.example.com\" = [\"192.0.2\"]\n"), "is not an IP address"),
    ("resolve to nothing", Toml("[network.resolve]\n\"a.example.com\" = []\n"), "give at least one address"),
    ("resolve a bad name", Toml("[network.resolve]\n\"a b\" = [\"192.0.2.1\"]\n"), "invalid host name"),
    ("tls_ca relative", Toml("[network]\ntls_ca = \"ca.pem\"\n"), "`network.tls_ca`: `ca.pem`: give an absolute path"),
    // Networks and addresses the proxy could never reach.
    ("host bits set", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"10.0.0.1/8\"\n"), "host bits zero"),
    ("prefix too long", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"10.0.0.0/33\"\n"), "invalid network"),
    ("grant to nobody", Toml("[[network.private]]\nhosts = []\nnetwork = \"10.0.0.0/8\"\n"), "name at least one host"),
    ("grant every IPv4 address", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"0.0.0.0/0\"\n"), "every address"),
    ("grant every IPv6 address", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"::/0\"\n"), "every address"),
    ("grant loopback", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"127.0.0.0/8\"\n"), "loopback"),
    ("grant a public network", Toml("[[network.private]]\nhosts = [\"a.example\"]\nnetwork = \"8.8.8.0/24\"\n"), "public"),
    ("allow loopback", Toml("[network]\nallow = [\"127.0.0.1:8080\"]\n"), "local = [\"127.0.0.1:8080\"]"),
    ("allow unspecified", Made(|_| vec!["--allow-host".into(), "0.0.0.0".into()]), "0.0.0.0, unspecified"),
    ("allow cloud metadata", Toml("[network]\nallow = [\"169.254.169.254:80\"]\n"), "link-local"),
    ("allow private, ungranted", Toml("[network]\nallow = [\"10.1.2.3:80\"]\n"), "[[network.private]]"),
    // Environment.
    ("env name with =", Toml("[env]\n\"A=B\" = \"x\"\n"), "invalid environment variable"),
    ("env empty name", Toml("[env]\n\"\" = \"x\"\n"), "invalid environment variable"),
    // Denied and writable at once.
    ("deny the worktree", Toml("[filesystem]\ndeny_read = [\"{worktree}\"]\n"), "and the worktree"),
    ("deny {tmp}", Toml("[filesystem]\ndeny_read = [\"{tmp}\"]\n"), "the run's temp dir"),
    ("deny what is writable", Made(|s| {
        let other = s.0.join("home/out");
        std::fs::create_dir_all(&other).unwrap();
        let o = other.to_str().unwrap().to_owned();
        vec!["--allow-write".into(), o.clone(), "--deny-read".into(), o]
    }), "are the same path"),
    ("a secret writable", Made(|s| vec!["--allow-write".into(), s.0.join("home/.ssh").to_str().unwrap().into()]), "denied to every run"),
    // A state dir that holds what commands need.
    ("the home as state dir", Made(|s| vec!["--state-dir".into(), s.0.join("home").to_str().unwrap().into()]), ", the home"),
    ("the home as state dir, in the file", Made(|s| {
        let policy = s.write("bad.toml", "[run]\nstate_dir = \"{home}\"\n");
        vec!["--policy".into(), policy, "--state-dir".into(), String::new()]
    }), ", the home"),
    ("a state dir that holds the command", Made(|s| {
        std::fs::create_dir_all(s.0.join("tools")).unwrap();
        let cmd = s.write("tools/mark", "#!/bin/sh\ntouch \"$1\"\n");
        std::fs::set_permissions(&cmd, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        vec!["--state-dir".into(), s.0.join("tools").to_str().unwrap().into(), "--".into(), cmd]
    }), "holds the command"),
    // Files that are no policy.
    ("/dev/zero", Made(|_| vec!["--policy".into(), "/dev/zero".into()]), "a character device, not a regular file"),
    ("a FIFO", Made(|s| {
        let f = s.0.join("policy.fifo");
        nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        vec!["--policy".into(), f.to_str().unwrap().into()]
    }), "a FIFO, not a regular file"),
    ("a directory", Made(|s| vec!["--policy".into(), s.0.join("home").to_str().unwrap().into()]), "a directory, not a regular file"),
    ("a missing file", Made(|s| vec!["--policy".into(), s.0.join("absent.toml").to_str().unwrap().into()]), "No such file"),
    ("a missing preset", Made(|_| vec!["--policy".into(), "no-such-preset".into()]), "not a preset"),
    ("more than 1 MiB", Made(|s| vec!["--policy".into(), s.write("big.toml", format!("#{}\n", "x".repeat(1 << 20)))]), "larger than 1 MiB"),
    ("extends /dev/zero", Toml("extends = \"/dev/zero\"\n"), "/dev/zero (extended by"),
    ("extends a FIFO", Made(|s| {
        nix::unistd::mkfifo(&s.0.join("p.fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        vec!["--policy".into(), s.write("bad.toml", "extends = \"./p.fifo\"\n")]
    }), "a FIFO, not a regular file"),
    ("extends a missing file", Toml("extends = \"absent.toml\"\n"), "absent.toml (extended by"),
    ("extends itself", Toml("extends = \"bad.toml\"\n"), "`extends` cycle"),
    ("extends in a loop", Made(|s| {
        s.write("a.toml", "extends = \"b.toml\"\n");
        s.write("b.toml", "extends = \"a.toml\"\n");
        vec!["--policy".into(), s.0.join("a.toml").to_str().unwrap().into()]
    }), "`extends` cycle"),
    ("extends without end", Made(|s| {
        for i in 0..40 {
            s.write(&format!("p{i}.toml"), format!("extends = \"p{}.toml\"\n", i + 1));
        }
        s.write("p40.toml", "");
        vec!["--policy".into(), s.0.join("p0.toml").to_str().unwrap().into()]
    }), "`extends` chain longer than"),
];

/// The first thing beneath `dir` that a run makes in its state dir (its
/// run dirs, spares, the masks), if any: found anywhere in the case's
/// scratch dir, wherever the case put its state dir.
fn made_by_a_run(dir: &Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if ["runs", "spare", "sealed-file", "sealed-dir"]
            .iter()
            .any(|n| name == *n)
        {
            return Some(path);
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(found) = made_by_a_run(&path) {
                return Some(found);
            }
        }
    }
    None
}

/// One case, given to a real run: refused, in time, and nothing ran.
fn one_case(n: usize, name: &str, given: &Given, want: &str) {
    let s = Scratch::new(n);
    let marker = s.0.join("wt/ran");
    let mut args: Vec<String> = match given {
        Toml(text) => vec!["--policy".into(), s.write("bad.toml", text)],
        Made(make) => make(&s),
    };
    // A command of the case's own comes after its own `--`.
    let command = match args.iter().position(|a| a == "--") {
        Some(at) => args.split_off(at),
        None => vec!["--".into(), "touch".into()],
    };
    // The case's own state dir, if it names one (an empty one: the
    // policy file's, none given here).
    let mut own_state = false;
    if let Some(at) = args.iter().position(|a| a == "--state-dir") {
        own_state = true;
        if args[at + 1].is_empty() {
            args.drain(at..at + 2);
        }
    }
    let mut c = capped(BIN);
    c.arg("--worktree").arg(s.0.join("wt"));
    if !own_state {
        c.arg("--state-dir").arg(s.0.join("state"));
    }
    c.args(&args)
        .args(&command)
        .arg(&marker)
        .env("HOME", s.0.join("home"))
        .current_dir(&s.0);
    let got = bounded(c, Duration::from_secs(10));
    assert_refused(name, &got, &[want]);
    assert!(got.took < each(), "{name}: took {:?}", got.took);
    assert!(!marker.exists(), "{name}: the command ran");
    assert_eq!(made_by_a_run(&s.0), None, "{name}: a run made it");
}

#[test]
fn every_bad_policy_is_refused_with_one_line_and_nothing_runs() {
    assert!(CASES.len() >= 75, "{} cases", CASES.len());
    // Every case is tried, and every failure named at the end.
    let mut failed = Vec::new();
    for (n, (name, given, want)) in CASES.iter().enumerate() {
        if let Err(e) = std::panic::catch_unwind(|| one_case(n, name, given, want)) {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failed.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        CASES.len(),
        failed.join("\n")
    );
}

/// The harness itself: a good policy, given the same way, runs the command
/// (the marker appears, exit 0). Else every refusal above could be any
/// failure of the harness.
#[test]
fn a_good_policy_given_the_same_way_runs() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test may not skip under CI=true"
        );
        eprintln!("skipped: a_good_policy_given_the_same_way_runs: a run needs root");
        return;
    }
    let s = Scratch::new(9999);
    let marker = s.0.join("wt/ran");
    let policy = s.write("good.toml", "[network]\nallow = [\"*.example.com\"]\n");
    let mut c = capped(BIN);
    c.arg("--worktree")
        .arg(s.0.join("wt"))
        .arg("--state-dir")
        .arg(s.0.join("state"))
        .args(["--policy", &policy, "--", "touch"])
        .arg(&marker)
        .env("HOME", s.0.join("home"))
        .current_dir(&s.0);
    let got = bounded(c, Duration::from_mins(1));
    assert_eq!(got.code, Some(0), "{got:?}");
    assert!(marker.exists());
}
