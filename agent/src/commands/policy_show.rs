//! `lockrun policy show`: the effective policy after merging files and flags,
//! with every path resolved, as text or JSON.

use std::fmt::Write as _;
use std::path::Path;

use crate::cli::ShowArgs;
use crate::exit;
use crate::fs;
use crate::kernel::Features;
use crate::policy::{overlap, runs_later};
use crate::policy::{PathSpec, Policy};
use crate::shown::say;

/// Run `policy show`; returns the exit status.
#[must_use]
pub fn run(args: &ShowArgs) -> i32 {
    let policy = match super::run::load(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            say!("lockrun: {e}");
            return e.exit_code();
        }
    };
    let mut view = View::of(&policy);
    if args.rules {
        match rules(&policy) {
            Ok(r) => view.rules = Some(r),
            Err(e) => {
                say!("lockrun: the Landlock rules cannot be built on this machine: {e}");
                return exit::SETUP;
            }
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&view) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                say!("lockrun: cannot print the policy as JSON: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", view.text());
    }
    0
}

/// What `policy show` prints: the policy plus what it implies.
#[derive(serde::Serialize)]
pub struct View<'a> {
    pub policy: &'a Policy,
    /// Writable paths in full, `{tmp}` shown as the placeholder.
    pub writable: Vec<String>,
    /// Deny-read paths in full: the policy's and the fixed floor.
    pub deny_read: Vec<String>,
    /// Writable paths that reach where code runs later, outside the
    /// sandbox ([`crate::policy::runs_later`]): each a warning line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_later: Vec<String>,
    /// Writable dirs that hold a denied path, so cannot be granted whole
    /// ([`crate::fs::Narrowed`]): each a warning line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub narrowed: Vec<String>,
    /// Dirs of so many entries, listed on the way to a denied path, that
    /// every run's start-up pays for them ([`crate::fs::Crowded`]): each a
    /// warning line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crowded: Vec<String>,
    /// Where the run's temp dir will be.
    pub run_tmp: String,
    pub landlock_abi: u8,
    /// The seccomp filters, described: verdict and calls.
    pub seccomp: Vec<(&'static str, String)>,
    /// The Landlock rules on this machine (with `--rules`): path and rights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<(String, String)>>,
}

/// The Landlock rules the policy produces here, built exactly as a run builds
/// them, with a stand-in temp dir (shown as `{tmp}`).
fn rules(policy: &Policy) -> Result<Vec<(String, String)>, fs::FsError> {
    let scratch = std::env::temp_dir().join(format!("lockrun-policy-show-{}", std::process::id()));
    let tmp = scratch.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|source| fs::FsError::Open {
        path: tmp.clone(),
        source,
    })?;
    let built = fs::FsSandbox::prepare(policy, &tmp, &policy.runs_dir());
    let _ = std::fs::remove_dir_all(&scratch);
    let fs = built?;
    let tmp = tmp.display().to_string();
    let mut rules: Vec<(String, String)> = fs
        .grants()
        .iter()
        .map(|(p, g)| {
            let p = p.display().to_string();
            let p = if p == tmp { "{tmp}".to_owned() } else { p };
            let rights = match g {
                fs::Grant::Read => "read, execute, list",
                fs::Grant::ReadWrite => {
                    "every right (read, write, create, remove, rename, link, special files, ioctl)"
                }
                fs::Grant::Device => "read, write, ioctl (device)",
                fs::Grant::Tty => "read, write, ioctl (terminal)",
                fs::Grant::Stdio => "write, truncate (the named pipe the caller's stdio writes to)",
                fs::Grant::StdioRead => "read (the file or named pipe the caller's stdio reads)",
                fs::Grant::List => {
                    "list only (the names; nothing beneath is readable unless listed here)"
                }
            };
            (p, rights.to_owned())
        })
        .collect();
    let mounted = fs.own_filesystems();
    for own in fs::OwnFs::ALL {
        let at = if mounted.contains(&own) {
            "mounted in its mount namespace"
        } else if own.reached_without_path() {
            "granted unmounted, where the kernel opens it (no /dev/mqueue of the machine's to hide, or a writable root at it)"
        } else {
            continue;
        };
        let (what, rights) = match own {
            fs::OwnFs::SharedMemory => (
                "a tmpfs",
                "every right (read, write, create, remove, rename, link, special files, ioctl)",
            ),
            fs::OwnFs::Terminals => (
                "a devpts instance",
                "list; read, write, ioctl (the run's terminals)",
            ),
            fs::OwnFs::MessageQueues => (
                "its IPC namespace's mqueue filesystem",
                "every right (open, send and receive, create, remove POSIX message queues)",
            ),
            fs::OwnFs::Processes => (
                "a procfs instance showing only the run's processes (hidepid=ptraceable)",
                "read, execute, list",
            ),
        };
        rules.push((
            format!("{} (the run's own: {what}, {at})", own.path().display()),
            rights.to_owned(),
        ));
    }
    rules.sort();
    Ok(rules)
}

/// Where the kernel has no Landlock device ioctl right, the device files
/// a run cannot open ([`crate::kernel::Kernel::devices_only_in_dev`]).
fn devices_outside_dev() -> Option<String> {
    Features::get().devices_only_in_dev().then(|| {
        "device files anywhere but /dev, opened for nothing (this kernel has no Landlock device ioctl \
         right, ABI < 5: every other mount nodev in the run's mount namespace; EACCES, beneath the \
         writable paths too)"
            .to_owned()
    })
}

impl<'a> View<'a> {
    #[must_use]
    pub fn of(policy: &'a Policy) -> Self {
        let mut writable = vec![policy.worktree.display().to_string()];
        writable.extend(policy.fs.writable.iter().map(ToString::to_string));
        writable.push(format!(
            "{}, the run's own (a tmpfs in a mount namespace of the run's, gone with it; the machine's, shared, when a writable path lies in or above it)",
            fs::OwnFs::SharedMemory.path().display()
        ));
        writable.push(format!(
            "POSIX message queues, the run's own (its IPC namespace's, mounted on {} in its mount namespace where the machine has one, whose queues it hides)",
            fs::OwnFs::MessageQueues.path().display()
        ));
        // A denied dir holding a writable one denies all of it but that
        // one, which is granted whole (crate::policy::overlap).
        let denied = |d: &PathSpec| {
            let open = overlap::open_beneath(policy, d);
            if open.is_empty() {
                d.to_string()
            } else {
                format!("{d}, but not the writable {} beneath it", open.join(", "))
            }
        };
        let mut deny_read: Vec<String> = policy.fs.deny_read.iter().map(denied).collect();
        deny_read.extend(
            Policy::secret_floor(&policy.home)
                .into_iter()
                .map(|p| denied(&PathSpec::Absolute(p))),
        );
        deny_read.push(format!(
            "every mount of these, hidden (an empty read-only tmpfs over each in the run's mount namespace): {}",
            fs::HIDDEN_FS
                .iter()
                .map(|h| format!("{} ({})", h.fstype, h.holds))
                .collect::<Vec<_>>()
                .join(", "),
        ));
        let mut secrets: Vec<(Vec<&str>, &str)> = Vec::new();
        for m in &fs::MACHINE_SECRETS {
            match secrets.last_mut() {
                Some((paths, holds)) if *holds == m.holds => paths.push(m.path),
                _ => secrets.push((vec![m.path], m.holds)),
            }
        }
        deny_read.push(format!(
            "the machine's own secrets, where it has them, masked (an empty dir or file of mode 0000 bound over each in the run's mount namespace: EACCES, unrecorded; not where a writable path lies at, in or above one): {}",
            secrets
                .iter()
                .map(|(paths, holds)| format!("{} ({holds})", paths.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
        ));
        deny_read.push(format!(
            "{} (other runs and other agents; the run's own {{tmp}} and writable dirs beneath it stay open)",
            policy.run.state_dir.display()
        ));
        deny_read.push(format!(
            "/dev, but listable, and readable: {} (a run is uid 0, and uid 0 owns the console, raw disks and the rest of /dev)",
            fs::DEV_READABLE
                .map(|n| match n {
                    "shm" => "shm (the run's own, above)",
                    "pts" => "pts (the run's own terminals, a devpts instance of its mount namespace; else the machine's, listable only)",
                    n => n,
                })
                .join(", ")
        ));
        deny_read.extend(devices_outside_dev());
        deny_read.push(format!(
            "{}, but the run's own: a procfs instance of its mount namespace that shows only the run's processes (hidepid=ptraceable); another run's command, the caller's and the machine's processes have no entry there",
            fs::OwnFs::Processes.path().display()
        ));
        deny_read.sort();
        deny_read.dedup();
        let runs_later = runs_later::reached_by(policy)
            .iter()
            .map(ToString::to_string)
            .collect();
        let runs_dir = policy.runs_dir();
        let run_tmp = runs_dir.join("<run-id>/tmp");
        let found = fs::findings(policy, &run_tmp, &runs_dir);
        let narrowed = found.narrowed.iter().map(ToString::to_string).collect();
        let crowded = found.crowded.iter().map(ToString::to_string).collect();
        Self {
            policy,
            writable,
            runs_later,
            narrowed,
            crowded,
            deny_read,
            run_tmp: run_tmp.display().to_string(),
            landlock_abi: policy.run.landlock_abi,
            seccomp: lockrun_seccomp::describe::describe(crate::run::kernel().fallbacks()),
            rules: None,
        }
    }

    /// The `[filesystem]` section of [`text`](Self::text).
    fn filesystem_text(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n[filesystem]  (Landlock at the kernel's ABI, at least {}; every filesystem right it has handled)",
            self.landlock_abi
        );
        let _ = writeln!(
            s,
            "writable (create, write, truncate, remove, rename, link, special files):"
        );
        for w in &self.writable {
            let _ = writeln!(s, "  {w}");
        }
        let _ = writeln!(
            s,
            "  {{tmp}} = {} (mode 0700, removed at the end; TMPDIR, TMP, TEMP)",
            self.run_tmp
        );
        for r in self.runs_later.iter().chain(&self.narrowed) {
            let _ = writeln!(s, "  warning: {r}");
        }
        let _ = writeln!(
            s,
            "readable and executable: everything else, except (nothing in them read or run; their names listable, as every dir's are: Landlock cannot take the listing right away beneath /):"
        );
        for d in &self.deny_read {
            let _ = writeln!(s, "  {d}");
        }
        for c in &self.crowded {
            let _ = writeln!(s, "  warning: {c}");
        }
        if let Some(rules) = &self.rules {
            let _ = writeln!(
                s,
                "Landlock rules on this machine ({}; anything not listed: no access):",
                rules.len()
            );
            for (path, rights) in rules {
                let _ = writeln!(s, "  {path}: {rights}");
            }
        }
    }

    /// The request rules and the secrets: what the proxy judges inside.
    fn inspected_text(&self, s: &mut String) {
        let p = self.policy;
        let n = &p.network;
        for (host, rules) in &n.requests {
            let rules: Vec<String> = rules.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                s,
                "requests to {host}: only {} (any other refused)",
                rules.join(", ")
            );
        }
        for (env, spec) in &p.secrets {
            let hosts: Vec<String> = spec.hosts.iter().map(ToString::to_string).collect();
            let from = spec.file.as_ref().map_or_else(
                || "lockrun's environment".to_owned(),
                |f| f.display().to_string(),
            );
            let _ = writeln!(
                s,
                "secret {env}: a placeholder in the run; the value (from {from}) put in for {} only{}{}",
                hosts.join(", "),
                if spec.body { ", bodies too" } else { "" },
                if spec.optional { "; skipped when unset" } else { "" }
            );
        }
    }

    /// The human-readable form.
    #[must_use]
    pub fn text(&self) -> String {
        let p = self.policy;
        let mut s = String::new();
        let sources: Vec<String> = p.sources.iter().map(|s| s.display().to_string()).collect();
        let _ = writeln!(s, "policy: {}", sources.join(" <- "));
        let _ = writeln!(s, "worktree: {}", p.worktree.display());
        self.filesystem_text(&mut s);
        let n = &p.network;
        let _ = writeln!(
            s,
            "\n[network]  (cgroup eBPF connect/sendmsg hooks; everything not listed: EPERM)"
        );
        if n.allow.is_empty() {
            let _ = writeln!(s, "proxy: none (no host allowed)");
        } else {
            let _ = writeln!(
                s,
                "proxy allows (by name, before DNS; addresses checked after):"
            );
            for r in &n.allow {
                let _ = writeln!(s, "  {r}");
            }
        }
        for d in &n.deny {
            let _ = writeln!(s, "  deny {d}  (wins over allow)");
        }
        for l in &n.local {
            let _ = writeln!(s, "direct: {l}");
        }
        for p in &n.expose {
            let _ = writeln!(
                s,
                "exposed: port {p}, to this host's processes over loopback (TCP and UDP; no other host)"
            );
        }
        for g in &n.private {
            let hosts: Vec<String> = g.hosts.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                s,
                "private network {} allowed for {}",
                g.network,
                hosts.join(", ")
            );
        }
        for (name, ips) in &n.resolve {
            let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                s,
                "resolve {name} -> {} (instead of DNS; still guarded)",
                ips.join(", ")
            );
        }
        self.inspected_text(&mut s);
        let _ = writeln!(s, "\n[seccomp]  (no_new_privs; every capability dropped)");
        for (verdict, calls) in &self.seccomp {
            let _ = writeln!(s, "{verdict}: {calls}");
        }
        let r = &p.run;
        let _ = writeln!(s, "\n[run]");
        let _ = writeln!(s, "state_dir: {}", r.state_dir.display());
        let _ = writeln!(s, "idle tunnel limit: {} s", r.idle_tunnel.as_secs());
        let _ = writeln!(s, "gc grace: {} s", r.gc_grace.as_secs());
        let _ = writeln!(s, "max proxy connections: {}", r.max_connections);
        let _ = writeln!(
            s,
            "max tasks (processes and threads at once; cgroup pids.max): {}",
            r.max_tasks
        );
        let _ = writeln!(
            s,
            "max memory (of the run's processes together, swap counted; cgroup memory.max): {}",
            r.max_memory
        );
        if !r.accept_gaps.is_empty() {
            let names: Vec<&str> = r.accept_gaps.iter().map(|g| g.name()).collect();
            let _ = writeln!(
                s,
                "accepted gaps (promises a run goes without where the kernel cannot hold them, saying so): {}",
                names.join(", ")
            );
        }
        if !p.env.is_empty() {
            let _ = writeln!(s, "\n[env]");
            for (k, v) in &p.env {
                let _ = writeln!(s, "{k}={}", v.0);
            }
        }
        s
    }
}

/// For snapshots: the text with machine-specific paths replaced.
#[must_use]
pub fn redact(text: &str, worktree: &Path, home: &Path, state: &Path) -> String {
    text.replace(&state.display().to_string(), "<state>")
        .replace(&worktree.display().to_string(), "<worktree>")
        .replace(&home.display().to_string(), "<home>")
}
