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
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteDiagnostic,
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

    /// [`Diagnostic::with_span`] for one of many diagnostics in the same source.
    pub fn with_span_in(self, index: &LineIndex, span: Range<usize>) -> Self {
        self.with_span_marked(index.source, &index.marks, span)
    }

    /// [`Diagnostic::with_span_in`] with marks kept apart from their source.
    pub fn with_span_marked(mut self, source: &str, marks: &LineMarks, span: Range<usize>) -> Self {
        let len = source.len();
        let start = span.start.min(len);
        let (line, column) = marks.line_column(source, start);
        self.line = Some(line);
        self.column = Some(column);
        self.span = Some(start..span.end.clamp(start, len));
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
    let offset = floor_char_boundary(source, offset);
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, source[line_start..offset].chars().count() + 1)
}

/// Line and column look-ups for many diagnostics in one source, each in time
/// independent of the source's size: [`line_column`] scans from the start, so
/// a file with thousands of problems would cost the square of its size.
pub struct LineIndex<'a> {
    source: &'a str,
    marks: LineMarks,
}

impl<'a> LineIndex<'a> {
    pub fn new(source: &'a str) -> Self {
        LineIndex {
            source,
            marks: LineMarks::new(source),
        }
    }

    /// 1-based line and column (in characters) of a byte offset, as [`line_column`].
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        self.marks.line_column(self.source, offset)
    }
}

/// The marks of a [`LineIndex`] without the borrowed source, for an owner
/// that keeps the source itself (a config file's `SourceFile`).
#[derive(Debug)]
pub struct LineMarks {
    /// (byte offset, line, column) at every line start, and every
    /// [`LineMarks::STRIDE`] bytes within long lines; sorted by offset.
    marks: Vec<(usize, usize, usize)>,
}

impl LineMarks {
    /// Most bytes a look-up scans.
    const STRIDE: usize = 4096;

    pub fn new(source: &str) -> Self {
        let mut marks = vec![(0, 1, 1)];
        let (mut line, mut column, mut last) = (1, 1, 0);
        for (i, c) in source.char_indices() {
            if i - last >= Self::STRIDE {
                marks.push((i, line, column));
                last = i;
            }
            if c == '\n' {
                (line, column, last) = (line + 1, 1, i + 1);
                marks.push((last, line, column));
            } else {
                column += 1;
            }
        }
        LineMarks { marks }
    }

    /// [`LineIndex::line_column`] in `source`, the text these marks were made from.
    pub fn line_column(&self, source: &str, offset: usize) -> (usize, usize) {
        let offset = floor_char_boundary(source, offset);
        let i = self.marks.partition_point(|m| m.0 <= offset) - 1;
        let (at, line, column) = self.marks[i];
        (line, column + source[at..offset].chars().count())
    }
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

    /// For a batch to be adjusted before it is merged (e.g. made warnings).
    pub fn items_mut(&mut self) -> &mut [Diagnostic] {
        &mut self.items
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
    /// then a miette snippet of the offending line where one is known.
    pub fn render_human(&self, color: bool) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        // No context lines: a snippet shows the offending line and nothing else
        // of the file (a config path may point at a file holding secrets).
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_wrap_lines(false)
            .with_links(false)
            .with_context_lines(0);
        let mut out = String::new();
        for d in &self.items {
            let report = self.report(d);
            if handler.render_report(&mut out, report.as_ref()).is_err() {
                let _ = writeln!(out, "{}", terminal_text(&d.headline()));
            }
            out.push('\n');
        }
        out
    }

    /// One diagnostic as miette sees it: only ever the window of its line
    /// that [`LineWindow`] cuts, never the whole source.
    fn report(&self, d: &Diagnostic) -> miette::Report {
        let mut md =
            MietteDiagnostic::new(terminal_text(&d.headline())).with_severity(match d.severity {
                Severity::Error => MietteSeverity::Error,
                Severity::Warning => MietteSeverity::Warning,
            });
        if let Some(help) = &d.help {
            md = md.with_help(terminal_text(help));
        }
        match (&d.span, self.sources.get(&d.file)) {
            (Some(span), Some(text)) => {
                let window = LineWindow::new(&terminal_text(&d.file), text, span, d);
                md = md.with_label(LabeledSpan::at(window.label.clone(), "here"));
                miette::Report::new(md).with_source_code(window)
            }
            _ => miette::Report::new(md),
        }
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

/// Longest stretch of the offending line a snippet shows, in characters:
/// miette cannot draw a column past 65,535, and a snippet never shows more of
/// a file than the place it points at.
pub const SNIPPET_WIDTH: usize = 100;
/// When a line is cut, at most this many of its characters come before the error.
const SNIPPET_LEAD: usize = 40;
/// Messages and help are cut to this many characters in human output (the
/// JSON keeps them whole): a message may quote a name as long as the file.
pub const MAX_TEXT_CHARS: usize = 2_000;

/// The window of one source line that a snippet shows, as miette's source:
/// one line of at most [`SNIPPET_WIDTH`] characters with `…` where it was cut,
/// which reports the real line and column of the error for miette's header.
#[derive(Debug)]
struct LineWindow {
    name: String,
    text: String,
    /// 0-based, in the real file.
    line: usize,
    column: usize,
    /// The error's byte range in `text`.
    label: Range<usize>,
}

impl LineWindow {
    fn new(name: &str, source: &str, span: &Range<usize>, d: &Diagnostic) -> Self {
        let start = floor_char_boundary(source, span.start);
        let (line, column) = match (d.line, d.column) {
            (Some(l), Some(c)) => (l, c),
            _ => line_column(source, start),
        };
        let (text, label) = cut_line(source, start, span.end.max(start));
        LineWindow {
            name: name.to_owned(),
            text,
            line: line.saturating_sub(1),
            column: column.saturating_sub(1),
            label,
        }
    }
}

impl miette::SourceCode for LineWindow {
    fn read_span<'a>(
        &'a self,
        _span: &miette::SourceSpan,
        _before: usize,
        _after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name.clone(),
            self.text.as_bytes(),
            (0, self.text.len()).into(),
            self.line,
            self.column,
            1,
        )))
    }
}

/// The line around byte `start` of `source`, cut to a window around it, and
/// the byte range of `start..end` in that window. Looks at no more than
/// [`SNIPPET_WIDTH`] characters either side, however long the line.
fn cut_line(source: &str, start: usize, end: usize) -> (String, Range<usize>) {
    let at_line_end = |c: &char| !matches!(c, '\n' | '\r');
    let before: Vec<char> = source[..start]
        .chars()
        .rev()
        .take_while(at_line_end)
        .take(SNIPPET_WIDTH + 1)
        .collect();
    let after: Vec<(usize, char)> = source[start..]
        .char_indices()
        .take_while(|(_, c)| at_line_end(c))
        .take(SNIPPET_WIDTH + 1)
        .collect();
    let right = after
        .len()
        .min(SNIPPET_WIDTH - before.len().min(SNIPPET_LEAD));
    let left = before.len().min(SNIPPET_WIDTH - right);
    let mut text = String::new();
    if before.len() > left {
        text.push('…');
    }
    text.extend(before[..left].iter().rev().map(|&c| visible(c)));
    let label_start = text.len();
    let mut label_end = None;
    for &(i, c) in &after[..right] {
        if label_end.is_none() && start + i >= end {
            label_end = Some(text.len());
        }
        text.push(visible(c));
    }
    let label_end = label_end.unwrap_or(text.len());
    if after.len() > right {
        text.push('…');
    }
    if text.is_empty() {
        // miette draws no line for an empty source; an empty line is still a place.
        text.push(' ');
    }
    (text, label_start..label_end)
}

/// A character as a snippet may print it: control and bidi characters would
/// act on the terminal (or reorder the line) instead of showing.
fn visible(c: char) -> char {
    if (c.is_control() && c != '\t') || is_bidi_control(c) {
        '\u{FFFD}'
    } else {
        c
    }
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// Text for a terminal: control characters escaped, cut to [`MAX_TEXT_CHARS`].
fn terminal_text(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == MAX_TEXT_CHARS {
            let rest = s.chars().count() - i;
            let _ = write!(out, "… ({rest} more characters; `--json` has them all)");
            break;
        }
        if (c.is_control() && !matches!(c, '\n' | '\t')) || is_bidi_control(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

fn floor_char_boundary(s: &str, offset: usize) -> usize {
    let mut offset = offset.min(s.len());
    while !s.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Names longer than this (in characters) get no "did you mean": comparing
/// two names costs the product of their lengths, and a hint would not help.
pub const MAX_SUGGEST_CHARS: usize = 64;
/// Work one suggestion may do: a comparison costs the product of the two
/// lengths plus [`COMPARE_COST`].
const SUGGEST_CALL_BUDGET: usize = 200_000;
/// The fixed cost of one comparison (allocations, setup), in the same units.
const COMPARE_COST: usize = 64;
/// Work all suggestions of one process may do together, so a file with
/// thousands of unknown names still validates in bounded time (later names
/// just get no hint).
const SUGGEST_TOTAL_BUDGET: usize = 10_000_000;
/// A help line lists at most this many names, then "and N more".
pub const MAX_LISTED_NAMES: usize = 20;
/// Names quoted in help are cut to this many characters.
pub const MAX_NAME_CHARS: usize = 64;

static SUGGEST_WORK_LEFT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(SUGGEST_TOTAL_BUDGET);

/// The closest of `candidates` to `name`, for "did you mean" hints. Look-alike
/// characters (Cyrillic `а`, Greek `Ο`, fullwidth letters) count as the ASCII
/// letter they imitate. Costs at most [`SUGGEST_CALL_BUDGET`].
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = suggestable(name).map(fold_lookalikes)?;
    let n = name.chars().count();
    let mut budget = take_budget();
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        if c == name {
            best = Some((1.0, c));
            break;
        }
        let Some(m) = suggestable(c).map(|c| c.chars().count()) else {
            continue;
        };
        let cost = n * m + COMPARE_COST;
        if cost > budget {
            break;
        }
        budget -= cost;
        let score = strsim::jaro_winkler(&name, c);
        if score > 0.75 && best.is_none_or(|(s, _)| score >= s) {
            best = Some((score, c));
        }
    }
    SUGGEST_WORK_LEFT.fetch_add(budget, std::sync::atomic::Ordering::Relaxed);
    best.map(|(_, c)| c)
}

/// `name` if it is short enough to compare.
fn suggestable(name: &str) -> Option<&str> {
    let short = !name.is_empty() && name.len() <= 4 * MAX_SUGGEST_CHARS;
    (short && name.chars().count() <= MAX_SUGGEST_CHARS).then_some(name)
}

/// Takes this call's share of the process-wide suggestion budget.
fn take_budget() -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    let left = SUGGEST_WORK_LEFT
        .fetch_update(Relaxed, Relaxed, |left| {
            Some(left - left.min(SUGGEST_CALL_BUDGET))
        })
        .unwrap_or(0);
    left.min(SUGGEST_CALL_BUDGET)
}

/// `name` with look-alike characters replaced by the ASCII they imitate and
/// invisible ones dropped.
pub fn fold_lookalikes(name: &str) -> String {
    name.chars()
        .filter(|c| !is_invisible(*c))
        .map(|c| ascii_lookalike(c).unwrap_or(c))
        .collect()
}

fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}' | '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}'
    )
}

/// The ASCII character `c` is easily mistaken for, if any.
fn ascii_lookalike(c: char) -> Option<char> {
    let ascii = match c {
        // Cyrillic
        'а' => 'a',
        'е' => 'e',
        'о' => 'o',
        'р' => 'p',
        'с' => 'c',
        'у' => 'y',
        'х' => 'x',
        'і' => 'i',
        'ј' => 'j',
        'ѕ' => 's',
        'ԁ' => 'd',
        'һ' => 'h',
        'ӏ' => 'l',
        'ԛ' => 'q',
        'ԝ' => 'w',
        'А' => 'A',
        'В' => 'B',
        'Е' => 'E',
        'К' => 'K',
        'М' => 'M',
        'Н' => 'H',
        'О' => 'O',
        'Р' => 'P',
        'С' => 'C',
        'Т' => 'T',
        'Х' => 'X',
        'У' => 'Y',
        'І' => 'I',
        'Ј' => 'J',
        'Ѕ' => 'S',
        'Ԁ' => 'D',
        // Greek
        'Α' => 'A',
        'Β' => 'B',
        'Ε' => 'E',
        'Ζ' => 'Z',
        'Η' => 'H',
        'Ι' => 'I',
        'Κ' => 'K',
        'Μ' => 'M',
        'Ν' => 'N',
        'Ο' => 'O',
        'Ρ' => 'P',
        'Τ' => 'T',
        'Υ' => 'Y',
        'Χ' => 'X',
        'ο' => 'o',
        'ι' => 'i',
        'κ' => 'k',
        'ν' => 'v',
        'ρ' => 'p',
        'υ' => 'u',
        'χ' => 'x',
        'α' => 'a',
        // Dashes and the like
        '‐' | '‑' | '‒' | '–' | '—' | '−' => '-',
        // Fullwidth ASCII
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0)?,
        _ => return None,
    };
    Some(ascii)
}

/// Points out the non-ASCII characters of a name that is not found, since a
/// look-alike (Cyrillic `а` for `a`) is invisible in the message otherwise:
/// "`clаude` has a non-ASCII character `а` (U+0430, looks like `a`) at position 3".
pub fn non_ascii_note(name: &str) -> Option<String> {
    const SHOWN: usize = 3;
    let odd: Vec<(usize, char)> = name
        .chars()
        .enumerate()
        .filter(|(_, c)| !c.is_ascii())
        .take(SHOWN + 1)
        .collect();
    if odd.is_empty() {
        return None;
    }
    let described: Vec<String> = odd
        .iter()
        .take(SHOWN)
        .map(|&(i, c)| describe_char(c, i + 1))
        .collect();
    let mut note = match odd.len() {
        1 => format!(
            "`{}` has a non-ASCII character {}",
            shown(name),
            described[0]
        ),
        _ => format!(
            "`{}` has non-ASCII characters: {}",
            shown(name),
            described.join(", ")
        ),
    };
    if odd.len() > SHOWN {
        let total = name.chars().filter(|c| !c.is_ascii()).count();
        let _ = write!(note, " and {} more", total - SHOWN);
    }
    Some(note)
}

/// "`а` (U+0430, looks like `a`) at position 3"; invisible characters by code point only.
fn describe_char(c: char, position: usize) -> String {
    let code = format!("U+{:04X}", c as u32);
    let glyph = if is_invisible(c) || is_bidi_control(c) || c.is_control() {
        "an invisible character ".to_owned()
    } else {
        format!("`{c}` ")
    };
    match ascii_lookalike(c) {
        Some(a) => format!("{glyph}({code}, looks like `{a}`) at position {position}"),
        None => format!("{glyph}({code}) at position {position}"),
    }
}

/// `name`, cut to [`MAX_NAME_CHARS`] characters for quoting in help.
pub fn shown(name: &str) -> String {
    crate::text::truncate(name, MAX_NAME_CHARS).into_owned()
}

/// "`a`, `b`, `c`", or the first [`MAX_LISTED_NAMES`] then "and N more".
pub fn list_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut names = names.into_iter();
    let mut list = names
        .by_ref()
        .take(MAX_LISTED_NAMES)
        .map(|n| format!("`{}`", shown(n)))
        .collect::<Vec<_>>()
        .join(", ");
    // Callers pass exact-size iterators (slices, map keys): counting the rest
    // is then free, where walking 10,000 names per message would not be.
    let more = match names.size_hint() {
        (low, Some(high)) if low == high => low,
        _ => names.count(),
    };
    if more > 0 {
        let _ = write!(list, " and {more} more");
    }
    list
}

/// "did you mean `x`?" or "known: `a`, `b`" — the help text for an unknown name,
/// led by a note on any non-ASCII characters in it.
pub fn unknown_name_help<'a>(
    name: &str,
    kind: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> String {
    let known = list_names(candidates.clone());
    let help = match closest(name, candidates) {
        Some(c) => format!("did you mean `{}`? (known {kind}s: {known})", shown(c)),
        None if known.is_empty() => {
            format!("no {kind}s are defined; define `{}` first", shown(name))
        }
        None => format!("use one of the known {kind}s: {known}"),
    };
    match non_ascii_note(name) {
        Some(note) => format!("{note}; {help}"),
        None => help,
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

    #[test]
    fn line_index_agrees_with_line_column() {
        let long = "é".repeat(3 * LineMarks::STRIDE);
        let src = format!("ab\ncdé\n{long}x\n\nlast");
        let index = LineIndex::new(&src);
        for offset in (0..=src.len() + 2).step_by(7).chain([src.len()]) {
            assert_eq!(
                index.line_column(offset),
                line_column(&src, offset),
                "{offset}"
            );
        }
    }

    #[test]
    fn a_long_line_is_cut_around_the_error() {
        let src = format!("{{\n{}X{}\n}}", "a".repeat(70_000), "b".repeat(70_000));
        let at = src.find('X').unwrap();
        let (text, label) = cut_line(&src, at, at + 1);
        assert_eq!(&text[label.clone()], "X");
        assert!(text.starts_with('…') && text.ends_with('…'), "{text}");
        assert_eq!(text.chars().count(), SNIPPET_WIDTH + 2);
        // Short lines are shown whole, and nothing of the lines around them.
        let (text, label) = cut_line("one\ntwo three\nfour", 8, 13);
        assert_eq!((text.as_str(), &text[label]), ("two three", "three"));
    }

    #[test]
    fn a_snippet_never_carries_control_characters() {
        let (text, _) = cut_line("a\u{1b}[31mb\u{202e}c", 0, 1);
        assert_eq!(text, "a\u{FFFD}[31mb\u{FFFD}c");
    }

    #[test]
    fn human_output_shows_only_the_offending_line() {
        let src = format!("secret one\n{}\nsecret two\n", "x".repeat(100_000));
        let mut diags = Diagnostics::new();
        diags.add_source("f.json", src.as_str());
        diags.push(
            Diagnostic::error("c", "f.json", "bad").with_span(&src, 11 + 99_990..11 + 99_991),
        );
        let out = diags.render_human(false);
        assert!(out.contains("f.json:2:99991"), "{out}");
        assert!(!out.contains("secret"), "{out}");
        assert!(
            out.lines().all(|l| l.chars().count() < 2 * SNIPPET_WIDTH),
            "{out}"
        );
    }

    #[test]
    fn look_alike_characters_are_pointed_out_and_folded() {
        assert_eq!(closest("cl\u{430}ude", ["codex", "claude"]), Some("claude"));
        assert_eq!(closest("D\u{39f}NE", ["START", "DONE"]), Some("DONE"));
        let help = unknown_name_help("cl\u{430}ude", "shell", ["claude", "codex"]);
        assert!(
            help.starts_with(
                "`cl\u{430}ude` has a non-ASCII character `\u{430}` (U+0430, looks like `a`) at position 3; did you mean `claude`?"
            ),
            "{help}"
        );
        assert_eq!(non_ascii_note("plain"), None);
    }

    #[test]
    fn long_names_are_not_compared_and_lists_are_capped() {
        let long = "A".repeat(200_000);
        let near = format!("{long}B");
        assert_eq!(closest(&long, [near.as_str()]), None);
        let names: Vec<String> = (0..10_000).map(|i| format!("S{i}")).collect();
        let help = unknown_name_help(&long, "state", names.iter().map(String::as_str));
        assert!(help.len() < 2_000, "{}", help.len());
        assert!(help.ends_with("and 9980 more"), "{help}");
    }
}
