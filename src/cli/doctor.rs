//! `modix doctor`: what is installed, what is set, and whether the agents the
//! workflow needs can run.

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::{Cli, Output, load_project};
use crate::doctor::{self, Report};
use crate::exit;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cli: &Cli, args: &DoctorArgs, out: &Output) -> u8 {
    let project = match load_project(cli, out, "readiness cannot be checked") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let report = doctor::diagnose(&project);
    if args.json {
        out.json(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        print_report(&report, out);
    }
    if report.ready { exit::OK } else { exit::FAILED }
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    t
}

fn print_report(r: &Report, out: &Output) {
    let mut shells = table(&["shell", "found", "version", "requires", "status"]);
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
    let mut brains = table(&["brain", "provider", "model", "key"]);
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
    let mut agents = table(&["agent", "role", "runs with", "in workflow", "status"]);
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
