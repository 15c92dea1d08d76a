//! The run's workspace as the orchestrator uses it: made before the first
//! step (or found again on resume), settled after every agent step, and each
//! step's changes judged against what its agent may change. What is judged
//! and recorded is what git saw, never what the agent said it did.
//! `docs/workspaces.md` states the rules; [`crate::workspace`] does the git.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::agent::{Failure, Verdict};
use super::evidence::{self, Runner, Tally};
use super::invoke::TestRun;
use super::{RunError, RunOptions};
use crate::config::globs::PathPatterns;
use crate::config::{Agent, Binding, Config, DEFAULT_PROTECTED, MAKEFILES};
use crate::fsm::FailureClass;
use crate::project::Project;
use crate::text::plural;
use crate::workspace::list;
use crate::workspace::{
    self, Change, CreateOptions, Discarded, Git, Mode, Settled, Workspace, WorkspaceError,
    WorkspaceRecord,
};

/// modix's own files inside a project: never an agent's change (in place
/// they sit in the tracked tree).
const MODIX_FILES: [&str; 4] = [
    "**/.modix/runs/",
    "**/.modix/modix.db",
    "**/.modix/modix.db-*",
    "**/.modix/state.json",
];

/// A new run's workspace, in the project's mode — or, when it names none, a
/// worktree if the project is in a git repository with commits, else a copy.
pub(super) fn create(
    project: &Project,
    run_id: &str,
    opts: &RunOptions,
) -> Result<(Workspace, Vec<String>), RunError> {
    let git = Git::new();
    let (o, mut notes) = options(&git, project, run_id, opts)?;
    let (ws, more) = Workspace::create(&git, &o)?;
    notes.extend(more);
    Ok((ws, notes))
}

/// Whether `go` could make a run's workspace now, by the checks [`create`]
/// makes, making nothing: `modix doctor`'s answer. The mode runs get (a
/// repository git refuses counts as the worktree it would give), and the
/// refusal `go` would meet, its advice included.
pub fn check_workspace(project: &Project) -> (Mode, Option<String>) {
    let git = Git::new();
    match options(&git, project, "doctor-check", &RunOptions::default()) {
        Ok((o, _)) => (
            o.mode,
            Workspace::check(&git, &o).err().map(|e| e.to_string()),
        ),
        Err(e) => (
            project.config.project.workspace.unwrap_or(Mode::Worktree),
            Some(e.to_string()),
        ),
    }
}

/// What [`Workspace::create`] is given for a new run of this project: its
/// mode (with a note when the automatic choice needs one), where workspaces
/// go, the run's flags and what is never recorded.
fn options(
    git: &Git,
    project: &Project,
    run_id: &str,
    opts: &RunOptions,
) -> Result<(CreateOptions, Vec<String>), RunError> {
    let config = &project.config;
    let dir = &config.paths.root;
    let mut notes = Vec::new();
    let mode = match config.project.workspace {
        Some(mode) => mode,
        None => {
            let (mode, note) = workspace::automatic_mode(git, dir)?;
            notes.extend(note);
            mode
        }
    };
    if opts.base.is_some() && mode != Mode::Worktree {
        return Err(WorkspaceError::Unsupported {
            what: format!("--base needs a git worktree, but this run's workspace is {mode:?}"),
            advice: "Leave out --base, or set projects.json `workspace` to \"worktree\".".into(),
        }
        .into());
    }
    let home = crate::config::settings::home_dir().ok_or_else(|| {
        RunError::Internal("neither MODIX_HOME nor HOME is set: no place for workspaces".into())
    })?;
    let mut o = CreateOptions::new(mode, dir, &home, run_id);
    o.root = config
        .project
        .worktrees
        .as_deref()
        .map(|w| workspace::root_setting(w, dir, &home));
    o.base = opts.base.clone();
    o.include_dirty = opts.include_dirty;
    o.allow_dirty = opts.allow_dirty;
    o.tracking_ignore
        .extend(MODIX_FILES.iter().map(|s| s.to_string()));
    o.tracking_ignore
        .extend(config.project.ignore.iter().cloned());
    if config.project.workspace.is_none() {
        automatic_fallback(git, &mut o, &mut notes);
    }
    Ok((o, notes))
}

/// With no `workspace` setting, a worktree a branch of its own cannot hold
/// (submodules, a partial clone, LFS without git-lfs, a user branch named
/// `modix`, an ignored project folder) gives way to a copy, as `modix init`
/// would have chosen — saying why — rather than refusing the run. `--base`
/// needs the worktree, so with it the refusal stands.
fn automatic_fallback(git: &Git, o: &mut CreateOptions, notes: &mut Vec<String>) {
    if o.mode != Mode::Worktree || o.base.is_some() {
        return;
    }
    if let Err(WorkspaceError::Unsupported { what, .. }) = workspace::Workspace::check(git, o) {
        o.mode = Mode::Copy;
        notes.push(format!(
            "a branch of its own cannot hold the project, as {what}: this run works on a copy \
             (`workspace: \"copy\"` in .modix/projects.json says so for good)"
        ));
    }
}

/// An interrupted run's workspace, found again from its record: refused if
/// its branch moved since the last recorded step (unless `reset`), and what
/// an abandoned agent left behind recorded and removed.
/// `abandoned`: the run stopped while an agent worked, so a step modix
/// settled but never recorded is that step's work, put back without asking.
/// `left`: in place, the tree the interrupted agent left as modix saw it
/// when the run stopped ([`Work::note_left_in_place`]).
pub(super) fn reopen(
    record: &Value,
    reset: bool,
    abandoned: bool,
    left: Option<&str>,
    redactor: &crate::shell::Redactor,
) -> Result<(Workspace, Vec<String>, Option<Discarded>), RunError> {
    let mut record: WorkspaceRecord = serde_json::from_value(record.clone())
        .map_err(|e| RunError::Replay(format!("the run's workspace record is unreadable: {e}")))?;
    // Before any git of the resume: it reads the run's copy of the user's
    // global config, not what an interrupted agent may have left there.
    let (git, pin_notes) = workspace::run_git(&Git::new(), &mut record)?;
    let asked = reset;
    let reset = reset
        || (abandoned
            && record.root.is_dir()
            && Workspace::moved_by_unrecorded_step(&git, &record)?);
    let (mut ws, more) = Workspace::reopen(&git, record, reset)?;
    let mut notes = pin_notes;
    notes.extend(more);
    // In place, what is there may be the person's own work since: only
    // taken off when they ask, or when it is, to the byte, what the agent
    // left when the run stopped.
    if ws.mode() == crate::workspace::Mode::InPlace && !asked {
        match ws.unrecorded()? {
            Some((tree, _)) if Some(tree.as_str()) == left => {}
            Some((_, paths)) => {
                return Err(crate::workspace::WorkspaceError::LeftInPlace { paths }.into());
            }
            None => {}
        }
    }
    let last = ws.last_commit().to_owned();
    let mut discarded = match ws.discard_uncommitted() {
        Ok(d) => d,
        // What the abandoned agent left cannot be recorded: it goes
        // (unless the machine is what failed: then resume fails, to be
        // run again once it is mended).
        Err(e @ crate::workspace::WorkspaceError::Git { .. })
            if ws.mode() != crate::workspace::Mode::InPlace && !e.is_environment() =>
        {
            ws.put_back()?;
            notes.push(format!(
                "what the interrupted step left could not be recorded ({e}); the workspace was put back at the last recorded step"
            ));
            None
        }
        Err(e) => return Err(e.into()),
    };
    // What the abandoned step left is judged for secrets like any step:
    // one that wrote a key is not kept, and never published.
    if let Some(d) = &mut discarded {
        let found = secrets_in(&ws, redactor, &last, &d.commit)?;
        if found.is_empty() {
            notes.extend(ws.publish_discarded(d));
        } else {
            ws.unkeep(d)?;
            notes.push(format!(
                "what the interrupted step left wrote the value of {}: it is not kept",
                found.join(", ")
            ));
        }
    }
    Ok((ws, notes, discarded))
}

/// The names of the run's secrets whose values the commits
/// `parent..commit` write (see [`Workspace::written`]), matched across the
/// cuts of git's streamed output, so memory stays bounded.
fn secrets_in(
    ws: &Workspace,
    redactor: &crate::shell::Redactor,
    parent: &str,
    commit: &str,
) -> Result<Vec<String>, RunError> {
    let longest = redactor.longest_configured();
    if longest == 0 {
        return Ok(Vec::new());
    }
    let mut found = std::collections::BTreeSet::new();
    let mut window: Vec<u8> = Vec::new();
    ws.written(parent, commit, &mut |piece| {
        window.extend_from_slice(piece);
        found.extend(
            redactor
                .configured_in(&window)
                .into_iter()
                .map(str::to_owned),
        );
        let cut = window.len().saturating_sub(longest - 1);
        window.drain(..cut);
    })?;
    Ok(found.into_iter().collect())
}

/// What one agent step did to the workspace, as recorded with its
/// invocation (`invocations.changes`) and read back by `history`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepWork {
    /// The step's commit (the last recorded one when nothing changed).
    pub commit: String,
    pub tree: String,
    pub parent: String,
    pub empty: bool,
    /// What git saw change, with line counts.
    pub files: Vec<Change>,
    /// What the agent said it changed (`files_changed`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<Vec<String>>,
    /// The claim and the record disagree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claim_mismatch: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_commits: Vec<String>,
    /// May the agent change files at all.
    #[serde(default)]
    pub write: bool,
    /// Taken off the run branch: why, and where it is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<RejectedWork>,
    /// A test result, for the no-progress rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestSeen>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_progress: Option<String>,
    /// The tree and commit a result that ended the run was bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verified>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RejectedWork {
    pub why: String,
    /// The paths that broke the rule (all of the step's, for a failed step).
    pub paths: Vec<String>,
    /// Where the step's commit is kept for audit; none when it held a
    /// secret.
    #[serde(default)]
    pub reference: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TestSeen {
    pub passed: bool,
    /// Failing tests, normalised and hashed: the same failure twice has the
    /// same fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// What the test command's own output says ran (exit-status testers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran: Option<TestsRan>,
}

/// How many tests a test command ran, by its runner's summary, and what
/// it was judged against.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TestsRan {
    /// The step (transition) it was counted at.
    #[serde(default)]
    pub step: u64,
    /// The runner, by the command or by the summary found; `None`: modix
    /// does not know it, and the count is unknown.
    #[serde(default)]
    pub runner: Option<Runner>,
    /// `None`: no summary in the output.
    #[serde(default)]
    pub count: Option<Tally>,
    /// The run's first count with tests in it, when this is a later one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// Why a pass was not one: no tests, or fewer than the baseline, ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The run's first test run whose summary counted tests that ran: later
/// passes must run as many.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Baseline {
    /// The step it was counted at.
    pub seq: u64,
    pub count: Tally,
}

impl TestsRan {
    /// `unittest: 5 ran`, `unittest: no tests ran`, `unittest: no summary`,
    /// `count unknown`.
    pub fn describe(&self) -> String {
        let count = match &self.count {
            Some(t) if t.ran == 0 => "no tests ran".to_owned(),
            Some(t) => t.describe(),
            None if self.runner.is_some() => "no summary in its output".to_owned(),
            None => "count unknown (a test command modix does not recognise)".to_owned(),
        };
        match self.runner {
            Some(r) => format!("{r}: {count}"),
            None => count,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Verified {
    pub tree: String,
    pub commit: String,
}

/// A limit as the user wrote it: `100 MiB`, `64 KiB`, `1000000 bytes`.
fn exact_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// In place, a step that changed the user's repository settings that can
/// make git run a program (its config and what that includes, attributes,
/// hooks): what it set was put back before modix ran git there, so nothing
/// it named ran outside the agent's bounds; the repository is the user's,
/// so the step is refused, naming what changed, rather than kept.
fn git_settings(changes: &[String], work: &StepWork) -> Refusal {
    Refusal {
        why: format!(
            "changed your repository's git settings, which can make git run a program: {}; \
             they were put back as the run found them before modix ran git there, and the \
             step was taken off",
            list(changes)
        ),
        feedback: format!(
            "Your previous attempt was rejected and its changes were taken off: it changed the \
             repository's git settings ({}). Leave git's configuration, hooks and \
             `.git/info/attributes` as they are: do not run `git config` or write under \
             `.git/` (`git -c name=value` sets a value for one command).",
            list(changes)
        ),
        paths: work.files.iter().map(|c| c.path.clone()).collect(),
        keep: true,
    }
}

/// A step that changed files inside submodules, in place: git records a
/// submodule only as its commit, so the step is refused whole; what it did
/// inside them was put back, kept in each one's stash.
fn in_submodules(submodules: &[String], work: &StepWork) -> Refusal {
    let mut paths: Vec<String> = submodules.to_vec();
    paths.extend(work.files.iter().map(|c| c.path.clone()));
    paths.sort();
    paths.dedup();
    let one = submodules.len() == 1;
    Refusal {
        why: format!(
            "changed files inside {} {} (git records a submodule only as the commit it is at); \
             taken off, and kept in {} stash (`git -C {} stash list`)",
            if one {
                "the submodule"
            } else {
                "the submodules"
            },
            list(submodules),
            if one { "its" } else { "each one's" },
            submodules[0]
        ),
        feedback: format!(
            "Your previous attempt was rejected and its changes were taken off: it changed files \
             inside {}, a git submodule, which this run cannot record. Change only the \
             project's own files.",
            list(submodules)
        ),
        paths,
        keep: true,
    }
}

/// Records the refusal on the step and, for an answer that was valid,
/// makes the verdict a rejection that tells the agent why.
fn refuse(work: &mut StepWork, r: Refusal, verdict: &mut Verdict, kept: Option<String>) {
    if let Verdict::Output(_) = verdict {
        let mut f = Failure::new(FailureClass::InvalidOutput, format!("rejected: {}", r.why));
        f.errors = vec![r.why.clone()];
        f.feedback = Some(r.feedback);
        *verdict = Verdict::Failed(f);
    }
    work.rejected = Some(RejectedWork {
        why: r.why,
        paths: r.paths,
        reference: kept,
    });
}

/// The facts of the step being judged.
pub(super) struct StepFacts<'a> {
    pub seq: u64,
    pub state: &'a str,
    pub attempt: u32,
    pub agent: &'a Agent,
    /// The TaskSpec the run is executing, if it has one.
    pub task_spec: Option<&'a Value>,
}

/// Why a step's changes are not accepted.
struct Refusal {
    why: String,
    paths: Vec<String>,
    /// What the agent's next attempt is told.
    feedback: String,
    /// Whether the step's commit may be kept (for audit): not when it
    /// holds a secret.
    keep: bool,
}

/// The workspace and the rules its steps are judged by.
pub(super) struct Work {
    ws: Workspace,
    protected: PathPatterns,
    always: Vec<String>,
    no_progress_after: u32,
    /// The project folder inside the tracked tree: `""` or `"sub/dir/"`.
    prefix: String,
    /// Trees that accepted writing steps handed off (and the base tree).
    seen_trees: Vec<String>,
    /// The last failing tests' fingerprint, and how many times in a row.
    streak: Option<(String, u32)>,
    /// The run's secrets: a step that writes one is rejected.
    redactor: crate::shell::Redactor,
    /// `projects.json` `max_file_bytes`.
    max_file_bytes: u64,
    /// The run's first test run that counted tests (see [`Baseline`]).
    baseline: Option<Baseline>,
    /// The project's `package.json` at the run's base, read when a test
    /// command first needs it (`npm test` runs its `scripts.test`).
    package_json: Option<Option<String>>,
}

impl Work {
    pub fn new(mut ws: Workspace, project: &Project) -> Result<Work, RunError> {
        ws.set_max_file_bytes(Some(project.config.project.max_file_bytes));
        let p = &project.config.project;
        let protected = match &p.protected {
            Some(list) => PathPatterns::new(list.iter().map(String::as_str), false),
            None => PathPatterns::new(default_protected(&project.config), false),
        }
        .map_err(|e| RunError::Internal(format!("projects.json `protected`: {e}")))?;
        let rec = ws.record();
        let prefix = rec
            .workdir
            .strip_prefix(&rec.root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = if prefix.is_empty() {
            prefix
        } else {
            format!("{prefix}/")
        };
        let base = ws.last_tree().to_owned();
        Ok(Work {
            ws,
            protected,
            always: p.scope.always.clone(),
            no_progress_after: project.config.runtimes.loops.no_progress_after.max(1),
            prefix,
            seen_trees: vec![base],
            streak: None,
            redactor: super::agent::redactor(&project.config),
            max_file_bytes: project.config.project.max_file_bytes,
            baseline: None,
            package_json: None,
        })
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// In place, when the run stops while an agent worked: the tree the
    /// agent left, kept in `file` for the resume, which then takes exactly
    /// that off without asking (anything else there may be the person's).
    /// Best effort: without it, the resume asks.
    pub fn note_left_in_place(&mut self, file: &std::path::Path) {
        if self.ws.mode() != crate::workspace::Mode::InPlace {
            return;
        }
        match self.ws.unrecorded() {
            Ok(Some((tree, _))) => {
                let _ = crate::fsutil::write_replace(file, tree.as_bytes());
            }
            _ => {
                let _ = std::fs::remove_file(file);
            }
        }
    }

    /// The record to keep with the next step.
    pub fn record_json(&self) -> Value {
        serde_json::to_value(self.ws.record()).unwrap_or(Value::Null)
    }

    /// Rebuilds what the no-progress rule remembers from the steps on
    /// record (a resumed run judges like one that never stopped).
    pub fn replay<'v>(&mut self, past: impl IntoIterator<Item = &'v Value>) {
        for v in past {
            let Ok(w) = serde_json::from_value::<StepWork>(v.clone()) else {
                continue;
            };
            self.remember(&w);
        }
    }

    /// Starts the no-progress memory afresh (a redrive: a person stepped in).
    pub fn forget_progress(&mut self) {
        self.seen_trees.truncate(1);
        self.streak = None;
    }

    fn remember(&mut self, w: &StepWork) {
        if w.write && !w.empty && w.rejected.is_none() && !self.seen_trees.contains(&w.tree) {
            self.seen_trees.push(w.tree.clone());
        }
        if self.baseline.is_none()
            && let Some(ran) = w.test.as_ref().and_then(|t| t.ran.as_ref())
            && let Some(count) = ran.count.filter(|c| c.ran > 0)
        {
            self.baseline = Some(Baseline {
                seq: ran.step,
                count,
            });
        }
        if let Some(t) = &w.test {
            self.streak = match (&t.fingerprint, self.streak.take()) {
                (Some(fp), Some((last, n))) if *fp == last => Some((last, n + 1)),
                (Some(fp), _) => Some((fp.clone(), 1)),
                (None, _) => None,
            };
        }
    }

    /// Records what the step changed and judges it. A change the agent may
    /// not make turns its verdict into a rejection; the changes of a step
    /// that failed are taken off too, so the next attempt starts from the
    /// last good one. Either way the step's commit stays under a ref.
    pub fn settle(
        &mut self,
        step: &StepFacts<'_>,
        verdict: &mut Verdict,
    ) -> Result<StepWork, RunError> {
        let settled = match self.ws.settle(step.seq, step.state, step.attempt) {
            Ok(settled) => settled,
            // In place the tree is the user's: nothing is cleaned there. A
            // full disk is the machine's failure: the run stops, resumable.
            Err(e @ crate::workspace::WorkspaceError::Git { .. })
                if self.ws.mode() != crate::workspace::Mode::InPlace && !e.is_environment() =>
            {
                return self.unrecordable(step, e, verdict);
            }
            Err(e) => return Err(e.into()),
        };
        let moved = settled.moved;
        let oversized = settled.oversized.clone();
        let embedded = settled.embedded.clone();
        let settings = settled.settings.clone();
        let submodules = self.ws.stash_changed_submodules(step.seq)?;
        let mut work = StepWork::new(settled, step.agent, verdict);
        if let Some(claimed) = &work.claimed {
            let seen: Vec<&str> = work.files.iter().map(|c| self.shown(&c.path)).collect();
            let claimed: Vec<&str> = claimed.iter().map(|c| c.trim_start_matches("./")).collect();
            work.claim_mismatch = claimed.iter().any(|c| !seen.contains(c))
                || seen.iter().any(|s| !claimed.contains(s));
        }
        if work.empty && oversized.is_empty() && submodules.is_empty() && settings.is_empty() {
            self.publish(moved, &mut work);
            return Ok(work);
        }
        let secret = match work.empty {
            true => None,
            false => self.secrets_written(&work)?,
        };
        let secret = match secret {
            None if !work.agent_commits.is_empty() => self.big_in_history(&work)?,
            other => other,
        };
        let refusal = match verdict {
            _ if secret.is_some() => secret,
            _ if !settings.is_empty() => Some(git_settings(&settings, &work)),
            _ if !oversized.is_empty() => Some(self.oversized(&oversized, &work)),
            _ if !embedded.is_empty() => Some(self.embedded(&embedded, &work)),
            _ if !submodules.is_empty() => Some(in_submodules(&submodules, &work)),
            Verdict::Output(_) => self.refusal(step, &work.files),
            Verdict::Failed(f) => Some(Refusal {
                why: format!(
                    "the step failed ({}), so its changes were taken off",
                    f.class
                ),
                paths: work.files.iter().map(|c| c.path.clone()).collect(),
                feedback: String::new(),
                keep: true,
            }),
            Verdict::Cancelled => None,
        };
        match refusal {
            // Nothing to take off: what broke the rule was removed already.
            Some(r) if work.empty => refuse(&mut work, r, verdict, None),
            Some(r) => self.reject(step.seq, &mut work, r, verdict)?,
            None => self.publish(moved, &mut work),
        }
        Ok(work)
    }

    /// The agents' own commits in the step hold a file over the limit (one
    /// a later commit removed, so the tree did not show it): the step is
    /// refused and not kept, so those objects are never published.
    fn big_in_history(&self, work: &StepWork) -> Result<Option<Refusal>, RunError> {
        let big = self
            .ws
            .big_blobs(&work.parent, &work.commit, self.max_file_bytes)?;
        if big.is_empty() {
            return Ok(None);
        }
        let limit = exact_bytes(self.max_file_bytes);
        let named: Vec<String> = big
            .iter()
            .map(|(id, n)| format!("blob {} ({})", short(id), super::agent::bytes(*n)))
            .collect();
        Ok(Some(Refusal {
            why: format!(
                "its own commits hold {} over the limit of {limit} for a file: {} (projects.json \
                 `max_file_bytes`); the step was taken off and not kept",
                plural(big.len(), "file"),
                list(&named)
            ),
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: a commit of \
                 yours held a file over the limit of {limit} for a file in this project. Do not \
                 write or commit files that large."
            ),
            paths: work.files.iter().map(|c| c.path.clone()).collect(),
            keep: false,
        }))
    }

    /// Files over `projects.json` `max_file_bytes` the step wrote (removed
    /// before they were recorded): the step is refused, naming them.
    fn oversized(&self, files: &[(String, u64)], work: &StepWork) -> Refusal {
        let named: Vec<String> = files
            .iter()
            .map(|(p, n)| format!("{} ({})", self.shown(p), super::agent::bytes(*n)))
            .collect();
        let limit = exact_bytes(self.max_file_bytes);
        let mut paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
        paths.extend(work.files.iter().map(|c| c.path.clone()));
        paths.sort();
        paths.dedup();
        Refusal {
            why: format!(
                "wrote {} over the limit of {limit} for a file: {} (projects.json \
                 `max_file_bytes`); removed before recording, and the step taken off",
                plural(files.len(), "file"),
                list(&named)
            ),
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: it wrote {}, \
                 over the limit of {limit} for a file in this project. Do not write files that \
                 large into the project.",
                list(&named)
            ),
            paths,
            keep: true,
        }
    }

    /// Repositories the step made inside the tree: git records each as a
    /// commit id only (of a repository no one else has), so their files
    /// would be in no step, no diff and no `apply`. The step is refused,
    /// naming them; the folders stay (their files are in no commit to keep
    /// them), for the next attempt to make plain folders of.
    fn embedded(&self, repos: &[String], work: &StepWork) -> Refusal {
        let named: Vec<String> = repos.iter().map(|p| self.shown(p).to_owned()).collect();
        let what = match repos.len() {
            1 => "a git repository".to_owned(),
            n => format!("{n} git repositories"),
        };
        Refusal {
            why: format!(
                "made {what} inside the workspace: {} (git records such a folder as a commit \
                 id, none of its files); the step was taken off",
                list(&named)
            ),
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: it made a \
                 git repository of its own inside the project ({}), whose files git cannot \
                 record. Remove its `.git` (the files stay, as plain files of the project) \
                 and do not run `git init` or `git clone` inside the project.",
                list(&named)
            ),
            paths: work.files.iter().map(|c| c.path.clone()).collect(),
            keep: true,
        }
    }

    /// A step whose files git could not record (its `add -A` failed: an
    /// attribute the agent set that git cannot apply, say) is the step's
    /// fault, not modix's: the files go back to the last recorded step and
    /// the step is refused with git's words, so the run goes on (and its
    /// bound ends it if the agent keeps at it).
    fn unrecordable(
        &mut self,
        step: &StepFacts<'_>,
        e: crate::workspace::WorkspaceError,
        verdict: &mut Verdict,
    ) -> Result<StepWork, RunError> {
        self.ws.put_back()?;
        let last = self.ws.last_commit().to_owned();
        let mut work = StepWork {
            commit: last.clone(),
            tree: self.ws.last_tree().to_owned(),
            parent: last,
            empty: true,
            write: step.agent.manifest.permissions.write_files,
            ..StepWork::default()
        };
        let why = format!(
            "its files could not be recorded ({e}); the workspace was put back at the last \
             recorded step"
        );
        let r = Refusal {
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: git could \
                 not record its files ({e}). Leave the repository's settings and attributes as \
                 they are."
            ),
            why,
            paths: Vec::new(),
            keep: true,
        };
        refuse(&mut work, r, verdict, None);
        Ok(work)
    }

    /// A kept step's run ref goes to the user's repository once judged —
    /// never before, so a step taken off for a secret is never published.
    fn publish(&self, moved: bool, work: &mut StepWork) {
        if moved {
            work.notes.extend(self.ws.publish_step());
        }
    }

    /// A step whose change writes the value of one of the run's secrets
    /// (into a file, a file's name, or an agent's commit) is refused, and
    /// its commit not kept: the run's history, the run branch the user's
    /// repository gets, and `modix apply` never carry a key. Matched across
    /// the cuts of git's streamed output, so memory stays bounded.
    fn secrets_written(&self, work: &StepWork) -> Result<Option<Refusal>, RunError> {
        let names = secrets_in(&self.ws, &self.redactor, &work.parent, &work.commit)?;
        if names.is_empty() {
            return Ok(None);
        }
        let paths: Vec<String> = work.files.iter().map(|c| c.path.clone()).collect();
        Ok(Some(Refusal {
            why: format!(
                "the change writes the value of {} into the workspace ({}); a secret is never \
                 recorded, so the step was taken off and not kept",
                names.join(", "),
                list(&paths)
            ),
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: it wrote the \
                 value of the secret {} into a file or commit. Never write a secret into the \
                 project; code reads it from the environment variable at run time.",
                names.join(", ")
            ),
            paths,
            keep: false,
        }))
    }

    /// A step whose result would end the run in success must leave the tree
    /// as the executor handed it off: the result is about that tree.
    pub fn bind_ending(
        &mut self,
        seq: u64,
        work: &mut StepWork,
        verdict: &mut Verdict,
    ) -> Result<(), RunError> {
        if !work.empty && work.rejected.is_none() {
            let paths: Vec<String> = work.files.iter().map(|c| c.path.clone()).collect();
            let refusal = Refusal {
                why: format!(
                    "the tree changed during a step whose result would end the run ({}); \
                     a result must be about the tree it was given",
                    list(&paths)
                ),
                feedback: format!(
                    "Your previous attempt changed files ({}), so its result could not be \
                     trusted and the changes were taken off. Do not change files in this step.",
                    list(&paths)
                ),
                paths,
                keep: true,
            };
            self.reject(seq, work, refusal, verdict)?;
            return Ok(());
        }
        work.verified = Some(Verified {
            tree: self.ws.last_tree().to_owned(),
            commit: self.ws.last_commit().to_owned(),
        });
        Ok(())
    }

    /// Takes the step off the run branch and, for an answer that was valid,
    /// makes the verdict a rejection that tells the agent why.
    fn reject(
        &mut self,
        seq: u64,
        work: &mut StepWork,
        r: Refusal,
        verdict: &mut Verdict,
    ) -> Result<(), RunError> {
        let rejected = if r.keep {
            self.ws.reject(seq, &work.commit, &work.parent)?
        } else {
            self.ws.reject_unkept(seq, &work.commit, &work.parent)?
        };
        refuse(work, r, verdict, rejected.rejected_ref);
        Ok(())
    }

    /// What the step may not have changed, checked in order of severity: a
    /// read-only agent may change nothing; protected paths need the
    /// manifest's permission; a writing agent under a TaskSpec stays in its
    /// tasks' `files` (plus `scope.always`).
    fn refusal(&self, step: &StepFacts<'_>, changes: &[Change]) -> Option<Refusal> {
        let paths: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        let perms = step.agent.manifest.permissions;
        if !perms.write_files {
            return Some(Refusal {
                why: format!(
                    "agent `{}` may not change files (its manifest says `write_files: false`), \
                     but it changed {}",
                    step.agent.id,
                    list(&paths)
                ),
                feedback: format!(
                    "Your previous attempt changed files ({}); you may not change any file. \
                     Those changes were taken off. Answer without editing files.",
                    list(&paths)
                ),
                paths,
                keep: true,
            });
        }
        if !perms.protected {
            // A path outside the project folder (a monorepo's) is matched
            // from the repository's top: its CI config and tests are there.
            let hit: Vec<String> = paths
                .iter()
                .filter(|p| self.protected.matches(self.shown(p)))
                .cloned()
                .collect();
            if !hit.is_empty() {
                return Some(Refusal {
                    why: format!(
                        "changed protected {} {} (projects.json `protected`; an agent may change \
                         them only when its manifest says `permissions.protected: true`)",
                        if hit.len() == 1 { "path" } else { "paths" },
                        list(&hit)
                    ),
                    feedback: format!(
                        "Your previous attempt was rejected and its changes were taken off: it \
                         changed {}, which no agent in this role may change (the tests are the \
                         judge of your work, not part of it). Fix the code, not the tests.",
                        list(&hit)
                    ),
                    paths: hit,
                    keep: true,
                });
            }
        }
        let scope = Scope::of(step.task_spec, &self.always)?;
        let out: Vec<String> = paths
            .iter()
            .filter(|p| !self.local(p).is_some_and(|l| scope.patterns.matches(l)))
            .cloned()
            .collect();
        if out.is_empty() {
            return None;
        }
        Some(Refusal {
            why: format!(
                "changed {} outside its task's scope: {} (the TaskSpec's `files`{})",
                plural(out.len(), "file"),
                list(&out),
                if self.always.is_empty() {
                    ""
                } else {
                    " and projects.json `scope.always`"
                }
            ),
            feedback: format!(
                "Your previous attempt was rejected and its changes were taken off: it changed \
                 {}, outside the task's scope. Change only these paths: {}.",
                list(&out),
                scope.listed.join(", ")
            ),
            paths: out,
            keep: true,
        })
    }

    /// A path as the agent sees it: relative to the project folder when in
    /// it, else from the repository's top.
    fn shown<'p>(&self, path: &'p str) -> &'p str {
        self.local(path).unwrap_or(path)
    }

    /// A path of the tracked tree relative to the project folder; `None`
    /// when it is outside it (a monorepo's other folders).
    fn local<'p>(&self, path: &'p str) -> Option<&'p str> {
        path.strip_prefix(self.prefix.as_str())
    }

    /// Whether the step made no progress, and why: a writing agent that
    /// changed nothing or went back to a tree an earlier step handed off, or
    /// the same test failure `loops.no_progress_after` times in a row.
    pub fn progress(&mut self, verdict: &Verdict, work: &mut StepWork) -> Option<String> {
        let Verdict::Output(out) = verdict else {
            return None;
        };
        let mut why = None;
        if work.write && work.rejected.is_none() {
            if work.empty {
                why = Some("the step changed nothing in the workspace".to_owned());
            } else if self.seen_trees.contains(&work.tree) {
                why = Some(format!(
                    "the step left the files exactly as an earlier step had (tree {})",
                    short(&work.tree)
                ));
            }
        }
        if let Some(passed) = out.get("passed").and_then(Value::as_bool) {
            let ran = work.test.take().and_then(|t| t.ran);
            work.test = Some(TestSeen {
                passed,
                fingerprint: (!passed).then(|| fingerprint(out)),
                ran,
            });
        }
        self.remember(work);
        // Only the step whose tests failed again is judged by it.
        if let Some((fp, n)) = self.streak.as_ref().filter(|_| work.test.is_some())
            && *n >= self.no_progress_after
            && why.is_none()
        {
            why = Some(format!(
                "the same tests failed the same way {n} times in a row (fingerprint {})",
                short(fp)
            ));
        }
        work.no_progress = why.clone();
        why
    }
}

impl Work {
    /// Weighs a test command's result against what its runner's summary
    /// says ran: a pass where no tests ran (a recognised runner's summary
    /// missing or counting none), or fewer than the run's baseline, is
    /// made a failure saying so — the executor's next attempt is told. A
    /// command modix does not recognise, with no summary it knows in its
    /// output, passes on its exit status as before, its count unknown.
    pub fn weigh_tests(
        &mut self,
        step: u64,
        run: &TestRun<'_>,
        verdict: &mut Verdict,
        work: &mut StepWork,
    ) {
        let Verdict::Output(out) = verdict else {
            return;
        };
        let Some(passed) = out.get("passed").and_then(Value::as_bool) else {
            return;
        };
        let runner = evidence::runner_of(run.argv, self.package_json());
        let reading = evidence::read(runner, run.printed);
        let baseline = self.baseline;
        let refused = match passed {
            true => refusal(&reading, baseline),
            false => None,
        };
        let ran = TestsRan {
            step,
            runner: reading.runner,
            count: reading.tally,
            baseline,
            refused: refused.clone(),
        };
        let summary = out.get("summary").and_then(Value::as_str).unwrap_or("");
        let summary = match &refused {
            Some(why) => format!("{summary}, but {why}"),
            None if reading.runner.is_some() => format!("{summary}; {}", ran.describe()),
            None => summary.to_owned(),
        };
        out["summary"] = Value::String(summary);
        if let Some(why) = &refused {
            out["passed"] = Value::Bool(false);
            out["failures"] = serde_json::json!([format!(
                "The test command exited 0, but {why}. Make the tests pass by fixing the code; \
                 do not stop, skip or bypass them."
            )]);
        }
        work.test = Some(TestSeen {
            passed: refused.is_none() && passed,
            fingerprint: None,
            ran: Some(ran),
        });
    }

    /// `package.json` as the run started (not as an agent left it).
    fn package_json(&mut self) -> Option<&str> {
        if self.package_json.is_none() {
            let path = format!("{}package.json", self.prefix);
            let read = self.ws.base_file(&path).ok().flatten();
            self.package_json = Some(read.and_then(|b| String::from_utf8(b).ok()));
        }
        self.package_json.as_ref().and_then(|p| p.as_deref())
    }
}

/// [`DEFAULT_PROTECTED`], and the makefiles when the tests run through
/// `make` (`projects.json` `commands.test`, or a tester's command).
fn default_protected(config: &Config) -> impl Iterator<Item = &'static str> {
    let make = |argv: &[String]| {
        argv.first()
            .is_some_and(|w| matches!(w.rsplit('/').next(), Some("make" | "gmake")))
    };
    let testers = config.agents.values().filter(|a| a.role == "tester");
    let by_make = config.project.commands.test.as_deref().is_some_and(make)
        || testers
            .filter_map(|a| match &a.binding {
                Binding::Command { argv } => Some(argv.as_slice()),
                Binding::Shell { .. } => None,
            })
            .any(make);
    let makefiles = if by_make { MAKEFILES } else { &[] };
    DEFAULT_PROTECTED.iter().chain(makefiles).copied()
}

/// Why a pass is not one, by what its output says ran.
fn refusal(reading: &evidence::Reading, baseline: Option<Baseline>) -> Option<String> {
    let runner = reading.runner.map_or("the test runner", |r| r.into());
    match (reading.tally, baseline) {
        (Some(t), _) if t.ran == 0 => Some(format!(
            "no tests ran ({runner}'s summary counts none that ran{})",
            match t.skipped {
                0 => String::new(),
                n => format!("; {n} skipped"),
            }
        )),
        (None, _) if reading.by_command => Some(format!(
            "no tests ran: {runner}'s summary of the tests it ran is missing from its output"
        )),
        (None, Some(b)) => Some(format!(
            "no tests ran that modix could count: its output has no test summary, while the \
             run's first counted test run (step {}) had one: {}",
            b.seq,
            b.count.describe()
        )),
        (Some(t), Some(b)) if t.unit == b.count.unit && t.ran < b.count.ran => Some(format!(
            "fewer tests ran than in the run's first counted test run: {} now, {} at step {}",
            t.ran, b.count.ran, b.seq
        )),
        _ => None,
    }
}

impl StepWork {
    fn new(s: Settled, agent: &Agent, verdict: &Verdict) -> StepWork {
        let claimed = verdict
            .output()
            .and_then(|v| v.get("files_changed"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        StepWork {
            commit: s.commit,
            tree: s.tree,
            parent: s.parent,
            empty: s.empty,
            files: s.changes,
            claimed,
            agent_commits: s.agent_commits,
            write: agent.manifest.permissions.write_files,
            notes: s.notes,
            ..StepWork::default()
        }
    }

    /// One line for the transition's reason: what the record shows changed.
    pub fn summary(&self) -> String {
        if let Some(r) = &self.rejected {
            return format!("rejected: {}", r.why);
        }
        if self.empty {
            return "no files changed".to_owned();
        }
        let (added, removed) = line_counts(&self.files);
        format!("{} (+{added} −{removed})", plural(self.files.len(), "file"))
    }
}

/// Lines added and removed over all changes (binary files count none).
pub fn line_counts(changes: &[Change]) -> (u64, u64) {
    changes.iter().fold((0, 0), |(a, r), c| {
        (a + c.added.unwrap_or(0), r + c.removed.unwrap_or(0))
    })
}

/// What a writing agent may change under a TaskSpec.
struct Scope {
    patterns: PathPatterns,
    /// As the planner wrote them, for the feedback.
    listed: Vec<String>,
}

impl Scope {
    /// `None` when there is no TaskSpec, or its tasks name no files at all
    /// (then there is nothing to hold the agent to).
    fn of(task_spec: Option<&Value>, always: &[String]) -> Option<Scope> {
        let listed: Vec<String> = task_spec?
            .get("tasks")?
            .as_array()?
            .iter()
            .filter_map(|t| t.get("files").and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if listed.is_empty() {
            return None;
        }
        let all = listed.iter().chain(always).map(String::as_str);
        // The planner's globs are untrusted text: a broken one is a literal path.
        let patterns = PathPatterns::new(all, true).ok()?;
        Some(Scope { patterns, listed })
    }
}

/// A failing test result, normalised so that only what failed counts:
/// durations, times, addresses, temporary paths and counts of runs drop out.
fn fingerprint(out: &Value) -> String {
    use sha2::Digest;
    use std::sync::LazyLock;
    static NOISE: LazyLock<Vec<(regex::Regex, &'static str)>> = LazyLock::new(|| {
        [
            (r"0x[0-9a-fA-F]+", "0x_"),
            (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?",
                "<time>",
            ),
            (r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b", "<time>"),
            (
                r"\b\d+(\.\d+)?\s?(ns|us|µs|ms|s|sec|secs|seconds|m|min)\b",
                "<dur>",
            ),
            (r"/tmp/[^\s'\x22:]+", "<tmp>"),
            (r"\b(pid|PID)[ =:]\s*\d+", "pid"),
        ]
        .into_iter()
        .filter_map(|(re, to)| regex::Regex::new(re).ok().map(|r| (r, to)))
        .collect()
    });
    let failures: Vec<&str> = out
        .get("failures")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let text = if failures.is_empty() {
        out.get("summary")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    } else {
        failures.join("\n")
    };
    let normal = NOISE
        .iter()
        .fold(text, |t, (re, to)| re.replace_all(&t, *to).into_owned());
    let digest = sha2::Sha256::digest(normal.trim().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(10)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_protected_covers_common_test_layouts() {
        let p = PathPatterns::new(DEFAULT_PROTECTED.iter().copied(), false).unwrap();
        for hit in [
            "tests/test_a.py",
            "test_calc.py",
            "pkg/test_calc.py",
            "x/foo_test.go",
            "src/a.test.ts",
            ".modix/agents.json",
            ".github/workflows/ci.yml",
            "pkg/tests/helpers.rs",
            "conftest.py",
            "pkg/sub/conftest.py",
            "sitecustomize.py",
            "unittest.py",
            "jest.config.js",
            "web/vitest.config.ts",
            ".mocharc.yml",
            "tox.ini",
        ] {
            assert!(p.matches(hit), "{hit}");
        }
        for miss in [
            "calc.py",
            "src/main.rs",
            "contest.py",
            "latest/x.py",
            "package.json",
            "pyproject.toml",
            "setup.cfg",
            "pkg/unittest.py",
        ] {
            assert!(!p.matches(miss), "{miss}");
        }
    }

    #[test]
    fn a_broken_planner_glob_is_a_literal_path() {
        let scope = Scope::of(
            Some(&json!({"tasks": [{"files": ["a[.py"]}]})),
            &["Cargo.lock".into()],
        )
        .unwrap();
        assert!(scope.patterns.matches("a[.py"));
        assert!(scope.patterns.matches("Cargo.lock"));
        assert!(!scope.patterns.matches("b.py"));
        assert!(Scope::of(Some(&json!({"tasks": [{"files": []}]})), &[]).is_none());
        assert!(Scope::of(None, &[]).is_none());
    }

    #[test]
    fn fingerprints_ignore_times_and_addresses() {
        let a = json!({"passed": false, "failures": [
            "FAIL: test_mean (test_calc.Test) at 0x7f3a2b1c", "Ran 3 tests in 0.004s",
            "2026-11-22T01:02:03Z /tmp/tmp.abc123/x.py"]});
        let b = json!({"passed": false, "failures": [
            "FAIL: test_mean (test_calc.Test) at 0x7fffe000", "Ran 3 tests in 0.117s",
            "2026-11-23T09:08:07Z /tmp/tmp.zzz999/x.py"]});
        let c = json!({"passed": false, "failures": ["FAIL: test_median (test_calc.Test)"]});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }
}
