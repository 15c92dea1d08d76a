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

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use serde::{Deserialize, Serialize};

use super::create::short_ref;
use super::error::{Result, WorkspaceError};
use super::git::{
    Change, ChangeStatus, Ctx, DiffEntry, Git, MERGE_BASE_GIT, MERGE_TREE_GIT, commit_tree_by,
    diff_trees, discover, git_paths, lossy, nul_split, read_ref, resolve_commit, status_paths,
    tree_of, update_ref,
};
use super::in_the_way::{self, OnDisk};
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
    /// Why nothing was changed, when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing: Option<NothingApplied>,
    pub notes: Vec<String>,
}

/// Why `apply` changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NothingApplied {
    /// The run recorded no changes.
    NoChanges,
    /// The user's branch (or folder) has the run's changes already: it was
    /// applied before, or the same change made by hand.
    AlreadyApplied,
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
    let (run_head, gone) = run_head(git, &user, record)?;
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
        return Ok(nothing(branch, NothingApplied::NoChanges));
    }
    ready_to_apply(git, &user)?;
    let tree = merged_tree(git, &user, record, strategy, (&user_head, &run_head))?;
    if tree == tree_of(git, &user, &user_head)? {
        return Ok(nothing(branch, NothingApplied::AlreadyApplied));
    }
    let entries = diff_trees(git, &user, &user_head, &tree)?;
    untracked_in_the_way(git, &user, repo, &entries)?;

    let msg = apply_message(record, strategy, message, &run_head, &branch_name);
    let parents = match strategy {
        ApplyStrategy::Squash => vec![user_head.as_str()],
        ApplyStrategy::Merge => vec![user_head.as_str(), run_head.as_str()],
    };
    // The commit goes on the user's branch at their request: it is theirs,
    // as `git merge` would make it.
    let who = git.user_identity(repo)?;
    let commit = commit_tree_by(git, &user, (&tree, &parents), &msg, who.as_ref())?;
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
    let notes = gone
        .into_iter()
        .chain(who.is_none().then(|| NO_IDENTITY.to_owned()))
        .collect();
    Ok(Applied {
        commit: Some(commit),
        branch,
        paths: entries.into_iter().map(|e| e.change.path).collect(),
        nothing: None,
        notes,
    })
}

/// Said when git has no identity of the user's to commit with.
const NO_IDENTITY: &str = "git has no identity of yours here (user.name, user.email), so the commit is by modix <modix@localhost>; set yours (`git config --global user.name …`, `git config --global user.email …`) and `git commit --amend --reset-author` to make it yours";

/// Refuses ([`WorkspaceError::UntrackedInTheWay`]) when the checkout in
/// `repo` has untracked (or ignored) files where the change from the user's
/// HEAD (`entries`) adds a path: a file there, a parent the change keeps as
/// a file, or anything in a folder the change replaces by a file. git's
/// `read-tree -m -u` would refuse too, or silently drop ignored files;
/// this names them first. The checkout has no tracked changes (checked
/// before), so a tracked path on disk is as HEAD has it.
fn untracked_in_the_way(git: &Git, user: &Ctx, repo: &Path, entries: &[DiffEntry]) -> Result<()> {
    let removed: HashSet<&[u8]> = entries
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Deleted)
        .map(|e| e.raw_path.as_slice())
        .collect();
    let added = entries
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Added)
        .map(|e| e.raw_path.as_slice());
    // A folder that becomes a file: its tracked files all go (the change
    // has a file there); what git does not track would be lost.
    let mut untracked_under = |raw: &[u8]| -> Result<Vec<String>> {
        let mut spec = b":(literal)".to_vec();
        spec.extend_from_slice(raw);
        spec.push(b'/');
        let out = git
            .at(user)
            .args(["ls-files", "-z", "--others", "--"])
            .arg(std::ffi::OsStr::from_bytes(&spec))
            .run()?;
        Ok(nul_split(&out).map(lossy).collect())
    };
    let paths = in_the_way::in_the_way(repo, added, &removed, &mut untracked_under)?;
    if !paths.is_empty() {
        return Err(WorkspaceError::UntrackedInTheWay { paths });
    }
    Ok(())
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

/// Where a path a copy run changed stands in the original folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// As it was copied: the run's version is still to be written.
    Pending,
    /// As the run left it: applied before, or the same change by hand.
    Done,
    /// Neither: the user's edit, which writing back would lose.
    Changed,
}

/// How far each of `entries` is, in `original`: compared by type, mode and
/// content (hashed as git would store it, by the `hashing` context) with
/// the baseline's version and with the run's. A folder where the run adds
/// a file is pending: [`in_the_way`](in_the_way::in_the_way) then decides
/// whether what it holds may go.
fn progress(
    git: &Git,
    hashing: &Ctx,
    original: &Path,
    entries: &[DiffEntry],
) -> Result<Vec<Progress>> {
    let mut found: Vec<Option<(&str, String)>> = Vec::with_capacity(entries.len());
    let mut to_hash: Vec<usize> = Vec::new();
    let mut progress = vec![Progress::Changed; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        let meta = match in_the_way::look(original, &e.raw_path)? {
            OnDisk::Here(m) if !m.is_dir() => m,
            // No file there (a folder is none): as before a run that adds
            // it, or after one that deletes it.
            _ => {
                found.push(Some(("000000", String::new())));
                continue;
            }
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            let path = original.join(std::ffi::OsStr::from_bytes(&e.raw_path));
            let target = std::fs::read_link(&path)
                .map_err(|err| WorkspaceError::io("read the symlink", &path, err))?;
            let oid = git
                .at(hashing)
                .args(["hash-object", "--stdin"])
                .input(target.into_os_string().into_encoded_bytes())
                .run_text()?;
            found.push(Some(("120000", oid)));
        } else if ft.is_file() && !e.raw_path.contains(&b'\n') {
            let exec = meta.permissions().mode() & 0o111 != 0;
            found.push(Some((
                if exec { "100755" } else { "100644" },
                String::new(),
            )));
            to_hash.push(i);
        } else {
            // Another kind of file, or a name hash-object cannot read (one
            // path per line): cannot be checked, so it counts as changed.
            found.push(None);
        }
    }
    if !to_hash.is_empty() {
        let mut input = Vec::new();
        for &i in &to_hash {
            input.extend_from_slice(&entries[i].raw_path);
            input.push(b'\n');
        }
        let out = git
            .at(hashing)
            .args(["hash-object", "--stdin-paths"])
            .input(input)
            .run_text()?;
        for (&i, oid) in to_hash.iter().zip(out.lines()) {
            if let Some((_, o)) = &mut found[i] {
                *o = oid.to_owned();
            }
        }
    }
    for ((e, f), p) in entries.iter().zip(&found).zip(&mut progress) {
        let Some((mode, oid)) = f else { continue };
        // An absent path has no blob to compare: its mode says it all.
        let is = |m: &str, o: &str| *mode == m && (m == "000000" || *oid == o);
        if is(&e.old_mode, &e.old_oid) {
            *p = Progress::Pending;
        } else if is(&e.new_mode, &e.new_oid) {
            *p = Progress::Done;
        }
    }
    Ok(progress)
}

/// Copy runs: check that every file the run changed is, in the original
/// folder, still as it was copied (or already as the run left it), and that
/// nothing of the user's stands where the run adds a path; then write the
/// run's versions of the rest back.
fn write_back(git: &Git, record: &WorkspaceRecord) -> Result<Applied> {
    let copy = Ctx::at(&record.root);
    if !record.root.is_dir() {
        return Err(WorkspaceError::Missing {
            path: record.root.clone(),
        });
    }
    // A copy's branch lives in the copy's own repository, pruned with it.
    let (run_head, _) = run_head(git, &copy, record)?;
    let entries = diff_trees(git, &copy, &record.base_commit, &run_head)?;
    if entries.is_empty() {
        return Ok(nothing(None, NothingApplied::NoChanges));
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
    let progress = progress(git, &hashing, original, &entries)?;
    let of = |want: Progress| {
        entries
            .iter()
            .zip(&progress)
            .filter(move |(_, p)| **p == want)
            .map(|(e, _)| e)
    };
    let changed: Vec<String> = of(Progress::Changed)
        .map(|e| e.change.path.clone())
        .collect();
    if !changed.is_empty() {
        return Err(WorkspaceError::OriginalChanged {
            project: original.clone(),
            paths: changed,
        });
    }
    let pending: Vec<&DiffEntry> = of(Progress::Pending).collect();
    if pending.is_empty() {
        return Ok(nothing(None, NothingApplied::AlreadyApplied));
    }
    let removed: HashSet<&[u8]> = pending
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Deleted)
        .map(|e| e.raw_path.as_slice())
        .collect();
    let added = pending
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Added)
        .map(|e| e.raw_path.as_slice());
    let mut left_in = |raw: &[u8]| in_the_way::left_in_folder(original, raw, &removed);
    let blocking = in_the_way::in_the_way(original, added, &removed, &mut left_in)?;
    if !blocking.is_empty() {
        return Err(WorkspaceError::InTheWay {
            project: original.clone(),
            paths: blocking,
        });
    }
    write_files(git, record, &hashing, &run_head, &pending)?;
    let mut notes = vec![format!(
        "the run's changes were written into {}",
        original.display()
    )];
    let done: Vec<String> = of(Progress::Done).map(|e| e.change.path.clone()).collect();
    if !done.is_empty() {
        notes.push(format!(
            "already as the run left them, not written again: {}",
            super::error::list(&done)
        ));
    }
    Ok(Applied {
        commit: None,
        branch: None,
        paths: pending.into_iter().map(|e| e.change.path.clone()).collect(),
        nothing: None,
        notes,
    })
}

/// Writes the run's versions of `pending` into the original folder:
/// deletions first (a file may become a folder, a folder a file), then
/// git's `checkout-index` writes the rest with their modes and symlinks,
/// through a temporary index.
fn write_files(
    git: &Git,
    record: &WorkspaceRecord,
    hashing: &Ctx,
    run_head: &str,
    pending: &[&DiffEntry],
) -> Result<()> {
    let original = &record.project_dir;
    for e in pending
        .iter()
        .filter(|e| e.change.status == ChangeStatus::Deleted)
    {
        let path = original.join(std::ffi::OsStr::from_bytes(&e.raw_path));
        std::fs::remove_file(&path).map_err(|err| WorkspaceError::io("remove", &path, err))?;
        remove_empty_parents(&path, original);
    }
    let mut paths_in = Vec::new();
    for e in pending
        .iter()
        .filter(|e| e.change.status != ChangeStatus::Deleted)
    {
        paths_in.extend_from_slice(&e.raw_path);
        paths_in.push(0);
    }
    if paths_in.is_empty() {
        return Ok(());
    }
    let tmp_index = record.state_dir.join("apply.index");
    let writing = Ctx {
        index: Some(tmp_index.clone()),
        ..hashing.clone()
    };
    git.at(&writing).args(["read-tree", run_head]).run()?;
    let res = git
        .at(&writing)
        .args(["checkout-index", "-f", "-z", "--stdin"])
        .input(paths_in)
        .run();
    let _ = std::fs::remove_file(&tmp_index);
    res.map(drop)
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

/// The run ref's commit, which must be the last recorded step; and a note
/// when the ref is gone but that commit is not.
fn run_head(git: &Git, ctx: &Ctx, record: &WorkspaceRecord) -> Result<(String, Option<String>)> {
    let actual = read_ref(git, ctx, &record.run_ref)?;
    if actual.as_deref() == Some(record.last_commit.as_str()) {
        return Ok((record.last_commit.clone(), None));
    }
    // `modix prune --branches` takes the branch, not the commits: the
    // record names the run's verified result, and a branch that points
    // nowhere cannot have moved it.
    if actual.is_none() && resolve_commit(git, ctx, &record.last_commit)?.is_some() {
        let note = format!(
            "the run's branch {} is gone (`modix prune --branches` removes it); applied its last recorded step, {}",
            short_ref(&record.run_ref),
            &record.last_commit[..record.last_commit.len().min(10)]
        );
        return Ok((record.last_commit.clone(), Some(note)));
    }
    Err(WorkspaceError::RefMoved {
        name: short_ref(&record.run_ref),
        expected: record.last_commit.clone(),
        actual,
    })
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

fn nothing(branch: Option<String>, why: NothingApplied) -> Applied {
    Applied {
        commit: None,
        branch,
        paths: Vec::new(),
        nothing: Some(why),
        notes: Vec::new(),
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
