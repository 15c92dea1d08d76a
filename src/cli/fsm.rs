//! `modix fsm list|show|check|graph`: the workflow machines visible here
//! (built-in and project), as tables, check reports and diagrams.

use std::path::Path;

use serde_json::json;

use super::output::table;
use super::{Ctx, Output};
use crate::diagnostics::{Diagnostics, unknown_name_help};
use crate::error::{Error, Exit};
use crate::fsm::render::{self, Format};
use crate::fsm::{Catalog, CompileOptions, Machine, Source, StateKind, compile_file};

#[derive(Debug, clap::Subcommand)]
pub enum FsmCommand {
    /// List every visible machine (built-in and project).
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a machine's states and transitions.
    Show {
        /// The machine's id (`modix fsm list` shows them).
        id: String,
        /// Print the machine as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check machines (all visible ones by default); exit 2 on errors.
    Check {
        /// Machine ids or FSM file paths.
        targets: Vec<String>,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Draw a machine as a Mermaid or Graphviz dot diagram.
    Graph {
        /// The machine's id (`modix fsm list` shows them).
        id: String,
        /// The diagram language: mermaid or dot.
        #[arg(long, default_value = "mermaid", value_parser = super::enum_parser::<Format>())]
        format: Format,
    },
}

impl FsmCommand {
    pub fn json(&self) -> bool {
        match self {
            FsmCommand::List { json } | FsmCommand::Show { json, .. } => *json,
            FsmCommand::Check { json, .. } => *json,
            FsmCommand::Graph { .. } => false,
        }
    }
}

pub fn run(ctx: &Ctx, cmd: &FsmCommand) -> Result<Exit, Error> {
    let out = &ctx.out;
    let cwd =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let project = crate::config::find_project(ctx.cli.project.as_deref(), &cwd);
    let fsm_dir = project.as_ref().map(|p| p.modix_dir.join("fsm"));
    // The project's loop bound, as `validate` and `go` compile with it;
    // problems in runtimes.json are `validate`'s to report.
    let opts = project
        .as_ref()
        .and_then(|p| crate::config::read_runtimes(p, &mut Diagnostics::new()))
        .map_or_else(CompileOptions::default, |r| CompileOptions {
            default_max: r.loops.default_max,
        });
    let (catalog, diags) = Catalog::load(fsm_dir.as_deref(), &opts);
    let shown = |m: &Machine| match m.source() {
        Source::Builtin(_) => "built-in".to_owned(),
        Source::File(p) => project
            .as_ref()
            .map_or_else(|| p.display().to_string(), |pp| pp.display(p)),
    };
    match cmd {
        FsmCommand::List { json } => Ok(list(&catalog, &diags, *json, &shown, out)),
        FsmCommand::Show { id, json } => Ok(show(lookup(&catalog, id)?, *json, &shown, out)),
        FsmCommand::Graph { id, format } => {
            out.line(render::render(lookup(&catalog, id)?, *format).trim_end());
            Ok(Exit::Ok)
        }
        FsmCommand::Check { targets, json } => {
            check(&catalog, &diags, targets, &cwd, &opts, *json, out)
        }
    }
}

fn lookup<'a>(catalog: &'a Catalog, id: &str) -> Result<&'a Machine, Error> {
    if let Some(m) = catalog.get(id) {
        return Ok(m);
    }
    Err(match catalog.entry(id) {
        Some(e) => Error::Config {
            diagnostics: Box::new(e.diagnostics.clone()),
            doing: "the machine cannot be shown; `modix fsm check` lists every problem",
        },
        None => Error::usage(
            format!("no machine with id `{id}`"),
            unknown_name_help(id, "machine", catalog.ids()),
        ),
    })
}

fn list(
    catalog: &Catalog,
    diags: &Diagnostics,
    json: bool,
    shown: &dyn Fn(&Machine) -> String,
    out: &Output,
) -> Exit {
    if json {
        let items: Vec<_> = catalog
            .machines()
            .map(|m| {
                json!({
                    "id": m.id(), "version": m.version().to_string(), "source": shown(m),
                    "states": m.states().count(), "description": m.description(),
                })
            })
            .collect();
        out.json(&json!({ "machines": items, "problems": diags.to_json() }));
    } else {
        let mut t = table(["id", "version", "source", "states", "description"]);
        for m in catalog.machines() {
            t.add_row([
                m.id().to_owned(),
                m.version().to_string(),
                shown(m),
                m.states().count().to_string(),
                m.description().to_owned(),
            ]);
        }
        out.line(t.to_string());
        if diags.has_errors() {
            out.warn("some FSM files have errors and are not listed; run `modix fsm check`");
        }
    }
    Exit::Ok
}

fn kind_cells(kind: &StateKind) -> (String, String) {
    match kind {
        StateKind::Input { event } => ("input".into(), format!("event {event}")),
        StateKind::Agent(a) => ("agent".into(), format!("{} → {}", a.agent, a.output)),
        StateKind::Terminal { outcome } => {
            ("terminal".into(), format!("{outcome:?}").to_lowercase())
        }
    }
}

fn show(m: &Machine, json: bool, shown: &dyn Fn(&Machine) -> String, out: &Output) -> Exit {
    let name = |id: crate::fsm::StateId| m.state(id).name.clone();
    if json {
        let states: Vec<_> = m.states().map(|(_, s)| s).collect();
        let transitions: Vec<_> = m
            .transitions()
            .iter()
            .map(|t| {
                json!({
                    "from": name(t.from), "event": t.event, "to": name(t.to),
                    "max": t.max, "exhausted": t.exhausted.map(name),
                })
            })
            .collect();
        out.json(&json!({
            "id": m.id(), "version": m.version().to_string(), "description": m.description(),
            "source": shown(m), "initial": name(m.initial()), "content_hash": m.content_hash(),
            "states": states, "transitions": transitions, "worst_case": worst_json(m),
        }));
        return Exit::Ok;
    }
    out.line(format!(
        "{} {} ({}) — {}",
        m.id(),
        m.version(),
        shown(m),
        m.description()
    ));
    let mut st = table(["state", "kind", "agent → output / outcome", "on_enter"]);
    for (id, s) in m.states() {
        let (kind, detail) = kind_cells(&s.kind);
        let marker = if id == m.initial() { " (initial)" } else { "" };
        st.add_row([
            format!("{}{marker}", s.name),
            kind,
            detail,
            s.on_enter.join(", "),
        ]);
    }
    out.line(st.to_string());
    let mut tt = table(["from", "event", "to", "max", "exhausted"]);
    for t in m.transitions() {
        tt.add_row([
            name(t.from),
            t.event.clone(),
            name(t.to),
            t.max.map(|x| x.to_string()).unwrap_or_default(),
            t.exhausted.map(name).unwrap_or_default(),
        ]);
    }
    out.line(tt.to_string());
    out.line(format!("worst case: {}", worst_text(m)));
    Exit::Ok
}

fn worst_json(m: &Machine) -> serde_json::Value {
    let w = m.worst_case();
    let visits: serde_json::Map<_, _> = w
        .visits
        .iter()
        .map(|(s, n)| (m.state(*s).name.clone(), json!(n)))
        .collect();
    json!({ "transitions": w.transitions, "exact": w.exact, "agent_invocations": visits })
}

/// `exactly 12 transitions; agent invocations at most: PLANNING 1, ...`
pub fn worst_text(m: &Machine) -> String {
    let w = m.worst_case();
    let how = if w.exact {
        "exactly"
    } else {
        "at most (upper bound)"
    };
    let visits: Vec<String> = w
        .visits
        .iter()
        .map(|(s, n)| format!("{} {n}", m.state(*s).name))
        .collect();
    let mut s = format!("{how} {} transitions", w.transitions);
    if !visits.is_empty() {
        s.push_str(&format!(
            "; agent invocations at most: {}",
            visits.join(", ")
        ));
    }
    s
}

fn check(
    catalog: &Catalog,
    all_diags: &Diagnostics,
    targets: &[String],
    cwd: &Path,
    opts: &CompileOptions,
    json: bool,
    out: &Output,
) -> Result<Exit, Error> {
    // (label, machine if clean) per checked target, plus their diagnostics.
    let mut results: Vec<(String, Option<std::sync::Arc<Machine>>)> = Vec::new();
    let mut diags = Diagnostics::new();
    if targets.is_empty() {
        diags.append(all_diags.clone());
        for (i, e) in catalog.entries().iter().enumerate() {
            // An overridden built-in is not what runs here, so it is not reported.
            if e.is_builtin() && !catalog.is_effective(i) {
                continue;
            }
            results.push((e.display.clone(), e.machine.clone()));
        }
    }
    for target in targets {
        let path = cwd.join(target);
        if path.is_file() {
            let (m, d) = compile_file(&path, target, opts);
            diags.append(d);
            results.push((target.clone(), m.map(std::sync::Arc::new)));
        } else if let Some(e) = catalog.entry(target) {
            diags.append(e.diagnostics.clone());
            results.push((e.display.clone(), e.machine.clone()));
        } else {
            return Err(Error::usage(
                format!("`{target}` is neither a file nor a known machine id"),
                unknown_name_help(target, "machine", catalog.ids()),
            ));
        }
    }
    diags.sort();
    let code = if diags.has_errors() {
        Exit::Usage
    } else {
        Exit::Ok
    };
    if json {
        let machines: Vec<_> = results
            .iter()
            .map(|(file, m)| match m {
                Some(m) => json!({
                    "file": file, "id": m.id(), "version": m.version().to_string(),
                    "ok": true, "worst_case": worst_json(m),
                }),
                None => json!({ "file": file, "ok": false }),
            })
            .collect();
        let mut v = diags.to_json();
        v["machines"] = json!(machines);
        out.json(&v);
        return Ok(code);
    }
    out.diagnostics(&diags);
    for (file, m) in &results {
        match m {
            Some(m) => out.line(format!(
                "{} {}: ok — worst case {}",
                m.id(),
                m.version(),
                worst_text(m)
            )),
            None => out.line(format!("{file}: has errors")),
        }
    }
    if !diags.is_empty() {
        out.line(format!(
            "{} error(s), {} warning(s)",
            diags.error_count(),
            diags.warning_count()
        ));
    }
    Ok(code)
}
