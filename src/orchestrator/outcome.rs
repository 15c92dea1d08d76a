//! What a verdict leaves behind: the messages handed to later agents (the
//! TaskSpec, the ExecutionResult, the TestResult, and feedback for a retry)
//! and the one-line reason recorded with the transition.

use serde_json::{Value, json};

use super::agent::{Failure, Verdict};
use crate::fsm::FailureClass;
use crate::store::NewMessage;
use crate::text::{plural, truncate};

/// Messages to store and the transition's reason.
pub(super) fn describe(
    state: &str,
    output_schema: &str,
    verdict: &Verdict,
) -> (Vec<NewMessage>, String) {
    let mut messages = Vec::new();
    let mut feedback = |text: String, details: Value| {
        messages.push(NewMessage {
            kind: "feedback".into(),
            state: state.to_owned(),
            payload: json!({ "text": text, "details": details }),
        });
    };
    let reason = match verdict {
        Verdict::Output(v) => {
            let reason = output_reason(output_schema, v);
            if let Some(text) = failure_feedback(output_schema, v) {
                feedback(text, v.clone());
            }
            messages.insert(
                0,
                NewMessage {
                    kind: output_schema.to_owned(),
                    state: state.to_owned(),
                    payload: v.clone(),
                },
            );
            reason
        }
        Verdict::Failed(Failure {
            feedback: Some(text),
            reason,
            errors,
            ..
        }) => {
            feedback(text.clone(), json!(errors));
            reason.clone()
        }
        Verdict::Failed(f) if f.class == FailureClass::InvalidOutput => {
            feedback(
                format!(
                    "Your previous answer was rejected: it does not satisfy the `{output_schema}` schema:\n- {}",
                    f.errors.join("\n- ")
                ),
                json!(f.errors),
            );
            format!(
                "output rejected: {} ({})",
                f.reason,
                plural(f.errors.len(), "problem")
            )
        }
        Verdict::Failed(f) => {
            // Only what the agent itself did wrong is worth telling it; a
            // key, a quota or the network are not its to fix.
            if matches!(
                f.class,
                FailureClass::AgentError | FailureClass::Timeout | FailureClass::Idle
            ) {
                feedback(
                    format!("The previous attempt failed: {}", f.reason),
                    json!(f.reason),
                );
            }
            format!("agent failed ({}): {}", f.class, f.reason)
        }
        Verdict::Cancelled => "interrupted".to_owned(),
    };
    (messages, truncate(&reason, 300).into_owned())
}

/// Feedback for the agent's next attempt.
pub(super) fn feedback_message(state: &str, text: String) -> NewMessage {
    NewMessage {
        kind: "feedback".into(),
        state: state.to_owned(),
        payload: json!({ "text": text, "details": Value::Null }),
    }
}

fn output_reason(schema: &str, v: &Value) -> String {
    let summary = v.get("summary").and_then(Value::as_str).unwrap_or("");
    match schema {
        "test_result" => {
            let passed = v.get("passed").and_then(Value::as_bool) == Some(true);
            format!(
                "tests {}: {summary}",
                if passed { "passed" } else { "failed" }
            )
        }
        "execution_result" => format!(
            "execution {}: {summary}",
            v.get("outcome").and_then(Value::as_str).unwrap_or("?")
        ),
        "task_spec" => format!(
            "plan `{}` with {}",
            v.get("title").and_then(Value::as_str).unwrap_or(""),
            plural(
                v.get("tasks").and_then(Value::as_array).map_or(0, Vec::len),
                "task"
            )
        ),
        _ => format!("valid {schema} output"),
    }
}

/// Feedback for the next attempt when a valid output still reports a failure.
fn failure_feedback(schema: &str, v: &Value) -> Option<String> {
    let summary = v.get("summary").and_then(Value::as_str).unwrap_or("");
    match schema {
        "test_result" if v.get("passed").and_then(Value::as_bool) != Some(true) => {
            let failures: Vec<&str> = v
                .get("failures")
                .and_then(Value::as_array)
                .map(|f| f.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            Some(format!(
                "The tests failed: {summary}\n{}",
                failures.join("\n")
            ))
        }
        "execution_result" if v.get("outcome").and_then(Value::as_str) != Some("success") => {
            let error = v.get("error").and_then(Value::as_str).unwrap_or("");
            Some(format!("Execution reported failure: {summary}\n{error}"))
        }
        _ => None,
    }
}
