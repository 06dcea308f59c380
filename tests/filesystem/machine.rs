//! The machine's own: its secrets, the kernel's log and debug filesystems,
//! its raw block devices and root's devices are out of a run's reach, also
//! where any local user may read them.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::probe_without_caps;
use crate::support::world;
use crate::support::world::{assert_absent, s, stdout_lines, RemovedAtEnd, World};

/// `kernel.dmesg_restrict`, set for a test and put back when it ends.
struct DmesgRestrict(String);

impl DmesgRestrict {
    const PATH: &'static str = "/proc/sys/kernel/dmesg_restrict";

    fn set(value: &str) -> Self {
        let was = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, value).unwrap();
        Self(was)
    }
}

impl Drop for DmesgRestrict {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim());
    }
}

/// The kernel's log carries other processes' audit records when no audit
/// daemon takes them (another run's refusals, with its command line), and
/// any user may read it through `syslog(2)` where `kernel.dmesg_restrict` is
/// 0: the call is refused (`EPERM`) and shown. The test sets that sysctl to
/// 0 and puts it back. Judged from outside: a line written to the log
/// before the run is not in what the run copied into its worktree.
/// Control: outside, a process without capabilities copies the log, that
/// line included.
#[test]
fn the_kernel_log_is_unreadable_even_where_any_user_may_read_it() {
    let w = World::new("klog");
    let marker = format!("lockrun-test-klog-{}", std::process::id());
    std::fs::write("/dev/kmsg", format!("{marker}\n")).unwrap();
    let _restrict = DmesgRestrict::set("0");
    let copied = w.wt.join("klog");
    let out = w.run(&[], &world::probe_argv(&[&["klog_copy", s(&copied)]]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "errno=EPERM\n");
    assert_absent(&copied);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(": syslog (python3)\n"),
        "{out:?}"
    );
    // Control: a process without capabilities outside reads the line.
    let outside = w.root.join("klog-outside");
    probe_without_caps(&["klog_copy", s(&outside)]);
    let log = std::fs::read(&outside).unwrap();
    assert!(
        log.windows(marker.len()).any(|l| l == marker.as_bytes()),
        "the control did not read the marker"
    );
    w.assert_no_run_dirs();
}

/// A filesystem of the machine's, at a path, for a test: mounted if the
/// machine has none there, unmounted (with what the kernel mounted beneath
/// it) when the test ends.
struct MachineFs {
    at: &'static str,
    mounted_here: bool,
}

impl MachineFs {
    const TRACEFS: &'static str = "/sys/kernel/tracing";

    /// `fstype` at `at`, which `stat -f` names `shown`.
    fn mounted(fstype: &str, at: &'static str, shown: &str) -> Self {
        if fs_type_at(at) == shown {
            return Self {
                at,
                mounted_here: false,
            };
        }
        let ok = Command::new("mount")
            .args(["-t", fstype, "nodev", at])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting {fstype} at {at}");
        assert_eq!(fs_type_at(at), shown);
        Self {
            at,
            mounted_here: true,
        }
    }
}

impl Drop for MachineFs {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = Command::new("umount").args(["-R", self.at]).status();
        }
    }
}

/// The type of the filesystem at `at`, as `stat -f` names it, outside.
fn fs_type_at(at: &str) -> String {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T", at])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The kernel's tracing and debug filesystems are out of every run's
/// sight: a run is often uid 0, which owns them, and tracefs's `trace`
/// holds the events the machine's tracers enabled, from every process. The
/// test mounts tracefs where the machine has none, and writes a line of its
/// own into the trace buffer. In the run, an empty read-only tmpfs lies
/// over it: `trace` is not there (`ENOENT`), the dir lists empty and takes
/// no file (`EROFS`), and `/sys/kernel` around it reads and lists as
/// before. Judged from outside: the run's copy into its worktree does not
/// exist, and the tracefs outside holds no file of the run's. Control:
/// outside, a process without capabilities copies `trace`, the line
/// included.
#[test]
fn the_kernels_tracing_filesystem_is_out_of_a_runs_sight() {
    let w = World::new("tracefs");
    let _tracefs = MachineFs::mounted("tracefs", MachineFs::TRACEFS, "tracefs");
    let marker = format!("lockrun-test-trace-{}", std::process::id());
    std::fs::write(format!("{}/trace_marker", MachineFs::TRACEFS), &marker).unwrap();
    let trace = format!("{}/trace", MachineFs::TRACEFS);
    let planted = format!("{}/planted", MachineFs::TRACEFS);
    let (copy_trace, copy_thp) = (w.wt.join("trace"), w.wt.join("thp"));
    let out = w.run(
        &[],
        &world::probe_argv(&[
            &["copy", &trace, s(&copy_trace)],
            &["lists", MachineFs::TRACEFS, "trace"],
            &["write", &planted],
            &["lists", "/sys/kernel", "mm"],
            &[
                "copy",
                "/sys/kernel/mm/transparent_hugepage/enabled",
                s(&copy_thp),
            ],
        ]),
    );
    assert_eq!(
        stdout_lines(&out),
        ["errno=ENOENT", "errno=ENOENT", "errno=EROFS", "ok", "ok"],
        "{out:?}"
    );
    assert_absent(&copy_trace);
    assert_absent(std::path::Path::new(&planted));
    // Control: outside, without capabilities, the marker is there to copy.
    let outside = w.root.join("trace-outside");
    probe_without_caps(&["copy", &trace, s(&outside)]);
    let copied = std::fs::read_to_string(&outside).unwrap();
    assert!(
        copied.contains(&marker),
        "the control did not read the marker"
    );
    w.assert_no_run_dirs();
}

/// The machine's other filesystems that hold what a run must not read are
/// out of its sight too, each under an empty read-only tmpfs: bpffs (the
/// names of every pinned eBPF object, typed maps' entries), securityfs
/// (IMA's list of every file run, where IMA is on), pstore (earlier
/// crashes' kernel logs) and debugfs. The test mounts each where the
/// machine has none, and pins a directory of its own in bpffs. In the run,
/// the pinned name is not listed (`ENOENT`), securityfs's `lsm` is not
/// there (`ENOENT`), debugfs lists no `tracing`, and each is a tmpfs.
/// Judged from outside: the run's copy of `lsm` into its worktree does
/// not exist. Control: outside, a process without capabilities lists the
/// pinned name and `tracing`, and copies `lsm`.
#[test]
fn the_kernels_other_filesystems_are_out_of_a_runs_sight() {
    let w = World::new("kernelfs");
    let hidden = [
        ("bpf", "/sys/fs/bpf", "bpf_fs"),
        ("securityfs", "/sys/kernel/security", "securityfs"),
        ("pstore", "/sys/fs/pstore", "pstorefs"),
        ("debugfs", "/sys/kernel/debug", "debugfs"),
    ];
    let _mounted = hidden.map(|(fstype, at, shown)| MachineFs::mounted(fstype, at, shown));
    let name = format!("lockrun-test-{}", std::process::id());
    let pinned = std::path::Path::new("/sys/fs/bpf").join(&name);
    std::fs::create_dir(&pinned).unwrap();
    let _pinned = RemovedAtEnd(vec![pinned]);
    let lsm = "/sys/kernel/security/lsm";
    let copy_lsm = w.wt.join("lsm");
    let ops: [&[&str]; 3] = [
        &["lists", "/sys/fs/bpf", &name],
        &["copy", lsm, s(&copy_lsm)],
        &["lists", "/sys/kernel/debug", "tracing"],
    ];
    let out = w.run(&[], &world::probe_argv(&ops));
    assert_eq!(stdout_lines(&out), ["errno=ENOENT"; 3], "{out:?}");
    assert_absent(&copy_lsm);
    let mut stat = vec!["stat", "-f", "-c", "%T"];
    stat.extend(hidden.map(|(_, at, _)| at));
    let types = w.run(&[], &stat);
    assert_eq!(stdout_lines(&types), ["tmpfs"; 4], "{types:?}");
    // Control: outside, without capabilities, each is there to read.
    let outside = w.root.join("lsm-outside");
    probe_without_caps(&["lists", "/sys/fs/bpf", &name]);
    probe_without_caps(&["copy", lsm, s(&outside)]);
    probe_without_caps(&["lists", "/sys/kernel/debug", "tracing"]);
    assert!(!std::fs::read(&outside).unwrap().is_empty());
    w.assert_no_run_dirs();
}

/// The machine's own secrets, which uid 0 without capabilities reads by
/// their owner's permission bits, are masked in every run: the password
/// hashes in `/etc/shadow`, an SSH host key, cloud-init's user data (the
/// test makes the last two where the machine has none, and removes what it
/// made). In the run each is `EACCES` to read, and cloud-init's dir to
/// list, while `/etc/passwd` beside them reads; judged from outside, the
/// run's copies into its worktree do not exist. Control: outside, a
/// process without capabilities copies each. A secret above a writable
/// root is left as it is (masking it would hide what the run may write):
/// with `--allow-write` on a dir in cloud-init's, the run reads the user
/// data.
#[test]
fn the_machines_own_secrets_are_unreadable() {
    let w = World::new("machine-secrets");
    let pid = std::process::id();
    let mut made = Vec::new();
    let host_key = std::path::Path::new("/etc/ssh/ssh_host_ed25519_key");
    if !host_key.exists() {
        std::fs::create_dir_all("/etc/ssh").unwrap();
        std::fs::write(host_key, "lockrun-test host key\n").unwrap();
        std::fs::set_permissions(host_key, std::fs::Permissions::from_mode(0o600)).unwrap();
        made.push(host_key.to_path_buf());
    }
    let cloud = std::path::Path::new("/var/lib/cloud");
    if !cloud.exists() {
        std::fs::create_dir_all(cloud).unwrap();
        made.push(cloud.to_path_buf());
    }
    let user_data = cloud.join(format!("lockrun-test-user-data-{pid}"));
    std::fs::write(&user_data, "lockrun-test user data\n").unwrap();
    std::fs::set_permissions(&user_data, std::fs::Permissions::from_mode(0o600)).unwrap();
    let writable_in_cloud = cloud.join(format!("lockrun-test-wt-{pid}"));
    std::fs::create_dir(&writable_in_cloud).unwrap();
    made.splice(0..0, [user_data.clone(), writable_in_cloud.clone()]);
    let _made = RemovedAtEnd(made);
    let secrets = ["/etc/shadow", s(host_key), s(&user_data)];
    let copies: Vec<_> = (0..secrets.len())
        .map(|i| w.wt.join(format!("copy-{i}")))
        .collect();
    let mut ops: Vec<Vec<&str>> = secrets
        .iter()
        .zip(&copies)
        .map(|(secret, copy)| vec!["copy", *secret, s(copy)])
        .collect();
    ops.push(vec!["listdir", s(cloud)]);
    ops.push(vec!["read", "/etc/passwd"]);
    let ops: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    assert_eq!(
        w.probe(&[], &ops),
        [
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "errno=EACCES",
            "ok"
        ]
    );
    for copy in &copies {
        assert_absent(copy);
    }
    // Control: outside, without capabilities, each is there to copy.
    for (i, secret) in secrets.iter().enumerate() {
        let outside = w.root.join(format!("outside-{i}"));
        probe_without_caps(&["copy", secret, s(&outside)]);
        assert!(!std::fs::read(&outside).unwrap().is_empty(), "{secret}");
    }
    // Above a writable root, the user data is not masked.
    assert_eq!(
        w.probe(
            &["--allow-write", s(&writable_in_cloud)],
            &[&["read", s(&user_data)], &["read", "/etc/shadow"]]
        ),
        ["ok", "errno=EACCES"]
    );
}

#[test]
fn raw_block_devices_are_unreadable() {
    use std::os::unix::fs::FileTypeExt;
    let w = World::new("blockdev");
    let dev = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        .map(|e| e.path());
    let Some(dev) = dev else {
        world::skip(
            "raw_block_devices_are_unreadable",
            "no block device under /dev",
        );
        return;
    };
    // Control: readable outside (we are root), so a refusal inside is Landlock's.
    assert_eq!(
        w.probe_outside(&[&["read", s(&dev)]]),
        ["ok"],
        "{}",
        dev.display()
    );
    let r = w.probe(&[], &[&["read", s(&dev)], &["read", "/dev/urandom"]]);
    assert_eq!(r, ["errno=EACCES", "ok"], "{}", dev.display());
}

#[test]
fn the_console_and_other_root_devices_are_unreadable() {
    let w = World::new("devices");
    // Root's device nodes beyond what a shell or a build uses: the console's
    // screen (vcs) and keyboard (tty1), the kernel log. Those present here.
    let present: Vec<&str> = ["/dev/vcs", "/dev/vcs1", "/dev/tty1", "/dev/kmsg"]
        .into_iter()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    if present.is_empty() {
        world::skip(
            "the_console_and_other_root_devices_are_unreadable",
            "no vcs, tty1 or kmsg here",
        );
        return;
    }
    let ops: Vec<[&str; 2]> = present.iter().map(|p| ["open_read", *p]).collect();
    let ops: Vec<&[&str]> = ops.iter().map(|o| &o[..]).collect();
    // Control: each opens outside (we are root), so a refusal inside is Landlock's.
    assert_eq!(
        w.probe_outside(&ops),
        vec!["ok"; present.len()],
        "{present:?}"
    );
    assert_eq!(
        w.probe(&[], &ops),
        vec!["errno=EACCES"; present.len()],
        "{present:?}"
    );
    // Controls inside: /dev lists, and what a shell uses reads.
    let r = w.probe(
        &[],
        &[
            &["listdir", "/dev"],
            &["read", "/dev/urandom"],
            &["read", "/dev/null"],
            &["open_read", "/dev/tty"],
        ],
    );
    assert_eq!(r[..3], ["ok", "ok", "ok"], "{r:?}");
    // /dev/tty: ENXIO without a controlling terminal, never EACCES.
    assert_ne!(r[3], "errno=EACCES", "{r:?}");
}
