//! How a context package is stored: split into the part that is the same at
//! every visit of a state (stored once, as a blob) and the part that
//! changes (kept in the invocation's row), with what the changing part
//! repeats of itself left out — and put back together, exactly, when read.
//!
//! The one repetition left out (since store v11): `came_from.output` is the
//! output of the step that brought the run here, which is also that state's
//! latest output in `outputs` (same state, same `seq`). It is stored once,
//! in `outputs`; the stored `came_from` then has no `output` member, which a
//! package as modix builds it never lacks (it is `null` when the step had no
//! output), so the reader knows to put it back. A package that lacks it and
//! would be read as if it had been left out is stored whole instead, so
//! every package reads back as it was written.

use serde_json::{Map, Value};

/// Members of a context package that differ from one visit of a state to
/// the next. They are stored apart from the rest of the package (which is
/// then the same text, stored once, for every visit), and put back together
/// when it is read.
const STEP_MEMBERS: [&str; 9] = [
    "attempt",
    "came_from",
    "feedback",
    "outputs",
    "notes",
    "pending",
    "next_task",
    "previous_result",
    "history",
];

/// A context package as its stable part and its step part (`None`: stored
/// whole, as the stable part).
pub(super) fn split(context: &Value) -> (Value, Option<Value>) {
    let Value::Object(all) = context else {
        return (context.clone(), None);
    };
    let (mut step, frame): (Map<_, _>, Map<_, _>) = all
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| STEP_MEMBERS.contains(&k.as_str()));
    if repeated_output(&step).is_some() {
        // Left out below; the reader finds it in `outputs`.
        if let Some(Value::Object(came_from)) = step.get_mut("came_from") {
            came_from.remove("output");
        }
    } else if fills_output(&step) {
        // It lacks `output` already: reading it back would add one.
        return (context.clone(), None);
    }
    (Value::Object(frame), Some(Value::Object(step)))
}

/// A context package put back together from its stored parts; its members
/// in the order it was written (alphabetical: serde_json's maps are sorted).
pub(super) fn join(frame: Value, step: Option<Value>) -> Value {
    match (frame, step) {
        (Value::Object(mut all), Some(Value::Object(mut step))) => {
            if fills_output(&step) {
                let output = latest_output(&step).cloned().unwrap_or(Value::Null);
                if let Some(Value::Object(came_from)) = step.get_mut("came_from") {
                    came_from.insert("output".into(), output);
                }
            }
            all.extend(step);
            Value::Object(all)
        }
        (frame, _) => frame,
    }
}

/// The output of `outputs[came_from.state]` when it is `came_from`'s step's
/// (same `seq`).
fn latest_output(step: &Map<String, Value>) -> Option<&Value> {
    let came_from = step.get("came_from")?.as_object()?;
    let state = came_from.get("state")?.as_str()?;
    let latest = step.get("outputs")?.get(state)?.as_object()?;
    (latest.get("seq")? == came_from.get("seq")?)
        .then(|| latest.get("output"))
        .flatten()
}

/// `came_from.output`, when it repeats the latest output of its state.
fn repeated_output(step: &Map<String, Value>) -> Option<&Value> {
    let output = step.get("came_from")?.get("output")?;
    (latest_output(step)? == output).then_some(output)
}

/// Whether the step part, as stored, has had `came_from.output` left out.
fn fills_output(step: &Map<String, Value>) -> bool {
    let lacks = step
        .get("came_from")
        .and_then(Value::as_object)
        .is_some_and(|c| !c.contains_key("output"));
    lacks && latest_output(step).is_some()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{join, split};

    fn round_trip(package: &Value) -> Value {
        let (frame, step) = split(package);
        join(frame, step)
    }

    #[test]
    fn the_previous_output_is_stored_once() {
        let output = json!({"passed": false, "failures": ["a test"]});
        let package = json!({
            "epic": "e",
            "attempt": 2,
            "came_from": {"seq": 7, "state": "TEST", "event": "fail", "reason": null,
                          "output": output},
            "outputs": {"TEST": {"schema": "test_result", "seq": 7, "output": output}},
        });
        let (frame, step) = split(&package);
        assert_eq!(frame, json!({"epic": "e"}));
        let step = step.expect("a step part");
        assert_eq!(step["came_from"].get("output"), None, "{step}");
        assert_eq!(join(frame, Some(step)), package);
    }

    #[test]
    fn an_output_that_differs_or_is_older_is_kept() {
        let output = json!({"passed": true});
        for (came, latest) in [(7, 7), (6, 7)] {
            let package = json!({
                "came_from": {"seq": came, "state": "TEST", "event": "e", "reason": null,
                              "output": if came == latest { json!(null) } else { output.clone() }},
                "outputs": {"TEST": {"schema": "s", "seq": latest, "output": output}},
            });
            let (_, step) = split(&package);
            assert!(step.unwrap()["came_from"].get("output").is_some());
            assert_eq!(round_trip(&package), package);
        }
    }

    #[test]
    fn a_package_already_lacking_the_output_is_stored_whole() {
        let package = json!({
            "came_from": {"seq": 3, "state": "A", "event": "e"},
            "outputs": {"A": {"seq": 3, "output": 1}},
        });
        assert_eq!(split(&package), (package.clone(), None));
        assert_eq!(round_trip(&package), package);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0u32..4).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("seq".to_owned()),
                        Just("state".to_owned()),
                        Just("output".to_owned()),
                        "[a-c]{1}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the package, it reads back as it was written.
        #[test]
        fn every_package_reads_back_as_written(
            came_from in json_value(),
            outputs in json_value(),
            state in prop_oneof![Just("a".to_owned()), "[a-c]{1}"],
            seq in 0u32..3,
            output in json_value(),
            shape in 0u8..4,
        ) {
            let mut package = json!({"epic": "e", "came_from": came_from, "outputs": outputs});
            // Often the shape modix writes, so the leaving out is exercised.
            if shape > 0 {
                let mut came = json!({"seq": seq, "state": state, "event": "x"});
                if shape > 1 {
                    came["output"] = output.clone();
                }
                package["came_from"] = came;
                if shape > 2 {
                    package["outputs"] = json!({ state: {"seq": seq, "output": output} });
                }
            }
            prop_assert_eq!(round_trip(&package), package);
        }
    }
}
