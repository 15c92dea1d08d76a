//! A person's part in a run, from any terminal: answering a gate (`approve`,
//! `reject`, `answer`), stopping a run (`stop`), queueing a message for its
//! next agent (`pending`), and watching it (`status`). Everything goes
//! through the run's record, never through signals or side files.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Ctx, Output, runs};
use crate::error::{Error, Exit};
use crate::fsm::StateKind;
use crate::orchestrator::{Answer, Engine, RunOptions, SCHEMA_VERSION};
use crate::project::Purpose;
use crate::store::{ControlKind, Run, RunStatus, Store, StoreError};
use crate::text;

/// Who is asking: `user@host` (the user from the environment, else the
/// process's uid looked up in /etc/passwd).
pub(super) fn who() -> String {
    use std::os::unix::fs::MetadataExt;
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            let uid = std::fs::metadata("/proc/self").ok()?.uid();
            let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
            passwd.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2)? == &uid.to_string().as_str()).then(|| f[0].to_owned())
            })
        })
        .unwrap_or_else(|| "someone".to_owned());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The run waiting at a gate (id, prefix, short id, `last`, …).
    #[arg(value_name = "RUN")]
    pub run: String,
    /// A note for the agents that come next (and the record).
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// Record the answer and leave the run stopped; `modix resume` continues it.
    #[arg(long)]
    pub later: bool,
    /// One JSON object per event on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RejectArgs {
    #[arg(value_name = "RUN")]
    pub run: String,
    /// Why: it reaches the agents that come next.
    #[arg(long, value_name = "TEXT")]
    pub note: String,
    #[arg(long)]
    pub later: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    #[arg(value_name = "RUN")]
    pub run: String,
    /// One of the gate's events (`modix status RUN` lists them).
    #[arg(value_name = "EVENT")]
    pub event: String,
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    #[arg(long)]
    pub later: bool,
    #[arg(long)]
    pub json: bool,
}

/// A `--note` as recorded: a blank one (`--note "$UNSET"`) is no note,
/// rather than an empty message handed to the next agents as what a person
/// said (`reject` asks for a real one).
pub(super) fn note(given: &Option<String>) -> Option<String> {
    given.clone().filter(|n| !n.trim().is_empty())
}

/// Which of the gate's events an answer raises.
enum Pick<'a> {
    First,
    Second,
    Named(&'a str),
}

pub fn approve(ctx: &Ctx, a: &ApproveArgs) -> Result<Exit, Error> {
    answer_gate(ctx, &a.run, Pick::First, note(&a.note), a.later, a.json)
}

pub fn reject(ctx: &Ctx, a: &RejectArgs) -> Result<Exit, Error> {
    if a.note.trim().is_empty() {
        return Err(Error::usage(
            "a rejection needs a note saying why",
            "modix reject RUN --note \"the plan misses the migration\"",
        ));
    }
    answer_gate(
        ctx,
        &a.run,
        Pick::Second,
        Some(a.note.clone()),
        a.later,
        a.json,
    )
}

pub fn answer(ctx: &Ctx, a: &AnswerArgs) -> Result<Exit, Error> {
    answer_gate(
        ctx,
        &a.run,
        Pick::Named(&a.event),
        note(&a.note),
        a.later,
        a.json,
    )
}

/// Checks the run waits at a gate that takes the answer, then continues the
/// run with it (or, with `later`, records it and stops).
fn answer_gate(
    ctx: &Ctx,
    reference: &str,
    pick: Pick<'_>,
    note: Option<String>,
    later: bool,
    json: bool,
) -> Result<Exit, Error> {
    let engine = Engine::new()?;
    let project = ctx.project_for("nothing was answered", Purpose::Run { workflow: None })?;
    let (_, run) = runs::find(&project.config.paths, reference)?;
    let status = runs::status(&run);
    if status.status != RunStatus::Waiting {
        // A run stopped (or interrupted) at its gate waits again once resumed.
        let help = match status.status {
            RunStatus::Stopped | RunStatus::Interrupted => format!(
                "`modix resume {}` takes it on (back to its gate, when it stopped at one); answer it then",
                run.id
            ),
            _ => "`modix status` lists the runs that wait for you".to_owned(),
        };
        return Err(Error::usage(
            format!(
                "run {} is not waiting at a gate (it is {} in {})",
                run.id, status.label, run.current_state
            ),
            help,
        ));
    }
    let project = super::go::as_run_started(ctx, project, &run)?;
    let workflow = project.workflow(Some(&run.workflow_id))?;
    let machine = &workflow.machine;
    let events = machine
        .state_id(&run.current_state)
        .and_then(|id| match &machine.state(id).kind {
            StateKind::Human { events, .. } => Some(events.clone()),
            _ => None,
        })
        .ok_or_else(|| {
            Error::usage(
                format!(
                    "run {} waits in {}, which is not a gate of its workflow",
                    run.id, run.current_state
                ),
                "the workflow changed since the run started; start a new run",
            )
        })?;
    let event = match pick {
        Pick::First => events.first().cloned(),
        Pick::Second => events.get(1).cloned(),
        Pick::Named(e) => events.iter().find(|x| *x == e).cloned(),
    }
    .ok_or_else(|| {
        Error::usage(
            format!("gate {} takes {}", run.current_state, events.join(", ")),
            format!(
                "modix answer {} <EVENT>, one of: {}",
                run.id,
                events.join(", ")
            ),
        )
    })?;
    let opts = RunOptions {
        answer: Some(Answer {
            event,
            note,
            by: who(),
        }),
        stop_after_answer: later,
        ..RunOptions::default()
    };
    super::go::continue_run(ctx, &engine, &project, &run.id, opts, json)
}

#[derive(Debug, clap::Args)]
pub struct ForkArgs {
    /// The run to branch off.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The step to branch off after (its seq, as `modix history RUN` numbers them).
    #[arg(long, value_name = "SEQ")]
    pub at: u32,
    /// A word for the new run's next agents.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// A new run with the source's record up to step `--at`, driven on.
pub fn fork(ctx: &Ctx, a: &ForkArgs) -> Result<Exit, Error> {
    let engine = Engine::new()?;
    let project = ctx.project_for("nothing was forked", Purpose::Run { workflow: None })?;
    let (store, src) = runs::find(&project.config.paths, &a.run)?;
    let project = super::go::as_run_started(ctx, project, &src)?;
    if let Ok(workflow) = project.workflow(Some(&src.workflow_id)) {
        super::go::ready(&engine, &project, &workflow)?;
    }
    drop(store);
    let by = who();
    super::go::with_progress(ctx, a.json, RunOptions::default(), None, |opts, sink| {
        crate::orchestrator::fork(
            &engine,
            &project,
            &src.id,
            a.at,
            note(&a.note).as_deref(),
            &by,
            opts,
            sink,
        )
    })
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    #[arg(value_name = "RUN")]
    pub run: String,
    /// Stop the running agent too (its whole process group); its invocation
    /// runs again on resume.
    #[arg(long)]
    pub now: bool,
}

/// How long `stop` waits for the run to acknowledge.
const ACK_WAIT: Duration = Duration::from_secs(5);

pub fn stop(ctx: &Ctx, a: &StopArgs) -> Result<Exit, Error> {
    let (mut store, mut run) = runs::find_writable(&ctx.paths()?, &a.run)?;
    let out = &ctx.out;
    loop {
        let status = runs::status(&run);
        match status.status {
            RunStatus::Succeeded | RunStatus::Failed => {
                return Err(Error::usage(
                    format!(
                        "run {} already ended ({} in {})",
                        run.id, run.status, run.current_state
                    ),
                    "nothing to stop",
                ));
            }
            RunStatus::Interrupted | RunStatus::Stopped => {
                return stop_leftovers(ctx, out, &run, &status.label);
            }
            RunStatus::Waiting => match stop_at_gate(&mut store, out, &run)? {
                AtGate::Stopped => return Ok(Exit::Ok),
                // Someone is answering it: it runs on, and is asked to stop.
                AtGate::Held => break,
                AtGate::Moved => run = store.run(&run.id)?,
            },
            RunStatus::Running => break,
        }
    }
    ask_to_stop(&mut store, out, &run, a.now)
}

/// A run no modix drives: what its agent left running (a crash leaves the
/// agent going, spending tokens) is stopped here.
fn stop_leftovers(ctx: &Ctx, out: &Output, run: &Run, label: &str) -> Result<Exit, Error> {
    let grace = Duration::from_secs(crate::config::Timeouts::default().kill_grace_secs);
    let stopped = crate::orchestrator::stop_leftovers(&ctx.paths()?, &run.id, grace);
    if stopped > 0 {
        out.line(format!(
            "Run {} is not running ({label}); stopped what its agent left running ({}). `modix resume {}` records the step as abandoned and runs it again.",
            run.id,
            match stopped {
                1 => "1 process".to_owned(),
                n => format!("{n} processes"),
            },
            run.id
        ));
    } else {
        out.line(format!(
            "Run {} is not running ({label}); nothing to stop.",
            run.id
        ));
    }
    Ok(Exit::Ok)
}

/// Records a stop request for the running run and waits for its
/// acknowledgement.
fn ask_to_stop(store: &mut Store, out: &Output, run: &Run, now: bool) -> Result<Exit, Error> {
    let kind = if now {
        ControlKind::StopNow
    } else {
        ControlKind::Stop
    };
    let asked = Instant::now();
    let id = store.add_control(&run.id, kind, None, &who())?;
    while asked.elapsed() < ACK_WAIT {
        std::thread::sleep(Duration::from_millis(25));
        if store.control(id)?.is_some_and(|c| c.taken_at.is_some()) {
            let when = if now { "now" } else { "after its current step" };
            out.line(format!(
                "Run {} acknowledged the stop in {} ms; it stops {when}. `modix resume {}` continues it.",
                run.id,
                asked.elapsed().as_millis(),
                run.id
            ));
            return Ok(Exit::Ok);
        }
        // The run may end (or its process die) before it takes the request:
        // then there is nothing to stop, and the request is withdrawn.
        let latest = store.run(&run.id)?;
        let ended = runs::status(&latest);
        match ended.status {
            RunStatus::Running => {}
            // It reached a gate meanwhile: stopped there, as `stop` does
            // (unless someone is answering it: then it takes the request).
            RunStatus::Waiting => {
                if let AtGate::Stopped = stop_at_gate(store, out, &latest)? {
                    store.take_controls(&[id])?;
                    return Ok(Exit::Ok);
                }
            }
            _ => {
                store.take_controls(&[id])?;
                return Err(Error::usage(
                    format!(
                        "run {} ended before it took the stop ({})",
                        run.id, ended.label
                    ),
                    "nothing to stop",
                ));
            }
        }
    }
    out.error(
        format!(
            "run {} did not acknowledge the stop within {} s (its process {} may be stuck)",
            run.id,
            ACK_WAIT.as_secs(),
            run.owner_pid.map_or("?".into(), |p| p.to_string())
        ),
        Some("the request stays on record: the run takes it at its next step"),
    );
    Ok(Exit::Failed)
}

/// What became of a stop of a run waiting at a gate.
enum AtGate {
    /// Marked stopped there.
    Stopped,
    /// Someone's answer holds it: it is about to run on.
    Held,
    /// It moved since it was read: look again.
    Moved,
}

/// A run waiting at a gate has no process to ask: it is stopped there —
/// unless it moved, or someone's answer took it, since it was read.
fn stop_at_gate(store: &mut Store, out: &Output, run: &Run) -> Result<AtGate, Error> {
    let why = format!("stopped at gate {} by {}", run.current_state, who());
    match store.set_status_as_seen(run, RunStatus::Stopped, Some(&why)) {
        Ok(()) => {
            out.line(format!(
                "Run {} stopped (it was waiting at {}).",
                run.id, run.current_state
            ));
            Ok(AtGate::Stopped)
        }
        Err(StoreError::Busy { .. }) => Ok(AtGate::Held),
        Err(StoreError::Changed { .. }) => Ok(AtGate::Moved),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum PendingCommand {
    /// Queue a message for the run's next agent that takes them (the judge,
    /// or else a planner or executor).
    Add {
        #[arg(value_name = "RUN")]
        run: String,
        #[arg(value_name = "TEXT")]
        text: String,
    },
    /// The run's queued messages, delivered or not.
    List {
        #[arg(value_name = "RUN")]
        run: String,
        #[arg(long)]
        json: bool,
    },
}

impl PendingCommand {
    pub fn json(&self) -> bool {
        matches!(self, PendingCommand::List { json: true, .. })
    }
}

pub fn pending(ctx: &Ctx, cmd: &PendingCommand) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let out = &ctx.out;
    match cmd {
        PendingCommand::Add { run, text } => {
            if text.trim().is_empty() {
                return Err(Error::usage(
                    "the message is empty",
                    "modix pending add RUN \"also handle the empty list\"",
                ));
            }
            let (mut store, run) = runs::find_writable(&paths, run)?;
            if run.status.is_terminal() {
                return Err(Error::usage(
                    format!(
                        "run {} already ended ({}); no agent will read it",
                        run.id, run.status
                    ),
                    "queue it on a live run (`modix status` lists them)",
                ));
            }
            let id = store.add_control(&run.id, ControlKind::Pending, Some(text), &who())?;
            out.line(format!(
                "Queued message {id} for run {}: its next judge (or planner or executor) gets it.",
                run.id
            ));
            Ok(Exit::Ok)
        }
        PendingCommand::List { run, json: as_json } => {
            let (store, run) = runs::find(&paths, run)?;
            let items = store.controls(&run.id, ControlKind::Pending)?;
            if *as_json {
                out.json(&json!({ "schema_version": SCHEMA_VERSION, "run_id": run.id, "pending": items }));
                return Ok(Exit::Ok);
            }
            if items.is_empty() {
                out.line(format!("Run {} has no queued messages.", run.id));
            }
            for c in items {
                let state = match c.taken_seq {
                    Some(seq) => format!("delivered with step {seq}"),
                    None => "waiting".into(),
                };
                out.line(format!(
                    "{}\t{}\t{}\t{state}\t{}",
                    c.id,
                    c.at,
                    c.by,
                    text::escape_controls(c.text.as_deref().unwrap_or(""))
                ));
            }
            Ok(Exit::Ok)
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// One run (default: every live run — running or waiting).
    #[arg(value_name = "RUN")]
    pub run: Option<String>,
    /// Redraw every second until the run ends (or, without RUN, forever).
    #[arg(long)]
    pub watch: bool,
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
}

pub fn status(ctx: &Ctx, a: &StatusArgs) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let db = paths.db();
    if !db.exists() {
        return no_runs_yet(&ctx.out, a);
    }
    let store = Store::open_read_only(&db)?;
    let mut last = String::new();
    loop {
        let (text, live) = match &a.run {
            Some(r) => {
                let run = runs::resolve(&store, r)?;
                let view = super::status_view::one(&store, &paths, &run)?;
                if a.json {
                    ctx.out.json(&view);
                    return Ok(Exit::Ok);
                }
                (
                    super::status_view::render_one(&view, &ctx.out),
                    is_live(&run),
                )
            }
            None => {
                let views = super::status_view::live(&store, &paths)?;
                if a.json {
                    ctx.out
                        .json(&json!({ "schema_version": SCHEMA_VERSION, "runs": views }));
                    return Ok(Exit::Ok);
                }
                (super::status_view::render_live(&views, &ctx.out), true)
            }
        };
        if !a.watch {
            ctx.out.line(text.trim_end());
            return Ok(Exit::Ok);
        }
        if text != last {
            if show_frame(&ctx.out, &text).is_err() {
                // Nobody reads any more (`| head`, a closed terminal): a
                // watch that cannot be shown is over.
                return Ok(Exit::Ok);
            }
            last = text;
        }
        if !live {
            return Ok(Exit::Ok);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `status` in a project that has recorded no run: said as the command
/// would say it (a run asked for by name is not there).
fn no_runs_yet(out: &Output, a: &StatusArgs) -> Result<Exit, Error> {
    if let Some(r) = &a.run {
        return Err(StoreError::UnknownRun { prefix: r.clone() }.into());
    }
    if a.json {
        out.json(&json!({ "schema_version": SCHEMA_VERSION, "runs": [] }));
    } else {
        out.line("No runs yet.");
    }
    Ok(Exit::Ok)
}

/// Whether a run can still change without someone resuming it.
fn is_live(run: &Run) -> bool {
    runs::status(run).status == RunStatus::Running
}

/// One `--watch` frame: redrawn in place on a terminal, appended when
/// piped. An error when stdout is gone.
fn show_frame(out: &Output, text: &str) -> std::io::Result<()> {
    if out.tty {
        // Clear the screen and go home, then the frame.
        out.try_line(format!("\u{1b}[2J\u{1b}[H{}", text.trim_end()))
    } else {
        out.try_line(format!("{}\n", text.trim_end()))
    }
}
