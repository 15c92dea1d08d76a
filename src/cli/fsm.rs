//! `modix fsm list|show|check|graph`: the workflow machines visible here
//! (built-in and project), as tables, check reports and diagrams.

use std::path::Path;

use serde_json::json;

use super::output::{Table, error_json};
use super::{Ctx, Output, runs};
use crate::diagnostics::{Diagnostics, unknown_name_help};
use crate::error::{Error, Exit};
use crate::fsm::render::{self, Format, RunPath};
use crate::fsm::{
    Catalog, CompileOptions, DEFAULT_TIMEOUT_SECS, Machine, Source, StateKind, compile_file,
};
use crate::schema::Schemas;

/// What `modix fsm graph` draws in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart (GitHub and many editors draw it).
    Mermaid,
    /// Graphviz's dot language.
    Dot,
    /// SVG, drawn by Graphviz's `dot` (which must be on PATH).
    Svg,
}

#[derive(Debug, clap::Subcommand)]
pub enum FsmCommand {
    /// List every visible machine (built-in and project).
    #[command(after_help = super::examples(&[("modix fsm list", "built-in and project workflows")]))]
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a machine's states and transitions.
    #[command(after_help = super::examples(&[
        ("modix fsm show plan_execute_test", "states, transitions, bounds, worst case"),
        ("modix fsm show plan_execute_test --json", "the same for tools"),
    ]))]
    Show {
        /// The machine's id (`modix fsm list` shows them).
        id: String,
        /// Print the machine as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check machines (all visible ones by default); exit 2 on errors.
    #[command(after_help = super::examples(&[
        ("modix fsm check", "every visible machine"),
        ("modix fsm check .modix/fsm/mine.toml", "one file, before it is used"),
    ]))]
    Check {
        /// Machine ids or FSM file paths (default: every visible machine).
        targets: Vec<String>,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Draw a machine as a Mermaid or Graphviz diagram, optionally with the path a run took.
    #[command(after_help = super::examples(&[
        ("modix fsm graph plan_execute_test", "Mermaid, for a README or an issue"),
        ("modix fsm graph plan_execute_test --format svg > flow.svg", "a picture (needs Graphviz)"),
        ("modix fsm graph --run last --format svg > run.svg", "the newest run's path, highlighted"),
    ]))]
    Graph {
        /// The machine's id (`modix fsm list` shows them); with --run, the run's workflow by default.
        #[arg(value_name = "ID", required_unless_present = "run")]
        id: Option<String>,
        /// The diagram language: mermaid, dot, or svg (drawn by Graphviz's `dot`).
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
        /// Highlight the path this run took: an id prefix, `last` (the
        /// default when --run is given alone), `last~1`, …
        #[arg(long, value_name = "RUN", num_args = 0..=1, default_missing_value = "last")]
        run: Option<String>,
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
    // The project's loop bound and output schemas, as `validate` and `go`
    // compile with them; problems in runtimes.json or in a schema file
    // are `validate`'s to report.
    let schemas = project.as_ref().map_or_else(Schemas::default, |p| {
        Schemas::load(p, &mut Diagnostics::new())
    });
    let default_max = project
        .as_ref()
        .and_then(|p| crate::config::read_runtimes(p, &mut Diagnostics::new()))
        .map_or(CompileOptions::default().default_max, |r| {
            r.loops.default_max
        });
    let opts = CompileOptions {
        default_max,
        schemas: &schemas,
    };
    let (catalog, diags) = Catalog::load(fsm_dir.as_deref(), &opts);
    let shown = |m: &Machine| match m.source() {
        Source::Builtin(_) => "built-in".to_owned(),
        Source::File(p) => project
            .as_ref()
            .map_or_else(|| p.display().to_string(), |pp| pp.display(p)),
    };
    match cmd {
        FsmCommand::List { json } => Ok(list(&catalog, &diags, *json, &shown, out)),
        FsmCommand::Show { id, json } => {
            let machine = lookup(&catalog, id)?;
            let ceiling = project.as_ref().and_then(|p| project_ceiling(ctx, p, id));
            Ok(show(machine, ceiling.as_ref(), *json, &shown, out))
        }
        FsmCommand::Graph { id, format, run } => {
            graph(ctx, &catalog, id.as_deref(), *format, run.as_deref())
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
        let mut t = Table::new(["id", "version", "source", "states", "description"]);
        for m in catalog.machines() {
            t.row([
                m.id().to_owned(),
                m.version().to_string(),
                shown(m),
                m.states().count().to_string(),
                m.description().to_owned(),
            ]);
        }
        out.table(&t);
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
        StateKind::Human { question, events } => (
            "human".into(),
            format!("{question} → {}", events.join(" | ")),
        ),
        StateKind::Terminal { outcome } => {
            ("terminal".into(), format!("{outcome:?}").to_lowercase())
        }
    }
}

/// The pre-flight ceiling `go` would print for workflow `id` in this
/// project (its timeouts, retries and budget), when the project loads and
/// can run it; `None` otherwise (`validate` says why).
fn project_ceiling(
    ctx: &Ctx,
    paths: &crate::config::ProjectPaths,
    id: &str,
) -> Option<crate::orchestrator::Ceiling> {
    let purpose = crate::project::Purpose::Run { workflow: Some(id) };
    let (project, _) = crate::project::load_for(paths, &ctx.settings, &ctx.settings_diags, purpose);
    let project = project?;
    let workflow = project.workflow(Some(id)).ok()?;
    Some(crate::orchestrator::ceiling(&project, &workflow))
}

fn show(
    m: &Machine,
    ceiling: Option<&crate::orchestrator::Ceiling>,
    json: bool,
    shown: &dyn Fn(&Machine) -> String,
    out: &Output,
) -> Exit {
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
                    "caught": t.caught(),
                })
            })
            .collect();
        out.json(&json!({
            "id": m.id(), "version": m.version().to_string(), "description": m.description(),
            "source": shown(m), "initial": name(m.initial()), "content_hash": m.content_hash(),
            "states": states, "transitions": transitions, "worst_case": worst_json(m),
            "ceiling": ceiling,
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
    let mut st = Table::new(["state", "kind", "agent → output / outcome", "on_enter"]);
    for (id, s) in m.states() {
        let (kind, detail) = kind_cells(&s.kind);
        let marker = if id == m.initial() { " (initial)" } else { "" };
        st.row([
            format!("{}{marker}", s.name),
            kind,
            detail,
            s.on_enter.join(", "),
        ]);
    }
    out.table(&st);
    if let Some(rt) = recovery_table(m) {
        out.table(&rt);
    }
    let mut tt = Table::new(["from", "event", "to", "max", "exhausted"]);
    // A catch's transitions (one per class) are its row above.
    for t in m.transitions().iter().filter(|t| t.caught().is_none()) {
        tt.row([
            name(t.from),
            t.event.clone(),
            name(t.to),
            t.max.map(|x| x.to_string()).unwrap_or_default(),
            t.exhausted.map(name).unwrap_or_default(),
        ]);
    }
    out.table(&tt);
    out.line(format!("worst case: {}", worst_text(m)));
    if let Some(c) = ceiling {
        out.line(format!(
            "with this project's timeouts and budget (what `modix go` checks): {}",
            c.text()
        ));
    }
    Exit::Ok
}

/// One row per `retry` and `catch` rule; `None` when no state has one.
fn recovery_table(m: &Machine) -> Option<Table> {
    let mut t = Table::new(["state", "on", "then"]);
    let mut any = false;
    for (_, s) in m.states() {
        let Some(a) = s.agent() else { continue };
        let classes = |on: &[crate::fsm::FailureClass]| {
            on.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
        };
        for r in &a.retry {
            let cap = r
                .max_delay_secs
                .map(|c| format!(", at most {c} s"))
                .unwrap_or_default();
            let then = format!(
                "retry up to {} times, waiting {} s ×{} each time{cap}, jitter {}",
                r.max_attempts, r.interval_secs, r.backoff_rate, r.jitter
            );
            t.row([s.name.clone(), classes(&r.on), then]);
            any = true;
        }
        for c in &a.catch {
            let then = format!("catch → {} (events catch:<class>)", c.next);
            t.row([s.name.clone(), classes(&c.on), then]);
            any = true;
        }
    }
    any.then_some(t)
}

/// Per state, as `{"NAME": n}`.
fn per_state(
    m: &Machine,
    list: impl IntoIterator<Item = (crate::fsm::StateId, u64)>,
) -> serde_json::Value {
    let map: serde_json::Map<_, _> = list
        .into_iter()
        .map(|(s, n)| (m.state(s).name.clone(), json!(n)))
        .collect();
    serde_json::Value::Object(map)
}

fn worst_json(m: &Machine) -> serde_json::Value {
    let w = m.worst_case();
    let retried = w
        .visits
        .iter()
        .map(|(s, _)| (*s, m.worst_invocations(*s).unwrap_or(0)));
    let wall = m.worst_wall_time_with_default(DEFAULT_TIMEOUT_SECS);
    json!({
        "transitions": w.transitions, "exact": w.exact,
        "agent_invocations": per_state(m, w.visits.iter().copied()),
        "agent_invocations_with_retries": per_state(m, retried),
        "invocations_with_retries": w.invocations,
        "human_gates": per_state(m, w.gates.iter().copied()),
        "wall_time": {
            "secs": wall.total.as_secs(), "exact": wall.exact,
            "default_timeout_secs": DEFAULT_TIMEOUT_SECS,
            "human_waits_excluded": wall.human_waits,
        },
    })
}

/// `exactly 12 transitions; agent invocations at most: PLANNING 1, ...`,
/// then (when there are any) retries and gates, and the wall time.
pub fn worst_text(m: &Machine) -> String {
    let w = m.worst_case();
    let how = if w.exact {
        "exactly"
    } else {
        "at most (upper bound)"
    };
    let listed = |list: &[(crate::fsm::StateId, u64)],
                  f: &dyn Fn(crate::fsm::StateId, u64) -> u64| {
        list.iter()
            .map(|&(s, n)| format!("{} {}", m.state(s).name, f(s, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!("{how} {} transitions", w.transitions);
    if w.visits.is_empty() {
        return s;
    }
    s.push_str(&format!(
        "; agent invocations at most: {}",
        listed(&w.visits, &|_, n| n)
    ));
    let retries = m
        .states()
        .any(|(_, st)| st.agent().is_some_and(|a| !a.retry.is_empty()));
    if retries {
        let retried = listed(&w.visits, &|id, _| m.worst_invocations(id).unwrap_or(0));
        s.push_str(&format!(
            "; with retries at most {} invocations ({retried})",
            w.invocations
        ));
    }
    if !w.gates.is_empty() {
        s.push_str(&format!(
            "; human gates at most: {}",
            listed(&w.gates, &|_, n| n)
        ));
    }
    let wall = m.worst_wall_time_with_default(DEFAULT_TIMEOUT_SECS);
    let waits = if wall.human_waits {
        " plus human waits"
    } else {
        ""
    };
    s.push_str(&format!(
        "; wall time at most {}{waits} ({DEFAULT_TIMEOUT_SECS} s per invocation unless the state sets timeout_secs)",
        crate::text::duration(u64::try_from(wall.total.as_millis()).unwrap_or(u64::MAX))
    ));
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
        if code != Exit::Ok {
            // Failing findings carry the error object every `--json` command prints on failure.
            let e = Error::Config {
                diagnostics: Box::new(diags.clone()),
                doing: "the machines with errors cannot run",
            };
            v["error"] = error_json(&e)["error"].take();
            v["schema_version"] = crate::orchestrator::SCHEMA_VERSION.into();
        }
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
            "{}, {}",
            crate::text::plural(diags.error_count(), "error"),
            crate::text::plural(diags.warning_count(), "warning")
        ));
    }
    Ok(code)
}

/// `fsm graph`: the diagram, with the path of `--run` highlighted, as
/// Mermaid, dot, or SVG drawn by Graphviz.
fn graph(
    ctx: &Ctx,
    catalog: &Catalog,
    id: Option<&str>,
    format: GraphFormat,
    run: Option<&str>,
) -> Result<Exit, Error> {
    let path = match run {
        Some(reference) => Some(run_path(ctx, reference)?),
        None => None,
    };
    let id = match (id, &path) {
        (Some(id), _) => id.to_owned(),
        (None, Some((workflow, _, _))) => workflow.clone(),
        (None, None) => {
            return Err(Error::usage(
                "which machine? give its id or --run RUN",
                "`modix fsm list` shows the ids",
            ));
        }
    };
    let machine = lookup(catalog, &id)?;
    let steps = match &path {
        Some((workflow, hash, steps)) => {
            if *workflow != id {
                return Err(Error::usage(
                    format!("the run used workflow `{workflow}`, not `{id}`"),
                    format!(
                        "draw it with `modix fsm graph {workflow} --run …`, or leave out the id"
                    ),
                ));
            }
            if hash != machine.content_hash() {
                ctx.out.warn(format!(
                    "workflow `{id}` changed since the run; its path is drawn on the current definition"
                ));
            }
            steps.clone()
        }
        None => RunPath::default(),
    };
    let text = match format {
        GraphFormat::Mermaid => render::render(machine, Format::Mermaid, &steps),
        GraphFormat::Dot => render::render(machine, Format::Dot, &steps),
        GraphFormat::Svg => return svg(&render::render(machine, Format::Dot, &steps)),
    };
    ctx.out.line(text.trim_end());
    Ok(Exit::Ok)
}

/// The workflow, workflow hash and transitions of a recorded run.
fn run_path(ctx: &Ctx, reference: &str) -> Result<(String, String, RunPath), Error> {
    let (store, run) = runs::find(&ctx.paths()?, reference)?;
    let steps = store
        .transitions(&run.id)?
        .into_iter()
        .map(|t| (t.from, t.event, t.to))
        .collect();
    Ok((run.workflow_id, run.workflow_hash, RunPath { steps }))
}

/// Pipes dot text through Graphviz (`dot -Tsvg`) to stdout.
fn svg(dot: &str) -> Result<Exit, Error> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let Ok(program) = which::which("dot") else {
        return Err(Error::usage(
            "--format svg needs Graphviz's `dot`, which is not on PATH",
            "install Graphviz (apt install graphviz, brew install graphviz), or use --format dot or mermaid",
        ));
    };
    let mut child = Command::new(program)
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("cannot start Graphviz's `dot`", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot.as_bytes())
            .map_err(|e| Error::io("cannot write to Graphviz's `dot`", e))?;
    }
    let done = child
        .wait_with_output()
        .map_err(|e| Error::io("Graphviz's `dot` did not finish", e))?;
    if !done.status.success() {
        return Err(Error::io(
            "Graphviz's `dot` failed",
            std::io::Error::other(String::from_utf8_lossy(&done.stderr).trim().to_owned()),
        ));
    }
    Ok(Exit::Ok)
}
