//! How commands speak: JSON on stdout for `--json`, human text otherwise,
//! errors and warnings on stderr, and the one table style every command uses.

use std::io::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use crate::diagnostics::Diagnostics;
use crate::error::Error;
use crate::orchestrator::SCHEMA_VERSION;

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub color: bool,
    /// The command was given `--json`: errors are reported as JSON too.
    pub json: bool,
}

impl Output {
    pub fn new(color: bool, json: bool) -> Self {
        Output { color, json }
    }

    /// Pretty JSON on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into());
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    }

    /// One compact JSON line on stdout (for streams such as `go --json`).
    pub fn json_line<T: Serialize + ?Sized>(&self, value: &T) {
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, value);
        let _ = writeln!(out);
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

    /// The one place a command's error is rendered: as a JSON object on
    /// stdout for `--json` (so a consumer reading stdout always gets JSON),
    /// as diagnostics and `error: … / help: …` on stderr otherwise.
    pub fn report(&self, e: &Error) {
        let help = e.help();
        if self.json {
            let diagnostics = e.diagnostics().map(Diagnostics::to_json);
            self.json(&serde_json::json!({
                "schema_version": SCHEMA_VERSION,
                "error": {
                    "code": e.code(),
                    "message": e.to_string(),
                    "help": help,
                    "exit_code": e.exit_code() as u8,
                    "diagnostics": diagnostics,
                }
            }));
            return;
        }
        if let Some(d) = e.diagnostics() {
            self.diagnostics(d);
        }
        self.error(e.to_string(), help.as_deref());
    }
}

/// A table in the style every command uses.
pub fn table<S: ToString>(header: impl IntoIterator<Item = S>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_header(header.into_iter().map(|h| h.to_string()));
    t
}
