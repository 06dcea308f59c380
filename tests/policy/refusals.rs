//! What a policy cannot hold is refused when it loads, with one line that
//! says why and what to write instead, and what it can hold is
//! kept and shown as it is:
//! - files that are no policy, or more than 1 MiB, read within a bound;
//! - a denied path that is also writable (a denied dir around a writable
//!   one is kept, and `policy show` says so);
//! - allow entries the proxy's address guard would refuse on every request;
//! - a state dir that is or holds what every command reads.
//!
//! Each refusal is judged from outside: exit 2, one line, nothing run.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{refused, scratch_cli};
use refused::{assert_refused, bounded, capped, capped_via, Bounded};
use scratch_cli::{lockrun, Scratch, BIN};

/// `lockrun ARGS` in the scratch dir (its `home` as `HOME`), its address
/// space capped and killed after 10 s ([`refused::bounded`]).
fn bounded_lockrun(s: &Scratch, args: &[&str]) -> Bounded {
    let mut c = capped(BIN);
    c.args(args).env("HOME", s.0.join("home")).current_dir(&s.0);
    bounded(c, Duration::from_secs(10))
}

/// `lockrun --worktree WT --state-dir STATE ARGS -- touch WT/ran`: refused
/// with `wants`, and nothing ran (no marker, no run dir), judged from outside.
fn run_refused(s: &Scratch, name: &str, wt: &Path, args: &[&str], wants: &[&str]) {
    let marker = wt.join("ran");
    let state = s.0.join("state");
    let mut all = vec![
        "--worktree",
        wt.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    all.extend(["--", "touch", marker.to_str().unwrap()]);
    let got = bounded_lockrun(s, &all);
    assert_refused(name, &got, wants);
    assert!(!marker.exists(), "{name}: the command ran");
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "{name}: a run dir was made"
    );
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A policy file, or a file a policy extends, that is not a regular file
/// (`/dev/zero`, a FIFO, a directory) or holds more than 1 MiB: refused at
/// once, naming the file and why, with nothing read past the bound and
/// nothing run. Control: a policy of exactly 1 MiB loads.
#[test]
fn a_policy_that_is_no_regular_file_or_too_large_is_refused_at_once() {
    let s = Scratch::new("policy-refusals", "unbounded");
    let wt = s.0.join("wt");
    let fifo = s.0.join("policy.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let dir = s.0.join("dir.toml");
    std::fs::create_dir(&dir).unwrap();
    let comment = |n: usize| format!("#{}\n", "x".repeat(n - 2));
    let big = s.0.join("big.toml");
    std::fs::write(&big, comment((1 << 20) + 1)).unwrap();
    let at_limit = s.0.join("limit.toml");
    std::fs::write(&at_limit, comment(1 << 20)).unwrap();
    let extends = |name: &str, what: &str| {
        let f = s.0.join(name);
        std::fs::write(&f, format!("extends = {what:?}\n")).unwrap();
        f
    };
    let by_zero = extends("by-zero.toml", "/dev/zero");
    let by_fifo = extends("by-fifo.toml", "./policy.fifo");
    let by_big = extends("by-big.toml", "./big.toml");
    let cases: [(&str, &Path, &[&str]); 7] = [
        (
            "zero",
            Path::new("/dev/zero"),
            &["cannot read policy /dev/zero: it is a character device, not a regular file"],
        ),
        (
            "fifo",
            &fifo,
            &[p(&fifo), "it is a FIFO, not a regular file"],
        ),
        (
            "dir",
            &dir,
            &[p(&dir), "it is a directory, not a regular file"],
        ),
        (
            "big",
            &big,
            &[p(&big), "it is larger than 1 MiB, the most lockrun reads"],
        ),
        (
            "extends zero",
            &by_zero,
            &["/dev/zero (extended by", p(&by_zero), "character device"],
        ),
        (
            "extends fifo",
            &by_fifo,
            &[p(&fifo), "(extended by", "FIFO"],
        ),
        (
            "extends big",
            &by_big,
            &[p(&big), "(extended by", "larger than 1 MiB"],
        ),
    ];
    for (name, policy, wants) in cases {
        let got_start = std::time::Instant::now();
        run_refused(&s, name, &wt, &["--policy", p(policy)], wants);
        assert!(got_start.elapsed() < Duration::from_secs(5), "{name}");
    }
    let out = lockrun(&s, &["policy", "show", "--policy", p(&at_limit)]);
    assert!(out.status.success(), "{out:?}");
}

/// A path both denied and writable cannot be denied (Landlock only grants,
/// and a writable root is granted whole): refused, naming both entries,
/// whether they are written alike or meet through a symlink, come from the
/// policy file or the flags, or the denied one is a secret denied to every
/// run or `{tmp}`. Nothing runs.
#[test]
#[allow(clippy::too_many_lines)] // a table of cases
fn a_denied_path_that_is_also_writable_is_refused_naming_both() {
    let s = Scratch::new("policy-refusals", "denied-writable");
    let wt = s.0.join("wt");
    let other = s.0.join("other");
    std::fs::create_dir(&other).unwrap();
    let link = s.0.join("link");
    std::os::unix::fs::symlink(&wt, &link).unwrap();
    let home = s.0.join("home");
    let aws = home.join(".aws");
    std::fs::create_dir(&aws).unwrap();
    let ssh = home.join(".ssh");
    let file = |name: &str, text: String| {
        let f = s.0.join(name);
        std::fs::write(&f, text).unwrap();
        f
    };
    let deny_wt = file(
        "deny-wt.toml",
        "[filesystem]\ndeny_read = [\"{worktree}\"]\n".into(),
    );
    let writable = file(
        "writable.toml",
        format!("[filesystem]\nwritable = [{:?}]\n", p(&other)),
    );
    let deny_tmp = file(
        "deny-tmp.toml",
        "[filesystem]\ndeny_read = [\"{tmp}\"]\n".into(),
    );
    let tmp_sub = file(
        "tmp-sub.toml",
        "[filesystem]\nwritable = [\"{tmp}/cache\"]\ndeny_read = [\"{tmp}/cache/\"]\n".into(),
    );
    let same = "are the same path";
    let cases: Vec<(&str, &Path, Vec<&str>, Vec<String>)> = vec![
        (
            "flag is the worktree",
            &wt,
            vec!["--deny-read", p(&wt)],
            vec![
                format!("--deny-read {} and the worktree {} {same}", p(&wt), p(&wt)),
                "deny paths inside the worktree instead".into(),
            ],
        ),
        (
            "through a symlink",
            &wt,
            vec!["--deny-read", p(&link)],
            vec![format!(
                "--deny-read {} and the worktree {} {same} ({}, through symlinks)",
                p(&link),
                p(&wt),
                p(&wt)
            )],
        ),
        (
            "flag is --allow-write",
            &wt,
            vec!["--allow-write", p(&other), "--deny-read", p(&other)],
            vec![
                format!(
                    "--deny-read {} and --allow-write {} {same}",
                    p(&other),
                    p(&other)
                ),
                "drop one of the two".into(),
            ],
        ),
        (
            "key is the worktree",
            &wt,
            vec!["--policy", p(&deny_wt)],
            vec![format!(
                "filesystem.deny_read {} (in {}) and the worktree",
                p(&wt),
                p(&deny_wt)
            )],
        ),
        (
            "flag is a writable key",
            &wt,
            vec!["--policy", p(&writable), "--deny-read", p(&other)],
            vec![format!(
                "--deny-read {} and filesystem.writable {} (in {}) {same}",
                p(&other),
                p(&other),
                p(&writable)
            )],
        ),
        (
            "{tmp}",
            &wt,
            vec!["--policy", p(&deny_tmp)],
            vec![
                format!(
                    "filesystem.deny_read {{tmp}} (in {}) and {{tmp}} (the run's temp dir) {same}",
                    p(&deny_tmp)
                ),
                "deny paths inside {tmp} instead".into(),
            ],
        ),
        (
            "beneath {tmp}",
            &wt,
            vec!["--policy", p(&tmp_sub)],
            vec![
                "filesystem.deny_read {tmp}/cache".into(),
                "filesystem.writable {tmp}/cache".into(),
            ],
        ),
        (
            "a secret made writable",
            &wt,
            vec!["--allow-write", p(&ssh)],
            vec![
                format!(
                    "the secret {} (denied to every run) and --allow-write {} {same}",
                    p(&ssh),
                    p(&ssh)
                ),
                "make a path beside it writable instead".into(),
            ],
        ),
        (
            "a secret as the worktree",
            &aws,
            vec![],
            vec![format!(
                "the secret {} (denied to every run) and the worktree {} {same}",
                p(&aws),
                p(&aws)
            )],
        ),
    ];
    for (name, worktree, args, wants) in &cases {
        let wants: Vec<&str> = wants.iter().map(String::as_str).collect();
        run_refused(&s, name, worktree, args, &wants);
    }
}

/// What stays as it was, and is shown as it is: a denied dir that holds a
/// writable one denies all of it but the writable one (the more specific
/// grant wins, as for the state dir and the agents' dirs in it); `policy
/// show` says so beside the denied path, and a real run holds to it,
/// judged from outside. A denied path inside a writable dir narrows that
/// dir, as before.
#[test]
fn a_denied_dir_around_a_writable_one_is_denied_but_that_one_as_policy_show_says() {
    let s = Scratch::new("policy-refusals", "carved");
    let top = s.0.join("top");
    let wt = top.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::write(top.join("secret"), "top-secret").unwrap();
    std::fs::write(wt.join("own"), "own-file").unwrap();
    let state = s.0.join("state");
    let show = lockrun(
        &s,
        &[
            "policy",
            "show",
            "--worktree",
            p(&wt),
            "--state-dir",
            p(&state),
            "--deny-read",
            p(&top),
            "--deny-read",
            p(&wt.join("inner")),
        ],
    );
    assert!(show.status.success(), "{show:?}");
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.lines()
            .any(|l| l == format!("  {}, but not the writable {} beneath it", p(&top), p(&wt))),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(&format!(
            "  warning: {} is writable but holds the denied {}",
            p(&wt),
            p(&wt.join("inner"))
        ))),
        "{text}"
    );
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test may not skip under CI=true"
        );
        eprintln!("skipped: a_denied_dir_around_a_writable_one_is_denied_but_that_one_as_policy_show_says: the run needs root");
        return;
    }
    let out = lockrun(
        &s,
        &[
            "--worktree", p(&wt), "--state-dir", p(&state), "--deny-read", p(&top), "--",
            "sh", "-c", "cat \"$0/own\" > \"$0/seen-own\"; cat \"$0/../secret\" > \"$0/seen-secret\"; echo $? > \"$0/rc\"",
            p(&wt),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(wt.join("seen-own")).unwrap(),
        "own-file"
    );
    assert_eq!(std::fs::read_to_string(wt.join("seen-secret")).unwrap(), "");
    assert_eq!(std::fs::read_to_string(wt.join("rc")).unwrap(), "1\n");
}

/// What the proxy's address guard would refuse on every request is refused
/// when the policy loads, with the reason and what to write instead: a
/// wildcard of one label, an IP literal of loopback, an unspecified,
/// link-local or ungranted private address or one of this host's own, a
/// private grant of every address, of loopback, of a public network or of
/// this host. Controls: what can be reached still loads.
#[test]
#[allow(clippy::too_many_lines)] // a table of cases
fn allow_entries_the_proxy_could_never_reach_are_refused_when_the_policy_loads() {
    let s = Scratch::new("policy-refusals", "unreachable");
    let file = |name: &str, text: &str| {
        let f = s.0.join(name);
        std::fs::write(&f, text).unwrap();
        f
    };
    let grant = |network: &str| {
        format!("[[network.private]]\nhosts = [\"git.internal.example\"]\nnetwork = {network:?}\n")
    };
    let mut cases: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    let mut flag = |name: &str, host: &str, wants: &[&str]| {
        cases.push((
            name.into(),
            vec!["--allow-host".into(), host.into()],
            wants.iter().map(|w| (*w).to_owned()).collect(),
        ));
    };
    flag(
        "*.com",
        "*.com",
        &[
            "--allow-host `*.com`",
            "a wildcard must leave at least two labels, as in `*.example.com`",
            "no public-suffix list",
        ],
    );
    flag("*.co:8080", "*.co:8080", &["at least two labels"]);
    flag(
        "loopback",
        "127.0.0.1:8080",
        &[
            "`127.0.0.1:8080` can never be reached",
            "127.0.0.1, loopback",
            "local = [\"127.0.0.1:8080\"]",
            "--allow-local 127.0.0.1:8080",
        ],
    );
    flag("unspecified", "0.0.0.0", &["0.0.0.0, unspecified"]);
    flag(
        "metadata",
        "169.254.169.254:80",
        &["169.254.169.254, link-local"],
    );
    flag(
        "private, no grant",
        "10.1.2.3:80",
        &[
            "10.1.2.3, private network (RFC 1918)",
            "[[network.private]]",
        ],
    );
    let mut policy = |name: &str, text: &str, wants: &[&str]| {
        let f = file(
            &format!("{}.toml", name.replace(['/', ' ', ':'], "-")),
            text,
        );
        cases.push((
            name.into(),
            vec!["--policy".into(), p(&f).into()],
            wants.iter().map(|w| (*w).to_owned()).collect(),
        ));
    };
    policy(
        "0.0.0.0/0",
        &grant("0.0.0.0/0"),
        &["network.private `0.0.0.0/0`", "every address"],
    );
    policy(
        "::/0",
        &grant("::/0"),
        &["network.private `::/0`", "every address"],
    );
    policy(
        "127.0.0.0/8",
        &grant("127.0.0.0/8"),
        &["127.0.0.0, loopback", "local"],
    );
    policy("0.0.0.0/1", &grant("0.0.0.0/1"), &["0.0.0.0, unspecified"]);
    policy(
        "96.0.0.0/3",
        &grant("96.0.0.0/3"),
        &["127.255.255.255, loopback"],
    );
    policy("169.254.0.0/16", &grant("169.254.0.0/16"), &["link-local"]);
    policy("public", &grant("8.8.8.0/24"), &["8.8.8.0/24", "public"]);
    policy(
        "beyond",
        &grant("10.0.0.0/7"),
        &["10.0.0.0/7", "one private network"],
    );
    policy(
        "allow *.com",
        "[network]\nallow = [\"*.com\"]\n",
        &["`network.allow`", "*.com", "at least two labels"],
    );
    for (name, args, wants) in &cases {
        let mut all = vec!["policy", "show", "--worktree", "wt", "--state-dir", "state"];
        all.extend(args.iter().map(String::as_str));
        let got = bounded_lockrun(&s, &all);
        let wants: Vec<&str> = wants.iter().map(String::as_str).collect();
        assert_refused(name, &got, &wants);
    }
    // Controls: reachable entries load as before.
    let controls = file(
        "reachable.toml",
        "[network]\nallow = [\"*.example.com\", \"8.8.8.8:443\", \"10.20.0.5:80\", \"*.0.2:80\"]\ndeny = [\"*.com\"]\n\
         [[network.private]]\nhosts = [\"10.20.0.5\", \"git.internal.example\"]\nnetwork = \"10.20.0.0/16\"\n\
         [[network.private]]\nhosts = [\"git6.internal.example\"]\nnetwork = \"fd00:1::/32\"\n\
         [[network.private]]\nhosts = [\"cgnat.internal.example\"]\nnetwork = \"100.64.0.0/10\"\n",
    );
    let out = lockrun(
        &s,
        &[
            "policy",
            "show",
            "--worktree",
            "wt",
            "--state-dir",
            "state",
            "--policy",
            p(&controls),
        ],
    );
    assert!(out.status.success(), "{out:?}");
}

/// A network namespace of the test's own whose loopback interface also
/// holds 10.216.0.1/24: to lockrun inside it, an address of this host, and
/// a private one (the machine's own may lie in a range refused for itself,
/// which would hide the check). Removed on drop.
struct OwnAddressNs(String);

impl OwnAddressNs {
    fn new() -> Self {
        let ns = format!("lockrun-own-addr-{}", std::process::id());
        let ok = Command::new("sh")
            .args(["-c", &format!(
                "ip netns add {ns} && ip -n {ns} addr add 10.216.0.1/24 dev lo && ip -n {ns} link set lo up"
            )])
            .status()
            .unwrap();
        let made = Self(ns);
        assert!(ok.success(), "making {}", made.0);
        made
    }
}

impl Drop for OwnAddressNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// An allow entry or a private grant that is this host's own address is
/// refused when the policy loads (its addresses read with `getifaddrs`):
/// the proxy would refuse it on every request. Control: another address of
/// the same granted network loads.
#[test]
fn an_allowed_address_of_this_host_is_refused_when_the_policy_loads() {
    let test = "an_allowed_address_of_this_host_is_refused_when_the_policy_loads";
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test {test} may not skip under CI=true"
        );
        eprintln!("skipped: {test}: needs root for ip netns");
        return;
    }
    let s = Scratch::new("policy-refusals", "own-address");
    let ns = OwnAddressNs::new();
    let file = |name: &str, text: &str| {
        let f = s.0.join(name);
        std::fs::write(&f, text).unwrap();
        f
    };
    let grant = |hosts: &str, network: &str| {
        format!("[[network.private]]\nhosts = [{hosts:?}]\nnetwork = {network:?}\n")
    };
    let show = |policy: &Path| {
        let mut c = capped_via(&["ip", "netns", "exec", &ns.0], BIN);
        c.args([
            "policy",
            "show",
            "--worktree",
            "wt",
            "--state-dir",
            "state",
            "--policy",
            p(policy),
        ])
        .env("HOME", s.0.join("home"))
        .current_dir(&s.0);
        bounded(c, Duration::from_secs(10))
    };
    let literal = file(
        "literal.toml",
        &format!(
            "[network]\nallow = [\"10.216.0.1:80\"]\n{}",
            grant("10.216.0.1", "10.216.0.0/24")
        ),
    );
    assert_refused(
        "literal",
        &show(&literal),
        &[
            "`10.216.0.1:80` can never be reached",
            "10.216.0.1, an address of this host",
        ],
    );
    let net = file("net.toml", &grant("git.internal.example", "10.216.0.1/32"));
    assert_refused(
        "grant",
        &show(&net),
        &["network.private `10.216.0.1/32`", "an address of this host"],
    );
    let other = file(
        "other.toml",
        &format!(
            "[network]\nallow = [\"10.216.0.2:80\"]\n{}",
            grant("10.216.0.2", "10.216.0.0/24")
        ),
    );
    let got = show(&other);
    assert_eq!(got.code, Some(0), "{got:?}");
}

/// The state dir is denied to every run: one that is, or holds, what every
/// command reads (`/`, the system's programs and libraries, a directory on
/// `PATH`, the home, the command itself) would fail each run obscurely
/// (`126 sh: Permission denied`). Refused when the policy loads, saying
/// why and what to choose. Control: a state dir that holds the worktree
/// still works (the worktree, more specific, is granted).
#[test]
fn a_state_dir_that_holds_what_every_command_needs_is_refused() {
    let s = Scratch::new("policy-refusals", "state-holds");
    let root_link = s.0.join("root-link");
    std::os::unix::fs::symlink("/", &root_link).unwrap();
    let tools = s.0.join("tools");
    std::fs::create_dir_all(tools.join("bin")).unwrap();
    let path = format!("{}:/usr/bin:/bin", p(&tools.join("bin")));
    let in_file = s.0.join("state-etc.toml");
    std::fs::write(&in_file, "[run]\nstate_dir = \"/etc\"\n").unwrap();
    let home = s.0.join("home");
    let cases: Vec<(&str, Vec<&str>, Vec<String>)> = vec![
        ("/", vec!["--state-dir", "/"], vec!["--state-dir /: the state dir is denied to every run, and it holds /usr (the system's programs and libraries), which every command reads".into(), "choose a dir of lockrun's own, such as /var/lib/lockrun".into()]),
        ("/usr", vec!["--state-dir", "/usr"], vec!["--state-dir /usr:".into(), "holds /usr".into()]),
        ("/etc in a file", vec!["--policy", p(&in_file)], vec![format!("run.state_dir /etc (in {})", p(&in_file)), "holds /etc".into()]),
        ("a symlink to /", vec!["--state-dir", p(&root_link)], vec![format!("--state-dir {} (/, through symlinks)", p(&root_link)), "holds /usr".into()]),
        ("the home", vec!["--state-dir", p(&home)], vec![format!("holds {}, the home", p(&home))]),
        ("a dir on PATH", vec!["--state-dir", p(&tools)], vec![format!("holds {}, a directory on PATH", p(&tools.join("bin")))]),
    ];
    for (name, args, wants) in &cases {
        let mut c = capped(BIN);
        c.args(["policy", "show", "--worktree", "wt"])
            .args(args)
            .env("HOME", &home)
            .env("PATH", &path)
            .current_dir(&s.0);
        let wants: Vec<&str> = wants.iter().map(String::as_str).collect();
        assert_refused(name, &bounded(c, Duration::from_secs(10)), &wants);
    }
    // The command itself, named by its path: a real run, refused before
    // anything is made in the state dir.
    let held = s.0.join("held");
    std::fs::create_dir_all(held.join("x")).unwrap();
    let cmd = held.join("x/cmd");
    std::fs::write(&cmd, "#!/bin/sh\ntouch \"$1\"\n").unwrap();
    std::fs::set_permissions(&cmd, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let marker = s.0.join("wt/ran");
    let got = bounded_lockrun(
        &s,
        &[
            "--worktree",
            "wt",
            "--state-dir",
            p(&held),
            "--",
            p(&cmd),
            p(&marker),
        ],
    );
    assert_refused(
        "the command",
        &got,
        &[&format!(
            "--state-dir {}: the state dir is denied to every run, and it holds the command {}",
            p(&held),
            p(&cmd)
        )],
    );
    assert!(
        !marker.exists() && !held.join("runs").exists(),
        "the command ran"
    );

    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kernel test may not skip under CI=true"
        );
        eprintln!("skipped: a_state_dir_that_holds_what_every_command_needs_is_refused: the control run needs root");
        return;
    }
    let around = s.0.join("around");
    std::fs::create_dir_all(around.join("wt")).unwrap();
    let out = lockrun(
        &s,
        &[
            "--worktree",
            p(&around.join("wt")),
            "--state-dir",
            p(&around),
            "--",
            "sh",
            "-c",
            "echo hi > \"$0/ran\"",
            p(&around.join("wt")),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(around.join("wt/ran")).unwrap(),
        "hi\n"
    );
}
