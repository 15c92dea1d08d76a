//! (being built)

/// Log level from the global settings file, if any.
pub fn settings_log_level() -> Option<String> {
    None
}
