//! Exit statuses, the `env`/`timeout` convention.
//!
//! The command's own status, or 128+N when it died of signal N. lockrun's own:

/// A usage error (bad flags, bad policy): nothing ran.
pub const USAGE: i32 = 2;
/// lockrun could not set up the sandbox: nothing ran.
pub const SETUP: i32 = 125;
/// The command was found but could not be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;
