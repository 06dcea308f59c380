//! The seccomp deny list: syscalls that would let the command widen its box.
//!
//! CONTRACT (filled in by the seccomp work): compiled in the parent, loaded in the child.

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("not implemented yet")]
    Todo,
}

/// The compiled filter for this architecture.
pub fn filter() -> Result<seccompiler::BpfProgram, SeccompError> {
    Err(SeccompError::Todo)
}
