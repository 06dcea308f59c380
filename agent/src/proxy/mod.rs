//! The run's allowlisting proxy (tokio), outside the sandbox.
//!
//! CONTRACT (filled in by the proxy work).

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("not implemented yet")]
    Todo,
}
