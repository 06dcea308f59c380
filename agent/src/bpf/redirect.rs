//! Where a run's redirected TCP connects were meant to go, for the proxy's
//! transparent listener ([`Redirects`], the kernel side of
//! [`crate::proxy::transparent::Originals`]).
//!
//! The `sock_ops` program writes a `TRANSPARENT` entry when a socket of a run
//! whose connect the `connect4`/`connect6` hooks redirected sends its SYN
//! (`BPF_SOCK_OPS_TCP_CONNECT_CB`, where its local port is known): the
//! client side of the connection (address, port, the listener's port) →
//! the original destination and the run's cgroup id. The proxy takes it
//! (reads and deletes) when it accepts the connection. Any process of the
//! host can connect to the listener; only an entry of the run's own cgroup
//! makes a connection the run's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, PoisonError};

use aya::maps::{HashMap, Map, MapData};
use lockrun_common::{Endpoint, Transparent, TransparentKey, AF_INET, MAP_TRANSPARENT};

use super::endpoint_key;
use crate::proxy::transparent::Originals;

/// The originals of one run's transparent connections: the build's shared
/// `TRANSPARENT` map, read for the run in `cgroup_id` and the listener at
/// `listener`.
pub struct Redirects {
    map: Mutex<HashMap<MapData, TransparentKey, Transparent>>,
    cgroup_id: u64,
    listener: SocketAddr,
}

impl std::fmt::Debug for Redirects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redirects")
            .field("cgroup_id", &self.cgroup_id)
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl Redirects {
    /// The pinned `TRANSPARENT` map of the build in `dir`, for the run in
    /// `cgroup_id` whose transparent listener is `listener`.
    pub(super) fn open(
        dir: &std::path::Path,
        cgroup_id: u64,
        listener: SocketAddr,
    ) -> std::io::Result<Self> {
        let data = MapData::from_pin(dir.join(MAP_TRANSPARENT)).map_err(std::io::Error::other)?;
        let map = HashMap::try_from(Map::LruHashMap(data)).map_err(std::io::Error::other)?;
        Ok(Self {
            map: Mutex::new(map),
            cgroup_id,
            listener,
        })
    }
}

impl Originals for Redirects {
    /// The original destination of the connection from `peer` accepted on
    /// `local`, once: `None` when `local` is not the run's listener, when
    /// the kernel recorded nothing for `peer`, or when it recorded it for
    /// another cgroup (then left where it is).
    fn take(&self, peer: SocketAddr, local: SocketAddr) -> Option<SocketAddr> {
        if endpoint_key(&local) != endpoint_key(&self.listener) {
            return None;
        }
        let key = TransparentKey {
            client: endpoint_key(&peer),
            listener_port: local.port(),
            _pad: [0; 2],
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.get(&key, 0).ok()?;
        if entry.cgroup_id != self.cgroup_id {
            return None;
        }
        // Taken once: a second accept from the same client side (a stale
        // entry, another process reusing the port) finds nothing.
        map.remove(&key).ok()?;
        Some(socket_addr(&entry.original))
    }
}

/// An [`Endpoint`] as a socket address (IPv4 as IPv4).
#[must_use]
pub fn socket_addr(e: &Endpoint) -> SocketAddr {
    let ip = if e.family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(e.addr[0], e.addr[1], e.addr[2], e.addr[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(e.addr))
    };
    SocketAddr::new(ip, e.port)
}
