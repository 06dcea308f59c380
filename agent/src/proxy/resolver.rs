//! Name resolution for the proxy, injectable. The server consults the
//! policy's fixed answers (`[network.resolve]`) first and asks the
//! [`Resolver`] only for other names; whatever comes back is judged by the
//! address guard and then dialed as is — no second resolution happens.
//! Tests inject [`StaticResolver`] or [`NoResolver`] and never touch ambient
//! DNS; runs use [`SystemResolver`] (`getaddrinfo(3)` on a blocking thread,
//! through tokio).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use crate::policy::HostName;

/// Why a name did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{name} has no address")]
    NoAddress { name: HostName },
    #[error("resolving {name} failed: {source}")]
    Lookup {
        name: HostName,
        source: std::io::Error,
    },
    #[error("no resolver: {name} is not in the policy's fixed answers")]
    NotConfigured { name: HostName },
}

/// The future a [`Resolver`] returns.
pub type ResolveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, ResolveError>> + Send + 'a>>;

/// Turns a name into addresses. Implementations must not filter: the guard
/// judges everything they return.
pub trait Resolver: Send + Sync {
    fn resolve<'a>(&'a self, name: &'a HostName) -> ResolveFuture<'a>;
}

/// The system resolver (`getaddrinfo(3)` via tokio's blocking pool).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a HostName) -> ResolveFuture<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name.as_str(), 0))
                .await
                .map_err(|source| ResolveError::Lookup {
                    name: name.clone(),
                    source,
                })?;
            let mut out: Vec<IpAddr> = Vec::new();
            for a in addrs {
                if !out.contains(&a.ip()) {
                    out.push(a.ip());
                }
            }
            if out.is_empty() {
                return Err(ResolveError::NoAddress { name: name.clone() });
            }
            Ok(out)
        })
    }
}

/// Fixed answers only; any other name fails. For tests.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver(pub BTreeMap<HostName, Vec<IpAddr>>);

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a HostName) -> ResolveFuture<'a> {
        Box::pin(async move {
            match self.0.get(name) {
                Some(a) if !a.is_empty() => Ok(a.clone()),
                Some(_) => Err(ResolveError::NoAddress { name: name.clone() }),
                None => Err(ResolveError::NotConfigured { name: name.clone() }),
            }
        })
    }
}

/// Resolves nothing: only the policy's fixed answers work.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoResolver;

impl Resolver for NoResolver {
    fn resolve<'a>(&'a self, name: &'a HostName) -> ResolveFuture<'a> {
        Box::pin(async move { Err(ResolveError::NotConfigured { name: name.clone() }) })
    }
}
