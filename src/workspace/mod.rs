//! Isolated, change-tracked workspaces for runs, driven through the git
//! command line. The orchestrator holds one [`Workspace`] per run:
//!
//! - [`Mode::Worktree`] (git projects): a checkout on a new branch
//!   `modix/<short-id>`, outside the project, with a repository of its own
//!   that borrows the user's objects; the user's checkout, index, branches,
//!   stash and config are never written — modix only publishes the run's
//!   refs there ([`publish`]).
//! - [`Mode::Copy`] (folders without git): a copy honouring ignore files, with
//!   a repository of its own so change tracking works the same.
//! - [`Mode::InPlace`] (explicit opt-in): the project itself, locked against a
//!   second run, tracked with a private index and refs under `refs/modix/`.
//!
//! After every agent step [`Workspace::settle`] records what changed as a
//! commit (a stat snapshot skips git when nothing did); [`Workspace::reject`]
//! takes the last step off; [`Workspace::reopen`] and
//! [`Workspace::discard_uncommitted`] resume after a crash; [`diff`],
//! [`apply`] and [`prune`] are the way back for the CLI.
//! `docs/workspaces.md` describes the design.

mod apply;
mod copy;
mod create;
mod error;
mod git;
mod guard;
mod in_the_way;
mod lock;
mod orphans;
mod pinned;
mod preflight;
mod publish;
mod scan;
mod settings;
mod track;
mod watch;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use apply::{ApplyStrategy, DiffRange, NothingApplied, Pruned, apply, changes, diff, prune};
pub use error::WorkspaceError;
pub(crate) use error::list;
pub use git::{Change, Git, MIN_GIT};
pub use lock::TreeLock;
pub use orphans::prune_orphans;
pub use pinned::run_git;
pub use preflight::{RootProblem, automatic_mode, root_problem, root_setting};
pub use scan::DEFAULT_TRACKING_IGNORE;
pub use track::{Discarded, Settled};

use git::Ctx;
use scan::{ScanPlan, Snapshot};

/// How a run's agents are isolated from the user's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Worktree,
    Copy,
    InPlace,
}

/// What [`Workspace::create`] needs.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub mode: Mode,
    /// The user's project folder (may be a subfolder of a repository).
    pub project_dir: PathBuf,
    /// modix's home (`~/.modix`): locks, and the default workspace root.
    pub modix_home: PathBuf,
    pub run_id: String,
    /// Where workspaces go; default `<modix_home>/worktrees`.
    pub root: Option<PathBuf>,
    /// Worktree mode: start from this revision instead of HEAD.
    pub base: Option<String>,
    /// Worktree mode: start from a snapshot of the uncommitted changes.
    pub include_dirty: bool,
    /// In-place mode: start even though the tree has uncommitted changes.
    pub allow_dirty: bool,
    /// Gitignore-style globs never recorded (see [`DEFAULT_TRACKING_IGNORE`]).
    pub tracking_ignore: Vec<String>,
}

impl CreateOptions {
    /// Defaults: HEAD as the base, dirty changes left out, the default
    /// tracking-ignore list.
    pub fn new(
        mode: Mode,
        project_dir: impl Into<PathBuf>,
        modix_home: impl Into<PathBuf>,
        run_id: impl Into<String>,
    ) -> Self {
        CreateOptions {
            mode,
            project_dir: project_dir.into(),
            modix_home: modix_home.into(),
            run_id: run_id.into(),
            root: None,
            base: None,
            include_dirty: false,
            allow_dirty: false,
            tracking_ignore: DEFAULT_TRACKING_IGNORE
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// Everything needed to find a workspace again: the store keeps it (as JSON)
/// and hands it to [`Workspace::reopen`], [`diff`], [`apply`] and [`prune`].
/// All paths are canonical. `last_commit` changes with every recorded step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub mode: Mode,
    pub run_id: String,
    /// Names the branch, the refs and the folder (`modix/<short_id>`).
    pub short_id: String,
    /// The user's project folder.
    pub project_dir: PathBuf,
    /// The user's repository top folder, when the project is in git.
    pub repo_root: Option<PathBuf>,
    /// Top folder of the tree the agents change: the worktree or copy, or
    /// (in place) the repository top / the project folder.
    pub root: PathBuf,
    /// Where the agents run (the project's subfolder inside `root`).
    pub workdir: PathBuf,
    /// The tracked part of `root`, `""` (all) or `"sub/dir/"` (in place in a
    /// monorepo: only the project's folder).
    pub scope: String,
    /// modix's files for this run (private index, excludes, own git dir).
    pub state_dir: PathBuf,
    /// The git dir modix names explicitly, so that an agent removing or
    /// replacing the workspace's `.git` cannot cut the run off from its
    /// history: the worktree's or copy's own repository (kept in
    /// `state_dir`, the workspace's `.git` a link to it; in worktree records
    /// from before, `<common dir>/worktrees/<name>`), or in place without
    /// git, modix's own. `None` in place in a repository, and
    /// in worktree and copy records from before (found from the tree).
    pub git_dir: Option<PathBuf>,
    /// Worktree mode: `git_dir` is a repository of modix's own (under
    /// `state_dir`) that borrows the user's objects, and the run's refs are
    /// published to the user's repository as steps are recorded. False in
    /// records from before, whose workspace is a `git worktree` sharing the
    /// user's refs and config.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub borrowed: bool,
    /// The digest of what the guard keeps of the run's own repository (see
    /// `guard`); `None` in records from before the guard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    /// In place in a repository: the digest of what the run keeps of the
    /// user's repository settings that can make git run a program (see
    /// `settings`); `None` in other modes and in records from before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
    /// The digest of the run's copy of the user's global and system git
    /// config, which every git modix runs for the run reads (see
    /// `pinned`); `None` when the run's git was too old to be pointed at
    /// it, and in records from before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_config: Option<String>,
    /// The ref holding the run's steps: `refs/heads/modix/<id>` (worktree,
    /// copy) or `refs/modix/runs/<id>/head` (in place).
    pub run_ref: String,
    pub base_commit: String,
    pub last_commit: String,
    pub tracking_ignore: Vec<String>,
    pub modix_home: PathBuf,
}

impl WorkspaceRecord {
    /// `refs/modix/runs/<short-id>`: rejected and discarded steps live below.
    pub fn refs_prefix(&self) -> String {
        format!("refs/modix/runs/{}", self.short_id)
    }

    /// The tree the lock guards: the one agents write, whole (in place in a
    /// monorepo: the repository, so two runs never track overlapping folders).
    fn lock_tree(&self) -> &Path {
        &self.root
    }

    /// Whether the workspace has a HEAD of its own that follows the run ref.
    fn follows_head(&self) -> bool {
        matches!(self.mode, Mode::Worktree | Mode::Copy)
    }

    /// Git commands on the workspace, with the private index and excludes.
    fn ctx(&self) -> Ctx {
        Ctx {
            cwd: self.root.clone(),
            git_dir: self.git_dir.clone(),
            work_tree: self.git_dir.as_ref().map(|_| self.root.clone()),
            index: Some(self.state_dir.join("index")),
            excludes: Some(self.state_dir.join("exclude")),
        }
    }

    /// The tracked part as a pathspec.
    fn scope_pathspec(&self) -> String {
        if self.scope.is_empty() {
            ".".into()
        } else {
            format!(":(literal){}", self.scope)
        }
    }
}

/// A run's workspace, held by the orchestrator for the length of the run.
#[derive(Debug)]
pub struct Workspace {
    git: Git,
    record: WorkspaceRecord,
    ctx: Ctx,
    /// What the fast path stats, and the snapshot taken after the last settle.
    plan: ScanPlan,
    snapshot: Option<Snapshot>,
    /// The `.git` link as last read pointing home (`restore_git_link`).
    link_seen: Option<crate::fsutil::Seen>,
    /// Files in the last recorded tree (absolute), for the plan.
    tracked: Vec<PathBuf>,
    last_tree: String,
    /// What the guard puts back before modix runs git in the run's own
    /// repository.
    kept: Option<guard::Kept>,
    /// In place: the user's repository settings as the run found them,
    /// held to that before modix runs git there.
    settings: Option<settings::Settings>,
    /// The user's global and system git config as the run found them,
    /// which `git` reads; put back before modix runs git when changed.
    pinned: Option<pinned::Pinned>,
    /// The largest file a step may write (see `track::remove_oversized`).
    max_file_bytes: Option<u64>,
    /// Held for the workspace's life: one live run per tree.
    _lock: TreeLock,
}

impl Workspace {
    /// What the store must keep (updated after every settle, reject, discard).
    pub fn record(&self) -> &WorkspaceRecord {
        &self.record
    }

    pub fn mode(&self) -> Mode {
        self.record.mode
    }

    /// Where the agents run.
    pub fn workdir(&self) -> &Path {
        &self.record.workdir
    }

    pub fn base_commit(&self) -> &str {
        &self.record.base_commit
    }

    /// The last recorded step (the base before any step).
    pub fn last_commit(&self) -> &str {
        &self.record.last_commit
    }

    /// The tree of the last recorded step.
    pub fn last_tree(&self) -> &str {
        &self.last_tree
    }

    /// The driver, e.g. to read [`Git::invocations`].
    pub fn git(&self) -> &Git {
        &self.git
    }
}

/// The short id used in branch, ref and folder names: the last 8 characters
/// of the run id (a ULID's random part), lower-cased; a hash for odd ids.
pub fn short_id(run_id: &str) -> String {
    let clean: String = run_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if clean.len() >= 8 {
        clean[clean.len() - 8..].to_owned()
    } else {
        use sha2::Digest;
        lock::hex(&sha2::Sha256::digest(run_id.as_bytes()))[..8].to_owned()
    }
}
