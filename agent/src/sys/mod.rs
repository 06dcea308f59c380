//! The few raw syscalls lockrun needs. The only module allowed `unsafe`; each
//! block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]
