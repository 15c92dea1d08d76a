//! The context package an agent gets (a JSON document, also at `$MODIX_CONTEXT`)
//! and the prompt rendered from it with the agent's template. The package is
//! made from the invocation's facts ([`Call`]) and what earlier steps left
//! ([`Inputs`]); it borrows both rather than copying them.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use serde_json::Value;

use super::inputs::Inputs;
use super::invoke::Call;
use crate::config::{Brain, ContextMode, Project};

mod shape;
mod stored;

pub(super) use stored::StoredTexts;
use stored::{CameFromView, Outputs, Stored};

/// Everything an agent is told about the run it takes part in.
#[derive(Debug, Serialize)]
pub(super) struct ContextPackage<'a> {
    pub epic: &'a str,
    pub run_id: &'a str,
    pub workflow: &'a str,
    pub state: &'a str,
    pub agent: &'a str,
    pub role: &'a str,
    /// 1 on the first visit of this state in the run.
    pub attempt: u32,
    /// The most visits this state can get in one run, from the workflow's bounds.
    pub bound: Option<u64>,
    pub workdir: &'a Path,
    pub output_schema: &'a str,
    pub output_schema_path: &'a Path,
    /// The exact JSON the agent must end with, as prompt text: an annotated
    /// example made from the output schema, what may be left out, and how
    /// to report failure. Templates see it (`{{ output_shape }}`); the
    /// package as written and recorded leaves it out (it follows from
    /// `output_schema`, and every step would record it again).
    #[serde(skip)]
    pub output_shape: std::sync::Arc<str>,
    pub project: ProjectContext<'a>,
    /// For shell agents: the brain's name, provider, model, endpoint and
    /// `params` (temperature, max_tokens, …), for CLIs or wrappers that use them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brain: Option<BrainContext<'a>>,
    /// The same at every step after the plan: made into template values
    /// once (see [`crate::template::reused`]).
    #[serde(serialize_with = "task_spec")]
    pub task_spec: Option<Stored<'a>>,
    pub previous_result: Option<Stored<'a>>,
    /// Why this state is visited again (test failures, a reviewer's
    /// blockers, why a result was rejected): what the step that sent the
    /// run back said. Absent on a state's first visit.
    pub feedback: Option<&'a str>,
    /// The latest output of every agent state so far, by state name
    /// (`schema`, `seq`, `output`).
    pub outputs: Outputs<'a>,
    /// The step that brought the run here (`seq`, `state`, `event`,
    /// `reason`, `output`).
    pub came_from: Option<CameFromView<'a>>,
    /// The task to work on now, when an earlier step handed one on (the
    /// Looper judge's `next_task`).
    pub next_task: Option<&'a str>,
    /// What people said since this state last ran (`modix approve --note`,
    /// `modix resume --note`): `note`, `event`, `by`, `at`.
    pub notes: &'a [Value],
    /// Messages queued for this agent with `modix pending add`: `text`, `by`, `at`.
    pub pending: &'a [Value],
    /// `isolated`: only the fields above. `shared`: also `history`.
    pub context_mode: ContextMode,
    /// With `shared`, every message of the run so far, oldest first
    /// (`seq`, `kind`, `state`, `payload`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<&'a [Value]>,
}

#[derive(Debug, Serialize)]
pub(super) struct ProjectContext<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub stack: &'a [String],
    pub conventions: &'a [String],
    pub commands: &'a crate::config::Commands,
}

#[derive(Debug, Serialize)]
pub(super) struct BrainContext<'a> {
    pub name: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub endpoint: Option<&'a str>,
    pub params: &'a serde_json::Map<String, Value>,
}

impl<'a> ContextPackage<'a> {
    pub fn new(call: &'a Call<'a>, project: &'a Project, inputs: &'a Inputs) -> Self {
        let agent = call.agent;
        ContextPackage {
            epic: call.epic,
            run_id: call.run_id,
            workflow: call.workflow,
            state: call.state,
            agent: &agent.id,
            role: &agent.role,
            attempt: call.attempt,
            bound: call.bound,
            workdir: call.workdir,
            output_schema: call.output,
            output_schema_path: &call.schema_path,
            output_shape: shape::output_shape(call.schemas, call.output),
            project: ProjectContext {
                name: &project.name,
                description: project.description.as_deref(),
                stack: &project.stack,
                conventions: &project.conventions,
                commands: &project.commands,
            },
            brain: agent.binding.brain().map(BrainContext::of),
            task_spec: inputs.task_spec.as_ref().map(|value| Stored {
                value,
                blob: inputs.task_spec_blob,
            }),
            previous_result: inputs.previous_result.as_ref().map(|value| Stored {
                value,
                blob: inputs.previous_result_blob,
            }),
            feedback: inputs.feedback.as_deref(),
            outputs: Outputs(&inputs.outputs),
            came_from: inputs.came_from.as_ref().map(CameFromView),
            next_task: inputs.next_task.as_deref(),
            notes: &inputs.notes,
            pending: &inputs.pending,
            context_mode: inputs.context_mode,
            history: inputs.history.as_deref(),
        }
    }
}

impl ContextPackage<'_> {
    /// The package as its agent reads it (pretty JSON), secrets redacted:
    /// the text made straight from the package and checked string by
    /// string, the values it quotes from the record written from the run's
    /// `texts`. Only a package with something to redact goes through a
    /// redacted copy, whose members serde_json orders by name. Read back,
    /// either is the document the record keeps.
    pub fn text(&self, texts: &StoredTexts) -> String {
        let redactor = texts.redactor();
        // Room for about the last package's size and the newline: a loop's
        // packages are much alike, and each growth of the text from a small
        // buffer copies all of it written so far.
        static LAST: AtomicUsize = AtomicUsize::new(1024);
        let room = LAST.load(Ordering::Relaxed);
        let clean = texts.writing(|| redactor.clean_pretty_json(self, room + room / 8));
        let mut text = match clean {
            Some(text) => text,
            None => {
                let value = serde_json::to_value(self).unwrap_or(Value::Null);
                let value = redactor.redact_json(&value);
                serde_json::to_string_pretty(&value).unwrap_or_else(|_| "null".into())
            }
        };
        text.push('\n');
        LAST.store(text.len(), Ordering::Relaxed);
        text
    }
}

/// The plan: into template values as [`crate::template::reused`] keeps
/// them, anywhere else as a stored value.
fn task_spec<S: serde::Serializer>(plan: &Option<Stored<'_>>, s: S) -> Result<S::Ok, S::Error> {
    if minijinja::value::serializing_for_value() {
        return crate::template::reused(&plan.map(|p| p.value), s);
    }
    plan.serialize(s)
}

impl<'a> BrainContext<'a> {
    fn of(b: &'a Brain) -> Self {
        BrainContext {
            name: &b.name,
            provider: &b.provider,
            model: &b.model,
            endpoint: b.endpoint.as_deref(),
            params: &b.params,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("prompt template {template}: {message}")]
pub struct TemplateError {
    pub template: String,
    pub message: String,
}

/// Renders `template` (minijinja syntax) with the package's fields, in the
/// environment `modix validate` checked it in (`crate::template`).
pub(super) fn render_prompt(
    template_name: &str,
    template: &str,
    ctx: &ContextPackage,
) -> Result<String, TemplateError> {
    #[derive(Serialize)]
    struct Seen<'a> {
        #[serde(flatten)]
        ctx: &'a ContextPackage<'a>,
        output_shape: &'a str,
    }
    let seen = Seen {
        ctx,
        output_shape: &ctx.output_shape,
    };
    crate::template::render(template_name, template, &seen).map_err(|e| TemplateError {
        template: template_name.to_owned(),
        message: match e.line() {
            Some(line) => format!("line {line}: {e}"),
            None => e.to_string(),
        },
    })
}

/// The prompt when an agent has no template: the package itself, with the
/// contract — the exact JSON to end with, and how to report failure.
pub(super) fn default_prompt(ctx: &ContextPackage) -> String {
    format!(
        "You are the {role} in a modix run (state {state}, attempt {attempt}).\n\
         Epic:\n{epic}\n\nContext package (JSON):\n{json}\n\n\
         End your answer with ONE JSON object of exactly this shape (alone, or in a \
         ```json block); its JSON Schema is {schema}:\n{shape}",
        role = ctx.role,
        state = ctx.state,
        attempt = ctx.attempt,
        epic = ctx.epic,
        json = serde_json::to_string_pretty(ctx).unwrap_or_default(),
        schema = ctx.output_schema_path.display(),
        shape = ctx.output_shape,
    )
}

#[cfg(test)]
mod tests {
    use super::super::inputs::{CameFrom, Output};
    use super::*;
    use crate::config::Commands;
    use crate::shell::Redactor;

    fn render(template: &str) -> Result<String, TemplateError> {
        let commands = Commands::default();
        let spec = serde_json::json!({"title": "t"});
        render_prompt(
            "p.md",
            template,
            &package(&commands, &spec, "2 tests failed"),
        )
    }

    static NO_OUTPUTS: std::collections::BTreeMap<String, Output> =
        std::collections::BTreeMap::new();

    fn package<'a>(
        commands: &'a Commands,
        spec: &'a Value,
        feedback: &'a str,
    ) -> ContextPackage<'a> {
        ContextPackage {
            epic: "Fix $(rm -rf x)",
            run_id: "01",
            workflow: "w",
            state: "EXECUTING",
            agent: "executor",
            role: "executor",
            attempt: 2,
            bound: Some(4),
            workdir: Path::new("/w"),
            output_schema: "execution_result",
            output_schema_path: Path::new("/s.json"),
            output_shape: "{\"shape\": 1}".into(),
            project: ProjectContext {
                name: "p",
                description: None,
                stack: &[],
                conventions: &[],
                commands,
            },
            brain: None,
            task_spec: Some(Stored {
                value: spec,
                blob: Some(1),
            }),
            previous_result: None,
            feedback: Some(feedback),
            outputs: Outputs(&NO_OUTPUTS),
            came_from: None,
            next_task: None,
            notes: &[],
            pending: &[],
            context_mode: ContextMode::Isolated,
            history: None,
        }
    }

    /// The text an agent reads is the package the record keeps, with
    /// secrets redacted, whichever way it was made.
    #[test]
    fn the_text_reads_back_as_the_package_with_secrets_redacted() {
        let commands = Commands::default();
        let spec = serde_json::json!({"title": "t", "n": [1, 2.5, null], "deep": {"ok": true}});
        let redactor = Redactor::new([("TOKEN", "tok-12345678")]);
        for feedback in ["line one\nline \"two\"", "leaked tok-12345678 here"] {
            let ctx = package(&commands, &spec, feedback);
            let text = ctx.text(&StoredTexts::new(redactor.clone()));
            assert!(text.ends_with("}\n"), "{text}");
            let read: Value = serde_json::from_str(&text).unwrap();
            let expected = redactor
                .redact_json(&serde_json::to_value(&ctx).unwrap())
                .into_owned();
            assert_eq!(read, expected);
            assert!(!text.contains("tok-12345678"), "{text}");
        }
    }

    /// The task spec's template values are made once and kept while it
    /// stays the same; a spec that changed is rendered as it is now, and
    /// one that comes back is rendered as it was.
    #[test]
    fn a_task_spec_is_rendered_as_it_is_at_each_step() {
        let commands = Commands::default();
        let template = "{{ task_spec.title }} {{ task_spec | tojson }}";
        let render =
            |spec: &Value| render_prompt("t.md", template, &package(&commands, spec, "f")).unwrap();
        let first = serde_json::json!({"title": "one", "tasks": [1, 2]});
        let second = serde_json::json!({"title": "two", "tasks": [1, 2, 3]});
        for _ in 0..2 {
            assert_eq!(render(&first), r#"one {"tasks": [1, 2], "title": "one"}"#);
            assert_eq!(render(&first), r#"one {"tasks": [1, 2], "title": "one"}"#);
            assert_eq!(
                render(&second),
                r#"two {"tasks": [1, 2, 3], "title": "two"}"#
            );
        }
        // And the package as written is the spec itself.
        let text = package(&commands, &second, "f").text(&StoredTexts::new(Redactor::default()));
        let read: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read["task_spec"], second);
    }

    #[test]
    fn renders_fields_and_json() {
        let out = render(
            "{{ epic }} {{ attempt }}/{{ bound }} {{ task_spec | tojson }} {% if feedback %}{{ feedback }}{% endif %}{{ missing.deep }} {{ output_shape }}",
        )
        .unwrap();
        assert_eq!(
            out,
            "Fix $(rm -rf x) 2/4 {\"title\": \"t\"} 2 tests failed {\"shape\": 1}"
        );
    }

    /// The names `modix validate` lets a template use are exactly the
    /// package's fields (every optional one filled in here) and the shape
    /// its answer must take, which templates see beside them.
    #[test]
    fn template_check_knows_every_field_of_the_package() {
        let commands = Commands::default();
        let params = serde_json::Map::new();
        let brain = Brain {
            name: "b".into(),
            provider: "p".into(),
            model: "m".into(),
            endpoint: Some("https://e".into()),
            api_key_env: None,
            params: params.clone(),
            capabilities: Vec::new(),
        };
        let history = [serde_json::json!(1)];
        let ctx = ContextPackage {
            epic: "e",
            run_id: "01",
            workflow: "w",
            state: "S",
            agent: "a",
            role: "r",
            attempt: 1,
            bound: Some(1),
            workdir: Path::new("/w"),
            output_schema: "any",
            output_schema_path: Path::new("/s.json"),
            output_shape: "{}".into(),
            project: ProjectContext {
                name: "p",
                description: Some("d"),
                stack: &[],
                conventions: &[],
                commands: &commands,
            },
            brain: Some(BrainContext::of(&brain)),
            task_spec: None,
            previous_result: None,
            feedback: Some("f"),
            outputs: Outputs(&Default::default()),
            came_from: None,
            next_task: Some("t"),
            notes: &[],
            pending: &[],
            context_mode: ContextMode::Shared,
            history: Some(&history),
        };
        fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
            for (k, v) in v.as_object().into_iter().flatten() {
                out.push(format!("{prefix}{k}"));
                walk(&format!("{prefix}{k}."), v, out);
            }
        }
        let mut fields = Vec::new();
        walk("", &serde_json::to_value(&ctx).unwrap(), &mut fields);
        fields.push("output_shape".into());
        fields.sort();
        assert_eq!(fields, crate::template::context_fields());
    }

    #[test]
    fn template_errors_name_the_template_and_line() {
        let e = render("a\n{% if %}").unwrap_err();
        assert!(
            e.to_string().starts_with("prompt template p.md: line 2"),
            "{e}"
        );
    }

    /// Values shaped like what agents answer: nesting, empty containers,
    /// escapes, line breaks, non-ASCII text, numbers of each kind.
    fn answers() -> [Value; 3] {
        [
            serde_json::json!({
                "passed": false,
                "failures": [{"test": "t\"1\"", "why": "line one\nline two\ttab"}],
                "none": [], "empty": {}, "n": [1, -2, 2.5, 1e300, null, true],
                "deep": {"a": {"b": [[], [{}], ["ü ✓ \u{1}"]]}}
            }),
            serde_json::json!({"title": "plan", "tasks": [{"id": 1, "files": ["a.rs"]}]}),
            serde_json::json!([]),
        ]
    }

    /// Outputs of three states (stored as blobs 10, 11, 12) and a step that
    /// came back from the first, with its output.
    fn quoted(answers: &[Value; 3]) -> (std::collections::BTreeMap<String, Output>, CameFrom) {
        let outputs = ["TESTING", "PLANNING", "EXECUTING"]
            .iter()
            .zip(answers)
            .enumerate()
            .map(|(i, (state, output))| {
                let out = Output {
                    schema: format!("schema_{i}"),
                    seq: i as u32 + 1,
                    output: output.clone(),
                    blob: 10 + i as i64,
                };
                (state.to_string(), out)
            })
            .collect();
        let came_from = CameFrom {
            seq: 3,
            state: "TESTING".into(),
            event: "fail".into(),
            reason: Some("2 tests failed".into()),
            output: Some(answers[0].clone()),
            output_blob: Some(10),
        };
        (outputs, came_from)
    }

    /// The values a package quotes from the record are written from the
    /// run's texts, made once: the package's text is byte for byte what
    /// serde_json writes of it, the first time (texts made) and after
    /// (texts reused), and the texts are kept.
    #[test]
    fn quoted_values_are_written_once_and_the_text_is_unchanged() {
        let commands = Commands::default();
        let answers = answers();
        let (outputs, came_from) = quoted(&answers);
        let mut ctx = package(&commands, &answers[1], "fix it");
        ctx.outputs = Outputs(&outputs);
        ctx.came_from = Some(CameFromView(&came_from));
        ctx.previous_result = Some(Stored {
            value: &answers[2],
            blob: Some(12),
        });
        let expected = serde_json::to_string_pretty(&ctx).unwrap() + "\n";
        let texts = StoredTexts::new(Redactor::default());
        assert_eq!(ctx.text(&texts), expected);
        assert_eq!(ctx.text(&texts), expected);
        // Kept by the package's writing: asked with another value, each
        // blob answers with its own.
        let other = serde_json::json!({"other": true});
        for (blob, value) in [(1, &answers[1]), (10, &answers[0]), (12, &answers[2])] {
            let kept = texts.text(blob, &other).expect("kept");
            assert_eq!(kept.as_str(), serde_json::to_string_pretty(value).unwrap());
        }
        // Anywhere else the package is its values (the record's copy).
        let value = serde_json::to_value(&ctx).unwrap();
        assert_eq!(value["outputs"]["TESTING"]["output"], answers[0]);
        assert_eq!(value["came_from"]["output"], answers[0]);
    }

    /// A quoted value with a secret in it is never kept: the package that
    /// quotes it is redacted, every time.
    #[test]
    fn a_quoted_value_with_a_secret_is_redacted_every_time() {
        let commands = Commands::default();
        let spec = serde_json::json!({"title": "use tok-12345678 to log in"});
        let texts = StoredTexts::new(Redactor::new([("TOKEN", "tok-12345678")]));
        for _ in 0..2 {
            let text = package(&commands, &spec, "f").text(&texts);
            assert!(!text.contains("tok-12345678"), "{text}");
            assert!(text.contains("[REDACTED:TOKEN]"), "{text}");
        }
        assert!(texts.text(1, &spec).is_none());
    }

    /// A text is kept by its blob, whose content never changes: another
    /// value under the same blob is written as first kept (which is why
    /// only values read from the record are quoted by blob).
    #[test]
    fn texts_are_kept_by_blob() {
        let texts = StoredTexts::new(Redactor::default());
        let (a, b) = (serde_json::json!({"a": 1}), serde_json::json!({"b": 2}));
        assert_eq!(texts.text(7, &a).unwrap().as_str(), "{\n  \"a\": 1\n}");
        assert_eq!(texts.text(7, &b).unwrap().as_str(), "{\n  \"a\": 1\n}");
        assert_eq!(texts.text(8, &b).unwrap().as_str(), "{\n  \"b\": 2\n}");
    }
}
