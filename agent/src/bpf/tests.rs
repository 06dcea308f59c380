//! Keys, build ids, link pins and event decoding.

use std::net::SocketAddr;
use std::path::Path;

use lockrun_common::{Hook, AF_INET6, AF_UNIX};

use crate::audit::{Destination, Event, ScopeTarget};

use super::attach::{link_parent, link_pin};
use super::events::{decode, decode_event};
use super::load::PROGRAMS;
use super::shared::{hash_build, GUARD_PROGRAMS_HASH, UNIX_PROGRAMS_HASH};
use super::{endpoint_key, prefix_keys};
use crate::sys::bpf;

#[test]
fn the_build_id_follows_the_programs_attached_and_how() {
    let id = hash_build(&PROGRAMS);
    assert_eq!(id, hash_build(&PROGRAMS), "the same build, the same id");
    let mut other_attach = PROGRAMS;
    other_attach.iter_mut().find(|p| p.0 == "egress").unwrap().2 = bpf::ATTACH_INET_INGRESS;
    let mut renamed = PROGRAMS;
    renamed[0].0 = "connect4x";
    for (what, programs) in [
        ("an attach type changed", &other_attach[..]),
        ("a program renamed", &renamed[..]),
        ("a program fewer", &PROGRAMS[..8]),
    ] {
        assert_ne!(id, hash_build(programs), "{what}");
    }
}

#[test]
fn the_build_id_has_the_unix_programs_as_this_build_assembles_them() {
    // The build script hashed them from the same source; a build whose
    // script ran on other code would name its programs wrongly.
    assert_eq!(
        UNIX_PROGRAMS_HASH,
        format!("{:016x}", lockrun_unix::programs_hash())
    );
    assert_eq!(
        GUARD_PROGRAMS_HASH,
        format!("{:016x}", lockrun_unix::guard::programs_hash())
    );
}

#[test]
fn link_pins_name_their_parent() {
    for (name, _, _) in PROGRAMS {
        assert_eq!(
            link_parent(&link_pin(name, 271_744)),
            Some(271_744),
            "{name}"
        );
    }
    for other in [
        "connect4",
        "ring-3",
        "link-",
        "link-connect4",
        "link-connect4-x",
        "RUNS",
    ] {
        assert_eq!(link_parent(other), None, "{other}");
    }
}

#[test]
fn mapped_v6_is_keyed_as_v4() {
    let a: SocketAddr = "[::ffff:127.0.0.1]:8080".parse().unwrap();
    let b: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    assert_eq!(endpoint_key(&a), endpoint_key(&b));
    let c: SocketAddr = "[::1]:8080".parse().unwrap();
    assert_eq!(endpoint_key(&c).family, AF_INET6);
}

#[test]
fn prefixes_end_with_a_slash() {
    let k = prefix_keys(7, Path::new("/nonexistent/wt/"));
    assert_eq!(k.len(), 1);
    let n = (k[0].prefix_len / 8) as usize - 8;
    let path = k[0].path;
    assert_eq!(&path[..n], b"/nonexistent/wt/");
    assert!(prefix_keys(7, Path::new("relative")).is_empty());
}

#[test]
fn decodes_a_unix_denial() {
    let mut b = vec![0u8; 176];
    b[8] = 7;
    b[16] = Hook::ConnectUnix as u8;
    b[20] = 1;
    b[28] = AF_UNIX as u8;
    b[48..52].copy_from_slice(b"curl");
    b[64..84].copy_from_slice(b"/run/docker.sock\0\0\0\0");
    let e = decode(&b).unwrap();
    assert_eq!(e.hook, "connect_unix");
    assert_eq!(e.comm, "curl");
    assert_eq!(e.protocol, "unix_stream");
    assert_eq!(e.destination, Destination::Unix("/run/docker.sock".into()));
    assert!(matches!(
        decode_event(&b),
        Some((0, Event::KernelNetwork(k))) if k == e
    ));
}

/// An abstract name refused (no Landlock scoping: the run's mode
/// refuses the ones its tasks name) is a scope refusal, as Landlock's.
#[test]
fn an_abstract_name_refused_is_a_scope_refusal() {
    let mut b = vec![0u8; 176];
    b[0] = 9;
    b[12] = 42;
    b[16] = Hook::SendmsgUnix as u8;
    b[20] = 2;
    b[28] = AF_UNIX as u8;
    b[48..55].copy_from_slice(b"python3");
    b[64..72].copy_from_slice(b"\0x11-bus");
    let Some((9, Event::Scope(sc))) = decode_event(&b) else {
        panic!("{:?}", decode_event(&b));
    };
    assert_eq!(sc.pid, 42);
    assert_eq!(sc.comm, "python3");
    assert_eq!(
        sc.target,
        ScopeTarget::AbstractUnixSocket {
            name: "x11-bus".into()
        }
    );
}

#[test]
fn redirect_endpoints_are_one_ipv4_loopback_address_with_ports() {
    use super::hooks::RedirectTo;
    let to = |t: &str, r: &str| RedirectTo {
        transparent: t.parse().unwrap(),
        resolver: r.parse().unwrap(),
    };
    let ok = to("127.0.0.1:4000", "127.0.0.1:5353");
    assert_eq!(ok.checked().unwrap(), ok);
    let cfg = ok.config(3, 1);
    assert_eq!(
        (cfg.slot, cfg.unix_mode, cfg.redirect_ip4),
        (3, 1, [127, 0, 0, 1])
    );
    assert_eq!((cfg.transparent_port, cfg.resolver_port), (4000, 5353));
    assert!(cfg.redirects());
    for (what, bad) in [
        ("IPv6", to("[::1]:4000", "[::1]:5353")),
        ("two addresses", to("127.0.0.1:4000", "127.0.0.2:5353")),
        ("not loopback", to("192.0.2.1:4000", "192.0.2.1:5353")),
        ("no port", to("127.0.0.1:0", "127.0.0.1:5353")),
        ("no resolver port", to("127.0.0.1:4000", "127.0.0.1:0")),
    ] {
        assert!(
            matches!(bad.checked(), Err(super::BpfError::RedirectEndpoints(_))),
            "{what}"
        );
    }
    assert!(!lockrun_common::RunConfig::default().redirects());
}

#[test]
fn an_original_endpoint_is_the_socket_address_it_was() {
    use super::redirect::socket_addr;
    for a in ["198.18.0.7:443", "[2001:db8::1]:53", "10.255.255.53:53"] {
        let a: SocketAddr = a.parse().unwrap();
        assert_eq!(socket_addr(&endpoint_key(&a)), a);
    }
    let mapped: SocketAddr = "[::ffff:198.18.0.7]:443".parse().unwrap();
    assert_eq!(
        socket_addr(&endpoint_key(&mapped)),
        "198.18.0.7:443".parse().unwrap()
    );
}

/// A record of the `sys_exit` recorder, as the program lays it out
/// (`lockrun_common::read_only_offset`): written field by field here, so a
/// layout that moved on either side fails.
fn read_only_record(cgroup: u64, tid: u32, nr: i64, args: [u64; 4], path: &[u8]) -> Vec<u8> {
    use lockrun_common::read_only_offset as at;
    let mut b = vec![0u8; at::SIZE];
    b[at::CGROUP_ID..at::CGROUP_ID + 8].copy_from_slice(&cgroup.to_ne_bytes());
    b[at::PID..at::PID + 4].copy_from_slice(&tid.to_ne_bytes());
    b[at::TGID..at::TGID + 4].copy_from_slice(&4242u32.to_ne_bytes());
    b[at::HOOK..at::HOOK + 4].copy_from_slice(&(Hook::ReadOnly as u32).to_ne_bytes());
    b[at::NR..at::NR + 8].copy_from_slice(&nr.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        b[at::ARGS + 8 * i..at::ARGS + 8 * i + 8].copy_from_slice(&a.to_ne_bytes());
    }
    b[at::RET..at::RET + 8].copy_from_slice(&(-30i64).to_ne_bytes());
    b[at::COMM..at::COMM + 5].copy_from_slice(b"mkdir");
    if !path.is_empty() {
        let len = i32::try_from(path.len() + 1).unwrap();
        b[at::PATH_LEN..at::PATH_LEN + 4].copy_from_slice(&len.to_ne_bytes());
        b[at::PATHS..at::PATHS + path.len()].copy_from_slice(path);
    }
    // What a previous record left past the NUL is not read.
    b[at::PATHS + path.len() + 1..at::PATHS + path.len() + 4].copy_from_slice(b"old");
    b
}

/// A process gone, or one with a descriptor 3 on `/w/wt/ro/f`.
struct Look(Option<&'static str>);

impl crate::audit::syscalls::records::Look for Look {
    fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        (pid == 4243 && fd == 3).then(|| self.0.map(str::to_owned))?
    }

    fn dev_ino(
        &self,
        _: u32,
        _: &crate::audit::syscalls::records::At<'_>,
    ) -> Option<crate::audit::syscalls::records::DevIno> {
        None
    }

    fn cwd(&self, pid: u32) -> Option<String> {
        (pid == 4243 && self.0.is_some()).then(|| "/w/wt".to_owned())
    }
}

/// The process that made the call, still there (pid 4243 of cgroup 77,
/// named `mkdir`).
fn of_run(pid: u32, cgroup_id: u64, comm: &str) -> bool {
    (pid, cgroup_id, comm) == (4243, 77, "mkdir")
}

#[test]
fn a_call_a_read_only_mount_refused_is_a_filesystem_refusal() {
    use super::read_only::decode_with;
    use crate::audit::FsErrno;
    // mkdirat(AT_FDCWD, "ro/new", 0777), AT_FDCWD sign-extended as the
    // register holds it.
    let at_fdcwd = i64::from(libc::AT_FDCWD).cast_unsigned();
    let b = read_only_record(
        77,
        4243,
        libc::SYS_mkdirat,
        [at_fdcwd, 0x7ffd_1000, 0o777, 0],
        b"ro/new",
    );
    let Some((77, Event::Filesystem(f))) = decode_with(&b, &Look(Some("/w/wt/ro/f")), &of_run)
    else {
        panic!("{:?}", decode_with(&b, &Look(None), &of_run));
    };
    assert_eq!((f.pid, f.comm.as_str()), (4242, "mkdir"));
    assert_eq!(f.path.as_deref(), Some("/w/wt/ro"));
    assert_eq!(f.access, ["fs.make_dir"]);
    assert_eq!(f.errno, Some(FsErrno::ReadOnly));
    assert!(f.raw.contains("\"ro/new\""), "{}", f.raw);
    assert!(!f.raw.contains("old"), "{}", f.raw);
    // Its process gone: the relative name is said, not made absolute.
    let Some((77, Event::Filesystem(f))) = decode_with(&b, &Look(None), &of_run) else {
        panic!();
    };
    assert_eq!(f.path, None);
    assert!(f.raw.contains("the name is relative"), "{}", f.raw);

    // fchmod(3, 0600): the descriptor and what it is.
    let b = read_only_record(77, 4243, libc::SYS_fchmod, [3, 0o600, 0, 0], b"");
    let Some((77, Event::Filesystem(f))) = decode_with(&b, &Look(Some("/w/wt/ro/f")), &of_run)
    else {
        panic!();
    };
    assert_eq!(f.path.as_deref(), Some("fd 3 (/w/wt/ro/f)"));
    assert_eq!(f.access, ["metadata.chmod"]);
    // Its pid used again by another process: not looked through.
    let other = |_: u32, _: u64, _: &str| false;
    let Some((77, Event::Filesystem(f))) = decode_with(&b, &Look(Some("/w/wt/ro/f")), &other)
    else {
        panic!();
    };
    assert_eq!(f.path.as_deref(), Some("fd 3"));
    let b = read_only_record(
        77,
        4243,
        libc::SYS_mkdir,
        [0x7ffd_1000, 0o777, 0, 0],
        b"ro/d",
    );
    let Some((77, Event::Filesystem(f))) = decode_with(&b, &Look(Some("/w/wt/ro/f")), &other)
    else {
        panic!();
    };
    assert_eq!(f.path, None);
}

/// An `O_CREAT|O_TRUNC` open a read-only mount refused, decoded once its
/// process is gone (as a busy machine's reader may be late): whether it
/// was a truncation of the file or the making of one in its directory is
/// told by looking where lockrun is, for an absolute name; the file is
/// there, so a truncation of it, not a file made beside it.
#[test]
fn an_o_creat_open_of_a_file_there_is_its_truncation_after_its_process_is_gone() {
    use super::read_only::decode_with;
    struct Removed<'a>(&'a std::path::Path);
    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let dir = std::env::temp_dir().join(format!("lockrun-unit-creat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _removed = Removed(&dir);
    let file = dir.join("there");
    std::fs::write(&file, "x").unwrap();
    let gone = |_: u32, _: u64, _: &str| false;
    let at_fdcwd = i64::from(libc::AT_FDCWD).cast_unsigned();
    let flags = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64;
    let decoded = |name: &std::path::Path| {
        let b = read_only_record(
            77,
            4243,
            libc::SYS_openat,
            [at_fdcwd, 0x7ffd_1000, flags, 0o644],
            name.to_str().unwrap().as_bytes(),
        );
        let Some((77, Event::Filesystem(f))) =
            decode_with(&b, &crate::audit::syscalls::records::Proc, &gone)
        else {
            panic!("not decoded")
        };
        f
    };
    let f = decoded(&file);
    assert_eq!(f.path.as_deref(), file.to_str());
    assert_eq!(f.access, ["fs.write_file", "fs.truncate"]);
    // Control: a name that is not there was a file to make, in its dir.
    let f = decoded(&dir.join("absent"));
    assert_eq!(f.path.as_deref(), dir.to_str());
    assert_eq!(f.access, ["fs.make_reg"]);
}

#[test]
fn a_record_is_told_by_its_size_and_hook() {
    use lockrun_common::read_only_offset as at;
    let b = read_only_record(
        77,
        4243,
        libc::SYS_chmod,
        [0x7ffd_1000, 0o600, 0, 0],
        b"/w/wt/ro/f",
    );
    assert!(matches!(
        decode_event(&b),
        Some((77, Event::Filesystem(f))) if f.access == ["metadata.chmod"]
    ));
    // Not a network refusal, however long; nor another hook's record of
    // its size, nor one cut short.
    assert!(decode(&b).is_none());
    let mut other = b.clone();
    other[at::HOOK] = Hook::Connect4 as u8;
    assert!(decode_event(&other).is_none());
    assert!(decode_event(&b[..at::SIZE - 8]).is_none());
    // A Denial is never taken for one.
    let mut d = vec![0u8; 176];
    d[16] = Hook::ReadOnly as u8;
    assert!(super::read_only::decode(&d).is_none());
}
