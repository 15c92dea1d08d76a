//! The way back, for `modix diff`, `modix apply` and `modix prune`: free
//! functions on a stored [`WorkspaceRecord`] (no live [`Workspace`] needed).
//!
//! Applying never risks the user's work: a dirty checkout is refused,
//! conflicts are found with `git merge-tree --write-tree` before anything is
//! touched, the checkout is switched with git's own two-tree `read-tree -m -u`
//! (which refuses, changing nothing, if a file is in the way), and the branch
//! moves with a compare-and-swap `update-ref`. Copy runs are written back file
//! by file after checking that none of the originals changed since the start.
//!
//! [`Workspace`]: super::Workspace

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use serde::{Deserialize, Serialize};

use super::create::short_ref;
use super::error::{Result, WorkspaceError};
use super::git::{
    Change, ChangeStatus, Ctx, DiffEntry, Git, MERGE_BASE_GIT, MERGE_TREE_GIT, commit_tree,
    diff_trees, discover, git_paths, lossy, nul_split, read_ref, resolve_commit, status_paths,
    tree_of, update_ref,
};
use super::lock::{TreeLock, WorktreesLock};
use super::{Mode, WorkspaceRecord};

/// What `diff` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiffRange {
    /// The whole run: base .. last recorded step.
    Run,
    /// One step: its parent .. its commit.
    Step { parent: String, commit: String },
}

/// How `apply` lands a run on the user's current branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyStrategy {
    /// One new commit with the run's changes (base .. head), named after the run.
    Squash,
    /// A `--no-ff` merge commit of the run branch.
    Merge,
}

/// What `apply` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The commit made on the user's branch (`None`: nothing to apply, or a
    /// copy run written back as files).
    pub commit: Option<String>,
    /// The branch it landed on (`None`: detached HEAD, or a copy run).
    pub branch: Option<String>,
    /// Paths changed in the user's tree.
    pub paths: Vec<String>,
    pub notes: Vec<String>,
}

/// What `prune` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    pub removed: Vec<PathBuf>,
    pub refs_deleted: Vec<String>,
}

/// Runs `git diff` (optionally `--stat`) for the run or one step and prints
/// it, coloured when `colour`. No pager. The run's files are the agent's:
/// each line is printed with its control characters made visible (git's
/// own colours kept), so a file cannot retitle the terminal, write the
/// clipboard or clear the screen; and no program the repository's config
/// names (`diff.external`, a textconv driver — an agent may have set one)
/// is run, nor can one hide the change it was asked to show. `redact`
/// takes the project's secrets out of each line first (an agent may have
/// written a key it was handed into a file).
pub fn diff(
    git: &Git,
    record: &WorkspaceRecord,
    range: &DiffRange,
    (stat, colour): (bool, bool),
    redact: &dyn Fn(&str) -> String,
) -> Result<ExitStatus> {
    let ctx = reading_ctx(record)?;
    let (a, b) = match range {
        DiffRange::Run => (record.base_commit.as_str(), record.last_commit.as_str()),
        DiffRange::Step { parent, commit } => (parent.as_str(), commit.as_str()),
    };
    let mut c = git
        .at(&ctx)
        .args(["diff", "--no-ext-diff", "--no-textconv"]);
    c = c.arg(if colour {
        "--color=always"
    } else {
        "--no-color"
    });
    if stat {
        c = c.arg("--stat");
    }
    c.args([a, b, "--"]).run_lines(|line| {
        let line = redact(&String::from_utf8_lossy(line));
        crate::text::escape_controls_but_colour(&line).into_owned()
    })
}

/// Every change of the run: its base against its last recorded step.
pub fn changes(git: &Git, record: &WorkspaceRecord) -> Result<Vec<Change>> {
    let ctx = reading_ctx(record)?;
    Ok(
        diff_trees(git, &ctx, &record.base_commit, &record.last_commit)?
            .into_iter()
            .map(|e| e.change)
            .collect(),
    )
}

/// Lands the run's result on the user's current branch (worktree runs), or
/// writes the changed files back into the original folder (copy runs).
/// In-place runs changed the user's files already and are refused.
pub fn apply(
    git: &Git,
    record: &WorkspaceRecord,
    strategy: ApplyStrategy,
    message: Option<&str>,
) -> Result<Applied> {
    match record.mode {
        Mode::Worktree => apply_to_branch(git, record, strategy, message),
        Mode::Copy => {
            if strategy == ApplyStrategy::Merge {
                return Err(WorkspaceError::Unsupported {
                    what: "a copy run has no branch in your project to merge".into(),
                    advice:
                        "Use squash: the changed files are written back into the project folder."
                            .into(),
                });
            }
            write_back(git, record)
        }
        Mode::InPlace => Err(WorkspaceError::Unsupported {
            what: "an in-place run already changed your files".into(),
            advice: "Review them (`modix diff`) and commit them with git yourself.".into(),
        }),
    }
}

fn apply_to_branch(
    git: &Git,
    record: &WorkspaceRecord,
    strategy: ApplyStrategy,
    message: Option<&str>,
) -> Result<Applied> {
    match strategy {
        ApplyStrategy::Squash => {
            git.require(MERGE_BASE_GIT, "applying a run (merge-tree --merge-base)")?
        }
        ApplyStrategy::Merge => {
            git.require(MERGE_TREE_GIT, "applying a run (merge-tree --write-tree)")?
        }
    };
    let repo = record
        .repo_root
        .as_ref()
        .ok_or_else(|| WorkspaceError::Missing {
            path: record.project_dir.clone(),
        })?;
    let user = Ctx::at(repo);
    super::publish::publish_all(git, record, false)?;
    let run_head = run_head(git, &user, record)?;
    let branch_name = short_ref(&record.run_ref);
    let user_head =
        resolve_commit(git, &user, "HEAD")?.ok_or_else(|| WorkspaceError::NoCommits {
            toplevel: repo.clone(),
        })?;
    let (code, sym) = git
        .at(&user)
        .args(["symbolic-ref", "-q", "HEAD"])
        .run_codes(&[0, 1])?;
    let branch = (code == 0).then(|| short_ref(lossy(&sym).trim()));
    if run_head == record.base_commit {
        return Ok(nothing(branch, "the run recorded no changes"));
    }
    ready_to_apply(git, &user)?;
    let tree = merged_tree(git, &user, record, strategy, (&user_head, &run_head))?;
    if tree == tree_of(git, &user, &user_head)? {
        return Ok(nothing(branch, "your branch already has the run's changes"));
    }
    let entries = diff_trees(git, &user, &user_head, &tree)?;
    let in_the_way: Vec<String> = entries
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Added)
        .filter(|e| {
            repo.join(Path::new(std::ffi::OsStr::from_bytes(&e.raw_path)))
                .symlink_metadata()
                .is_ok()
        })
        .map(|e| e.change.path.clone())
        .collect();
    if !in_the_way.is_empty() {
        return Err(WorkspaceError::UntrackedInTheWay { paths: in_the_way });
    }

    let msg = apply_message(record, strategy, message, &run_head, &branch_name);
    let parents = match strategy {
        ApplyStrategy::Squash => vec![user_head.as_str()],
        ApplyStrategy::Merge => vec![user_head.as_str(), run_head.as_str()],
    };
    let commit = commit_tree(git, &user, &tree, &parents, &msg)?;
    // The checkout follows first: git refuses (writing nothing) if a file is
    // in the way; then the branch, compare-and-swap.
    git.at(&user)
        .args(["read-tree", "-m", "-u", &user_head, &commit])
        .run()?;
    let reflog = format!("modix apply: run {}", record.run_id);
    if let Err(e) = update_ref(git, &user, &reflog, "HEAD", &commit, Some(&user_head)) {
        let _ = git
            .at(&user)
            .args(["read-tree", "-m", "-u", &commit, &user_head])
            .run();
        return Err(e);
    }
    Ok(Applied {
        commit: Some(commit),
        branch,
        paths: entries.into_iter().map(|e| e.change.path).collect(),
        notes: Vec::new(),
    })
}

/// The tree the user's branch gets: the run merged into `user_head`, on
/// objects only (nothing is touched), or [`WorkspaceError::Conflict`].
fn merged_tree(
    git: &Git,
    user: &Ctx,
    record: &WorkspaceRecord,
    strategy: ApplyStrategy,
    (user_head, run_head): (&str, &str),
) -> Result<String> {
    let mut c = git.at(user).args([
        "merge-tree",
        "--write-tree",
        "-z",
        "--name-only",
        "--no-messages",
    ]);
    if strategy == ApplyStrategy::Squash {
        // Only the run's own changes (base .. head), as a cherry-pick would:
        // with --include-dirty the base is a snapshot whose changes are the
        // user's, not the run's.
        c = c.arg(format!("--merge-base={}", record.base_commit));
    }
    let (code, out) = c.args([user_head, run_head]).run_codes(&[0, 1])?;
    let mut fields = nul_split(&out);
    let tree = fields.next().map(lossy).unwrap_or_default();
    if code == 1 {
        let mut paths: Vec<String> = fields.map(lossy).collect();
        paths.dedup();
        return Err(WorkspaceError::Conflict {
            paths,
            branch: short_ref(&record.run_ref),
        });
    }
    Ok(tree)
}

/// The user's checkout can take a run: nothing uncommitted, no merge,
/// rebase, cherry-pick or revert under way.
fn ready_to_apply(git: &Git, user: &Ctx) -> Result<()> {
    let dirty = status_paths(git, user, None, false)?;
    if !dirty.is_empty() {
        return Err(WorkspaceError::DirtyTarget { paths: dirty });
    }
    let states = [
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "rebase-merge",
        "rebase-apply",
    ];
    let paths = git_paths(git, user, &states)?;
    if let Some((state, _)) = states.iter().zip(&paths).find(|(_, p)| p.exists()) {
        return Err(WorkspaceError::Unsupported {
            what: format!("your checkout is in the middle of an operation ({state} exists)"),
            advice: "Finish or abort the merge, rebase or cherry-pick first, then apply.".into(),
        });
    }
    Ok(())
}

/// The applied commit's message: the user's, or one naming the run, with
/// trailers that say which run, base and head it came from.
fn apply_message(
    record: &WorkspaceRecord,
    strategy: ApplyStrategy,
    message: Option<&str>,
    run_head: &str,
    branch_name: &str,
) -> String {
    let trailers = format!(
        "Modix-Run: {}\nModix-Base: {}\nModix-Head: {}\n",
        record.run_id, record.base_commit, run_head
    );
    // commit-tree keeps a message as given: no trailing blank lines before
    // the trailers (they must be the last paragraph to be read as such).
    let subject = message
        .map(str::trim_end)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| match strategy {
            ApplyStrategy::Squash => format!("modix: run {}", record.run_id),
            ApplyStrategy::Merge => format!("Merge modix run {} ({branch_name})", record.run_id),
        });
    format!("{subject}\n\n{trailers}")
}

/// The paths of `entries` whose original (in `original`) is no longer as it
/// was copied: another type or mode, or other content than the baseline's
/// (hashed as git would store it, by the `hashing` context).
fn changed_since_copied(
    git: &Git,
    hashing: &Ctx,
    original: &Path,
    entries: &[DiffEntry],
) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    let mut to_hash: Vec<&DiffEntry> = Vec::new();
    for e in entries {
        let path = original.join(std::ffi::OsStr::from_bytes(&e.raw_path));
        let meta = path.symlink_metadata().ok();
        match (e.change.status, meta) {
            (ChangeStatus::Added, None) => {}
            (ChangeStatus::Added, Some(_)) | (_, None) => changed.push(e.change.path.clone()),
            (_, Some(m)) => {
                let ft = m.file_type();
                let same_kind = match e.old_mode.as_str() {
                    "120000" => ft.is_symlink(),
                    "100755" => ft.is_file() && m.permissions().mode() & 0o111 != 0,
                    "100644" => ft.is_file() && m.permissions().mode() & 0o111 == 0,
                    _ => false,
                };
                if !same_kind {
                    changed.push(e.change.path.clone());
                } else if ft.is_symlink() {
                    let target = std::fs::read_link(&path)
                        .map_err(|err| WorkspaceError::io("read the symlink", &path, err))?;
                    let oid = git
                        .at(hashing)
                        .args(["hash-object", "--stdin"])
                        .input(target.into_os_string().into_encoded_bytes())
                        .run_text()?;
                    if oid != e.old_oid {
                        changed.push(e.change.path.clone());
                    }
                } else if e.raw_path.contains(&b'\n') {
                    // hash-object reads one path per line: cannot check it, so refuse.
                    changed.push(e.change.path.clone());
                } else {
                    to_hash.push(e);
                }
            }
        }
    }
    if !to_hash.is_empty() {
        let mut input = Vec::new();
        for e in &to_hash {
            input.extend_from_slice(&e.raw_path);
            input.push(b'\n');
        }
        let out = git
            .at(hashing)
            .args(["hash-object", "--stdin-paths"])
            .input(input)
            .run_text()?;
        for (e, oid) in to_hash.iter().zip(out.lines()) {
            if oid != e.old_oid {
                changed.push(e.change.path.clone());
            }
        }
    }
    Ok(changed)
}

/// Copy runs: check that every file the run changed is, in the original
/// folder, still as it was copied (content hash against the baseline commit,
/// type, executable bit), then write the run's versions back.
fn write_back(git: &Git, record: &WorkspaceRecord) -> Result<Applied> {
    let copy = Ctx::at(&record.root);
    if !record.root.is_dir() {
        return Err(WorkspaceError::Missing {
            path: record.root.clone(),
        });
    }
    let run_head = run_head(git, &copy, record)?;
    let entries = diff_trees(git, &copy, &record.base_commit, &run_head)?;
    if entries.is_empty() {
        return Ok(nothing(None, "the run recorded no changes"));
    }
    let original = &record.project_dir;
    // Hash the originals as git would store them (filters from the original's
    // attributes), with the copy's repository doing the hashing.
    let hashing = Ctx {
        cwd: original.clone(),
        git_dir: Some(match &record.git_dir {
            Some(d) => d.clone(),
            None => git_dir_of(git, &copy)?,
        }),
        work_tree: Some(original.clone()),
        ..Ctx::default()
    };
    let changed = changed_since_copied(git, &hashing, original, &entries)?;
    if !changed.is_empty() {
        return Err(WorkspaceError::OriginalChanged {
            project: original.clone(),
            paths: changed,
        });
    }

    // Deletions first (a file may become a folder), then git writes the
    // run's versions with their modes and symlinks, through a temporary index.
    for e in entries
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Deleted)
    {
        let path = original.join(std::ffi::OsStr::from_bytes(&e.raw_path));
        std::fs::remove_file(&path).map_err(|err| WorkspaceError::io("remove", &path, err))?;
        remove_empty_parents(&path, original);
    }
    let mut paths_in = Vec::new();
    for e in entries
        .iter()
        .filter(|e| e.change.status != ChangeStatus::Deleted)
    {
        paths_in.extend_from_slice(&e.raw_path);
        paths_in.push(0);
    }
    if !paths_in.is_empty() {
        let tmp_index = record.state_dir.join("apply.index");
        let writing = Ctx {
            index: Some(tmp_index.clone()),
            ..hashing.clone()
        };
        git.at(&writing).args(["read-tree", &run_head]).run()?;
        let res = git
            .at(&writing)
            .args(["checkout-index", "-f", "-z", "--stdin"])
            .input(paths_in)
            .run();
        let _ = std::fs::remove_file(&tmp_index);
        res?;
    }
    Ok(Applied {
        commit: None,
        branch: None,
        paths: entries.into_iter().map(|e| e.change.path).collect(),
        notes: vec![format!(
            "the run's changes were written into {}",
            original.display()
        )],
    })
}

/// Removes a finished run's workspace: the worktree (`git worktree remove
/// --force`, then `git worktree prune`) or the copy, modix's files for it, and
/// with `delete_refs` its branch and `refs/modix/runs/<id>/…`. Refuses while a
/// live run holds the workspace's lock.
pub fn prune(git: &Git, record: &WorkspaceRecord, delete_refs: bool) -> Result<Pruned> {
    let _lock = TreeLock::acquire(&record.modix_home, record.lock_tree(), &record.run_id)?;
    let mut pruned = Pruned::default();
    match record.mode {
        Mode::Worktree if record.borrowed => {
            // What the run's own repository holds goes with it: the user's
            // repository keeps the branch and kept steps (unless they go too).
            let repo = record.repo_root.clone().unwrap_or_default();
            if delete_refs {
                if repo.is_dir() {
                    pruned.refs_deleted = delete_run_refs(git, &Ctx::at(&repo), record)?;
                }
            } else {
                // A branch holding the user's commits stays as it is.
                match super::publish::publish_all(git, record, false) {
                    Ok(_) | Err(WorkspaceError::BranchHasYourCommits { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            if record.root.exists() {
                remove_dir(&record.root)?;
                pruned.removed.push(record.root.clone());
            }
        }
        Mode::Worktree => {
            let repo = record.repo_root.clone().unwrap_or_default();
            // No repository there: git's own error below says so, as before.
            let one_at_a_time = match discover(git, &repo)? {
                Some(info) => Some(WorktreesLock::acquire(&info.common_dir)?),
                None => None,
            };
            if record.root.exists() {
                git.cmd(&repo)
                    .args(["worktree", "remove", "--force"])
                    .arg(&record.root)
                    .run()?;
                pruned.removed.push(record.root.clone());
            }
            git.cmd(&repo).args(["worktree", "prune"]).run()?;
            drop(one_at_a_time);
            if delete_refs {
                pruned.refs_deleted = delete_run_refs(git, &Ctx::at(&repo), record)?;
            }
        }
        Mode::Copy => {
            // The run's refs live in the copy's own repository.
            if record.root.exists() {
                remove_dir(&record.root)?;
                pruned.removed.push(record.root.clone());
            }
        }
        Mode::InPlace => {
            if delete_refs {
                let ctx = Ctx {
                    cwd: record.root.clone(),
                    git_dir: record.git_dir.clone(),
                    ..Ctx::default()
                };
                if record.git_dir.as_ref().is_none_or(|d| d.is_dir()) {
                    pruned.refs_deleted = delete_run_refs(git, &ctx, record)?;
                }
            }
        }
    }
    // modix's own files for the run; an in-place run without git keeps its
    // git dir (its history) unless the refs go too.
    let keep_git_dir = record.mode == Mode::InPlace && record.git_dir.is_some() && !delete_refs;
    if record.state_dir.exists() {
        if keep_git_dir {
            for f in ["index", "exclude"] {
                let _ = std::fs::remove_file(record.state_dir.join(f));
            }
        } else {
            remove_dir(&record.state_dir)?;
            pruned.removed.push(record.state_dir.clone());
        }
    }
    if let Some(parent) = record.state_dir.parent() {
        let _ = std::fs::remove_dir(parent); // only if now empty
    }
    Ok(pruned)
}

fn delete_run_refs(git: &Git, ctx: &Ctx, record: &WorkspaceRecord) -> Result<Vec<String>> {
    let listed = git
        .at(ctx)
        .args(["for-each-ref", "--format=%(refname)"])
        .arg(format!("{}/", record.refs_prefix()))
        .run_text()?;
    let mut refs: Vec<String> = listed
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if read_ref(git, ctx, &record.run_ref)?.is_some() && !refs.contains(&record.run_ref) {
        refs.push(record.run_ref.clone());
    }
    if refs.is_empty() {
        return Ok(refs);
    }
    let script: String = refs.iter().map(|r| format!("delete {r}\n")).collect();
    git.at(ctx)
        .args(["update-ref", "--stdin"])
        .input(script.into_bytes())
        .run()?;
    Ok(refs)
}

/// The run ref's commit, which must be the last recorded step.
fn run_head(git: &Git, ctx: &Ctx, record: &WorkspaceRecord) -> Result<String> {
    let actual = read_ref(git, ctx, &record.run_ref)?;
    if actual.as_deref() != Some(record.last_commit.as_str()) {
        return Err(WorkspaceError::RefMoved {
            name: short_ref(&record.run_ref),
            expected: record.last_commit.clone(),
            actual,
        });
    }
    Ok(record.last_commit.clone())
}

/// A context for reading a run's objects, wherever they still are.
fn reading_ctx(record: &WorkspaceRecord) -> Result<Ctx> {
    let mut ctx = Ctx::at(&record.root);
    match record.mode {
        Mode::Worktree if record.borrowed => match super::publish::own_git_dir(record) {
            // Its settings as modix made them: read there.
            Some(gd) if super::guard::restore_for(record).is_ok() => {
                ctx.cwd = gd.clone();
                ctx.git_dir = Some(gd);
            }
            // Pruned, or its kept settings changed behind modix's back: what
            // was published (the run branch, the kept steps) is in the
            // user's repository.
            _ => ctx.cwd = record.repo_root.clone().unwrap_or_default(),
        },
        Mode::Worktree if !record.root.is_dir() => {
            // The worktree was pruned; the objects are in the user's repo.
            ctx.cwd = record.repo_root.clone().unwrap_or_default();
        }
        Mode::Copy if !record.root.is_dir() => {
            return Err(WorkspaceError::Missing {
                path: record.root.clone(),
            });
        }
        _ => {
            if record.mode == Mode::Copy {
                super::guard::restore_for(record)?;
            }
            ctx.git_dir = record.git_dir.clone();
        }
    }
    Ok(ctx)
}

fn git_dir_of(git: &Git, ctx: &Ctx) -> Result<PathBuf> {
    Ok(PathBuf::from(
        git.at(ctx)
            .args(["rev-parse", "--absolute-git-dir"])
            .run_text()?,
    ))
}

fn nothing(branch: Option<String>, why: &str) -> Applied {
    Applied {
        commit: None,
        branch,
        paths: Vec::new(),
        notes: vec![format!("nothing to apply: {why}")],
    }
}

fn remove_dir(p: &Path) -> Result<()> {
    std::fs::remove_dir_all(p).map_err(|e| WorkspaceError::io("remove", p, e))
}

/// Removes folders emptied by a deletion, up to (not including) `root`, as
/// git does.
fn remove_empty_parents(path: &Path, root: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}
