//! The output schemas a project can name: the shipped ones (`task_spec`,
//! `execution_result`, `test_result`, `review_result`, `judge_decision`),
//! `any`, and the project's own `.modix/schemas/<id>.schema.json`.
//!
//! A project's own schemas are read and checked when the project loads
//! (JSON syntax, the draft 2020-12 meta-schema, and that the validator
//! compiles — with file and line), then held in a [`Schemas`] value that
//! the FSM checks, the manifest checks and the run are handed. There is no
//! global registry of user schemas: two projects (or two tests) in one
//! process never see each other's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use jsonschema::{Draft, Validator};
use serde_json::Value;

use super::{BASE_URI, SchemaError, Violation};
use crate::config::{ProjectPaths, confine, source};
use crate::diagnostics::{Diagnostic, Diagnostics, LineIndex};

/// The shipped schemas an agent's output may be checked against.
pub const SHIPPED_OUTPUTS: [&str; 5] = [
    "task_spec",
    "execution_result",
    "test_result",
    "review_result",
    "judge_decision",
];

/// The output "schema" that accepts any output, unchecked.
pub const ANY: &str = "any";

/// The draft every schema is read as (`$schema` may name it, or nothing).
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Past this many meta-schema violations in one file, the rest are counted.
const MAX_REPORTED: usize = 20;

/// The output schemas one project can name. `Schemas::default()` (and
/// [`Schemas::shipped`]) holds only the shipped ones.
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    user: BTreeMap<String, Arc<UserSchema>>,
    /// Ids of the project's schema files with errors (reported when they
    /// were read): known, so a reference to one is not reported again as
    /// unknown, but never used.
    broken: BTreeSet<String>,
}

#[derive(Debug)]
struct UserSchema {
    text: String,
    value: Value,
    validator: Validator,
}

impl Schemas {
    /// The shipped output schemas only (outside a project, in tests).
    pub fn shipped() -> &'static Schemas {
        static SHIPPED: OnceLock<Schemas> = OnceLock::new();
        SHIPPED.get_or_init(Schemas::default)
    }

    /// Reads and checks every `*.schema.json` of `.modix/schemas/`; each
    /// problem is a diagnostic, and a file with one is left out (its id is
    /// remembered as broken). A missing folder means no schemas of its own.
    pub fn load(paths: &ProjectPaths, diags: &mut Diagnostics) -> Schemas {
        let mut out = Schemas::default();
        let dir = paths.file("schemas");
        if std::fs::symlink_metadata(&dir).is_err() {
            return out;
        }
        let names = match list_json(&dir) {
            Ok(names) => names,
            Err(e) => {
                diags.push(
                    Diagnostic::error(
                        "schema::unreadable",
                        paths.shown("schemas"),
                        format!("cannot list output schemas: {e}"),
                    )
                    .with_help(
                        "make it a readable folder of `<id>.schema.json` files, or remove it",
                    ),
                );
                return out;
            }
        };
        for name in names {
            out.load_file(paths, &name, diags);
        }
        out
    }

    fn load_file(&mut self, paths: &ProjectPaths, name: &str, diags: &mut Diagnostics) {
        let display = paths.shown(&format!("schemas/{name}"));
        let Some(id) = name.strip_suffix(".schema.json") else {
            diags.push(
                Diagnostic::warning(
                    "schema::file-name",
                    &display,
                    format!("`{name}` is not read: output schema files are named `<id>.schema.json`"),
                )
                .with_help("rename it to `<id>.schema.json` (the id is what `output` and `output_schema` name), or move it out of .modix/schemas/"),
            );
            return;
        };
        if let Some(problem) = id_problem(id) {
            diags.push(problem.diagnostic(&display, id));
            return;
        }
        // Not read when it resolves outside `.modix/`: its text would show
        // in a syntax error's snippet.
        let resolved = match confine::resolve(&paths.modix_dir, &format!("schemas/{name}")) {
            Ok(r) => r,
            Err(p) => {
                let what = format!("output schema `{display}`");
                diags.push(
                    Diagnostic::error(p.code(), &display, p.message(&what)).with_help(p.help()),
                );
                self.broken.insert(id.to_owned());
                return;
            }
        };
        let before = diags.error_count();
        let schema = source::read(&resolved.path, &display, diags).and_then(|file| {
            let value = source::parse_json(&file, diags)?;
            let validator = checked(&file, id, &value, diags)?;
            Some(UserSchema {
                text: file.text,
                value,
                validator,
            })
        });
        match schema {
            Some(s) if diags.error_count() == before => {
                self.user.insert(id.to_owned(), Arc::new(s));
            }
            _ => {
                self.broken.insert(id.to_owned());
            }
        }
    }

    /// Every id an agent's `output` may name: the shipped outputs, the
    /// project's own (broken ones included: they are reported where they
    /// are), then `any`.
    pub fn output_ids(&self) -> Vec<&str> {
        let own = self.user.keys().chain(&self.broken).map(String::as_str);
        let mut ids: Vec<&str> = SHIPPED_OUTPUTS.into_iter().chain(own).collect();
        ids.push(ANY);
        ids
    }

    /// Whether `id` names an output schema (`any` included).
    pub fn knows(&self, id: &str) -> bool {
        id == ANY
            || SHIPPED_OUTPUTS.contains(&id)
            || self.user.contains_key(id)
            || self.broken.contains(id)
    }

    /// A project schema whose file has errors (reported when it was read).
    pub fn is_broken(&self, id: &str) -> bool {
        self.broken.contains(id)
    }

    fn unknown(&self, id: &str) -> SchemaError {
        SchemaError::Unknown {
            id: id.to_owned(),
            known: self.output_ids().join(", "),
        }
    }
}

impl Schemas {
    /// The ids of the project's own schemas that loaded, sorted.
    #[cfg(test)]
    pub fn own_ids(&self) -> impl Iterator<Item = &str> {
        self.user.keys().map(String::as_str)
    }

    /// The schema's text, e.g. to hand an agent the schema its output must
    /// satisfy; `{}` for `any`.
    pub fn text(&self, id: &str) -> Result<&str, SchemaError> {
        if let Some(s) = self.user.get(id) {
            return Ok(&s.text);
        }
        match id {
            ANY => Ok("{}"),
            _ if SHIPPED_OUTPUTS.contains(&id) => super::text(id),
            _ => Err(self.unknown(id)),
        }
    }

    /// The schema as JSON, for checking emit-rule conditions against it;
    /// `None` for `any`, unknown and broken ids.
    pub fn value(&self, id: &str) -> Option<Value> {
        self.value_ref(id).cloned()
    }

    /// [`Schemas::value`], borrowed: the shipped ones are parsed once per
    /// process, not at each step that judges an answer.
    fn value_ref(&self, id: &str) -> Option<&Value> {
        static SHIPPED: OnceLock<BTreeMap<&'static str, Value>> = OnceLock::new();
        if let Some(s) = self.user.get(id) {
            return Some(&s.value);
        }
        SHIPPED
            .get_or_init(|| {
                SHIPPED_OUTPUTS
                    .into_iter()
                    .filter_map(|id| Some((id, serde_json::from_str(super::text(id).ok()?).ok()?)))
                    .collect()
            })
            .get(id)
    }

    /// Schema `id` as strict structured output takes it (see
    /// [`super::strict`]); `None` for `any` and unknown ids.
    pub fn strict(&self, id: &str) -> Option<Value> {
        self.value(id).map(|v| super::strict(&v))
    }

    /// An answer judged as if the `null`s a strict-mode model gives for
    /// optional fields had been left out (see [`super::drop_optional_nulls`]).
    pub fn drop_optional_nulls(&self, id: &str, value: &mut Value) {
        if let Some(schema) = self.value_ref(id) {
            super::drop_optional_nulls(schema, value);
        }
    }

    /// Every way `instance` breaks output schema `id` (empty when valid;
    /// `any` accepts everything).
    pub fn validate(&self, id: &str, instance: &Value) -> Result<Vec<Violation>, SchemaError> {
        if let Some(s) = self.user.get(id) {
            return Ok(super::violations(&s.validator, instance, || {
                Some(s.value.clone())
            }));
        }
        match id {
            ANY => Ok(Vec::new()),
            _ if SHIPPED_OUTPUTS.contains(&id) => super::validate(id, instance),
            _ => Err(self.unknown(id)),
        }
    }
}

/// Why a file name's id cannot be a project schema's id.
enum IdProblem {
    NotAName,
    Shipped,
}

fn id_problem(id: &str) -> Option<IdProblem> {
    let name_ok = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Some(IdProblem::NotAName);
    }
    // Every embedded schema, config ones included: `$ref`s by file name
    // and the run's schema folder would otherwise mean two things.
    (id == ANY || super::ids().contains(&id)).then_some(IdProblem::Shipped)
}

impl IdProblem {
    fn diagnostic(&self, display: &str, id: &str) -> Diagnostic {
        match self {
            IdProblem::NotAName => Diagnostic::error(
                "schema::file-name",
                display,
                format!("`{id}` is not a valid schema id"),
            )
            .with_help("name the file `<id>.schema.json` with letters, digits, `_` and `-` only"),
            IdProblem::Shipped => Diagnostic::error(
                "schema::reserved-id",
                display,
                format!("output schema `{id}` has the id of a schema modix ships"),
            )
            .with_help(format!(
                "give it an id of its own (rename the file, e.g. `my_{id}.schema.json`); shipped ids: {}, any",
                super::ids().join(", ")
            )),
        }
    }
}

/// The schema checked as a draft 2020-12 JSON Schema and compiled: the
/// validator, or `None` with every problem reported.
fn checked(
    file: &source::SourceFile,
    id: &str,
    value: &Value,
    diags: &mut Diagnostics,
) -> Option<Validator> {
    let index = LineIndex::new(&file.text);
    let at = |d: Diagnostic, pointer: &str| match source::locate(&file.text, pointer, false) {
        Some(span) => d.with_pointer(pointer).with_span_in(&index, span),
        None => d.with_pointer(pointer),
    };
    if let Some(declared) = value.get("$schema").and_then(Value::as_str)
        && declared.trim_end_matches('#') != DRAFT_2020_12
    {
        let d = Diagnostic::error(
            "schema::draft",
            &file.display,
            format!(
                "the schema declares `{declared}`; modix reads output schemas as draft 2020-12"
            ),
        )
        .with_help(format!(
            "set \"$schema\": \"{DRAFT_2020_12}\", or leave `$schema` out"
        ));
        diags.push(at(d, "/$schema"));
        return None;
    }
    let meta = jsonschema::draft202012::meta::validator();
    let mut problems: Vec<(String, String)> = meta
        .iter_errors(value)
        .map(|e| (e.instance_path().as_str().to_owned(), e.to_string()))
        .collect();
    problems.sort();
    problems.dedup();
    if !problems.is_empty() {
        let more = problems.len().saturating_sub(MAX_REPORTED);
        for (pointer, message) in problems.into_iter().take(MAX_REPORTED) {
            let d = Diagnostic::error("schema::invalid", &file.display, message)
                .with_help("fix this keyword so the file is a valid JSON Schema (draft 2020-12)");
            diags.push(at(d, &pointer));
        }
        if more > 0 {
            diags.push(Diagnostic::error(
                "schema::invalid",
                &file.display,
                format!(
                    "{more} more problems in this schema (only the first {MAX_REPORTED} are listed)"
                ),
            ));
        }
        return None;
    }
    let registry = super::loaded().ok().map(|e| &e.registry);
    let mut options = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_base_uri(format!("{BASE_URI}{id}.schema.json"));
    if let Some(registry) = registry {
        options = options.with_registry(registry);
    }
    match options.build(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let d = Diagnostic::error(
                "schema::invalid",
                &file.display,
                format!("the schema does not compile: {e}"),
            )
            .with_help("fix the keyword; a `$ref` may point inside this file or to a shipped schema (`https://modix.dev/schemas/<id>.schema.json`), never to the network");
            diags.push(at(d, e.instance_path().as_str()));
            None
        }
    }
}

/// The names of the `*.json` entries of `dir`, sorted.
fn list_json(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A project folder holding these `.modix/schemas/` files.
    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, ProjectPaths) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let paths = ProjectPaths::at(tmp.path());
        std::fs::create_dir_all(paths.file("schemas")).expect("mkdir");
        for (name, text) in files {
            std::fs::write(paths.file(&format!("schemas/{name}")), text).expect("write");
        }
        (tmp, paths)
    }

    const PLAN: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["steps"],
  "properties": {
    "steps": { "type": "array", "items": { "type": "string" } },
    "risk": { "enum": ["low", "high"] }
  },
  "additionalProperties": false
}
"#;

    fn load(files: &[(&str, &str)]) -> (Schemas, Diagnostics) {
        let (_tmp, paths) = project(files);
        let mut diags = Diagnostics::new();
        let schemas = Schemas::load(&paths, &mut diags);
        (schemas, diags)
    }

    fn codes(diags: &Diagnostics) -> Vec<(String, Option<usize>)> {
        diags
            .items()
            .iter()
            .map(|d| (d.code.clone(), d.line))
            .collect()
    }

    #[test]
    fn a_project_schema_is_an_output_like_the_shipped_ones() {
        let (s, diags) = load(&[("plan.schema.json", PLAN)]);
        assert!(diags.is_empty(), "{:?}", diags.items());
        assert!(s.knows("plan") && s.knows("task_spec") && s.knows(ANY));
        assert!(!s.knows("plans"));
        assert_eq!(s.own_ids().collect::<Vec<_>>(), ["plan"]);
        assert!(s.output_ids().ends_with(&["plan", "any"]));
        assert!(s.text("plan").expect("text").contains("\"steps\""));
        let strict = s.strict("plan").expect("strict");
        assert_eq!(strict["additionalProperties"], false, "{strict}");
        assert!(
            s.validate("plan", &json!({"steps": ["a"]}))
                .expect("ok")
                .is_empty()
        );
        let v = s
            .validate("plan", &json!({"steps": [1], "risks": 2}))
            .expect("ok");
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].pointer, "/risks");
        assert_eq!(v[0].allowed_keys, ["risk", "steps"]);
        // The shipped ones and `any` go through the same value.
        assert!(s.validate(ANY, &json!(3)).expect("ok").is_empty());
        assert!(
            !s.validate("test_result", &json!({}))
                .expect("ok")
                .is_empty()
        );
        assert!(s.validate("nope", &json!({})).is_err());
        // Another project (or none) does not see it.
        assert!(!Schemas::shipped().knows("plan"));
    }

    #[test]
    fn a_schema_that_is_not_a_schema_is_reported_where_it_breaks() {
        let broken = "{\n  \"type\": \"object\",\n  \"properties\": {\n    \"a\": { \"type\": 12 }\n  }\n}\n";
        let (s, diags) = load(&[("bad.schema.json", broken)]);
        assert_eq!(codes(&diags), [("schema::invalid".to_owned(), Some(4))]);
        assert_eq!(diags.items()[0].file, ".modix/schemas/bad.schema.json");
        assert_eq!(
            diags.items()[0].pointer.as_deref(),
            Some("/properties/a/type")
        );
        // Known, so nobody reports it again as unknown; never used.
        assert!(s.knows("bad") && s.is_broken("bad") && s.value("bad").is_none());
    }

    #[test]
    fn what_a_schema_file_may_not_be() {
        let draft7 = r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}"#;
        let remote = r#"{"$ref": "https://example.com/other.json"}"#;
        let bad_regex = r#"{"type": "string", "pattern": "("}"#;
        let (s, diags) = load(&[
            ("task_spec.schema.json", "{}"),
            ("any.schema.json", "{}"),
            ("old.schema.json", draft7),
            ("net.schema.json", remote),
            ("re.schema.json", bad_regex),
            ("syntax.schema.json", "{ \"type\": }"),
            ("notes.json", "{}"),
            ("sp ace.schema.json", "{}"),
        ]);
        let found: Vec<(&str, &str)> = diags
            .items()
            .iter()
            .map(|d| (d.file.rsplit('/').next().unwrap_or(""), d.code.as_str()))
            .collect();
        let expected = [
            ("any.schema.json", "schema::reserved-id"),
            ("net.schema.json", "schema::invalid"),
            ("notes.json", "schema::file-name"),
            ("old.schema.json", "schema::draft"),
            ("re.schema.json", "schema::invalid"),
            ("sp ace.schema.json", "schema::file-name"),
            ("syntax.schema.json", "config::syntax"),
            ("task_spec.schema.json", "schema::reserved-id"),
        ];
        for e in expected {
            assert!(found.contains(&e), "{e:?} not in {found:?}");
        }
        assert_eq!(found.len(), expected.len(), "{found:?}");
        let warning = diags
            .items()
            .iter()
            .find(|d| d.code == "schema::file-name" && d.file.ends_with("notes.json"));
        assert!(warning.is_some_and(|d| d.severity == crate::diagnostics::Severity::Warning));
        assert!(s.own_ids().next().is_none());
    }

    #[test]
    fn emit_rules_are_checked_against_a_project_schema() {
        let (s, _) = load(&[("plan.schema.json", PLAN), ("bad.schema.json", "{ oops")]);
        let fsm = |output: &str, when: &str| {
            format!(
                r#"id = "p"
version = "1.0.0"
initial = "A"
[states.A]
kind = "agent"
agent = "x"
output = "{output}"
emit = [
  {{ on = "output", when = '{when}', event = "ok" }},
  {{ on = "output", event = "ok" }},
  {{ on = "invalid_output", event = "ok" }},
  {{ on = "process_error", event = "ok" }},
  {{ on = "timeout", event = "ok" }},
]
[states.B]
kind = "terminal"
outcome = "success"
[[transitions]]
from = "A"
event = "ok"
to = "B"
"#
            )
        };
        let opts = crate::fsm::CompileOptions {
            default_max: 3,
            schemas: &s,
        };
        let errors = |text: &str| {
            let (_, d) = crate::fsm::compile_str(text, "p.toml", &opts);
            d.items()
                .iter()
                .filter(|d| d.severity == crate::diagnostics::Severity::Error)
                .map(|d| {
                    format!(
                        "{} {} {}",
                        d.code,
                        d.message,
                        d.help.clone().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
        };
        assert!(errors(&fsm("plan", r#"risk == "high""#)).is_empty());
        let e = errors(&fsm("plan", r#"riks == "high""#));
        assert!(
            e.len() == 1
                && e[0].starts_with("fsm::unknown-field")
                && e[0].contains("did you mean `risk`?"),
            "{e:?}"
        );
        let e = errors(&fsm("plan", r#"risk == "medium""#));
        assert!(
            e.len() == 1 && e[0].starts_with("fsm::type-mismatch"),
            "{e:?}"
        );
        // A broken project schema was reported with its file: nothing more here.
        assert!(errors(&fsm("bad", r#"anything == 1"#)).is_empty());
        let e = errors(&fsm("plna", r#"risk == "high""#));
        assert!(
            e.len() == 1 && e[0].contains("did you mean `plan`?"),
            "{e:?}"
        );
    }
}
