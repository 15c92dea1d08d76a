//! Exit codes, the same for every command.

/// Everything went as asked.
pub const OK: u8 = 0;
/// A check failed (doctor found something missing) or a run ended in a failure state.
pub const FAILED: u8 = 1;
/// Bad usage or bad configuration.
pub const USAGE: u8 = 2;
/// Interrupted by Ctrl-C; the run can be resumed.
pub const INTERRUPTED: u8 = 130;
