//! How commands speak: JSON on stdout for `--json`, human text otherwise, and
//! errors on stderr with a hint of what to do.

use std::io::Write;

use crate::diagnostics::Diagnostics;

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub color: bool,
}

impl Output {
    pub fn new(color: bool) -> Self {
        Output { color }
    }

    /// Pretty JSON on stdout.
    pub fn json(&self, value: &serde_json::Value) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into());
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    }

    /// One compact JSON line on stdout (for streams such as `go --json`).
    pub fn json_line(&self, value: &serde_json::Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    /// A line of normal output on stdout.
    pub fn line(&self, text: impl AsRef<str>) {
        let _ = writeln!(std::io::stdout().lock(), "{}", text.as_ref());
    }

    /// An error on stderr, with an optional hint on how to fix it.
    pub fn error(&self, message: impl AsRef<str>, help: Option<&str>) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", message.as_ref());
        if let Some(help) = help {
            let _ = writeln!(err, "  help: {help}");
        }
    }

    /// A warning on stderr.
    pub fn warn(&self, message: impl AsRef<str>) {
        let _ = writeln!(std::io::stderr().lock(), "warning: {}", message.as_ref());
    }

    /// Diagnostics on stderr, with source snippets.
    pub fn diagnostics(&self, diags: &Diagnostics) {
        let _ = write!(
            std::io::stderr().lock(),
            "{}",
            diags.render_human(self.color)
        );
    }
}
