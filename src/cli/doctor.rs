//! `modix doctor`: what is installed, what is set or logged in, and whether
//! the agents the workflow needs can run; with `--deep`, whether each CLI
//! still takes the flags its shell passes; with `-v`, what environment each
//! agent receives.

use super::output::{Table, TableCell, Tone, toned};
use super::{Ctx, Output};
use crate::doctor::{self, AgentCheck, Report};
use crate::error::{Error, Exit};
use crate::orchestrator::{Engine, SCHEMA_VERSION};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON (with each agent's probe and environment names).
    #[arg(long)]
    pub json: bool,
    /// Also check every flag a shell passes against the CLI's own `--help`.
    #[arg(long)]
    pub deep: bool,
}

pub fn run(ctx: &Ctx, args: &DoctorArgs) -> Result<Exit, Error> {
    let project = ctx.project("readiness cannot be checked")?;
    let engine = Engine::new()?;
    let Some(report) = doctor::diagnose(&engine, &project, args.deep) else {
        ctx.out
            .error("interrupted; the checks still running were stopped", None);
        return Ok(Exit::Interrupted);
    };
    if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["schema_version"] = SCHEMA_VERSION.into();
        ctx.out.json(&v);
    } else {
        print_report(&report, &ctx.out);
        if ctx.cli.verbose > 0 {
            print_env(&report, &ctx.out);
        }
    }
    Ok(if report.ready { Exit::Ok } else { Exit::Failed })
}

/// `✓ ok` / `✗ what is wrong` on a terminal (green / red with colour);
/// the plain words when piped.
fn verdict(out: &Output, ok: bool, text: String) -> TableCell {
    match (out.tty, ok) {
        (false, _) => text.into(),
        (true, true) => toned(format!("✓ {text}"), Tone::Good),
        (true, false) => toned(format!("✗ {text}"), Tone::Bad),
    }
}

fn print_report(r: &Report, out: &Output) {
    print_clis(r, out);
    print_shells(r, out);
    let mut brains = Table::new(["brain", "provider", "model", "key"]);
    for b in &r.brains {
        // Not a verdict: a CLI's own login may stand in for a missing key.
        let key = match (&b.api_key_env, b.key_present) {
            (Some(var), Some(true)) => verdict(out, true, format!("${var} is set")),
            (Some(var), _) => format!("${var} is not set").into(),
            (None, _) => "no key needed".into(),
        };
        brains.row([
            b.name.clone().into(),
            b.provider.clone().into(),
            b.model.clone().into(),
            key,
        ]);
    }
    out.line("\nBrains (LLM profiles)");
    out.table(&brains);
    let mut agents =
        Table::new(["agent", "role", "runs with", "in workflow", "status"]).wrap_column(4);
    for a in &r.agents {
        agents.row([
            a.id.clone().into(),
            a.role.clone().into(),
            a.binding.clone().into(),
            if a.used_by_workflow { "yes" } else { "no" }.into(),
            verdict(out, a.ready, agent_status(a)),
        ]);
    }
    out.line("\nAgents");
    out.table(&agents);
    print_workspace(r, out);
    summary(r, out);
}

/// Every agent CLI modix knows that is on PATH, configured or not.
fn print_clis(r: &Report, out: &Output) {
    if r.clis.is_empty() {
        out.line("Agent CLIs on PATH: none of claude, codex, gemini, aider");
        return;
    }
    let mut t = Table::new(["CLI", "path", "version", "used by shells"]).wrap_column(1);
    for c in &r.clis {
        t.row([
            c.name.clone(),
            c.path.display().to_string(),
            c.version.clone().unwrap_or_else(|| "-".into()),
            if c.shells.is_empty() {
                "-".into()
            } else {
                c.shells.join(", ")
            },
        ]);
    }
    out.line("Agent CLIs on PATH");
    out.table(&t);
}

fn print_shells(r: &Report, out: &Output) {
    let mut shells = Table::new(["shell", "found", "version", "requires", "status"]).wrap_column(4);
    for s in &r.shells {
        let status = match (&s.problem, s.warnings.is_empty()) {
            (Some(p), _) => p.clone(),
            (None, true) => "ok".into(),
            (None, false) => format!("ok; warning: {}", s.warnings.join("; ")),
        };
        shells.row([
            s.name.clone().into(),
            s.path
                .as_ref()
                .map_or("not found".into(), |p| p.display().to_string())
                .into(),
            s.version.clone().unwrap_or_else(|| "-".into()).into(),
            s.requires.clone().unwrap_or_else(|| "-".into()).into(),
            verdict(out, s.ok, status),
        ]);
    }
    out.line("\nShells (agent CLIs)");
    out.table(&shells);
}

/// `ready` (and how it was checked), or every problem.
fn agent_status(a: &AgentCheck) -> String {
    if !a.ready {
        return a.problems.join("; ");
    }
    match (&a.probe, &a.auth) {
        (Some(p), _) => format!("ready (`{}` ran)", p.argv.join(" ")),
        (None, Some(auth)) => format!("ready ({})", auth.how),
        (None, None) => "ready".into(),
    }
}

/// Where runs will work, and git's part in it.
fn print_workspace(r: &Report, out: &Output) {
    let w = &r.workspace;
    let mode = match w.mode {
        crate::workspace::Mode::Worktree => "a git worktree on its own branch",
        crate::workspace::Mode::Copy => "a copy with a repository of its own",
        crate::workspace::Mode::InPlace => "the project itself (in_place: no isolation)",
    };
    let how = if w.automatic {
        " (projects.json names none)"
    } else {
        ""
    };
    let git = match (&w.git_version, &w.problem) {
        (_, Some(p)) => out.paint(format!("✗ {p}"), Tone::Bad),
        (Some(v), None) => out.paint(format!("git {v} ✓"), Tone::Good),
        _ => String::new(),
    };
    out.line(format!(
        "\nWorkspaces: each run works in {mode}{how}; {git}"
    ));
}

fn summary(r: &Report, out: &Output) {
    let blocked: Vec<&str> = r
        .agents
        .iter()
        .filter(|a| a.used_by_workflow && !a.ready)
        .map(|a| a.id.as_str())
        .collect();
    if r.ready {
        out.para(format!(
            "\n{}: every agent of workflow `{}` can run. Try `modix go \"<epic>\"`.",
            out.paint("Ready", Tone::Good),
            r.workflow
        ));
    } else if blocked.is_empty() {
        out.para(format!(
            "\n{}: `modix go` cannot make a run's workspace — see Workspaces above.",
            out.paint("Not ready", Tone::Bad)
        ));
    } else {
        out.para(format!(
            "\n{}: workflow `{}` needs {} — fix what the status column says.",
            out.paint("Not ready", Tone::Bad),
            r.workflow,
            blocked.join(", ")
        ));
    }
}

/// `doctor -v`: the names of the variables each agent receives, by where
/// they come from, and what is not passed.
fn print_env(r: &Report, out: &Output) {
    let mut t =
        Table::new(["agent", "receives (names only; values are never shown)"]).wrap_column(1);
    for a in &r.agents {
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for e in &a.env {
            match groups.iter_mut().find(|(from, _)| *from == e.from) {
                Some((_, names)) => names.push(&e.name),
                None => groups.push((e.from, vec![&e.name])),
            }
        }
        let text: Vec<String> = groups
            .iter()
            .map(|(from, names)| format!("{} ({from})", names.join(" ")))
            .collect();
        t.row([a.id.clone(), text.join("; ")]);
    }
    out.line("\nEnvironment");
    out.table(&t);
    let unset: Vec<&str> = r
        .agents
        .first()
        .map(|a| a.env_unset.iter().map(String::as_str).collect())
        .unwrap_or_default();
    if !unset.is_empty() {
        out.para(format!(
            "Allow-listed but not set here, so not passed: {}.",
            unset.join(" ")
        ));
    }
    out.para(
        "Nothing else reaches an agent: add a variable's name to \"env\": {\"allow\": [...]} in .modix/runtimes.json to pass it.",
    );
}
