//! `modix history`: the record of runs, one run's steps (as a table or a
//! timeline), one invocation.

use serde_json::json;

use std::sync::Arc;

use super::loops::{LoopCount, Loops};
use super::output::{Table, Tone, toned};
use super::runs::{self, ShortIds};
use super::{Ctx, Output};
use crate::config::ProjectPaths;
use crate::error::{Error, Exit};
use crate::fsm::Machine;
use crate::orchestrator::SCHEMA_VERSION;
use crate::project::Purpose;
use crate::store::{Run, RunStatus, Stops, Store, StoreError, TransitionRecord, millis_between};
use crate::text;

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The run to show (without it, list runs): an id or any unique prefix
    /// of it, `last` for the newest run, `last~1` for the one before, …
    #[arg(value_name = "RUN")]
    pub run: Option<String>,
    /// Show one invocation of the run in full (1 = its first agent invocation).
    #[arg(long, value_name = "N", requires = "run")]
    pub invocation: Option<u32>,
    /// Chart how long each step of the run took (tab-separated rows, in
    /// milliseconds, when stdout is not a terminal).
    #[arg(long, requires = "run", conflicts_with = "invocation")]
    pub timeline: bool,
    /// Show only the run's last N steps (0: every step). A run of more
    /// steps than this shows its last ones and says how many it left out
    /// (`--json`: `steps_left_out`, its loops null).
    #[arg(long, default_value_t = STEPS_SHOWN, value_name = "N", requires = "run",
          conflicts_with_all = ["invocation", "timeline"])]
    pub steps: u32,
    /// List at most this many runs, newest first; 0 lists them all.
    #[arg(long, default_value_t = 20, value_name = "N", conflicts_with = "run")]
    pub limit: usize,
    /// List only runs with this status: running, interrupted, succeeded,
    /// failed (repeat it or separate with commas for several). A run whose
    /// process is gone counts as interrupted.
    #[arg(long, value_name = "STATUS", value_delimiter = ',', conflicts_with = "run",
          value_parser = status_parser())]
    pub status: Vec<RunStatus>,
    /// List only runs started within this long: 30m, 2h, 1d, 1w (or seconds: 45s).
    #[arg(long, value_name = "AGE", conflicts_with = "run", value_parser = text::parse_age)]
    pub since: Option<u64>,
    /// Print JSON (times in RFC 3339 UTC, full run ids).
    #[arg(long)]
    pub json: bool,
}

/// Steps `history RUN` shows by default: every step of any ordinary run,
/// the last ones of a loop left running for days (a table of a million
/// rows is read by no one, and takes seconds to print).
const STEPS_SHOWN: u32 = 1000;

fn status_parser() -> impl clap::builder::TypedValueParser<Value = RunStatus> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new([
        "running",
        "waiting",
        "interrupted",
        "stopped",
        "succeeded",
        "failed",
    ])
    .try_map(|s| {
        s.parse::<RunStatus>()
            .map_err(|_| format!("unknown status `{s}`"))
    })
}

pub fn run(ctx: &Ctx, args: &HistoryArgs) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let db = paths.db();
    if !db.exists() {
        if let Some(run) = &args.run {
            return Err(StoreError::UnknownRun {
                prefix: run.clone(),
            }
            .into());
        }
        empty_list(&ctx.out, args, 0);
        return Ok(Exit::Ok);
    }
    let store = Store::open_read_only(&db)?;
    let out = &ctx.out;
    match &args.run {
        None => list(&store, args, out)?,
        Some(reference) => {
            let run = runs::resolve(&store, reference)?;
            match args.invocation {
                Some(n) => show_invocation(&store, &run, n, args.json, out)?,
                None if args.timeline => timeline(&store, &run, args.json, out)?,
                None => {
                    let machine = workflow_of(ctx, &paths, &run);
                    show_run(&store, &run, machine, args, out)?
                }
            }
        }
    }
    Ok(Exit::Ok)
}

/// No run to list: say why — none yet, or none that matches.
fn empty_list(out: &Output, args: &HistoryArgs, recorded: usize) {
    if args.json {
        out.json(&json!({ "schema_version": SCHEMA_VERSION, "runs": [] }));
    } else if recorded == 0 {
        out.line("No runs yet. Start one with `modix go \"<epic>\"`.");
    } else {
        out.line(format!(
            "No runs match; {} recorded in all (`modix history` lists the newest).",
            text::plural(recorded, "run")
        ));
    }
}

fn list(store: &Store, args: &HistoryArgs, out: &Output) -> Result<(), Error> {
    let since = args.since.map(|secs| {
        let cutoff = jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(
                i64::try_from(secs).unwrap_or(i64::MAX),
            ))
            .unwrap_or(jiff::Timestamp::MIN);
        format!("{cutoff:.3}")
    });
    // A run whose owner is gone is stored as running but shown as
    // interrupted, so the store is asked for both and the status is settled here.
    let mut stored = args.status.clone();
    if stored.contains(&RunStatus::Interrupted) {
        stored.push(RunStatus::Running);
    }
    let limit = (args.limit > 0).then_some(args.limit);
    let sql_limit = if args.status.is_empty() { limit } else { None };
    let found = store.runs_matching(&stored, since.as_deref(), sql_limit)?;
    let runs: Vec<_> = found
        .into_iter()
        .filter(|r| args.status.is_empty() || args.status.contains(&runs::status(&r.run).status))
        .take(limit.unwrap_or(usize::MAX))
        .collect();
    if args.json {
        let items: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                let mut v = runs::run_json(&r.run);
                v["transitions"] = r.transitions.into();
                v["invocations"] = r.invocations.into();
                v["duration_ms"] = r.duration_ms.into();
                v
            })
            .collect();
        out.json(&json!({ "schema_version": SCHEMA_VERSION, "runs": items }));
        return Ok(());
    }
    if runs.is_empty() {
        let recorded = usize::try_from(store.run_count()?).unwrap_or(usize::MAX);
        empty_list(out, args, recorded);
        return Ok(());
    }
    let ids = ShortIds::load(store, runs.iter().map(|r| r.run.id.as_str()))?;
    // On a narrow terminal the epic is cut first, then these columns go.
    let mut t = Table::new([
        "run", "started", "epic", "workflow", "state", "status", "took", "steps",
    ])
    .optional(&[3, 7, 6, 1])
    .keep(&[0, 4, 5]);
    for r in &runs {
        let status = runs::status(&r.run);
        t.row([
            runs::id_cell(out, &ids, &r.run.id).into(),
            runs::when_cell(out, &r.run.created_at).into(),
            text::flat(&r.run.epic).into(),
            r.run.workflow_id.clone().into(),
            toned(r.run.current_state.clone(), status.tone),
            toned(status.label, status.tone),
            r.duration_ms.map_or("-".into(), text::duration).into(),
            r.transitions.to_string().into(),
        ]);
    }
    out.table(&t);
    Ok(())
}

/// `succeeded: reached DONE in 12.3s`, `interrupted in EXECUTING after 3.2s:
/// interrupted by Ctrl-C`, …: where the run ended (or stands) and how long it took.
fn headline(run: &Run, stops: &Stops, out: &Output) -> String {
    let status = runs::status(run);
    let mut took = runs::duration(run).map_or("?".into(), text::duration);
    // The wall time, as `modix history` lists it, and how much of it the
    // run stood stopped (Ctrl-C or `modix stop` until `modix resume`).
    let end = run.ended_at.as_ref().unwrap_or(&run.updated_at);
    let stopped = stops.within(&run.created_at, end);
    if stopped > 0 {
        took.push_str(&format!(" ({} of it stopped)", text::duration(stopped)));
    }
    let state = out.paint(&run.current_state, status.tone);
    let word = out.paint(&status.label, status.tone);
    let why = if status.owner_gone {
        Some(runs::owner_gone_reason(run))
    } else {
        run.status_reason.clone().filter(|r| r != "resumed")
    };
    let why = why.map(|w| text::escape_controls(&w).into_owned());
    let mut s = match status.status {
        RunStatus::Succeeded => format!("{word}: reached {state} in {took}"),
        RunStatus::Failed => format!("{word}: ended in {state} after {took}"),
        RunStatus::Interrupted | RunStatus::Stopped => format!("{word} in {state} after {took}"),
        RunStatus::Waiting => format!("{word} at {state} after {took}"),
        RunStatus::Running => format!(
            "{word} in {state} for {took}{}",
            run.owner_pid
                .map(|p| format!(" (process {p})"))
                .unwrap_or_default()
        ),
    };
    if matches!(
        status.status,
        RunStatus::Interrupted | RunStatus::Stopped | RunStatus::Waiting
    ) && let Some(why) = why
    {
        s.push_str(&format!(": {}", text::escape_controls(&why)));
    }
    if let Some(f) = &run.forked_from {
        s.push_str(&format!(
            " (forked from run {} at step {})",
            f["run_id"].as_str().unwrap_or("?"),
            f["seq"]
        ));
    }
    s
}

/// The workflow the run ran, as it is defined now, if it is still the
/// same (by content hash); only to tell which loop each step was in.
fn workflow_of(ctx: &Ctx, paths: &ProjectPaths, run: &Run) -> Option<Arc<Machine>> {
    let purpose = Purpose::Run {
        workflow: Some(&run.workflow_id),
    };
    let (project, _) = crate::project::load_for(paths, &ctx.settings, &ctx.settings_diags, purpose);
    let machine = project?.catalog.get(&run.workflow_id).cloned()?;
    (machine.content_hash() == run.workflow_hash).then_some(machine)
}

/// For each transition, the loop its state's visit was in (`None` for
/// none, or when the workflow is not known).
fn loops_of(
    machine: Option<Arc<Machine>>,
    transitions: &[TransitionRecord],
) -> Vec<Option<LoopCount>> {
    let Some(machine) = machine else {
        return vec![None; transitions.len()];
    };
    let mut loops = Loops::new(machine);
    transitions
        .iter()
        .map(|t| {
            let looping = loops.at(&t.from);
            loops.advance(&t.event, &t.to);
            looping
        })
        .collect()
}

fn show_run(
    store: &Store,
    run: &Run,
    machine: Option<Arc<Machine>>,
    args: &HistoryArgs,
    out: &Output,
) -> Result<(), Error> {
    let total = store.transition_count(&run.id)?;
    if args.json {
        let left_out = left_out(total, args.steps);
        let doc = RunDocument {
            store,
            run,
            usage: store.run_usage(&run.id)?,
            // Which loop a step was in needs every step before it.
            machine: machine.filter(|_| left_out == 0),
            left_out,
            failed: Default::default(),
        };
        out.json(&doc);
        return streamed(doc.failed);
    }
    // The whole run's stops when the whole run is read: a long run's last
    // steps alone never scan every invocation it made.
    let stops = if args.steps == 0 || total <= args.steps {
        store.stops(&run.id, 0)?
    } else {
        Stops::default()
    };
    out.para(format!("Run {} — {}", run.id, headline(run, &stops, out)));
    let started = if out.tty {
        format!(
            "{} ({})",
            text::local_time(&run.created_at, "%Y-%m-%d %H:%M:%S %Z"),
            runs::when_cell(out, &run.created_at)
        )
    } else {
        run.created_at.clone()
    };
    out.para(text::escape_controls(&format!(
        "Workflow {} {}, started {started}",
        run.workflow_id, run.workflow_version
    )));
    out.para(format!("Epic: {}", text::escape_controls(&run.epic)));
    if let Some(used) = usage_totals(&store.run_usage(&run.id)?) {
        out.para(used);
    }
    let transitions = steps_table(store, run, (machine, &stops), (total, args.steps), out)?;
    if !out.tty {
        // Hints are for people; a pipe gets the record alone.
        return Ok(());
    }
    if let Some(worst) = worst_cases(&transitions) {
        out.para(worst);
    }
    let id = runs::id_cell(out, &ShortIds::load(store, [run.id.as_str()])?, &run.id);
    if runs::status(run).status == RunStatus::Interrupted {
        out.para(format!("`modix resume {id}` continues it."));
    }
    out.para(format!(
        "`modix history {id} --invocation N` shows an invocation; `--timeline` charts the steps."
    ));
    Ok(())
}

/// How many of a run's `total` steps a view of its last `shown` (0: all)
/// leaves out.
fn left_out(total: u32, shown: u32) -> u32 {
    if shown == 0 {
        0
    } else {
        total.saturating_sub(shown)
    }
}

/// `history RUN --json`: the run, its usage, its transitions (each with
/// the loop it was in) and its messages — of its last `--steps` steps —
/// serialised as they are read from the store, one row at a time, so a run
/// of a million steps takes the memory of one. Members in alphabetical
/// order, as every JSON object modix prints.
struct RunDocument<'a> {
    store: &'a Store,
    run: &'a Run,
    usage: crate::store::RunUsage,
    machine: Option<Arc<Machine>>,
    /// The run's first steps left out: its transitions and messages are
    /// those of the steps after them.
    left_out: u32,
    /// The store's error that cut the document short, if one did.
    failed: std::cell::RefCell<Option<StoreError>>,
}

impl serde::Serialize for RunDocument<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let id = &self.run.id;
        let mut map = s.serialize_map(Some(6))?;
        map.serialize_entry(
            "messages",
            &Rows(
                |seq: Sink<'_>| {
                    self.store.each_message(id, self.left_out, |m| {
                        seq(serde_json::to_value(m).unwrap_or_default())
                    })
                },
                &self.failed,
            ),
        )?;
        map.serialize_entry("run", &runs::run_json(self.run))?;
        map.serialize_entry("schema_version", &SCHEMA_VERSION)?;
        map.serialize_entry("steps_left_out", &self.left_out)?;
        let loops = std::cell::RefCell::new(self.machine.clone().map(Loops::new));
        map.serialize_entry(
            "transitions",
            &Rows(
                |seq: Sink<'_>| {
                    self.store.each_transition(id, self.left_out, |t| {
                        let looping = loops.borrow_mut().as_mut().and_then(|l| {
                            let at = l.at(&t.from);
                            l.advance(&t.event, &t.to);
                            at
                        });
                        let mut v = serde_json::to_value(&t).unwrap_or_default();
                        v["loop"] = serde_json::to_value(looping).unwrap_or_default();
                        seq(v)
                    })
                },
                &self.failed,
            ),
        )?;
        map.serialize_entry(
            "usage",
            &serde_json::to_value(&self.usage).unwrap_or_default(),
        )?;
        map.end()
    }
}

/// `history RUN --timeline --json`: the run and each step with how long it
/// took, serialised as the steps are read (see [`RunDocument`]).
struct TimelineDocument<'a> {
    store: &'a Store,
    run: &'a Run,
    stops: Stops,
    failed: std::cell::RefCell<Option<StoreError>>,
}

impl serde::Serialize for TimelineDocument<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("run", &runs::run_json(self.run))?;
        map.serialize_entry("schema_version", &SCHEMA_VERSION)?;
        let previous = std::cell::RefCell::new(self.run.created_at.clone());
        map.serialize_entry(
            "steps",
            &Rows(
                |seq: Sink<'_>| {
                    self.store.each_transition(&self.run.id, 0, |t| {
                        let took = Took::between(&previous.borrow(), &t.at, &self.stops);
                        let mut step = json!({ "seq": t.seq, "from": t.from, "to": t.to,
                            "event": t.event, "agent": t.agent, "at": t.at, "duration_ms": took.ms });
                        if took.stopped > 0 {
                            step["stopped_ms"] = took.stopped.into();
                        }
                        *previous.borrow_mut() = t.at;
                        seq(step)
                    })
                },
                &self.failed,
            ),
        )?;
        map.end()
    }
}

/// The command's end after printing a streamed document: the store's error
/// if one cut it short.
fn streamed(failed: std::cell::RefCell<Option<StoreError>>) -> Result<(), Error> {
    failed.into_inner().map_or(Ok(()), |e| Err(e.into()))
}

/// Where a store reader hands each row, as JSON; an error (the output's)
/// stops the reading.
type Sink<'s> = &'s mut dyn FnMut(serde_json::Value) -> Result<(), String>;

/// A JSON array of the rows a store reader hands a [`Sink`] one at a time;
/// the store's error, if one cuts it short, is kept in the cell.
struct Rows<'a, F>(F, &'a std::cell::RefCell<Option<StoreError>>);

impl<F> serde::Serialize for Rows<'_, F>
where
    F: Fn(Sink<'_>) -> Result<Result<(), String>, StoreError>,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq};
        let mut seq = s.serialize_seq(None)?;
        let mut element =
            |v: serde_json::Value| seq.serialize_element(&v).map_err(|e| e.to_string());
        match (self.0)(&mut element) {
            Ok(Ok(())) => seq.end(),
            // Writing failed (a closed pipe): stop.
            Ok(Err(e)) => Err(S::Error::custom(e)),
            Err(e) => {
                let message = e.to_string();
                *self.1.borrow_mut() = Some(e);
                Err(S::Error::custom(message))
            }
        }
    }
}

/// The table of the run's steps: the last `shown` of them (all for 0),
/// which it returns. Which loop a step was in needs every step before it,
/// so a run cut short shows attempts alone.
fn steps_table(
    store: &Store,
    run: &Run,
    (machine, stops): (Option<Arc<Machine>>, &Stops),
    (total, shown): (u32, u32),
    out: &Output,
) -> Result<Vec<TransitionRecord>, Error> {
    let left_out = left_out(total, shown);
    let (transitions, looping, took) = if left_out == 0 {
        let transitions = store.transitions(&run.id)?;
        let took = step_durations(&run.created_at, &transitions, stops);
        let looping = loops_of(machine, &transitions);
        (transitions, looping, took)
    } else {
        // From the step before the first shown: when that one began; the
        // stops after its invocation (the whole run's only when it had none).
        let mut transitions = store.transitions_after(&run.id, left_out - 1)?;
        let previous = transitions.remove(0);
        let stops = store.stops(&run.id, previous.invocation.unwrap_or(0))?;
        let took = step_durations(&previous.at, &transitions, &stops);
        let looping = vec![None; transitions.len()];
        (transitions, looping, took)
    };
    if left_out > 0 {
        out.para(format!(
            "Its last {} of {} steps (`--steps 0` shows every one):",
            shown, total
        ));
    }
    let mut t = Table::new([
        "seq",
        "at",
        "from → to",
        "event",
        "attempt",
        "agent",
        "took",
        "reason",
    ])
    .wrap_column(7)
    // On a narrow terminal: the clock time first, then the event (the
    // reason says why), then the attempt.
    .optional(&[1, 3, 4]);
    let steps = transitions.iter().zip(&looping);
    for ((tr, looping), took) in steps.zip(took) {
        let at = if out.tty {
            text::local_time(&tr.at, "%H:%M:%S")
        } else {
            tr.at.clone()
        };
        t.row([
            tr.seq.to_string().into(),
            at.into(),
            toned(format!("{} → {}", tr.from, tr.to), step_tone(run, tr)),
            tr.event.clone().into(),
            match looping {
                Some(l) => format!("{} · loop {} of {}", tr.attempt, l.count, l.max),
                None => tr.attempt.to_string(),
            }
            .into(),
            tr.agent.clone().unwrap_or_default().into(),
            took.cell().into(),
            tr.reason.clone().unwrap_or_default().into(),
        ]);
    }
    out.table(&t);
    Ok(transitions)
}

/// `At most: EXECUTING 6 visits, TESTING 4 (…)`: the worst case the
/// workflow's bounds allow each state the run went round, as recorded.
fn worst_cases(transitions: &[TransitionRecord]) -> Option<String> {
    let mut seen: Vec<(&str, u32)> = Vec::new();
    for t in transitions {
        if let Some(b) = t.bound.filter(|b| *b > 1)
            && !seen.iter().any(|(s, _)| *s == t.from)
        {
            seen.push((&t.from, b));
        }
    }
    let mut parts = seen.iter().map(|(s, b)| format!("{s} {b}"));
    let first = parts.next()?;
    let rest: Vec<String> = parts.collect();
    let list = std::iter::once(format!("{first} visits"))
        .chain(rest)
        .collect::<Vec<_>>();
    Some(text::escape_controls(&format!(
        "At most: {} (the worst case the workflow's bounds allow; a loop's count is against the `max` on its transition).",
        list.join(", ")
    ))
    .into_owned())
}

/// How long a step took: the time the run was at work on it, from the
/// previous transition to this one less the time it stood stopped in
/// between (Ctrl-C or `modix stop`, until `modix resume`), which is said
/// beside it rather than counted.
#[derive(Clone, Copy, Debug, Default)]
struct Took {
    ms: Option<u64>,
    stopped: u64,
}

impl Took {
    fn between(start: &str, end: &str, stops: &Stops) -> Took {
        let stopped = stops.within(start, end);
        Took {
            ms: millis_between(start, end).map(|ms| ms.saturating_sub(stopped)),
            stopped,
        }
    }

    /// `3.1s`, or `3.1s (+8.2s stopped)`.
    fn cell(&self) -> String {
        let took = self.ms.map_or("-".into(), text::duration);
        match self.stopped {
            0 => took,
            ms => format!("{took} (+{} stopped)", text::duration(ms)),
        }
    }
}

/// How long each step took (see [`Took`]): from the previous transition
/// (`start`, the run's start or the step before, for the first) to this one.
fn step_durations(start: &str, transitions: &[TransitionRecord], stops: &Stops) -> Vec<Took> {
    let mut previous = start;
    transitions
        .iter()
        .map(|t| {
            let took = Took::between(previous, &t.at, stops);
            previous = &t.at;
            took
        })
        .collect()
}

/// A step that ended the run says how it ended; a redirect after a used-up
/// bound is a warning.
fn step_tone(run: &Run, t: &TransitionRecord) -> Tone {
    if t.redirected {
        return Tone::Warn;
    }
    let last = t.to == run.current_state && run.status.is_terminal();
    match (last, run.status) {
        (true, RunStatus::Succeeded) => Tone::Good,
        (true, RunStatus::Failed) => Tone::Bad,
        _ => Tone::Plain,
    }
}

/// `history RUN --timeline`: a bar per step, as long as the step took, on a
/// terminal; tab-separated rows (seq, from, to, event, agent, ms) otherwise.
fn timeline(store: &Store, run: &Run, json: bool, out: &Output) -> Result<(), Error> {
    let stops = store.stops(&run.id, 0)?;
    if json {
        let doc = TimelineDocument {
            store,
            run,
            stops,
            failed: Default::default(),
        };
        out.json(&doc);
        return streamed(doc.failed);
    }
    if !out.tty {
        // Row by row, as `--json`: a run of a million steps is never in
        // memory whole.
        let mut previous = run.created_at.clone();
        let printed = store.each_transition(&run.id, 0, |t| {
            let ms = Took::between(&previous, &t.at, &stops).ms;
            safe_line(
                out,
                format!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    t.seq,
                    t.from,
                    t.to,
                    t.event,
                    t.agent.as_deref().unwrap_or(""),
                    ms.map_or(String::new(), |m| m.to_string())
                ),
            );
            previous = t.at;
            Ok::<_, std::convert::Infallible>(())
        })?;
        let Ok(()) = printed;
        return Ok(());
    }
    let transitions = store.transitions(&run.id)?;
    let took = step_durations(&run.created_at, &transitions, &stops);
    out.para(format!("Run {} — {}", run.id, headline(run, &stops, out)));
    let labels: Vec<String> = transitions
        .iter()
        .map(|t| text::escape_controls(&format!("{:>3} {} → {}", t.seq, t.from, t.to)).into_owned())
        .collect();
    let label_w = labels.iter().map(|l| text::width(l)).max().unwrap_or(0);
    let label_w = label_w.min(out.width / 2);
    let durations: Vec<String> = took.iter().map(Took::cell).collect();
    let dur_w = durations.iter().map(|d| text::width(d)).max().unwrap_or(1);
    let bar_w = out.width.saturating_sub(label_w + dur_w + 3).max(10);
    let longest = took.iter().filter_map(|t| t.ms).max().unwrap_or(0);
    for (i, t) in transitions.iter().enumerate() {
        let label = text::fit(&labels[i], label_w);
        let pad = label_w.saturating_sub(text::width(&label));
        let bar = bar(took[i].ms.unwrap_or(0), longest, bar_w);
        out.line(format!(
            "{label}{} {:>dur_w$} {}",
            " ".repeat(pad),
            durations[i],
            out.paint(bar, step_tone(run, t))
        ));
    }
    Ok(())
}

/// A horizontal bar `ms` long on a scale where `longest` fills `cols`
/// columns, in eighths of a column.
fn bar(ms: u64, longest: u64, cols: usize) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    if longest == 0 {
        return String::new();
    }
    let eighths = (ms as u128 * cols as u128 * 8 / longest as u128) as usize;
    // A step that took any time at all gets a sliver, so it is seen.
    let eighths = if ms > 0 { eighths.max(1) } else { 0 };
    let mut s = "█".repeat(eighths / 8);
    if eighths % 8 > 0 {
        s.push(EIGHTHS[eighths % 8]);
    }
    s
}

/// One invocation's record, whole: `--json` as stored, or section by
/// section for a person. Long because it is that flat list of sections, each
/// a few lines that print one field group; split, they would only pass the
/// record around.
fn show_invocation(
    store: &Store,
    run: &Run,
    n: u32,
    json: bool,
    out: &Output,
) -> Result<(), Error> {
    let inv = store.invocation(&run.id, n)?;
    if json {
        let mut v = serde_json::to_value(&inv).unwrap_or_default();
        v["schema_version"] = SCHEMA_VERSION.into();
        out.json(&v);
        return Ok(());
    }
    let outcome = inv.outcome.map_or("-", |o| o.as_str());
    safe_line(
        out,
        format!(
            "Invocation {n} of run {}: {} in {} (attempt {})\nstatus: {}, outcome: {outcome}, exit code: {}, timed out: {}, took {}\nargv: {}",
            run.id,
            inv.agent,
            inv.state,
            inv.attempt,
            inv.status,
            inv.exit_code.map_or("-".into(), |c| c.to_string()),
            inv.timed_out,
            inv.duration_ms.map_or("-".into(), text::duration),
            serde_json::to_string(&inv.argv).unwrap_or_default()
        ),
    );
    if let Some(error) = &inv.error {
        safe_line(out, format!("could not start: {error}"));
    }
    if !inv.validation_errors.is_empty() {
        safe_line(
            out,
            format!(
                "validation errors:\n  - {}",
                inv.validation_errors.join("\n  - ")
            ),
        );
    }
    if let Some(class) = &inv.class {
        safe_line(
            out,
            format!("failure: {class}: {}", inv.reason.as_deref().unwrap_or("")),
        );
    }
    if let Some(u) = &inv.usage {
        safe_line(out, format!("usage: {}", usage_of_invocation(u)));
    }
    if let Some(r) = &inv.retry {
        safe_line(
            out,
            format!(
                "run again: retry {} of {} after {} ({} is retried by the state's rule)",
                r["retry"],
                r["of"],
                text::duration(r["wait_ms"].as_u64().unwrap_or(0)),
                r["class"].as_str().unwrap_or("?")
            ),
        );
    }
    if let Some(changes) = &inv.changes {
        show_changes(changes, out);
    }
    let lifecycle: Vec<String> = inv
        .lifecycle
        .iter()
        .map(|l| format!("{} —{}→ {}", l.from, l.event, l.to))
        .collect();
    safe_line(
        out,
        format!(
            "lifecycle ({}): {}",
            inv.lifecycle_fsm,
            lifecycle.join(", ")
        ),
    );
    safe_line(out, format!("--- prompt ---\n{}", inv.prompt));
    safe_line(
        out,
        format!(
            "--- stdout ({} bytes) ---\n{}",
            inv.stdout_bytes, inv.stdout
        ),
    );
    safe_line(
        out,
        format!(
            "--- stderr ({} bytes) ---\n{}",
            inv.stderr_bytes, inv.stderr
        ),
    );
    if let Some(parsed) = &inv.parsed_output {
        safe_line(
            out,
            format!(
                "--- parsed output ---\n{}",
                serde_json::to_string_pretty(parsed).unwrap_or_default()
            ),
        );
    }
    Ok(())
}

/// `Usage: 1200 tokens in, 300 out, $0.0123, 5 turns (3 invocations
/// reported usage, 1 a cost)`: the run's totals as its CLIs reported them.
pub(super) fn usage_totals(u: &crate::store::RunUsage) -> Option<String> {
    if u.invocations == 0 {
        return None;
    }
    let mut parts = vec![format!(
        "{} tokens in, {} out",
        u.input_tokens, u.output_tokens
    )];
    if let Some(c) = u.cost_usd {
        parts.push(crate::orchestrator::usd(c));
    }
    if u.turns > 0 {
        parts.push(text::plural(u.turns as usize, "turn"));
    }
    let priced = match u.priced {
        p if p == u.invocations => String::new(),
        0 => ", none a cost".to_owned(),
        p => format!(", {p} a cost"),
    };
    Some(format!(
        "Usage: {} ({} reported usage{priced})",
        parts.join(", "),
        text::plural(u.invocations as usize, "invocation")
    ))
}

/// One invocation's recorded usage: `100 tokens in, 10 out, $0.01, 4
/// turns, model m, session s`.
fn usage_of_invocation(u: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    let n = |k: &str| u.get(k).and_then(serde_json::Value::as_u64);
    match (n("input_tokens"), n("output_tokens")) {
        (None, None) => {}
        (i, o) => parts.push(format!(
            "{} tokens in, {} out",
            i.map_or("?".into(), |x| x.to_string()),
            o.map_or("?".into(), |x| x.to_string())
        )),
    }
    if let Some(c) = u.get("cost_usd").and_then(serde_json::Value::as_f64) {
        parts.push(crate::orchestrator::usd(c));
    }
    if let Some(t) = n("turns") {
        parts.push(text::plural(t as usize, "turn"));
    }
    for (key, label) in [("model", "model"), ("session_id", "session")] {
        if let Some(v) = u.get(key).and_then(serde_json::Value::as_str) {
            parts.push(format!("{label} {v}"));
        }
    }
    parts.join(", ")
}

/// What the step did to the workspace as recorded, beside what the agent
/// claimed; or what an interrupted step left and was discarded.
fn show_changes(changes: &serde_json::Value, out: &Output) {
    if let Some(d) = changes.get("discarded") {
        let paths: Vec<&str> = d["paths"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p.as_str()).collect())
            .unwrap_or_default();
        names_line(
            out,
            format!(
                "discarded on resume ({}): {}",
                match d["reference"].as_str() {
                    Some(kept) => format!("kept under {kept}"),
                    None => "not kept".to_owned(),
                },
                paths.join(", ")
            ),
        );
        return;
    }
    let Ok(work) = serde_json::from_value::<crate::orchestrator::StepWork>(changes.clone()) else {
        return;
    };
    let files: Vec<String> = work
        .files
        .iter()
        .map(|c| match (c.added, c.removed) {
            (Some(a), Some(r)) => format!("{} (+{a} −{r})", c.path),
            _ => format!("{} (binary)", c.path),
        })
        .collect();
    let recorded = if files.is_empty() {
        "none".to_owned()
    } else {
        files.join(", ")
    };
    names_line(
        out,
        format!(
            "files changed (recorded at commit {}): {recorded}",
            &work.commit[..work.commit.len().min(12)]
        ),
    );
    if let Some(claimed) = &work.claimed {
        let mark = if work.claim_mismatch {
            "  ← does not match the record"
        } else {
            ""
        };
        names_line(
            out,
            format!("files claimed by the agent: {}{mark}", claimed.join(", ")),
        );
    }
    if let Some(r) = &work.rejected {
        names_line(
            out,
            match &r.reference {
                Some(kept) => format!("rejected: {} (kept under {kept})", r.why),
                None => format!("rejected: {} (not kept)", r.why),
            },
        );
    }
    if let Some(ran) = work.test.as_ref().and_then(|t| t.ran.as_ref()) {
        let against = match &ran.baseline {
            Some(b) => format!(" (baseline: {} at step {})", b.count.describe(), b.seq),
            None => String::new(),
        };
        names_line(out, format!("tests: {}{against}", ran.describe()));
        if let Some(why) = &ran.refused {
            names_line(out, format!("not a pass: {why}"));
        }
    }
    if let Some(why) = &work.no_progress {
        names_line(out, format!("no progress: {why}"));
    }
    if let Some(v) = &work.verified {
        names_line(
            out,
            format!("verified on tree {} (commit {})", v.tree, v.commit),
        );
    }
    for note in &work.notes {
        names_line(out, format!("note: {note}"));
    }
}

/// A line of an invocation's record: what the agent printed, wrote or was
/// told, its control characters escaped (`--json` has them raw).
fn safe_line(out: &Output, line: impl AsRef<str>) {
    out.line(text::escape_controls(line.as_ref()));
}

/// [`safe_line`] for a line that quotes names (files an agent made): a
/// newline in one is shown as `␤`, so no name can print a line of its own
/// that reads as the record's.
fn names_line(out: &Output, line: impl AsRef<str>) {
    safe_line(out, line.as_ref().replace('\n', "\u{2424}"));
}

#[cfg(test)]
mod tests {
    use super::bar;

    #[test]
    fn bars_scale_to_the_longest_step() {
        assert_eq!(bar(10, 10, 4), "████");
        assert_eq!(bar(5, 10, 4), "██");
        assert_eq!(bar(1, 1000, 4), "▏");
        assert_eq!(bar(0, 1000, 4), "");
    }
}
