//! `modix doctor`: what is installed, what is set, and whether the agents the
//! workflow needs can run.

use super::output::table;
use super::{Ctx, Output};
use crate::doctor::{self, Report};
use crate::error::{Error, Exit};
use crate::orchestrator::{Engine, SCHEMA_VERSION};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &DoctorArgs) -> Result<Exit, Error> {
    let project = ctx.project("readiness cannot be checked")?;
    let engine = Engine::new()?;
    let report = doctor::diagnose(&engine, &project);
    if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["schema_version"] = SCHEMA_VERSION.into();
        ctx.out.json(&v);
    } else {
        print_report(&report, &ctx.out);
    }
    Ok(if report.ready { Exit::Ok } else { Exit::Failed })
}

fn print_report(r: &Report, out: &Output) {
    let mut shells = table(["shell", "found", "version", "requires", "status"]);
    for s in &r.shells {
        shells.add_row(vec![
            s.name.clone(),
            s.path
                .as_ref()
                .map_or("not found".into(), |p| p.display().to_string()),
            s.version.clone().unwrap_or_else(|| "-".into()),
            s.requires.clone().unwrap_or_else(|| "-".into()),
            if s.ok {
                "ok".into()
            } else {
                s.problem.clone().unwrap_or_default()
            },
        ]);
    }
    out.line(format!("Shells (agent CLIs)\n{shells}"));
    let mut brains = table(["brain", "provider", "model", "key"]);
    for b in &r.brains {
        let key = match (&b.api_key_env, b.key_present) {
            (Some(var), Some(true)) => format!("${var} is set"),
            (Some(var), _) => format!("${var} is missing"),
            (None, _) => "no key needed".into(),
        };
        brains.add_row(vec![
            b.name.clone(),
            b.provider.clone(),
            b.model.clone(),
            key,
        ]);
    }
    out.line(format!("\nBrains (LLM profiles)\n{brains}"));
    let mut agents = table(["agent", "role", "runs with", "in workflow", "status"]);
    for a in &r.agents {
        agents.add_row(vec![
            a.id.clone(),
            a.role.clone(),
            a.binding.clone(),
            if a.used_by_workflow {
                "yes".into()
            } else {
                "no".into()
            },
            if a.ready {
                "ready".into()
            } else {
                a.problems.join("; ")
            },
        ]);
    }
    out.line(format!("\nAgents\n{agents}"));
    let blocked: Vec<&str> = r
        .agents
        .iter()
        .filter(|a| a.used_by_workflow && !a.ready)
        .map(|a| a.id.as_str())
        .collect();
    if r.ready {
        out.line(format!(
            "\nReady: every agent of workflow `{}` can run. Try `modix go \"<epic>\"`.",
            r.workflow
        ));
    } else {
        out.line(format!(
            "\nNot ready: workflow `{}` needs {} — fix what the status column says.",
            r.workflow,
            blocked.join(", ")
        ));
    }
}
