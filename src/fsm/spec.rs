//! The FSM file format as written: plain structs that mirror the TOML with a
//! span on every value, and the parse step that turns TOML syntax errors,
//! unknown keys, missing keys and wrong value types into diagnostics with line
//! and column.
//!
//! The text is parsed once into toml's span-keeping document tree
//! ([`DeTable`]) and walked by hand: serde's derive would rebuild every value
//! through `Spanned` wrappers, which costs more than the walk itself.
//! Nothing here judges meaning; `check` does that on the [`RawFile`].

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use crate::diagnostics::Diagnostic;

/// A string value (or key) of the file, borrowed from the parsed document.
pub(crate) type Text<'a> = Spanned<&'a str>;

#[derive(Debug)]
pub(crate) struct RawFile<'a> {
    pub id: Option<Text<'a>>,
    pub version: Option<Text<'a>>,
    pub description: Option<Text<'a>>,
    pub initial: Option<Text<'a>>,
    /// In file order.
    pub states: Vec<(Text<'a>, RawState<'a>)>,
    pub transitions: Vec<Spanned<RawTransition<'a>>>,
}

// One flat struct for every kind, rather than an enum per kind, so that `check`
// can say which key does not belong to which kind.
#[derive(Debug)]
pub(crate) struct RawState<'a> {
    pub kind: Text<'a>,
    pub event: Option<Text<'a>>,
    pub agent: Option<Text<'a>>,
    pub output: Option<Text<'a>>,
    // Signed so a negative value gets our own message.
    pub timeout_secs: Option<Spanned<i64>>,
    pub emit: Option<Spanned<Vec<Spanned<RawEmit<'a>>>>>,
    pub outcome: Option<Text<'a>>,
    pub on_enter: Vec<Text<'a>>,
    pub retry: Option<Spanned<Vec<Spanned<RawRetry<'a>>>>>,
    pub catch: Option<Spanned<Vec<Spanned<RawCatch<'a>>>>>,
    pub question: Option<Text<'a>>,
    pub events: Option<Spanned<Vec<Text<'a>>>>,
}

/// One `retry` entry; every value but `on` is optional here, so `check`
/// can say what is missing in its own words (a retry without
/// `max_attempts` is unbounded, not just incomplete).
#[derive(Debug)]
pub(crate) struct RawRetry<'a> {
    pub on: Spanned<Vec<Text<'a>>>,
    pub max_attempts: Option<Spanned<i64>>,
    pub interval_secs: Option<Spanned<i64>>,
    pub backoff_rate: Option<Spanned<f64>>,
    pub max_delay_secs: Option<Spanned<i64>>,
    pub jitter: Option<Text<'a>>,
}

/// One `catch` entry.
#[derive(Debug)]
pub(crate) struct RawCatch<'a> {
    pub on: Spanned<Vec<Text<'a>>>,
    pub next: Text<'a>,
}

#[derive(Debug)]
pub(crate) struct RawEmit<'a> {
    pub on: Text<'a>,
    pub when: Option<Text<'a>>,
    pub event: Text<'a>,
}

#[derive(Debug)]
pub(crate) struct RawTransition<'a> {
    pub from: Text<'a>,
    pub event: Text<'a>,
    pub to: Text<'a>,
    pub max: Option<Spanned<i64>>,
    pub exhausted: Option<Text<'a>>,
}

/// Parses TOML text into toml's document tree, which the raw file borrows from.
pub(crate) fn parse<'t>(
    text: &'t str,
    file: &str,
) -> Result<Spanned<DeTable<'t>>, Box<Diagnostic>> {
    DeTable::parse(text).map_err(|e| Box::new(syntax_diagnostic(&e, text, file)))
}

/// Reads the document into the raw file, or the one diagnostic explaining why not.
pub(crate) fn raw<'a>(
    doc: &'a Spanned<DeTable<'_>>,
    text: &str,
    file: &str,
) -> Result<RawFile<'a>, Box<Diagnostic>> {
    raw_file(doc).map_err(|e| {
        let d = Diagnostic::error(e.code, file, e.message).with_help(e.help);
        Box::new(d.with_span(text, clamp(e.span, text.len())))
    })
}

type Value<'i> = Spanned<DeValue<'i>>;

/// A value of the wrong shape: an unknown or missing key, or a wrong type.
struct ShapeError {
    code: &'static str,
    message: String,
    help: &'static str,
    span: Range<usize>,
}

type Shaped<T> = Result<T, ShapeError>;

const FILE_KEYS: &[&str] = &[
    "id",
    "version",
    "description",
    "initial",
    "states",
    "transitions",
];
const STATE_KEYS: &[&str] = &[
    "kind",
    "event",
    "agent",
    "output",
    "timeout_secs",
    "emit",
    "outcome",
    "on_enter",
    "retry",
    "catch",
    "question",
    "events",
];
const RETRY_KEYS: &[&str] = &[
    "on",
    "max_attempts",
    "interval_secs",
    "backoff_rate",
    "max_delay_secs",
    "jitter",
];
const CATCH_KEYS: &[&str] = &["on", "next"];
const EMIT_KEYS: &[&str] = &["on", "when", "event"];
const TRANSITION_KEYS: &[&str] = &["from", "event", "to", "max", "exhausted"];

// Each table is read in one pass over its entries, as serde's derive would.

fn raw_file<'a>(doc: &'a Spanned<DeTable<'_>>) -> Shaped<RawFile<'a>> {
    let mut f = RawFile {
        id: None,
        version: None,
        description: None,
        initial: None,
        states: Vec::new(),
        transitions: Vec::new(),
    };
    for (key, v) in doc.get_ref() {
        match key.get_ref().as_ref() {
            "id" => f.id = Some(string(v)?),
            "version" => f.version = Some(string(v)?),
            "description" => f.description = Some(string(v)?),
            "initial" => f.initial = Some(string(v)?),
            "states" => {
                for (name, st) in table(v)? {
                    let name = Spanned::new(name.span(), name.get_ref().as_ref());
                    f.states.push((name, raw_state(st)?));
                }
            }
            "transitions" => {
                for t in array(v, "an array of tables")? {
                    f.transitions
                        .push(Spanned::new(t.span(), raw_transition(t)?));
                }
            }
            _ => return Err(unknown_key(key, FILE_KEYS)),
        }
    }
    // toml may keep keys sorted; the spans give the file order back.
    f.states.sort_by_key(|(k, _)| k.span().start);
    Ok(f)
}

fn raw_state<'a>(v: &'a Value<'_>) -> Shaped<RawState<'a>> {
    let mut kind = None;
    let mut st = RawState {
        kind: Spanned::new(0..0, ""),
        event: None,
        agent: None,
        output: None,
        timeout_secs: None,
        emit: None,
        outcome: None,
        on_enter: Vec::new(),
        retry: None,
        catch: None,
        question: None,
        events: None,
    };
    for (key, v) in table(v)? {
        match key.get_ref().as_ref() {
            "kind" => kind = Some(string(v)?),
            "event" => st.event = Some(string(v)?),
            "agent" => st.agent = Some(string(v)?),
            "output" => st.output = Some(string(v)?),
            "timeout_secs" => st.timeout_secs = Some(integer(v)?),
            "emit" => st.emit = Some(tables(v, raw_emit)?),
            "outcome" => st.outcome = Some(string(v)?),
            "on_enter" => st.on_enter = strings(v)?.into_inner(),
            "retry" => st.retry = Some(tables(v, raw_retry)?),
            "catch" => st.catch = Some(tables(v, raw_catch)?),
            "question" => st.question = Some(string(v)?),
            "events" => st.events = Some(strings(v)?),
            _ => return Err(unknown_key(key, STATE_KEYS)),
        }
    }
    st.kind = required(kind, "kind", v)?;
    Ok(st)
}

fn raw_emit<'a>(v: &'a Value<'_>) -> Shaped<RawEmit<'a>> {
    let (mut on, mut when, mut event) = (None, None, None);
    for (key, v) in table(v)? {
        match key.get_ref().as_ref() {
            "on" => on = Some(string(v)?),
            "when" => when = Some(string(v)?),
            "event" => event = Some(string(v)?),
            _ => return Err(unknown_key(key, EMIT_KEYS)),
        }
    }
    Ok(RawEmit {
        on: required(on, "on", v)?,
        when,
        event: required(event, "event", v)?,
    })
}

fn raw_retry<'a>(v: &'a Value<'_>) -> Shaped<RawRetry<'a>> {
    let mut on = None;
    let mut r = RawRetry {
        on: Spanned::new(0..0, Vec::new()),
        max_attempts: None,
        interval_secs: None,
        backoff_rate: None,
        max_delay_secs: None,
        jitter: None,
    };
    for (key, v) in table(v)? {
        match key.get_ref().as_ref() {
            "on" => on = Some(strings(v)?),
            "max_attempts" => r.max_attempts = Some(integer(v)?),
            "interval_secs" => r.interval_secs = Some(integer(v)?),
            "backoff_rate" => r.backoff_rate = Some(number(v)?),
            "max_delay_secs" => r.max_delay_secs = Some(integer(v)?),
            "jitter" => r.jitter = Some(string(v)?),
            _ => return Err(unknown_key(key, RETRY_KEYS)),
        }
    }
    r.on = required(on, "on", v)?;
    Ok(r)
}

fn raw_catch<'a>(v: &'a Value<'_>) -> Shaped<RawCatch<'a>> {
    let (mut on, mut next) = (None, None);
    for (key, v) in table(v)? {
        match key.get_ref().as_ref() {
            "on" => on = Some(strings(v)?),
            "next" => next = Some(string(v)?),
            _ => return Err(unknown_key(key, CATCH_KEYS)),
        }
    }
    Ok(RawCatch {
        on: required(on, "on", v)?,
        next: required(next, "next", v)?,
    })
}

fn raw_transition<'a>(v: &'a Value<'_>) -> Shaped<RawTransition<'a>> {
    let (mut from, mut event, mut to, mut max, mut exhausted) = (None, None, None, None, None);
    for (key, v) in table(v)? {
        match key.get_ref().as_ref() {
            "from" => from = Some(string(v)?),
            "event" => event = Some(string(v)?),
            "to" => to = Some(string(v)?),
            "max" => max = Some(integer(v)?),
            "exhausted" => exhausted = Some(string(v)?),
            _ => return Err(unknown_key(key, TRANSITION_KEYS)),
        }
    }
    Ok(RawTransition {
        from: required(from, "from", v)?,
        event: required(event, "event", v)?,
        to: required(to, "to", v)?,
        max,
        exhausted,
    })
}

fn unknown_key(key: &Spanned<DeString>, expected: &[&str]) -> ShapeError {
    let expected: Vec<String> = expected.iter().map(|k| format!("`{k}`")).collect();
    ShapeError {
        code: "fsm::unknown-key",
        message: format!(
            "unknown field `{}`, expected one of {}",
            key.get_ref(),
            expected.join(", ")
        ),
        help: "remove the key or fix its spelling; see docs/fsm.md for the keys each table accepts",
        span: key.span(),
    }
}

/// A key the table must have; the error points at the whole table.
fn required<T>(field: Option<T>, key: &str, table: &Value) -> Shaped<T> {
    field.ok_or_else(|| ShapeError {
        code: "fsm::invalid-field",
        message: format!("missing field `{key}`"),
        help: "add the missing key; see docs/fsm.md for the keys each table needs",
        span: table.span(),
    })
}

fn integer(v: &Value) -> Shaped<Spanned<i64>> {
    let DeValue::Integer(i) = v.get_ref() else {
        return Err(wrong_type(v, "an integer"));
    };
    match i64::from_str_radix(i.as_str(), i.radix()) {
        Ok(n) => Ok(Spanned::new(v.span(), n)),
        Err(_) => Err(ShapeError {
            code: "fsm::syntax",
            message: format!("integer `{}` is out of range", i.as_str()),
            help: "fix the TOML syntax or value type at this position",
            span: v.span(),
        }),
    }
}

/// An integer or a float, as a float (`backoff_rate = 2` means 2.0).
fn number(v: &Value) -> Shaped<Spanned<f64>> {
    let parsed = match v.get_ref() {
        DeValue::Integer(_) => integer(v).map(|i| *i.get_ref() as f64).ok(),
        DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
        _ => return Err(wrong_type(v, "a number")),
    };
    parsed
        .map(|n| Spanned::new(v.span(), n))
        .ok_or_else(|| ShapeError {
            code: "fsm::syntax",
            message: "the number is out of range".into(),
            help: "fix the TOML syntax or value type at this position",
            span: v.span(),
        })
}

/// An array of strings, spanned as a whole.
fn strings<'a>(v: &'a Value<'_>) -> Shaped<Spanned<Vec<Text<'a>>>> {
    let items = array(v, "an array of strings")?
        .iter()
        .map(string)
        .collect::<Shaped<_>>()?;
    Ok(Spanned::new(v.span(), items))
}

/// An array of (inline) tables, each read by `each` and spanned.
fn tables<'a, T>(
    v: &'a Value<'_>,
    each: impl Fn(&'a Value<'_>) -> Shaped<T>,
) -> Shaped<Spanned<Vec<Spanned<T>>>> {
    let items = array(v, "an array of inline tables")?
        .iter()
        .map(|r| Ok(Spanned::new(r.span(), each(r)?)))
        .collect::<Shaped<_>>()?;
    Ok(Spanned::new(v.span(), items))
}

fn string<'a>(v: &'a Value<'_>) -> Shaped<Text<'a>> {
    match v.get_ref() {
        DeValue::String(s) => Ok(Spanned::new(v.span(), s.as_ref())),
        _ => Err(wrong_type(v, "a string")),
    }
}

fn table<'a, 'i>(v: &'a Value<'i>) -> Shaped<&'a DeTable<'i>> {
    match v.get_ref() {
        DeValue::Table(t) => Ok(t),
        _ => Err(wrong_type(v, "a table")),
    }
}

fn array<'a, 'i>(v: &'a Value<'i>, expected: &str) -> Shaped<&'a [Value<'i>]> {
    match v.get_ref() {
        DeValue::Array(a) => Ok(a),
        _ => Err(wrong_type(v, expected)),
    }
}

fn wrong_type(v: &Value, expected: &str) -> ShapeError {
    ShapeError {
        code: "fsm::syntax",
        message: format!(
            "invalid type: {}, expected {expected}",
            v.get_ref().type_str()
        ),
        help: "fix the TOML syntax or value type at this position",
        span: v.span(),
    }
}

fn syntax_diagnostic(e: &toml::de::Error, text: &str, file: &str) -> Diagnostic {
    let mut message = e.message().trim().replace('\n', "; ");
    let (mut code, mut help) = ("fsm::syntax", "fix the TOML syntax at this position");
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
