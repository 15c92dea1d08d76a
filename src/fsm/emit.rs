//! Emit rules: how the outcome of one agent invocation becomes an event.
//!
//! The engine derives events only from these declarative rules (never from an
//! agent's free text). A rule names the outcome kind it handles and, for
//! validated output, an optional condition on one field of the JSON output.

use serde::Serialize;
use serde_json::Value;

/// What one agent invocation came to, as the emit rules see it (`on = ...`
/// in TOML), as the store records it and as `history` shows it: one
/// vocabulary, spelled once (strum derives the string forms).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    serde::Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// The agent produced output that satisfied its schema.
    Output,
    /// The agent produced output that failed its schema (or was not JSON).
    InvalidOutput,
    /// The agent process failed (spawn error, crash, non-zero exit).
    ProcessError,
    /// The agent ran past its timeout.
    Timeout,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CmpOp {
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

/// `<path> (==|!=) <JSON literal>`, e.g. `passed == true` or `summary.outcome != "ok"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    /// Object keys from the root of the output, outermost first.
    pub path: Vec<String>,
    pub op: CmpOp,
    pub value: Value,
    /// The condition as written, for display.
    pub text: String,
}

impl Condition {
    /// Parses a `when` expression; the error is a sentence saying what is wrong.
    pub fn parse(text: &str) -> Result<Condition, String> {
        let (idx, op) = match (text.find("=="), text.find("!=")) {
            (Some(a), Some(b)) if b < a => (b, CmpOp::Ne),
            (Some(a), _) => (a, CmpOp::Eq),
            (None, Some(b)) => (b, CmpOp::Ne),
            (None, None) => {
                return Err(format!(
                    "`{text}` has no `==` or `!=`; write `<field> == <JSON value>`"
                ));
            }
        };
        let lhs = text[..idx].trim();
        let rhs = text[idx + 2..].trim();
        if lhs.is_empty() {
            return Err(format!("`{text}` names no field before the operator"));
        }
        let path: Vec<String> = lhs.split('.').map(str::to_owned).collect();
        let key_ok = |k: &String| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !path.iter().all(key_ok) {
            return Err(format!(
                "field path `{lhs}` must be dot-separated keys of letters, digits, `_` or `-`"
            ));
        }
        let value: Value = serde_json::from_str(rhs).map_err(|_| {
            format!(
                "`{rhs}` is not a JSON literal; use e.g. true, 3, \"success\" or null (strings in double quotes)"
            )
        })?;
        Ok(Condition {
            path,
            op,
            value,
            text: text.trim().to_owned(),
        })
    }

    /// A missing field equals nothing: `==` is false and `!=` is true.
    pub fn matches(&self, output: &Value) -> bool {
        let mut cur = Some(output);
        for key in &self.path {
            cur = cur.and_then(|v| v.get(key));
        }
        let equal = cur == Some(&self.value);
        match self.op {
            CmpOp::Eq => equal,
            CmpOp::Ne => !equal,
        }
    }
}

/// One `emit` entry: on this kind of outcome (and condition), emit this event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmitRule {
    pub on: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<Condition>,
    pub event: String,
}

impl EmitRule {
    /// `output` is the validated output, present only for [`Outcome::Output`].
    pub fn matches(&self, outcome: Outcome, output: Option<&Value>) -> bool {
        if self.on != outcome {
            return false;
        }
        match (&self.when, output) {
            (None, _) => true,
            (Some(cond), Some(v)) => cond.matches(v),
            // Conditions only exist on output rules (the checker enforces it).
            (Some(_), None) => false,
        }
    }
}

/// An agent state: who runs, what its output must satisfy, and how outcomes map to events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentState {
    /// Agent id or role; `self` in a lifecycle FSM means the agent being invoked.
    pub agent: String,
    /// Schema id the output must satisfy (resolved by config).
    pub output: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    pub emit: Vec<EmitRule>,
}

impl AgentState {
    /// The event of the first rule that matches, if any.
    pub fn derive_event(&self, outcome: Outcome, output: Option<&Value>) -> Option<&str> {
        self.emit
            .iter()
            .find(|r| r.matches(outcome, output))
            .map(|r| r.event.as_str())
    }

    /// Every event some rule can emit, in rule order, without repeats.
    pub fn events(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.emit {
            if !out.contains(&r.event.as_str()) {
                out.push(&r.event);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_parse_and_match() {
        let c = Condition::parse("passed == true").unwrap();
        assert!(c.matches(&json!({"passed": true})));
        assert!(!c.matches(&json!({"passed": false})));
        assert!(!c.matches(&json!({})));
        let c = Condition::parse("a.b != \"x\"").unwrap();
        assert!(c.matches(&json!({"a": {"b": "y"}})));
        assert!(c.matches(&json!(null)));
        assert!(!c.matches(&json!({"a": {"b": "x"}})));
        assert!(Condition::parse("passed = true").is_err());
        assert!(Condition::parse("== true").is_err());
        assert!(Condition::parse("x == success").is_err());
        assert!(Condition::parse("a..b == 1").is_err());
    }

    #[test]
    fn first_matching_rule_wins() {
        let a = AgentState {
            agent: "tester".into(),
            output: "test_result".into(),
            timeout_secs: None,
            emit: vec![
                EmitRule {
                    on: Outcome::Output,
                    when: Some(Condition::parse("passed == true").unwrap()),
                    event: "tests_pass".into(),
                },
                EmitRule {
                    on: Outcome::Output,
                    when: None,
                    event: "tests_fail".into(),
                },
            ],
        };
        let pass = json!({"passed": true});
        let fail = json!({"passed": false});
        assert_eq!(
            a.derive_event(Outcome::Output, Some(&pass)),
            Some("tests_pass")
        );
        assert_eq!(
            a.derive_event(Outcome::Output, Some(&fail)),
            Some("tests_fail")
        );
        assert_eq!(a.derive_event(Outcome::Timeout, None), None);
        assert_eq!("invalid_output".parse(), Ok(Outcome::InvalidOutput));
        assert_eq!(Outcome::ProcessError.to_string(), "process_error");
    }
}
