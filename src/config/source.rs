//! Reading one JSON config file into a typed value while collecting every
//! problem: syntax (line:column), schema violations (JSON pointer plus the line
//! it sits on), and unknown keys with the nearest allowed name.

use std::collections::HashMap;
use std::io::Read as _;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use jsonc_parser::ast::{ObjectPropName, Value as Ast};
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diagnostics::{
    Diagnostic, Diagnostics, LineIndex, LineMarks, closest, fold_lookalikes, line_column,
    list_names, non_ascii_note, offset_of, shown,
};
use crate::schema;

/// A config file's text, kept for pointing into it.
pub struct SourceFile {
    pub display: String,
    /// Not changed after construction: `index` is built from it.
    pub text: String,
    index: OnceLock<FileIndex>,
}

impl SourceFile {
    pub fn new(display: impl Into<String>, text: impl Into<String>) -> Self {
        SourceFile {
            display: display.into(),
            text: text.into(),
            index: OnceLock::new(),
        }
    }

    fn index(&self) -> &FileIndex {
        self.index.get_or_init(|| FileIndex {
            spans: Spans::new(&self.text),
            lines: LineMarks::new(&self.text),
        })
    }

    /// [`locate`] in this file, in time independent of its size after the
    /// first look-up.
    pub fn locate(&self, pointer: &str, key: bool) -> Option<Range<usize>> {
        self.index().spans.find(pointer, key)
    }

    /// `d` with the span (and line and column) of the value at `pointer` —
    /// or, with `key`, of its property name — when the file has it.
    pub fn point(&self, d: Diagnostic, pointer: &str, key: bool) -> Diagnostic {
        match self.locate(pointer, key) {
            Some(span) => self.span(d, span),
            None => d,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        self.index().lines.line_column(&self.text, offset)
    }

    /// `d` pointed at a byte range of this file.
    pub fn span(&self, d: Diagnostic, span: Range<usize>) -> Diagnostic {
        d.with_span_marked(&self.text, &self.index().lines, span)
    }
}

/// Largest config or FSM file modix reads, in bytes. The biggest real file is
/// a workflow of about 400 KB; anything far larger is a mistake (or not a
/// config file at all), and reading it whole would only make modix slow.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Why a config or FSM file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    Missing,
    /// The file is over [`MAX_FILE_BYTES`]: `size` bytes, or more when not `exact`
    /// (a file whose size the file system does not know, as in `/proc`).
    TooLarge {
        size: u64,
        exact: bool,
    },
    /// Not UTF-8 from this byte on.
    NotUtf8 {
        offset: usize,
        line: usize,
        column: usize,
        byte: u8,
        /// Starts with a UTF-16 byte order mark.
        utf16: bool,
    },
    /// Not a regular file: what it is instead ("is a directory", …).
    NotAFile(String),
    Io(std::io::Error),
}

/// Reads a config or FSM file as UTF-8 text, reading at most
/// [`MAX_FILE_BYTES`] + 1 bytes, and never opening what is not a regular file
/// (a FIFO would block forever, a device never end).
pub fn read_text(path: &Path) -> Result<String, ReadError> {
    let meta = std::fs::metadata(path).map_err(|e| not_found_why(path, e))?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile(kind_of(&meta.file_type()).to_owned()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            exact: true,
        });
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge {
            size: MAX_FILE_BYTES,
            exact: false,
        });
    }
    String::from_utf8(bytes)
        .map(without_bom)
        .map_err(|e| not_utf8(e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// `text` without a UTF-8 byte-order mark at its start. Editors on Windows
/// (and PowerShell's `Out-File`) write one and then hide it; it is not
/// content, and neither JSON nor TOML parsers accept it — the user would
/// see "expected value at 1:1" on a line that looks right. Every file
/// modix reads as text (config, FSM, template) goes through this.
pub fn without_bom(mut text: String) -> String {
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    text
}

/// Why `metadata` failed: a missing file, or a symlink that leads nowhere.
fn not_found_why(path: &Path, e: std::io::Error) -> ReadError {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return match e.kind() {
            std::io::ErrorKind::NotFound => ReadError::Missing,
            _ => ReadError::Io(e),
        };
    }
    if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
        return ReadError::NotAFile(format!("is a symlink loop: {e}"));
    }
    let target = std::fs::read_link(path).map_or_else(|_| "?".into(), |t| t.display().to_string());
    ReadError::NotAFile(format!("is a dangling symlink to `{target}`: {e}"))
}

fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "is a directory"
    } else if t.is_fifo() {
        "is a named pipe (FIFO)"
    } else if t.is_socket() {
        "is a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "is a device"
    } else {
        "is not a regular file"
    }
}

fn not_utf8(bytes: &[u8], offset: usize) -> ReadError {
    // The prefix up to `offset` is valid UTF-8 by definition.
    let valid = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
    let (line, column) = line_column(valid, offset);
    ReadError::NotUtf8 {
        offset,
        line,
        column,
        byte: bytes[offset],
        utf16: bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]),
    }
}

impl ReadError {
    /// The diagnostic for `display`; `area` is the code's prefix (`config`, `fsm`).
    pub fn diagnostic(&self, area: &str, display: &str) -> Diagnostic {
        let (name, message, help) = self.describe(area);
        let d = Diagnostic::error(&format!("{area}::{name}"), display, message).with_help(help);
        match self {
            ReadError::NotUtf8 { line, column, .. } => d.with_line_column(*line, *column),
            _ => d,
        }
    }

    /// Code name, message and help.
    fn describe(&self, area: &str) -> (&'static str, String, String) {
        match self {
            ReadError::Missing => (
                "missing-file",
                "file is missing".into(),
                if area == "config" {
                    "run `modix init` to write the missing files (existing ones are kept)".into()
                } else {
                    "check the path".into()
                },
            ),
            ReadError::TooLarge { size, exact } => (
                "too-large",
                format!(
                    "file is {}{size} bytes; modix reads files of at most {MAX_FILE_BYTES} bytes ({} MiB)",
                    if *exact { "" } else { "over " },
                    MAX_FILE_BYTES >> 20
                ),
                "check that this is the right file: config and FSM files are a few KB".into(),
            ),
            ReadError::NotUtf8 {
                offset,
                byte,
                utf16,
                ..
            } => (
                "not-utf8",
                format!("byte offset {offset} (0x{byte:02X}) is not UTF-8"),
                format!(
                    "save the file as UTF-8{}: config and FSM files must be UTF-8 text",
                    if *utf16 { " (it is UTF-16)" } else { "" }
                ),
            ),
            ReadError::NotAFile(what) => (
                "unreadable",
                format!("cannot read: {what}"),
                "replace it with a regular file, or remove it".into(),
            ),
            ReadError::Io(e) => (
                "unreadable",
                format!("cannot read: {e}"),
                "check the file's permissions".into(),
            ),
        }
    }
}

/// Reads `path`; a missing or unreadable file is a diagnostic, not a panic.
pub fn read(path: &Path, display: &str, diags: &mut Diagnostics) -> Option<SourceFile> {
    match read_text(path) {
        Ok(text) => {
            diags.add_source(display, text.as_str());
            Some(SourceFile::new(display, text))
        }
        Err(e) => {
            diags.push(e.diagnostic("config", display));
            None
        }
    }
}

/// Parses, schema-checks and deserializes a file. `None` when any error was found.
pub fn parse<T: DeserializeOwned>(
    file: &SourceFile,
    schema_id: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    let value = parse_json(file, diags)?;
    if !check_schema(file, schema_id, &value, diags) {
        return None;
    }
    match serde_json::from_value::<T>(value) {
        Ok(v) => Some(v),
        Err(e) => {
            // The schema should have caught this; report it rather than crash.
            diags.push(
                Diagnostic::error("config::schema", &file.display, e.to_string()).with_help(
                    format!("see schemas/{schema_id}.schema.json for the expected shape"),
                ),
            );
            None
        }
    }
}

/// Strict JSON (no comments, no trailing commas): what every tool can read.
pub fn parse_json(file: &SourceFile, diags: &mut Diagnostics) -> Option<Value> {
    match serde_json::from_str::<Value>(&file.text) {
        // JSON keeps the last of two equal keys and drops the first without a word.
        Ok(v) if duplicate_keys(file, diags) => Some(v),
        Ok(_) => None,
        Err(e) => {
            let offset = offset_of(&file.text, e.line(), e.column().max(1));
            diags.push(
                Diagnostic::error(
                    "config::syntax",
                    &file.display,
                    format!("invalid JSON: {}", strip_position(&e.to_string())),
                )
                .with_span(&file.text, offset..offset + 1)
                .with_help(
                    "fix the JSON syntax here (strict JSON: no comments or trailing commas)",
                ),
            );
            None
        }
    }
}

fn strip_position(msg: &str) -> &str {
    msg.rsplit_once(" at line ").map_or(msg, |(m, _)| m)
}

/// Reports every key defined twice in one object, with both places; true when
/// there were none.
fn duplicate_keys(file: &SourceFile, diags: &mut Diagnostics) -> bool {
    let Some(root) = parse_to_ast(
        &file.text,
        &CollectOptions::default(),
        &ParseOptions::default(),
    )
    .ok()
    .and_then(|p| p.value) else {
        return true;
    };
    let mut found = Vec::new();
    find_duplicates(&root, "", &mut found);
    if found.is_empty() {
        return true;
    }
    let index = LineIndex::new(&file.text);
    for dup in found {
        let at = |offset| {
            let (line, column) = index.line_column(offset);
            format!("{line}:{column}")
        };
        let d = Diagnostic::error(
            "config::duplicate-key",
            &file.display,
            format!(
                "key `{}` is defined twice in this object: at {} and again at {}",
                shown(&dup.key),
                at(dup.first.start),
                at(dup.again.start)
            ),
        )
        .with_pointer(dup.pointer)
        .with_span_in(&index, dup.again)
        .with_help("keep one of the two: JSON keeps only the last, silently dropping the first");
        diags.push(d);
    }
    false
}

/// A key repeated in one object.
struct Duplicate {
    key: String,
    pointer: String,
    first: Range<usize>,
    again: Range<usize>,
}

/// Collects the repeated keys of every object under `node` (at `pointer`).
/// Recursion is bounded: serde_json has already refused nesting deeper than 128.
fn find_duplicates(node: &Ast, pointer: &str, found: &mut Vec<Duplicate>) {
    match node {
        Ast::Object(obj) => {
            let mut seen: HashMap<&str, Range<usize>> = HashMap::new();
            for prop in &obj.properties {
                let name = prop.name.as_str();
                let here = name_range(&prop.name);
                let child = format!("{pointer}/{}", escape_pointer(name));
                if let Some(first) = seen.insert(name, here.clone()) {
                    found.push(Duplicate {
                        key: name.to_owned(),
                        pointer: child.clone(),
                        first,
                        again: here,
                    });
                }
                find_duplicates(&prop.value, &child, found);
            }
        }
        Ast::Array(arr) => {
            for (i, el) in arr.elements.iter().enumerate() {
                find_duplicates(el, &format!("{pointer}/{i}"), found);
            }
        }
        _ => {}
    }
}

fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Reports every schema violation of `value`; true when there were none.
pub fn check_schema(
    file: &SourceFile,
    schema_id: &str,
    value: &Value,
    diags: &mut Diagnostics,
) -> bool {
    let violations = match schema::validate(schema_id, value) {
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
    if violations.is_empty() {
        return true;
    }
    for v in &violations {
        let d = violation_diagnostic(file, schema_id, value, v);
        diags.push(file.point(d, &v.pointer, v.unknown_key.is_some()));
    }
    false
}

fn violation_diagnostic(
    file: &SourceFile,
    schema_id: &str,
    value: &Value,
    v: &schema::Violation,
) -> Diagnostic {
    let d = if let Some(key) = &v.unknown_key {
        Diagnostic::error("config::unknown-key", &file.display, v.message.clone())
            .with_help(unknown_key_help(key, &v.allowed_keys))
    } else {
        let instance = value.pointer(&v.pointer);
        let message = without_quoted_value(&v.message, instance);
        let help = format!(
            "change the value at {} to match schemas/{schema_id}.schema.json",
            if v.pointer.is_empty() {
                "the top level"
            } else {
                &v.pointer
            }
        );
        let help = match instance.and_then(Value::as_str).and_then(lookalike_help) {
            Some(note) => format!("{note} {help}"),
            None => help,
        };
        Diagnostic::error("config::schema", &file.display, message).with_help(help)
    };
    d.with_pointer(v.pointer.clone())
}

fn unknown_key_help(key: &str, allowed: &[String]) -> String {
    let listed = list_names(allowed.iter().map(String::as_str));
    let help = match closest(key, allowed.iter().map(String::as_str)) {
        Some(near) => format!("did you mean `{near}`? (allowed here: {listed})"),
        None if allowed.is_empty() => "remove this key".to_owned(),
        None => format!("remove it; allowed here: {listed}"),
    };
    match non_ascii_note(key) {
        Some(note) => format!("{note}; {help}"),
        None => help,
    }
}

/// For a string with non-ASCII characters (names must be ASCII): which ones,
/// and the ASCII it probably meant.
fn lookalike_help(text: &str) -> Option<String> {
    let note = non_ascii_note(text)?;
    let ascii = fold_lookalikes(text);
    Some(match ascii.is_ascii() {
        true => format!("{note}: write `{}`; otherwise", shown(&ascii)),
        false => format!("{note}; otherwise"),
    })
}

/// Longest value a schema message may quote whole.
const MAX_QUOTED_VALUE: usize = 80;

/// `message` with a quoted object, array or long scalar (jsonschema quotes
/// the whole offending value, which may be most of the file) replaced by a
/// short description: a message shows no more of a config file than the line
/// it points at.
fn without_quoted_value(message: &str, value: Option<&Value>) -> String {
    let Some(value) = value else {
        return message.to_owned();
    };
    let quoted = value.to_string();
    // A scalar sits on one line; an object or array may span many.
    let one_line = match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => quoted.chars().count() <= MAX_QUOTED_VALUE,
    };
    if one_line || !message.contains(&quoted) {
        return shown_text(message);
    }
    let short = match value {
        Value::Object(m) => format!("an object of {} keys", m.len()),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::String(s) => format!("a string of {} characters", s.chars().count()),
        _ => format!("a value of {} characters", quoted.len()),
    };
    message.replacen(&quoted, &short, 1)
}

/// A message cut to a length a person reads.
fn shown_text(message: &str) -> String {
    match message.char_indices().nth(4 * MAX_QUOTED_VALUE) {
        Some((i, _)) => format!("{}…", &message[..i]),
        None => message.to_owned(),
    }
}

/// Byte range of the value (or, with `key`, of the property name) at `pointer`.
/// Parses `text` anew: for many look-ups in one config file use
/// [`SourceFile::locate`], which parses once.
pub fn locate(text: &str, pointer: &str, key: bool) -> Option<Range<usize>> {
    Spans::new(text).find(pointer, key)
}

/// A config file's look-up indexes, built once on its first diagnostic.
struct FileIndex {
    spans: Spans,
    lines: LineMarks,
}

/// Where every value and property name of a JSON text is, owned (the parser's
/// tree borrows the text, and a [`SourceFile`] keeps both): a file with
/// thousands of problems is parsed once, not once per problem.
struct Spans {
    root: Option<SpanNode>,
}

struct SpanNode {
    range: Range<usize>,
    kids: Kids,
}

enum Kids {
    Leaf,
    /// Property name ranges and values, in order, and each name's index
    /// (the last one, as JSON keeps the last).
    Object(Vec<(Range<usize>, SpanNode)>, HashMap<String, usize>),
    Array(Vec<SpanNode>),
}

/// Deeper values are not indexed: the parser's own nesting limit is far
/// above any config file, and the conversion recurses.
const MAX_DEPTH: usize = 512;

impl Spans {
    fn new(text: &str) -> Self {
        let root = parse_to_ast(text, &CollectOptions::default(), &ParseOptions::default())
            .ok()
            .and_then(|p| p.value)
            .map(|ast| SpanNode::of(&ast, 0));
        Spans { root }
    }

    fn find(&self, pointer: &str, key: bool) -> Option<Range<usize>> {
        let mut node = self.root.as_ref()?;
        if pointer.is_empty() {
            return Some(node.range.start..node.range.start + 1);
        }
        let mut key_range = None;
        for raw in pointer.split('/').skip(1) {
            let seg = crate::schema::unescape_pointer(raw);
            node = match &node.kids {
                Kids::Object(props, keys) => {
                    let (name, value) = &props[*keys.get::<str>(seg.as_ref())?];
                    key_range = Some(name.clone());
                    value
                }
                Kids::Array(items) => {
                    key_range = None;
                    items.get(seg.parse::<usize>().ok()?)?
                }
                Kids::Leaf => return None,
            };
        }
        match (key, key_range) {
            (true, Some(r)) => Some(r),
            _ => Some(node.range.clone()),
        }
    }
}

impl SpanNode {
    fn of(ast: &Ast, depth: usize) -> Self {
        let deeper = depth < MAX_DEPTH;
        let kids = match ast {
            Ast::Object(obj) if deeper => {
                let mut keys = HashMap::with_capacity(obj.properties.len());
                let props = obj
                    .properties
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        keys.insert(p.name.as_str().to_owned(), i);
                        (name_range(&p.name), SpanNode::of(&p.value, depth + 1))
                    })
                    .collect();
                Kids::Object(props, keys)
            }
            Ast::Array(arr) if deeper => Kids::Array(
                arr.elements
                    .iter()
                    .map(|v| SpanNode::of(v, depth + 1))
                    .collect(),
            ),
            _ => Kids::Leaf,
        };
        SpanNode {
            range: range_of(ast),
            kids,
        }
    }
}

fn name_range(name: &ObjectPropName) -> Range<usize> {
    match name {
        ObjectPropName::String(s) => s.range.start..s.range.end,
        ObjectPropName::Word(w) => w.range.start..w.range.end,
    }
}

fn range_of(node: &Ast) -> Range<usize> {
    let r = match node {
        Ast::StringLit(v) => v.range,
        Ast::NumberLit(v) => v.range,
        Ast::BooleanLit(v) => v.range,
        Ast::Object(v) => v.range,
        Ast::Array(v) => v.range,
        Ast::NullKeyword(v) => v.range,
    };
    r.start..r.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_values_and_keys() {
        let text = "{\n  \"a\": {\n    \"b\": [1, 22]\n  }\n}";
        let r = locate(text, "/a/b/1", false).unwrap();
        assert_eq!(&text[r], "22");
        let r = locate(text, "/a/b", true).unwrap();
        assert_eq!(&text[r], "\"b\"");
        assert!(locate(text, "/zz", false).is_none());
    }

    fn file(text: &str) -> SourceFile {
        SourceFile::new("f.json", text)
    }

    #[test]
    fn duplicate_keys_are_errors_naming_both_places() {
        let mut diags = Diagnostics::new();
        let f = file("{\n  \"a\": {\"x\": 1, \"y\": 2,\n        \"x\": 3},\n  \"a\": 4\n}");
        assert!(parse_json(&f, &mut diags).is_none());
        let found: Vec<_> = diags
            .items()
            .iter()
            .map(|d| (d.pointer.clone().unwrap(), d.line, d.message.clone()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "/a/x".to_owned(),
                    Some(3),
                    "key `x` is defined twice in this object: at 2:9 and again at 3:9".to_owned()
                ),
                (
                    "/a".to_owned(),
                    Some(4),
                    "key `a` is defined twice in this object: at 2:3 and again at 4:3".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn big_values_are_not_quoted_in_messages() {
        let value: Value = serde_json::from_str(&format!("[\"{}\", 2]", "s".repeat(200))).unwrap();
        let message = format!("{value} is not of type \"object\"");
        assert_eq!(
            without_quoted_value(&message, Some(&value)),
            "an array of 2 items is not of type \"object\""
        );
        let small = Value::from("ten");
        let message = "\"ten\" is not of type \"integer\"";
        assert_eq!(without_quoted_value(message, Some(&small)), message);
    }

    #[test]
    fn reads_at_most_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        assert!(
            matches!(read_text(&big), Err(ReadError::TooLarge { size, exact: true }) if size == MAX_FILE_BYTES + 1)
        );
        let latin1 = dir.path().join("l.json");
        std::fs::write(&latin1, b"{\n \"caf\xe9\": 1}").unwrap();
        assert!(matches!(
            read_text(&latin1),
            Err(ReadError::NotUtf8 {
                offset: 7,
                line: 2,
                column: 6,
                byte: 0xE9,
                utf16: false
            })
        ));
        assert!(
            matches!(read_text(dir.path()), Err(ReadError::NotAFile(w)) if w == "is a directory")
        );
        assert!(matches!(
            read_text(&dir.path().join("none")),
            Err(ReadError::Missing)
        ));
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::config::types::{AgentsFile, Runtimes, ShellsFile};

    fn check_all(text: String) {
        let file = SourceFile::new("f.json", text);
        let mut diags = Diagnostics::new();
        let _ = parse::<ShellsFile>(&file, "shells", &mut diags);
        let _ = parse::<AgentsFile>(&file, "agents", &mut diags);
        let _ = parse::<Runtimes>(&file, "runtimes", &mut diags);
        let _ = diags.render_human(false);
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            check_all(text);
        }

        #[test]
        fn json_shaped_input_never_panics(
            key in "[a-z_$]{0,8}",
            value in prop_oneof![Just("1".to_owned()), Just("\"x\"".to_owned()), Just("[]".to_owned()), Just("{}".to_owned()), Just("null".to_owned()), "-?[0-9]{1,30}"],
        ) {
            check_all(format!("{{\"shells\": {{\"a\": {{\"{key}\": {value}}}}}, \"agents\": {{\"{key}\": {value}}}}}"));
        }
    }
}
