//! Per-step change tracking: [`Workspace::settle`] records what an agent step
//! changed as a commit on the run ref; [`Workspace::reject`] takes the last
//! step off; [`Workspace::discard_uncommitted`] records and removes what an
//! abandoned agent left. All three build trees with the run's private index,
//! so neither the user's nor the agent's index decides what is recorded.
//!
//! What is recorded: every file in the tracked part of the workspace that git
//! does not ignore (`.gitignore`, `info/exclude`, the user's global excludes,
//! the tracking-ignore list), plus files already in the last recorded tree.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::create::short_ref;
use super::error::{Result, WorkspaceError};
use super::git::{
    Change, commit_tree, diff_trees, is_ancestor, lossy, nul_split, read_ref, tree_of, update_ref,
};
use super::scan::Unchanged;
use super::{Mode, Workspace};
use crate::fsutil::Seen;

/// The most paths a settle hands `add -A` by name; past it, git scans the
/// tree (it matches every pathspec against every path it looks at).
const TARGETED_ADD_MAX: usize = 2000;

/// What one settle recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    /// The step's commit; when `empty`, the last recorded commit.
    pub commit: String,
    pub tree: String,
    /// The previous recorded commit: what the changes are measured against
    /// and what [`Workspace::reject`] goes back to. Equals `commit` when empty.
    pub parent: String,
    pub empty: bool,
    pub changes: Vec<Change>,
    /// Commits the agent made itself since the last step (oldest first); the
    /// step's commit sits on top of them.
    pub agent_commits: Vec<String>,
    /// Things the user should know (e.g. the agent moved HEAD elsewhere).
    pub notes: Vec<String>,
    /// The stat snapshot showed no change, so no git process ran.
    pub fast_path: bool,
    /// The run ref moved (a new step, or put back): what
    /// [`Workspace::publish_step`] publishes once the step is judged.
    pub moved: bool,
    /// Files the step wrote over the size limit (path, bytes): removed
    /// before git read them (see [`Workspace::set_max_file_bytes`]).
    pub oversized: Vec<(String, u64)>,
    /// Git repositories the step made inside the tree (`git init` in a
    /// folder, a clone): git records such a folder as one commit id (a
    /// gitlink), none of its files, so what is in it is neither recorded
    /// nor brought back by `apply`.
    pub embedded: Vec<String>,
    /// In place: what the step changed of the user's repository settings
    /// that can make git run a program (`.git/config (filter.x.clean
    /// set)`), put back before modix ran git there (see `settings`).
    #[serde(default)]
    pub settings: Vec<String>,
}

/// A step taken off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// The step's commit, kept under `rejected_ref` for audit (not kept
    /// when it holds a secret).
    pub commit: String,
    pub rejected_ref: Option<String>,
    /// Where the run ref and the files are now.
    pub restored_to: String,
    pub paths: Vec<String>,
}

/// Uncommitted changes found in a workspace (an abandoned agent's), recorded
/// and then removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discarded {
    pub commit: String,
    /// Where it is kept; none when it held a secret ([`Workspace::unkeep`]).
    #[serde(default)]
    pub reference: Option<String>,
    pub paths: Vec<String>,
}

/// The mode git gives a folder that holds a repository of its own.
const GITLINK: &str = "160000";

impl Workspace {
    /// Records whatever changed since the last recorded step as a commit on
    /// the run ref, with `Modix-Run/Seq/State/Attempt` trailers. Nothing
    /// changed: no commit, `empty = true`, and — when the stat snapshot shows
    /// it — not a single git process.
    pub fn settle(&mut self, seq: u64, state: &str, attempt: u32) -> Result<Settled> {
        let restored = self.restore_git_link()?;
        if let Some(before) = &self.snapshot
            && let Some(found) = self.plan.unchanged_since(before)
        {
            if let Unchanged::Since(now) = found {
                self.snapshot = Some(now);
            }
            let mut s = self.unchanged(restored.into_iter().collect());
            s.fast_path = true;
            return Ok(s);
        }
        let mut s = self.settle_with_git(seq, state, attempt)?;
        s.notes.extend(restored);
        Ok(s)
    }

    /// Puts back the workspace's `.git` link (worktree, copy) when the agent
    /// removed or replaced it — the run's history is outside the workspace,
    /// so nothing of it was lost — and says so. Nothing for records that do
    /// not name their git dir, or in place. A link whose stat is as when it
    /// was last read pointing home is not read again ([`Seen`]: a write moves
    /// its ctime): one `lstat` where reading it took four calls, every step.
    fn restore_git_link(&mut self) -> Result<Option<String>> {
        let (Mode::Worktree | Mode::Copy, Some(git_dir)) = (self.record.mode, &self.record.git_dir)
        else {
            return Ok(None);
        };
        let link = self.record.root.join(".git");
        let stat = link.symlink_metadata().ok().map(|m| Seen::of(&m));
        if stat.is_some() && stat == self.link_seen {
            return Ok(None);
        }
        if stat.is_none()
            && let Some(remade) = remake_root(&self.record)?
        {
            self.link_seen = None;
            return Ok(Some(remade));
        }
        let checked = std::time::SystemTime::now();
        // A `gitdir:` line with a path; anything longer is not modix's link.
        let points_home = crate::fsutil::read_small(&link, 8192)
            .ok()
            .is_some_and(|text| {
                let Some(named) = text.strip_prefix("gitdir: ") else {
                    return false;
                };
                let named = self.record.root.join(named.trim_end());
                // Nearly always the very path modix (or git) wrote: no need to
                // resolve both paths, a `readlink` per component each, per step.
                named == *git_dir
                    || named
                        .canonicalize()
                        .is_ok_and(|p| Some(p) == git_dir.canonicalize().ok())
            });
        self.link_seen = stat
            .filter(|_| points_home)
            .and_then(|s| s.settled(checked));
        if points_home {
            return Ok(None);
        }
        let what = match link.symlink_metadata() {
            Ok(m) if m.is_dir() => {
                std::fs::remove_dir_all(&link)
                    .map_err(|e| WorkspaceError::io("remove", &link, e))?;
                "replaced the workspace's .git with a repository of its own (removed)"
            }
            Ok(_) => {
                std::fs::remove_file(&link).map_err(|e| WorkspaceError::io("remove", &link, e))?;
                "changed the workspace's .git link"
            }
            Err(_) => "removed the workspace's .git link",
        };
        write_link(&link, git_dir)?;
        Ok(Some(format!(
            "the agent {what}; it is put back (the run's history is kept outside the workspace)"
        )))
    }

    /// Puts back what the agent changed of the workspace's own git settings
    /// (see [`guard`](super::guard)) before modix runs git there; the note
    /// for the step's record.
    fn guard(&self) -> Result<Vec<String>> {
        let mut notes = self.restore_pinned()?;
        let put = self.put_back_settings()?;
        if !put.is_empty() {
            notes.push(format!(
                "the agent changed your repository's git settings ({}); put back before modix ran git there, so nothing it planted ran",
                super::error::list(&put)
            ));
        }
        notes.extend(self.guard_repository()?);
        Ok(notes)
    }

    /// Puts back what the agent changed of the workspace's own repository
    /// settings (worktree, copy: see [`guard`](super::guard)) and clears the
    /// git locks it left; the notes.
    fn guard_repository(&self) -> Result<Vec<String>> {
        let Some(kept) = &self.kept else {
            return Ok(Vec::new());
        };
        let mut notes: Vec<String> = super::guard::note(&kept.restore()?).into_iter().collect();
        let locks = kept.clear_stale_locks(&self.record.state_dir)?;
        if !locks.is_empty() {
            notes.push(format!(
                "git locks the agent left behind were removed: {}",
                locks.join(", ")
            ));
        }
        Ok(notes)
    }

    /// Puts back the run's copy of the user's global and system config
    /// when changed (see `pinned`): every git modix runs reads it, so this
    /// comes first. The note, if one was.
    fn restore_pinned(&self) -> Result<Vec<String>> {
        match &self.pinned {
            Some(p) => Ok(super::pinned::note(&p.restore()?).into_iter().collect()),
            None => Ok(Vec::new()),
        }
    }

    /// In place: puts back what an agent changed of the user's repository
    /// settings that can make git run a program; what it was, named.
    fn put_back_settings(&self) -> Result<Vec<String>> {
        match &self.settings {
            Some(s) => s.put_back(&self.git),
            None => Ok(Vec::new()),
        }
    }

    fn unchanged(&self, notes: Vec<String>) -> Settled {
        Settled {
            commit: self.record.last_commit.clone(),
            tree: self.last_tree.clone(),
            parent: self.record.last_commit.clone(),
            empty: true,
            changes: Vec::new(),
            agent_commits: Vec::new(),
            notes,
            fast_path: false,
            moved: false,
            oversized: Vec::new(),
            embedded: Vec::new(),
            settings: Vec::new(),
        }
    }

    /// What the agent did to the branch and HEAD of the workspace since the
    /// last recorded step `last`: the commit the step's builds on (the
    /// agent's own last commit when it built on `last`), those commits, and
    /// notes on anything it moved. A run not following HEAD checks its
    /// branch was left alone.
    fn what_the_agent_did(
        &self,
        refs: &RefState,
        last: &str,
    ) -> Result<(String, Vec<String>, Vec<String>)> {
        let last = last.to_owned();
        let mut notes = Vec::new();
        let mut agent_commits = Vec::new();
        let mut parent = last.clone();
        if self.record.follows_head() {
            match refs.head.as_deref() {
                Some(tip) if tip == last => {}
                Some(tip) if is_ancestor(&self.git, &self.ctx, &last, tip)? => {
                    let out = self
                        .git
                        .at(&self.ctx)
                        .args(["rev-list", "--reverse"])
                        .arg(format!("{last}..{tip}"))
                        .run_text()?;
                    agent_commits = out.lines().map(str::to_owned).collect();
                    parent = tip.to_owned();
                }
                other => notes.push(format!(
                    "the workspace's HEAD had moved to {} (not built on the last recorded step {}); the files are recorded as a change from {}",
                    other.unwrap_or("a branch with no commits"),
                    short(&last),
                    short(&last)
                )),
            }
            if !refs.attached {
                notes.push(format!(
                    "the agent left the workspace on {}; it is back on {}",
                    refs.head_name.as_deref().unwrap_or("a detached HEAD"),
                    short_ref(&self.record.run_ref)
                ));
            }
        } else if refs.run_ref.as_deref() != Some(last.as_str()) {
            return Err(WorkspaceError::RefMoved {
                name: self.record.run_ref.clone(),
                expected: last,
                actual: refs.run_ref.clone(),
            });
        }

        Ok((parent, agent_commits, notes))
    }

    fn settle_with_git(&mut self, seq: u64, state: &str, attempt: u32) -> Result<Settled> {
        // First of all: no git runs there before the settings are as kept
        // (the config copy the run's git reads before anything: the
        // settings' names are read by git).
        let mut guarded = self.restore_pinned()?;
        let settings = self.put_back_settings()?;
        guarded.extend(self.guard_repository()?);
        let last = self.record.last_commit.clone();
        let refs = self.ref_state()?;
        let special =
            super::scan::remove_special(&self.plan.special_since(self.snapshot.as_ref()))?;
        let changed = self.changed_paths_on_disk()?;
        let oversized = self.remove_oversized(&changed)?;
        let tree = self.record_tree_of(&changed, &oversized)?;
        let (parent, mut agent_commits, mut notes) = self.what_the_agent_did(&refs, &last)?;
        notes.extend(guarded);
        if refs.run_ref.is_none() {
            notes.push(format!(
                "the run branch {} had been deleted (by the agent?); it is recreated",
                short_ref(&self.record.run_ref)
            ));
        }
        let empty = tree == self.last_tree;
        let commit = if empty {
            if !agent_commits.is_empty() {
                notes.push(format!(
                    "the agent's own commits ({}) add up to no change; the run stays at {}",
                    agent_commits.len(),
                    short(&last)
                ));
            }
            agent_commits.clear();
            last.clone()
        } else {
            let state = one_line(state);
            let message = format!(
                "modix: step {seq} ({state}, attempt {attempt})\n\n\
                 Modix-Run: {}\nModix-Seq: {seq}\nModix-State: {state}\nModix-Attempt: {attempt}\n",
                self.record.run_id,
            );
            commit_tree(&self.git, &self.ctx, &tree, &[&parent], &message)?
        };
        let sync = !empty || refs.head.as_deref() != Some(last.as_str()) || !refs.attached;
        self.point_run_at(&refs, &commit, &format!("modix: step {seq}"), sync)?;
        let entries = if empty {
            Vec::new()
        } else {
            diff_trees(&self.git, &self.ctx, &last, &commit)?
        };
        let embedded = entries
            .iter()
            .filter(|e| e.new_mode == GITLINK && e.old_mode != GITLINK)
            .map(|e| e.change.path.clone())
            .collect();
        let changes = entries.into_iter().map(|e| e.change).collect();
        let moved = refs.run_ref.as_deref() != Some(commit.as_str());
        let tree_changed = tree != self.last_tree;
        self.record.last_commit = commit.clone();
        self.last_tree = tree.clone();
        self.refresh_plan(tree_changed)?;
        notes.extend(self.special_note(special));
        Ok(Settled {
            commit: commit.clone(),
            tree,
            parent: if empty { commit } else { last },
            empty,
            changes,
            agent_commits,
            notes,
            fast_path: false,
            moved,
            oversized,
            embedded,
            settings,
        })
    }

    /// Takes the last recorded step off: its commit is kept under
    /// `refs/modix/runs/<id>/rejected/<seq>`, the run ref goes back to
    /// `parent` (compare-and-swap), and the files go back to `parent`'s tree
    /// (files the step added are removed; ignored files are left alone).
    pub fn reject(&mut self, seq: u64, commit: &str, parent: &str) -> Result<Rejected> {
        self.take_off(seq, commit, parent, true)
    }

    /// [`reject`](Self::reject) without keeping the step's commit under a
    /// ref: a step that wrote a secret. Its objects stay only in the run's
    /// own repository, unreachable, and are never published.
    pub fn reject_unkept(&mut self, seq: u64, commit: &str, parent: &str) -> Result<Rejected> {
        self.take_off(seq, commit, parent, false)
    }

    /// A discarded step judged fit to keep goes to the user's repository
    /// (see [`publish`](super::publish)); the note when that failed.
    pub fn publish_discarded(&self, d: &Discarded) -> Option<String> {
        self.publish(d.reference.as_deref())
    }

    /// Deletes the ref a discarded step was kept under (it held a secret):
    /// its objects stay, unreachable, only in the run's own repository.
    pub fn unkeep(&mut self, d: &mut Discarded) -> Result<()> {
        if let Some(r) = d.reference.take() {
            self.git
                .at(&self.ctx.without_index())
                .args(["update-ref", "-d", &r])
                .run()?;
        }
        Ok(())
    }

    /// Publishes the run ref after a step was judged and kept (see
    /// [`publish`](super::publish)); the note when that failed.
    pub fn publish_step(&self) -> Option<String> {
        self.publish(None)
    }

    fn take_off(&mut self, seq: u64, commit: &str, parent: &str, keep: bool) -> Result<Rejected> {
        if commit != self.record.last_commit {
            return Err(WorkspaceError::NotLastStep {
                commit: commit.to_owned(),
                last: self.record.last_commit.clone(),
            });
        }
        let actual = read_ref(&self.git, &self.ctx, &self.record.run_ref)?;
        if actual.as_deref() != Some(commit) {
            return Err(WorkspaceError::RefMoved {
                name: short_ref(&self.record.run_ref),
                expected: commit.to_owned(),
                actual,
            });
        }
        if !is_ancestor(&self.git, &self.ctx, parent, commit)? || parent == commit {
            return Err(WorkspaceError::NotLastStep {
                commit: parent.to_owned(),
                last: commit.to_owned(),
            });
        }
        self.guard()?;
        self.ensure_recorded()?;
        let rejected_ref = format!("{}/rejected/{seq}", self.record.refs_prefix());
        match read_ref(&self.git, &self.ctx, &rejected_ref)? {
            Some(existing) if existing == commit => {}
            Some(_) => {
                return Err(WorkspaceError::AlreadyExists {
                    path: rejected_ref.into(),
                });
            }
            None if keep => update_ref(
                &self.git,
                &self.ctx,
                &format!("modix: step {seq} rejected"),
                &rejected_ref,
                commit,
                None,
            )?,
            None => {}
        }
        let rejected_ref = keep.then_some(rejected_ref);
        let paths = self.changed_paths(parent, commit)?;
        self.move_to(parent, commit, &format!("modix: step {seq} rejected"))?;
        if let Some(failed) = self.publish(rejected_ref.as_deref()) {
            tracing::warn!("{failed}");
        }
        Ok(Rejected {
            commit: commit.to_owned(),
            rejected_ref,
            restored_to: parent.to_owned(),
            paths,
        })
    }

    /// What [`discard_uncommitted`](Self::discard_uncommitted) would take
    /// off, without taking it (modix's own index only is written): the tree
    /// the workspace holds and the paths it changed since the last recorded
    /// step; `None` when nothing did.
    pub fn unrecorded(&mut self) -> Result<Option<(String, Vec<String>)>> {
        self.guard()?;
        let tree = self.record_tree()?;
        if tree == self.last_tree {
            return Ok(None);
        }
        let last = self.last_tree.clone();
        let paths = self.changed_paths(&last, &tree)?;
        Ok(Some((tree, paths)))
    }

    /// Records changes nobody settled (what an abandoned agent left) as a
    /// commit under `refs/modix/runs/<id>/discarded/<n>`, then restores the
    /// files to the last recorded step. `None` when there was nothing.
    pub fn discard_uncommitted(&mut self) -> Result<Option<Discarded>> {
        self.guard()?;
        let last = self.record.last_commit.clone();
        let tree = self.record_tree()?;
        if tree == self.last_tree {
            if self.record.follows_head() {
                self.sync_checkout_index(&last)?;
            }
            self.refresh_plan(false)?;
            return Ok(None);
        }
        let prefix = format!("{}/discarded/", self.record.refs_prefix());
        let existing = self
            .git
            .at(&self.ctx)
            .args(["for-each-ref", "--format=%(refname)", &prefix])
            .run_text()?;
        let n = existing.lines().filter(|l| !l.is_empty()).count() + 1;
        let reference = format!("{prefix}{n}");
        let commit = commit_tree(
            &self.git,
            &self.ctx,
            &tree,
            &[&last],
            &format!(
                "modix: unrecorded changes discarded on resume\n\nModix-Run: {}\n",
                self.record.run_id
            ),
        )?;
        update_ref(
            &self.git,
            &self.ctx,
            "modix: discarded",
            &reference,
            &commit,
            None,
        )?;
        let paths = self.changed_paths(&last, &commit)?;
        // The private index now holds `commit`'s tree: switch it and the files
        // back to the last step, as a reject would.
        self.restore_files(&commit, &last)?;
        if self.record.follows_head() {
            self.sync_checkout_index(&last)?;
        }
        self.refresh_plan(true)?;
        Ok(Some(Discarded {
            commit,
            reference: Some(reference),
            paths,
        }))
    }

    /// Moves the run ref from `from` to `to` and the files with it.
    fn move_to(&mut self, to: &str, from: &str, message: &str) -> Result<()> {
        update_ref(
            &self.git,
            &self.ctx,
            message,
            &self.record.run_ref,
            to,
            Some(from),
        )?;
        if let Err(e) = self.restore_files(from, to) {
            // The files could not follow: put the ref back where they are.
            let _ = update_ref(
                &self.git,
                &self.ctx,
                "modix: undo",
                &self.record.run_ref,
                from,
                Some(to),
            );
            return Err(e);
        }
        if self.record.follows_head() {
            self.sync_checkout_index(to)?;
        }
        let to_tree = tree_of(&self.git, &self.ctx, to)?;
        self.record.last_commit = to.to_owned();
        self.last_tree = to_tree;
        self.refresh_plan(true)?;
        Ok(())
    }

    /// `git read-tree -m -u <from> <to>` on the private index (which holds
    /// `from`'s tree): git's own two-tree switch updates exactly the paths
    /// that differ, removes what `to` lacks, and refuses (changing nothing)
    /// if a file is not as recorded.
    fn restore_files(&self, from: &str, to: &str) -> Result<()> {
        self.git
            .at(&self.ctx)
            .args(["read-tree", "-m", "-u", from, to])
            .run()
            .map(drop)
    }

    /// Puts the files back at the last recorded step without recording
    /// them: for a step whose files git could not record (an attribute the
    /// agent set that git refuses to apply, say). The private index is set
    /// to the last tree, what it does not know (and git does not ignore) is
    /// cleaned away, every file written again from it; the run ref, HEAD and
    /// the agent's index go back to the last step.
    pub fn put_back(&mut self) -> Result<()> {
        self.guard()?;
        let last = self.record.last_commit.clone();
        let scope = self.record.scope_pathspec();
        // Both indexes are made again from the tree: one the agent broke
        // (its own, or modix's private one) is why git failed, often enough.
        let agents = self.record.git_dir.as_ref().map(|d| d.join("index"));
        for index in std::iter::once(self.record.state_dir.join("index")).chain(agents) {
            let _ = std::fs::remove_file(index);
        }
        self.git
            .at(&self.ctx)
            .args(["read-tree", "--reset", &last])
            .run()?;
        self.git
            .at(&self.ctx)
            .args(["clean", "-f", "-d", "-q", "--"])
            .arg(&scope)
            .run()?;
        self.git
            .at(&self.ctx)
            .args(["checkout-index", "-a", "-f", "-q"])
            .run()?;
        let refs = self.ref_state()?;
        self.point_run_at(&refs, &last, "modix: put back", true)?;
        self.refresh_plan(true)
    }

    /// Moves the run ref to `commit` unless it is there, puts the
    /// workspace's HEAD back on the run ref if the agent left it, and with
    /// `sync` makes the agent's index match `commit`.
    fn point_run_at(&self, refs: &RefState, commit: &str, message: &str, sync: bool) -> Result<()> {
        if refs.run_ref.as_deref() != Some(commit) {
            // Compare-and-swap against what was read: a concurrent writer
            // makes this fail instead of being overwritten.
            update_ref(
                &self.git,
                &self.ctx,
                message,
                &self.record.run_ref,
                commit,
                refs.run_ref.as_deref(),
            )?;
        }
        if self.record.follows_head() {
            if !refs.attached {
                self.git
                    .at(&self.ctx)
                    .args(["symbolic-ref", "HEAD", &self.record.run_ref])
                    .run()?;
            }
            if sync {
                self.sync_checkout_index(commit)?;
            }
        }
        Ok(())
    }

    /// Makes the workspace's own index (the agent's) match `commit`, keeping
    /// stat data for unchanged entries, so `git status` there is clean.
    fn sync_checkout_index(&self, commit: &str) -> Result<()> {
        self.git
            .at(&self.ctx.without_index())
            .args(["read-tree", "--reset", commit])
            .run()
            .map(drop)
    }

    /// [`record_tree`](Self::record_tree) when `changed` lists every path
    /// `add -A` would stage ([`changed_paths_on_disk`](Self::changed_paths_on_disk)),
    /// less the `oversized` files removed since: `add -A` of those paths
    /// alone, so git does not scan the whole tree a second time (at 100,000
    /// files, ~0.5–0.9 s a step). Many paths, or a path gone meanwhile (git
    /// refuses a pathspec that matches nothing: a daemon's delete, an
    /// oversized name that is not UTF-8), go the whole way.
    fn record_tree_of(&self, changed: &[u8], oversized: &[(String, u64)]) -> Result<String> {
        let gone: std::collections::HashSet<&[u8]> =
            oversized.iter().map(|(p, _)| p.as_bytes()).collect();
        let paths: Vec<&[u8]> = nul_split(changed).filter(|p| !gone.contains(p)).collect();
        if paths.len() > TARGETED_ADD_MAX {
            return self.record_tree();
        }
        if !paths.is_empty() {
            let mut list = Vec::with_capacity(changed.len());
            for p in &paths {
                list.extend_from_slice(p);
                list.push(0);
            }
            let added = self
                .git
                .at(&self.ctx)
                // Each path as it is: `*` or `:(glob)` in a name is no pattern.
                .env("GIT_LITERAL_PATHSPECS", "1")
                .args(["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"])
                .input(list)
                .run();
            match added {
                Ok(_) => {}
                // Git said no (a path gone): the whole way. A stop, or git
                // that could not run, ends the settle as it would have.
                Err(WorkspaceError::Git { .. }) => return self.record_tree(),
                Err(e) => return Err(e),
            }
        }
        self.git.at(&self.ctx).arg("write-tree").run_text()
    }

    /// The working tree as a tree object: `add -A` then `write-tree`, on the
    /// private index.
    pub(crate) fn record_tree(&self) -> Result<String> {
        self.git
            .at(&self.ctx)
            .args(["add", "-A", "--"])
            .arg(self.record.scope_pathspec())
            .run()?;
        self.git.at(&self.ctx).arg("write-tree").run_text()
    }

    /// Hands `sink` what the step `parent..commit` wrote, streamed (memory
    /// stays bounded whatever it wrote): each line each of its commits adds
    /// (`git log -p -m -U0 --text`: every commit, a side branch's merged in
    /// included, merges against each parent; binary files as text; the
    /// `diff --git` and `+++` headers with the files' names, so an empty
    /// file's name counts — an agent's own commit that added a key and a
    /// later one that removed it both count), then those commits as stored
    /// (`--format=raw`: every header, any the agent added, and the message).
    /// What a secret scan reads.
    pub fn written(&self, parent: &str, commit: &str, sink: &mut dyn FnMut(&[u8])) -> Result<()> {
        let range = format!("{parent}..{commit}");
        let mut added = AddedLines {
            sink: &mut *sink,
            at_start: true,
            keep: false,
            pending: Vec::new(),
        };
        self.git
            .at(&self.ctx)
            .args([
                "log",
                "-p",
                "-m",
                "--format=",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--no-renames",
                "--text",
                "-U0",
                &range,
                "--",
            ])
            .run_streamed(&mut |b| added.feed(b))?;
        self.git
            .at(&self.ctx)
            .args(["log", "--format=raw", &range])
            .run_streamed(sink)
    }

    /// In place, the submodules whose files a step changed: git records a
    /// submodule as the commit it is at, so a change inside one would be
    /// neither recorded nor taken off, and would sit in the user's tree.
    /// Each is put back, what the step did there kept in that submodule's
    /// own stash (reversible). Their paths; none outside `in_place`, or
    /// when the project has no `.gitmodules` (a stat).
    pub fn stash_changed_submodules(&self, seq: u64) -> Result<Vec<String>> {
        if self.record.mode != Mode::InPlace || !self.record.root.join(".gitmodules").exists() {
            return Ok(Vec::new());
        }
        let out = self
            .git
            .at(&self.ctx)
            .args(["status", "--porcelain=v2", "-z", "--ignore-submodules=none"])
            .run()?;
        let mut changed = Vec::new();
        let mut records = nul_split(&out);
        while let Some(record) = records.next() {
            // `1 XY sub mH mI mW hH hI path`, or `2 … score path` followed by
            // the original path as a record of its own; `sub` is
            // `S<commit><tracked><untracked>` for a submodule.
            let (sub, path) = match record.first() {
                Some(b'1') => {
                    let f: Vec<&[u8]> = record.splitn(9, |b| *b == b' ').collect();
                    (f.get(2).copied(), f.get(8).copied())
                }
                Some(b'2') => {
                    records.next();
                    let f: Vec<&[u8]> = record.splitn(10, |b| *b == b' ').collect();
                    (f.get(2).copied(), f.get(9).copied())
                }
                _ => continue,
            };
            if let (Some(&[b'S', _, tracked, untracked]), Some(path)) = (sub, path)
                && (tracked == b'M' || untracked == b'U')
            {
                changed.push(lossy(path));
            }
        }
        for path in &changed {
            let message = format!(
                "modix: run {} step {seq}, refused: a change inside a submodule",
                self.record.run_id
            );
            self.git
                .at(&super::git::Ctx::at(self.record.root.join(path)))
                .args(["stash", "push", "--include-untracked", "-q", "-m", &message])
                .run()?;
        }
        Ok(changed)
    }

    /// A file of the run's base commit (`path` from the tracked tree's top):
    /// as it was before any agent could change it; `None` when the base has
    /// no such file.
    pub fn base_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let (code, bytes) = self
            .git
            .at(&self.ctx)
            .args(["cat-file", "blob"])
            .arg(format!("{}:{path}", self.record.base_commit))
            .run_codes(&[0, 128])?;
        Ok((code == 0).then_some(bytes))
    }

    /// The blobs bigger than `limit` in the commits of `parent..commit`
    /// (the agents' own commits may hold a file their last one removed),
    /// with their sizes: `rev-list --filter` walks the objects without
    /// reading a blob's content.
    pub fn big_blobs(&self, parent: &str, commit: &str, limit: u64) -> Result<Vec<(String, u64)>> {
        let out = self
            .git
            .at(&self.ctx)
            .args([
                "rev-list",
                "--objects",
                "--no-object-names",
                "--filter-print-omitted",
            ])
            .arg(format!("--filter=blob:limit={}", limit.saturating_add(1)))
            .arg(format!("{parent}..{commit}"))
            .run_text()?;
        let omitted: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix('~')).collect();
        if omitted.is_empty() {
            return Ok(Vec::new());
        }
        let sizes = self
            .git
            .at(&self.ctx)
            .args(["cat-file", "--batch-check=%(objectname) %(objectsize)"])
            .input(omitted.join("\n").into_bytes())
            .run_text()?;
        Ok(sizes
            .lines()
            .filter_map(|l| {
                let (id, n) = l.split_once(' ')?;
                Some((id.to_owned(), n.parse().ok()?))
            })
            .collect())
    }

    /// The note for the special files removed where git reads its rules
    /// (`removed` now, and any the plan's walk removed).
    pub(crate) fn special_note(&mut self, mut removed: Vec<PathBuf>) -> Option<String> {
        removed.extend(self.plan.take_removed());
        if removed.is_empty() {
            return None;
        }
        let names: Vec<String> = removed
            .iter()
            .map(|p| {
                p.strip_prefix(&self.record.root)
                    .unwrap_or(p)
                    .display()
                    .to_string()
            })
            .collect();
        Some(format!(
            "removed {} the agent left where git reads its rules but that {} not a file (git would wait on a FIFO there forever): {}",
            if names.len() == 1 { "a path" } else { "paths" },
            if names.len() == 1 { "is" } else { "are" },
            names.join(", ")
        ))
    }

    /// Limits the size of a file a step may write (`None`: no limit).
    pub fn set_max_file_bytes(&mut self, limit: Option<u64>) {
        self.max_file_bytes = limit;
    }

    /// The paths of the tracked part that `add -A` would stage: files
    /// modified or deleted, and files git does not track nor ignore
    /// (`ls-files -m -o`), NUL-separated, relative to the workspace.
    fn changed_paths_on_disk(&self) -> Result<Vec<u8>> {
        self.git
            .at(&self.ctx)
            .args(["ls-files", "-z", "-m", "-o", "--exclude-standard", "--"])
            .arg(self.record.scope_pathspec())
            .run()
    }

    /// Removes the files of `changed` (what the step made or changed, as
    /// `add -A` would take them) that are bigger than the limit, before git
    /// reads them: no object of theirs is ever made, so neither the run's
    /// repository nor the user's grows by them, and hashing them takes no
    /// time. Their paths and sizes.
    fn remove_oversized(&self, changed: &[u8]) -> Result<Vec<(String, u64)>> {
        use std::os::unix::ffi::OsStrExt;
        let Some(limit) = self.max_file_bytes else {
            return Ok(Vec::new());
        };
        let mut removed = Vec::new();
        for name in nul_split(changed) {
            let path = self.record.root.join(std::ffi::OsStr::from_bytes(name));
            let Ok(meta) = path.symlink_metadata() else {
                continue;
            };
            if meta.is_file() && meta.len() > limit {
                std::fs::remove_file(&path).map_err(|e| WorkspaceError::io("remove", &path, e))?;
                removed.push((lossy(name), meta.len()));
            }
        }
        Ok(removed)
    }

    /// Refuses when the files differ from the last recorded step.
    fn ensure_recorded(&mut self) -> Result<()> {
        if let Some(before) = &self.snapshot
            && self.plan.unchanged_since(before).is_some()
        {
            return Ok(());
        }
        let tree = self.record_tree()?;
        if tree != self.last_tree {
            let paths = self.changed_paths(&self.last_tree.clone(), &tree)?;
            return Err(WorkspaceError::Unrecorded { paths });
        }
        Ok(())
    }

    fn changed_paths(&self, a: &str, b: &str) -> Result<Vec<String>> {
        Ok(diff_trees(&self.git, &self.ctx, a, b)?
            .into_iter()
            .map(|e| e.change.path)
            .collect())
    }

    /// Where the run ref and (worktree, copy) HEAD are, in one git process
    /// when HEAD is on a branch with commits.
    fn ref_state(&self) -> Result<RefState> {
        if !self.record.follows_head() {
            return Ok(RefState {
                run_ref: read_ref(&self.git, &self.ctx, &self.record.run_ref)?,
                head: None,
                head_name: None,
                attached: true,
            });
        }
        let out = self
            .git
            .at(&self.ctx)
            .args([
                "rev-parse",
                &self.record.run_ref,
                "HEAD",
                "--symbolic-full-name",
                "HEAD",
            ])
            .output()?;
        let text = lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if out.status.success() && lines.len() == 3 {
            return Ok(RefState {
                run_ref: Some(lines[0].to_owned()),
                head: Some(lines[1].to_owned()),
                attached: lines[2] == self.record.run_ref,
                head_name: (lines[2] != "HEAD").then(|| short_ref(lines[2])),
            });
        }
        // Something is missing (the run branch deleted, HEAD unborn): ask
        // one question at a time.
        let (code, sym) = self
            .git
            .at(&self.ctx)
            .args(["symbolic-ref", "-q", "HEAD"])
            .run_codes(&[0, 1])?;
        let sym = (code == 0).then(|| lossy(&sym).trim().to_owned());
        Ok(RefState {
            run_ref: read_ref(&self.git, &self.ctx, &self.record.run_ref)?,
            head: read_ref(&self.git, &self.ctx, "HEAD")?,
            attached: sym.as_deref() == Some(self.record.run_ref.as_str()),
            head_name: sym.map(|s| short_ref(&s)),
        })
    }
}

/// The added lines of a diff streamed in pieces: passes on the bytes of
/// every line that starts with `+` or is a `diff --git` header (the files'
/// names), its newline included. A piece that ends inside the first bytes
/// of a line, before they say which it is, waits for the next.
struct AddedLines<'a> {
    sink: &'a mut dyn FnMut(&[u8]),
    at_start: bool,
    keep: bool,
    pending: Vec<u8>,
}

impl AddedLines<'_> {
    const HEADER: &'static [u8] = b"diff --git ";

    fn feed(&mut self, piece: &[u8]) {
        let joined;
        let mut bytes = piece;
        if !self.pending.is_empty() {
            let mut j = std::mem::take(&mut self.pending);
            j.extend_from_slice(piece);
            joined = j;
            bytes = &joined;
        }
        while let Some(&first) = bytes.first() {
            if self.at_start {
                if bytes.len() < Self::HEADER.len() && Self::HEADER.starts_with(bytes) {
                    self.pending = bytes.to_vec();
                    return;
                }
                self.keep = first == b'+' || bytes.starts_with(Self::HEADER);
            }
            let (line, rest) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => bytes.split_at(i + 1),
                None => (bytes, &[][..]),
            };
            if self.keep {
                (self.sink)(line);
            }
            self.at_start = line.ends_with(b"\n");
            bytes = rest;
        }
    }
}

struct RefState {
    run_ref: Option<String>,
    head: Option<String>,
    head_name: Option<String>,
    attached: bool,
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Makes the workspace folder again when the agent removed it (or put
/// something else in its place), empty: the run's repository is outside it,
/// so the next settle records the removal of every file — a change the
/// step's judge sees, and a reject (or a resume's discard) puts the files
/// back. The note for the step's record; nothing when the folder is there.
pub(super) fn remake_root(record: &super::WorkspaceRecord) -> Result<Option<String>> {
    let root = &record.root;
    let meta = root.symlink_metadata();
    if meta.as_ref().is_ok_and(|m| m.is_dir()) {
        return Ok(None);
    }
    if meta.is_ok() {
        std::fs::remove_file(root).map_err(|e| WorkspaceError::io("remove", root, e))?;
    }
    std::fs::create_dir_all(root).map_err(|e| WorkspaceError::io("create", root, e))?;
    if let Some(git_dir) = &record.git_dir {
        let link = root.join(".git");
        write_link(&link, git_dir)?;
    }
    Ok(Some(
        "the agent removed the workspace folder itself; it is made again (the run's history is kept outside it), and what the agent removed is recorded as such".into(),
    ))
}

/// Writes the workspace's `.git` link to `git_dir`.
fn write_link(link: &Path, git_dir: &Path) -> Result<()> {
    let text = format!("gitdir: {}\n", git_dir.display());
    std::fs::write(link, text).map_err(|e| WorkspaceError::io("write", link, e))
}

/// State names go into a commit message: one line, no trailer injection.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn added_lines_are_passed_on_whole_across_any_cut() {
        let diff =
            b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old secret\n+new one\n+and\n";
        for cut in 0..diff.len() {
            let mut got = Vec::new();
            let mut sink = |b: &[u8]| got.extend_from_slice(b);
            let mut a = super::AddedLines {
                sink: &mut sink,
                at_start: true,
                keep: false,
                pending: Vec::new(),
            };
            a.feed(&diff[..cut]);
            a.feed(&diff[cut..]);
            assert_eq!(
                got, b"diff --git a/x b/x\n+++ b/x\n+new one\n+and\n",
                "cut at {cut}"
            );
        }
    }
}
