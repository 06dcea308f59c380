//! What a test process killed before its drops ran leaves behind: network
//! namespaces and veth pairs named after its pid. A leftover veth keeps its
//! address, so the next test host given the same /30 would be reached through
//! the dead one, where nothing listens. Each helper that makes them sweeps
//! those of dead processes first; a live process's are never touched.

use std::path::Path;
use std::process::Command;

/// The pid a name of the form `<prefix><pid>` or `<prefix><pid>-<n>` was
/// made by.
#[must_use]
pub fn owner(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits = rest.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// The first word of each line `ip args` prints, or its second when `ip
/// -o` numbers the lines (`260: lrph5257-9@if259: <…>`), up to an `@`.
fn names(args: &[&str]) -> Vec<String> {
    let numbered = args.first() == Some(&"-o");
    let Ok(out) = Command::new("ip").args(args).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(usize::from(numbered)))
        .map(|n| {
            n.trim_end_matches(':')
                .split('@')
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// Removes the namespaces named `<ns_prefix><pid>…` and the links named
/// `<link_prefix><pid>…` whose process is gone, saying so on stderr.
pub fn remove_dead(ns_prefix: &str, link_prefix: &str) {
    let gone = |name: &str, prefix: &str| owner(name, prefix).is_some_and(|pid| !alive(pid));
    for ns in names(&["netns", "list"]) {
        if gone(&ns, ns_prefix) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            eprintln!("removed the namespace {ns}, left by a test process that is gone");
        }
    }
    // Deleting a namespace deletes the veth pairs with an end in it; a link
    // is left only if its peer was never moved there.
    for link in names(&["-o", "link", "show"]) {
        if gone(&link, link_prefix) {
            let _ = Command::new("ip").args(["link", "del", &link]).output();
            eprintln!("removed the link {link}, left by a test process that is gone");
        }
    }
}

/// The links holding an address in `net` (a CIDR): a test host made there
/// while one is would not be the host reached.
#[must_use]
pub fn holders(net: &str) -> Vec<String> {
    names(&["-o", "addr", "show", "to", net])
}

#[cfg(test)]
mod tests {
    use super::owner;

    #[test]
    fn a_leftovers_owner_is_the_pid_in_its_name_and_only_that() {
        assert_eq!(owner("lrpx5257-9", "lrpx"), Some(5257));
        assert_eq!(owner("lrph4194304-23", "lrph"), Some(4_194_304));
        assert_eq!(owner("lra812", "lra"), Some(812));
        for (name, prefix) in [
            ("lrpx-9", "lrpx"),
            ("lrpxa12-1", "lrpx"),
            ("lrbench12", "lrbh"),
            ("eth0", "lrph"),
            ("lrph", "lrph"),
        ] {
            assert_eq!(owner(name, prefix), None, "{name}");
        }
    }
}
