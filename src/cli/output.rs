//! How commands speak: JSON on stdout for `--json`, human text otherwise,
//! errors and warnings on stderr, colour only where it was asked for and a
//! terminal shows it, and the one table every command uses — bordered and
//! fitted to the terminal's width on a terminal, plain tab-separated rows
//! (no header, no borders) when stdout is a pipe, as gh does, so
//! `modix history | awk -F'\t' …` works.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use comfy_table::{Cell, Color, ContentArrangement, presets::UTF8_FULL_CONDENSED};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::config::ColorChoice;
use crate::diagnostics::{Diagnostics, Severity};
use crate::error::Error;
use crate::orchestrator::SCHEMA_VERSION;
use crate::text;

#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// The command was given `--json`: errors are reported as JSON too.
    pub json: bool,
    /// `-q`: stderr carries errors only (no progress, no warnings); what a
    /// command was asked for still goes to stdout, as with cargo's `-q`.
    pub quiet: bool,
    /// stdout is a terminal: bordered tables, short run ids, local and
    /// relative times. Otherwise tab-separated rows, full ids, RFC 3339 UTC.
    pub tty: bool,
    /// Colour on stdout.
    pub color: bool,
    /// Colour on stderr (diagnostics, logs, `error:`).
    pub color_err: bool,
    /// Columns a table may take on stdout.
    pub width: usize,
}

/// A stream of JSON lines began on stdout (`go --json`): an error that ends
/// it is one line too, so a reader of lines can read it. One command runs
/// per process, so the process's stdout is the command's.
static STREAMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a piece of text says, and so its colour when colour is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Bad,
    Warn,
}

impl Tone {
    fn style(self) -> console::Style {
        let s = console::Style::new().force_styling(true);
        match self {
            Tone::Plain => s,
            Tone::Good => s.green(),
            Tone::Bad => s.red(),
            Tone::Warn => s.yellow(),
        }
    }

    fn table_color(self) -> Option<Color> {
        match self {
            Tone::Plain => None,
            Tone::Good => Some(Color::Green),
            Tone::Bad => Some(Color::Red),
            Tone::Warn => Some(Color::Yellow),
        }
    }
}

/// Whether to colour a stream: `--color`/`MODIX_COLOR`/settings first;
/// `auto` colours a terminal unless `NO_COLOR` is set (no-color.org) or the
/// terminal is dumb.
pub fn color_enabled(choice: Option<ColorChoice>, is_terminal: bool) -> bool {
    match choice.unwrap_or_default() {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
                && is_terminal
        }
    }
}

/// Columns of the terminal: `COLUMNS` when set (as GNU ls honours it), else
/// the terminal's own size, else 80.
pub fn terminal_width() -> usize {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    [console::Term::stdout(), console::Term::stderr()]
        .iter()
        .find_map(|t| t.size_checked().map(|(_, cols)| usize::from(cols)))
        .filter(|n| *n > 0)
        .unwrap_or(80)
}

impl Output {
    pub fn new(json: bool, quiet: bool, color: Option<ColorChoice>) -> Self {
        let tty = std::io::stdout().is_terminal();
        Output {
            json,
            quiet,
            tty,
            color: color_enabled(color, tty),
            color_err: color_enabled(color, std::io::stderr().is_terminal()),
            width: terminal_width(),
        }
    }

    /// `text` in `tone`'s colour when stdout is coloured.
    pub fn paint(&self, text: impl AsRef<str>, tone: Tone) -> String {
        paint(self.color, text.as_ref(), tone)
    }

    /// `text` in `tone`'s colour when stderr is coloured.
    pub fn paint_err(&self, text: impl AsRef<str>, tone: Tone) -> String {
        paint(self.color_err, text.as_ref(), tone)
    }

    /// Pretty JSON on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) {
        // Written as it is serialised: a document read row by row (a long
        // run's `history --json`) is never in memory whole. A write error (a
        // closed pipe) ends it, as it ends any other output.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let _ = serde_json::to_writer_pretty(&mut out, value);
        let _ = writeln!(out);
        let _ = out.flush();
    }

    /// One compact JSON line on stdout (for streams such as `go --json`).
    pub fn json_line<T: Serialize + ?Sized>(&self, value: &T) {
        STREAMING.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, value);
        let _ = writeln!(out);
        let _ = out.flush();
    }

    /// A line of normal output on stdout.
    pub fn line(&self, text: impl AsRef<str>) {
        let _ = self.try_line(text);
    }

    /// [`Output::line`], saying whether it reached stdout (for output that
    /// repeats, which must end when nobody reads it any more).
    pub fn try_line(&self, text: impl AsRef<str>) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", text.as_ref())?;
        out.flush()
    }

    /// Prose on stdout, wrapped at spaces to the terminal's width (as is, when piped).
    pub fn para(&self, text: impl AsRef<str>) {
        if self.tty {
            self.line(text::wrap(text.as_ref(), self.width).join("\n"));
        } else {
            self.line(text);
        }
    }

    /// A table on stdout: fitted and bordered on a terminal, tab-separated otherwise.
    pub fn table(&self, table: &Table) {
        if self.tty {
            self.line(table.render(self.width, self.color));
        } else {
            let mut out = std::io::stdout().lock();
            for row in &table.rows {
                let cells: Vec<String> = row.iter().map(|c| text::flat(&c.text)).collect();
                let _ = writeln!(out, "{}", cells.join("\t"));
            }
        }
    }

    /// An error on stderr, with an optional hint on how to fix it (both
    /// may quote what an agent or user wrote: control characters escaped).
    pub fn error(&self, message: impl AsRef<str>, help: Option<&str>) {
        let mut said = format!(
            "{}: {}\n",
            self.paint_err("error", Tone::Bad),
            text::escape_controls(message.as_ref())
        );
        if let Some(help) = help {
            said.push_str(&format!("  help: {}\n", text::escape_controls(help)));
        }
        to_stderr(&said);
    }

    /// A warning on stderr (not with `-q`), control characters escaped.
    pub fn warn(&self, message: impl AsRef<str>) {
        if !self.quiet {
            to_stderr(&format!(
                "{}: {}\n",
                self.paint_err("warning", Tone::Warn),
                text::escape_controls(message.as_ref())
            ));
        }
    }

    /// Diagnostics on stderr, with source snippets (`validate`'s form).
    /// With `-q`, only the errors.
    pub fn diagnostics(&self, diags: &Diagnostics) {
        let shown = if self.quiet {
            only_errors(diags)
        } else {
            diags.clone()
        };
        to_stderr(&shown.render_human(self.color_err));
    }

    /// Diagnostics as one line each, `warning: message (file:line)`: what a
    /// command that goes on anyway says about them (`validate` shows them in full).
    pub fn diagnostics_brief(&self, diags: &Diagnostics) {
        for d in diags.items() {
            let place = match d.line {
                Some(line) => format!("{}:{line}", d.file),
                None => d.file.clone(),
            };
            // One line, of a size a terminal can show: a message quoting a
            // huge name is cut (`validate` shows it whole).
            let message = crate::text::one_line(&d.message, BRIEF_MAX);
            match d.severity {
                Severity::Warning => self.warn(format!("{message} ({place})")),
                Severity::Error => self.error(format!("{message} ({place})"), None),
            }
        }
    }

    /// The one place a command's error is rendered: as a JSON object on
    /// stdout for `--json` (so a consumer reading stdout always gets JSON),
    /// as diagnostics and `error: … / help: …` on stderr otherwise.
    pub fn report(&self, e: &Error) {
        if self.json {
            if STREAMING.load(std::sync::atomic::Ordering::Relaxed) {
                self.json_line(&error_json(e));
            } else {
                self.json(&error_json(e));
            }
            return;
        }
        if let Some(d) = e.diagnostics() {
            self.diagnostics(d);
        }
        self.error(e.to_string(), e.help().as_deref());
    }
}

/// The longest message a one-line diagnostic shows, in characters.
const BRIEF_MAX: usize = 300;

/// `{"schema_version", "error": {"code", "message", "help", "exit_code",
/// "diagnostics"}}`: how every `--json` command says it failed.
pub fn error_json(e: &Error) -> serde_json::Value {
    serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "error": {
            "code": e.code(),
            "message": e.to_string(),
            "help": e.help(),
            "exit_code": e.exit_code() as u8,
            "diagnostics": e.diagnostics().map(Diagnostics::to_json),
        }
    })
}

fn paint(on: bool, text: &str, tone: Tone) -> String {
    if on && tone != Tone::Plain {
        tone.style().apply_to(text).to_string()
    } else {
        text.to_owned()
    }
}

fn only_errors(diags: &Diagnostics) -> Diagnostics {
    let mut kept = Diagnostics::new();
    for d in diags
        .items()
        .iter()
        .filter(|d| d.severity == Severity::Error)
    {
        if let Some(src) = diags.source(&d.file) {
            kept.add_source(d.file.clone(), src);
        }
        kept.push(d.clone());
    }
    kept
}

/// The live line `go` draws on a terminal, if one is showing: whatever else
/// writes to stderr meanwhile (logs, warnings) is printed above it rather
/// than through it, so no half-drawn spinner line is left behind.
static LIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

pub fn set_live_line(bar: Option<ProgressBar>) {
    if let Ok(mut live) = LIVE.lock() {
        *live = bar;
    }
}

/// Writes `text` to stderr, around the live line if one is showing.
pub fn to_stderr(text: &str) {
    let bar = LIVE.lock().ok().and_then(|l| l.clone());
    let write = || {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    };
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// The writer `tracing` logs through: stderr, around the live line.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        to_stderr(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A cell: its text and what it says.
#[derive(Debug, Clone)]
pub struct TableCell {
    text: String,
    tone: Tone,
}

impl From<String> for TableCell {
    fn from(text: String) -> Self {
        TableCell {
            text,
            tone: Tone::Plain,
        }
    }
}

impl From<&str> for TableCell {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

/// A cell coloured by what it says (on a coloured terminal).
pub fn toned(text: impl Into<String>, tone: Tone) -> TableCell {
    TableCell {
        text: text.into(),
        tone,
    }
}

/// Rows under a header, in the style every command uses.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<TableCell>>,
    /// A column whose text wraps onto more lines instead of being cut.
    wrap: Option<usize>,
    /// Columns left out, in this order, while the others do not fit.
    optional: Vec<usize>,
    /// Columns cut only when cutting the others is not enough (ids, statuses).
    keep: Vec<usize>,
}

/// Narrowest a column is cut to when a table must shrink.
const MIN_COLUMN: usize = 4;
/// Narrowest a column is cut to before optional columns are left out instead.
const COMFORTABLE: usize = 16;
/// Narrowest a wrapping column is made before the others are cut instead.
const MIN_WRAP: usize = 20;

impl Table {
    pub fn new<S: ToString>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            wrap: None,
            optional: Vec::new(),
            keep: Vec::new(),
        }
    }

    /// Columns to cut only when cutting the others is not enough.
    pub fn keep(mut self, columns: &[usize]) -> Self {
        self.keep = columns.to_vec();
        self
    }

    /// Positions among `shown` of the columns kept whole.
    fn kept(&self, shown: &[usize]) -> Vec<usize> {
        let mut kept: Vec<usize> = (0..shown.len())
            .filter(|&col| self.keep.contains(&shown[col]))
            .collect();
        if let Some(w) = self.wrap.and_then(|w| shown.iter().position(|&i| i == w)) {
            kept.push(w);
        }
        kept
    }

    /// Columns that may be left out on a narrow terminal, the first first.
    pub fn optional(mut self, columns: &[usize]) -> Self {
        self.optional = columns.to_vec();
        self
    }

    /// Wrap column `i` to fit (instead of cutting the widest column).
    pub fn wrap_column(mut self, i: usize) -> Self {
        self.wrap = Some(i);
        self
    }

    /// A row; its cells' control characters are escaped here, once for
    /// every table (their text comes from agents and users).
    pub fn row<C: Into<TableCell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        let row = cells.into_iter().map(|c| {
            let mut cell: TableCell = c.into();
            if let Cow::Owned(safe) = text::escape_controls(&cell.text) {
                cell.text = safe;
            }
            cell
        });
        self.rows.push(row.collect());
    }

    /// Bordered, at most `width` columns wide: optional columns are left
    /// out while the rest would not fit uncut, a wrapping column takes what
    /// the others leave, then the widest columns are cut with `…`.
    fn render(&self, width: usize, color: bool) -> String {
        let natural: Vec<usize> = (0..self.header.len())
            .map(|i| {
                let cells = self.rows.iter().filter_map(|r| r.get(i));
                cells
                    .flat_map(|c| c.text.lines())
                    .chain(std::iter::once(self.header[i].as_str()))
                    .map(text::width)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let shown = self.shown_columns(&natural, width);
        let wrap = self.wrap.and_then(|w| shown.iter().position(|&i| i == w));
        let natural: Vec<usize> = shown.iter().map(|&i| natural[i]).collect();
        let widths = fit_widths(
            &natural,
            budget(width, shown.len()),
            wrap,
            &self.kept(&shown),
        );
        let shape = |col: usize, s: &str| -> String {
            if Some(col) == wrap {
                text::wrap(s, widths[col]).join("\n")
            } else {
                let lines: Vec<String> = s
                    .lines()
                    .map(|l| text::fit(l, widths[col]).into_owned())
                    .collect();
                lines.join("\n")
            }
        };
        let mut t = comfy_table::Table::new();
        t.load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(
                shown
                    .iter()
                    .enumerate()
                    .map(|(col, &i)| text::fit(&self.header[i], widths[col]).into_owned()),
            );
        if color {
            t.enforce_styling();
        } else {
            t.force_no_tty();
        }
        for row in &self.rows {
            t.add_row(shown.iter().enumerate().map(|(col, &i)| {
                let c = row.get(i).cloned().unwrap_or_else(|| "".into());
                let cell = Cell::new(shape(col, &c.text));
                match c.tone.table_color().filter(|_| color) {
                    Some(fg) => cell.fg(fg),
                    None => cell,
                }
            }));
        }
        t.to_string()
    }

    /// The columns to show: all, less optional ones while fitting the rest
    /// would cut a column below [`COMFORTABLE`] (or a wrapping one below its minimum).
    fn shown_columns(&self, natural: &[usize], width: usize) -> Vec<usize> {
        let mut shown: Vec<usize> = (0..natural.len()).collect();
        for drop in &self.optional {
            let wanted: Vec<usize> = shown.iter().map(|&i| natural[i]).collect();
            let wrap = self.wrap.and_then(|w| shown.iter().position(|&i| i == w));
            let widths = fit_widths(
                &wanted,
                budget(width, shown.len()),
                wrap,
                &self.kept(&shown),
            );
            let comfortable = widths.iter().zip(&wanted).enumerate().all(|(col, (w, n))| {
                let floor = if Some(col) == wrap {
                    MIN_WRAP
                } else {
                    COMFORTABLE
                };
                *w >= (*n).min(floor)
            });
            if comfortable {
                break;
            }
            shown.retain(|i| i != drop);
        }
        shown
    }
}

/// Columns left for content in a table `width` wide with `n` columns: each
/// has a space either side and a rule after it, plus the left border.
fn budget(width: usize, n: usize) -> usize {
    width.saturating_sub(3 * n + 1)
}

/// Column widths within `budget`: the wrapping column (if any) gets the room
/// the others leave, but at least [`MIN_WRAP`]; then every column not in
/// `keep` (which holds the wrapping one) wider than a cap is cut to it, the
/// cap as high as the budget allows — and every column, when even that is
/// not enough.
fn fit_widths(natural: &[usize], budget: usize, wrap: Option<usize>, keep: &[usize]) -> Vec<usize> {
    let mut w = natural.to_vec();
    if w.iter().sum::<usize>() <= budget {
        return w;
    }
    let wrap = wrap.filter(|c| *c < w.len());
    if let Some(c) = wrap {
        let others: usize = w.iter().sum::<usize>() - w[c];
        w[c] = budget.saturating_sub(others).max(natural[c].min(MIN_WRAP));
        if w.iter().sum::<usize>() <= budget {
            return w;
        }
    }
    let widest = w.iter().copied().max().unwrap_or(0);
    let capped = |w: &[usize], cap: usize, keep: &[usize]| -> Vec<usize> {
        w.iter()
            .enumerate()
            .map(|(i, x)| if keep.contains(&i) { *x } else { (*x).min(cap) })
            .collect()
    };
    let fits = |w: &[usize]| w.iter().sum::<usize>() <= budget;
    for keep in [keep, &[]] {
        if let Some(cap) = (MIN_COLUMN..=widest)
            .rev()
            .find(|cap| fits(&capped(&w, *cap, keep)))
        {
            return capped(&w, cap, keep);
        }
    }
    capped(&w, MIN_COLUMN, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_widest_column_is_cut_first() {
        assert_eq!(fit_widths(&[5, 40, 10], 60, None, &[]), [5, 40, 10]);
        assert_eq!(fit_widths(&[5, 40, 10], 35, None, &[]), [5, 20, 10]);
        // Two wide columns share the cut.
        assert_eq!(fit_widths(&[30, 30, 4], 40, None, &[]), [18, 18, 4]);
        // A kept column is cut last.
        assert_eq!(fit_widths(&[30, 30, 4], 40, None, &[0]), [30, 6, 4]);
    }

    #[test]
    fn a_wrapping_column_takes_the_rest() {
        assert_eq!(fit_widths(&[5, 10, 100], 60, Some(2), &[2]), [5, 10, 45]);
        // Too little room left: it keeps its minimum and the others are cut.
        assert_eq!(fit_widths(&[50, 10, 100], 60, Some(2), &[2]), [30, 10, 20]);
    }

    #[test]
    fn a_rendered_table_never_exceeds_the_width() {
        let mut t = Table::new(["id", "epic"]);
        t.row(["01ABCDEF", &"word ".repeat(40)]);
        let text = t.render(50, false);
        assert!(text.lines().all(|l| text::width(l) <= 50), "{text}");
        assert!(text.contains('…'), "{text}");
        let wrapped = t.clone().wrap_column(1).render(50, false);
        assert!(wrapped.lines().all(|l| text::width(l) <= 50), "{wrapped}");
        assert!(!wrapped.contains('…'), "{wrapped}");
    }

    #[test]
    fn optional_columns_go_first_on_a_narrow_terminal() {
        let mut t = Table::new(["seq", "at", "reason"])
            .wrap_column(2)
            .optional(&[1]);
        t.row(["1", "12:00:00.000000", "because"]);
        assert!(t.render(80, false).contains("12:00"));
        assert!(!t.render(30, false).contains("12:00"));
    }
}
