//! The context package an agent gets (a JSON document, also at `$MODIX_CONTEXT`)
//! and the prompt rendered from it with the agent's template.

use serde::Serialize;
use serde_json::Value;

use crate::config::{ContextMode, Project};

/// Everything an agent is told about the run it takes part in.
#[derive(Debug, Clone, Serialize)]
pub struct ContextPackage {
    pub epic: String,
    pub run_id: String,
    pub workflow: String,
    pub state: String,
    pub agent: String,
    pub role: String,
    /// 1 on the first visit of this state in the run.
    pub attempt: u32,
    /// The most visits this state can get in one run, from the workflow's bounds.
    pub bound: Option<u64>,
    pub workdir: String,
    pub output_schema: String,
    pub output_schema_path: String,
    pub project: ProjectContext,
    /// For shell agents: the brain's name, provider, model, endpoint and
    /// `params` (temperature, max_tokens, …), for CLIs or wrappers that use them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brain: Option<Value>,
    pub task_spec: Option<Value>,
    pub previous_result: Option<Value>,
    /// Why this state is visited again (test failures, why a result was rejected).
    pub feedback: Option<String>,
    /// `isolated`: only the fields above. `shared`: also `history`.
    pub context_mode: ContextMode,
    /// With `shared`, every message of the run so far, oldest first
    /// (`seq`, `kind`, `state`, `payload`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProjectContext {
    pub name: String,
    pub description: Option<String>,
    pub stack: Vec<String>,
    pub conventions: Vec<String>,
    pub commands: Value,
}

impl ProjectContext {
    pub fn from(project: &Project) -> Self {
        ProjectContext {
            name: project.name.clone(),
            description: project.description.clone(),
            stack: project.stack.clone(),
            conventions: project.conventions.clone(),
            commands: serde_json::to_value(&project.commands).unwrap_or(Value::Null),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("prompt template {template}: {message}")]
pub struct TemplateError {
    pub template: String,
    pub message: String,
}

/// Renders `template` (minijinja syntax) with the package's fields.
pub fn render_prompt(
    template_name: &str,
    template: &str,
    ctx: &ContextPackage,
) -> Result<String, TemplateError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    let err = |e: minijinja::Error| TemplateError {
        template: template_name.to_owned(),
        message: match e.line() {
            Some(line) => format!("line {line}: {e}"),
            None => e.to_string(),
        },
    };
    let tmpl = env.template_from_str(template).map_err(err)?;
    tmpl.render(minijinja::value::Serde(ctx)).map_err(err)
}

/// The prompt when an agent has no template: the package itself, with the contract.
pub fn default_prompt(ctx: &ContextPackage) -> String {
    format!(
        "You are the {role} in a modix run (state {state}, attempt {attempt}).\n\
         Epic:\n{epic}\n\nContext package (JSON):\n{json}\n\n\
         Answer with one JSON object satisfying the JSON Schema in {schema}.\n",
        role = ctx.role,
        state = ctx.state,
        attempt = ctx.attempt,
        epic = ctx.epic,
        json = serde_json::to_string_pretty(ctx).unwrap_or_default(),
        schema = ctx.output_schema_path,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ContextPackage {
        ContextPackage {
            epic: "Fix $(rm -rf x)".into(),
            run_id: "01".into(),
            workflow: "w".into(),
            state: "EXECUTING".into(),
            agent: "executor".into(),
            role: "executor".into(),
            attempt: 2,
            bound: Some(4),
            workdir: "/w".into(),
            output_schema: "execution_result".into(),
            output_schema_path: "/s.json".into(),
            project: ProjectContext {
                name: "p".into(),
                description: None,
                stack: vec![],
                conventions: vec![],
                commands: Value::Null,
            },
            brain: None,
            task_spec: Some(serde_json::json!({"title": "t"})),
            previous_result: None,
            feedback: Some("2 tests failed".into()),
            context_mode: ContextMode::Isolated,
            history: None,
        }
    }

    #[test]
    fn renders_fields_and_json() {
        let out = render_prompt(
            "t.md",
            "{{ epic }} {{ attempt }}/{{ bound }} {{ task_spec | tojson }} {% if feedback %}{{ feedback }}{% endif %}{{ missing.deep }}",
            &ctx(),
        )
        .unwrap();
        assert_eq!(out, "Fix $(rm -rf x) 2/4 {\"title\": \"t\"} 2 tests failed");
    }

    #[test]
    fn template_errors_name_the_template_and_line() {
        let e = render_prompt("p.md", "a\n{% if %}", &ctx()).unwrap_err();
        assert!(
            e.to_string().starts_with("prompt template p.md: line 2"),
            "{e}"
        );
    }
}
