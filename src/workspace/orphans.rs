//! Workspaces no run owns: what a `modix go` killed between making its
//! workspace and recording its run leaves behind (a worktree and its
//! `modix/<short>` branch, a copy, modix's state folder). No run refers to
//! them, so `modix prune` is the only way they go.
//!
//! Each workspace's state folder holds an owner note (`owner`: the project
//! folder and the run id), written before anything else is made. A
//! workspace is an orphan only when its note names this project, its run is
//! not in this project's store, and nobody holds its tree lock (a `go` still
//! making it holds it). Without a note — a workspace of another project
//! sharing the repository's folder, or one made before notes existed — it
//! is left alone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::create::project_key;
use super::error::{Result, WorkspaceError};
use super::git::{Ctx, Git, discover};
use super::lock::{TreeLock, WorktreesLock};
use super::{Mode, Pruned};

const OWNER: &str = "owner";

/// Writes the owner note into a new workspace's state folder.
pub(super) fn write_owner(state: &Path, project: &Path, run_id: &str, mode: Mode) -> Result<()> {
    let path = state.join(OWNER);
    let text = format!(
        "project={}\nrun={run_id}\nmode={}\n",
        project.display(),
        serde_json::to_value(mode)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    );
    std::fs::write(&path, text).map_err(|e| WorkspaceError::io("write", &path, e))
}

/// What an owner note says.
struct Owner {
    project: PathBuf,
    run_id: String,
    mode: Option<Mode>,
}

fn read_owner(state: &Path) -> Option<Owner> {
    let text = std::fs::read_to_string(state.join(OWNER)).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    Some(Owner {
        project: PathBuf::from(field("project")?),
        run_id: field("run")?,
        mode: field("mode").and_then(|m| serde_json::from_value(m.into()).ok()),
    })
}

/// Removes the workspaces in `dirs` (folders of workspaces, e.g.
/// `~/.modix/worktrees/<project key>`; the project's default ones are added)
/// that belong to `project_dir`, whose run is not in `runs` and that nobody
/// is using; returns what was removed, by the run id each was made for.
pub fn prune_orphans(
    git: &Git,
    modix_home: &Path,
    project_dir: &Path,
    mut dirs: Vec<PathBuf>,
    runs: &HashSet<String>,
) -> Result<Vec<(String, Pruned)>> {
    let project = project_dir
        .canonicalize()
        .map_err(|e| WorkspaceError::io("find", project_dir, e))?;
    let repo = discover(git, &project)?;
    for tree in std::iter::once(&project).chain(repo.as_ref().map(|r| &r.toplevel)) {
        dirs.push(modix_home.join("worktrees").join(project_key(tree)));
    }
    dirs.sort();
    dirs.dedup();
    let mut removed = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(short) = name.strip_suffix(".state") else {
                continue;
            };
            let state = entry.path();
            let Some(owner) = read_owner(&state) else {
                continue;
            };
            if owner.project != project || runs.contains(&owner.run_id) {
                continue;
            }
            let orphan = Orphan {
                folder: dir.join(short),
                partial: dir.join(format!("{short}.partial")),
                state,
                branch: format!("refs/heads/modix/{short}"),
                refs: format!("refs/modix/runs/{short}/"),
                owner,
            };
            let done = orphan.remove(git, modix_home, &project, repo.as_ref())?;
            if !done.removed.is_empty() || !done.refs_deleted.is_empty() {
                removed.push((orphan.owner.run_id, done));
            }
        }
    }
    Ok(removed)
}

/// One workspace no run owns, and the refs made for it.
struct Orphan {
    folder: PathBuf,
    partial: PathBuf,
    state: PathBuf,
    branch: String,
    refs: String,
    owner: Owner,
}

impl Orphan {
    /// Removes it, unless someone holds its tree lock (it is being made, or
    /// in use): then nothing.
    fn remove(
        &self,
        git: &Git,
        modix_home: &Path,
        project: &Path,
        repo: Option<&super::git::RepoInfo>,
    ) -> Result<Pruned> {
        // An in-place run locks the project's tree; the others their folder.
        let tree = match (self.owner.mode, repo) {
            (Some(Mode::InPlace), Some(r)) => r.toplevel.as_path(),
            (Some(Mode::InPlace), None) => project,
            _ => self.folder.as_path(),
        };
        let _lock = match TreeLock::acquire(modix_home, tree, &self.owner.run_id) {
            Ok(lock) => lock,
            Err(WorkspaceError::Locked { .. }) => return Ok(Pruned::default()),
            Err(e) => return Err(e),
        };
        let mut done = Pruned::default();
        if let Some(r) = repo {
            let user = Ctx::at(&r.toplevel);
            let _one_at_a_time = WorktreesLock::acquire(&r.common_dir)?;
            // A workspace made as a `git worktree` (by an older modix) is
            // unregistered; one with a repository of its own is only removed.
            let registered = self.owner.mode == Some(Mode::Worktree)
                && !self.state.join("git").is_dir()
                && self.folder.join(".git").is_file();
            if registered {
                git.cmd(&r.toplevel)
                    .args(["worktree", "remove", "--force"])
                    .arg(&self.folder)
                    .run()?;
                done.removed.push(self.folder.clone());
            }
            git.cmd(&r.toplevel).args(["worktree", "prune"]).run()?;
            // Made for a run that was never recorded: no agent worked on them.
            for name in self.refs_in(git, &user)? {
                git.at(&user).args(["update-ref", "-d", &name]).run()?;
                done.refs_deleted.push(name);
            }
        }
        for dir in [&self.folder, &self.partial, &self.state] {
            if dir.exists() {
                std::fs::remove_dir_all(dir).map_err(|e| WorkspaceError::io("remove", dir, e))?;
                done.removed.push(dir.clone());
            }
        }
        Ok(done)
    }

    /// The orphan's branch and kept refs that exist in the user's repository.
    fn refs_in(&self, git: &Git, user: &Ctx) -> Result<Vec<String>> {
        let out = git
            .at(user)
            .args([
                "for-each-ref",
                "--format=%(refname)",
                &self.branch,
                &self.refs,
            ])
            .run_text()?;
        Ok(out.lines().map(str::to_owned).collect())
    }
}
