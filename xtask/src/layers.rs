//! The rule of layers (docs/architecture.md), checked on the agent's source:
//! a top-level module of `agent/src` may use the modules of its own layer or
//! below, never above, and no two top-level modules use each other, however
//! indirectly. And the house's size rules: no source file over 900 lines,
//! and no function over 150 without a reason beside its
//! `#[allow(clippy::too_many_lines)]`.
//!
//! A use is any `crate::<module>` path outside a comment: in a `use` line,
//! in a body, or in a string an attribute reads (`serialize_with = "crate::…"`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// From the bottom. Mirrors the table in docs/architecture.md.
pub const LAYERS: &[&[&str]] = &[
    &["sys", "shown", "log", "exit", "regular_file", "testing"],
    &["kernel", "state"],
    &["policy"],
    &["audit"],
    &[
        "fs",
        "seccomp",
        "supervise",
        "cgroup",
        "bpf",
        "proxy",
        "gitguard",
        "worktree_lock",
        "terminal",
        "stdio",
    ],
    &["run"],
    &["commands", "cli", "main", "lib"],
];

/// Uses that break the rule for a while, each with what keeps it: not
/// reported, and left out of the search for cycles, while they last; one
/// that is gone must leave this list, so it only shrinks. None is owed now.
pub const OWED: &[(&str, &str, &str)] = &[];

/// The longest source file the house allows.
pub const MAX_LINES: usize = 900;

/// The longest function the house allows without a reason in the code.
pub const MAX_FN_LINES: usize = 150;

/// `src` with the text of its comments, strings and chars blanked and its
/// newlines kept, so that braces count and lines stay where they were.
fn blanked(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let end = if b[i..].starts_with(b"//") {
            i + b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .unwrap_or(b.len() - i)
        } else if b[i..].starts_with(b"/*") {
            block_comment_end(b, i)
        } else if let Some(end) = raw_string_end(b, i).or_else(|| string_end(b, i)) {
            end
        } else if let Some(end) = char_end(src, i) {
            end
        } else {
            out.push(b[i]);
            i += 1;
            continue;
        };
        blank(&mut out, &b[i..end]);
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `src` without its comments (line, block, nested block); strings and
/// chars are kept as they are, so a `//` inside a string stays.
pub fn without_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = block_comment_end(b, i);
        } else if let Some(end) = raw_string_end(b, i).or_else(|| string_end(b, i)) {
            out.extend_from_slice(&b[i..end]);
            i = end;
        } else if let Some(end) = char_end(src, i) {
            out.extend_from_slice(&b[i..end]);
            i = end;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The end of a block comment (nested ones included) starting at `i`.
fn block_comment_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i`.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    if b.get(i) != Some(&b'r') || ident_before {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    if b.get(i + 1 + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = i + 2 + hashes;
    let at = b[body..].windows(close.len()).position(|w| w == close)?;
    Some(body + at + close.len())
}

/// The end of a string (`"…"`, escapes honoured) starting at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    Some(b.len())
}

/// The end of a char literal (`'x'`, `'\n'`, `'"'`) starting at `i`; a
/// lifetime (`'a`) is none.
fn char_end(src: &str, i: usize) -> Option<usize> {
    let b = src.as_bytes();
    if b.get(i) != Some(&b'\'') {
        return None;
    }
    if b.get(i + 1) == Some(&b'\\') {
        let close = b[i + 2..].iter().position(|&c| c == b'\'')?;
        return Some(i + 2 + close + 1);
    }
    // One char, of any UTF-8 length, then the closing quote (`i` is a
    // quote, so `i + 1` is a char boundary).
    let c = src[i + 1..].chars().next()?;
    let after = i + 1 + c.len_utf8();
    (b.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// The top-level modules that `src` (comments removed) names through
/// `crate::`, including each name of a `crate::{a, b::c}` group.
pub fn crate_uses(src: &str) -> BTreeSet<String> {
    let mut uses = BTreeSet::new();
    let mut rest = src;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `lockrun_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        uses.extend(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            uses.extend(first_segment(rest));
        }
    }
    uses.remove("self");
    uses
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Each function of `src` longer than [`MAX_FN_LINES`] (from its `fn` line
/// to its closing brace) with no reason beside an
/// `#[allow(clippy::too_many_lines)]` above it: (name, first line, lines).
pub fn long_functions_without_reason(src: &str) -> Vec<(String, usize, usize)> {
    let code = blanked(src);
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    let mut rest = code.as_str();
    let mut at = 0;
    while let Some(found) = rest.find("fn ") {
        let start = at + found;
        rest = &rest[found + 3..];
        at = start + 3;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = code[start + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(body) = body_span(&code, start + 3) else {
            continue;
        };
        let first = code[..start].matches('\n').count();
        let last = code[..body.1].matches('\n').count();
        let len = last - first + 1;
        if name.is_empty() || len <= MAX_FN_LINES || has_reason(&lines, first) {
            continue;
        }
        out.push((name, first + 1, len));
    }
    out
}

/// The span of the body (`{` to its `}`) of the function whose signature
/// starts at `from` in blanked code; none for a declaration without one.
fn body_span(code: &str, from: usize) -> Option<(usize, usize)> {
    let b = code.as_bytes();
    let mut depth = 0i32;
    let mut i = from;
    let open = loop {
        match *b.get(i)? {
            b'(' | b'[' | b'<' => depth += 1,
            // Not the `>` of a `->`.
            b'>' if depth > 0 && b[i - 1] == b'-' => {}
            b')' | b']' | b'>' if depth > 0 => depth -= 1,
            b';' if depth == 0 => return None,
            b'{' if depth == 0 => break i,
            _ => {}
        }
        i += 1;
    };
    let mut braces = 0;
    for (j, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => braces += 1,
            b'}' => {
                braces -= 1;
                if braces == 0 {
                    return Some((open, j));
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether the attributes and docs right above line `first` (0-based)
/// allow `clippy::too_many_lines` with a comment saying why.
fn has_reason(lines: &[&str], first: usize) -> bool {
    lines[..first]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
        .any(|l| {
            l.starts_with("#[allow(clippy::too_many_lines)]")
                && l.split_once("//")
                    .is_some_and(|(_, why)| !why.trim().is_empty())
        })
}

/// What breaks the rule in one tree of sources: each use of a module above,
/// of a module no layer names, each cycle, each file too long.
pub fn problems(files: &[(String, String)], owed: &[(&str, &str, &str)]) -> Vec<String> {
    let layer: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, ms)| ms.iter().map(move |m| (*m, i)))
        .collect();
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut out = Vec::new();
    for (path, src) in files {
        let top = path
            .split('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".rs")
            .to_owned();
        let lines = src.lines().count();
        if lines > MAX_LINES {
            out.push(format!("{path}: {lines} lines (at most {MAX_LINES})"));
        }
        for (name, line, len) in long_functions_without_reason(src) {
            out.push(format!(
                "{path}:{line}: fn {name} is {len} lines (over {MAX_FN_LINES}): split it, or say why \
                 beside #[allow(clippy::too_many_lines)]"
            ));
        }
        for used in crate_uses(&without_comments(src)) {
            if used != top {
                edges
                    .entry(top.clone())
                    .or_default()
                    .entry(used)
                    .or_default()
                    .insert(path.clone());
            }
        }
    }
    for (from, to, why) in owed {
        let still = edges.get(*from).is_some_and(|t| t.contains_key(*to));
        if !still {
            out.push(format!(
                "{from} no longer uses {to}: take it off OWED in xtask/src/layers.rs ({why})"
            ));
        }
        if let Some(t) = edges.get_mut(*from) {
            t.remove(*to);
        }
    }
    for (from, to) in &edges {
        for (used, wheres) in to {
            let wheres = wheres.iter().cloned().collect::<Vec<_>>().join(", ");
            match (layer.get(from.as_str()), layer.get(used.as_str())) {
                (Some(a), Some(b)) if b > a => out.push(format!(
                    "{from} (layer {a}) uses {used} (layer {b}), above it: {wheres}"
                )),
                (Some(_), Some(_)) => {}
                _ => out.push(format!(
                    "{from} uses {used}: a module no layer names (xtask/src/layers.rs, docs/architecture.md): {wheres}"
                )),
            }
        }
    }
    let mut cycles = BTreeSet::new();
    for start in edges.keys() {
        if let Some(cycle) = cycle_through(&edges, start) {
            // One report per cycle, whichever module it is found from.
            let mut key = cycle[..cycle.len() - 1].to_vec();
            let min = key
                .iter()
                .enumerate()
                .min_by_key(|(_, m)| *m)
                .map_or(0, |(i, _)| i);
            key.rotate_left(min);
            if cycles.insert(key) {
                out.push(format!("cycle: {}", cycle.join(" -> ")));
            }
        }
    }
    out
}

/// The shortest path of uses from `start` back to itself, if any.
fn cycle_through(
    edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    start: &str,
) -> Option<Vec<String>> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in edges.get(at).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut path = vec![start.to_owned()];
                let mut back = at;
                while back != start {
                    path.push(back.to_owned());
                    back = prev[back];
                }
                path.push(start.to_owned());
                path.reverse();
                return Some(path);
            }
            if !prev.contains_key(next.as_str()) {
                prev.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Every `.rs` file under `root`, as (path relative to `root`, text).
pub fn sources(root: &Path) -> std::io::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                files.push((
                    rel.to_string_lossy().into_owned(),
                    std::fs::read_to_string(&path)?,
                ));
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, src: &str) -> (String, String) {
        (path.to_owned(), src.to_owned())
    }

    #[test]
    fn the_agent_keeps_the_rule_of_layers_and_the_size_of_its_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src");
        let problems = problems(&sources(&root).unwrap(), OWED);
        assert!(
            problems.is_empty(),
            "agent/src breaks the rule of layers (docs/architecture.md):\n  {}",
            problems.join("\n  ")
        );
    }

    /// The crates beside the agent, below every layer (they name none of
    /// its modules: each is a crate of its own), keep the size rules.
    #[test]
    fn the_crates_beside_the_agent_keep_the_size_of_their_files_and_functions() {
        let mut long = Vec::new();
        for dir in ["../seccomp/src", "../ebpf/unix/src"] {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            for (path, src) in sources(&root).unwrap() {
                let lines = src.lines().count();
                if lines > MAX_LINES {
                    long.push(format!("{dir}/{path}: {lines} lines (at most {MAX_LINES})"));
                }
                for (name, line, len) in long_functions_without_reason(&src) {
                    long.push(format!(
                        "{dir}/{path}:{line}: fn {name} is {len} lines, with no reason"
                    ));
                }
            }
        }
        assert!(long.is_empty(), "{}", long.join(", "));
    }

    #[test]
    fn a_long_function_needs_a_reason_beside_its_allow() {
        let body = "    let x = \"}\"; // }\n".repeat(MAX_FN_LINES);
        let long = |above: &str| format!("{above}\nfn long() -> Vec<u8> {{\n{body}}}\n");
        assert_eq!(
            long_functions_without_reason(&long("/// Docs.")),
            [("long".to_owned(), 2, MAX_FN_LINES + 2)]
        );
        assert_eq!(
            long_functions_without_reason(&long("#[allow(clippy::too_many_lines)]")).len(),
            1
        );
        let reasoned = long("#[allow(clippy::too_many_lines)] // one table\n/// Docs.");
        assert!(long_functions_without_reason(&reasoned).is_empty());
        let short = "fn short(f: impl Fn() -> u8) -> u8 { f() }\ntrait T { fn d(); }\n";
        assert!(long_functions_without_reason(short).is_empty());
    }

    #[test]
    fn comments_are_not_uses_and_strings_are() {
        let src = r#"
            // crate::run is named in a comment
            /* crate::bpf /* nested crate::cgroup */ still crate::fs */
            #[serde(serialize_with = "crate::shown::path")]
            let url = "http://x"; let q = '"'; let c = crate::sys::f();
            fn f<'a>(x: &'a str) -> &'a str { crate::policy::g(x) }
            use crate::{audit::{Event, Kind}, kernel, self as me};
            my_crate::not_ours();
        "#;
        let uses = crate_uses(&without_comments(src));
        let want: BTreeSet<String> = ["shown", "sys", "policy", "audit", "kernel"]
            .map(String::from)
            .into();
        assert_eq!(uses, want);
    }

    #[test]
    fn a_use_above_a_cycle_and_a_long_file_are_each_named() {
        let long = "fn f() {}\n".repeat(MAX_LINES + 1);
        let files = [
            file("sys/mod.rs", "use crate::run::Thing;"),
            file("fs/mod.rs", "use crate::cgroup::X;"),
            file("cgroup/mod.rs", "fn g() { crate::bpf::h() }"),
            file("bpf/mod.rs", "use crate::fs::Y;"),
            file("policy/file.rs", &long),
            file("run/mod.rs", "use crate::nowhere::Z; use crate::sys::W;"),
        ];
        let got = problems(&files, &[]);
        assert_eq!(
            got,
            [
                format!("policy/file.rs: {} lines (at most {MAX_LINES})", MAX_LINES + 1),
                "run uses nowhere: a module no layer names (xtask/src/layers.rs, docs/architecture.md): run/mod.rs".to_owned(),
                "sys (layer 0) uses run (layer 5), above it: sys/mod.rs".to_owned(),
                "cycle: bpf -> fs -> cgroup -> bpf".to_owned(),
                "cycle: run -> sys -> run".to_owned(),
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn an_owed_use_is_left_out_until_it_is_gone_and_then_named() {
        let files = [
            file("kernel.rs", "use crate::bpf::probe;"),
            file("bpf/mod.rs", "use crate::kernel::Kernel;"),
        ];
        let owed = [("kernel", "bpf", "a probe"), ("sys", "run", "paid")];
        assert_eq!(
            problems(&files, &owed),
            ["sys no longer uses run: take it off OWED in xtask/src/layers.rs (paid)"]
        );
    }

    #[test]
    fn modules_of_one_layer_may_use_each_other_without_a_cycle() {
        let files = [
            file(
                "supervise/mod.rs",
                "use crate::seccomp::A; use crate::fs::B;",
            ),
            file("seccomp/mod.rs", "use crate::fs::C;"),
            file("fs/mod.rs", "use crate::audit::D;"),
        ];
        assert_eq!(problems(&files, &[]), Vec::<String>::new());
    }
}
