//! A worktree run's refs live in the agents' own repository (see
//! `create::borrowing_repo`), apart from the user's. The user's
//! repository gets a copy of the refs people read — the run branch
//! `modix/<short>` and the steps kept under `refs/modix/runs/<short>/` —
//! with their objects, fetched by the user's own git from modix's
//! repository, as each step is recorded. Only refs modix names are fetched:
//! whatever else an agent makes in its repository stays there.

use std::path::PathBuf;

use super::error::{Result, WorkspaceError};
use super::git::{Ctx, Git};
use super::{Workspace, WorkspaceRecord, guard};

impl Workspace {
    /// Publishes the run ref and `kept` (a rejected or discarded step's
    /// ref). A failure (say, the user checked the run branch out) is a note
    /// for the step's record, not an error: the run's own repository holds
    /// everything; the next step's publish, or `resume`, `apply` and
    /// `prune` ([`publish_all`]), bring the run branch up to date (a kept
    /// step's ref is not published again).
    pub(crate) fn publish(&self, kept: Option<&str>) -> Option<String> {
        if !self.record.borrowed {
            return None;
        }
        let mut refs = vec![self.record.run_ref.clone()];
        refs.extend(kept.map(str::to_owned));
        // Its callers (a settle, a reject, a resume's discard) put the
        // repository's settings back as they began, and no agent ran since.
        fetch(&self.git, &self.record, &refs, false).err().map(|e| {
            format!(
                "the run branch {} in your repository could not follow this step ({e}); the run's own repository has it",
                super::create::short_ref(&self.record.run_ref)
            )
        })
    }
}

/// Publishes the run branch again, at the last recorded step (`resume`,
/// `apply` and `prune` call it: a crash or a failed fetch may have left the
/// user's copy behind). Only when the run's own branch is at that step: a
/// branch an agent moved since is not published (`apply` then refuses, as
/// the user's copy is not at the recorded step). The kept steps were
/// published as they were made, right after modix made them; their refs in
/// the run's repository are not trusted later (an agent may have made or
/// moved one), so none is published from there. Nothing for a record whose
/// repository is the user's, or whose own repository is gone.
///
/// The user's copy moves only from where modix left it: behind the last
/// step (a publish that failed), or at a step modix published and never
/// recorded (a crash between the two). Anywhere else it holds commits of
/// the user's own, and it is refused with
/// [`WorkspaceError::BranchHasYourCommits`], unless `reset`: then it is
/// put back, the user's tip kept on a branch of its own (the note says
/// which).
pub(crate) fn publish_all(
    git: &Git,
    record: &WorkspaceRecord,
    reset: bool,
) -> Result<Option<String>> {
    let (Some(git_dir), Some(repo)) = (own_git_dir(record), record.repo_root.as_ref()) else {
        return Ok(None);
    };
    if !repo.is_dir() {
        return Ok(None);
    }
    // Nearly always published already, with the step: nothing to read in
    // the run's repository.
    let users = super::git::read_ref(git, &Ctx::at(repo), &record.run_ref)?;
    if users.as_deref() == Some(record.last_commit.as_str()) {
        return Ok(None);
    }
    // Its settings as modix made them before git reads anything there.
    guard::restore_for(record)?;
    let own = Ctx {
        cwd: git_dir.clone(),
        git_dir: Some(git_dir),
        ..Ctx::default()
    };
    if super::git::read_ref(git, &own, &record.run_ref)?.as_deref()
        != Some(record.last_commit.as_str())
    {
        return Ok(None);
    }
    let Some(theirs) = users else {
        fetch(git, record, std::slice::from_ref(&record.run_ref), false)?;
        return Ok(None);
    };
    // The run's repository reads the user's objects (alternates): both
    // commits are there.
    if super::git::is_ancestor(git, &own, &theirs, &record.last_commit)? {
        fetch(git, record, std::slice::from_ref(&record.run_ref), false)?;
        return Ok(None);
    }
    if super::create::unrecorded_step(git, &own, record, &theirs)? {
        fetch(git, record, std::slice::from_ref(&record.run_ref), true)?;
        return Ok(None);
    }
    let branch = super::create::short_ref(&record.run_ref);
    if !reset {
        return Err(WorkspaceError::BranchHasYourCommits {
            branch,
            expected: record.last_commit.clone(),
            actual: theirs,
        });
    }
    let kept = keep_users_tip(git, repo, &branch, &theirs)?;
    fetch(git, record, std::slice::from_ref(&record.run_ref), true)?;
    Ok(Some(format!(
        "{branch} in your repository had commits the run did not make; they are on {kept}, and {branch} is back at the run's last step {}",
        record.last_commit
    )))
}

/// A branch of the user's own for the tip `--reset` moves the run branch
/// off: `<branch>-yours`, or the first free `<branch>-yours-N`.
fn keep_users_tip(git: &Git, repo: &std::path::Path, branch: &str, tip: &str) -> Result<String> {
    let ctx = Ctx::at(repo);
    for n in 1.. {
        let name = match n {
            1 => format!("{branch}-yours"),
            n => format!("{branch}-yours-{n}"),
        };
        let full = format!("refs/heads/{name}");
        if super::git::read_ref(git, &ctx, &full)?.is_none() {
            super::git::update_ref(
                git,
                &ctx,
                "modix: your commits on the run branch",
                &full,
                tip,
                None,
            )?;
            return Ok(name);
        }
    }
    unreachable!("an unbounded range ends only by returning")
}

/// The agents' repository of a worktree run, while it exists.
pub(crate) fn own_git_dir(record: &WorkspaceRecord) -> Option<PathBuf> {
    record
        .git_dir
        .clone()
        .filter(|d| record.borrowed && d.is_dir())
}

/// The user's git fetches `refs` from the run's repository: the run branch
/// (the first) only forward unless `force` — a commit the user made on it
/// is never overwritten by a step — and the kept steps' refs (modix's own
/// names) forced. Git's `upload-pack` reads that repository's config: its
/// callers put modix's settings back first.
fn fetch(git: &Git, record: &WorkspaceRecord, refs: &[String], force: bool) -> Result<()> {
    let (Some(git_dir), Some(repo)) = (own_git_dir(record), record.repo_root.as_ref()) else {
        return Ok(());
    };
    if !repo.is_dir() {
        return Err(WorkspaceError::Missing { path: repo.clone() });
    }
    git.cmd(repo)
        .args([
            "-c",
            "protocol.file.allow=always",
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-prune",
        ])
        .arg(&git_dir)
        .args(refs.iter().enumerate().map(|(i, r)| {
            let plus = if i > 0 || force { "+" } else { "" };
            format!("{plus}{r}:{r}")
        }))
        .run()
        .map(drop)
}
