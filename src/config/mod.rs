//! Loading and checking `.modix/`: the config files, their JSON Schemas, the
//! references between them, and the layering of settings.

pub mod discover;

pub use discover::{ProjectPaths, find_project};

/// Log level from the global settings file, if any.
pub fn settings_log_level() -> Option<String> {
    None
}
