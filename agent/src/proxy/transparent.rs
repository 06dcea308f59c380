//! The proxy's transparent path: connections the kernel brought to the run's transparent listener.

use std::net::SocketAddr;

/// Where an accepted transparent connection was meant to go, as the kernel
/// recorded it when the run's client connected: taken once (read and
/// forgotten) by the client's address (`peer`) and the listener's (`local`);
/// `None` when the kernel recorded nothing for that pair, or recorded it for
/// another run (the connection is then not the run's and is refused).
pub trait Originals: Send + Sync + 'static {
    fn take(&self, peer: SocketAddr, local: SocketAddr) -> Option<SocketAddr>;
}
