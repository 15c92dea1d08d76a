//! What an agent state's invocation is handed of the run so far, the same
//! way for every workflow and schema: the latest output of every other
//! state, the step that brought the run here and why (a tester's failures,
//! a reviewer's blockers, a rejection), the notes people left since this
//! state last ran, and the pending messages meant for it. Only what belongs
//! to this visit: an older round's feedback is never presented as current.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::context::StoredTexts;
use super::{Driver, RunError};
use crate::config::{Agent, ContextMode};
use crate::fsm::StateId;
use crate::store::{ControlKind, MessageRecord, Quote, Quotes};

/// What earlier steps (and people) left for this one.
pub(super) struct Inputs {
    /// The latest TaskSpec (kept by name: prompts and scope checks use it).
    pub task_spec: Option<Value>,
    /// The latest ExecutionResult (the executor's and tester's prompts use it).
    pub previous_result: Option<Value>,
    /// The blobs the two are stored in.
    pub task_spec_blob: Option<i64>,
    pub previous_result_blob: Option<i64>,
    /// Why this state is visited again, when it is: what the step that sent
    /// the run back said (its feedback, or its output).
    pub feedback: Option<String>,
    /// The latest output of every agent state, by state name.
    pub outputs: BTreeMap<String, Output>,
    /// The step that brought the run into this state.
    pub came_from: Option<CameFrom>,
    /// The latest `next_task` an earlier step handed on (a judge's).
    pub next_task: Option<String>,
    /// Notes people left (gate answers, redrives) since this state last ran.
    pub notes: Vec<Value>,
    /// Pending messages for this agent (`modix pending add`), and their ids.
    pub pending: Vec<Value>,
    pub pending_ids: Vec<i64>,
    pub context_mode: ContextMode,
    pub history: Option<Vec<Value>>,
    /// The blob of each `history` entry's payload.
    pub history_blobs: Vec<i64>,
}

/// A state's latest output (as a package writes it: `context::stored`).
#[derive(Debug, Clone)]
pub(super) struct Output {
    pub schema: String,
    pub seq: u32,
    pub output: Value,
    /// The blob the output is stored in: the record of a package that
    /// hands it on refers to it (`store::Quotes`).
    pub blob: i64,
}

/// The transition that brought the run into the state, and what its step
/// left (as a package writes it: `context::stored`).
#[derive(Debug, Clone)]
pub(super) struct CameFrom {
    pub seq: u32,
    pub state: String,
    pub event: String,
    pub reason: Option<String>,
    /// That step's output, when it had one.
    pub output: Option<Value>,
    /// The blob it is stored in.
    pub output_blob: Option<i64>,
}

impl Driver<'_> {
    /// What earlier steps left that this agent is handed.
    pub(super) fn inputs(
        &mut self,
        state: StateId,
        agent: &Agent,
        attempt: u32,
    ) -> Result<Inputs, RunError> {
        let run_id = &self.info.run.id;
        self.store.refresh_tail(&mut self.tail)?;
        let tail = &self.tail;
        let latest = |kind: &str| {
            tail.latest_of(kind)
                .map(|m| (m.payload.clone(), m.payload_blob))
        };
        let outputs: BTreeMap<String, Output> = self
            .tail
            .latest_outputs()
            .map(|m| {
                let out = Output {
                    schema: m.kind.clone(),
                    seq: m.seq,
                    output: m.payload.clone(),
                    blob: m.payload_blob,
                };
                (m.state.clone(), out)
            })
            .collect();
        let came_from = self.came_from(state)?;
        let feedback = match (attempt, &came_from) {
            (1, _) | (_, None) => None,
            (_, Some((c, messages))) => Some(feedback_of(c, messages, &self.info.texts)),
        };
        let notes = tail
            .notes_after(self.cursor.left_by(state))
            .map(|m| m.payload.clone())
            .collect();
        let (pending, pending_ids) = self.pending_for(agent)?;
        let context_mode = agent
            .manifest
            .context
            .or(self.info.project.config.settings.context_mode)
            .unwrap_or_default();
        // `shared` hands the agent every message of the run, `isolated`
        // only the above.
        let (history, history_blobs) = match context_mode {
            ContextMode::Isolated => (None, Vec::new()),
            ContextMode::Shared => {
                let messages = self.store.messages(run_id)?;
                let blobs = messages.iter().map(|m| m.payload_blob).collect();
                let entries = messages
                    .into_iter()
                    .map(|m| json!({ "seq": m.seq, "kind": m.kind, "state": m.state, "payload": m.payload }))
                    .collect();
                (Some(entries), blobs)
            }
        };
        let (task_spec, task_spec_blob) = latest("task_spec").unzip();
        let (previous_result, previous_result_blob) = latest("execution_result").unzip();
        Ok(Inputs {
            task_spec,
            previous_result,
            task_spec_blob,
            previous_result_blob,
            feedback,
            next_task: next_task(&outputs),
            outputs,
            came_from: came_from.map(|(c, _)| c),
            notes,
            pending,
            pending_ids,
            context_mode,
            history,
            history_blobs,
        })
    }
}

impl Inputs {
    /// What the package of these inputs quotes of the run's messages.
    pub(super) fn quotes(&self) -> Quotes<'_> {
        let outputs = self.outputs.iter().map(|(state, o)| Quote {
            blob: o.blob,
            seq: o.seq,
            kind: &o.schema,
            state,
            payload: &o.output,
        });
        let history = self.history.iter().flatten().zip(&self.history_blobs);
        let history = history.filter_map(|(entry, &blob)| {
            Some(Quote {
                blob,
                seq: u32::try_from(entry.get("seq")?.as_u64()?).ok()?,
                kind: entry.get("kind")?.as_str()?,
                state: entry.get("state")?.as_str()?,
                payload: entry.get("payload")?,
            })
        });
        Quotes {
            outputs: outputs.collect(),
            history: history.collect(),
        }
    }
}

impl Driver<'_> {
    /// The transition that last brought the run into `state` and the
    /// messages its step left (none for the first state's entry).
    fn came_from(
        &self,
        state: StateId,
    ) -> Result<Option<(CameFrom, Vec<MessageRecord>)>, RunError> {
        let seq = self.cursor.entered_by(state);
        if seq == 0 {
            return Ok(None);
        }
        let run_id = &self.info.run.id;
        let t = match &self.last_transition {
            Some(t) if t.seq == seq => t.clone(),
            _ => match self.store.transition(run_id, seq)? {
                Some(t) => t,
                None => return Ok(None),
            },
        };
        // Nearly always the run's latest step, which the tail holds.
        let messages = match self.tail.messages_at(seq) {
            Some(m) => m.to_vec(),
            None => self.store.messages_at(run_id, seq)?,
        };
        let (output, output_blob) = messages
            .iter()
            .find(|m| !crate::store::NOT_OUTPUTS.contains(&m.kind.as_str()))
            .map(|m| (m.payload.clone(), m.payload_blob))
            .unzip();
        let came = CameFrom {
            seq,
            state: t.from,
            event: t.event,
            reason: t.reason,
            output,
            output_blob,
        };
        Ok(Some((came, messages)))
    }

    /// The run's undelivered pending messages, when this agent takes them:
    /// the judge where the workflow has one, else a planner or executor.
    fn pending_for(&self, agent: &Agent) -> Result<(Vec<Value>, Vec<i64>), RunError> {
        let workflow = &self.info.workflow;
        let has_judge = workflow
            .machine
            .states()
            .filter_map(|(id, _)| workflow.agent(id))
            .any(|a| a.role == "judge");
        let takes = match agent.role.as_str() {
            "judge" => true,
            "planner" | "executor" => !has_judge,
            _ => false,
        };
        if !takes {
            return Ok((Vec::new(), Vec::new()));
        }
        let open: Vec<_> = self
            .store
            .open_controls(&self.info.run.id)?
            .into_iter()
            .filter(|c| c.kind == ControlKind::Pending)
            .collect();
        let items = open
            .iter()
            .map(|c| json!({ "text": c.text, "by": c.by, "at": c.at }))
            .collect();
        Ok((items, open.iter().map(|c| c.id).collect()))
    }
}

/// What the step that sent the run back said: its feedback when it left
/// some, else its reason and output (a reviewer's blockers, say).
fn feedback_of(c: &CameFrom, messages: &[MessageRecord], texts: &StoredTexts) -> String {
    let said: Vec<String> = messages
        .iter()
        .filter(|m| m.kind == "feedback" || m.kind == "note")
        .filter_map(|m| {
            m.payload
                .get("text")
                .or_else(|| m.payload.get("note"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    if !said.is_empty() {
        return said.join("\n");
    }
    let mut text = format!("{} sent the work back ({})", c.state, c.event);
    if let Some(r) = &c.reason {
        text.push_str(&format!(": {r}"));
    }
    if let Some(out) = &c.output {
        text.push('\n');
        // The same text as the package's, made once for both.
        match c.output_blob.and_then(|blob| texts.text(blob, out)) {
            Some(made) => text.push_str(made.as_str()),
            None => text.push_str(&serde_json::to_string_pretty(out).unwrap_or_default()),
        }
    }
    text
}

/// The most recent `next_task` any state's output handed on.
fn next_task(outputs: &BTreeMap<String, Output>) -> Option<String> {
    outputs
        .values()
        .filter(|o| o.output.get("decision").and_then(Value::as_str) != Some("terminate"))
        .filter_map(|o| Some((o.seq, o.output.get("next_task")?.as_str()?)))
        .max_by_key(|(seq, _)| *seq)
        .map(|(_, t)| t.to_owned())
}
