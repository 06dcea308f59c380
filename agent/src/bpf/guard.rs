//! lockrun's unix guard, for kernels without the cgroup unix hooks: not
//! built yet, so it never loads and those kernels keep the gaps it would
//! close ([`crate::kernel::Gap::UnixAddresses`]).

/// Whether the guard's programs load on this kernel.
#[must_use]
pub fn loads() -> bool {
    false
}
