//! `modix diff`, `modix apply` and `modix prune`: the way back from a run's
//! workspace to the user's project, and the way to clear finished ones away.

use serde_json::json;

use super::runs;
use super::{Ctx, Output};
use crate::error::{Error, Exit};
use crate::orchestrator::{SCHEMA_VERSION, StepWork};
use crate::store::{Run, RunStatus, Store};
use crate::text;
use crate::workspace::{
    self, ApplyStrategy, DiffRange, Git, Mode, NothingApplied, WorkspaceRecord,
};

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The run: an id, a unique prefix, its short id (`modix/<short>`), `last`, `last~1`, …
    #[arg(value_name = "RUN")]
    pub run: String,
    /// Only the files changed and how much (`git diff --stat`).
    #[arg(long)]
    pub stat: bool,
    /// Only what one step changed (its seq, as `modix history RUN` numbers
    /// the steps); a rejected step shows what was taken off.
    #[arg(long, value_name = "SEQ")]
    pub step: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The run: an id, a unique prefix, its short id (`modix/<short>`), `last`, `last~1`, …
    #[arg(value_name = "RUN")]
    pub run: String,
    /// One new commit on your current branch with all of the run's changes (the default).
    #[arg(long, conflicts_with = "merge")]
    pub squash: bool,
    /// A merge commit of the run's branch, keeping its step-by-step history.
    #[arg(long)]
    pub merge: bool,
    /// The commit message (default: names the run and its epic).
    #[arg(long, short, value_name = "TEXT")]
    pub message: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Only runs that ended at least this long ago: 30m, 2h, 1d, 1w.
    #[arg(long, value_name = "AGE", value_parser = text::parse_age)]
    pub older_than: Option<u64>,
    /// Also delete the runs' branches (`modix/<short>`) and kept refs
    /// (rejected and discarded steps); their changes are then gone.
    #[arg(long)]
    pub branches: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The run and its workspace record.
fn run_with_workspace(ctx: &Ctx, reference: &str) -> Result<(Store, Run, WorkspaceRecord), Error> {
    let (store, run) = runs::find(&ctx.paths()?, reference)?;
    let record = run
        .workspace
        .as_ref()
        .and_then(|v| serde_json::from_value::<WorkspaceRecord>(v.clone()).ok())
        .ok_or_else(|| {
            Error::usage(
                format!(
                    "run {} has no recorded workspace (it ran before modix recorded them)",
                    run.id
                ),
                "its changes, if any, are in the folder it ran in",
            )
        })?;
    Ok((store, run, record))
}

pub fn diff(ctx: &Ctx, args: &DiffArgs) -> Result<Exit, Error> {
    let (store, run, record) = run_with_workspace(ctx, &args.run)?;
    let range = match args.step {
        None => DiffRange::Run,
        Some(seq) => match step_range(&store, &run, seq)? {
            Some(range) => range,
            None => {
                ctx.out
                    .line(format!("Step {seq} of run {} changed no files.", run.id));
                return Ok(Exit::Ok);
            }
        },
    };
    // The project's secrets, as the run knew them: an agent handed a key
    // may have written it into a file. Without a project that loads, none.
    let purpose = crate::project::Purpose::Run {
        workflow: Some(&run.workflow_id),
    };
    let (project, _) =
        crate::project::load_for(&ctx.paths()?, &ctx.settings, &ctx.settings_diags, purpose);
    let redactor = project
        .map(|p| crate::orchestrator::agent::redactor(&p.config))
        .unwrap_or_default();
    let redact = |line: &str| redactor.redact(line).into_owned();
    let flags = (args.stat, ctx.out.color);
    let status = workspace::diff(&Git::new(), &record, &range, flags, &redact)?;
    Ok(if status.success() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// What step `seq` changed, from its invocation's record; `None` when it
/// changed nothing.
fn step_range(store: &Store, run: &Run, seq: u32) -> Result<Option<DiffRange>, Error> {
    let transitions = store.transitions(&run.id)?;
    let Some(t) = transitions.iter().find(|t| t.seq == seq) else {
        return Err(Error::usage(
            format!(
                "run {} has no step {seq} (it has {})",
                run.id,
                transitions.len()
            ),
            format!("`modix history {}` lists its steps", run.id),
        ));
    };
    let no_work = || {
        Error::usage(
            format!(
                "step {seq} of run {} ran no agent, so it changed no files",
                run.id
            ),
            format!("`modix history {}` shows which steps ran agents", run.id),
        )
    };
    let n = t.invocation.ok_or_else(no_work)?;
    let inv = store.invocation(&run.id, n)?;
    let work: StepWork = inv
        .changes
        .and_then(|c| serde_json::from_value(c).ok())
        .ok_or_else(no_work)?;
    if work.empty {
        return Ok(None);
    }
    Ok(Some(DiffRange::Step {
        parent: work.parent,
        commit: work.commit,
    }))
}

pub fn apply(ctx: &Ctx, args: &ApplyArgs) -> Result<Exit, Error> {
    let (_store, run, record) = run_with_workspace(ctx, &args.run)?;
    let status = runs::status(&run);
    if status.status == RunStatus::Running {
        return Err(Error::usage(
            format!("run {} is still running", run.id),
            "wait for it to end (or stop it), then apply it",
        ));
    }
    let strategy = if args.merge {
        ApplyStrategy::Merge
    } else {
        ApplyStrategy::Squash
    };
    // The trailers (Modix-Run, -Base, -Head) are the workspace's to add,
    // to this message and to one given with -m alike.
    let message = args.message.clone().unwrap_or_else(|| {
        format!(
            "{}\n\nApplied from modix run {} ({}).",
            text::truncate(run.epic.lines().next().unwrap_or("modix run"), 72),
            run.id,
            status.label,
        )
    });
    let applied = workspace::apply(&Git::new(), &record, strategy, Some(&message))?;
    let out = &ctx.out;
    if args.json {
        out.json(&json!({
            "schema_version": SCHEMA_VERSION,
            "run_id": run.id,
            "applied": applied,
        }));
        return Ok(Exit::Ok);
    }
    let n = text::plural(applied.paths.len(), "file");
    let there = match (&applied.branch, record.mode) {
        (_, Mode::Copy) => format!("in {}", record.project_dir.display()),
        (Some(b), _) => format!("on branch {b}"),
        (None, _) => "at your detached HEAD".into(),
    };
    match (&applied.commit, &applied.branch, record.mode) {
        _ if applied.nothing == Some(NothingApplied::AlreadyApplied) => out.line(format!(
            "Nothing to apply: run {}'s changes are already {there}; nothing was changed.",
            run.id
        )),
        _ if applied.paths.is_empty() => {
            out.line(format!(
                "Nothing to apply: run {} changed no files.",
                run.id
            ));
        }
        (Some(c), branch, _) => out.line(format!(
            "Applied run {} to {} as commit {} ({n}).",
            run.id,
            branch
                .as_deref()
                .map(|b| format!("branch {b}"))
                .unwrap_or_else(|| "a detached HEAD".into()),
            &c[..c.len().min(12)]
        )),
        (None, _, Mode::Copy) => out.line(format!(
            "Wrote run {}'s changes into {} ({n}).",
            run.id,
            record.project_dir.display()
        )),
        _ => out.line(format!("Applied run {} ({n}).", run.id)),
    }
    for note in &applied.notes {
        out.line(format!("  Note: {note}"));
    }
    Ok(Exit::Ok)
}

pub fn prune(ctx: &Ctx, args: &PruneArgs) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let db = paths.db();
    let out = &ctx.out;
    let mut pruned = Vec::new();
    let mut orphans = Vec::new();
    let mut kept = 0;
    // Without a store, which workspaces belong to a run cannot be known.
    if db.exists() {
        let store = Store::open_read_only(&db)?;
        let cutoff = args.older_than.map(|secs| {
            let t = jiff::Timestamp::now()
                .checked_sub(jiff::SignedDuration::from_secs(
                    i64::try_from(secs).unwrap_or(i64::MAX),
                ))
                .unwrap_or(jiff::Timestamp::MIN);
            format!("{t:.3}")
        });
        let git = Git::new();
        for summary in store.runs_matching(&[], None, None)? {
            let run = summary.run;
            let Some(record) = run
                .workspace
                .as_ref()
                .and_then(|v| serde_json::from_value::<WorkspaceRecord>(v.clone()).ok())
            else {
                continue;
            };
            // Live and resumable runs keep their workspace, whatever their age.
            let ended = run.status.is_terminal();
            let old_enough = match (&cutoff, &run.ended_at) {
                (None, _) => true,
                (Some(c), Some(at)) => at.as_str() <= c.as_str(),
                (Some(_), None) => false,
            };
            if !ended || !old_enough {
                kept += usize::from(record.root.exists() && record.mode != Mode::InPlace);
                continue;
            }
            let done = workspace::prune(&git, &record, args.branches)?;
            if !done.removed.is_empty() || !done.refs_deleted.is_empty() {
                pruned.push((run.id, done));
            }
        }
        orphans = prune_orphans(&store, &paths)?;
    }
    if args.json {
        let items: Vec<_> = pruned
            .iter()
            .map(|(id, p)| (id, p, true))
            .chain(orphans.iter().map(|(id, p)| (id, p, false)))
            .map(|(id, p, recorded)| json!({ "run_id": id, "recorded": recorded, "removed": p.removed, "refs_deleted": p.refs_deleted }))
            .collect();
        out.json(&json!({ "schema_version": SCHEMA_VERSION, "pruned": items, "kept": kept }));
        return Ok(Exit::Ok);
    }
    show_pruned(out, &pruned, &orphans, kept);
    Ok(Exit::Ok)
}

/// The workspaces of runs that were never recorded (a `go` killed between
/// making its workspace and recording its run): in the folders this
/// project's runs use, owned by this project, not in its store.
fn prune_orphans(
    store: &Store,
    paths: &crate::config::ProjectPaths,
) -> Result<Vec<(String, workspace::Pruned)>, Error> {
    let Some(home) = crate::config::settings::home_dir() else {
        return Ok(Vec::new());
    };
    let mut runs = std::collections::HashSet::new();
    let mut dirs = Vec::new();
    for summary in store.runs_matching(&[], None, None)? {
        let record = summary
            .run
            .workspace
            .and_then(|v| serde_json::from_value::<WorkspaceRecord>(v).ok());
        if let Some(parent) = record.as_ref().and_then(|r| r.state_dir.parent()) {
            dirs.push(parent.to_path_buf());
        }
        runs.insert(summary.run.id);
    }
    Ok(workspace::prune_orphans(
        &Git::new(),
        &home,
        &paths.root,
        dirs,
        &runs,
    )?)
}

fn show_pruned(
    out: &Output,
    pruned: &[(String, workspace::Pruned)],
    orphans: &[(String, workspace::Pruned)],
    kept: usize,
) {
    if pruned.is_empty() && orphans.is_empty() {
        out.line("Nothing to prune.");
    }
    let never = orphans
        .iter()
        .map(|(id, p)| (format!("{id} (never recorded: its go was killed)"), p));
    for (id, p) in pruned.iter().map(|(id, p)| (id.clone(), p)).chain(never) {
        let mut what = Vec::new();
        if let Some(dir) = p.removed.first() {
            what.push(format!("removed {}", dir.display()));
        }
        if !p.refs_deleted.is_empty() {
            what.push(format!(
                "deleted {}",
                text::plural(p.refs_deleted.len(), "ref")
            ));
        }
        out.line(format!("{id}: {}", what.join("; ")));
    }
    if kept > 0 {
        out.line(format!(
            "Kept {} of runs that are live, resumable or newer than --older-than.",
            text::plural(kept, "workspace")
        ));
    }
}
