//! Removing secrets from anything modix shows or stores.
//!
//! Agent processes get API keys in their environment and sometimes echo them
//! (debug logs, error messages, `env` dumps). Everything that leaves a run —
//! captured output, logged argv, JSON results — goes through a [`Redactor`]
//! first. It replaces configured secret values with `[REDACTED:NAME]` and,
//! as a safety net, well-known key shapes even when nobody configured them.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};
use regex::{Captures, Regex};
use serde_json::Value;

/// Values shorter than this are not redacted: they would match ordinary text
/// ("true", "1234") and mangle output while protecting nothing.
pub const MIN_SECRET_LEN: usize = 8;

/// Well-known key shapes, one named group each. Order matters: the regex
/// prefers the earliest alternative, so `sk-ant-` comes before plain `sk-`.
static SHAPES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?-u:\b)(?:",
        r"(?P<anthropic>sk-ant-[A-Za-z0-9_\-]{20,})",
        r"|(?P<openai>sk-[A-Za-z0-9_\-]{20,})",
        r"|(?P<google>AIza[0-9A-Za-z_\-]{35})",
        r"|(?P<github>(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}))",
        r"|(?P<bearer>(?i:bearer)\s+)[A-Za-z0-9._~+/\-]{8,}=*",
        r")"
    ))
    .expect("static secret-shape regex is valid")
});

/// Replaces secrets in text, argv and JSON. Cheap to call when there is
/// nothing to redact: no allocation, one scan for all configured values and
/// one for the known shapes.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    configured: Option<Configured>,
}

/// The configured values in one automaton, leftmost-longest so a secret
/// that contains another is replaced whole; `names[i]` names pattern `i`.
#[derive(Debug, Clone)]
struct Configured {
    values: AhoCorasick,
    names: Vec<String>,
}

impl Redactor {
    /// A redactor for these `(name, value)` secrets plus the built-in key
    /// shapes. Values shorter than [`MIN_SECRET_LEN`] are ignored.
    pub fn new<N, V>(secrets: impl IntoIterator<Item = (N, V)>) -> Self
    where
        N: Into<String>,
        V: Into<String>,
    {
        let mut pairs: Vec<(String, String)> = secrets
            .into_iter()
            .map(|(n, v)| (n.into(), v.into()))
            .filter(|(_, v)| v.chars().count() >= MIN_SECRET_LEN)
            .collect();
        // A value with a quote, a backslash or a control character reaches
        // a record escaped when an agent prints it inside JSON (as every
        // agent CLI's stream does): that form is the same secret.
        let escaped: Vec<(String, String)> = pairs
            .iter()
            .filter_map(|(n, v)| {
                let quoted = serde_json::to_string(v).ok()?;
                let inner = &quoted[1..quoted.len() - 1];
                (inner != v).then(|| (n.clone(), inner.to_owned()))
            })
            .collect();
        pairs.extend(escaped);
        // A value base64-encoded (an `Authorization: Basic` header, an
        // environment dumped through `base64`) is the same secret too.
        let encoded: Vec<(String, String)> = pairs
            .iter()
            .flat_map(|(n, v)| base64_forms(v).into_iter().map(move |f| (n.clone(), f)))
            .collect();
        pairs.extend(encoded);
        pairs.sort_by(|a, b| a.1.cmp(&b.1));
        pairs.dedup_by(|a, b| a.1 == b.1);
        let values = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(_, v)| v));
        let configured = match values {
            Ok(values) if !pairs.is_empty() => Some(Configured {
                values,
                names: pairs.into_iter().map(|(n, _)| n).collect(),
            }),
            Ok(_) => None,
            // Only a pathological set of patterns fails to build; then the
            // shapes are all that protect, and the log says so.
            Err(e) => {
                tracing::warn!("cannot build the secret matcher: {e}");
                None
            }
        };
        Self { configured }
    }

    /// The names of the configured secrets whose values occur in `bytes`,
    /// each once. Key shapes are not looked for: a test fixture may look
    /// like a key; a configured value is the real one.
    pub fn configured_in(&self, bytes: &[u8]) -> Vec<&str> {
        let Some(c) = &self.configured else {
            return Vec::new();
        };
        let mut ids: Vec<usize> = c
            .values
            .find_iter(bytes)
            .map(|m| m.pattern().as_usize())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        // A value and its escaped form share a name.
        let mut names: Vec<&str> = ids.into_iter().map(|i| c.names[i].as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The longest configured value, in bytes (0: none): how much of a
    /// stream [`configured_in`](Self::configured_in) must see again across
    /// a cut.
    pub fn longest_configured(&self) -> usize {
        self.configured
            .as_ref()
            .map_or(0, |c| c.values.max_pattern_len())
    }

    /// `s` with secrets replaced; borrowed when nothing matched.
    pub fn redact<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let first = match &self.configured {
            Some(c) if c.values.is_match(s) => {
                let mut out = String::with_capacity(s.len());
                c.values.replace_all_with(s, &mut out, |m, _, dst| {
                    dst.push_str(&format!("[REDACTED:{}]", c.names[m.pattern().as_usize()]));
                    true
                });
                Cow::Owned(out)
            }
            _ => Cow::Borrowed(s),
        };
        match first {
            Cow::Borrowed(b) => redact_shapes(b),
            Cow::Owned(o) => match redact_shapes(&o) {
                Cow::Borrowed(_) => Cow::Owned(o),
                Cow::Owned(again) => Cow::Owned(again),
            },
        }
    }

    /// `bytes` with secrets replaced in every stretch that is valid UTF-8
    /// (a key is text, so it lies inside one); other bytes are kept as they
    /// are. Borrowed when nothing matched.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return match self.redact(text) {
                Cow::Borrowed(_) => Cow::Borrowed(bytes),
                Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            };
        }
        let mut out = Vec::with_capacity(bytes.len());
        for chunk in bytes.utf8_chunks() {
            out.extend_from_slice(self.redact(chunk.valid()).as_bytes());
            out.extend_from_slice(chunk.invalid());
        }
        Cow::Owned(out)
    }

    pub fn redact_args(&self, args: &[String]) -> Vec<String> {
        args.iter().map(|a| self.redact(a).into_owned()).collect()
    }

    /// `v` with every string (keys too) redacted: borrowed when nothing in
    /// it matches (the common case, found by one scan of its strings, with
    /// no copy of the document), else a redacted copy.
    pub fn redact_json<'a>(&self, v: &'a Value) -> Cow<'a, Value> {
        if self.is_clean_json(v) {
            Cow::Borrowed(v)
        } else {
            Cow::Owned(self.redacted_copy(v))
        }
    }

    /// Whether [`Redactor::redact`] would leave every string of `v` (keys
    /// too) as it is.
    fn is_clean_json(&self, v: &Value) -> bool {
        match v {
            Value::String(s) => self.is_clean(s),
            Value::Array(items) => items.iter().all(|i| self.is_clean_json(i)),
            Value::Object(map) => map
                .iter()
                .all(|(k, v)| self.is_clean(k) && self.is_clean_json(v)),
            _ => true,
        }
    }

    /// `value` as pretty JSON text, when [`Redactor::redact_json`] would
    /// leave it as it is: every string written (keys too) checked as its
    /// value, escapes undone — which a scan of the text itself would not do
    /// (`"\\nsk-…"` has no word boundary before the key in the text). The
    /// strings are gathered as the serializer writes them, so the check
    /// costs no second pass over the text. `None`: something to redact, or
    /// the value does not serialize.
    ///
    /// The text starts in a buffer of `capacity` bytes: a caller that knows
    /// about how long it will be (the last one like it) spares its growth,
    /// each a copy of all written so far.
    pub fn clean_pretty_json<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
        capacity: usize,
    ) -> Option<String> {
        let mut text = Vec::with_capacity(capacity);
        let mut gather = Gather {
            pretty: serde_json::ser::PrettyFormatter::with_indent(INDENT),
            // The strings are most of a package's text.
            strings: String::with_capacity(capacity),
            in_string: false,
            unsure: false,
            depth: 0,
        };
        let mut ser = serde_json::Serializer::with_formatter(&mut text, &mut gather);
        value.serialize(&mut ser).ok()?;
        if gather.unsure || !self.is_clean(&gather.strings) {
            return None;
        }
        // serde_json writes only UTF-8.
        String::from_utf8(text).ok()
    }

    /// `value`'s pretty JSON text checked as [`Redactor::clean_pretty_json`]
    /// checks it, kept to be written into other documents this redactor
    /// makes without being walked and checked again; `None` when there is
    /// something to redact in it.
    pub fn clean_text(&self, value: &Value) -> Option<CleanText> {
        let text = self.clean_pretty_json(value, 0)?;
        serde_json::value::RawValue::from_string(text)
            .ok()
            .map(CleanText)
    }

    /// Whether [`Redactor::redact`] would leave `s` as it is: neither a
    /// configured value nor a key shape is in it.
    fn is_clean(&self, s: &str) -> bool {
        !self
            .configured
            .as_ref()
            .is_some_and(|c| c.values.is_match(s))
            && !SHAPES.is_match(s)
    }

    fn redacted_copy(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.redact(s).into_owned()),
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.redacted_copy(i)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.redact(k).into_owned(), self.redacted_copy(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

thread_local! {
    /// The address of the [`CleanText`] being serialized, if any: how a
    /// document [`Redactor::clean_pretty_json`] writes tells it from any
    /// other raw text, which it cannot vouch for.
    static CLEAN_TEXT: Cell<usize> = const { Cell::new(0) };
}

/// Pretty JSON text that a [`Redactor`] found nothing to redact in
/// ([`Redactor::clean_text`]). Written into a document that same redactor
/// makes with [`Redactor::clean_pretty_json`], it goes in as it is,
/// indented to where it stands, and its strings are not checked again;
/// any other serializer gets it as raw JSON. Only as clean as its
/// redactor knows: keep it with the redactor that made it.
#[derive(Debug)]
pub struct CleanText(Box<serde_json::value::RawValue>);

impl CleanText {
    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl serde::Serialize for CleanText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = self.0.get();
        let before = CLEAN_TEXT.replace(text.as_ptr() as usize);
        let written = self.0.serialize(s);
        CLEAN_TEXT.set(before);
        written
    }
}

/// What serde_json's pretty formatter indents each level with.
const INDENT: &[u8] = b"  ";

/// serde_json's pretty formatter, gathering every string it writes (keys
/// too) with its escapes undone, each ended by a NUL
/// ([`Redactor::clean_pretty_json`]): no secret (an environment value) and
/// no key shape holds a NUL, so a match never spans two strings, and one
/// scan of them all finds what a scan of each would.
struct Gather {
    pretty: serde_json::ser::PrettyFormatter<'static>,
    strings: String,
    in_string: bool,
    /// Something was written that this does not read (a raw fragment).
    unsure: bool,
    /// How many arrays and objects the writer is inside.
    depth: usize,
}

impl Gather {
    /// A number or boolean written as a map key (inside quotes): kept as
    /// the text a reader would get for that key.
    fn key_text(&mut self, write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        if self.in_string {
            let mut text = Vec::new();
            match write(&mut text).map(|()| String::from_utf8(text)) {
                Ok(Ok(t)) => self.strings.push_str(&t),
                _ => self.unsure = true,
            }
        }
    }
}

/// Forwards a scalar's write to the pretty formatter, keeping its text when
/// it is a map key.
macro_rules! gather_scalars {
    ($($method:ident: $ty:ty),* $(,)?) => {$(
        fn $method<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: $ty) -> std::io::Result<()> {
            self.key_text(|t| serde_json::ser::CompactFormatter.$method(t, v));
            self.pretty.$method(w, v)
        }
    )*};
}

/// Forwards the writes of the document's structure (brackets, commas,
/// indentation) to the pretty formatter: they hold no string. The second
/// list takes whether it is the first value or key.
macro_rules! gather_structure {
    ($($plain:ident),*; $($with_first:ident),* $(,)?) => {
        $(fn $plain<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
            self.pretty.$plain(w)
        })*
        $(fn $with_first<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            self.pretty.$with_first(w, first)
        })*
    };
}

impl serde_json::ser::Formatter for &mut Gather {
    gather_scalars!(
        write_bool: bool, write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
        write_i128: i128, write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64,
        write_u128: u128, write_f32: f32, write_f64: f64, write_number_str: &str,
    );

    fn begin_string<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.in_string = true;
        self.pretty.begin_string(w)
    }

    fn end_string<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.in_string = false;
        self.strings.push('\0');
        self.pretty.end_string(w)
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        self.strings.push_str(fragment);
        self.pretty.write_string_fragment(w, fragment)
    }

    fn write_char_escape<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> std::io::Result<()> {
        use serde_json::ser::CharEscape as E;
        self.strings.push(match escape {
            E::Quote => '"',
            E::ReverseSolidus => '\\',
            E::Solidus => '/',
            E::Backspace => '\u{8}',
            E::FormFeed => '\u{c}',
            E::LineFeed => '\n',
            E::CarriageReturn => '\r',
            E::Tab => '\t',
            E::AsciiControl(b) => char::from(b),
        });
        self.pretty.write_char_escape(w, escape)
    }

    /// A [`CleanText`] goes in as it is, each of its lines indented to
    /// where it stands (pretty JSON has no line break inside a string);
    /// any other raw text makes the document one this cannot vouch for.
    fn write_raw_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if fragment.as_ptr() as usize != CLEAN_TEXT.get() {
            self.unsure = true;
            return self.pretty.write_raw_fragment(w, fragment);
        }
        let mut lines = fragment.split('\n');
        w.write_all(lines.next().unwrap_or_default().as_bytes())?;
        for line in lines {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(INDENT)?;
            }
            w.write_all(line.as_bytes())?;
        }
        Ok(())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        self.pretty.begin_array(w)
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        self.pretty.end_array(w)
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        self.pretty.begin_object(w)
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        self.pretty.end_object(w)
    }

    gather_structure!(
        end_array_value, end_object_key, begin_object_value, end_object_value;
        begin_array_value, begin_object_key,
    );
}

/// The shortest base64 stretch looked for: shorter ones would match
/// ordinary words and encoded data by chance.
const MIN_BASE64_LEN: usize = 12;

/// What `value` looks like inside base64 text, standard and URL-safe
/// alphabets: the characters that encode its bytes alone, for each of the
/// three places it can start within a 3-byte group (the characters at
/// either end also hold bits of its neighbours, whatever they are).
fn base64_forms(value: &str) -> Vec<String> {
    let mut forms = Vec::new();
    for offset in 0..3 {
        let mut data = vec![0u8; offset];
        data.extend_from_slice(value.as_bytes());
        let text = base64(&data);
        // Character `c` holds bits 6c..6c+6: whole inside the value when
        // its first bit is at or after the value's start and its last
        // before the value's end.
        let first = (offset * 8).div_ceil(6);
        let end = (data.len() * 8) / 6;
        let Some(stable) = text.get(first..end).filter(|s| s.len() >= MIN_BASE64_LEN) else {
            continue;
        };
        let url_safe = stable.replace('+', "-").replace('/', "_");
        if url_safe != stable {
            forms.push(url_safe);
        }
        forms.push(stable.to_owned());
    }
    forms
}

/// Standard base64 of `data`, without padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let bits = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
        for i in 0..=group.len() {
            out.push(char::from(ALPHABET[(bits >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

fn redact_shapes(s: &str) -> Cow<'_, str> {
    SHAPES.replace_all(s, |c: &Captures| {
        if let Some(prefix) = c.name("bearer") {
            // Keep the word so the reader still sees what kind of header it was.
            return format!("{}[REDACTED:bearer-token]", prefix.as_str());
        }
        let kind = ["anthropic", "openai", "google", "github"]
            .into_iter()
            .find(|k| c.name(k).is_some())
            .unwrap_or("secret");
        format!("[REDACTED:{kind}-key]")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configured_values_are_replaced_everywhere() {
        let r = Redactor::new([("MY_KEY", "hunter2-secret-value")]);
        let out = r.redact("a=hunter2-secret-value b=hunter2-secret-value");
        assert_eq!(out, "a=[REDACTED:MY_KEY] b=[REDACTED:MY_KEY]");
    }

    #[test]
    fn a_value_escaped_inside_json_is_the_same_secret() {
        let r = Redactor::new([("PASSWORD", "s3cr3t\"pa\\ss-0123456789")]);
        let line = serde_json::to_string(&json!({"result": "bad key: s3cr3t\"pa\\ss-0123456789"}))
            .unwrap();
        assert!(line.contains(r#"s3cr3t\"pa\\ss"#), "{line}");
        assert_eq!(
            r.redact(&line),
            r#"{"result":"bad key: [REDACTED:PASSWORD]"}"#
        );
        assert_eq!(r.configured_in(line.as_bytes()), ["PASSWORD"]);
        assert_eq!(
            r.redact("raw s3cr3t\"pa\\ss-0123456789"),
            "raw [REDACTED:PASSWORD]"
        );
        let both = format!("{line} raw s3cr3t\"pa\\ss-0123456789");
        assert_eq!(r.configured_in(both.as_bytes()), ["PASSWORD"]);
    }

    #[test]
    fn a_value_base64_encoded_is_the_same_secret() {
        let key = "sk-ant-api03-SECRETKEYVALUE1234567890abcdefXYZ";
        let r = Redactor::new([("ANTHROPIC_API_KEY", key)]);
        // Alone, after a prefix at each place in a 3-byte group, with a
        // newline after it, and in the URL-safe alphabet.
        for prefix in ["", "u", "us", "user:", "ANTHROPIC_API_KEY="] {
            for suffix in ["", "\n"] {
                let encoded = base64(format!("{prefix}{key}{suffix}").as_bytes());
                for text in [encoded.clone(), encoded.replace('+', "-").replace('/', "_")] {
                    let out = r.redact(&text);
                    assert!(
                        out.contains("[REDACTED:ANTHROPIC_API_KEY]"),
                        "{text} -> {out}"
                    );
                }
            }
        }
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE");
        // A short value's base64 is too short to look for.
        assert!(
            base64_forms("12345678")
                .iter()
                .all(|f| f.len() >= MIN_BASE64_LEN)
        );
    }

    #[test]
    fn short_values_are_ignored() {
        let r = Redactor::new([("PIN", "1234")]);
        assert_eq!(r.redact("pin 1234"), "pin 1234");
    }

    #[test]
    fn longest_value_wins_when_one_contains_another() {
        let r = Redactor::new([("SHORT", "abcdefgh"), ("LONG", "abcdefgh-and-more")]);
        assert_eq!(
            r.redact("x abcdefgh-and-more y abcdefgh"),
            "x [REDACTED:LONG] y [REDACTED:SHORT]"
        );
    }

    #[test]
    fn regex_metacharacters_in_values_are_literal() {
        let r = Redactor::new([("WEIRD", "a.b*c+d?(e)[f]")]);
        assert_eq!(r.redact("<a.b*c+d?(e)[f]>"), "<[REDACTED:WEIRD]>");
        assert_eq!(r.redact("aXbbbcdde"), "aXbbbcdde");
    }

    #[test]
    fn nothing_to_redact_borrows() {
        let r = Redactor::new([("K", "0123456789abcdef")]);
        assert!(matches!(
            r.redact("plain text, nothing here"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            Redactor::default().redact("task-aaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn known_shapes_are_redacted_without_configuration() {
        let r = Redactor::default();
        let cases = [
            (
                "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx done",
                "key [REDACTED:anthropic-key] done",
            ),
            (
                "OPENAI=sk-proj-abcdefghijklmnopqrstuvwx",
                "OPENAI=[REDACTED:openai-key]",
            ),
            (
                "g AIzaSyA1234567890abcdefghijklmnopqrstuv",
                "g [REDACTED:google-key]",
            ),
            (
                "t ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "t [REDACTED:github-key]",
            ),
            (
                "t github_pat_11ABCDEFG0123456789_abcdefghij",
                "t [REDACTED:github-key]",
            ),
            (
                "Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.abc",
                "Authorization: Bearer [REDACTED:bearer-token]",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(r.redact(input), want, "input: {input}");
        }
    }

    #[test]
    fn configured_and_shapes_combine() {
        let r = Redactor::new([("MINE", "my-own-secret-1")]);
        assert_eq!(
            r.redact("my-own-secret-1 sk-abcdefghijklmnopqrstuvwxyz"),
            "[REDACTED:MINE] [REDACTED:openai-key]"
        );
    }

    #[test]
    fn bytes_are_redacted_around_invalid_utf8() {
        let r = Redactor::new([("K", "secret-value-1")]);
        let out = r.redact_bytes(b"\xff secret-value-1 \x00\xfe");
        assert_eq!(&*out, b"\xff [REDACTED:K] \x00\xfe");
    }

    #[test]
    fn args_and_json_are_redacted() {
        let r = Redactor::new([("TOKEN", "tok-12345678")]);
        assert_eq!(
            r.redact_args(&["--key".into(), "tok-12345678".into()]),
            vec!["--key".to_string(), "[REDACTED:TOKEN]".into()]
        );
        let v = json!({"a": ["x tok-12345678", 1, null], "tok-12345678": {"b": true}});
        assert_eq!(
            *r.redact_json(&v),
            json!({"a": ["x [REDACTED:TOKEN]", 1, null], "[REDACTED:TOKEN]": {"b": true}})
        );
        // A key shape deep in an array, found by the scan too.
        let shaped = json!({"a": [{"b": ["ok", "Bearer abcdefgh12345678"]}]});
        assert_eq!(
            *r.redact_json(&shaped),
            json!({"a": [{"b": ["ok", "Bearer [REDACTED:bearer-token]"]}]})
        );
        // Nothing to redact: the document itself, not a copy.
        let clean = json!({"a": ["x", 1, null], "b": {"c": "tok-1234567"}});
        assert!(matches!(r.redact_json(&clean), Cow::Borrowed(_)));
    }

    /// The check made while writing agrees with the check of the document,
    /// also where the text alone would mislead: a key shape after an escape
    /// (`\n`: no word boundary in the text), whitespace escaped inside a
    /// bearer header, a configured value with a quote in it; and the text
    /// is serde_json's pretty text.
    #[test]
    fn a_value_is_written_clean_exactly_when_its_document_is() {
        let r = Redactor::new([("QUOTED", "ab\"cd-secret"), ("PLAIN", "tok-12345678")]);
        let key = "sk-ant-abcdefghijklmnopqrstuvwx";
        let docs = [
            json!({"a": ["x", 1, null, 2.5, true], "b": {"c": "tok-1234567"}}),
            json!({"a": format!("\n{key}")}),
            json!({"a": "Bearer\tabcdefgh12345678"}),
            json!({"a": "say ab\"cd-secret now"}),
            json!({"tok-12345678": 1}),
            json!({"a\u{1}b": "\u{7f}\\/\u{8}\u{c}\r"}),
            json!([[[{"deep": format!("x {key}")}]]]),
            json!("tok-12345678"),
        ];
        for doc in docs {
            let clean = matches!(r.redact_json(&doc), Cow::Borrowed(_));
            let written = r.clean_pretty_json(&doc, 0);
            assert_eq!(written.is_some(), clean, "{doc}");
            if let Some(text) = written {
                assert_eq!(text, serde_json::to_string_pretty(&doc).unwrap());
            }
        }
    }

    /// A map key written from a number is a string to a reader: a secret
    /// made of digits in one is found.
    #[test]
    fn a_numeric_map_key_is_checked_as_the_string_it_becomes() {
        let r = Redactor::new([("PIN", "12345678")]);
        let keyed = std::collections::BTreeMap::from([(12_345_678_u64, 1), (7, 2)]);
        assert_eq!(r.clean_pretty_json(&keyed, 0), None);
        let other = std::collections::BTreeMap::from([(1_234_567_u64, 1)]);
        assert_eq!(
            r.clean_pretty_json(&other, 0).as_deref(),
            Some("{\n  \"1234567\": 1\n}")
        );
        let flags = std::collections::BTreeMap::from([(true, "12345678")]);
        assert_eq!(r.clean_pretty_json(&flags, 0), None);
    }

    proptest::proptest! {
        #[test]
        fn the_written_check_matches_the_document_check(
            strings in proptest::collection::vec("(sk-ant-[a-z]{20}|Bearer[ \t\n]x{8}|tok-12345678|[a-z\\n\"\t\u{1} ]{0,6})", 1..6),
        ) {
            let r = Redactor::new([("PLAIN", "tok-12345678")]);
            let joined: Vec<String> = strings.windows(2).map(|w| w.concat()).collect();
            let doc = json!({"list": strings, "joined": joined, strings[0].clone(): 1});
            let clean = matches!(r.redact_json(&doc), Cow::Borrowed(_));
            proptest::prop_assert_eq!(r.clean_pretty_json(&doc, 0).is_some(), clean);
        }
    }

    /// A text a redactor found clean goes into a document it writes as it
    /// is, indented to where it stands; raw JSON it did not make leaves the
    /// document unvouched for (`None`), however it reads.
    #[test]
    fn clean_texts_go_in_as_they_are_and_other_raw_json_does_not() {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            k: &'a CleanText,
            top: [&'a CleanText; 1],
        }
        let r = Redactor::new([("TOKEN", "tok-12345678")]);
        let inner = json!({"a": [1, {"b": "x\ny"}], "e": {}, "f": []});
        let clean = r.clean_text(&inner).expect("clean");
        let made = r.clean_pretty_json(
            &Doc {
                k: &clean,
                top: [&clean],
            },
            0,
        );
        let doc = json!({"k": inner.clone(), "top": [inner]});
        assert_eq!(made, serde_json::to_string_pretty(&doc).ok());
        let raw = serde_json::value::RawValue::from_string(clean.as_str().to_owned()).unwrap();
        assert_eq!(r.clean_pretty_json(&raw, 0), None);
        assert!(r.clean_text(&json!({"k": "tok-12345678"})).is_none());
    }
}
