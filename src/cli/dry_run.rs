//! `modix go --dry-run`: what a run would do — each agent's binding,
//! command line and environment names, the first agent's prompts — shown
//! and nothing more: no run recorded, no workspace made, no agent started.
//! The orchestrator makes the preview with a run's own code
//! (`orchestrator::preview`); this only shows it.

use serde_json::json;

use super::output::Table;
use super::{Ctx, Output};
use crate::error::{Error, Exit};
use crate::orchestrator::SCHEMA_VERSION;
use crate::orchestrator::preview::{self as plan, BindingPreview, Preview};
use crate::project::{Project, Workflow};
use crate::text::{self, escape_controls as esc};

pub fn show(
    ctx: &Ctx,
    project: &Project,
    workflow: Workflow,
    epic: &str,
    json: bool,
) -> Result<Exit, Error> {
    let preview = plan::preview(project, workflow, epic)?;
    if json {
        let mut v = serde_json::to_value(&preview).unwrap_or_default();
        v["schema_version"] = SCHEMA_VERSION.into();
        v["dry_run"] = true.into();
        v["placeholders"] = json!({
            plan::PREVIEW_RUN_ID: "the run's id, made when it starts",
            plan::RUN_DIR: "the run's folder, .modix/runs/<run-id>/",
            plan::WORKSPACE: "the run's workspace (its worktree or copy)",
            plan::PROMPT: "the prompt (the first agent's is under `first`)",
            plan::SYSTEM_PROMPT: "the system prompt",
        });
        ctx.out.json(&v);
        return Ok(Exit::Ok);
    }
    human(&ctx.out, &preview);
    Ok(Exit::Ok)
}

fn human(out: &Output, p: &Preview) {
    out.para(format!(
        "Dry run of workflow {} {}: nothing is recorded, no workspace is made, no agent is started.",
        esc(&p.workflow),
        p.workflow_version
    ));
    out.line("");
    let mut t = Table::new(["state", "agent", "binding", "at most"]).keep(&[0, 1]);
    for s in &p.states {
        t.row([
            s.state.clone(),
            s.agent.clone(),
            binding(&s.binding),
            s.worst_case_visits
                .map_or("-".to_owned(), |n| text::plural(n as usize, "visit")),
        ]);
    }
    out.table(&t);
    for s in &p.states {
        out.line("");
        let via = match s.prompt_via {
            crate::config::PromptMode::Stdin => "on stdin",
            crate::config::PromptMode::Argument => "as an argument",
            crate::config::PromptMode::File => "in a file",
        };
        out.line(esc(&format!(
            "{} ({}, timeout {}s, prompt {via}):",
            s.state, s.agent, s.timeout_secs
        )));
        let argv: Vec<String> = s.argv.iter().map(|a| quoted(a)).collect();
        out.line(format!("  {}", esc(&argv.join(" "))));
        if let Some(e) = &s.error {
            out.line(format!("  would not start: {}", esc(e)));
        }
        if !s.env.is_empty() {
            out.para(format!("  env: {}", esc(&s.env.join(" "))));
        }
    }
    out.line("");
    out.para(format!(
        "{} stands for the run's folder (.modix/runs/<run-id>/), {} for its workspace, {} for the prompt.",
        plan::RUN_DIR,
        plan::WORKSPACE,
        plan::PROMPT
    ));
    match &p.first {
        Some(f) => {
            out.line(esc(&format!(
                "--- prompt of {} ({}) ---\n{}",
                f.state, f.agent, f.prompt
            )));
            if let Some(system) = &f.system_prompt {
                out.line(esc(&format!("--- system prompt ---\n{system}")));
            }
        }
        None => {
            out.line("The run reaches no agent state before a gate or its end: no prompt to show.")
        }
    }
}

/// `shell + brain (model M)`, or `command: argv…`.
fn binding(b: &BindingPreview) -> String {
    match b {
        BindingPreview::Shell {
            shell,
            brain,
            model,
            ..
        } => format!("{shell} + {brain} (model {model})"),
        BindingPreview::Command { argv } => format!("command: {}", argv.join(" ")),
    }
}

/// An argument as a POSIX shell would need it written, for reading: as is
/// when it holds nothing a shell treats specially, else in single quotes.
fn quoted(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%<>".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn arguments_are_quoted_only_when_a_shell_would_need_it() {
        assert_eq!(quoted("--model"), "--model");
        assert_eq!(
            quoted("<run-dir>/schemas/x.json"),
            "<run-dir>/schemas/x.json"
        );
        assert_eq!(quoted("two words"), "'two words'");
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted(""), "''");
    }
}
