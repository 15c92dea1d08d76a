//! A worktree run's refs live in the agents' own repository (see
//! `create::borrowing_repo`), out of their reach of the user's. The user's
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
    /// everything, and the next publish, `resume`, `apply` or `prune` tries
    /// again.
    pub(crate) fn publish(&self, kept: Option<&str>) -> Option<String> {
        if !self.record.borrowed {
            return None;
        }
        let mut refs = vec![self.record.run_ref.clone()];
        refs.extend(kept.map(str::to_owned));
        fetch(&self.git, &self.record, &refs).err().map(|e| {
            format!(
                "the run branch {} in your repository could not follow this step ({e}); the run's own repository has it",
                super::create::short_ref(&self.record.run_ref)
            )
        })
    }
}

/// Publishes every ref of the run modix made: the run ref and the kept
/// steps. Nothing for a record whose repository is the user's, or whose own
/// repository is gone (pruned: what it published stays).
pub(crate) fn publish_all(git: &Git, record: &WorkspaceRecord) -> Result<()> {
    let Some(git_dir) = own_git_dir(record) else {
        return Ok(());
    };
    let listed = git
        .at(&Ctx {
            cwd: git_dir.clone(),
            git_dir: Some(git_dir),
            ..Ctx::default()
        })
        .args(["for-each-ref", "--format=%(refname)"])
        .arg(format!("{}/", record.refs_prefix()))
        .run_text()?;
    let mut refs = vec![record.run_ref.clone()];
    refs.extend(
        listed
            .lines()
            .filter(|r| is_kept_step(record, r))
            .map(str::to_owned),
    );
    fetch(git, record, &refs)
}

/// The agents' repository of a worktree run, while it exists.
pub(crate) fn own_git_dir(record: &WorkspaceRecord) -> Option<PathBuf> {
    record
        .git_dir
        .clone()
        .filter(|d| record.borrowed && d.is_dir())
}

/// `refs/modix/runs/<short>/rejected/<n>` or `…/discarded/<n>`: the names
/// modix gives the steps it keeps.
fn is_kept_step(record: &WorkspaceRecord, name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(&record.refs_prefix())
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    let Some((kind, n)) = rest.split_once('/') else {
        return false;
    };
    matches!(kind, "rejected" | "discarded")
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
}

/// The user's git fetches `refs` from the run's repository, forced (a
/// rejected step moves the run branch back). The guard puts modix's
/// settings back first: git's `upload-pack` reads that repository's config.
fn fetch(git: &Git, record: &WorkspaceRecord, refs: &[String]) -> Result<()> {
    let (Some(git_dir), Some(repo)) = (own_git_dir(record), record.repo_root.as_ref()) else {
        return Ok(());
    };
    guard::restore(&git_dir, &record.state_dir)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_steps_modix_keeps_are_published() {
        let record: WorkspaceRecord = serde_json::from_value(serde_json::json!({
            "mode": "worktree", "run_id": "R", "short_id": "abcd1234",
            "project_dir": "/p", "repo_root": "/p", "root": "/w", "workdir": "/w",
            "scope": "", "state_dir": "/s", "git_dir": "/s/git", "borrowed": true,
            "run_ref": "refs/heads/modix/abcd1234", "base_commit": "b", "last_commit": "b",
            "tracking_ignore": [], "modix_home": "/h"
        }))
        .unwrap();
        let p = "refs/modix/runs/abcd1234";
        assert!(is_kept_step(&record, &format!("{p}/rejected/3")));
        assert!(is_kept_step(&record, &format!("{p}/discarded/12")));
        for other in [
            format!("{p}/rejected/x"),
            format!("{p}/rejected/"),
            format!("{p}/agent/1"),
            format!("{p}/rejected/3/more"),
            format!("{p}x/rejected/3"),
            "refs/heads/main".to_owned(),
        ] {
            assert!(!is_kept_step(&record, &other), "{other}");
        }
    }
}
