//! The steps of [`super::load`], in its order: the `extends` chain, base
//! first; the worktree; the scalars of `[run]`, the state dir first (the
//! lists name it, `{state}`); the lists of each file, then of the flags.
//! Lists are added to, file after file; scalars are overridden.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::source::{read_source, Source};
use super::{
    absolute, default_state_dir, exposed_port, gap, local_endpoint, task_limit, Ctx, Overrides,
    PolicyError, RawMemoryLimit, MAX_EXTENDS,
};
use crate::policy::overlap::{Entry, Origin};
use crate::policy::{
    EnvTemplate, FsPolicy, HostName, HostPattern, HostRule, IpNet, MemoryLimit, NetworkPolicy,
    PathSpec, PrivateGrant, RunSettings, SecretSpec, TaskLimit, LANDLOCK_ABI,
};

/// The policy's files, base first: `policy` (a path or a preset name; the
/// preset `default` if none), then each file its `extends` names, refusing
/// a chain too deep and a cycle.
pub(super) fn chain(policy: Option<&str>) -> Result<Vec<Source>, PolicyError> {
    let mut chain: Vec<Source> = Vec::new();
    let mut next = Some((
        policy.unwrap_or("default").to_owned(),
        std::env::current_dir().ok(),
    ));
    while let Some((name, base)) = next.take() {
        if chain.len() == MAX_EXTENDS {
            return Err(PolicyError::TooDeep {
                origin: chain[0].origin.clone(),
            });
        }
        let by = chain.last().map(|s| s.origin.as_str());
        let src = read_source(&name, base.as_deref(), by)?;
        if chain.iter().any(|s| s.origin == src.origin) {
            let mut names: Vec<&str> = chain.iter().map(|s| s.origin.as_str()).collect();
            names.push(&src.origin);
            return Err(PolicyError::Cycle {
                origin: chain[0].origin.clone(),
                chain: names.join(" -> "),
            });
        }
        next = src.raw.extends.clone().map(|e| (e, src.dir.clone()));
        chain.push(src);
    }
    chain.reverse(); // base first
    Ok(chain)
}

/// The worktree: `--worktree`, or the current directory; canonical, and a
/// directory.
pub(super) fn worktree(over: &Overrides) -> Result<PathBuf, PolicyError> {
    let worktree_raw = match &over.worktree {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| PolicyError::Worktree {
            path: ".".into(),
            source: e,
        })?,
    };
    let worktree = worktree_raw
        .canonicalize()
        .map_err(|e| PolicyError::Worktree {
            path: worktree_raw.clone(),
            source: e,
        })?;
    if !worktree.is_dir() {
        return Err(PolicyError::WorktreeNotDir(worktree));
    }
    Ok(worktree)
}

/// The state dir, and where it was set (for a message naming it).
pub(super) struct StateDir {
    pub path: PathBuf,
    pub origin: Origin,
}

/// The scalars of `[run]`, each file overriding the one it extends, then
/// the flags'.
pub(super) fn run_settings(
    chain: &[Source],
    worktree: &Path,
    home: &Path,
    over: &Overrides,
) -> Result<(RunSettings, StateDir), PolicyError> {
    // Scalars first: the state dir is a placeholder for the lists.
    let mut state_dir = default_state_dir(home);
    let mut state_origin = Origin::Default;
    let mut run = RunSettings {
        state_dir: PathBuf::new(),
        idle_tunnel: Duration::from_mins(15),
        gc_grace: Duration::from_hours(2),
        max_connections: 256,
        landlock_abi: LANDLOCK_ABI,
        accept_gaps: Vec::new(),
        max_tasks: TaskLimit::DEFAULT,
        max_memory: MemoryLimit::DEFAULT,
    };
    for s in chain {
        let ctx = Ctx {
            origin: &s.origin,
            worktree,
            home,
            state: None,
        };
        if let Some(d) = &s.raw.run.state_dir {
            match ctx.path("run.state_dir", d)? {
                PathSpec::Absolute(p) => {
                    state_dir = p;
                    state_origin = Origin::Key {
                        key: "run.state_dir",
                        file: s.origin.clone(),
                    };
                }
                PathSpec::RunTmp(_) => {
                    return Err(PolicyError::value(
                        &s.origin,
                        "run.state_dir",
                        "cannot be under {tmp}",
                    ))
                }
            }
        }
        run_scalars(&mut run, s)?;
    }
    for name in &over.accept_gaps {
        run.accept_gaps
            .push(gap(name).map_err(|message| PolicyError::Flag {
                flag: "--accept-gap",
                value: name.clone(),
                message,
            })?);
    }
    run.accept_gaps.sort();
    run.accept_gaps.dedup();
    if let Some(d) = &over.state_dir {
        state_dir = absolute("--state-dir", d)?;
        state_origin = Origin::Flag("--state-dir");
    }
    run.state_dir.clone_from(&state_dir);
    Ok((
        run,
        StateDir {
            path: state_dir,
            origin: state_origin,
        },
    ))
}

/// The scalars of `[run]` in the file `s` but the state dir, over `run`.
fn run_scalars(run: &mut RunSettings, s: &Source) -> Result<(), PolicyError> {
    if let Some(v) = s.raw.run.idle_tunnel_secs {
        if v == 0 {
            return Err(PolicyError::value(
                &s.origin,
                "run.idle_tunnel_secs",
                "must be at least 1",
            ));
        }
        run.idle_tunnel = Duration::from_secs(v);
    }
    if let Some(v) = s.raw.run.gc_grace_secs {
        run.gc_grace = Duration::from_secs(v);
    }
    if let Some(v) = s.raw.run.max_connections {
        if v == 0 {
            return Err(PolicyError::value(
                &s.origin,
                "run.max_connections",
                "must be at least 1",
            ));
        }
        run.max_connections = v;
    }
    if let Some(v) = s.raw.run.landlock_abi {
        if v == 0 {
            return Err(PolicyError::value(
                &s.origin,
                "run.landlock_abi",
                "must be at least 1",
            ));
        }
        run.landlock_abi = v;
    }
    for name in &s.raw.run.accept_gaps {
        run.accept_gaps
            .push(gap(name).map_err(|why| PolicyError::value(&s.origin, "run.accept_gaps", why))?);
    }
    if let Some(v) = &s.raw.run.max_tasks {
        run.max_tasks =
            task_limit(v).map_err(|why| PolicyError::value(&s.origin, "run.max_tasks", why))?;
    }
    if let Some(RawMemoryLimit::Text(v)) = &s.raw.run.max_memory {
        run.max_memory = MemoryLimit::parse(v)
            .map_err(|why| PolicyError::value(&s.origin, "run.max_memory", why))?;
    }
    Ok(())
}

/// The lists of the policy as they are merged, with where each writable
/// and denied path was written, for a message naming it.
pub(super) struct Lists {
    pub fs: FsPolicy,
    pub network: NetworkPolicy,
    pub env: BTreeMap<String, EnvTemplate>,
    pub writable: Vec<Entry>,
    pub denied: Vec<Entry>,
    /// By variable: a later file's binding replaces an earlier one's.
    pub secrets: BTreeMap<String, SecretSpec>,
}

impl Lists {
    /// The worktree and `{tmp}`, writable whatever the policy says.
    pub(super) fn new(worktree: &Path) -> Self {
        Self {
            fs: FsPolicy::default(),
            network: NetworkPolicy::default(),
            env: BTreeMap::new(),
            writable: vec![
                Entry::new(Origin::Worktree, PathSpec::Absolute(worktree.to_path_buf())),
                Entry::new(Origin::RunTmp, PathSpec::RunTmp(PathBuf::new())),
            ],
            denied: Vec::new(),
            secrets: BTreeMap::new(),
        }
    }

    /// The lists of the file `s`: `[filesystem]`, `[network]`, `[env]`, in
    /// that order, their placeholders filled.
    pub(super) fn add_file(
        &mut self,
        s: &Source,
        worktree: &Path,
        home: &Path,
        state_dir: &Path,
    ) -> Result<(), PolicyError> {
        let ctx = Ctx {
            origin: &s.origin,
            worktree,
            home,
            state: Some(state_dir),
        };
        let key = |key| Origin::Key {
            key,
            file: s.origin.clone(),
        };
        for w in &s.raw.filesystem.writable {
            let w = ctx.path("filesystem.writable", w)?;
            self.writable
                .push(Entry::new(key("filesystem.writable"), w.clone()));
            self.fs.writable.push(w);
        }
        for d in &s.raw.filesystem.deny_read {
            let d = ctx.path("filesystem.deny_read", d)?;
            self.denied
                .push(Entry::new(key("filesystem.deny_read"), d.clone()));
            self.fs.deny_read.push(d);
        }
        self.add_network(s)?;
        super::secrets::add_file(&mut self.network, &mut self.secrets, s, &ctx)?;
        for (k, v) in &s.raw.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(PolicyError::value(
                    &s.origin,
                    &format!("env.{k}"),
                    "invalid environment variable",
                ));
            }
            let v = v
                .replace("{worktree}", &worktree.to_string_lossy())
                .replace("{home}", &home.to_string_lossy());
            self.env.insert(
                k.clone(),
                EnvTemplate(v.replace("{state}", &state_dir.to_string_lossy())),
            );
        }
        Ok(())
    }

    /// The `[network]` lists of the file `s`.
    fn add_network(&mut self, s: &Source) -> Result<(), PolicyError> {
        for a in &s.raw.network.allow {
            let rule = HostRule::parse(a).map_err(|e| {
                PolicyError::value(&s.origin, "network.allow", format!("`{a}`: {e}"))
            })?;
            self.network.allow.push(rule);
        }
        for d in &s.raw.network.deny {
            let p = HostPattern::parse(d).map_err(|e| {
                PolicyError::value(&s.origin, "network.deny", format!("`{d}`: {e}"))
            })?;
            self.network.deny.push(p);
        }
        for l in &s.raw.network.local {
            self.network.local.push(
                local_endpoint(l).map_err(|m| PolicyError::value(&s.origin, "network.local", m))?,
            );
        }
        for &p in &s.raw.network.expose {
            self.network.expose.push(
                exposed_port(p).map_err(|m| PolicyError::value(&s.origin, "network.expose", m))?,
            );
        }
        for p in &s.raw.network.private {
            let private_net = IpNet::parse(&p.network).map_err(|e| {
                PolicyError::value(&s.origin, "network.private.network", e.to_string())
            })?;
            let mut hosts = Vec::new();
            for h in &p.hosts {
                hosts.push(HostPattern::parse(h).map_err(|e| {
                    PolicyError::value(&s.origin, "network.private.hosts", format!("`{h}`: {e}"))
                })?);
            }
            if hosts.is_empty() {
                return Err(PolicyError::value(
                    &s.origin,
                    "network.private.hosts",
                    "name at least one host",
                ));
            }
            self.network.private.push(PrivateGrant {
                hosts,
                network: private_net,
            });
        }
        for (name, addrs) in &s.raw.network.resolve {
            let key = "network.resolve";
            let host = HostName::parse(name)
                .map_err(|e| PolicyError::value(&s.origin, key, format!("`{name}`: {e}")))?;
            let mut ips = Vec::new();
            for a in addrs {
                ips.push(a.parse::<std::net::IpAddr>().map_err(|_| {
                    PolicyError::value(&s.origin, key, format!("`{a}` is not an IP address"))
                })?);
            }
            if ips.is_empty() {
                return Err(PolicyError::value(
                    &s.origin,
                    key,
                    format!("`{name}`: give at least one address"),
                ));
            }
            self.network.resolve.insert(host, ips);
        }
        if let Some(ca) = &s.raw.network.tls_ca {
            let path = std::path::Path::new(ca);
            if !path.is_absolute() {
                return Err(PolicyError::value(
                    &s.origin,
                    "network.tls_ca",
                    format!("`{ca}`: give an absolute path"),
                ));
            }
            self.network.tls_ca = Some(path.to_path_buf());
        }
        Ok(())
    }

    /// The lists the flags add, after every file's.
    pub(super) fn add_flags(&mut self, over: &Overrides) -> Result<(), PolicyError> {
        for w in &over.allow_write {
            let w = PathSpec::Absolute(absolute("--allow-write", w)?);
            self.writable
                .push(Entry::new(Origin::Flag("--allow-write"), w.clone()));
            self.fs.writable.push(w);
        }
        for d in &over.deny_read {
            let d = PathSpec::Absolute(absolute("--deny-read", d)?);
            self.denied
                .push(Entry::new(Origin::Flag("--deny-read"), d.clone()));
            self.fs.deny_read.push(d);
        }
        for h in &over.allow_host {
            let rule = HostRule::parse(h).map_err(|e| PolicyError::Flag {
                flag: "--allow-host",
                value: h.clone(),
                message: e.to_string(),
            })?;
            self.network.allow.push(rule);
        }
        for l in &over.allow_local {
            self.network
                .local
                .push(local_endpoint(l).map_err(|m| PolicyError::Flag {
                    flag: "--allow-local",
                    value: l.clone(),
                    message: m,
                })?);
        }
        for e in &over.expose {
            let port = e
                .parse::<i64>()
                .map_err(|_| format!("`{e}` is not a port number"))
                .and_then(exposed_port)
                .map_err(|m| PolicyError::Flag {
                    flag: "--expose",
                    value: e.clone(),
                    message: m,
                })?;
            self.network.expose.push(port);
        }
        Ok(())
    }
}
