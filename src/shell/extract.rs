//! Getting an agent's structured JSON answer out of what it printed.
//!
//! Agents print their answer in different wrappings: a bare JSON document, a
//! JSON event stream whose last event carries the answer as text (Claude's
//! `stream-json`, Codex's `--json`), or prose with a fenced ```json block.
//! [`extract_json`] peels these layers in a fixed order so the result does
//! not depend on guesswork: format → JSON pointer → JSON text or fenced block.

use serde_json::Value;
use thiserror::Error;

use crate::config::OutputFormat;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExtractError {
    #[error("{source_desc} is empty; expected a JSON answer")]
    Empty { source_desc: String },
    #[error("stdout is not a JSON document (output format is `json`): {error}")]
    NotJson { error: String },
    #[error("no line of stdout is {wanted} (output format is `json-lines`){cut}")]
    NoJsonLine {
        /// What a line had to be: a JSON object, with the selected values.
        wanted: String,
        /// What the output's last line says of why, when it is JSON cut short.
        cut: String,
    },
    #[error("result pointer `{pointer}` is not a JSON pointer; it must be empty or start with `/`")]
    BadPointer { pointer: String },
    #[error("result pointer `{pointer}` matched nothing in {searched}")]
    PointerMissing { pointer: String, searched: String },
    #[error(
        "{source_desc} is a JSON {kind}; expected an object, an array, or text containing JSON"
    )]
    NotStructured {
        source_desc: String,
        kind: &'static str,
    },
    #[error(
        "{source_desc} is not JSON, has no ```json block and does not end with a JSON object line"
    )]
    NoJson { source_desc: String },
    #[error("the last ```json block in {source_desc} is not valid JSON: {error}")]
    BadJsonBlock { source_desc: String, error: String },
}

/// Extract the structured answer from `stdout`.
///
/// - `JsonLines`: the last line that is a JSON object (other lines, e.g.
///   progress text, are skipped). With `result_pointer`, the last object line
///   where the pointer resolves — so `/item/text` finds Codex's last
///   `agent_message` even when other events follow it.
/// - `Json`: the whole stdout, then the pointer.
/// - `Text`, or a JSON string reached by the steps above: the whole text if
///   it is a JSON object or array, else the last fenced JSON block.
#[cfg(test)]
pub fn extract_json(
    stdout: &str,
    format: OutputFormat,
    result_pointer: Option<&str>,
) -> Result<Value, ExtractError> {
    let spec = crate::config::OutputSpec {
        format,
        result_pointer: result_pointer.map(str::to_owned),
        ..Default::default()
    };
    extract(stdout, &spec)
}

/// [`extract_json`] for a shell's whole output spec: with `json-lines`, only
/// the lines whose `select` pointers hold the given strings are looked at,
/// and with `concat` the texts at `result_pointer` of all of them are joined
/// (a CLI that streams its answer in pieces, as Gemini does).
pub fn extract(stdout: &str, spec: &crate::config::OutputSpec) -> Result<Value, ExtractError> {
    let (format, result_pointer) = (spec.format, spec.result_pointer.as_deref());
    if let Some(p) = result_pointer
        && !p.is_empty()
        && !p.starts_with('/')
    {
        return Err(ExtractError::BadPointer {
            pointer: p.to_owned(),
        });
    }
    let (value, desc) = match format {
        OutputFormat::Text => return from_text(stdout, "stdout"),
        OutputFormat::Json => {
            if stdout.trim().is_empty() {
                return Err(ExtractError::Empty {
                    source_desc: "stdout".into(),
                });
            }
            let doc: Value = serde_json::from_str(stdout).map_err(|e| ExtractError::NotJson {
                error: e.to_string(),
            })?;
            match result_pointer {
                None => (doc, "stdout".to_owned()),
                Some(p) => {
                    let v =
                        doc.pointer(p)
                            .cloned()
                            .ok_or_else(|| ExtractError::PointerMissing {
                                pointer: p.to_owned(),
                                searched: format!("the stdout document, which {}", describe(&doc)),
                            })?;
                    (v, format!("the value at `{p}`"))
                }
            }
        }
        OutputFormat::JsonLines if spec.concat => {
            let p = result_pointer.unwrap_or("");
            let text: String = selected(stdout, spec)
                .filter_map(|v| v.pointer(p).and_then(Value::as_str).map(str::to_owned))
                .collect();
            return from_text(&text, &format!("the joined texts at `{p}`"));
        }
        OutputFormat::JsonLines => from_lines(stdout, result_pointer, spec)?,
    };
    match value {
        Value::Object(_) | Value::Array(_) => Ok(value),
        Value::String(s) => from_text(&s, &desc),
        other => Err(ExtractError::NotStructured {
            source_desc: desc,
            kind: kind(&other),
        }),
    }
}

/// The JSON object lines of `stdout`, in order, that the spec selects.
fn selected<'a>(
    stdout: &'a str,
    spec: &'a crate::config::OutputSpec,
) -> impl DoubleEndedIterator<Item = Value> + 'a {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .filter(|v| {
            spec.select
                .iter()
                .all(|(p, want)| v.pointer(p).and_then(Value::as_str) == Some(want))
        })
}

fn from_lines(
    stdout: &str,
    pointer: Option<&str>,
    spec: &crate::config::OutputSpec,
) -> Result<(Value, String), ExtractError> {
    if stdout.trim().is_empty() {
        return Err(ExtractError::Empty {
            source_desc: "stdout".into(),
        });
    }
    let objects = selected(stdout, spec).rev();
    let Some(p) = pointer else {
        let last = objects
            .into_iter()
            .next()
            .ok_or_else(|| no_json_line(stdout, spec))?;
        return Ok((last, "the last JSON line".into()));
    };
    let mut seen = 0usize;
    let mut last_seen = None;
    for obj in objects {
        if let Some(v) = obj.pointer(p) {
            return Ok((v.clone(), format!("the value at `{p}`")));
        }
        seen += 1;
        if last_seen.is_none() {
            last_seen = Some(obj);
        }
    }
    match last_seen {
        None => Err(no_json_line(stdout, spec)),
        Some(last) => Err(ExtractError::PointerMissing {
            pointer: p.to_owned(),
            searched: format!(
                "any of the {seen} JSON object lines; the last one {}",
                describe(&last)
            ),
        }),
    }
}

/// No line the spec selects: says what a line had to be, and when the
/// output's last line is a JSON object cut short, that the stream ended in
/// the middle of one (a CLI killed, or its output cut) — the likelier cause
/// than a CLI that never printed its answer.
fn no_json_line(stdout: &str, spec: &crate::config::OutputSpec) -> ExtractError {
    let wanted = if spec.select.is_empty() {
        "a JSON object".to_owned()
    } else {
        let values: Vec<String> = spec
            .select
            .iter()
            .map(|(p, v)| format!("`{p}` = {v:?}"))
            .collect();
        format!("a JSON object with {}", values.join(" and "))
    };
    let last = stdout.lines().rev().map(str::trim).find(|l| !l.is_empty());
    let cut = match last {
        Some(l) if l.starts_with('{') && serde_json::from_str::<Value>(l).is_err() => format!(
            "; its last line is a JSON object cut short, so the output ended in the middle of \
             one (the CLI stopped or was stopped): `{}`",
            crate::text::truncate(l, 80)
        ),
        _ => String::new(),
    };
    ExtractError::NoJsonLine { wanted, cut }
}

/// "has keys: a, b, c" — tells the user what a pointer could point at.
fn describe(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&str> = map.keys().map(String::as_str).take(10).collect();
            if map.len() > keys.len() {
                keys.push("…");
            }
            format!("has keys: {}", keys.join(", "))
        }
        other => format!("is a JSON {}", kind(other)),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn from_text(text: &str, desc: &str) -> Result<Value, ExtractError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(ExtractError::Empty {
            source_desc: desc.to_owned(),
        });
    }
    if let Ok(v @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(trimmed) {
        return Ok(v);
    }
    let blocks = fenced_blocks(trimmed);
    // Newest first: agents often show examples before their final answer.
    let mut first_error = None;
    for block in blocks.iter().rev() {
        let tagged =
            block.info.eq_ignore_ascii_case("json") || block.info.eq_ignore_ascii_case("jsonc");
        if !tagged && !block.info.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&block.body) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) if tagged => return Ok(v),
            Ok(v @ Value::Object(_)) => return Ok(v),
            Ok(_) => {}
            Err(e) if tagged && first_error.is_none() => first_error = Some(e.to_string()),
            Err(_) => {}
        }
    }
    if first_error.is_none() && blocks.is_empty() {
        // Logs, then the answer alone on the last line: a common CLI shape.
        let last_line = trimmed.lines().next_back().unwrap_or("").trim();
        if let Ok(v @ Value::Object(_)) = serde_json::from_str(last_line) {
            return Ok(v);
        }
    }
    Err(match first_error {
        Some(error) => ExtractError::BadJsonBlock {
            source_desc: desc.to_owned(),
            error,
        },
        None => ExtractError::NoJson {
            source_desc: desc.to_owned(),
        },
    })
}

struct Block {
    /// First word of the info string, e.g. `json`; empty for a bare fence.
    info: String,
    body: String,
}

/// Markdown code fences (``` or longer, optionally indented). An unclosed
/// final fence runs to the end of the text, as in CommonMark.
fn fenced_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        let ticks = t.bytes().take_while(|b| *b == b'`').count();
        match &mut open {
            None if ticks >= 3 => {
                let info = t[ticks..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                open = Some((
                    ticks,
                    Block {
                        info,
                        body: String::new(),
                    },
                ));
            }
            None => {}
            Some((n, _)) if ticks >= *n && t[ticks..].trim().is_empty() => {
                if let Some((_, b)) = open.take() {
                    blocks.push(b);
                }
            }
            Some((_, b)) => {
                b.body.push_str(line);
                b.body.push('\n');
            }
        }
    }
    if let Some((_, b)) = open {
        blocks.push(b);
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_logs_then_a_json_object_line() {
        let out = "compiling...\nwarning: x\n{\"outcome\": \"success\"}\n";
        assert_eq!(
            extract_json(out, OutputFormat::Text, None).unwrap(),
            json!({"outcome": "success"})
        );
        assert!(extract_json("log\n[1, 2]\n", OutputFormat::Text, None).is_err());
    }

    #[test]
    fn text_whole_json() {
        assert_eq!(
            extract_json("  {\"a\":1}\n", OutputFormat::Text, None).unwrap(),
            json!({"a":1})
        );
        assert_eq!(
            extract_json("[1,2]", OutputFormat::Text, None).unwrap(),
            json!([1, 2])
        );
    }

    #[test]
    fn text_last_json_block_wins() {
        let out = "Example:\n```json\n{\"a\":0}\n```\nFinal:\n```json\n{\"a\":1}\n```\nDone.";
        assert_eq!(
            extract_json(out, OutputFormat::Text, None).unwrap(),
            json!({"a":1})
        );
    }

    #[test]
    fn text_bare_fence_with_object_is_accepted_other_languages_are_not() {
        let out = "```\n{\"b\":2}\n```\n```python\n{\"c\":3}\n```\n";
        assert_eq!(
            extract_json(out, OutputFormat::Text, None).unwrap(),
            json!({"b":2})
        );
        let out = "```python\n{\"c\":3}\n```\n";
        assert!(matches!(
            extract_json(out, OutputFormat::Text, None),
            Err(ExtractError::NoJson { .. })
        ));
    }

    #[test]
    fn text_scalar_is_not_an_answer() {
        let err = extract_json("42", OutputFormat::Text, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "stdout is not JSON, has no ```json block and does not end with a JSON object line"
        );
    }

    #[test]
    fn text_broken_json_block_is_reported() {
        let out = "```json\n{\"a\": \n```";
        let err = extract_json(out, OutputFormat::Text, None).unwrap_err();
        assert!(matches!(err, ExtractError::BadJsonBlock { .. }), "{err}");
        // An earlier valid block is preferred over reporting the broken last one.
        let out = "```json\n{\"ok\":true}\n```\n```json\n{oops\n```";
        assert_eq!(
            extract_json(out, OutputFormat::Text, None).unwrap(),
            json!({"ok":true})
        );
    }

    #[test]
    fn empty_output() {
        for f in [
            OutputFormat::Text,
            OutputFormat::Json,
            OutputFormat::JsonLines,
        ] {
            let err = extract_json(" \n", f, None).unwrap_err();
            assert!(matches!(err, ExtractError::Empty { .. }), "{f:?}: {err}");
        }
    }

    #[test]
    fn json_with_pointer_to_string() {
        let out = r#"{"type":"result","result":"Sure:\n```json\n{\"x\":[1]}\n```"}"#;
        assert_eq!(
            extract_json(out, OutputFormat::Json, Some("/result")).unwrap(),
            json!({"x":[1]})
        );
        assert_eq!(
            extract_json(out, OutputFormat::Json, None).unwrap()["type"],
            json!("result")
        );
    }

    #[test]
    fn json_errors() {
        assert!(matches!(
            extract_json("not json", OutputFormat::Json, None),
            Err(ExtractError::NotJson { .. })
        ));
        let err = extract_json(r#"{"a":1,"b":2}"#, OutputFormat::Json, Some("/c")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "result pointer `/c` matched nothing in the stdout document, which has keys: a, b"
        );
        assert!(matches!(
            extract_json("{}", OutputFormat::Json, Some("result")),
            Err(ExtractError::BadPointer { .. })
        ));
        let err = extract_json(r#"{"n":3}"#, OutputFormat::Json, Some("/n")).unwrap_err();
        assert!(
            matches!(err, ExtractError::NotStructured { kind: "number", .. }),
            "{err}"
        );
    }

    #[test]
    fn claude_stream_json() {
        let out = [
            r#"{"type":"system","subtype":"init","session_id":"s1","tools":[]}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"thinking"}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Here it is:\n```json\n{\"a\":1}\n```"}"#,
        ]
        .join("\n");
        assert_eq!(
            extract_json(&out, OutputFormat::JsonLines, Some("/result")).unwrap(),
            json!({"a":1})
        );
    }

    #[test]
    fn codex_like_pointer_finds_last_agent_message() {
        let out = [
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"{\"plan\":[\"a\"]}"}}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"{\"plan\":[\"b\"]}"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1}}"#,
        ]
        .join("\n");
        assert_eq!(
            extract_json(&out, OutputFormat::JsonLines, Some("/item/text")).unwrap(),
            json!({"plan":["b"]})
        );
        // Without a pointer: the last object line.
        assert_eq!(
            extract_json(&out, OutputFormat::JsonLines, None).unwrap()["type"],
            json!("turn.completed")
        );
    }

    #[test]
    fn json_lines_skips_garbage() {
        let out = "progress 10%\n{\"a\":1}\n{broken\n[1,2]\nWARNING: done\n";
        assert_eq!(
            extract_json(out, OutputFormat::JsonLines, None).unwrap(),
            json!({"a":1})
        );
        assert!(matches!(
            extract_json("just text\nmore\n", OutputFormat::JsonLines, None),
            Err(ExtractError::NoJsonLine { .. })
        ));
        let err = extract_json("{\"a\":1}\n", OutputFormat::JsonLines, Some("/zz")).unwrap_err();
        assert!(err.to_string().contains("keys: a"), "{err}");
    }

    /// A stream that ends in the middle of its answer's line says so, and
    /// what line it looked for.
    #[test]
    fn a_stream_cut_mid_line_says_it_ended_in_the_middle_of_one() {
        let spec = crate::config::OutputSpec {
            format: OutputFormat::JsonLines,
            result_pointer: Some("/result".into()),
            select: [("/type".to_owned(), "result".to_owned())].into(),
            ..Default::default()
        };
        let out =
            "{\"type\":\"system\",\"subtype\":\"init\"}\n{\"type\":\"result\",\"result\":\"{\\\"ti";
        let err = extract(out, &spec).unwrap_err().to_string();
        assert!(
            err.starts_with("no line of stdout is a JSON object with `/type` = \"result\""),
            "{err}"
        );
        assert!(err.contains("cut short"), "{err}");
        // Whole lines that are not the one looked for: no word of a cut.
        let err = extract("{\"type\":\"system\"}\n", &spec)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("cut short"), "{err}");
    }

    #[test]
    fn pointer_result_text_without_json_says_where() {
        let out = r#"{"type":"result","result":"I could not do it."}"#;
        let err = extract_json(out, OutputFormat::JsonLines, Some("/result")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the value at `/result` is not JSON, has no ```json block and does not end with a JSON object line"
        );
    }

    #[test]
    fn unclosed_fence_runs_to_end() {
        let out = "answer:\n```json\n{\"a\":2}\n";
        assert_eq!(
            extract_json(out, OutputFormat::Text, None).unwrap(),
            json!({"a":2})
        );
    }
}
