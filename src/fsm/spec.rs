//! The FSM file format as written: serde structs that mirror the TOML with a
//! span on every value, and the parse step that turns TOML syntax errors (and
//! unknown keys) into diagnostics with line and column.
//!
//! Nothing here judges meaning; `check` does that on the [`RawFile`].

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::diagnostics::Diagnostic;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub id: Option<Spanned<String>>,
    pub version: Option<Spanned<String>>,
    pub description: Option<Spanned<String>>,
    pub initial: Option<Spanned<String>>,
    // A map loses file order; the key spans give it back (sorted in `states_in_order`).
    #[serde(default)]
    pub states: BTreeMap<Spanned<String>, RawState>,
    #[serde(default)]
    pub transitions: Vec<Spanned<RawTransition>>,
}

// One flat struct for every kind, rather than a tagged enum: serde's internally
// tagged enums buffer their content and would lose the spans.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    pub kind: Spanned<String>,
    pub event: Option<Spanned<String>>,
    pub agent: Option<Spanned<String>>,
    pub output: Option<Spanned<String>>,
    // Signed so a negative value gets our own message instead of a serde one.
    pub timeout_secs: Option<Spanned<i64>>,
    pub emit: Option<Spanned<Vec<Spanned<RawEmit>>>>,
    pub outcome: Option<Spanned<String>>,
    #[serde(default)]
    pub on_enter: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEmit {
    pub on: Spanned<String>,
    pub when: Option<Spanned<String>>,
    pub event: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTransition {
    pub from: Spanned<String>,
    pub event: Spanned<String>,
    pub to: Spanned<String>,
    pub max: Option<Spanned<i64>>,
    pub exhausted: Option<Spanned<String>>,
}

impl RawFile {
    /// States in the order they appear in the file.
    pub fn states_in_order(&self) -> Vec<(&Spanned<String>, &RawState)> {
        let mut v: Vec<_> = self.states.iter().collect();
        v.sort_by_key(|(k, _)| k.span().start);
        v
    }
}

/// Parses TOML text into the raw file, or the one diagnostic explaining why not.
pub(crate) fn parse(text: &str, file: &str) -> Result<RawFile, Box<Diagnostic>> {
    toml::from_str::<RawFile>(text).map_err(|e| Box::new(syntax_diagnostic(&e, text, file)))
}

fn syntax_diagnostic(e: &toml::de::Error, text: &str, file: &str) -> Diagnostic {
    let mut message = e.message().trim().replace('\n', "; ");
    let (mut code, mut help) = classify(&message);
    // toml reports a repeated `[states.X]` table as a plain duplicate key.
    if let Some(name) = duplicate_state(e, text) {
        code = "fsm::duplicate-state";
        help = "each state is defined once; rename or merge the second definition";
        message = format!("state `{name}` is defined twice");
    }
    let d = Diagnostic::error(code, file, message).with_help(help);
    match e.span() {
        Some(span) => d.with_span(text, clamp(span, text.len())),
        None => d.with_line_column(1, 1),
    }
}

fn duplicate_state(e: &toml::de::Error, text: &str) -> Option<String> {
    if !e.message().contains("duplicate key") {
        return None;
    }
    let span = e.span()?;
    let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next()?.trim();
    let name = line.strip_prefix("[states.")?.strip_suffix(']')?;
    Some(name.trim().trim_matches('"').to_owned())
}

fn clamp(span: Range<usize>, len: usize) -> Range<usize> {
    span.start.min(len)..span.end.min(len)
}

// serde and toml only give a message; its wording tells the cases apart.
fn classify(message: &str) -> (&'static str, &'static str) {
    if message.contains("unknown field") {
        (
            "fsm::unknown-key",
            "remove the key or fix its spelling; see docs/fsm.md for the keys each table accepts",
        )
    } else if message.contains("missing field") {
        (
            "fsm::invalid-field",
            "add the missing key; see docs/fsm.md for the keys each table needs",
        )
    } else {
        (
            "fsm::syntax",
            "fix the TOML syntax or value type at this position",
        )
    }
}
