//! Reading a config file's JSON into types, reporting every problem with its
//! pointer. A file that maps names to entries (`shells.json`, `brains.json`,
//! `agents.json`) is read entry by entry ([`Entries`]): a broken entry is
//! reported and left out, while the others are still checked and referred
//! to, so one mistake does not hide the rest.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::source::{self, SourceFile};
use super::types::{AgentEntry, Brain, ShellEntry};
use crate::diagnostics::{Diagnostic, Diagnostics, Severity, closest};

/// A file that maps names to entries, read entry by entry.
pub struct Entries<T> {
    pub src: SourceFile,
    /// Every name in the file, broken entries included.
    pub names: BTreeSet<String>,
    /// The entries that could be typed (some of them broken), by name.
    pub typed: BTreeMap<String, T>,
    /// Entries with errors (reported), and the role of each when it could
    /// be read (for `agents.json`).
    pub broken: BTreeMap<String, Option<String>>,
    /// The fields left out of a broken entry because they have errors
    /// (reported): their absence is not a second problem.
    pub dropped: BTreeMap<String, BTreeSet<String>>,
}

/// A whole file's value, schema-checked and typed.
pub fn typed_file<T: serde::de::DeserializeOwned>(
    file: &SourceFile,
    value: Value,
    schema: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    if !source::check_schema(file, schema, &value, diags) {
        return None;
    }
    typed_at(file, value, "", schema, diags)
}

/// `source::check_schema` for a value that sits at `prefix` in `file`
/// (an inline manifest): the same diagnostics, pointing into the file.
pub fn check_schema_at(
    file: &SourceFile,
    schema_id: &str,
    value: &Value,
    prefix: &str,
    diags: &mut Diagnostics,
) -> bool {
    let violations = match crate::schema::validate(schema_id, value) {
        Ok(v) => v,
        Err(e) => {
            diags.push(Diagnostic::error(
                "config::internal",
                &file.display,
                e.to_string(),
            ));
            return false;
        }
    };
    for v in &violations {
        let pointer = format!("{prefix}{}", v.pointer);
        let (code, help) = match &v.unknown_key {
            Some(key) => {
                let allowed = v.allowed_keys.iter().map(String::as_str);
                let help = match closest(key, allowed) {
                    Some(near) => format!(
                        "did you mean `{near}`? (allowed here: {})",
                        v.allowed_keys.join(", ")
                    ),
                    None => format!("remove it; allowed here: {}", v.allowed_keys.join(", ")),
                };
                ("config::unknown-key", help)
            }
            None => (
                "config::schema",
                format!("change the value at {pointer} to match schemas/{schema_id}.schema.json"),
            ),
        };
        let d = Diagnostic::error(code, &file.display, v.message.clone())
            .with_pointer(pointer.clone())
            .with_help(help);
        diags.push(file.point(d, &pointer, v.unknown_key.is_some()));
    }
    violations.is_empty()
}

/// A file of entries under `/<schema>` (`shells`, `brains`, `agents`), each
/// schema-checked and typed on its own. A broken entry is typed without the
/// fields that have errors, when it can be, so its references are still
/// checked; it is never used.
///
/// `None` when the file is not an object with an object at `key` (the
/// schema error says so): as with a syntax error, nothing in it can be
/// looked up, so names other files give it are not reported as unknown.
pub fn entries<T: serde::de::DeserializeOwned + HasRole>(
    src: SourceFile,
    value: Value,
    key: &str,
    diags: &mut Diagnostics,
) -> Option<Entries<T>> {
    let before = diags.items().len();
    source::check_schema(&src, key, &value, diags);
    let bad: Vec<String> = diags.items()[before..]
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.pointer.clone().unwrap_or_default())
        .collect();
    let mut out = Entries {
        src,
        names: BTreeSet::new(),
        typed: BTreeMap::new(),
        broken: BTreeMap::new(),
        dropped: BTreeMap::new(),
    };
    let map = value.get(key).and_then(Value::as_object)?;
    for (name, entry) in map {
        out.names.insert(name.clone());
        let prefix = format!("/{key}/{}", crate::schema::escape_pointer(name));
        let fields = bad_fields(&bad, &prefix);
        let mut entry = entry.clone();
        if let (Some(fields), Some(obj)) = (&fields, entry.as_object_mut()) {
            obj.retain(|k, _| !fields.contains(k));
            out.dropped.insert(name.clone(), fields.clone());
        }
        match serde_json::from_value::<T>(entry) {
            Ok(t) => {
                if fields.is_some() {
                    out.broken.insert(name.clone(), t.role());
                }
                out.typed.insert(name.clone(), t);
            }
            Err(e) => {
                if fields.is_none() {
                    diags.push(typing_error(&out.src, &prefix, &map[name], &e, key));
                }
                let role = map[name]
                    .get("role")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                out.broken.insert(name.clone(), role);
            }
        }
    }
    Some(out)
}

/// The fields of the entry at `prefix` that have errors (`None` when the
/// entry has none; empty when the entry itself is wrong as a whole).
pub fn bad_fields(bad: &[String], prefix: &str) -> Option<BTreeSet<String>> {
    let mut fields = None;
    for p in bad {
        let Some(rest) = p.strip_prefix(prefix) else {
            continue;
        };
        if !(rest.is_empty() || rest.starts_with('/')) {
            continue;
        }
        let set = fields.get_or_insert_with(BTreeSet::new);
        if let Some(field) = rest.split('/').nth(1) {
            set.insert(field.replace("~1", "/").replace("~0", "~"));
        }
    }
    fields
}

/// A value typed at `pointer` of `file`; a failure is reported there.
pub fn typed_at<T: serde::de::DeserializeOwned>(
    file: &SourceFile,
    value: Value,
    pointer: &str,
    schema: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    T::deserialize(&value)
        .map_err(|e| diags.push(typing_error(file, pointer, &value, &e, schema)))
        .ok()
}

/// A value the schema passed that still does not type, at `pointer`. JSON
/// Schema counts `1e3` and `60.0` as integers; an integer field does not:
/// such a number is reported at its own place, with the whole number to
/// write. Anything else the schema should have caught: say what serde saw.
fn typing_error(
    file: &SourceFile,
    pointer: &str,
    value: &Value,
    e: &serde_json::Error,
    schema: &str,
) -> Diagnostic {
    let message = e.to_string();
    let Some(whole) = whole_float_in(&message) else {
        return schema_error(file, pointer, message, schema);
    };
    let Some(at) = find_float(value, whole, String::new()) else {
        return schema_error(file, pointer, message, schema);
    };
    let at = format!("{pointer}{at}");
    let written = file
        .locate(&at, false)
        .map_or_else(|| whole.to_string(), |r| file.text[r].to_owned());
    let d = Diagnostic::error(
        "config::schema",
        &file.display,
        format!(
            "`{written}` is not written as a whole number, and this field takes only whole numbers"
        ),
    )
    .with_pointer(&at)
    .with_help(format!("write a whole number: {}", whole as i128));
    file.point(d, &at, false)
}

/// The number of serde's "invalid type: floating point `1000.0`, expected
/// u64" (or another integer type), when it is whole.
fn whole_float_in(message: &str) -> Option<f64> {
    let rest = message.strip_prefix("invalid type: floating point `")?;
    let (number, expected) = rest.split_once("`, expected ")?;
    let integer = [
        "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize",
    ];
    if !integer.iter().any(|t| expected.starts_with(t)) {
        return None;
    }
    number.parse::<f64>().ok().filter(|n| n.fract() == 0.0)
}

/// The pointer (below `value`) of the first number written as a float
/// whose value is `n`.
fn find_float(value: &Value, n: f64, at: String) -> Option<String> {
    match value {
        Value::Number(x) if x.is_f64() && x.as_f64() == Some(n) => Some(at),
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            find_float(v, n, format!("{at}/{}", crate::schema::escape_pointer(k)))
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_float(v, n, format!("{at}/{i}"))),
        _ => None,
    }
}

fn schema_error(file: &SourceFile, pointer: &str, message: String, schema: &str) -> Diagnostic {
    let d = Diagnostic::error("config::schema", &file.display, message)
        .with_pointer(pointer)
        .with_help(format!(
            "see schemas/{schema}.schema.json for the expected shape"
        ));
    file.point(d, pointer, false)
}

/// The role of an entry, for the entries that have one (agents).
pub trait HasRole {
    fn role(&self) -> Option<String> {
        None
    }
}

impl HasRole for ShellEntry {}
impl HasRole for Brain {}
impl HasRole for AgentEntry {
    fn role(&self) -> Option<String> {
        Some(self.role.clone())
    }
}
