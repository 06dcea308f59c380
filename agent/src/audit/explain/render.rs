//! The human-readable report of `lockrun audit`, every line made inert
//! first ([`crate::shown`]).

use std::fmt;
use std::net::SocketAddr;

use super::{Refusal, RunSummary, Suggestion};
use crate::audit::{times, Destination, Layer};
use crate::shown::escaped;

pub(super) fn layer_name(l: Layer) -> &'static str {
    match l {
        Layer::Filesystem => "filesystem",
        Layer::KernelNetwork => "kernel network",
        Layer::Proxy => "proxy",
        Layer::Scope => "processes outside the run",
        Layer::Syscall => "system calls",
        Layer::Tasks => "task limit",
        Layer::Memory => "memory limit",
    }
}

pub(super) fn show_dest(d: &Destination) -> String {
    match d {
        Destination::Inet(SocketAddr::V6(a)) => format!("[{}]:{}", a.ip(), a.port()),
        other => other.to_string(),
    }
}

/// One line of the report: what the log holds was chosen in part by the
/// run (process names, paths, hosts), so it is made inert first
/// ([`crate::shown`]).
fn put(out: &mut String, line: fmt::Arguments<'_>) {
    out.push_str(&escaped(&line.to_string()));
    out.push('\n');
}

/// The human-readable report.
#[must_use]
pub fn render_text(runs: &[RunSummary]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str("no runs in this log\n");
        return out;
    }
    for (i, run) in runs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let exit = run
            .exit
            .map(|code| format!(" (exit {code})"))
            .unwrap_or_default();
        put(
            &mut out,
            format_args!(
                "run {}{exit}",
                run.run_id.as_deref().unwrap_or("(no run_start)")
            ),
        );
        if !run.command.is_empty() {
            put(
                &mut out,
                format_args!("  command:  {}", run.command.join(" ")),
            );
        }
        if !run.policy.is_empty() {
            let names: Vec<String> = run.policy.iter().map(|p| p.display().to_string()).collect();
            put(&mut out, format_args!("  policy:   {}", names.join(" <- ")));
        }
        if let Some(w) = &run.worktree {
            put(&mut out, format_args!("  worktree: {}", w.display()));
        }
        put(&mut out, format_args!("  seal:     {}", run.seal));
        for n in &run.notices {
            put(&mut out, format_args!("  notice:   {n}"));
        }
        if run.refused.is_empty() {
            out.push_str("  nothing refused\n");
        } else {
            render_refusals(&mut out, run);
        }
        if !run.upstream_failures.is_empty() {
            out.push_str(
                "  allowed, but failed upstream (not refused; no policy line changes these):\n",
            );
            for f in &run.upstream_failures {
                put(
                    &mut out,
                    format_args!("    {} — {}{}", f.target, f.detail, times(f.count)),
                );
            }
        }
    }
    out
}

/// A run's refusals: the counts, then each group by layer with what to do.
fn render_refusals(out: &mut String, run: &RunSummary) {
    let per_layer: Vec<String> = run
        .refused
        .iter()
        .map(|(l, n)| format!("{} {n}", layer_name(*l)))
        .collect();
    put(out, format_args!("  refused:  {}", per_layer.join(", ")));
    if run.lost_kernel_events > 0 {
        put(
            out,
            format_args!(
                "            ({} kernel refusals counted but not delivered: ring buffer full)",
                run.lost_kernel_events
            ),
        );
    }
    if run.inbound_not_itemized > 0 {
        put(out, format_args!("            ({} packets from outside dropped and counted, not itemized: only the first {} on each CPU are)",
            run.inbound_not_itemized, run.inbound_per_cpu
        ));
    }
    if !run.by_process.is_empty() {
        let procs: Vec<String> = run
            .by_process
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        put(out, format_args!("  by process: {}", procs.join(", ")));
    }
    for layer in Layer::ALL {
        let group: Vec<&Refusal> = run.refusals.iter().filter(|r| r.layer == layer).collect();
        if group.is_empty() {
            continue;
        }
        put(out, format_args!("  {}:", layer_name(layer)));
        for r in group {
            let procs = if r.processes.is_empty() {
                String::new()
            } else {
                format!(" [{}]", r.processes.join(", "))
            };
            put(
                out,
                format_args!("    {} — {}{}{procs}", r.target, r.detail, times(r.count)),
            );
            render_suggestion(out, &r.suggestion);
        }
    }
}

fn render_suggestion(out: &mut String, s: &Suggestion) {
    match s {
        Suggestion::Allow { policy, flag, note } => {
            out.push_str("      allow with:\n");
            for line in policy.lines() {
                put(out, format_args!("        {line}"));
            }
            match flag {
                Some(f) => {
                    put(out, format_args!("      or the flag: {f}"));
                }
                None => out.push_str("      (no flag: write it in a policy file)\n"),
            }
            if let Some(n) = note {
                put(out, format_args!("      note: {n}"));
            }
        }
        Suggestion::Warn { reason } => {
            put(out, format_args!("      not suggested: {reason}"));
        }
        Suggestion::Never { reason } => {
            put(out, format_args!("      cannot be allowed: {reason}"));
        }
        Suggestion::Explain { reason } => {
            put(out, format_args!("      why: {reason}"));
        }
        Suggestion::Harmless { reason } => {
            put(out, format_args!("      harmless: {reason}"));
        }
    }
}
