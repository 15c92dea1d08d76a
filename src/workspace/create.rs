//! Making a run's workspace in one of the three modes, and opening it again
//! from its record. Whatever fails half-way is undone (a checkout, its
//! repository and its branch removed, a partial copy deleted), so no half
//! workspace is left that looks complete.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::copy::copy_tree;
use super::error::{Result, WorkspaceError, files, list};
use super::git::{
    Ctx, Git, MIN_GIT, RepoInfo, commit_tree, dirty_paths, discover, git_paths, is_ancestor, lossy,
    nul_split, read_ref, tree_of, update_ref,
};
use super::lock::{TreeLock, hex};
use super::pinned::{Pinned, unpinned_note};
use super::preflight::{
    Start, copy_repo, dirty_in_place, not_in_commit, trees, workspace_root, worktree_start,
};
use super::scan::{ScanPlan, noise_matcher};
use super::{CreateOptions, Mode, Workspace, WorkspaceRecord, short_id};

impl Workspace {
    /// Makes the run's workspace. Returns it with notes for the user (e.g.
    /// "your uncommitted changes were left out").
    pub fn create(git: &Git, opts: &CreateOptions) -> Result<(Workspace, Vec<String>)> {
        git.require(MIN_GIT, "modix workspaces")?;
        let project = canonical(&opts.project_dir)?;
        match opts.mode {
            Mode::Worktree => create_worktree(git, opts, &project),
            Mode::Copy => create_copy(git, opts, &project),
            Mode::InPlace => create_in_place(git, opts, &project),
        }
    }

    /// Opens a workspace again from what the store recorded (after a crash or
    /// for `modix resume`). Refuses with [`WorkspaceError::RefMoved`] when the
    /// run ref (or the worktree's HEAD) is not where the record says; `reset`
    /// puts it back instead. Uncommitted changes are left for
    /// [`discard_uncommitted`](Workspace::discard_uncommitted).
    pub fn reopen(
        git: &Git,
        mut record: WorkspaceRecord,
        reset: bool,
    ) -> Result<(Workspace, Vec<String>)> {
        git.require(MIN_GIT, "modix workspaces")?;
        // An agent that removed the workspace folder took nothing of the
        // run (its repository is outside): the folder is made again, and
        // the resume's discard records and undoes the removal.
        let mut notes = Vec::new();
        if matches!(record.mode, Mode::Worktree | Mode::Copy)
            && record.git_dir.as_ref().is_some_and(|d| d.is_dir())
            && record.guard.is_some()
        {
            notes.extend(super::track::remake_root(&record)?);
        }
        for p in [Some(&record.root), record.git_dir.as_ref()]
            .into_iter()
            .flatten()
        {
            if !p.is_dir() {
                return Err(WorkspaceError::Missing { path: p.clone() });
            }
        }
        let lock = TreeLock::acquire(&record.modix_home, record.lock_tree(), &record.run_id)?;
        // A git that was killed (a stop during a settle) may have left the
        // private index locked; the tree lock says nobody else uses it.
        let _ = std::fs::remove_file(record.state_dir.join("index.lock"));
        notes.extend(settings_at_resume(git, &mut record, reset)?);
        let ctx = record.ctx();
        let actual = read_ref(git, &ctx, &record.run_ref)?;
        if actual.as_deref() != Some(record.last_commit.as_str()) {
            if !reset {
                return Err(WorkspaceError::RefMoved {
                    name: short_ref(&record.run_ref),
                    expected: record.last_commit.clone(),
                    actual,
                });
            }
            update_ref(
                git,
                &ctx,
                "modix: reset to the last recorded step",
                &record.run_ref,
                &record.last_commit,
                actual.as_deref(),
            )?;
            notes.push(format!(
                "{} was at {}; put back at the last recorded step {}",
                short_ref(&record.run_ref),
                actual.as_deref().unwrap_or("nothing"),
                record.last_commit
            ));
        }
        if record.follows_head() {
            let (code, out) = git
                .at(&ctx)
                .args(["symbolic-ref", "-q", "HEAD"])
                .run_codes(&[0, 1])?;
            let head = (code == 0).then(|| lossy(&out).trim().to_owned());
            if head.as_deref() != Some(record.run_ref.as_str()) {
                if !reset {
                    return Err(WorkspaceError::RefMoved {
                        name: "HEAD".into(),
                        expected: record.run_ref.clone(),
                        actual: head,
                    });
                }
                git.at(&ctx)
                    .args(["symbolic-ref", "HEAD", &record.run_ref])
                    .run()?;
                notes.push(format!(
                    "the workspace's HEAD was on {}; put back on {}",
                    head.as_deref().unwrap_or("a detached commit"),
                    short_ref(&record.run_ref)
                ));
            }
        }
        // A crash between a step's settle and its publishing left the user's
        // copy of the run branch behind.
        match super::publish::publish_all(git, &record, reset) {
            Ok(note) => notes.extend(note),
            // The user's commits on it: the run does not go on over them.
            Err(e @ WorkspaceError::BranchHasYourCommits { .. }) => return Err(e),
            Err(e) => notes.push(format!(
                "the run branch {} in your repository could not be brought up to date ({e})",
                short_ref(&record.run_ref)
            )),
        }
        let mut ws = Workspace::assemble(git, record, lock, false)?;
        notes.extend(ws.special_note(Vec::new()));
        Ok((ws, notes))
    }

    /// Whether the run ref moved past the record only by a step modix
    /// settled for this run and never got to record (a crash between the
    /// settle and the store's commit): its tip carries this run's
    /// `Modix-Run` trailer and builds on the last recorded step. Such a move
    /// is the abandoned step's own, not a person's.
    pub fn moved_by_unrecorded_step(git: &Git, record: &WorkspaceRecord) -> Result<bool> {
        let ctx = record.ctx();
        match read_ref(git, &ctx, &record.run_ref)? {
            Some(tip) => unrecorded_step(git, &ctx, record, &tip),
            None => Ok(false),
        }
    }

    /// Builds the in-memory side of a workspace from its record.
    fn assemble(
        git: &Git,
        record: WorkspaceRecord,
        lock: TreeLock,
        snapshot: bool,
    ) -> Result<Workspace> {
        let ctx = record.ctx();
        let scope = PathBuf::from(record.scope.trim_end_matches('/'));
        // Files whose change means "ask git": the exclude files, and for
        // worktree/copy the workspace's own HEAD, index and run ref (an
        // agent's `git commit` may change nothing else).
        let mut names = vec!["info/exclude"];
        if record.follows_head() {
            names.extend([
                "HEAD",
                "index",
                "logs/HEAD",
                "packed-refs",
                "reftable/tables.list",
                &record.run_ref,
            ]);
        }
        let mut fingerprints = git_paths(git, &ctx.without_index(), &names)?;
        // A change to what the guard keeps sends the settle to git, which
        // puts it back first (and says so in that step's record).
        if let Some(gd) = &record.git_dir
            && record.guard.is_some()
        {
            for p in super::guard::watched(gd) {
                if !fingerprints.contains(&p) {
                    fingerprints.push(p);
                }
            }
        }
        let settings = match &record.settings {
            Some(digest) => Some(super::settings::Settings::load(&record.state_dir, digest)?),
            None => None,
        };
        let pinned = match &record.git_config {
            Some(digest) => Some(Pinned::load(&record.state_dir, digest)?),
            None => None,
        };
        let watched = settings.iter().flat_map(|s| s.watched());
        for p in watched.chain(pinned.iter().flat_map(|p| p.watched())) {
            if !fingerprints.iter().any(|f| f == p) {
                fingerprints.push(p.to_path_buf());
            }
        }
        fingerprints.push(record.state_dir.join("exclude"));
        let excludes = vec![fingerprints[0].clone(), record.state_dir.join("exclude")];
        let plan = ScanPlan::new(
            &record.root,
            &scope,
            &record.tracking_ignore,
            fingerprints,
            excludes,
        )?;
        let last_tree = tree_of(git, &ctx, &record.last_commit)?;
        let kept = match (&record.guard, &record.git_dir) {
            (Some(digest), Some(gd)) => {
                Some(super::guard::Kept::load(gd, &record.state_dir, digest)?)
            }
            _ => None,
        };
        let mut ws = Workspace {
            // Whoever made or reopened it: the run's git reads the run's copy.
            git: pinned
                .as_ref()
                .map_or_else(|| git.clone(), |p| p.driver(git)),
            record,
            ctx,
            plan,
            snapshot: None,
            link_seen: None,
            tracked: Vec::new(),
            last_tree,
            kept,
            settings,
            pinned,
            max_file_bytes: None,
            _lock: lock,
        };
        ws.refresh_plan(true)?;
        if !snapshot {
            ws.snapshot = None;
        }
        Ok(ws)
    }

    /// After git ran: re-lists the tracked files (when the tree changed) and
    /// the watched folders, and takes the snapshot the next settle compares
    /// with.
    pub(crate) fn refresh_plan(&mut self, tree_changed: bool) -> Result<()> {
        if tree_changed {
            let out = self
                .git
                .at(&self.ctx)
                .args(["ls-files", "-z", "-c", "--"])
                .arg(self.record.scope_pathspec())
                .run()?;
            self.tracked = nul_split(&out)
                .map(|p| {
                    use std::os::unix::ffi::OsStrExt;
                    self.record.root.join(std::ffi::OsStr::from_bytes(p))
                })
                .collect();
        }
        self.plan.refresh(&self.tracked)?;
        self.snapshot = Some(self.plan.scan());
        Ok(())
    }
}

/// In place in a repository, before modix runs any git there on a resume:
/// the user's repository settings against what the run kept. A difference
/// is what an agent interrupted mid-step left, or the person's own change
/// since — modix cannot tell — so it is refused unless `reset` puts it
/// back (the note says what). A record from before keeps them now.
fn settings_at_resume(
    git: &Git,
    record: &mut WorkspaceRecord,
    reset: bool,
) -> Result<Option<String>> {
    use super::settings::Settings;
    if record.mode != Mode::InPlace || record.repo_root.is_none() {
        return Ok(None);
    }
    let Some(digest) = &record.settings else {
        if let Some(info) = discover(git, &record.root)? {
            let kept = Settings::take(git, &info.toplevel, &info.git_dir, &info.common_dir)?;
            record.settings = Some(kept.save(&record.state_dir)?);
        }
        return Ok(None);
    };
    let kept = Settings::load(&record.state_dir, digest)?;
    let changes = kept.differences(git);
    if changes.is_empty() {
        return Ok(None);
    }
    if !reset {
        return Err(WorkspaceError::SettingsChanged { changes });
    }
    let put = kept.put_back(git)?;
    Ok(Some(format!(
        "your repository's git settings were put back as the run found them: {}",
        list(&put)
    )))
}

/// Takes the run's copy of the user's global and system git config (see
/// `pinned`), as git reads them in `project`: the git that reads it, and
/// the copy's digest for the record. A git too old to be pointed at it is
/// returned as it is, with a note.
fn pin(
    git: &Git,
    project: &Path,
    state: &Path,
    notes: &mut Vec<String>,
) -> Result<(Git, Option<String>)> {
    match Pinned::take(git, project, state)? {
        Some(p) => Ok((p.driver(git), Some(p.digest()))),
        None => {
            notes.push(unpinned_note(git.version()?));
            Ok((git.clone(), None))
        }
    }
}

/// Where a run in a tree with uncommitted changes starts, and the note that
/// says so: from a snapshot of them with `--include-dirty`, else from
/// `base` without them.
fn with_dirty(
    git: &Git,
    opts: &CreateOptions,
    info: &RepoInfo,
    (head, base): (&str, String),
    state: &Path,
    dirty: &[String],
) -> Result<(String, String)> {
    if !opts.include_dirty {
        let note = format!(
            "your tree has uncommitted changes ({}); the run starts from {} without them (pass --include-dirty to include them)",
            files(dirty),
            &base[..12]
        );
        return Ok((base, note));
    }
    if opts.base.is_some() {
        return Err(WorkspaceError::Unsupported {
            what: "include_dirty starts from a snapshot of HEAD plus your changes, so it cannot be combined with a base revision".into(),
            advice: "Drop one of the two.".into(),
        });
    }
    let base = snapshot_dirty(git, info, head, state, &opts.run_id)?;
    let note = format!(
        "the run starts from your uncommitted changes too ({}), recorded as commit {}",
        files(dirty),
        &base[..12]
    );
    Ok((base, note))
}

fn create_worktree(
    git: &Git,
    opts: &CreateOptions,
    project: &Path,
) -> Result<(Workspace, Vec<String>)> {
    let Start {
        info,
        head,
        mut base,
    } = worktree_start(git, opts, project)?;
    let user = Ctx::at(&info.toplevel);
    let mut notes = Vec::new();
    let short = short_id(&opts.run_id);
    let (folder, state) = places(opts, &[project, &info.toplevel], &info.toplevel, &short)?;
    if folder.exists() || state.exists() {
        return Err(WorkspaceError::AlreadyExists { path: folder });
    }
    let branch = format!("refs/heads/modix/{short}");
    if read_ref(git, &user, &branch)?.is_some() {
        return Err(WorkspaceError::AlreadyExists {
            path: PathBuf::from(&branch),
        });
    }
    let lock = TreeLock::acquire(&opts.modix_home, &folder, &opts.run_id)?;
    let dirty = dirty_paths(git, &info.toplevel, None)?;
    let mut cleanup = Cleanup::new(git);
    create_dir(&state)?;
    cleanup.dirs.push(state.clone());
    super::orphans::write_owner(&state, project, &opts.run_id, Mode::Worktree)?;
    let (pinned, git_config) = pin(git, project, &state, &mut notes)?;
    let git = &pinned;
    if !dirty.is_empty() {
        // `worktree_start` gives no base without a HEAD but --base's, which
        // `with_dirty` refuses to combine with a snapshot.
        let head = head.as_deref().unwrap_or(&base).to_owned();
        let (from, note) = with_dirty(git, opts, &info, (&head, base.clone()), &state, &dirty)?;
        if from != base {
            // The snapshot may add what a checkout cannot hold.
            refuse_unsupported(git, &user, &from)?;
        }
        base = from;
        notes.push(note);
    }
    write_excludes(git, project, &state, &opts.tracking_ignore)?;

    // The agents' repository is modix's own, borrowing the user's objects:
    // a `git worktree` would share the user's refs, stash, config, hooks and
    // info/ with them, so an agent's `git update-ref`, `git stash` or
    // `git config` would write the user's repository.
    let own_git_dir = state.join("git");
    cleanup.dirs.push(folder.clone());
    borrowing_repo(git, &info, &folder, &own_git_dir, &short)?;
    let kept = check_out(git, &folder, &own_git_dir, &state, (&branch, &base))?;
    // The run branch the user sees, at the base for now (its objects are the
    // user's already); it follows the run's steps (see `publish`).
    update_ref(git, &user, "modix: run base", &branch, &base, None)?;
    cleanup.refs.push((user.clone(), branch.clone()));
    let folder = canonical(&folder)?;
    // The workspace's fresh index (stat data included) seeds the private one.
    copy_file(&own_git_dir.join("index"), &state.join("index"))?;
    let workdir = folder.join(&info.prefix);
    if !workdir.is_dir() {
        return Err(not_in_commit(&info.prefix, &base));
    }
    let record = WorkspaceRecord {
        mode: Mode::Worktree,
        run_id: opts.run_id.clone(),
        short_id: short,
        project_dir: project.to_path_buf(),
        repo_root: Some(info.toplevel.clone()),
        root: folder,
        workdir,
        scope: String::new(),
        state_dir: state,
        git_dir: Some(own_git_dir),
        borrowed: true,
        guard: Some(kept.digest()),
        settings: None,
        git_config,
        run_ref: branch,
        base_commit: base.clone(),
        last_commit: base,
        tracking_ignore: opts.tracking_ignore.clone(),
        modix_home: opts.modix_home.clone(),
    };
    let ws = Workspace::assemble(git, record, lock, true)?;
    cleanup.disarm();
    Ok((ws, notes))
}

/// The settings of the user's repository that change what a checkout holds
/// or what git records, so the agents' repository reads and writes files as
/// the user's own git does; and the identity the agents' own commits carry.
/// Not hooks, aliases, remotes, signing or `core.worktree`.
const BORROWED_CONFIG: &str = "^(user\\.(name|email)|core\\.(autocrlf|eol|safecrlf|precomposeunicode|checkroundtripencoding|bigfilethreshold)|filter\\..*|i18n\\..*)$";

/// Makes the agents' repository for a worktree run: `folder` with its `.git`
/// a link to `git_dir`, which borrows the user's objects (alternates) and
/// takes the user's shallow boundary, `info/attributes`, `info/exclude` and
/// the [`BORROWED_CONFIG`] settings. HEAD is on `modix/<short>`, unborn.
fn borrowing_repo(
    git: &Git,
    info: &RepoInfo,
    folder: &Path,
    git_dir: &Path,
    short: &str,
) -> Result<()> {
    let user = Ctx::at(&info.toplevel);
    let format = git
        .at(&user)
        .args(["rev-parse", "--show-object-format"])
        .run_text()?;
    git.cmd(folder.parent().unwrap_or(folder))
        .args(["init", "-q", "--template="])
        .arg(format!("--object-format={format}"))
        .arg("-b")
        .arg(format!("modix/{short}"))
        .arg("--separate-git-dir")
        .arg(git_dir)
        .arg(folder)
        .run()?;
    let common = &info.common_dir;
    let mut alternates = common.join("objects").into_os_string().into_encoded_bytes();
    alternates.push(b'\n');
    write_in(git_dir, "objects/info/alternates", &alternates)?;
    for name in ["shallow", "info/attributes", "info/exclude"] {
        if let Ok(bytes) = std::fs::read(common.join(name)) {
            write_in(git_dir, name, &bytes)?;
        }
    }
    copy_refs(git, &user, git_dir)?;
    let (code, out) = git
        .at(&user)
        .args(["config", "--local", "-z", "--get-regexp", BORROWED_CONFIG])
        .run_codes(&[0, 1])?;
    let config = git_dir.join("config");
    let mut settings: Vec<(String, String)> = Vec::new();
    if code == 0 {
        for entry in nul_split(&out) {
            let entry = lossy(entry);
            let (key, value) = entry.split_once('\n').unwrap_or((&entry, ""));
            settings.push((key.to_owned(), value.to_owned()));
        }
    }
    if common.join("lfs").is_dir() {
        // Git LFS keeps file contents beside the objects: the user's store.
        settings.push((
            "lfs.storage".into(),
            common.join("lfs").display().to_string(),
        ));
    }
    for (key, value) in settings {
        git.cmd(git_dir)
            .arg("config")
            .arg("--file")
            .arg(&config)
            .args(["--add", &key, &value])
            .run()?;
    }
    Ok(())
}

/// The user's branches, tags and remote-tracking branches as they are when
/// the run starts, copied into the agents' repository (one `packed-refs`
/// file: the objects are the user's already), so an agent's `git diff main`
/// or `git log origin/main..` works as in a checkout of the user's own.
/// Copies: what an agent does to them stays in its repository. The run
/// branches of other runs are left out.
fn copy_refs(git: &Git, user: &Ctx, git_dir: &Path) -> Result<()> {
    let out = git
        .at(user)
        .args([
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            "refs/heads/",
            "refs/tags/",
            "refs/remotes/",
        ])
        .run()?;
    let mut packed = b"# pack-refs with: sorted\n".to_vec();
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if !line.windows(18).any(|w| w == b" refs/heads/modix/") {
            packed.extend_from_slice(line);
            packed.push(b'\n');
        }
    }
    write_in(git_dir, "packed-refs", &packed)
}

/// Puts the agents' repository's branch at `base` and checks it out into
/// `folder`, then takes what the guard keeps of the repository as made.
fn check_out(
    git: &Git,
    folder: &Path,
    git_dir: &Path,
    state: &Path,
    (branch, base): (&str, &str),
) -> Result<super::guard::Kept> {
    let private = Ctx {
        cwd: folder.to_path_buf(),
        git_dir: Some(git_dir.to_path_buf()),
        work_tree: Some(folder.to_path_buf()),
        ..Ctx::default()
    };
    update_ref(git, &private, "modix: run base", branch, base, None)?;
    git.at(&private)
        .args(["reset", "-q", "--hard", "--no-recurse-submodules"])
        .run()?;
    super::guard::Kept::take(git_dir, state)
}

/// Writes `name` (a path relative to `dir`), making its folder.
fn write_in(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        create_dir(parent)?;
    }
    std::fs::write(&path, bytes).map_err(|e| WorkspaceError::io("write", &path, e))
}

fn create_copy(
    git: &Git,
    opts: &CreateOptions,
    project: &Path,
) -> Result<(Workspace, Vec<String>)> {
    let short = short_id(&opts.run_id);
    let repo = copy_repo(git, project);
    let (folder, state) = places(opts, &trees(project, repo.as_ref()), project, &short)?;
    if folder.exists() || state.exists() {
        return Err(WorkspaceError::AlreadyExists { path: folder });
    }
    let lock = TreeLock::acquire(&opts.modix_home, &folder, &opts.run_id)?;
    let partial = folder.with_file_name(format!("{short}.partial"));
    if partial.exists() {
        // Left by a crash mid-copy: never used, never mistaken for a workspace.
        std::fs::remove_dir_all(&partial).map_err(|e| WorkspaceError::io("remove", &partial, e))?;
    }
    let mut cleanup = Cleanup::new(git);
    cleanup.dirs.push(partial.clone());
    create_dir(&state)?;
    cleanup.dirs.push(state.clone());
    super::orphans::write_owner(&state, project, &opts.run_id, Mode::Copy)?;
    let mut notes = Vec::new();
    let (pinned, git_config) = pin(git, project, &state, &mut notes)?;
    let git = &pinned;
    let stats = copy_tree(
        project,
        &partial,
        &noise_matcher(project, &opts.tracking_ignore)?,
    )?;
    if !stats.skipped_special.is_empty() {
        notes.push(format!(
            "not copied (sockets, fifos or devices): {}",
            list(&stats.skipped_special)
        ));
    }
    let branch = format!("refs/heads/modix/{short}");
    // The history lives outside the copy, its `.git` only a link to it: an
    // agent that removes or replaces `.git` cannot take the run's steps.
    let own_git_dir = state.join("git");
    git.cmd(&partial)
        .args(["init", "-q", "--template=", "-b"])
        .arg(format!("modix/{short}"))
        .arg("--separate-git-dir")
        .arg(&own_git_dir)
        .run()?;
    write_excludes(git, project, &state, &opts.tracking_ignore)?;
    let ctx = Ctx {
        cwd: partial.clone(),
        index: Some(state.join("index")),
        excludes: Some(state.join("exclude")),
        ..Ctx::default()
    };
    git.at(&ctx).args(["add", "-A"]).run()?;
    let tree = git.at(&ctx).arg("write-tree").run_text()?;
    let base = commit_tree(
        git,
        &ctx,
        &tree,
        &[],
        &format!(
            "modix: baseline copy of {}\n\nModix-Run: {}\n",
            project.display(),
            opts.run_id
        ),
    )?;
    update_ref(git, &ctx, "modix: baseline", &branch, &base, None)?;
    // The agent's `git status` starts clean and fast: same index, stat data included.
    let copy_index = &git_paths(git, &Ctx::at(&partial), &["index"])?[0];
    copy_file(&state.join("index"), copy_index)?;
    let kept = super::guard::Kept::take(&own_git_dir, &state)?;
    std::fs::rename(&partial, &folder).map_err(|e| WorkspaceError::io("rename", &partial, e))?;
    cleanup.dirs.retain(|d| d != &partial);
    cleanup.dirs.push(folder.clone());
    let record = WorkspaceRecord {
        mode: Mode::Copy,
        run_id: opts.run_id.clone(),
        short_id: short,
        project_dir: project.to_path_buf(),
        repo_root: None,
        root: folder.clone(),
        workdir: folder,
        scope: String::new(),
        state_dir: state,
        git_dir: Some(own_git_dir),
        borrowed: false,
        guard: Some(kept.digest()),
        settings: None,
        git_config,
        run_ref: branch,
        base_commit: base.clone(),
        last_commit: base,
        tracking_ignore: opts.tracking_ignore.clone(),
        modix_home: opts.modix_home.clone(),
    };
    let ws = Workspace::assemble(git, record, lock, true)?;
    cleanup.disarm();
    Ok((ws, notes))
}

/// How git sees an in-place run's tree: the user's repository with an
/// index and excludes of the run's own (refusing uncommitted changes unless
/// allowed), or — in a folder that is not a repository — a bare git dir of
/// modix's own under `state`. The context, that git dir, and the project's
/// folder within the repository.
fn in_place_context(
    git: &Git,
    opts: &CreateOptions,
    project: &Path,
    info: Option<&RepoInfo>,
    state: &Path,
    run_ref: &str,
    notes: &mut Vec<String>,
) -> Result<(Ctx, Option<PathBuf>, String)> {
    let found = match info {
        Some(info) => {
            let dirty = dirty_in_place(git, opts, project)?;
            if !dirty.is_empty() {
                notes.push(format!(
                    "working in place on a tree with uncommitted changes ({}); they are part of the run's starting point, and taking steps off never goes behind it",
                    files(&dirty)
                ));
            }
            if read_ref(git, &Ctx::at(&info.toplevel), run_ref)?.is_some() {
                return Err(WorkspaceError::AlreadyExists {
                    path: PathBuf::from(run_ref),
                });
            }
            let ctx = Ctx {
                cwd: info.toplevel.clone(),
                index: Some(state.join("index")),
                excludes: Some(state.join("exclude")),
                ..Ctx::default()
            };
            (ctx, None, info.prefix.clone())
        }
        None => {
            let gd = state.join("git");
            let ctx = Ctx {
                cwd: project.to_path_buf(),
                git_dir: Some(gd.clone()),
                work_tree: Some(project.to_path_buf()),
                index: Some(state.join("index")),
                excludes: Some(state.join("exclude")),
            };
            (ctx, Some(gd), String::new())
        }
    };
    Ok(found)
}

fn create_in_place(
    git: &Git,
    opts: &CreateOptions,
    project: &Path,
) -> Result<(Workspace, Vec<String>)> {
    let short = short_id(&opts.run_id);
    let info = discover(git, project)?;
    let top = info.as_ref().map_or(project, |i| i.toplevel.as_path());
    let lock = TreeLock::acquire(&opts.modix_home, top, &opts.run_id)?;
    let (_, state) = places(opts, &trees(project, info.as_ref()), top, &short)?;
    if state.exists() {
        return Err(WorkspaceError::AlreadyExists { path: state });
    }
    let run_ref = format!("refs/modix/runs/{short}/head");
    let mut notes = Vec::new();
    let (ctx, git_dir, scope) = in_place_context(
        git,
        opts,
        project,
        info.as_ref(),
        &state,
        &run_ref,
        &mut notes,
    )?;
    let mut cleanup = Cleanup::new(git);
    create_dir(&state)?;
    cleanup.dirs.push(state.clone());
    super::orphans::write_owner(&state, project, &opts.run_id, Mode::InPlace)?;
    let (pinned, git_config) = pin(git, project, &state, &mut notes)?;
    let git = &pinned;
    write_excludes(git, project, &state, &opts.tracking_ignore)?;
    // What of the user's repository can make git run a program, as the run
    // finds it: held to that before modix runs git there after a step.
    let settings = match &info {
        Some(i) => {
            let kept =
                super::settings::Settings::take(git, &i.toplevel, &i.git_dir, &i.common_dir)?;
            Some(kept.save(&state)?)
        }
        None => None,
    };
    let mut guard = None;
    if let Some(gd) = &git_dir {
        // A git dir of modix's own: nothing is ever created in the user's folder.
        git.cmd(&state)
            .args(["init", "-q", "--bare", "--template="])
            .arg(gd)
            .run()?;
        guard = Some(super::guard::Kept::take(gd, &state)?.digest());
    } else if let Some(info) = &info {
        // Seed the private index from the user's (read, never written) so
        // stat data is reused and sparse-checkout entries stay as they are.
        let user_index = &git_paths(git, &Ctx::at(&info.toplevel), &["index"])?[0];
        if user_index.is_file() {
            copy_file(user_index, &state.join("index"))?;
        }
    }
    let scope_spec = if scope.is_empty() {
        ".".to_owned()
    } else {
        format!(":(literal){scope}")
    };
    git.at(&ctx)
        .args(["add", "-A", "--"])
        .arg(&scope_spec)
        .run()?;
    let tree = git.at(&ctx).arg("write-tree").run_text()?;
    let head = info.as_ref().and_then(|i| i.head.clone());
    let base = match &head {
        Some(h) if tree_of(git, &ctx, h)? == tree => h.clone(),
        _ => {
            let parents: Vec<&str> = head.iter().map(String::as_str).collect();
            commit_tree(
                git,
                &ctx,
                &tree,
                &parents,
                &format!(
                    "modix: the tree at the start of run {} (in place)\n\nModix-Run: {}\n",
                    opts.run_id, opts.run_id
                ),
            )?
        }
    };
    update_ref(git, &ctx, "modix: run start", &run_ref, &base, None)?;
    cleanup.refs.push((ctx.clone(), run_ref.clone()));
    let record = WorkspaceRecord {
        mode: Mode::InPlace,
        run_id: opts.run_id.clone(),
        short_id: short,
        project_dir: project.to_path_buf(),
        repo_root: info.as_ref().map(|i| i.toplevel.clone()),
        root: top.to_path_buf(),
        workdir: project.to_path_buf(),
        scope,
        state_dir: state,
        git_dir,
        borrowed: false,
        guard,
        settings,
        git_config,
        run_ref,
        base_commit: base.clone(),
        last_commit: base,
        tracking_ignore: opts.tracking_ignore.clone(),
        modix_home: opts.modix_home.clone(),
    };
    let ws = Workspace::assemble(git, record, lock, true)?;
    cleanup.disarm();
    Ok((ws, notes))
}

/// `<root>/<name>-<8 hex>/<short>` for the workspace and `…/<short>.state`
/// for modix's files, named after `tree`; the root is refused (before
/// anything is made) when it is a file or inside one of `trees`.
fn places(
    opts: &CreateOptions,
    trees: &[&Path],
    tree: &Path,
    short: &str,
) -> Result<(PathBuf, PathBuf)> {
    let root = workspace_root(opts, trees)?;
    let dir = root.join(project_key(tree));
    create_dir(&dir)?;
    let dir = canonical(&dir)?;
    Ok((dir.join(short), dir.join(format!("{short}.state"))))
}

/// `<folder name>-<8 hex of the path's hash>`: readable, and two projects
/// with the same name never share a folder.
pub(super) fn project_key(tree: &Path) -> String {
    let name: String = tree
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    // Never a leading `-` (a folder a command would read as an option) or
    // `.` (hidden): `ünï proj` is `n--proj`, not `-n--proj`.
    let name = name.trim_start_matches(['-', '.']);
    let name = if name.trim_matches(['-', '.']).is_empty() {
        "project"
    } else {
        name
    };
    let hash = hex(&Sha256::digest(tree.as_os_str().as_encoded_bytes()));
    format!("{name}-{}", &hash[..8])
}

/// A commit of the dirty tree (tracked changes and untracked, non-ignored
/// files) whose parent is HEAD, made with a temporary index so the user's
/// index is only read.
fn snapshot_dirty(
    git: &Git,
    info: &RepoInfo,
    head: &str,
    state: &Path,
    run_id: &str,
) -> Result<String> {
    let tmp = state.join("snapshot.index");
    let user_index = &git_paths(git, &Ctx::at(&info.toplevel), &["index"])?[0];
    let ctx = Ctx {
        cwd: info.toplevel.clone(),
        index: Some(tmp.clone()),
        ..Ctx::default()
    };
    if user_index.is_file() {
        copy_file(user_index, &tmp)?;
    } else {
        git.at(&ctx).args(["read-tree", head]).run()?;
    }
    git.at(&ctx).args(["add", "-A"]).run()?;
    let tree = git.at(&ctx).arg("write-tree").run_text()?;
    let _ = std::fs::remove_file(&tmp);
    commit_tree(
        git,
        &ctx,
        &tree,
        &[head],
        &format!(
            "modix: uncommitted changes at the start of run {run_id}\n\nModix-Run: {run_id}\n"
        ),
    )
}

/// Submodules (worktrees would leave them empty; filling them needs the
/// network), partial clones (the agents' repository has no remote to fetch
/// missing files from) and Git LFS without `git lfs` (agents would see
/// pointer files).
pub(super) fn refuse_unsupported(git: &Git, user: &Ctx, base: &str) -> Result<()> {
    let (code, _) = git
        .at(user)
        .args(["cat-file", "-e"])
        .arg(format!("{base}:.gitmodules"))
        .run_codes(&[0, 1, 128])?;
    if code == 0 {
        return Err(WorkspaceError::Unsupported {
            what: "the project uses git submodules (.gitmodules)".into(),
            advice: "A worktree would leave them empty and filling them needs the network; use workspace: copy (a copy of the folder, the submodules' files included) or in_place.".into(),
        });
    }
    let (code, _) = git
        .at(user)
        .args(["config", "--get", "extensions.partialClone"])
        .run_codes(&[0, 1])?;
    if code == 0 {
        return Err(WorkspaceError::Unsupported {
            what: "the repository is a partial clone (extensions.partialClone): the files it has not fetched yet cannot be checked out without its remote".into(),
            advice: "Fetch everything (`git fetch --refetch` with no filter), or use workspace: in_place.".into(),
        });
    }
    let (code, _) = git
        .at(user)
        .args([
            "grep",
            "-q",
            "-F",
            "-e",
            "filter=lfs",
            base,
            "--",
            "*.gitattributes",
        ])
        .run_codes(&[0, 1])?;
    if code == 0 {
        let out = git.at(user).args(["lfs", "version"]).output()?;
        if !out.status.success() {
            return Err(WorkspaceError::Unsupported {
                what: "the project stores files with Git LFS (filter=lfs in .gitattributes) but `git lfs` is not installed".into(),
                advice: "Install git-lfs (agents would otherwise see pointer files), or use workspace: in_place.".into(),
            });
        }
    }
    Ok(())
}

/// modix's `core.excludesFile` for the run: the user's global excludes file
/// (git reads only one, and modix's replaces it) followed by the
/// tracking-ignore list. Never the user's `.git/info/exclude`.
fn write_excludes(git: &Git, dir: &Path, state: &Path, ignore: &[String]) -> Result<()> {
    let mut text = String::new();
    if let Some(path) = user_excludes(git, dir)?
        && let Ok(user) = std::fs::read_to_string(&path)
    {
        text.push_str(&format!(
            "# the user's global excludes ({})\n",
            path.display()
        ));
        text.push_str(&user);
        text.push('\n');
    }
    text.push_str("# modix: tracking-ignore list\n");
    for g in ignore {
        text.push_str(g);
        text.push('\n');
    }
    let path = state.join("exclude");
    std::fs::write(&path, text).map_err(|e| WorkspaceError::io("write", &path, e))
}

/// Where git would read the user's global excludes: `core.excludesFile`, or
/// `$XDG_CONFIG_HOME/git/ignore`, or `~/.config/git/ignore`.
fn user_excludes(git: &Git, dir: &Path) -> Result<Option<PathBuf>> {
    let (code, out) = git
        .cmd(dir)
        .args(["config", "--path", "--get", "core.excludesFile"])
        .run_codes(&[0, 1])?;
    if code == 0 {
        return Ok(Some(PathBuf::from(lossy(&out).trim())));
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty());
    Ok(match xdg {
        Some(x) => Some(PathBuf::from(x).join("git/ignore")),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/git/ignore")),
    })
}

fn canonical(p: &Path) -> Result<PathBuf> {
    p.canonicalize()
        .map_err(|e| WorkspaceError::io("find", p, e))
}

fn create_dir(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p).map_err(|e| WorkspaceError::io("create", p, e))
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| WorkspaceError::io("copy", from, e))
}

/// `refs/heads/modix/x` → `modix/x`, for messages.
/// Whether `tip` is a step modix settled for this run past its last
/// recorded one and never recorded: it builds on that step and carries this
/// run's `Modix-Run` trailer (read in `ctx`, which must hold both).
pub(crate) fn unrecorded_step(
    git: &Git,
    ctx: &Ctx,
    record: &WorkspaceRecord,
    tip: &str,
) -> Result<bool> {
    if tip == record.last_commit || !is_ancestor(git, ctx, &record.last_commit, tip)? {
        return Ok(false);
    }
    let body = git
        .at(ctx)
        .args(["log", "-1", "--format=%B", tip])
        .run_text()?;
    let trailer = format!("Modix-Run: {}", record.run_id);
    Ok(body.lines().any(|l| l.trim() == trailer))
}

pub(crate) fn short_ref(name: &str) -> String {
    name.strip_prefix("refs/heads/").unwrap_or(name).to_owned()
}

/// Undoes a half-made workspace unless disarmed.
struct Cleanup<'a> {
    git: &'a Git,
    dirs: Vec<PathBuf>,
    refs: Vec<(Ctx, String)>,
    armed: bool,
}

impl<'a> Cleanup<'a> {
    fn new(git: &'a Git) -> Self {
        Cleanup {
            git,
            dirs: Vec::new(),
            refs: Vec::new(),
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for (ctx, r) in &self.refs {
            let _ = self
                .git
                .at(&ctx.without_index())
                .args(["update-ref", "-d", r])
                .run();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
