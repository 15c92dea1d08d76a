//! Emit rules: how the outcome of one agent invocation becomes an event.
//!
//! The engine derives events only from these declarative rules (never from an
//! agent's free text). A rule names the outcome kind it handles and, for
//! validated output, an optional condition on one field of the JSON output.

use serde::Serialize;
use serde_json::Value;

/// What happened when an agent was invoked, as the orchestrator saw it.
#[derive(Debug, Clone, Copy)]
pub enum InvocationOutcome<'a> {
    /// The agent produced output that satisfied its schema.
    Output(&'a Value),
    /// The agent produced output that failed its schema (or was not JSON).
    InvalidOutput,
    /// The agent process failed (spawn error, crash, non-zero exit).
    ProcessError,
    /// The agent ran past its timeout.
    Timeout,
}

/// The outcome kind a rule handles (`on = ...` in TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    Output,
    InvalidOutput,
    ProcessError,
    Timeout,
}

impl OutcomeKind {
    pub const ALL: [OutcomeKind; 4] = [
        OutcomeKind::Output,
        OutcomeKind::InvalidOutput,
        OutcomeKind::ProcessError,
        OutcomeKind::Timeout,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Output => "output",
            OutcomeKind::InvalidOutput => "invalid_output",
            OutcomeKind::ProcessError => "process_error",
            OutcomeKind::Timeout => "timeout",
        }
    }

    fn of(outcome: &InvocationOutcome) -> Self {
        match outcome {
            InvocationOutcome::Output(_) => OutcomeKind::Output,
            InvocationOutcome::InvalidOutput => OutcomeKind::InvalidOutput,
            InvocationOutcome::ProcessError => OutcomeKind::ProcessError,
            InvocationOutcome::Timeout => OutcomeKind::Timeout,
        }
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
    pub on: OutcomeKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<Condition>,
    pub event: String,
}

impl EmitRule {
    pub fn matches(&self, outcome: &InvocationOutcome) -> bool {
        if self.on != OutcomeKind::of(outcome) {
            return false;
        }
        match (&self.when, outcome) {
            (None, _) => true,
            (Some(cond), InvocationOutcome::Output(v)) => cond.matches(v),
            // Conditions only exist on output rules (the checker enforces it).
            (Some(_), _) => false,
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
    pub fn derive_event(&self, outcome: &InvocationOutcome) -> Option<&str> {
        self.emit
            .iter()
            .find(|r| r.matches(outcome))
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
                    on: OutcomeKind::Output,
                    when: Some(Condition::parse("passed == true").unwrap()),
                    event: "tests_pass".into(),
                },
                EmitRule {
                    on: OutcomeKind::Output,
                    when: None,
                    event: "tests_fail".into(),
                },
            ],
        };
        let pass = json!({"passed": true});
        let fail = json!({"passed": false});
        assert_eq!(
            a.derive_event(&InvocationOutcome::Output(&pass)),
            Some("tests_pass")
        );
        assert_eq!(
            a.derive_event(&InvocationOutcome::Output(&fail)),
            Some("tests_fail")
        );
        assert_eq!(a.derive_event(&InvocationOutcome::Timeout), None);
    }
}
