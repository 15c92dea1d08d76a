//! Secrets where a variable NAME belongs. `api_key_env`, a shell's `env` and
//! `endpoint_env`, and `runtimes.json`'s `env.allow` name environment
//! variables; a value there that looks like a key (`sk-ant-…`, `AKIA…`) is
//! the key itself, pasted by mistake. It is reported without being echoed:
//! the message names only the place, the file text kept for snippets has
//! the value masked, and the value is replaced before the schema check
//! (whose messages quote values) sees it.

use serde_json::Value;

use super::source::SourceFile;
use crate::diagnostics::{Diagnostic, Diagnostics};

/// Where each config schema expects variable names (`*`: any key or index).
/// A unit test keeps this in step with the schemas' `env_name` fields.
pub const ENV_NAME_PLACES: &[(&str, &str)] = &[
    ("brains", "/brains/*/api_key_env"),
    ("shells", "/shells/*/endpoint_env"),
    ("shells", "/shells/*/env/*"),
    ("shells", "/shells/*/key_env"),
    ("runtimes", "/env/allow/*"),
];

/// What replaces a masked value: a valid name, so the schema says no more.
const PLACEHOLDER: &str = "MASKED_SECRET";

/// Reports and masks every key-like value at a variable-name place of `value`.
pub fn screen(file: &SourceFile, schema: &str, value: &mut Value, diags: &mut Diagnostics) {
    let mut found = Vec::new();
    for (_, pattern) in ENV_NAME_PLACES.iter().filter(|(s, _)| *s == schema) {
        let parts: Vec<&str> = pattern.split('/').skip(1).collect();
        collect(value, &parts, String::new(), &mut found);
    }
    if found.is_empty() {
        return;
    }
    let mut masked = file.text.clone();
    for pointer in &found {
        let span = file.locate(pointer, false);
        let mut d = Diagnostic::error(
            "config::secret-value",
            &file.display,
            "this looks like a secret key, not the name of an environment variable (its value is not shown)",
        )
        .with_pointer(pointer.clone())
        .with_help("write the NAME of the variable that holds the key (e.g. \"ANTHROPIC_API_KEY\") and set that variable in your environment; remove the key from this file, and rotate it if the file was shared");
        if let Some(span) = span {
            let (line, column) = file.line_column(span.start);
            d = d.with_line_column(line, column);
            // Same length, so every other diagnostic's span still fits.
            masked.replace_range(span.clone(), &"*".repeat(span.len()));
        }
        diags.push(d);
        if let Some(v) = value.pointer_mut(pointer) {
            *v = Value::String(PLACEHOLDER.into());
        }
    }
    diags.add_source(file.display.clone(), masked);
}

/// Pointers of the key-like strings at `parts` (with `*` wildcards).
fn collect(value: &Value, parts: &[&str], at: String, out: &mut Vec<String>) {
    let Some((first, rest)) = parts.split_first() else {
        if value.as_str().is_some_and(looks_like_secret) {
            out.push(at);
        }
        return;
    };
    let children: Vec<(String, &Value)> = match (value, *first) {
        (Value::Object(m), "*") => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        (Value::Array(a), "*") => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        (Value::Object(m), key) => m
            .get(key)
            .map(|v| (key.to_owned(), v))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    for (key, child) in children {
        let next = format!("{at}/{}", crate::schema::escape_pointer(&key));
        collect(child, rest, next, out);
    }
}

/// Known key prefixes, or a long mix of lower case, upper case and digits
/// (variable names are conventionally UPPER_SNAKE_CASE).
pub fn looks_like_secret(s: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sk-",
        "sk_live_",
        "sk_test_",
        "rk_live_",
        "AIza",
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "ghr_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xoxa-",
        "hf_",
        "npm_",
        "pypi-",
    ];
    let s = s.trim();
    let aws = (s.starts_with("AKIA") || s.starts_with("ASIA"))
        && s.len() == 20
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let mixed = s.len() >= 24
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().any(|c| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_digit());
    aws || mixed
        || PREFIXES
            .iter()
            .any(|p| s.starts_with(p) && s.len() > p.len() + 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_look_like_keys_and_names_do_not() {
        for key in [
            "sk-ant-api03-abcdefghijklmnop",
            "AKIAIOSFODNN7EXAMPLE",
            "AIzaSyA1234567890abcdefgh",
            "ghp_0123456789abcdefABCDEF",
            "q8Xz3LmN0pQrStUvWxYz12345",
        ] {
            assert!(looks_like_secret(key), "{key}");
        }
        for name in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "MY_AGENT_TOKEN_FOR_PRODUCTION_2",
            "PATH",
            "sk",
            "AKIA",
        ] {
            assert!(!looks_like_secret(name), "{name}");
        }
    }

    /// Every place a schema uses `env_name` is screened, and no other.
    #[test]
    fn places_match_the_schemas() {
        fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
            let Some(m) = v.as_object() else { return };
            if m.get("$ref")
                .and_then(Value::as_str)
                .is_some_and(|r| r.ends_with("#/$defs/env_name"))
            {
                out.push(at.to_owned());
            }
            for (k, child) in m {
                let seg = match k.as_str() {
                    "properties" => {
                        for (name, s) in child.as_object().into_iter().flatten() {
                            walk(s, &format!("{at}/{name}"), out);
                        }
                        continue;
                    }
                    "additionalProperties" | "items" => "/*",
                    _ => continue,
                };
                walk(child, &format!("{at}{seg}"), out);
            }
        }
        let mut expected = Vec::new();
        for id in [
            "brains", "shells", "runtimes", "agents", "projects", "settings",
        ] {
            let mut found = Vec::new();
            let schema: Value = serde_json::from_str(crate::schema::text(id).unwrap()).unwrap();
            walk(&schema, "", &mut found);
            // `$defs` reached through `$ref` are walked by hand: the ones in use.
            for (name, def) in schema["$defs"].as_object().into_iter().flatten() {
                let mut inner = Vec::new();
                walk(def, "", &mut inner);
                let prefix = match (id, name.as_str()) {
                    ("brains", "brain") => "/brains/*",
                    ("shells", "shell") => "/shells/*",
                    _ => continue,
                };
                found.extend(inner.into_iter().map(|p| format!("{prefix}{p}")));
            }
            expected.extend(found.into_iter().map(|p| (id.to_owned(), p)));
        }
        expected.sort();
        let mut listed: Vec<(String, String)> = ENV_NAME_PLACES
            .iter()
            .map(|(s, p)| ((*s).to_owned(), (*p).to_owned()))
            .collect();
        listed.sort();
        assert_eq!(listed, expected);
    }
}
