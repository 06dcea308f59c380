//! `[secrets.ENV]`, `[network.requests."HOST"]` and `--secret ENV@HOST,…`:
//! parsed, merged (a later file's or the flag's binding of a variable
//! replaces an earlier one; request rules add up), and checked against
//! the network policy: a secret or a request rule names only hosts the
//! policy allows.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::source::Source;
use super::{Ctx, PolicyError};
use crate::policy::{EnvTemplate, HostPattern, NetworkPolicy, PathSpec, RequestRule, SecretSpec};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecret {
    hosts: Vec<String>,
    file: Option<String>,
    #[serde(default)]
    body: bool,
    #[serde(default)]
    optional: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequests {
    allow: Vec<String>,
}

/// Whether `name` can be an environment variable's name a shell sets.
fn env_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// The `[secrets]` and `[network.requests]` of the file `s`.
pub(super) fn add_file(
    network: &mut NetworkPolicy,
    secrets: &mut BTreeMap<String, SecretSpec>,
    s: &Source,
    ctx: &Ctx<'_>,
) -> Result<(), PolicyError> {
    for (host, raw) in &s.raw.network.requests {
        let key = "network.requests";
        let pattern = HostPattern::parse(host)
            .map_err(|e| PolicyError::value(&s.origin, key, format!("`{host}`: {e}")))?;
        let mut rules = Vec::new();
        for r in &raw.allow {
            rules.push(
                RequestRule::parse(r)
                    .map_err(|m| PolicyError::value(&s.origin, key, format!("{host}: {m}")))?,
            );
        }
        network.requests.entry(pattern).or_default().extend(rules);
    }
    for (name, raw) in &s.raw.secrets {
        let key = format!("secrets.{name}");
        if !env_name(name) {
            return Err(PolicyError::value(
                &s.origin,
                &key,
                "not an environment variable's name (letters, digits, `_`)",
            ));
        }
        let hosts = hosts(&raw.hosts).map_err(|m| PolicyError::value(&s.origin, &key, m))?;
        let file = match &raw.file {
            None => None,
            Some(f) => match ctx.path(&format!("{key}.file"), f)? {
                PathSpec::Absolute(p) => Some(p),
                PathSpec::RunTmp(_) => {
                    return Err(PolicyError::value(
                        &s.origin,
                        &format!("{key}.file"),
                        "cannot be under {tmp}: the run writes there",
                    ))
                }
            },
        };
        secrets.insert(
            name.clone(),
            SecretSpec {
                hosts,
                file,
                body: raw.body,
                optional: raw.optional,
            },
        );
    }
    Ok(())
}

fn hosts(raw: &[String]) -> Result<Vec<HostPattern>, String> {
    if raw.is_empty() {
        return Err("name at least one host in `hosts`".into());
    }
    raw.iter()
        .map(|h| HostPattern::parse(h).map_err(|e| format!("`{h}`: {e}")))
        .collect()
}

/// `--secret ENV@HOST[,HOST…]`, each replacing the files' binding of ENV:
/// required (an unset ENV refuses the run), headers only.
pub(super) fn add_flags(
    secrets: &mut BTreeMap<String, SecretSpec>,
    flags: &[String],
) -> Result<(), PolicyError> {
    for f in flags {
        let err = |message: String| PolicyError::Flag {
            flag: "--secret",
            value: f.clone(),
            message,
        };
        let Some((name, hosts_raw)) = f.split_once('@') else {
            return Err(err(
                "write ENV@HOST[,HOST…], as in ANTHROPIC_API_KEY@api.anthropic.com".into(),
            ));
        };
        if !env_name(name) {
            return Err(err(format!(
                "`{name}` is not an environment variable's name (letters, digits, `_`)"
            )));
        }
        let list: Vec<String> = hosts_raw
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        let hosts = hosts(&list).map_err(err)?;
        secrets.insert(
            name.to_owned(),
            SecretSpec {
                hosts,
                file: None,
                body: false,
                optional: false,
            },
        );
    }
    Ok(())
}

/// Whether the allow list reaches every name `p` matches (on some port),
/// none of them denied.
fn allowed(network: &NetworkPolicy, p: &HostPattern) -> bool {
    let denied = network.deny.iter().any(|d| match (d, p) {
        (_, HostPattern::Exact(n)) => d.matches(n),
        (HostPattern::Subdomains(ds), HostPattern::Subdomains(ps)) => {
            let (ds, ps) = (ds.as_str(), ps.as_str());
            ps == ds || ps.ends_with(&format!(".{ds}"))
        }
        (HostPattern::Exact(_), HostPattern::Subdomains(_)) => false,
    });
    let reached = network.allow.iter().any(|a| match (&a.pattern, p) {
        (ap, HostPattern::Exact(n)) => ap.matches(n),
        (HostPattern::Subdomains(a), HostPattern::Subdomains(b)) => {
            let (a, b) = (a.as_str(), b.as_str());
            b == a || b.ends_with(&format!(".{a}"))
        }
        (HostPattern::Exact(_), HostPattern::Subdomains(_)) => false,
    });
    reached && !denied
}

/// Refuse a secret or a request rule for a host the policy does not allow
/// (explicit is better: neither opens a host), and a secret the policy's
/// `[env]` also sets.
pub(super) fn check(
    network: &NetworkPolicy,
    secrets: &BTreeMap<String, SecretSpec>,
    env: &BTreeMap<String, EnvTemplate>,
) -> Result<(), PolicyError> {
    for (name, spec) in secrets {
        let missing: Vec<String> = spec
            .hosts
            .iter()
            .filter(|h| !allowed(network, h))
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(PolicyError::value(
                "the policy",
                &format!("secrets.{name}"),
                format!(
                    "bound to {}, which the policy does not allow: add {} to [network] allow (or --allow-host), or bind the secret to an allowed host",
                    missing.join(", "),
                    if missing.len() == 1 { "it" } else { "them" }
                ),
            ));
        }
        if env.contains_key(name) {
            return Err(PolicyError::value(
                "the policy",
                &format!("secrets.{name}"),
                format!(
                    "[env] also sets {name}: a variable is either a secret or a value for the run"
                ),
            ));
        }
    }
    for host in network.requests.keys() {
        if !allowed(network, host) {
            return Err(PolicyError::value(
                "the policy",
                &format!("network.requests.\"{host}\""),
                format!("rules for {host}, which the policy does not allow: add it to [network] allow (or --allow-host)"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use std::path::PathBuf;

    use crate::policy::{load, Overrides, PathSpec, Policy};

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn with(text: &str, secrets: &[&str]) -> (Result<Policy, String>, Dir) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lockrun-sec-{}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join("wt")).unwrap();
        let file = dir.join("p.toml");
        std::fs::write(&file, text).unwrap();
        let over = Overrides {
            worktree: Some(dir.join("wt")),
            state_dir: Some(dir.join("state")),
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            ..Overrides::default()
        };
        let r = load(Some(file.to_str().unwrap()), &over).map_err(|e| e.to_string());
        (r, Dir(dir))
    }

    const ALLOW: &str = "[network]\nallow = [\"api.example.com\", \"*.example.org\"]\n";

    #[test]
    fn a_secret_binds_allowed_hosts_and_a_flag_replaces_it() {
        let text = format!(
            "{ALLOW}[secrets.API_KEY]\nhosts = [\"api.example.com\", \"*.cdn.example.org\"]\nbody = true\noptional = true\n"
        );
        let (p, _d) = with(&text, &[]);
        let p = p.unwrap();
        let s = &p.secrets["API_KEY"];
        assert_eq!(s.hosts.len(), 2);
        assert!(s.body && s.optional && s.file.is_none());
        let (p, _d) = with(
            &text,
            &[
                "API_KEY@x.example.org",
                "OTHER@api.example.com,a.example.org",
            ],
        );
        let p = p.unwrap();
        assert_eq!(p.secrets["API_KEY"].hosts[0].to_string(), "x.example.org");
        assert!(!p.secrets["API_KEY"].optional && !p.secrets["API_KEY"].body);
        assert_eq!(p.secrets["OTHER"].hosts.len(), 2);
    }

    #[test]
    fn a_secret_for_a_host_not_allowed_is_refused_naming_it() {
        let text = format!(
            "{ALLOW}[secrets.API_KEY]\nhosts = [\"api.example.com\", \"evil.example.net\"]\n"
        );
        let err = with(&text, &[]).0.unwrap_err();
        assert!(
            err.contains("secrets.API_KEY")
                && err.contains("evil.example.net")
                && err.contains("does not allow"),
            "{err}"
        );
        // A wildcard wider than the allow list's.
        let err = with(ALLOW, &["K@*.org"]).0.unwrap_err();
        assert!(err.contains("*.org"), "{err}");
        // Denied though allowed.
        let text = format!("{ALLOW}deny = [\"bad.example.org\"]\n");
        let err = with(&text, &["K@bad.example.org"]).0.unwrap_err();
        assert!(err.contains("bad.example.org"), "{err}");
    }

    #[test]
    fn bad_flags_and_keys_say_why() {
        for (flag, says) in [
            ("API_KEY", "ENV@HOST"),
            ("1KEY@api.example.com", "not an environment variable"),
            ("KEY@", "at least one host"),
            ("KEY@-bad-", "invalid host"),
        ] {
            let err = with(ALLOW, &[flag]).0.unwrap_err();
            assert!(
                err.contains("--secret") && err.contains(says),
                "{flag}: {err}"
            );
        }
        let err = with(
            &format!("{ALLOW}[secrets.K]\nhost = [\"api.example.com\"]\n"),
            &[],
        )
        .0
        .unwrap_err();
        assert!(err.contains("host"), "{err}");
        let err = with(&format!("{ALLOW}[secrets.K]\nhosts = []\n"), &[])
            .0
            .unwrap_err();
        assert!(err.contains("at least one host"), "{err}");
        let text = format!("{ALLOW}[env]\nK = \"x\"\n[secrets.K]\nhosts = [\"api.example.com\"]\n");
        let err = with(&text, &[]).0.unwrap_err();
        assert!(err.contains("[env] also sets K"), "{err}");
    }

    #[test]
    fn a_secrets_file_is_denied_to_the_run_and_may_not_be_writable() {
        let text = format!("{ALLOW}[secrets.K]\nhosts = [\"api.example.com\"]\nfile = \"/etc/lockrun-test-token\"\n");
        let (p, _d) = with(&text, &[]);
        let p = p.unwrap();
        assert_eq!(
            p.secrets["K"].file.as_deref(),
            Some(std::path::Path::new("/etc/lockrun-test-token"))
        );
        assert!(p
            .fs
            .deny_read
            .contains(&PathSpec::Absolute("/etc/lockrun-test-token".into())));
        let text = format!(
            "{ALLOW}[secrets.K]\nhosts = [\"api.example.com\"]\nfile = \"{{worktree}}/token\"\n"
        );
        let err = with(&text, &[]).0.unwrap_err();
        assert!(err.contains("token"), "{err}");
        let text = format!(
            "{ALLOW}[secrets.K]\nhosts = [\"api.example.com\"]\nfile = \"{{tmp}}/token\"\n"
        );
        let err = with(&text, &[]).0.unwrap_err();
        assert!(err.contains("{tmp}"), "{err}");
    }

    #[test]
    fn request_rules_need_an_allowed_host_and_say_what_is_wrong() {
        let text = format!("{ALLOW}[network.requests.\"api.example.com\"]\nallow = [\"GET /repos/**\", \"POST /graphql\"]\n");
        let (p, _d) = with(&text, &[]);
        let p = p.unwrap();
        let rules: Vec<String> = p
            .network
            .requests
            .values()
            .flatten()
            .map(ToString::to_string)
            .collect();
        assert_eq!(rules, ["GET /repos/**", "POST /graphql"]);
        let text =
            format!("{ALLOW}[network.requests.\"other.example.net\"]\nallow = [\"GET /x\"]\n");
        let err = with(&text, &[]).0.unwrap_err();
        assert!(
            err.contains("other.example.net") && err.contains("does not allow"),
            "{err}"
        );
        let text =
            format!("{ALLOW}[network.requests.\"api.example.com\"]\nallow = [\"GET repos\"]\n");
        let err = with(&text, &[]).0.unwrap_err();
        assert!(
            err.contains("p.toml") && err.contains("start with /"),
            "{err}"
        );
    }
}
