//! `modix go` and `modix resume`: run a workflow with live progress, then a
//! summary that says where to look.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::loops::{self, LoopCount, Loops};
use super::output::{self, Tone};
use super::{Ctx, Output, runs};
use crate::error::{Error, Exit};
use crate::orchestrator::{
    self, ChangeSummary, Engine, EventSink, RunEvent, RunOptions, RunReport, SCHEMA_VERSION,
};
use crate::project::Purpose;
use crate::store::{RunStatus, Store, StoreError, TransitionRecord};
use crate::workspace::Mode;

#[derive(Debug, clap::Args)]
pub struct GoArgs {
    /// What to do, in words; passed to the agents verbatim (never through a shell).
    #[arg(required_unless_present = "epic_file", conflicts_with = "epic_file")]
    pub epic: Option<String>,
    /// Read the epic from a file instead (`-`: standard input), for one too
    /// long for the command line; at most 1 MiB of UTF-8 text.
    #[arg(long, value_name = "PATH")]
    pub epic_file: Option<PathBuf>,
    /// Show what the run would do — each agent's binding, command line and
    /// environment names, and the first agent's prompts — and stop: nothing
    /// is recorded, no workspace is made, no agent is started.
    #[arg(long)]
    pub dry_run: bool,
    /// For this run only, bind AGENT to another brain of brains.json
    /// (repeatable).
    #[arg(long, value_name = "AGENT=BRAIN", value_parser = assignment)]
    pub brain: Vec<(String, String)>,
    /// For this run only, give AGENT's brain another model (repeatable).
    #[arg(long, value_name = "AGENT=MODEL", value_parser = assignment)]
    pub model: Vec<(String, String)>,
    /// For this run only, pass this variable of your environment to every
    /// agent, beside runtimes.json's `env.allow` (repeatable).
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Workflow FSM id (default: the project's `workflow`; `modix fsm list` shows them).
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// One JSON object per event on stdout, ending with the summary.
    #[arg(long)]
    pub json: bool,
    /// Start the run's branch from this branch, tag or commit instead of HEAD
    /// (worktree runs).
    #[arg(long, value_name = "REV")]
    pub base: Option<String>,
    /// Start from your uncommitted changes too (worktree runs; by default
    /// the run starts from HEAD without them, and says so).
    #[arg(long)]
    pub include_dirty: bool,
    /// Start an in-place run even though the tree has uncommitted changes.
    #[arg(long)]
    pub allow_dirty: bool,
    /// Refuse to start when the worst case the workflow's bounds allow may
    /// cost more than USD (default: runtimes.json budget.refuse_above_usd).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub max_cost: Option<f64>,
    /// Start even when the worst case may cost more than --max-cost (or
    /// budget.refuse_above_usd) allows, or cannot be bounded.
    #[arg(long)]
    pub force_cost: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run to continue (default: the newest interrupted run): an id or
    /// any unique prefix of it, `last` for the newest run, `last~1` for the
    /// one before, …
    #[arg(value_name = "RUN")]
    pub run: Option<String>,
    /// One JSON object per event on stdout, ending with the summary.
    #[arg(long)]
    pub json: bool,
    /// Put the run's branch back at its last recorded step if it moved, and
    /// record what was there as discarded.
    #[arg(long)]
    pub reset: bool,
    /// Redrive a failed run from this state (default: the state whose
    /// failure ended it); its loop bounds start afresh.
    #[arg(long, value_name = "STATE")]
    pub from: Option<String>,
    /// A note for the agents of a redriven run (it reaches their context and
    /// prompt as a person's word).
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

pub fn run(ctx: &Ctx, args: &GoArgs) -> Result<Exit, Error> {
    let epic = epic(args)?;
    // Before anything else, so a Ctrl-C during start-up is never lost.
    let engine = Engine::new()?;
    let purpose = Purpose::Run {
        workflow: args.workflow.as_deref(),
    };
    let project = ctx.project_for("nothing was run", purpose)?;
    let project = with_overrides(ctx, project, args)?;
    let workflow = project.workflow(args.workflow.as_deref())?;
    if args.dry_run {
        return super::dry_run::show(ctx, &project, workflow, &epic, args.json);
    }
    preflight(ctx, &project, &workflow, args)?;
    first_prompt(&project, args, &epic)?;
    ready(&engine, &project, &workflow)?;
    if engine.interrupted() {
        ctx.out.error(
            "interrupted before the run started; nothing was recorded",
            None,
        );
        return Ok(Exit::Interrupted);
    }
    let opts = RunOptions {
        base: args.base.clone(),
        include_dirty: args.include_dirty,
        allow_dirty: args.allow_dirty,
        overrides: Some(overrides_of(args))
            .filter(|o| !o.is_empty())
            .and_then(|o| serde_json::to_value(o).ok()),
        ..options(ctx, args.json)
    };
    let loops = Loops::new(std::sync::Arc::clone(&workflow.machine));
    let mut sink = Progress::new(ctx.out, args.json, opts.stream, Some(loops));
    let report = orchestrator::start(&engine, &project, workflow, &epic, &opts, &mut sink);
    let waiting = at_gate(&report);
    let exit = finish(report, &mut sink)?;
    answer_in_place(ctx, &engine, &project, exit, waiting, args.json)
}

/// The first agent's prompts rendered as the run would render them (the
/// dry run's own code), before anything is recorded: a template that fails
/// on this epic fails here, exit 2, with no run. What else the preview
/// meets the run meets and says itself.
fn first_prompt(project: &crate::project::Project, args: &GoArgs, epic: &str) -> Result<(), Error> {
    let workflow = project.workflow(args.workflow.as_deref())?;
    match orchestrator::preview::preview(project, workflow, epic) {
        Err(e @ orchestrator::RunError::Template(_)) => Err(e.into()),
        _ => Ok(()),
    }
}

/// On a terminal, a run that waits at a gate is answered in place: the
/// question is asked, and the answer continues the run (again, at the next
/// gate). Elsewhere — piped, `--json`, `-q` — the run waits for `modix
/// approve`/`reject`/`answer`, as `go` said.
fn answer_in_place(
    ctx: &Ctx,
    engine: &Engine,
    project: &crate::project::Project,
    exit: Exit,
    waiting: Option<super::gate::Waiting>,
    json: bool,
) -> Result<Exit, Error> {
    let Some(w) = waiting.filter(|_| super::gate::interactive(ctx, json)) else {
        return Ok(exit);
    };
    match super::gate::ask(engine, project, &w)? {
        Some(answer) => {
            let opts = RunOptions {
                answer: Some(answer),
                ..RunOptions::default()
            };
            continue_run(ctx, engine, project, &w.run_id, opts, json)
        }
        None => Ok(exit),
    }
}

/// The gate a run stopped at, if it waits at one.
fn at_gate(report: &Result<RunReport, orchestrator::RunError>) -> Option<super::gate::Waiting> {
    let r = report.as_ref().ok()?;
    (r.status == RunStatus::Waiting).then(|| super::gate::Waiting {
        run_id: r.run_id.clone(),
        workflow: r.workflow.clone(),
        state: r.state.clone(),
        question: r.reason.clone().unwrap_or_default(),
    })
}

pub fn resume(ctx: &Ctx, args: &ResumeArgs) -> Result<Exit, Error> {
    // Before anything else, so a Ctrl-C during start-up is never lost.
    let engine = Engine::new()?;
    // The run's own workflow is checked when it is looked up; other broken
    // files need not stop it.
    let project = ctx.project_for("nothing was run", Purpose::Run { workflow: None })?;
    let run_id = resumable(&project, args.run.as_deref())?;
    let run = Store::open_read_only(&project.config.paths.db())?.run(&run_id)?;
    let project = as_run_started(ctx, project, &run)?;
    let failed = run.status == RunStatus::Failed;
    let note = super::control::note(&args.note);
    let redrive = match (failed, &args.from, &note) {
        (true, from, note) => Some(orchestrator::Redrive {
            from: from.clone(),
            note: note.clone(),
            by: super::control::who(),
        }),
        (false, None, None) => None,
        (false, _, _) => {
            return Err(Error::usage(
                format!("run {run_id} has not failed: --from and --note redrive a failed run"),
                format!("`modix resume {run_id}` alone continues an interrupted or stopped run"),
            ));
        }
    };
    let opts = RunOptions {
        reset: args.reset,
        redrive,
        ..RunOptions::default()
    };
    continue_run(ctx, &engine, &project, &run_id, opts, args.json)
}

/// Drives run `run_id` on from where its record ends (a resume, a redrive,
/// a gate's answer), with the live view `go` has, once its agents are ready.
pub(super) fn continue_run(
    ctx: &Ctx,
    engine: &Engine,
    project: &crate::project::Project,
    run_id: &str,
    opts: RunOptions,
    json: bool,
) -> Result<Exit, Error> {
    // The run's own workflow, when it is still defined (else resume says why).
    let store = Store::open_read_only(&project.config.paths.db())?;
    let workflow_id = store.run(run_id)?.workflow_id;
    let mut loops = None;
    if let Ok(workflow) = project.workflow(Some(&workflow_id)) {
        ready(engine, project, &workflow)?;
        loops = Some(replayed(&workflow, &store.transitions(run_id)?));
    }
    drop(store);
    let mut waiting = None;
    let exit = with_progress(ctx, json, opts, loops, |opts, sink| {
        let report = orchestrator::resume(engine, project, run_id, opts, sink);
        waiting = at_gate(&report);
        report
    })?;
    answer_in_place(ctx, engine, project, exit, waiting, json)
}

/// Runs `drive` with the live view `go` has and its exit codes.
pub(super) fn with_progress(
    ctx: &Ctx,
    json: bool,
    opts: RunOptions,
    loops: Option<Loops>,
    drive: impl FnOnce(&RunOptions, &mut dyn EventSink) -> Result<RunReport, orchestrator::RunError>,
) -> Result<Exit, Error> {
    let opts = RunOptions {
        stream: options(ctx, json).stream,
        ..opts
    };
    let mut sink = Progress::new(ctx.out, json, opts.stream, loops);
    let report = drive(&opts, &mut sink);
    finish(report, &mut sink)
}

/// The largest epic `--epic-file` takes.
const MAX_EPIC_BYTES: u64 = 1 << 20;

/// The epic: the argument, or the text of `--epic-file` (`-`: stdin);
/// never empty.
fn epic(args: &GoArgs) -> Result<String, Error> {
    let Some(path) = &args.epic_file else {
        let epic = args.epic.clone().unwrap_or_default();
        if epic.trim().is_empty() {
            return Err(Error::usage(
                "the epic is empty",
                "say what to do: modix go \"Add a --verbose flag\"",
            ));
        }
        return Ok(epic);
    };
    let stdin = path == Path::new("-");
    let name = if stdin {
        "the epic on standard input".to_owned()
    } else {
        format!("the epic file {}", path.display())
    };
    let too_big = |size: String| {
        Error::usage(
            format!("{name} is {size}; an epic may be at most 1 MiB"),
            "say what to do in fewer words, and point the agents at a file in the project for the details",
        )
    };
    let mut bytes = Vec::new();
    if !stdin
        && let Ok(m) = std::fs::metadata(path)
        && m.is_file()
        && m.len() > MAX_EPIC_BYTES
    {
        return Err(too_big(format!("{} bytes", m.len())));
    }
    // A pipe or a terminal may keep modix waiting: a Ctrl-C meanwhile ends
    // it (nothing is created yet) rather than being held for a run.
    let read = crate::stops::unheld(|| {
        let limit = MAX_EPIC_BYTES + 1;
        if stdin {
            std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
        } else {
            std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
        }
    });
    if let Err(e) = read {
        return Err(Error::usage(
            format!("cannot read {name}: {e}"),
            "give the path of a readable text file, or `-` to read the epic from standard input",
        ));
    }
    if bytes.len() as u64 > MAX_EPIC_BYTES {
        return Err(too_big("more than 1 MiB".to_owned()));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::usage(
            format!(
                "{name} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            "save it as UTF-8",
        )
    })?;
    if text.contains('\0') {
        return Err(Error::usage(
            format!("{name} contains a NUL byte; an epic is text"),
            "save the epic as plain text",
        ));
    }
    if text.trim().is_empty() {
        return Err(Error::usage(
            format!("{name} is empty"),
            "write what to do in it, e.g. \"Add a --verbose flag\"",
        ));
    }
    Ok(text)
}

/// `AGENT=VALUE`, as `--brain` and `--model` take it.
fn assignment(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((agent, value)) if !agent.trim().is_empty() && !value.trim().is_empty() => {
            Ok((agent.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("`{s}` is not AGENT=VALUE (e.g. executor=opus)")),
    }
}

/// The project with this run's `--brain`, `--model` and `--env` applied,
/// before anything checks or records it; an override that does nothing (an
/// unset variable, an agent the workflow does not use) is warned about.
fn with_overrides(
    ctx: &Ctx,
    project: crate::project::Project,
    args: &GoArgs,
) -> Result<crate::project::Project, Error> {
    apply_overrides(ctx, project, &overrides_of(args), args.workflow.as_deref())
}

fn overrides_of(args: &GoArgs) -> crate::project::Overrides {
    crate::project::Overrides {
        brains: args.brain.clone(),
        models: args.model.clone(),
        env: args.env.clone(),
    }
}

fn apply_overrides(
    ctx: &Ctx,
    project: crate::project::Project,
    overrides: &crate::project::Overrides,
    workflow: Option<&str>,
) -> Result<crate::project::Project, Error> {
    if overrides.is_empty() {
        return Ok(project);
    }
    let (project, notes) = project.with_overrides(overrides, workflow)?;
    for note in notes {
        ctx.out.warn(note);
    }
    Ok(project)
}

/// The project as `run` was started on it: the `--brain`, `--model` and
/// `--env` its `go` was given applied again (the variables' values as they
/// are now), so a resumed, answered or forked run runs the same agents.
pub(super) fn as_run_started(
    ctx: &Ctx,
    project: crate::project::Project,
    run: &crate::store::Run,
) -> Result<crate::project::Project, Error> {
    let Some(stored) = &run.overrides else {
        return Ok(project);
    };
    let overrides: crate::project::Overrides =
        serde_json::from_value(stored.clone()).map_err(|e| {
            Error::Run(orchestrator::RunError::Internal(format!(
                "run {}: its recorded --brain/--model/--env cannot be read: {e}",
                run.id
            )))
        })?;
    apply_overrides(ctx, project, &overrides, Some(&run.workflow_id))
}

/// Refuses to start (or resume) a run whose agents cannot run: a CLI
/// missing or at a version its shell rejects, no key or login, a command
/// agent's probe failing — before anything is recorded.
pub(super) fn ready(
    engine: &Engine,
    project: &crate::project::Project,
    workflow: &crate::project::Workflow,
) -> Result<(), Error> {
    crate::doctor::readiness(engine, project, workflow).map_err(|lines| {
        Error::usage(
            format!("not ready: {}", lines.join("; ")),
            "`modix doctor` says more; set MODIX_SKIP_READINESS=1 to run anyway",
        )
    })
}

/// The pre-flight ceiling: the worst case a run of `workflow` can take
/// and cost, from its bounds and the project's limits (what `modix fsm
/// show` prints), said before the run starts; a run whose worst case may
/// cost more than `--max-cost` (else `budget.refuse_above_usd`) is refused,
/// with nothing recorded, unless `--force-cost`.
fn preflight(
    ctx: &Ctx,
    project: &crate::project::Project,
    workflow: &crate::project::Workflow,
    args: &GoArgs,
) -> Result<(), Error> {
    let ceiling = orchestrator::ceiling(project, workflow);
    if args.json {
        let mut line = serde_json::json!({ "schema_version": SCHEMA_VERSION, "type": "ceiling" });
        if let (Some(map), Ok(serde_json::Value::Object(c))) =
            (line.as_object_mut(), serde_json::to_value(&ceiling))
        {
            map.extend(c);
        }
        ctx.out.json_line(&line);
    } else if !ctx.out.quiet {
        output::to_stderr(&format!("Worst case: {}\n", ceiling.text()));
    }
    let limit = args
        .max_cost
        .or(project.config.runtimes.budget.refuse_above_usd);
    let Some(why) = limit.and_then(|l| ceiling.refusal(l)) else {
        return Ok(());
    };
    if args.force_cost {
        ctx.out
            .warn(format!("{why}; starting anyway (--force-cost)"));
        return Ok(());
    }
    Err(Error::usage(
        format!("refusing to start: {why}; nothing was recorded"),
        ceiling.remedy(),
    ))
}

/// A dollar amount: a number, not negative.
fn parse_usd(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim_start_matches('$')
        .parse()
        .map_err(|_| format!("`{s}` is not an amount in USD (e.g. 2.50)"))?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("`{s}` is not an amount in USD (e.g. 2.50)"))
    }
}

/// The id of the run to resume: the one named (`last~N` resolved here, as
/// the orchestrator knows only ids), or the newest interrupted run.
fn resumable(project: &crate::project::Project, reference: Option<&str>) -> Result<String, Error> {
    let db = project.config.paths.db();
    let nothing = || {
        Error::usage(
            "there is no interrupted run to resume",
            "`modix history` lists the runs; `modix go \"<epic>\"` starts a new one",
        )
    };
    if !db.exists() {
        return Err(match reference {
            Some(r) => StoreError::UnknownRun {
                prefix: r.to_owned(),
            }
            .into(),
            None => nothing(),
        });
    }
    let store = Store::open(&db)?;
    if let Some(reference) = reference {
        return Ok(runs::resolve(&store, reference)?.id);
    }
    let candidates = store.runs_matching(
        &[
            RunStatus::Interrupted,
            RunStatus::Stopped,
            RunStatus::Running,
        ],
        None,
        None,
    )?;
    candidates
        .into_iter()
        .find(|r| {
            matches!(
                runs::status(&r.run).status,
                RunStatus::Interrupted | RunStatus::Stopped
            )
        })
        .map(|r| r.run.id)
        .ok_or_else(nothing)
}

/// The loops of a run that has recorded `transitions` so far.
fn replayed(workflow: &crate::project::Workflow, transitions: &[TransitionRecord]) -> Loops {
    let mut loops = Loops::new(std::sync::Arc::clone(&workflow.machine));
    for t in transitions {
        loops.advance(&t.event, &t.to);
    }
    loops
}

fn options(ctx: &Ctx, json: bool) -> RunOptions {
    RunOptions {
        stream: ctx.cli.verbose > 0 && !json,
        ..RunOptions::default()
    }
}

fn finish(
    report: Result<RunReport, orchestrator::RunError>,
    sink: &mut Progress,
) -> Result<Exit, Error> {
    sink.finish_bar();
    Ok(match report?.status {
        RunStatus::Succeeded => Exit::Ok,
        RunStatus::Interrupted | RunStatus::Running | RunStatus::Stopped => Exit::Interrupted,
        RunStatus::Waiting => Exit::Waiting,
        RunStatus::Failed => Exit::Failed,
    })
}

/// Live progress on stderr: a live line on a terminal, plain lines
/// otherwise, nothing but errors with `-q`; or one JSON object per event.
struct Progress {
    out: Output,
    json: bool,
    bar: Option<ProgressBar>,
    /// Held while `bar` is shown.
    echo: Option<QuietCtrlC>,
    step_started: Instant,
    /// Where the run stands in its workflow's loops (`None`: unknown).
    loops: Option<Loops>,
}

/// Stops the terminal from echoing `^C` while the live line is up, and
/// restores it after. indicatif keeps its line padded to the full width; an
/// echoed `^C` would wrap onto a new line, and the old live line above it
/// could no longer be cleared.
struct QuietCtrlC(Option<nix::sys::termios::Termios>);

impl QuietCtrlC {
    fn new() -> Self {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let stderr = std::io::stderr();
        let Ok(saved) = tcgetattr(&stderr) else {
            return QuietCtrlC(None);
        };
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHOCTL);
        match tcsetattr(&stderr, SetArg::TCSANOW, &quiet) {
            Ok(()) => QuietCtrlC(Some(saved)),
            Err(_) => QuietCtrlC(None),
        }
    }
}

impl Drop for QuietCtrlC {
    fn drop(&mut self) {
        use nix::sys::termios::{SetArg, tcsetattr};
        if let Some(saved) = self.0.take() {
            let _ = tcsetattr(std::io::stderr(), SetArg::TCSANOW, &saved);
        }
    }
}

impl Progress {
    /// `streaming`: the agents' own output (`-v`) is printed as it comes,
    /// which a live line redrawn in place would tear; then plain lines only.
    fn new(out: Output, json: bool, streaming: bool, loops: Option<Loops>) -> Self {
        let live = !json && !out.quiet && !streaming && std::io::stderr().is_terminal();
        let bar = live.then(|| {
            let bar = ProgressBar::new_spinner();
            // `wide_msg` is cut to the line, so the live line never wraps.
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>3} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            output::set_live_line(Some(bar.clone()));
            bar
        });
        Progress {
            out,
            json,
            echo: bar.as_ref().map(|_| QuietCtrlC::new()),
            bar,
            step_started: Instant::now(),
            loops,
        }
    }

    /// The loop the run's current visit of `state` is in, if known.
    fn looping(&self, state: &str) -> Option<LoopCount> {
        self.loops.as_ref().and_then(|l| l.at(state))
    }

    fn say(&self, line: String) {
        if self.out.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(line),
            None => output::to_stderr(&format!("{line}\n")),
        }
    }

    fn finish_bar(&mut self) {
        if let Some(bar) = self.bar.take() {
            output::set_live_line(None);
            bar.finish_and_clear();
        }
        self.echo = None;
    }

    fn agent_started(&mut self, state: &str, agent: &str, attempt: u32, bound: Option<u64>) {
        self.step_started = Instant::now();
        let looping = self.looping(state);
        let msg = format!(
            "{}: {} ({})",
            esc(state),
            esc(agent),
            loops::attempt(attempt, looping.as_ref(), bound)
        );
        match &self.bar {
            Some(bar) => {
                bar.reset_elapsed();
                bar.set_message(msg);
            }
            None => self.say(format!("  … {msg}")),
        }
    }

    fn transition(&mut self, t: &TransitionRecord) {
        let elapsed = self.step_started.elapsed().as_secs_f64();
        let agent = t
            .agent
            .as_deref()
            .map(|a| format!(" [{} {elapsed:.1}s]", esc(a)))
            .unwrap_or_default();
        self.say(format!(
            "{:>3}. {} —{}→ {}{agent}  {}",
            t.seq,
            esc(&t.from),
            esc(&t.event),
            esc(&t.to),
            esc(t.reason.as_deref().unwrap_or(""))
        ));
        self.step_started = Instant::now();
    }

    /// The one line on stdout (also with `-q`): how the run ended and where to look.
    fn summary(&mut self, r: &RunReport) {
        self.finish_bar();
        let out = &self.out;
        let tone = runs::status_tone(r.status);
        let state = out.paint(&r.state, tone);
        let headline = match r.status {
            RunStatus::Succeeded => format!(
                "Run {} {}: reached {state}",
                r.run_id,
                out.paint("succeeded", tone)
            ),
            RunStatus::Interrupted | RunStatus::Running => format!(
                "Run {} {} in {state}: `modix resume {}` continues it",
                r.run_id,
                out.paint("interrupted", Tone::Warn),
                r.run_id
            ),
            RunStatus::Failed => format!(
                "Run {} {}: ended in {state}{} (a human steps in: `modix resume {} --from STATE --note TEXT` redrives it)",
                r.run_id,
                out.paint("failed", tone),
                r.reason
                    .as_deref()
                    .map(|why| format!(" from {}", esc(why)))
                    .unwrap_or_default(),
                r.run_id
            ),
            RunStatus::Stopped => format!(
                "Run {} {} in {state}: `modix resume {}` continues it",
                r.run_id,
                out.paint("stopped", Tone::Warn),
                r.run_id
            ),
            RunStatus::Waiting => format!(
                "Run {} {} at {state}: {} — answer with `modix approve {id}` or `modix reject {id} --note TEXT` (`modix status {id}` shows the latest outputs)",
                r.run_id,
                out.paint("is waiting for you", Tone::Warn),
                r.reason.as_deref().unwrap_or("a human decides"),
                id = r.run_id
            ),
        };
        out.line(format!(
            "{headline} — {} in {}. Details: modix history {}",
            crate::text::plural(r.transitions as usize, "transition"),
            crate::text::duration(r.duration_ms),
            r.run_id
        ));
        if let Some(c) = &r.changes {
            out.line(changes_line(c));
        }
        if let Some(line) = r.usage.as_ref().and_then(super::history::usage_totals) {
            out.line(line);
        }
    }
}

impl EventSink for Progress {
    fn event(&mut self, event: &RunEvent) {
        if self.json {
            let looping = match event {
                RunEvent::AgentStarted { state, .. } => Some(self.looping(state)),
                RunEvent::Transition(t) => Some(self.looping(&t.from)),
                _ => None,
            };
            self.out.json_line(&Versioned {
                schema_version: SCHEMA_VERSION,
                event,
                looping,
            });
        } else {
            self.show(event);
        }
        if let (RunEvent::Transition(t), Some(loops)) = (event, &mut self.loops) {
            loops.advance(&t.event, &t.to);
        }
    }
}

impl Progress {
    /// An event for people.
    fn show(&mut self, event: &RunEvent) {
        // Quiet: every line but the summary goes nowhere, so none is made
        // (a step's transition line, its reason escaped, is ~8 µs of the
        // step's path).
        if self.out.quiet && !matches!(event, RunEvent::RunFinished(_)) {
            return;
        }
        match event {
            RunEvent::RunStarted {
                run_id,
                workflow,
                resumed,
                forked_from,
            } => {
                let how = match (forked_from, resumed) {
                    (Some(f), _) => format!(
                        "Forked run {run_id} from run {} at step {}",
                        f.run_id, f.seq
                    ),
                    (None, true) => format!("Resuming run {run_id}"),
                    (None, false) => format!("Started run {run_id}"),
                };
                self.say(format!("{how} (workflow {})", esc(workflow)));
            }
            RunEvent::AgentStarted {
                state,
                agent,
                attempt,
                bound,
                ..
            } => self.agent_started(state, agent, *attempt, *bound),
            RunEvent::Workspace {
                mode,
                workdir,
                branch,
                notes,
                ..
            } => {
                let place = match (mode, branch) {
                    (Mode::Worktree, Some(b)) => format!("on branch {b} in {}", workdir.display()),
                    (Mode::Copy, _) => format!("in a copy at {}", workdir.display()),
                    _ => format!("in place in {} (no isolation)", workdir.display()),
                };
                self.say(format!("  Working {}", esc(&place)));
                for note in notes {
                    self.say(format!("  Note: {}", esc(note)));
                }
            }
            RunEvent::Notice { message, .. } => self.say(format!("  Note: {}", esc(message))),
            RunEvent::Retrying {
                state,
                agent,
                class,
                reason,
                retry,
                of,
                wait_ms,
                ..
            } => self.say(format!(
                "  ↻ {}: {} failed ({class}): {} — retry {retry} of {of} in {}",
                esc(state),
                esc(agent),
                esc(&crate::text::truncate(reason, 200)),
                crate::text::duration(*wait_ms)
            )),
            RunEvent::Transition(t) => self.transition(t),
            RunEvent::Notification { .. } => {}
            RunEvent::RunFinished(r) => self.summary(r),
        }
    }
}

/// Where the run's work is and how to get it: `Changes: 2 files (+3 −1)
/// on branch modix/1a2b3c4d · modix diff 1a2b3c4d · modix apply 1a2b3c4d`.
fn changes_line(c: &ChangeSummary) -> String {
    let id = &c.short_id;
    if c.files == 0 {
        return format!(
            "Changes: none (the run changed no files) · workspace {}",
            c.workdir.display()
        );
    }
    let what = format!(
        "{} (+{} −{})",
        crate::text::plural(c.files, "file"),
        c.added,
        c.removed
    );
    match (c.mode, &c.branch) {
        (Mode::Worktree, Some(b)) => {
            format!("Changes: {what} on branch {b} · modix diff {id} · modix apply {id}")
        }
        (Mode::Copy, _) => format!(
            "Changes: {what} in {} · modix diff {id} · modix apply {id}",
            c.workdir.display()
        ),
        _ => format!("Changes: {what} in your project (in place) · modix diff {id}"),
    }
}

/// Text from an agent or a user, safe for the terminal (`--json` keeps it raw).
fn esc(s: &str) -> std::borrow::Cow<'_, str> {
    crate::text::escape_controls(s)
}

/// An event as one `--json` line: the event's fields and the vocabulary's version.
#[derive(serde::Serialize)]
struct Versioned<'a> {
    schema_version: u32,
    #[serde(flatten)]
    event: &'a RunEvent,
    /// For `agent_started` and `transition`: the loop the state's visit is
    /// in (`null` when none), beside `bound`, the worst case.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    looping: Option<Option<LoopCount>>,
}
