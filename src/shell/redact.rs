//! Removing secrets from anything modix shows or stores.
//!
//! Agent processes get API keys in their environment and sometimes echo them
//! (debug logs, error messages, `env` dumps). Everything that leaves a run —
//! captured output, logged argv, JSON results — goes through a [`Redactor`]
//! first. It replaces configured secret values with `[REDACTED:NAME]` and,
//! as a safety net, well-known key shapes even when nobody configured them.

use std::borrow::Cow;
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

    /// Whether [`Redactor::redact_json`] would leave the JSON document
    /// `text` as it is: every string in it (keys too) checked as its
    /// value, escapes undone — which a scan of the text itself would not
    /// do (`"\\nsk-…"` has no word boundary before the key in the text).
    /// Not JSON, or nested past serde_json's limit: `false`.
    pub fn is_clean_json_text(&self, text: &str) -> bool {
        // Its strings, each ended by a NUL: no secret (an environment
        // value) and no key shape holds one, so a match never spans two
        // strings, and one scan of them all finds what a scan of each would.
        let mut strings = String::with_capacity(text.len());
        let mut de = serde_json::Deserializer::from_str(text);
        serde::de::DeserializeSeed::deserialize(Strings(&mut strings), &mut de).is_ok()
            && de.end().is_ok()
            && self.is_clean(&strings)
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

/// Walks a JSON document without building it, gathering its strings (keys
/// too), each ended by a NUL ([`Redactor::is_clean_json_text`]).
struct Strings<'s>(&'s mut String);

impl<'de> serde::de::DeserializeSeed<'de> for Strings<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.0.push_str(s);
        self.0.push('\0');
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strings(self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Strings(self.0))?.is_some() {
            map.next_value_seed(Strings(self.0))?;
        }
        Ok(())
    }
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

    /// The text check agrees with the check of the parsed document, also
    /// where the text alone would mislead: a key shape after an escape
    /// (`\n`: no word boundary in the text), whitespace escaped inside a
    /// bearer header, a configured value with a quote in it.
    #[test]
    fn a_json_text_is_clean_exactly_when_its_document_is() {
        let r = Redactor::new([("QUOTED", "ab\"cd-secret"), ("PLAIN", "tok-12345678")]);
        let key = "sk-ant-abcdefghijklmnopqrstuvwx";
        let docs = [
            json!({"a": ["x", 1, null, 2.5, true], "b": {"c": "tok-1234567"}}),
            json!({"a": format!("\n{key}")}),
            json!({"a": "Bearer\tabcdefgh12345678"}),
            json!({"a": "say ab\"cd-secret now"}),
            json!({"tok-12345678": 1}),
            json!([[[{"deep": format!("x {key}")}]]]),
            json!("tok-12345678"),
        ];
        for doc in docs {
            let expected = matches!(r.redact_json(&doc), Cow::Borrowed(_));
            for text in [doc.to_string(), serde_json::to_string_pretty(&doc).unwrap()] {
                assert_eq!(r.is_clean_json_text(&text), expected, "{text}");
            }
        }
        assert!(!r.is_clean_json_text("{\"a\": "), "not JSON");
        assert!(!r.is_clean_json_text("{} {}"), "more than one document");
        assert!(!r.is_clean_json_text(&("[".repeat(200) + &"]".repeat(200))));
    }

    proptest::proptest! {
        #[test]
        fn the_text_check_matches_the_document_check(
            strings in proptest::collection::vec("(sk-ant-[a-z]{20}|Bearer[ \t\n]x{8}|tok-12345678|[a-z\\n\"\t ]{0,6})", 1..6),
        ) {
            let r = Redactor::new([("PLAIN", "tok-12345678")]);
            let joined: Vec<String> = strings.windows(2).map(|w| w.concat()).collect();
            let doc = json!({"list": strings, "joined": joined, strings[0].clone(): 1});
            let expected = matches!(r.redact_json(&doc), Cow::Borrowed(_));
            proptest::prop_assert_eq!(r.is_clean_json_text(&doc.to_string()), expected);
        }
    }
}
