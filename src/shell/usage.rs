//! What an invocation used — tokens in and out, cost, turns, model and
//! session — as its CLI reports it in its JSON output, read at the shell's
//! `usage` pointers ([`UsageSpec`]).
//!
//! Every JSON object the CLI printed is looked at (a whole-document answer,
//! or each line of a JSON-lines stream): numbers are summed over the
//! objects that carry them, texts are the last one's. So Claude's one
//! `result` event gives its totals, Codex's `turn.completed` events (one a
//! turn) add up, and Gemini's model and session (in its `init` event) join
//! the token counts of its `result` event.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::UsageSpec;

/// An invocation's usage as its CLI reported it; a field is `None` when
/// the CLI did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl Usage {
    fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// The usage `stdout` reports at `spec`'s pointers; `None` when it reports
/// none (no pointer given, or none found).
pub fn parse_usage(stdout: &str, spec: &UsageSpec) -> Option<Usage> {
    if *spec == UsageSpec::default() {
        return None;
    }
    let objects = json_objects(stdout);
    let sum_u64 = |p: &Option<String>| -> Option<u64> {
        let p = p.as_deref()?;
        let found: Vec<u64> = objects
            .iter()
            .filter_map(|o| o.pointer(p).and_then(count))
            .collect();
        (!found.is_empty()).then(|| found.iter().fold(0u64, |a, n| a.saturating_add(*n)))
    };
    let sum_f64 = |p: &Option<String>| -> Option<f64> {
        let p = p.as_deref()?;
        let found: Vec<f64> = objects
            .iter()
            .filter_map(|o| o.pointer(p).and_then(Value::as_f64))
            .filter(|x| x.is_finite() && *x >= 0.0)
            .collect();
        (!found.is_empty()).then(|| found.iter().sum())
    };
    let last_text = |p: &Option<String>| -> Option<String> {
        let p = p.as_deref()?;
        objects.iter().rev().find_map(|o| match o.pointer(p)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            _ => None,
        })
    };
    let usage = Usage {
        input_tokens: sum_u64(&spec.input_tokens),
        output_tokens: sum_u64(&spec.output_tokens),
        cost_usd: sum_f64(&spec.cost_usd),
        turns: sum_u64(&spec.turns),
        model: last_text(&spec.model),
        session_id: last_text(&spec.session_id),
    };
    (!usage.is_empty()).then_some(usage)
}

/// A non-negative whole count (a float that is one, as some CLIs print, too).
fn count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0 && x.fract() == 0.0)
            .map(|x| x as u64)
    })
}

/// The JSON objects of `stdout`: the whole text when it is one, else each
/// line that is one (progress text and cut lines are skipped).
fn json_objects(stdout: &str) -> Vec<Value> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(stdout.trim()) {
        return vec![v];
    }
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::presets::preset;

    fn usage_of(preset_name: &str, stdout: &str) -> Option<Usage> {
        parse_usage(stdout, &preset(preset_name).unwrap().usage)
    }

    /// Claude Code's stream: the `system` init line names the model, the
    /// `result` line has the totals (assistant lines carry per-message
    /// usage under `/message/usage`, which is not counted again).
    #[test]
    fn claude_totals_come_from_its_result_event() {
        let stdout = [
            r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":7,"output_tokens":3}},"session_id":"s-1"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"{}","num_turns":4,"total_cost_usd":0.0123,"usage":{"input_tokens":300,"output_tokens":30,"cache_read_input_tokens":5},"session_id":"s-1"}"#,
        ]
        .join("\n");
        let u = usage_of("claude", &stdout).unwrap();
        assert_eq!(
            u,
            Usage {
                input_tokens: Some(300),
                output_tokens: Some(30),
                cost_usd: Some(0.0123),
                turns: Some(4),
                model: Some("claude-sonnet-4-5".into()),
                session_id: Some("s-1".into()),
            }
        );
    }

    /// Codex reports each turn's usage in its `turn.completed` event: they add up.
    #[test]
    fn codex_turns_add_up() {
        let stdout = [
            r#"{"type":"thread.started","thread_id":"t-9"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"{}"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":20,"output_tokens":10}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":50,"output_tokens":5}}"#,
        ]
        .join("\n");
        let u = usage_of("codex", &stdout).unwrap();
        assert_eq!(u.input_tokens, Some(150));
        assert_eq!(u.output_tokens, Some(15));
        assert_eq!(u.cost_usd, None, "Codex reports no cost");
        assert_eq!(u.session_id.as_deref(), Some("t-9"));
    }

    /// Gemini's `init` event names model and session; its `result` event's
    /// `stats` count the tokens.
    #[test]
    fn gemini_stats_and_init_join() {
        let stdout = [
            r#"{"type":"init","timestamp":"2025-01-01T00:00:00Z","session_id":"g-1","model":"gemini-2.5-flash"}"#,
            r#"{"type":"message","role":"assistant","content":"{}","delta":true}"#,
            r#"{"type":"result","status":"success","stats":{"total_tokens":42,"input_tokens":40,"output_tokens":2,"cached":0,"input":40,"duration_ms":9,"tool_calls":0,"models":{}}}"#,
        ]
        .join("\n");
        let u = usage_of("gemini", &stdout).unwrap();
        assert_eq!(u.input_tokens, Some(40));
        assert_eq!(u.output_tokens, Some(2));
        assert_eq!(u.model.as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(u.session_id.as_deref(), Some("g-1"));
    }

    #[test]
    fn nothing_reported_is_none() {
        assert_eq!(usage_of("claude", "plain text\n{\"type\":\"x\"}"), None);
        assert_eq!(usage_of("claude", ""), None);
        assert_eq!(usage_of("aider", "{\"usage\":{\"input_tokens\":1}}"), None);
        // A cut line, a negative or fractional count are not usage.
        let odd = r#"{"usage":{"input_tokens":-1,"output_tokens":1.5}}"#;
        assert_eq!(usage_of("claude", odd), None);
        assert_eq!(usage_of("claude", r#"{"usage":{"input_tok"#), None);
    }

    /// A whole-document answer (`json` format) is one object, even pretty-printed.
    #[test]
    fn a_json_document_is_read_whole() {
        let spec = UsageSpec {
            cost_usd: Some("/cost".into()),
            ..UsageSpec::default()
        };
        let u = parse_usage("{\n  \"cost\": 0.5\n}\n", &spec).unwrap();
        assert_eq!(u.cost_usd, Some(0.5));
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            serde_json::json!({"cost_usd": 0.5})
        );
    }
}
