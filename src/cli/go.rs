//! `modix go` and `modix resume`: run a workflow with live progress, then a
//! summary that says where to look.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::{Ctx, Output};
use crate::error::{Error, Exit};
use crate::orchestrator::{
    self, Engine, EventSink, RunEvent, RunOptions, RunReport, SCHEMA_VERSION,
};
use crate::store::{RunStatus, TransitionRecord};

#[derive(Debug, clap::Args)]
pub struct GoArgs {
    /// What to do, in words; passed to the agents verbatim (never through a shell).
    pub epic: String,
    /// Workflow FSM id (default: the project's `workflow`).
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// One JSON object per event on stdout, ending with the summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run's id, or any unique prefix of it.
    pub run: String,
    /// One JSON object per event on stdout, ending with the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &GoArgs) -> Result<Exit, Error> {
    if args.epic.trim().is_empty() {
        return Err(Error::usage(
            "the epic is empty",
            "say what to do: modix go \"Add a --verbose flag\"",
        ));
    }
    // Before anything else, so a Ctrl-C during start-up is never lost.
    let engine = Engine::new()?;
    let project = ctx.project("nothing was run")?;
    let workflow = project.workflow(args.workflow.as_deref())?;
    if engine.interrupted() {
        ctx.out.error(
            "interrupted before the run started; nothing was recorded",
            None,
        );
        return Ok(Exit::Interrupted);
    }
    let mut sink = Progress::new(ctx.out, args.json);
    let report = orchestrator::start(
        &engine,
        &project,
        workflow,
        &args.epic,
        &options(ctx, args.json),
        &mut sink,
    );
    finish(report, &mut sink)
}

pub fn resume(ctx: &Ctx, args: &ResumeArgs) -> Result<Exit, Error> {
    let engine = Engine::new()?;
    let project = ctx.project("nothing was run")?;
    let mut sink = Progress::new(ctx.out, args.json);
    let report = orchestrator::resume(
        &engine,
        &project,
        &args.run,
        &options(ctx, args.json),
        &mut sink,
    );
    finish(report, &mut sink)
}

fn options(ctx: &Ctx, json: bool) -> RunOptions {
    RunOptions {
        stream: ctx.cli.verbose > 0 && !json,
    }
}

fn finish(
    report: Result<RunReport, orchestrator::RunError>,
    sink: &mut Progress,
) -> Result<Exit, Error> {
    sink.finish_bar();
    Ok(match report?.status {
        RunStatus::Succeeded => Exit::Ok,
        RunStatus::Interrupted | RunStatus::Running => Exit::Interrupted,
        RunStatus::Failed => Exit::Failed,
    })
}

/// Live progress: a spinner line on a terminal, plain lines otherwise, or
/// one JSON object per event.
struct Progress {
    out: Output,
    json: bool,
    bar: Option<ProgressBar>,
    step_started: Instant,
}

impl Progress {
    fn new(out: Output, json: bool) -> Self {
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            out,
            json,
            bar,
            step_started: Instant::now(),
        }
    }

    fn say(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn finish_bar(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn agent_started(&mut self, state: &str, agent: &str, attempt: u32, bound: Option<u64>) {
        self.step_started = Instant::now();
        let of = bound.map(|b| format!("/{b}")).unwrap_or_default();
        let msg = format!("{state}: {agent} (attempt {attempt}{of})");
        match &self.bar {
            Some(bar) => {
                bar.reset_elapsed();
                bar.set_message(msg);
            }
            None => eprintln!("  … {msg}"),
        }
    }

    fn transition(&mut self, t: &TransitionRecord) {
        let elapsed = self.step_started.elapsed().as_secs_f64();
        let agent = t
            .agent
            .as_deref()
            .map(|a| format!(" [{a} {elapsed:.1}s]"))
            .unwrap_or_default();
        self.say(format!(
            "{:>3}. {} —{}→ {}{agent}  {}",
            t.seq,
            t.from,
            t.event,
            t.to,
            t.reason.as_deref().unwrap_or("")
        ));
        self.step_started = Instant::now();
    }

    fn summary(&mut self, r: &RunReport) {
        self.finish_bar();
        let secs = Duration::from_millis(r.duration_ms).as_secs_f64();
        let headline = match r.status {
            RunStatus::Succeeded => format!("Run {} succeeded: reached {}", r.run_id, r.state),
            RunStatus::Interrupted | RunStatus::Running => format!(
                "Run {} interrupted in {}: `modix resume {}` continues it",
                r.run_id, r.state, r.run_id
            ),
            RunStatus::Failed => format!(
                "Run {} failed: ended in {} (a human steps in)",
                r.run_id, r.state
            ),
        };
        self.out.line(format!(
            "{headline} — {} transitions in {secs:.1}s. Details: modix history {}",
            r.transitions, r.run_id
        ));
    }
}

impl EventSink for Progress {
    fn event(&mut self, event: &RunEvent) {
        if self.json {
            self.out.json_line(&Versioned {
                schema_version: SCHEMA_VERSION,
                event,
            });
            return;
        }
        match event {
            RunEvent::RunStarted {
                run_id,
                workflow,
                resumed,
            } => {
                let verb = if *resumed { "Resuming" } else { "Started" };
                self.say(format!("{verb} run {run_id} (workflow {workflow})"));
            }
            RunEvent::AgentStarted {
                state,
                agent,
                attempt,
                bound,
                ..
            } => self.agent_started(state, agent, *attempt, *bound),
            RunEvent::Transition(t) => self.transition(t),
            RunEvent::Notification { .. } => {}
            RunEvent::RunFinished(r) => self.summary(r),
        }
    }
}

/// An event as one `--json` line: the event's fields and the vocabulary's version.
#[derive(serde::Serialize)]
struct Versioned<'a> {
    schema_version: u32,
    #[serde(flatten)]
    event: &'a RunEvent,
}
