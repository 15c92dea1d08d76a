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
pub(crate) fn publish_all(git: &Git, record: &WorkspaceRecord) -> Result<()> {
    let (Some(git_dir), Some(repo)) = (own_git_dir(record), record.repo_root.as_ref()) else {
        return Ok(());
    };
    if !repo.is_dir() {
        return Ok(());
    }
    // Nearly always published already, with the step: nothing to read in
    // the run's repository.
    let users = super::git::read_ref(git, &Ctx::at(repo), &record.run_ref)?;
    if users.as_deref() == Some(record.last_commit.as_str()) {
        return Ok(());
    }
    let own = Ctx {
        cwd: git_dir.clone(),
        git_dir: Some(git_dir),
        ..Ctx::default()
    };
    match super::git::read_ref(git, &own, &record.run_ref)? {
        Some(at) if at == record.last_commit => {
            fetch(git, record, std::slice::from_ref(&record.run_ref), true)
        }
        _ => Ok(()),
    }
}

/// The agents' repository of a worktree run, while it exists.
pub(crate) fn own_git_dir(record: &WorkspaceRecord) -> Option<PathBuf> {
    record
        .git_dir
        .clone()
        .filter(|d| record.borrowed && d.is_dir())
}

/// The user's git fetches `refs` from the run's repository, forced (a
/// rejected step moves the run branch back). Git's `upload-pack` reads that
/// repository's config: with `guard`, the record's kept copy puts modix's
/// settings back first (a command reading a run from its record).
fn fetch(git: &Git, record: &WorkspaceRecord, refs: &[String], guard: bool) -> Result<()> {
    let (Some(git_dir), Some(repo)) = (own_git_dir(record), record.repo_root.as_ref()) else {
        return Ok(());
    };
    if guard {
        guard::restore_for(record)?;
    }
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
        .args(refs.iter().map(|r| format!("+{r}:{r}")))
        .run()
        .map(drop)
}
