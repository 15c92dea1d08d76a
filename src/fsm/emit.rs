//! Emit rules: how the outcome of one agent invocation becomes an event.
//!
//! The engine derives events only from these declarative rules (never from an
//! agent's free text). A rule names the outcome kind it handles and, for
//! validated output, an optional condition on one field of the JSON output.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::failure::FailureClass;
use super::recovery::{CatchRule, RetryRule};

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

/// Why a condition cannot hold for output that satisfies its state's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionProblem {
    /// `fsm::unknown-field` or `fsm::type-mismatch`.
    pub code: &'static str,
    pub message: String,
    pub help: String,
}

impl Condition {
    /// Checks the field path and the literal against `schema` (the state's
    /// output schema, `id` for messages): a misspelled field or a literal of
    /// a type (or enum value) the schema never allows would make the rule
    /// silently never match (`==`) or always match (`!=`).
    pub fn check_against(&self, id: &str, schema: &Value) -> Result<(), ConditionProblem> {
        let mut node = schema_walk::Node::root(schema);
        for (depth, key) in self.path.iter().enumerate() {
            let at = self.path[..depth].join(".");
            node = match node.field(key) {
                schema_walk::Field::Found(next) => next,
                schema_walk::Field::Unchecked => return Ok(()),
                schema_walk::Field::Unknown(known) => {
                    return Err(unknown_field(id, &at, key, &known));
                }
                schema_walk::Field::NotAnObject(types) => {
                    return Err(ConditionProblem {
                        code: "fsm::unknown-field",
                        message: format!(
                            "`{at}` in {id} is {}, so it has no field `{key}`",
                            schema_walk::types_phrase(&types)
                        ),
                        help: format!("test `{at}` itself, e.g. `{at} == <value>`"),
                    });
                }
            };
        }
        self.check_literal(id, &node)
    }

    fn check_literal(&self, id: &str, node: &schema_walk::Node) -> Result<(), ConditionProblem> {
        let field = self.path.join(".");
        if let Some(values) = node.enumeration() {
            if values.contains(&self.value) {
                return Ok(());
            }
            let shown: Vec<String> = values.iter().map(Value::to_string).collect();
            let near = self.value.as_str().and_then(|s| {
                let strings = values.iter().filter_map(Value::as_str);
                crate::diagnostics::closest(s, strings)
            });
            let help = match near {
                Some(n) => format!("did you mean `{field} {} \"{n}\"`?", self.op_str()),
                None => format!("compare with one of: {}", shown.join(", ")),
            };
            return Err(ConditionProblem {
                code: "fsm::type-mismatch",
                message: format!(
                    "`{field}` in {id} is one of {}, never {}",
                    shown.join(", "),
                    self.value
                ),
                help,
            });
        }
        let Some(types) = node.types() else {
            return Ok(());
        };
        let literal = schema_walk::json_type(&self.value);
        if types
            .iter()
            .any(|t| schema_walk::type_admits(t, &self.value))
        {
            return Ok(());
        }
        Err(ConditionProblem {
            code: "fsm::type-mismatch",
            message: format!(
                "`{field}` in {id} is {}, but {} is {}",
                schema_walk::types_phrase(&types),
                self.value,
                schema_walk::article(literal)
            ),
            help: self.retype_help(&field, &types),
        })
    }

    fn op_str(&self) -> &'static str {
        match self.op {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }

    /// `passed == "true"` was probably meant as `passed == true`.
    fn retype_help(&self, field: &str, types: &[String]) -> String {
        let unquoted = self
            .value
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .filter(|v| types.iter().any(|t| schema_walk::type_admits(t, v)));
        match unquoted {
            Some(v) => format!(
                "write `{field} {} {v}` (without quotes: JSON {} literal)",
                self.op_str(),
                schema_walk::json_type(&v)
            ),
            None => format!(
                "compare `{field}` with {}",
                schema_walk::types_phrase(types)
            ),
        }
    }
}

fn unknown_field(id: &str, at: &str, key: &str, known: &[String]) -> ConditionProblem {
    let whole = if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    };
    let place = if at.is_empty() {
        format!("{id} output")
    } else {
        format!("`{at}` in {id}")
    };
    let prefix = if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    };
    let help = match crate::diagnostics::closest(key, known.iter().map(String::as_str)) {
        Some(near) => format!(
            "did you mean `{prefix}{near}`? (fields: {})",
            known.join(", ")
        ),
        None => format!("use one of the fields: {}", known.join(", ")),
    };
    ConditionProblem {
        code: "fsm::unknown-field",
        message: format!("field `{whole}` does not exist: {place} has no field `{key}`"),
        help,
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
    /// Tried first when an invocation fails: run it again after a wait.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retry: Vec<RetryRule>,
    /// Tried once no retry is left: leave the state on `catch:<class>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub catch: Vec<CatchRule>,
}

impl AgentState {
    /// Whether to run the failed invocation again, and after how long.
    /// `retried` counts the retries this visit already made, of any class
    /// (the first retry is 0); `fraction` is a random number in [0, 1] for
    /// the jitter. `None`: no rule retries `class`, or its `max_attempts`
    /// are used up — then ask [`AgentState::caught`].
    pub fn retry_after(
        &self,
        class: FailureClass,
        retried: u32,
        fraction: f64,
    ) -> Option<Duration> {
        let rule = self.retry.iter().find(|r| r.on.contains(&class))?;
        (retried < rule.max_attempts).then(|| rule.delay(retried, fraction))
    }

    /// The event to fire when a failure of `class` is caught (`catch:auth`);
    /// `None` when no catch rule names the class (then the emit rules
    /// decide, from the class's [`Outcome`]).
    pub fn caught(&self, class: FailureClass) -> Option<&'static str> {
        self.catch
            .iter()
            .any(|c| c.on.contains(&class))
            .then(|| class.catch_event())
    }

    /// Most retries one visit can make (the largest `max_attempts`).
    pub fn max_retries(&self) -> u32 {
        self.retry.iter().map(|r| r.max_attempts).max().unwrap_or(0)
    }

    /// Most invocations one visit can cost: the first and every retry.
    pub fn attempts_per_visit(&self) -> u64 {
        1 + u64::from(self.max_retries())
    }

    /// The longest one visit can spend waiting between its attempts.
    pub fn worst_retry_wait(&self) -> Duration {
        super::recovery::worst_wait(&self.retry)
    }

    /// The catch events this state's transitions are synthesised for.
    pub fn catch_events(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.catch
            .iter()
            .flat_map(|c| c.on.iter().map(|class| class.catch_event()))
    }

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

/// Just enough of JSON Schema to follow a field path through an output
/// schema: `properties`, `additionalProperties`, local `$ref`s,
/// `allOf`/`anyOf`/`oneOf`, and at the end `type`, `enum` and `const`.
/// Anything else is left unchecked rather than guessed.
mod schema_walk {
    use serde_json::Value;

    /// A subschema of one schema document.
    #[derive(Clone, Copy)]
    pub struct Node<'a> {
        root: &'a Value,
        value: &'a Value,
        /// How many `$ref`/branch steps led here: a schema that refers to
        /// itself must not recurse forever.
        depth: u8,
    }

    const MAX_DEPTH: u8 = 32;

    /// What a schema says about one field of an object.
    pub enum Field<'a> {
        Found(Node<'a>),
        /// Not declared and no others allowed: the declared names.
        Unknown(Vec<String>),
        /// The value is never an object: its types.
        NotAnObject(Vec<String>),
        /// The schema does not say (free-form, or beyond what is followed).
        Unchecked,
    }

    impl<'a> Node<'a> {
        pub fn root(root: &'a Value) -> Self {
            Node {
                root,
                value: root,
                depth: 0,
            }
        }

        fn at(self, value: &'a Value) -> Self {
            Node {
                root: self.root,
                value,
                depth: self.depth.saturating_add(1),
            }
        }

        /// This schema and the `allOf` members it must also satisfy, `$ref`s followed.
        fn facets(self) -> Vec<Node<'a>> {
            let mut out = Vec::new();
            let mut todo = vec![self.value];
            // Bounded: a `$ref` cycle in a schema must not hang the check.
            while let Some(v) = todo.pop().filter(|_| out.len() < 64) {
                let v = match v.get("$ref").and_then(Value::as_str) {
                    Some(r) => match r.strip_prefix('#').and_then(|p| self.root.pointer(p)) {
                        Some(target) => target,
                        None => continue,
                    },
                    None => v,
                };
                out.push(self.at(v));
                if let Some(all) = v.get("allOf").and_then(Value::as_array) {
                    todo.extend(all.iter().rev());
                }
            }
            out
        }

        fn branches(self) -> Vec<Node<'a>> {
            if self.depth > MAX_DEPTH {
                return Vec::new();
            }
            self.facets()
                .iter()
                .flat_map(|f| {
                    ["anyOf", "oneOf"]
                        .iter()
                        .filter_map(|k| f.value.get(*k).and_then(Value::as_array))
                        .flatten()
                        .map(|b| f.at(b))
                        .collect::<Vec<_>>()
                })
                .collect()
        }

        pub fn field(self, key: &str) -> Field<'a> {
            let facets = self.facets();
            let props = |f: &Node<'a>| f.value.get("properties").and_then(Value::as_object);
            if let Some(sub) = facets
                .iter()
                .find_map(|f| props(f)?.get(key).map(|s| f.at(s)))
            {
                return Field::Found(sub);
            }
            let additional = |f: &Node<'a>| f.value.get("additionalProperties");
            if let Some(sub) = facets
                .iter()
                .find_map(|f| additional(f).filter(|a| a.is_object()).map(|a| f.at(a)))
            {
                return Field::Found(sub);
            }
            if facets
                .iter()
                .any(|f| additional(f) == Some(&Value::Bool(false)))
            {
                let known = facets
                    .iter()
                    .filter_map(props)
                    .flat_map(|m| m.keys().cloned())
                    .collect();
                return Field::Unknown(known);
            }
            if let Some(types) = self.types()
                && !types.iter().any(|t| t == "object")
            {
                return Field::NotAnObject(types);
            }
            self.field_in_branches(key)
        }

        fn field_in_branches(self, key: &str) -> Field<'a> {
            let branches = self.branches();
            if branches.is_empty() {
                return Field::Unchecked;
            }
            let mut known = Vec::new();
            for b in branches {
                match b.field(key) {
                    Field::Found(n) => return Field::Found(n),
                    Field::Unknown(k) => known.extend(k),
                    _ => return Field::Unchecked,
                }
            }
            known.sort();
            known.dedup();
            Field::Unknown(known)
        }

        /// The JSON types the value may have, when the schema restricts them.
        pub fn types(self) -> Option<Vec<String>> {
            let facets = self.facets();
            let own = facets.iter().find_map(|f| match f.value.get("type")? {
                Value::String(t) => Some(vec![t.clone()]),
                Value::Array(ts) => Some(
                    ts.iter()
                        .filter_map(|t| t.as_str().map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            });
            own.or_else(|| union(self.branches(), Node::types))
        }

        /// The only values allowed (`enum` or `const`), when the schema lists them.
        pub fn enumeration(self) -> Option<Vec<Value>> {
            let facets = self.facets();
            let own = facets.iter().find_map(|f| {
                if let Some(c) = f.value.get("const") {
                    return Some(vec![c.clone()]);
                }
                f.value.get("enum").and_then(Value::as_array).cloned()
            });
            own.or_else(|| union(self.branches(), Node::enumeration))
        }
    }

    /// The union over `anyOf`/`oneOf` branches, when every branch restricts.
    fn union<'a, T: PartialEq>(
        branches: Vec<Node<'a>>,
        each: impl Fn(Node<'a>) -> Option<Vec<T>>,
    ) -> Option<Vec<T>> {
        if branches.is_empty() {
            return None;
        }
        let mut out: Vec<T> = Vec::new();
        for b in branches {
            for t in each(b)? {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        Some(out)
    }

    /// Whether JSON Schema type `t` admits `v`.
    pub fn type_admits(t: &str, v: &Value) -> bool {
        match t {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "string" => v.is_string(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => true,
        }
    }

    pub fn json_type(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    pub fn article(t: &str) -> String {
        match t {
            "null" => "null".to_owned(),
            "array" | "object" | "integer" => format!("an {t}"),
            _ => format!("a {t}"),
        }
    }

    /// "a boolean", "a string or null".
    pub fn types_phrase(types: &[String]) -> String {
        let words: Vec<String> = types.iter().map(|t| article(t)).collect();
        words.join(" or ")
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
    fn conditions_are_checked_against_the_output_schema() {
        let schema: Value =
            serde_json::from_str(crate::schema::text("execution_result").unwrap()).unwrap();
        let check = |w: &str| {
            Condition::parse(w)
                .unwrap()
                .check_against("execution_result", &schema)
        };
        assert!(check("outcome == \"success\"").is_ok());
        assert!(check("error == null").is_ok());
        assert!(check("error != \"x\"").is_ok());
        let p = check("outcom == \"success\"").unwrap_err();
        assert_eq!(p.code, "fsm::unknown-field");
        assert!(p.help.contains("did you mean `outcome`?"), "{p:?}");
        assert_eq!(
            check("outcome == \"failed\"").unwrap_err().code,
            "fsm::type-mismatch"
        );
        assert_eq!(
            check("summary == 3").unwrap_err().code,
            "fsm::type-mismatch"
        );
        assert_eq!(
            check("summary.x == 3").unwrap_err().code,
            "fsm::unknown-field"
        );
        assert_eq!(
            check("files_changed == 1").unwrap_err().code,
            "fsm::type-mismatch"
        );
        // Combinators and references are followed; what is not understood is not judged.
        let tricky = json!({
            "$defs": {"n": {"type": "integer"}, "loop": {"anyOf": [{"$ref": "#/$defs/loop"}]}},
            "allOf": [{"properties": {"a": {"$ref": "#/$defs/n"}}}],
            "anyOf": [{"properties": {"b": {"const": "x"}}, "additionalProperties": false}],
            "properties": {"c": {"$ref": "#/$defs/loop"}, "d": {}}
        });
        let check = |w: &str| Condition::parse(w).unwrap().check_against("t", &tricky);
        assert!(check("a == 3").is_ok());
        assert_eq!(check("a == 3.5").unwrap_err().code, "fsm::type-mismatch");
        assert_eq!(check("b == \"y\"").unwrap_err().code, "fsm::type-mismatch");
        assert!(check("c.x == 1").is_ok());
        assert!(check("d.e.f == [1]").is_ok());
        // The only `anyOf` branch allows no other keys.
        assert_eq!(check("zz == 1").unwrap_err().code, "fsm::unknown-field");
    }

    #[test]
    fn first_matching_rule_wins() {
        let a = AgentState {
            agent: "tester".into(),
            output: "test_result".into(),
            timeout_secs: None,
            retry: Vec::new(),
            catch: Vec::new(),
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
