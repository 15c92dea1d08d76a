//! Global settings in `~/.modix/settings.json` (the folder is `MODIX_HOME` when
//! set), layered: built-in defaults < the settings file < `MODIX_*` variables.
//! Project files and command-line flags sit above these where they apply.

use std::path::PathBuf;

use super::source;
use super::types::{ContextMode, Settings};
use crate::diagnostics::Diagnostics;

/// `$MODIX_HOME`, else `~/.modix`.
pub fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("MODIX_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".modix"))
}

/// Loads and layers the global settings; problems in the file are diagnostics.
pub fn load(diags: &mut Diagnostics) -> Settings {
    let mut settings = Settings::default();
    // Anything at that path is read, so a directory or a broken symlink
    // there is reported rather than silently meaning "no settings".
    if let Some(path) = home_dir()
        .map(|h| h.join("settings.json"))
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
    {
        let display = path.display().to_string();
        if let Some(file) = source::read(&path, &display, diags)
            && let Some(s) = source::parse::<Settings>(&file, "settings", diags)
        {
            settings = s;
        }
    }
    apply_env(&mut settings);
    settings
}

fn apply_env(s: &mut Settings) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(v) = var("MODIX_DEFAULT_SHELL") {
        s.default_shell = Some(v);
    }
    if let Some(v) = var("MODIX_DEFAULT_BRAIN") {
        s.default_brain = Some(v);
    }
    match var("MODIX_CONTEXT_MODE").as_deref() {
        Some("isolated") => s.context_mode = Some(ContextMode::Isolated),
        Some("shared") => s.context_mode = Some(ContextMode::Shared),
        _ => {}
    }
    if let Some(v) = var("MODIX_LOG") {
        s.log_level = Some(v);
    }
}

/// The log level from the settings file alone (flags and `MODIX_LOG` are read by the CLI).
pub fn log_level() -> Option<String> {
    peek("log_level")
}

/// `auto`, `always` or `never` from the settings file alone (the flag and
/// `MODIX_COLOR` are read by the CLI).
pub fn color() -> Option<String> {
    peek("color")
}

/// One string field of the settings file, read leniently (once per process):
/// these are needed before any command runs, and a broken file is reported by
/// the full load.
fn peek(key: &str) -> Option<String> {
    static FILE: std::sync::OnceLock<Option<serde_json::Value>> = std::sync::OnceLock::new();
    let value = FILE.get_or_init(|| {
        let text = source::read_text(&home_dir()?.join("settings.json")).ok()?;
        serde_json::from_str(&text).ok()
    });
    value.as_ref()?.get(key)?.as_str().map(str::to_owned)
}
