//! Isolated, change-tracked workspaces for runs, driven through the git
//! command line. The orchestrator holds one [`Workspace`] per run:
//!
//! - [`Mode::Worktree`] (git projects): a `git worktree` on a new branch
//!   `modix/<short-id>`, outside the project; the user's checkout, index and
//!   branches are never written.
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

// Not wired yet: the orchestrator and CLI will call this module.
#![allow(dead_code, unused_imports)]

mod copy;
mod error;
mod git;
mod lock;
mod scan;

pub use error::{Result, WorkspaceError};
pub use git::{
    Change, ChangeStatus, Git, GitVersion, MERGE_BASE_GIT, MERGE_TREE_GIT, MIN_GIT, RepoInfo,
    dirty_paths, discover,
};
pub use lock::TreeLock;
pub use scan::DEFAULT_TRACKING_IGNORE;
