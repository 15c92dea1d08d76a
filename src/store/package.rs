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
//!
//! Since store v16 the step part also leaves out what it quotes of the
//! run's messages: `outputs.<state>.output` (a state's latest output) and,
//! for an agent whose context is `shared`, `history[i].payload` (every
//! message of the run). Each is the payload of a message already stored as
//! a blob, so the step part keeps that blob's id in its place
//! (`output_blob`, `payload_blob`) and the reader puts the payload back.
//! Before, every step stored every other state's output again (a plan
//! handed to each of a thousand steps was stored a thousand times), and a
//! `shared` run stored its whole history at each step: its record grew as
//! the square of its length. Only a payload that is, value for value, the
//! one its blob reads back as is left out; a package that lacks a payload
//! of its own (not one modix builds) is stored whole, so that nothing is
//! put back that was not left out. Blobs are never deleted (runs share
//! them), so the ids stay good; anything that would delete blobs must count
//! these references as uses.
//!
//! Since store v17 the step part also leaves out what its `feedback` quotes
//! of `came_from.output`: the feedback modix writes when a step sends the
//! work back is a line saying so, then that output as pretty JSON (as large
//! as the output, at every step of a loop). When the stored feedback is,
//! byte for byte, some head, a newline and `came_from.output` printed so,
//! the step part keeps only the head (`{"quoting_came_from_output": head}`
//! in the feedback's place) and the reader prints the output again after
//! it. A package whose feedback is already of that shape is stored whole.

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
    if lacks_a_payload(&step)
        || step
            .get("feedback")
            .is_some_and(|f| quoted_head(f).is_some())
    {
        // Reading it back would put one in.
        return (context.clone(), None);
    }
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
            put_feedback_back(&mut step);
            all.extend(step);
            Value::Object(all)
        }
        (frame, _) => frame,
    }
}

/// What a stored step part's `feedback` is when it quotes `came_from.output`.
const FEEDBACK_QUOTE: &str = "quoting_came_from_output";

/// Leaves out of a step part (redacted, as it is stored) the
/// `came_from.output` its `feedback` ends with, printed as pretty JSON after
/// a newline: only the head before it is kept. Called before [`refer`],
/// while the output is still in the step part.
pub(super) fn refer_feedback(step: &mut Value) {
    let Value::Object(step) = step else {
        return;
    };
    let Some(Value::String(feedback)) = step.get("feedback") else {
        return;
    };
    let Some(output) = came_from_output(step) else {
        return;
    };
    let Ok(quoted) = serde_json::to_string_pretty(output) else {
        return;
    };
    let Some(head) = feedback
        .strip_suffix(quoted.as_str())
        .and_then(|h| h.strip_suffix('\n'))
    else {
        return;
    };
    let head = Value::from(head);
    step.insert(
        "feedback".into(),
        Value::Object(Map::from_iter([(FEEDBACK_QUOTE.into(), head)])),
    );
}

/// The feedback [`refer_feedback`] cut short, whole again: its head, a
/// newline, and `came_from.output` (in place by now) as pretty JSON.
fn put_feedback_back(step: &mut Map<String, Value>) {
    let Some(head) = step.get("feedback").and_then(quoted_head) else {
        return;
    };
    let Some(output) = step.get("came_from").and_then(|c| c.get("output")) else {
        return;
    };
    let Ok(quoted) = serde_json::to_string_pretty(output) else {
        return;
    };
    let feedback = format!("{head}\n{quoted}");
    step.insert("feedback".into(), Value::String(feedback));
}

/// The head a stored `feedback` keeps when it quotes `came_from.output`.
fn quoted_head(feedback: &Value) -> Option<&str> {
    match feedback.as_object()? {
        o if o.len() == 1 => o.get(FEEDBACK_QUOTE)?.as_str(),
        _ => None,
    }
}

/// `came_from.output` of a step part, or the latest output of its state
/// that stands for it once [`split`] left it out.
fn came_from_output(step: &Map<String, Value>) -> Option<&Value> {
    match step.get("came_from")?.get("output") {
        Some(output) => Some(output),
        None => latest_output(step),
    }
}

/// A message of the run a context package quotes: its payload as it reads
/// back from its blob, and what identifies it in the package.
#[derive(Debug, Clone, Copy)]
pub struct Quote<'a> {
    pub blob: i64,
    pub seq: u32,
    pub kind: &'a str,
    pub state: &'a str,
    pub payload: &'a Value,
}

/// The messages a context package quotes ([`crate::store::Store::input_texts`]):
/// the latest output of each state its `outputs` hands on, and the messages
/// of its `history`, in order.
#[derive(Debug, Default)]
pub struct Quotes<'a> {
    pub outputs: Vec<Quote<'a>>,
    pub history: Vec<Quote<'a>>,
}

/// Leaves out of a step part (redacted, as it is stored) each payload that
/// is, value for value, the one a quoted message's blob reads back as; its
/// blob's id takes its place.
pub(super) fn refer(step: &mut Value, quotes: &Quotes<'_>) {
    fn text<'e>(e: &'e Map<String, Value>, k: &str) -> Option<&'e str> {
        e.get(k).and_then(Value::as_str)
    }
    if let Some(Value::Object(outputs)) = step.get_mut("outputs") {
        for q in &quotes.outputs {
            if let Some(entry) = outputs.get_mut(q.state) {
                refer_entry(entry, ("output", "output_blob"), q, |e| {
                    text(e, "schema") == Some(q.kind)
                });
            }
        }
    }
    if let Some(Value::Array(history)) = step.get_mut("history") {
        for (entry, q) in history.iter_mut().zip(&quotes.history) {
            refer_entry(entry, ("payload", "payload_blob"), q, |e| {
                text(e, "kind") == Some(q.kind) && text(e, "state") == Some(q.state)
            });
        }
    }
}

/// `entry`'s `member` left out for `blob_key` (the quote's blob) when the
/// entry is the quote's — its seq, what `same` asks, and its payload — and
/// has no such key of its own.
fn refer_entry(
    entry: &mut Value,
    (member, blob_key): (&str, &str),
    q: &Quote<'_>,
    same: impl Fn(&Map<String, Value>) -> bool,
) {
    let Value::Object(entry) = entry else {
        return;
    };
    if entry.get("seq") == Some(&Value::from(q.seq))
        && same(entry)
        && entry.get(member) == Some(q.payload)
        && !entry.contains_key(blob_key)
    {
        entry.remove(member);
        entry.insert(blob_key.into(), q.blob.into());
    }
}

/// Puts back into a stored step part the payloads [`refer`] left out,
/// each as `fetch` reads its blob.
pub(super) fn put_back<E>(
    step: &mut Value,
    mut fetch: impl FnMut(i64) -> Result<Value, E>,
) -> Result<(), E> {
    let Value::Object(step) = step else {
        return Ok(());
    };
    for (key, value) in step.iter_mut() {
        let (entries, member): (Vec<&mut Value>, _) = match (key.as_str(), value) {
            ("outputs", Value::Object(o)) => (o.values_mut().collect(), "output"),
            ("history", Value::Array(h)) => (h.iter_mut().collect(), "payload"),
            _ => continue,
        };
        let blob = format!("{member}_blob");
        for entry in entries {
            let Value::Object(entry) = entry else {
                continue;
            };
            if entry.contains_key(member) {
                continue;
            }
            if let Some(id) = entry.get(&blob).and_then(Value::as_i64) {
                entry.remove(&blob);
                entry.insert(member.into(), fetch(id)?);
            }
        }
    }
    Ok(())
}

/// Whether an entry of `outputs` lacks its `output`, or one of `history`
/// its `payload`: a package modix did not build, which [`put_back`] would
/// misread once stored as a step part.
fn lacks_a_payload(step: &Map<String, Value>) -> bool {
    let lacks =
        |entry: &Value, member: &str| entry.as_object().is_some_and(|e| !e.contains_key(member));
    let outputs = step.get("outputs").and_then(Value::as_object);
    let history = step.get("history").and_then(Value::as_array);
    outputs.is_some_and(|o| o.values().any(|e| lacks(e, "output")))
        || history.is_some_and(|h| h.iter().any(|e| lacks(e, "payload")))
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

    use super::{Quote, Quotes, join, put_back, refer, refer_feedback, split};

    /// Stored (as text) and read back, as the store does.
    fn round_trip(package: &Value) -> Value {
        let (frame, mut step) = split(package);
        if let Some(step) = &mut step {
            refer_feedback(step);
            *step = serde_json::from_str(&step.to_string()).unwrap();
        }
        join(frame, step)
    }

    /// Stored with `quotes` (blob `i` holding `blobs[i]`) and read back.
    fn quoted_round_trip(package: &Value, quotes: &Quotes<'_>, blobs: &[Value]) -> Value {
        let (frame, mut step) = split(package);
        if let Some(step) = &mut step {
            refer_feedback(step);
            refer(step, quotes);
            let text = step.to_string();
            *step = serde_json::from_str(&text).unwrap();
            put_back(step, |id| Ok::<_, ()>(blobs[id as usize].clone())).unwrap();
        }
        join(frame, step)
    }

    #[test]
    fn quoted_outputs_are_left_out_and_put_back() {
        let plan = json!({"tasks": ["a", "b"]});
        let work = json!({"passed": true});
        let package = json!({
            "epic": "e",
            "came_from": {"seq": 4, "state": "WORK", "event": "ok", "output": work},
            "outputs": {
                "PLAN": {"schema": "task_spec", "seq": 2, "output": plan},
                "WORK": {"schema": "test_result", "seq": 4, "output": work},
            },
            "history": [{"seq": 2, "kind": "task_spec", "state": "PLAN", "payload": plan}],
        });
        let quote = |blob, seq, kind, state, payload| Quote {
            blob,
            seq,
            kind,
            state,
            payload,
        };
        let quotes = Quotes {
            outputs: vec![
                quote(0, 2, "task_spec", "PLAN", &plan),
                // Another step's output of WORK: not this one's.
                quote(1, 3, "test_result", "WORK", &work),
            ],
            history: vec![quote(0, 2, "task_spec", "PLAN", &plan)],
        };
        let (_, step) = split(&package);
        let mut step = step.unwrap();
        refer(&mut step, &quotes);
        assert_eq!(
            step["outputs"]["PLAN"],
            json!({"schema": "task_spec", "seq": 2, "output_blob": 0})
        );
        assert_eq!(step["outputs"]["WORK"]["output"], work);
        assert_eq!(step["history"][0].get("payload"), None);
        let blobs = [plan.clone(), work.clone()];
        assert_eq!(quoted_round_trip(&package, &quotes, &blobs), package);
    }

    #[test]
    fn a_package_lacking_a_payload_of_its_own_is_stored_whole() {
        for package in [
            json!({"outputs": {"A": {"seq": 1, "output_blob": 0}}}),
            json!({"history": [{"seq": 1, "kind": "k", "state": "A", "payload_blob": 0}]}),
        ] {
            assert_eq!(split(&package), (package.clone(), None));
            let quotes = Quotes::default();
            assert_eq!(quoted_round_trip(&package, &quotes, &[json!("x")]), package);
        }
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

    /// The feedback modix writes when `state`'s step sent the work back.
    fn feedback(state: &str, output: &Value) -> String {
        let pretty = serde_json::to_string_pretty(output).unwrap();
        format!("{state} sent the work back (fail): a reason\n{pretty}")
    }

    #[test]
    fn a_feedback_quoting_the_output_keeps_only_its_head() {
        let output = json!({"passed": false, "failures": ["a", "b"], "summary": "long"});
        let package = json!({
            "epic": "e",
            "came_from": {"seq": 7, "state": "TEST", "event": "fail", "output": output},
            "outputs": {"TEST": {"schema": "test_result", "seq": 7, "output": output}},
            "feedback": feedback("TEST", &output),
        });
        let (_, step) = split(&package);
        let mut step = step.unwrap();
        refer_feedback(&mut step);
        assert_eq!(
            step["feedback"],
            json!({"quoting_came_from_output": "TEST sent the work back (fail): a reason"})
        );
        assert_eq!(round_trip(&package), package);
        // With the output itself stored by reference too.
        let quotes = Quotes {
            outputs: vec![Quote {
                blob: 0,
                seq: 7,
                kind: "test_result",
                state: "TEST",
                payload: &output,
            }],
            history: vec![],
        };
        let (_, step) = split(&package);
        let mut step = step.unwrap();
        refer_feedback(&mut step);
        refer(&mut step, &quotes);
        assert!(step.to_string().len() < 250, "{step}");
        let blobs = [output.clone()];
        assert_eq!(quoted_round_trip(&package, &quotes, &blobs), package);
    }

    #[test]
    fn a_feedback_that_does_not_quote_the_output_is_kept_whole() {
        let output = json!({"passed": false});
        let other = json!({"passed": true});
        for text in [
            json!("a note from a person"),
            json!(feedback("TEST", &other)),
            // The output without the newline before it.
            json!(feedback("TEST", &output).replace("reason\n", "reason ")),
            json!(serde_json::to_string_pretty(&output).unwrap()),
            json!(null),
        ] {
            let package = json!({
                "came_from": {"seq": 2, "state": "TEST", "event": "fail", "output": output},
                "outputs": {"TEST": {"schema": "s", "seq": 2, "output": output}},
                "feedback": text,
            });
            let (_, step) = split(&package);
            let mut step = step.unwrap();
            refer_feedback(&mut step);
            assert_eq!(step["feedback"], text);
            assert_eq!(round_trip(&package), package);
        }
    }

    #[test]
    fn a_feedback_already_in_the_stored_shape_is_stored_whole() {
        let package = json!({
            "came_from": {"seq": 2, "state": "TEST", "event": "fail", "output": 1},
            "outputs": {"TEST": {"schema": "s", "seq": 2, "output": 1}},
            "feedback": {"quoting_came_from_output": "head"},
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
            said in prop_oneof![
                Just(None),
                json_value().prop_map(Some),
                "[a-c\n]{0,3}".prop_map(|head| Some(Value::from(head))),
            ],
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
            // A feedback: a value of any kind, or a head and (often) the
            // output as modix quotes it.
            match said {
                Some(Value::String(head)) if shape > 1 => {
                    package["feedback"] = feedback(&head, &output).into();
                }
                Some(said) => package["feedback"] = said,
                None => {}
            }
            prop_assert_eq!(round_trip(&package), package);
        }

        /// Whatever the package quotes, and whether or not its quotes are
        /// the messages' payloads, it reads back as it was written.
        #[test]
        fn every_quoting_package_reads_back_as_written(
            payloads in prop::collection::vec(json_value(), 1..4),
            entries in prop::collection::vec((0usize..4, 0u32..2, json_value(), any::<bool>()), 0..4),
            extra in json_value(),
        ) {
            let states = ["a", "b", "c", "d"];
            let mut outputs = serde_json::Map::new();
            let mut history = Vec::new();
            for (i, (p, seq, own, quoted)) in entries.iter().enumerate() {
                let payload = match quoted {
                    true => payloads[p % payloads.len()].clone(),
                    false => own.clone(),
                };
                outputs.insert(states[i].into(), json!({"schema": "s", "seq": seq, "output": payload}));
                history.push(json!({"seq": seq, "kind": "s", "state": states[i], "payload": payload}));
            }
            if let Some(Value::Object(e)) = outputs.values_mut().next() {
                e.insert("output_blob".into(), extra.clone());
            }
            let package = json!({"epic": "e", "outputs": outputs, "history": history});
            let quotes: Vec<Quote<'_>> = entries
                .iter()
                .enumerate()
                .map(|(i, (p, seq, _, _))| Quote {
                    blob: (p % payloads.len()) as i64,
                    seq: *seq,
                    kind: "s",
                    state: states[i],
                    payload: &payloads[p % payloads.len()],
                })
                .collect();
            let quotes = Quotes { outputs: quotes.clone(), history: quotes };
            prop_assert_eq!(quoted_round_trip(&package, &quotes, &payloads), package);
        }
    }
}
