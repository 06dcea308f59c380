//! The kernel's records of one refusal, which share a serial, gathered
//! into the run's event: a Landlock denial of the run's domain (its
//! `LANDLOCK_ACCESS`, `LANDLOCK_DOMAIN` and `SYSCALL` records), or below
//! Landlock ABI 7 a refused call of the watched run ([`super::syscalls`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::netlink::{
    AUDIT_CWD, AUDIT_EOE, AUDIT_LANDLOCK_ACCESS, AUDIT_LANDLOCK_DOMAIN, AUDIT_OBJ_PID, AUDIT_PATH,
    AUDIT_SOCKADDR, AUDIT_SYSCALL,
};
use super::records::AuditRecord;
use crate::audit::syscalls::{self, Watch};
use crate::audit::{Event, FsEvent, Layer, ScopeEvent, ScopeTarget};

/// How long the records of one serial wait for their `EOE` before they
/// are taken as they are: a task the host's audit rules leave out of
/// syscall auditing (`-a task,never`, which some distributions ship) has
/// no audit context, and each of its records comes alone, with a serial of
/// its own and no `SYSCALL` or `EOE` after it. A refused call returns at
/// once, so in a task that has a context the end follows within
/// microseconds.
pub(super) const NO_END_AFTER: Duration = Duration::from_secs(1);

/// Turns the kernel's records into the run's filesystem events.
#[derive(Default)]
pub(super) struct Correlator {
    /// The Landlock domains created by the run's child.
    pub(super) domains: Vec<String>,
    /// Records by serial, with when the first came, until the event's end
    /// (EOE), [`NO_END_AFTER`] or a flush.
    pub(super) pending: HashMap<u64, (Instant, Vec<AuditRecord>)>,
    /// Whether a refusal came without its `SYSCALL` record (said once).
    pub(super) no_syscall_said: bool,
    /// Below Landlock ABI 7: the run whose refused calls kernel audit
    /// records ([`super::syscalls`]).
    pub(super) watch: Option<Arc<Watch>>,
}

impl Correlator {
    pub(super) fn push(
        &mut self,
        rec: AuditRecord,
        child: u32,
        now: Instant,
        out: &mut Vec<Event>,
    ) {
        if rec.ty == AUDIT_EOE {
            // A Landlock denial ended before the reader was told the run's
            // child (the command refused at once): whose domain it is, is
            // not known yet. It waits, ended, for the next `expire`.
            if let Some((_, group)) = self.pending.get_mut(&rec.serial) {
                if child == 0 && group.iter().any(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
                    group.push(rec);
                    return;
                }
            }
            if let Some((_, group)) = self.pending.remove(&rec.serial) {
                self.finish(&group, child, out);
            }
            return;
        }
        if matches!(
            rec.ty,
            AUDIT_LANDLOCK_ACCESS | AUDIT_LANDLOCK_DOMAIN | AUDIT_SYSCALL
        ) {
            // Learnt now: without a context, a denial's domain record comes
            // after its access record, under the next serial.
            learn(&mut self.domains, &rec, child);
            self.pending
                .entry(rec.serial)
                .or_insert_with(|| (now, Vec::new()))
                .1
                .push(rec);
        } else if matches!(
            rec.ty,
            AUDIT_CWD | AUDIT_PATH | AUDIT_SOCKADDR | AUDIT_OBJ_PID
        ) {
            // A refused call's names, address or signal target, after its
            // SYSCALL record (the kernel writes that first): kept for a call
            // of the watched run only.
            let Some(w) = &self.watch else {
                return;
            };
            let uid = w.login_uid.to_string();
            if let Some((_, group)) = self.pending.get_mut(&rec.serial) {
                if group
                    .iter()
                    .any(|r| r.ty == AUDIT_SYSCALL && r.fields.get("auid") == Some(&uid))
                {
                    group.push(rec);
                }
            }
        }
    }

    /// Take the records whose end has not come within [`NO_END_AFTER`] as
    /// they are (see there), and, once the run's child is known, those that
    /// ended waiting for it, oldest first.
    pub(super) fn expire(&mut self, child: u32, now: Instant, out: &mut Vec<Event>) {
        let mut old: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (first, group))| {
                now.saturating_duration_since(*first) >= NO_END_AFTER
                    || (child != 0 && group.iter().any(|r| r.ty == AUDIT_EOE))
            })
            .map(|(s, _)| *s)
            .collect();
        self.finish_serials(&mut old, child, out);
    }

    pub(super) fn flush(&mut self, child: u32, out: &mut Vec<Event>) {
        let mut all: Vec<u64> = self.pending.keys().copied().collect();
        self.finish_serials(&mut all, child, out);
    }

    pub(super) fn finish_serials(&mut self, serials: &mut [u64], child: u32, out: &mut Vec<Event>) {
        // The child may have been named since a domain record came.
        for (_, group) in self.pending.values() {
            for r in group {
                learn(&mut self.domains, r, child);
            }
        }
        serials.sort_unstable();
        for s in serials.iter() {
            if let Some((_, group)) = self.pending.remove(s) {
                self.finish(&group, child, out);
            }
        }
    }

    pub(super) fn finish(&mut self, group: &[AuditRecord], child: u32, out: &mut Vec<Event>) {
        for r in group {
            learn(&mut self.domains, r, child);
        }
        let syscall = group.iter().find(|r| r.ty == AUDIT_SYSCALL);
        if let Some(w) = &self.watch {
            if !group.iter().any(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
                out.extend(syscalls::event(group, w, &syscalls::records::Proc));
                return;
            }
        }
        for r in group.iter().filter(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
            let Some(domain) = r.fields.get("domain") else {
                continue;
            };
            if !self.domains.contains(domain) {
                continue;
            }
            let blockers = r
                .fields
                .get("blockers")
                .map(String::as_str)
                .unwrap_or_default();
            let dev = r.fields.get("dev").map(String::as_str);
            if create_check_of_an_existing_file(blockers, dev, syscall) {
                continue;
            }
            if syscall.is_none() && !self.no_syscall_said {
                self.no_syscall_said = true;
                out.push(Event::Notice {
                    layer: Layer::Filesystem,
                    message: NO_SYSCALL_RECORD.into(),
                });
            }
            // Empty without the SYSCALL record: the kernel did not say.
            let pid = syscall
                .and_then(|s| s.fields.get("pid"))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            let comm = syscall
                .and_then(|s| s.fields.get("comm"))
                .cloned()
                .unwrap_or_default();
            let mut raw: Vec<&str> = vec![r.text.as_str()];
            raw.extend(syscall.map(|s| s.text.as_str()));
            let raw = raw.join("\n");
            if let Some(target) = scope_target(blockers, &r.fields) {
                out.push(Event::Scope(ScopeEvent {
                    pid,
                    comm,
                    target,
                    raw,
                }));
                continue;
            }
            out.push(Event::Filesystem(FsEvent {
                pid,
                comm,
                path: r.fields.get("path").cloned(),
                access: blockers
                    .split(',')
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned)
                    .collect(),
                raw,
                other_name_of: None,
                errno: None,
            }));
        }
    }
}

/// A domain record of a domain the run's child created: the domain is the
/// run's (added to `domains`). Any other record is passed over.
fn learn(domains: &mut Vec<String>, r: &AuditRecord, child: u32) {
    if r.ty != AUDIT_LANDLOCK_DOMAIN || child == 0 {
        return;
    }
    let created_by_child = r.fields.get("pid").and_then(|p| p.parse::<u32>().ok()) == Some(child);
    if created_by_child && r.fields.get("status").map(String::as_str) == Some("allocated") {
        if let Some(d) = r.fields.get("domain") {
            if !domains.contains(d) {
                domains.push(d.clone());
            }
        }
    }
}

/// What a denial of a reach outside the run tried to reach:
/// `blockers=scope.signal` and `blockers=ptrace` name the process (`opid`,
/// `ocomm`), `blockers=scope.abstract_unix_socket` the socket (`path`,
/// hex-encoded, starting with its NUL). `None` for any other blocker (the
/// filesystem's).
fn scope_target(blockers: &str, fields: &HashMap<String, String>) -> Option<ScopeTarget> {
    let opid = || fields.get("opid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let ocomm = || fields.get("ocomm").cloned().unwrap_or_default();
    match blockers {
        "scope.signal" => Some(ScopeTarget::Signal {
            to_pid: opid(),
            to_comm: ocomm(),
        }),
        "ptrace" => Some(ScopeTarget::Ptrace {
            to_pid: opid(),
            to_comm: ocomm(),
        }),
        "scope.abstract_unix_socket" => Some(ScopeTarget::AbstractUnixSocket {
            name: fields
                .get("path")
                .map(|p| p.strip_prefix('\0').unwrap_or(p).to_owned())
                .unwrap_or_default(),
        }),
        _ => None,
    }
}

/// Whether a denial is the kernel checking a create it then did not need:
/// `open(O_CREAT)` of a name whose dentry is not cached (procfs revalidates
/// every one: `> /dev/stdout` opens `/proc/self/fd/1`) asks the security
/// hooks whether the file could be made before looking it up, and when it
/// exists the refusal is dropped and the open goes on. Landlock logs it all
/// the same; the SYSCALL record shows the call succeeded. Only a refusal
/// of making something, in a call that succeeded, is this; any other
/// blocker, or a failed call, is a refusal the command saw.
///
/// Without the SYSCALL record (see [`NO_END_AFTER`]) the call's outcome is
/// unknown; a refusal of making something on procfs (`dev="proc"`) is
/// still this, since no file can be made there: it never decided a call.
fn create_check_of_an_existing_file(
    blockers: &str,
    dev: Option<&str>,
    syscall: Option<&AuditRecord>,
) -> bool {
    let only_making =
        !blockers.is_empty() && blockers.split(',').all(|b| b.starts_with("fs.make_"));
    match syscall {
        Some(s) => only_making && s.fields.get("success").map(String::as_str) == Some("yes"),
        None => only_making && dev == Some("proc"),
    }
}

/// The notice for refusals that came without their SYSCALL record.
pub const NO_SYSCALL_RECORD: &str = "the kernel gave Landlock's refusals no syscall record: the \
    host's audit rules leave this run's processes out of syscall auditing (an `-a task,never` \
    rule, as some distributions ship), so each refusal is shown without the process that made \
    it, and a check the kernel makes before creating a file that then exists cannot be told \
    from a refusal (except on /proc)";
