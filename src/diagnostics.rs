//! Problems found in user input (config files, FSM files, agent output), with
//! where they are and how to fix them.
//!
//! Every checker in modix returns [`Diagnostic`]s instead of failing on the first
//! problem, so a user sees all of them at once. [`Diagnostics`] collects them with
//! the source texts they point into and renders them for people (with a source
//! snippet, via miette) or as JSON for tools.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteDiagnostic, NamedSource,
    Severity as MietteSeverity,
};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// One problem: what is wrong, where, and what would fix it.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    /// Stable identifier, e.g. `config::unknown-key` or `fsm::unreachable`.
    pub code: String,
    pub severity: Severity,
    /// The file as the user should see it (usually relative to the working directory).
    pub file: String,
    /// JSON pointer (or TOML key path) of the offending value, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// Byte range in the source, for the snippet; not part of the JSON output.
    #[serde(skip)]
    pub span: Option<Range<usize>>,
}

impl Diagnostic {
    pub fn error(code: &str, file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, file, message)
    }

    pub fn warning(code: &str, file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, file, message)
    }

    fn new(
        severity: Severity,
        code: &str,
        file: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            code: code.to_owned(),
            severity,
            file: file.into(),
            pointer: None,
            line: None,
            column: None,
            message: message.into(),
            help: None,
            span: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn with_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.pointer = Some(pointer.into());
        self
    }

    /// Points the diagnostic at a byte range of `source`, filling in line and column.
    pub fn with_span(mut self, source: &str, span: Range<usize>) -> Self {
        let start = span.start.min(source.len());
        let (line, column) = line_column(source, start);
        self.line = Some(line);
        self.column = Some(column);
        self.span = Some(start..span.end.clamp(start, source.len()));
        self
    }

    /// Sets line and column (1-based) when no byte span is known.
    pub fn with_line_column(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// `file:line:column`, as far as it is known.
    pub fn location(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}", self.file),
            (Some(l), None) => format!("{}:{l}", self.file),
            _ => self.file.clone(),
        }
    }

    /// One line: `file:line:col: error[code]: message (at /pointer)`.
    pub fn headline(&self) -> String {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut s = format!(
            "{}: {sev}[{}]: {}",
            self.location(),
            self.code,
            self.message
        );
        if let Some(p) = &self.pointer {
            let _ = write!(s, " (at {})", if p.is_empty() { "/" } else { p });
        }
        s
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, source[line_start..offset].chars().count() + 1)
}

/// Byte offset of a 1-based line and column (in characters), clamped to the source.
pub fn offset_of(source: &str, line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match source[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return source.len(),
        }
    }
    source[start..]
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(source.len(), |(i, _)| start + i)
}

/// A batch of diagnostics plus the sources they point into.
#[derive(Debug, Default, Clone)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    sources: BTreeMap<String, Arc<str>>,
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Merges another batch, sources included.
    pub fn append(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
        self.sources.extend(other.sources);
    }

    /// Remembers a file's text so its diagnostics can show a snippet.
    pub fn add_source(&mut self, file: impl Into<String>, text: impl Into<Arc<str>>) {
        self.sources.insert(file.into(), text.into());
    }

    /// A file's text remembered with [`Diagnostics::add_source`].
    pub fn source(&self, file: &str) -> Option<Arc<str>> {
        self.sources.get(file).cloned()
    }

    pub fn items(&self) -> &[Diagnostic] {
        &self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn error_count(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warning_count(&self) -> usize {
        self.count(Severity::Warning)
    }

    pub fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    fn count(&self, severity: Severity) -> usize {
        self.items.iter().filter(|d| d.severity == severity).count()
    }

    /// Sorts by file, then position, errors first at the same place.
    pub fn sort(&mut self) {
        self.items.sort_by(|a, b| {
            (&a.file, a.line, a.column, std::cmp::Reverse(a.severity)).cmp(&(
                &b.file,
                b.line,
                b.column,
                std::cmp::Reverse(b.severity),
            ))
        });
    }

    /// Renders every diagnostic for a terminal: a headline with `file:line:col`,
    /// then a miette snippet of the source where one is known.
    pub fn render_human(&self, color: bool) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_wrap_lines(false)
            .with_links(false);
        let mut out = String::new();
        for d in &self.items {
            let mut md = MietteDiagnostic::new(d.headline()).with_severity(match d.severity {
                Severity::Error => MietteSeverity::Error,
                Severity::Warning => MietteSeverity::Warning,
            });
            if let Some(help) = &d.help {
                md = md.with_help(help.clone());
            }
            let source = self.sources.get(&d.file);
            let report = match (&d.span, source) {
                (Some(span), Some(text)) => {
                    md = md.with_label(LabeledSpan::at(span.clone(), "here"));
                    miette::Report::new(md)
                        .with_source_code(NamedSource::new(&d.file, text.to_string()))
                }
                _ => miette::Report::new(md),
            };
            if handler.render_report(&mut out, report.as_ref()).is_err() {
                let _ = writeln!(out, "{}", d.headline());
            }
            out.push('\n');
        }
        out
    }

    /// `{"errors": n, "warnings": n, "diagnostics": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "errors": self.error_count(),
            "warnings": self.warning_count(),
            "diagnostics": self.items,
        })
    }
}

/// The closest of `candidates` to `name`, for "did you mean" hints.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// "did you mean `x`?" or "known: `a`, `b`" — the help text for an unknown name.
pub fn unknown_name_help<'a>(
    name: &str,
    kind: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> String {
    let known: Vec<String> = candidates
        .clone()
        .into_iter()
        .map(|c| format!("`{c}`"))
        .collect();
    match closest(name, candidates) {
        Some(c) => format!("did you mean `{c}`? (known {kind}s: {})", known.join(", ")),
        None if known.is_empty() => format!("no {kind}s are defined; define `{name}` first"),
        None => format!("use one of the known {kind}s: {}", known.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_chars() {
        let src = "ab\ncdé\nf";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 3), (2, 1));
        assert_eq!(line_column(src, 7), (2, 4));
        assert_eq!(line_column(src, 8), (3, 1));
        assert_eq!(offset_of(src, 2, 3), 5);
        assert_eq!(offset_of(src, 9, 1), src.len());
    }

    #[test]
    fn closest_suggests_near_names() {
        assert_eq!(closest("claud", ["claude", "codex"]), Some("claude"));
        assert_eq!(closest("zzz", ["claude", "codex"]), None);
    }
}
