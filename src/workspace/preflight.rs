//! Whether a run's workspace can be made, decided before anything is made.
//! [`Workspace::create`] refuses with these checks, `modix doctor` reports
//! them through [`Workspace::check`], and `modix init` picks its mode by
//! them: one set of checks, so doctor never calls ready a project that `go`
//! refuses.

use std::path::{Component, Path, PathBuf};

use super::create::refuse_unsupported;
use super::error::{Result, WorkspaceError};
use super::git::{
    Ctx, Git, MIN_GIT, RepoInfo, dirty_paths, discover, lossy, read_ref, resolve_commit,
};
use super::{CreateOptions, Mode, Workspace};

/// Where a worktree run starts: the user's repository, HEAD's commit (none
/// on a branch without commits) and the commit the run starts from.
pub(super) struct Start {
    pub info: RepoInfo,
    pub head: Option<String>,
    pub base: String,
}

impl Workspace {
    /// Every check [`Workspace::create`] makes before it makes anything,
    /// made without making anything (no folder, ref or commit): what
    /// `modix doctor` reports about the workspace `go` would make.
    pub fn check(git: &Git, opts: &CreateOptions) -> Result<()> {
        git.require(MIN_GIT, "modix workspaces")?;
        let project = canonical(&opts.project_dir)?;
        match opts.mode {
            Mode::Worktree => {
                let start = worktree_start(git, opts, &project)?;
                workspace_root(opts, &[&project, &start.info.toplevel])?;
            }
            Mode::Copy => {
                let repo = copy_repo(git, &project);
                workspace_root(opts, &trees(&project, repo.as_ref()))?;
            }
            Mode::InPlace => {
                let info = discover(git, &project)?;
                if info.is_some() {
                    dirty_in_place(git, opts, &project)?;
                }
                workspace_root(opts, &trees(&project, info.as_ref()))?;
            }
        }
        Ok(())
    }
}

/// The mode a project's runs get when `projects.json` names none: a
/// worktree in a git repository with commits (on any branch: a new branch
/// without any starts from `--base`), else a copy — with a note when the
/// repository has no commits yet. A repository git refuses to use is an
/// error, never taken for a folder without git.
pub fn automatic_mode(git: &Git, dir: &Path) -> Result<(Mode, Option<String>)> {
    Ok(match discover(git, dir)? {
        Some(repo) if repo.head.is_some() || some_branch(git, &repo)?.is_some() => {
            (Mode::Worktree, None)
        }
        Some(_) => (
            Mode::Copy,
            Some(
                "the repository has no commits yet, so this run works on a copy of the \
                 project; commit once and later runs get a branch of their own"
                    .to_owned(),
            ),
        ),
        None => (Mode::Copy, None),
    })
}

/// A branch or tag of the repository that has a commit (the user's own
/// before modix's run branches), or `None` when it has no commits at all.
fn some_branch(git: &Git, info: &RepoInfo) -> Result<Option<String>> {
    let out = git
        .at(&Ctx::at(&info.toplevel))
        .args([
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/",
            "refs/tags/",
        ])
        .run()?;
    let text = lossy(&out);
    let names: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    Ok(names
        .iter()
        .find(|n| !n.starts_with("modix/"))
        .or(names.first())
        .map(|n| (*n).to_owned()))
}

/// The repository, HEAD and the commit a worktree run starts from,
/// refusing what cannot give one: no repository (or one git refuses), no
/// commit to start from, a branch named `modix`, what a checkout cannot
/// hold (submodules, a partial clone, LFS without git-lfs), and a project
/// folder the start commit does not have.
pub(super) fn worktree_start(git: &Git, opts: &CreateOptions, project: &Path) -> Result<Start> {
    let info = discover(git, project)?.ok_or_else(|| WorkspaceError::NotAGitRepo {
        path: project.to_path_buf(),
    })?;
    let user = Ctx::at(&info.toplevel);
    let head = info.head.clone();
    let base = match (&opts.base, &head) {
        (Some(rev), _) => {
            resolve_commit(git, &user, rev)?.ok_or_else(|| WorkspaceError::BadBase {
                rev: rev.clone(),
                stderr: "no such commit".into(),
            })?
        }
        (None, Some(head)) => head.clone(),
        (None, None) => return Err(no_start(git, &info)?),
    };
    // git keeps `modix` and `modix/<short>` apart only as a file and a
    // folder: a branch of the user's named `modix` leaves no room.
    if read_ref(git, &user, "refs/heads/modix")?.is_some() {
        return Err(WorkspaceError::Unsupported {
            what: "your repository has a branch named `modix`, and git cannot make the run's branch `modix/<id>` beside it".into(),
            advice: "Rename it (`git branch -m modix NEW-NAME`), or use `workspace: copy` in .modix/projects.json".into(),
        });
    }
    refuse_unsupported(git, &user, &base)?;
    project_in_commit(git, &info, &base, opts.include_dirty)?;
    Ok(Start { info, head, base })
}

/// Why a repository whose HEAD has no commit gives no start: it has none
/// at all, or only the current branch is new (`git checkout --orphan`) and
/// another one can be named with `--base`.
fn no_start(git: &Git, info: &RepoInfo) -> Result<WorkspaceError> {
    let Some(example) = some_branch(git, info)? else {
        return Ok(WorkspaceError::NoCommits {
            toplevel: info.toplevel.clone(),
        });
    };
    let (_, out) = git
        .at(&Ctx::at(&info.toplevel))
        .args(["symbolic-ref", "-q", "--short", "HEAD"])
        .run_codes(&[0, 1])?;
    Ok(WorkspaceError::UnbornBranch {
        branch: lossy(&out).trim().to_owned(),
        example,
    })
}

/// The project folder (a monorepo's subfolder) must be in the commit the
/// run starts from, or the run's checkout has no project. A folder the
/// repository ignores can never be there — neither committing nor
/// `--include-dirty` takes it — so that is said, with what does work; one
/// merely not committed yet can come with `--include-dirty` (whose snapshot
/// is checked once made).
fn project_in_commit(git: &Git, info: &RepoInfo, base: &str, include_dirty: bool) -> Result<()> {
    let folder = info.prefix.trim_end_matches('/');
    if folder.is_empty() {
        return Ok(());
    }
    let user = Ctx::at(&info.toplevel);
    let (code, _) = git
        .at(&user)
        .args(["cat-file", "-e"])
        .arg(format!("{base}:{folder}"))
        .run_codes(&[0, 1, 128])?;
    if code == 0 {
        return Ok(());
    }
    let (code, out) = git
        .at(&user)
        .args(["check-ignore", "-v", "--"])
        .arg(&info.prefix)
        .run_codes(&[0, 1])?;
    if code == 0 {
        return Err(WorkspaceError::Unsupported {
            what: format!(
                "the project folder {} is ignored by its repository ({}), so no commit or snapshot of the repository can hold it",
                info.prefix,
                ignore_rule(&lossy(&out))
            ),
            advice: "Un-ignore it (and commit it) for runs on a branch of their own, or set \"workspace\": \"copy\" in .modix/projects.json for runs on a copy of the folder.".into(),
        });
    }
    if include_dirty {
        return Ok(());
    }
    Err(not_in_commit(&info.prefix, base))
}

/// `check-ignore -v`'s `SOURCE:LINE:PATTERN<TAB>PATH` as `` `PATTERN` in
/// SOURCE line LINE `` (a global excludes file is named in full).
fn ignore_rule(out: &str) -> String {
    let rule = out.split('\t').next().unwrap_or("").trim();
    let mut parts = rule.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(source), Some(line), Some(pattern)) => {
            format!("`{pattern}` in {source} line {line}")
        }
        _ => rule.to_owned(),
    }
}

/// The project folder is not in the commit the run starts from.
pub(super) fn not_in_commit(prefix: &str, base: &str) -> WorkspaceError {
    WorkspaceError::Unsupported {
        what: format!(
            "the project folder {prefix} is not in commit {}",
            &base[..12.min(base.len())]
        ),
        advice: "Commit it first (or pass --include-dirty).".into(),
    }
}

/// In place, uncommitted changes are refused unless allowed: the run could
/// not tell them from its agents'.
pub(super) fn dirty_in_place(
    git: &Git,
    opts: &CreateOptions,
    project: &Path,
) -> Result<Vec<String>> {
    let dirty = dirty_paths(git, project, Some("."))?;
    if !dirty.is_empty() && !opts.allow_dirty {
        return Err(WorkspaceError::Dirty { paths: dirty });
    }
    Ok(dirty)
}

/// The repository a copy's project is in, only to keep the workspace root
/// out of it: a copy needs no git of the user's, so a repository git
/// refuses does not stop one.
pub(super) fn copy_repo(git: &Git, project: &Path) -> Option<RepoInfo> {
    discover(git, project).ok().flatten()
}

/// The trees no workspace may be inside: the project and its repository.
pub(super) fn trees<'a>(project: &'a Path, repo: Option<&'a RepoInfo>) -> Vec<&'a Path> {
    let mut out = vec![project];
    out.extend(repo.map(|r| r.toplevel.as_path()));
    out
}

/// Why a folder cannot hold workspaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootProblem {
    /// This path (the root or one of its parents) is a file, not a folder.
    NotAFolder(PathBuf),
    /// The root is inside this tree (the project or its repository): a
    /// workspace there would be part of the tree it is made from (a copy
    /// copying itself, the repository's status listing it, in place
    /// recording it).
    Inside(PathBuf),
}

/// The root folder of the run's workspaces (not made yet), refused when it
/// cannot be one.
pub(super) fn workspace_root(opts: &CreateOptions, trees: &[&Path]) -> Result<PathBuf> {
    let root = opts
        .root
        .clone()
        .unwrap_or_else(|| opts.modix_home.join("worktrees"));
    match root_problem(&root, trees) {
        Some(problem) => Err(WorkspaceError::BadRoot {
            root,
            problem,
            configured: opts.root.is_some(),
        }),
        None => Ok(root),
    }
}

/// What keeps `root` from holding workspaces, looked at without making
/// anything (and without git: `validate` asks too). `trees` are canonical.
/// The part of `root` that exists is resolved by the file system (symlinks,
/// `..`); the rest, made later, is taken as written.
pub fn root_problem(root: &Path, trees: &[&Path]) -> Option<RootProblem> {
    let mut existing = root;
    loop {
        match std::fs::metadata(existing) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => return Some(RootProblem::NotAFolder(existing.to_path_buf())),
            Err(_) => existing = existing.parent()?,
        }
    }
    let mut resolved = existing.canonicalize().ok()?;
    for part in root.strip_prefix(existing).ok()?.components() {
        match part {
            Component::Normal(name) => resolved.push(name),
            Component::ParentDir => {
                resolved.pop();
            }
            _ => {}
        }
    }
    trees
        .iter()
        .find(|t| resolved.starts_with(t))
        .map(|t| RootProblem::Inside(t.to_path_buf()))
}

/// The message of [`WorkspaceError::BadRoot`]: what is wrong, and the
/// setting to change.
pub(super) fn bad_root(root: &Path, problem: &RootProblem, configured: bool) -> String {
    let whose = if configured {
        "the workspace root set by projects.json `worktrees`"
    } else {
        "the workspace root in modix's home (MODIX_HOME, else ~/.modix)"
    };
    let fix = if configured {
        "set `worktrees` in .modix/projects.json to a folder outside the project and its repository, or remove it (workspaces then go under ~/.modix/worktrees)"
    } else {
        "point MODIX_HOME at a folder outside the project (it is made when missing), or unset it for ~/.modix"
    };
    match problem {
        RootProblem::NotAFolder(file) => format!(
            "{whose}, {}, cannot hold workspaces: {} is a file, not a folder; {fix}",
            root.display(),
            file.display()
        ),
        RootProblem::Inside(tree) => format!(
            "{whose}, {}, is inside {}, the project or its repository: a run's workspace must be outside the tree it is made from; {fix}",
            root.display(),
            tree.display()
        ),
    }
}

/// A `worktrees` setting as a path: `~/…` under the user's home (else the
/// modix home's parent), a relative path under the project folder, an
/// absolute one as written.
pub fn root_setting(path: &str, project: &Path, modix_home: &Path) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(|| modix_home.parent().map(Path::to_path_buf))
            .unwrap_or_default()
            .join(rest),
        None => project.join(path),
    }
    // `.` parts say nothing and only make messages harder to read.
    .components()
    .collect()
}

fn canonical(p: &Path) -> Result<PathBuf> {
    p.canonicalize()
        .map_err(|e| WorkspaceError::io("find", p, e))
}
