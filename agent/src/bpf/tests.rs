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
