//! [`WorkspaceError`]: every way a workspace operation can fail, each message
//! saying what happened and what the user can do about it.

use std::path::PathBuf;

use super::git::GitVersion;

/// What went wrong, worded for the person reading the CLI's output.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot run git ({0}); install git {min} or newer and put it on PATH", min = super::git::MIN_GIT)]
    GitMissing(String),

    #[error("git {found} is too old: {what} needs git {needed} or newer; upgrade git")]
    GitTooOld {
        found: GitVersion,
        needed: GitVersion,
        what: &'static str,
    },

    /// A git command exited non-zero; `stderr` holds its first lines.
    #[error("`git {command}` failed ({status}) in {}: {stderr}", dir.display())]
    Git {
        command: String,
        dir: PathBuf,
        status: String,
        stderr: String,
    },

    #[error("modix's kept copy of the workspace's git settings in {} was changed (not by modix); the workspace's repository can no longer be trusted. Its recorded steps are on the run's branch in your repository: start a new run from there (`modix go --base modix/<short id>`)", path.display())]
    Tampered { path: PathBuf },

    /// A stop (Ctrl-C, SIGTERM) arrived while the git command ran, and
    /// ended it.
    #[error("`git {command}` was stopped (Ctrl-C or SIGTERM)")]
    Stopped { command: String },

    #[error("git refuses to use the repository at {}: it belongs to another user (git's `safe.directory` check, \"dubious ownership\"), so modix cannot read or record anything there; if you trust it, run `git config --global --add safe.directory {}` (or change its owner to you), then try again", repo.display(), repo.display())]
    DubiousOwnership { repo: PathBuf },

    #[error("git cannot use the repository {} is in ({stderr}); repair it (or move the project out of it), then try again", dir.display())]
    GitRefuses { dir: PathBuf, stderr: String },

    #[error("{} is not inside a git work tree; use workspace: copy (or in_place) for folders without git", path.display())]
    NotAGitRepo { path: PathBuf },

    #[error("the repository at {} has no commits yet; commit something first or use workspace: copy", toplevel.display())]
    NoCommits { toplevel: PathBuf },

    #[error(
        "the current branch `{branch}` has no commits yet (the repository has commits on other branches); pass --base REV to start the run from one (e.g. `--base {example}`), or commit on `{branch}` first"
    )]
    UnbornBranch { branch: String, example: String },

    #[error("unknown base revision `{rev}` ({stderr}); give a branch, tag or commit that exists")]
    BadBase { rev: String, stderr: String },

    #[error(
        "the project's tree has uncommitted changes ({}); commit or stash them, or pass --allow-dirty",
        files(paths)
    )]
    Dirty { paths: Vec<String> },

    #[error("{what}; refusing. {advice}")]
    Unsupported { what: String, advice: String },

    #[error("{} is in use by run {run_id} (pid {pid}); wait for that run to end or stop it, then try again", path.display())]
    Locked {
        path: PathBuf,
        pid: String,
        run_id: String,
    },

    #[error("{}", super::preflight::bad_root(root, problem, *configured))]
    BadRoot {
        root: PathBuf,
        problem: super::preflight::RootProblem,
        /// Set by projects.json `worktrees` (else: modix's home).
        configured: bool,
    },

    #[error("{} already exists; a run with this id was started before (prune it first, or use a new run id)", path.display())]
    AlreadyExists { path: PathBuf },

    #[error("the workspace folder {} is gone (deleted or pruned); the run cannot resume there", path.display())]
    Missing { path: PathBuf },

    #[error("the run's {name} points at {}, but the last recorded step is {expected}: an agent or a person moved it. Inspect it (`git log {name}`), or resume with --reset to put it back and record what is there as discarded", actual.as_deref().unwrap_or("nothing (it was deleted)"))]
    RefMoved {
        name: String,
        expected: String,
        actual: Option<String>,
    },

    #[error(
        "the run branch {branch} in your repository has commits the run did not make: it is at {actual}, the run's last recorded step is {expected}. modix left it as it is. `git merge {branch}` takes the run's steps with your commits; to go on with the run, keep your commits on a branch of your own (`git branch NAME {actual}`) and `modix resume --reset` puts {branch} back at the run's last step"
    )]
    BranchHasYourCommits {
        branch: String,
        expected: String,
        actual: String,
    },

    #[error(
        "the project has changes no recorded step of the run made ({}): what the interrupted agent left, and whatever you changed since; working in place, modix cannot tell them apart, so it removes nothing unasked. Put yours aside first (`git stash push -u -- <paths>`), then `modix resume --reset` records the rest under refs/modix/runs/<id>/discarded/<n> and removes it",
        files(paths)
    )]
    LeftInPlace { paths: Vec<String> },

    #[error(
        "your repository's git settings changed since the run stopped ({}): what an agent interrupted in the middle of a step left, or a change of yours since; a setting there can make git run a program, so modix runs no git in the repository until they are as the run found them. If a change is yours, note it to make it again after the run; `modix resume --reset` puts them back as the run found them",
        list(changes)
    )]
    SettingsChanged { changes: Vec<String> },

    #[error(
        "the workspace has changes that were not recorded ({}); record them (settle) or discard them first",
        files(paths)
    )]
    Unrecorded { paths: Vec<String> },

    #[error(
        "step {commit} is not the run's last recorded step ({last}); only the last step can be taken off"
    )]
    NotLastStep { commit: String, last: String },

    #[error(
        "applying the run would conflict in {}; nothing was changed (your branch, index and files are as they were). Update the run or resolve by hand (`git merge {branch}`)",
        files(paths)
    )]
    Conflict { paths: Vec<String>, branch: String },

    #[error(
        "your checkout has uncommitted changes to tracked files ({}); commit or stash them before applying",
        files(paths)
    )]
    DirtyTarget { paths: Vec<String> },

    #[error(
        "untracked files in your checkout would be overwritten or removed by the run's result ({}); move them away first; nothing was changed",
        files(paths)
    )]
    UntrackedInTheWay { paths: Vec<String> },

    #[error("these files in {} changed since the run started, so writing the run's result back would lose your edits ({}); nothing was written", project.display(), files(paths))]
    OriginalChanged {
        project: PathBuf,
        paths: Vec<String>,
    },

    #[error("files in {} stand where the run's result puts a path (the run did not start from them: made since, or ignored and not copied), and writing it back would overwrite or remove them ({}); move them away first; nothing was written", project.display(), files(paths))]
    InTheWay {
        project: PathBuf,
        paths: Vec<String>,
    },

    #[error("bad tracking-ignore pattern `{pattern}`: {reason}")]
    BadPattern { pattern: String, reason: String },

    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

impl WorkspaceError {
    /// A stable short name of the kind of error, for `--json` consumers.
    pub fn code(&self) -> &'static str {
        use WorkspaceError as E;
        match self {
            E::GitMissing(_) => "git_missing",
            E::GitTooOld { .. } => "git_too_old",
            E::Git { .. } => "git",
            E::Stopped { .. } => "stopped",
            E::Tampered { .. } => "tampered",
            E::NotAGitRepo { .. } => "not_a_git_repo",
            E::NoCommits { .. } => "no_commits",
            E::BadBase { .. } => "bad_base",
            E::Dirty { .. } => "dirty",
            E::Unsupported { .. } => "unsupported",
            E::Locked { .. } => "locked",
            E::BadRoot { problem, .. } => match problem {
                super::preflight::RootProblem::NotAFolder(_) => "root_not_a_folder",
                super::preflight::RootProblem::Inside(_) => "inside_project",
            },
            E::DubiousOwnership { .. } => "dubious_ownership",
            E::GitRefuses { .. } => "git_refuses",
            E::UnbornBranch { .. } => "unborn_branch",
            E::AlreadyExists { .. } => "already_exists",
            E::Missing { .. } => "workspace_missing",
            E::RefMoved { .. } => "ref_moved",
            E::BranchHasYourCommits { .. } => "branch_has_your_commits",
            E::Unrecorded { .. } => "unrecorded",
            E::LeftInPlace { .. } => "left_in_place",
            E::SettingsChanged { .. } => "settings_changed",
            E::NotLastStep { .. } => "not_last_step",
            E::Conflict { .. } => "conflict",
            E::DirtyTarget { .. } => "dirty_target",
            E::UntrackedInTheWay { .. } => "untracked_in_the_way",
            E::OriginalChanged { .. } => "original_changed",
            E::InTheWay { .. } => "in_the_way",
            E::BadPattern { .. } => "bad_pattern",
            E::Io { .. } => "io",
        }
    }

    /// Whether modix itself (or git under it) failed, rather than the
    /// request meeting a state of the user's files it must refuse.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            WorkspaceError::Git { .. }
                | WorkspaceError::Io { .. }
                | WorkspaceError::NotLastStep { .. }
        )
    }

    /// A git that failed for the machine's sake, not the tree's: the disk
    /// full, a quota, a read-only or failing file system, memory, file
    /// handles (git says so in the C library's words). Such a failure is
    /// modix's to report (exit 3, the run resumable once it is mended),
    /// never a step's fault.
    pub fn is_environment(&self) -> bool {
        const SIGNS: [&str; 7] = [
            "No space left on device",
            "Disk quota exceeded",
            "Read-only file system",
            "Input/output error",
            "Cannot allocate memory",
            "Out of memory",
            "Too many open files",
        ];
        match self {
            WorkspaceError::Git { stderr, .. } => SIGNS.iter().any(|s| stderr.contains(s)),
            WorkspaceError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(nix::libc::ENOSPC | nix::libc::EDQUOT | nix::libc::EROFS | nix::libc::EIO)
            ),
            _ => false,
        }
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WorkspaceError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// `3 files: a, b, c` (`1 file: a`), for messages.
pub(crate) fn files(paths: &[String]) -> String {
    format!(
        "{}: {}",
        crate::text::plural(paths.len(), "file"),
        list(paths)
    )
}

/// The first few paths, for messages: long lists say how many more there are.
pub(crate) fn list(paths: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = paths
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        s.push_str(&format!(", … and {} more", paths.len() - SHOWN));
    }
    s
}
