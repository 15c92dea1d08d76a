//! Global settings in `~/.modix/settings.json` (the folder is `MODIX_HOME` when
//! set), layered once at start-up: built-in defaults < the settings file <
//! `MODIX_*` variables. Project files and command-line flags sit above these
//! where they apply (the CLI applies flags).

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

/// What keeps modix's home from being a folder modix can make and use: it,
/// or a folder above it, is a file. Said before anything is written, with
/// the variable to change, rather than as an OS error half-way through.
pub fn home_problem() -> Option<(String, &'static str)> {
    let home = home_dir()?;
    let crate::workspace::RootProblem::NotAFolder(file) =
        crate::workspace::root_problem(&home, &[])?
    else {
        return None;
    };
    let from = if std::env::var_os("MODIX_HOME").is_some_and(|h| !h.is_empty()) {
        "MODIX_HOME"
    } else {
        "~/.modix"
    };
    Some((
        format!(
            "modix's home {} ({from}) cannot be a folder: {} is a file",
            home.display(),
            file.display()
        ),
        "point MODIX_HOME at a folder (it is made when missing), or unset it to use ~/.modix",
    ))
}

/// The settings file's path, whether or not it exists.
pub fn file() -> Option<PathBuf> {
    home_dir().map(|h| h.join("settings.json"))
}

/// Loads and layers the global settings. Problems in the file are returned as
/// diagnostics (shown by the commands that load a project) and leave the
/// defaults in place, so a broken settings file never stops `modix --help`.
pub fn load() -> (Settings, Diagnostics) {
    let mut diags = Diagnostics::new();
    let mut settings = read(&mut diags).unwrap_or_default();
    apply_env(&mut settings, &mut diags);
    (settings, diags)
}

fn read(diags: &mut Diagnostics) -> Option<Settings> {
    let path = file()?;
    // Anything at that path is read, so a directory or a broken symlink
    // there is reported rather than silently meaning "no settings".
    std::fs::symlink_metadata(&path).ok()?;
    let display = path.display().to_string();
    let file = source::read(&path, &display, diags)?;
    source::parse::<Settings>(&file, "settings", diags)
}

fn apply_env(s: &mut Settings, diags: &mut Diagnostics) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    // A value the variable cannot hold is ignored, like an unset one, and
    // said: a typo must not quietly mean the default.
    let mut parsed = |name: &str, names: &'static [&'static str]| -> Option<&'static str> {
        let v = var(name)?;
        let parsed = names.iter().find(|n| n.eq_ignore_ascii_case(&v)).copied();
        if parsed.is_none() {
            diags.push(
                crate::diagnostics::Diagnostic::warning(
                    "settings::env",
                    name,
                    format!("`{v}` is not a value {name} takes; it is ignored"),
                )
                .with_help(format!("set it to one of: {}", names.join(", "))),
            );
        }
        parsed
    };
    use strum::VariantNames as _;
    if let Some(v) = var("MODIX_DEFAULT_SHELL") {
        s.default_shell = Some(v);
    }
    if let Some(v) = var("MODIX_DEFAULT_BRAIN") {
        s.default_brain = Some(v);
    }
    if let Some(mode) = parsed("MODIX_CONTEXT_MODE", ContextMode::VARIANTS) {
        s.context_mode = mode.parse::<ContextMode>().ok();
    }
    if let Some(level) = parsed("MODIX_LOG", super::types::LogLevel::VARIANTS) {
        s.log_level = level.parse().ok();
    }
}
