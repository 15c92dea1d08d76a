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
use toml::de::{DeTable, DeValue};

use crate::diagnostics::Diagnostic;

#[derive(Debug)]
pub(crate) struct RawFile {
    pub id: Option<Spanned<String>>,
    pub version: Option<Spanned<String>>,
    pub description: Option<Spanned<String>>,
    pub initial: Option<Spanned<String>>,
    /// In file order.
    pub states: Vec<(Spanned<String>, RawState)>,
    pub transitions: Vec<Spanned<RawTransition>>,
}

// One flat struct for every kind, rather than an enum per kind, so that `check`
// can say which key does not belong to which kind.
#[derive(Debug)]
pub(crate) struct RawState {
    pub kind: Spanned<String>,
    pub event: Option<Spanned<String>>,
    pub agent: Option<Spanned<String>>,
    pub output: Option<Spanned<String>>,
    // Signed so a negative value gets our own message.
    pub timeout_secs: Option<Spanned<i64>>,
    pub emit: Option<Spanned<Vec<Spanned<RawEmit>>>>,
    pub outcome: Option<Spanned<String>>,
    pub on_enter: Vec<Spanned<String>>,
}

#[derive(Debug)]
pub(crate) struct RawEmit {
    pub on: Spanned<String>,
    pub when: Option<Spanned<String>>,
    pub event: Spanned<String>,
}

#[derive(Debug)]
pub(crate) struct RawTransition {
    pub from: Spanned<String>,
    pub event: Spanned<String>,
    pub to: Spanned<String>,
    pub max: Option<Spanned<i64>>,
    pub exhausted: Option<Spanned<String>>,
}

/// Parses TOML text into the raw file, or the one diagnostic explaining why not.
pub(crate) fn parse(text: &str, file: &str) -> Result<RawFile, Box<Diagnostic>> {
    let doc = DeTable::parse(text).map_err(|e| Box::new(syntax_diagnostic(&e, text, file)))?;
    raw_file(&doc).map_err(|e| {
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
];
const EMIT_KEYS: &[&str] = &["on", "when", "event"];
const TRANSITION_KEYS: &[&str] = &["from", "event", "to", "max", "exhausted"];

fn raw_file(doc: &Spanned<DeTable>) -> Shaped<RawFile> {
    let t = Fields::new(doc.get_ref(), doc.span(), FILE_KEYS)?;
    let mut states = Vec::new();
    if let Some(v) = t.get("states") {
        for (name, st) in table(v)? {
            let name = Spanned::new(name.span(), name.get_ref().to_string());
            states.push((name, raw_state(st)?));
        }
    }
    // toml keeps keys sorted; the spans give the file order back.
    states.sort_by_key(|(k, _)| k.span().start);
    let transitions = match t.get("transitions") {
        Some(v) => array(v, "an array of tables")?
            .iter()
            .map(|v| Ok(Spanned::new(v.span(), raw_transition(v)?)))
            .collect::<Shaped<_>>()?,
        None => Vec::new(),
    };
    Ok(RawFile {
        id: t.string("id")?,
        version: t.string("version")?,
        description: t.string("description")?,
        initial: t.string("initial")?,
        states,
        transitions,
    })
}

fn raw_state(v: &Value) -> Shaped<RawState> {
    let t = Fields::of(v, STATE_KEYS)?;
    let emit = match t.get("emit") {
        Some(v) => {
            let rules = array(v, "an array of inline tables")?
                .iter()
                .map(|r| Ok(Spanned::new(r.span(), raw_emit(r)?)))
                .collect::<Shaped<_>>()?;
            Some(Spanned::new(v.span(), rules))
        }
        None => None,
    };
    let on_enter = match t.get("on_enter") {
        Some(v) => array(v, "an array of strings")?
            .iter()
            .map(string)
            .collect::<Shaped<_>>()?,
        None => Vec::new(),
    };
    Ok(RawState {
        kind: t.required_string("kind")?,
        event: t.string("event")?,
        agent: t.string("agent")?,
        output: t.string("output")?,
        timeout_secs: t.integer("timeout_secs")?,
        emit,
        outcome: t.string("outcome")?,
        on_enter,
    })
}

fn raw_emit(v: &Value) -> Shaped<RawEmit> {
    let t = Fields::of(v, EMIT_KEYS)?;
    Ok(RawEmit {
        on: t.required_string("on")?,
        when: t.string("when")?,
        event: t.required_string("event")?,
    })
}

fn raw_transition(v: &Value) -> Shaped<RawTransition> {
    let t = Fields::of(v, TRANSITION_KEYS)?;
    Ok(RawTransition {
        from: t.required_string("from")?,
        event: t.required_string("event")?,
        to: t.required_string("to")?,
        max: t.integer("max")?,
        exhausted: t.string("exhausted")?,
    })
}

/// The keys of one table, checked against the keys it accepts.
struct Fields<'a, 'i> {
    table: &'a DeTable<'i>,
    span: Range<usize>,
}

impl<'a, 'i> Fields<'a, 'i> {
    fn new(table: &'a DeTable<'i>, span: Range<usize>, allowed: &[&str]) -> Shaped<Self> {
        if let Some((key, _)) = table
            .iter()
            .find(|(k, _)| !allowed.contains(&k.get_ref().as_ref()))
        {
            let expected: Vec<String> = allowed.iter().map(|k| format!("`{k}`")).collect();
            return Err(ShapeError {
                code: "fsm::unknown-key",
                message: format!(
                    "unknown field `{}`, expected one of {}",
                    key.get_ref(),
                    expected.join(", ")
                ),
                help: "remove the key or fix its spelling; see docs/fsm.md for the keys each table accepts",
                span: key.span(),
            });
        }
        Ok(Fields { table, span })
    }

    fn of(v: &'a Value<'i>, allowed: &[&str]) -> Shaped<Self> {
        Fields::new(table(v)?, v.span(), allowed)
    }

    fn get(&self, key: &str) -> Option<&'a Value<'i>> {
        self.table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v)
    }

    fn string(&self, key: &str) -> Shaped<Option<Spanned<String>>> {
        self.get(key).map(string).transpose()
    }

    fn required_string(&self, key: &str) -> Shaped<Spanned<String>> {
        self.string(key)?.ok_or_else(|| ShapeError {
            code: "fsm::invalid-field",
            message: format!("missing field `{key}`"),
            help: "add the missing key; see docs/fsm.md for the keys each table needs",
            span: self.span.clone(),
        })
    }

    fn integer(&self, key: &str) -> Shaped<Option<Spanned<i64>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Integer(i) = v.get_ref() else {
            return Err(wrong_type(v, "an integer"));
        };
        match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Ok(Some(Spanned::new(v.span(), n))),
            Err(_) => Err(ShapeError {
                code: "fsm::syntax",
                message: format!("integer `{}` is out of range", i.as_str()),
                help: "fix the TOML syntax or value type at this position",
                span: v.span(),
            }),
        }
    }
}

fn string(v: &Value) -> Shaped<Spanned<String>> {
    match v.get_ref() {
        DeValue::String(s) => Ok(Spanned::new(v.span(), s.to_string())),
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
