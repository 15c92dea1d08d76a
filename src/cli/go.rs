//! `modix go` and `modix resume`: run a workflow with live progress, then a
//! summary that says where to look.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::{Cli, Output, load_project};
use crate::exit;
use crate::orchestrator::{self, Observer, OrchestratorError, RunOptions, RunReport};
use crate::store::TransitionRecord;

#[derive(Debug, clap::Args)]
pub struct GoArgs {
    /// What to do, in words; passed to the agents verbatim (never through a shell).
    pub epic: String,
    /// Workflow FSM id (default: the project's `workflow`).
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// One JSON object per transition on stdout, then the summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run's id, or any unique prefix of it.
    pub run: String,
    /// One JSON object per transition on stdout, then the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cli: &Cli, args: &GoArgs, out: &Output) -> u8 {
    if args.epic.trim().is_empty() {
        out.error(
            "the epic is empty",
            Some("say what to do: modix go \"Add a --verbose flag\""),
        );
        return exit::USAGE;
    }
    execute(cli, out, args.json, |project, opts, observer| {
        let opts = RunOptions {
            workflow: args.workflow.clone(),
            ..opts
        };
        orchestrator::start(project, &args.epic, &opts, observer)
    })
}

pub fn resume(cli: &Cli, args: &ResumeArgs, out: &Output) -> u8 {
    execute(cli, out, args.json, |project, opts, observer| {
        orchestrator::resume(project, &args.run, &opts, observer)
    })
}

fn execute(
    cli: &Cli,
    out: &Output,
    json: bool,
    start: impl FnOnce(
        &crate::project::LoadedProject,
        RunOptions,
        &mut dyn Observer,
    ) -> Result<RunReport, OrchestratorError>,
) -> u8 {
    let project = match load_project(cli, out, "nothing was run") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let opts = RunOptions {
        workflow: None,
        stream: cli.verbose > 0 && !json,
    };
    let mut observer = Progress::new(*out, json);
    match start(&project, opts, &mut observer) {
        Ok(report) => match report.status.as_str() {
            "succeeded" => exit::OK,
            "interrupted" => exit::INTERRUPTED,
            _ => exit::FAILED,
        },
        Err(e) => {
            observer.finish_bar();
            let help = match &e {
                OrchestratorError::Store(_) => "see `modix history` for the run's record",
                OrchestratorError::NotResumable(_) => {
                    "start a new run with `modix go`, or restore the workflow definition the run started with"
                }
                _ => {
                    "fix the cause, then `modix resume <run>` continues from the last recorded state"
                }
            };
            out.error(e.to_string(), Some(help));
            exit::USAGE
        }
    }
}

/// Live progress: a spinner line on a terminal, plain lines otherwise, or JSON.
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
}

impl Observer for Progress {
    fn run_started(&mut self, run_id: &str, workflow: &str, resumed: bool) {
        if !self.json {
            let verb = if resumed { "Resuming" } else { "Started" };
            self.say(format!("{verb} run {run_id} (workflow {workflow})"));
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
            None if !self.json => eprintln!("  … {msg}"),
            None => {}
        }
    }

    fn transition(&mut self, run_id: &str, t: &TransitionRecord) {
        if self.json {
            self.out.json_line(&serde_json::json!({
                "type": "transition",
                "run": run_id,
                "seq": t.seq,
                "at": t.at,
                "from": t.from,
                "to": t.to,
                "event": t.event,
                "attempt": t.attempt,
                "bound": t.bound,
                "agent": t.agent,
                "reason": t.reason,
                "redirected": t.redirected,
            }));
            return;
        }
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

    fn notification(&mut self, run_id: &str, state: &str, name: &str) {
        if self.json {
            self.out.json_line(&serde_json::json!({
                "type": "notification",
                "run": run_id,
                "state": state,
                "name": name,
            }));
        } else {
            tracing::info!("{state}: {name}");
        }
    }

    fn run_finished(&mut self, r: &RunReport) {
        self.finish_bar();
        if self.json {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["type"] = "summary".into();
            self.out.json_line(&v);
            return;
        }
        let secs = Duration::from_millis(r.duration_ms).as_secs_f64();
        let headline = match r.status.as_str() {
            "succeeded" => format!("Run {} succeeded: reached {}", r.run_id, r.final_state),
            "interrupted" => format!(
                "Run {} interrupted in {}: `modix resume {}` continues it",
                r.run_id, r.final_state, r.run_id
            ),
            _ => format!(
                "Run {} failed: ended in {} (a human steps in)",
                r.run_id, r.final_state
            ),
        };
        self.out.line(format!(
            "{headline} — {} transitions in {secs:.1}s. Details: modix history {}",
            r.transitions, r.run_id
        ));
    }
}
