//! Tests on real git repositories made in temporary folders. git runs with
//! `GIT_CONFIG_GLOBAL=/dev/null` and `GIT_CONFIG_NOSYSTEM=1`, so a machine
//! without any git identity or config (fresh CI) gives the same results.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::git::{ChangeStatus, Git};
use super::*;

/// The driver as tests use it: independent of the developer's git config.
fn git() -> Git {
    Git::new()
        .with_env("GIT_CONFIG_GLOBAL", "/dev/null")
        .with_env("GIT_CONFIG_NOSYSTEM", "1")
}

/// Plain git as the *user* (or an agent) would run it: its own identity, no
/// modix driver involved. Read-only commands never refresh the index.
fn sh(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

/// A temp home for modix and a temp folder for projects.
struct Fixture {
    _tmp: TempDir,
    home: PathBuf,
    projects: PathBuf,
    git: Git,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let home = base.join("modix-home");
        let projects = base.join("projects");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&projects).unwrap();
        Fixture {
            _tmp: tmp,
            home,
            projects,
            git: git(),
        }
    }

    /// A committed repository: README.md, src/app.py, src/data.txt, .gitignore.
    fn repo(&self, name: &str) -> PathBuf {
        let r = self.projects.join(name);
        std::fs::create_dir_all(&r).unwrap();
        sh(&r, &["init", "-q"]);
        write(&r, "README.md", "# demo\n");
        write(&r, "src/app.py", "def f():\n    return 1\n");
        write(&r, "src/data.txt", "one\ntwo\nthree\n");
        write(&r, ".gitignore", "build/\n*.log\n");
        sh(&r, &["add", "-A"]);
        sh(&r, &["commit", "-q", "-m", "initial"]);
        r
    }

    fn opts(&self, mode: Mode, project: &Path) -> CreateOptions {
        CreateOptions::new(
            mode,
            project,
            &self.home,
            ulid::Ulid::from_datetime(std::time::SystemTime::now()).to_string(),
        )
    }

    fn create(&self, mode: Mode, project: &Path) -> (Workspace, Vec<String>) {
        Workspace::create(&self.git, &self.opts(mode, project)).unwrap()
    }
}

/// Everything of the user's that must stay byte-for-byte as it was.
#[derive(Debug, PartialEq, Eq)]
struct UserState {
    head: String,
    branches: Vec<String>,
    cached: String,
    status: String,
    git_files: BTreeMap<String, Vec<u8>>,
    files: BTreeMap<String, Vec<u8>>,
}

fn user_state(repo: &Path) -> UserState {
    let branches = sh(
        repo,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads/",
        ],
    )
    .lines()
    .filter(|l| !l.starts_with("refs/heads/modix/"))
    .map(str::to_owned)
    .collect();
    let mut git_files = BTreeMap::new();
    for f in ["index", "HEAD", "config", "info/exclude"] {
        git_files.insert(
            f.to_owned(),
            std::fs::read(repo.join(".git").join(f)).unwrap_or_default(),
        );
    }
    UserState {
        head: sh(repo, &["rev-parse", "HEAD"]),
        branches,
        cached: sh(repo, &["diff", "--cached"]),
        status: sh(repo, &["status", "--porcelain=v1", "--untracked-files=all"]),
        git_files,
        files: tree_files(repo),
    }
}

/// Every file under `root` but `.git`, with its bytes (a symlink: its target).
fn tree_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let ft = e.file_type().unwrap();
            if e.file_name() == ".git" {
                continue;
            } else if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if ft.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn make_dirty(repo: &Path) {
    write(repo, "README.md", "# demo, edited\n");
    write(repo, "src/data.txt", "one\nstaged\n");
    sh(repo, &["add", "src/data.txt"]);
    write(repo, "notes.txt", "untracked\n");
    write(repo, "debug.log", "ignored\n");
}

fn change<'a>(s: &'a Settled, path: &str) -> &'a Change {
    s.changes
        .iter()
        .find(|c| c.path == path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", s.changes))
}

// ---------------------------------------------------------------- worktree

#[test]
fn worktree_lives_outside_the_project_and_leaves_the_user_untouched() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    make_dirty(&repo);
    let before = user_state(&repo);

    let (mut ws, notes) = fx.create(Mode::Worktree, &repo);
    let rec = ws.record().clone();
    assert!(!rec.root.starts_with(&repo), "{}", rec.root.display());
    assert!(rec.root.starts_with(fx.home.join("worktrees")));
    let key = rec
        .root
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        key.starts_with("app-") && key.len() == "app-".len() + 8,
        "{key}"
    );
    assert_eq!(rec.workdir, rec.root);
    assert_eq!(rec.run_ref, format!("refs/heads/modix/{}", rec.short_id));
    assert_eq!(rec.base_commit, before.head);
    // Dirty changes left out, and said so.
    assert!(
        notes
            .iter()
            .any(|n| n.contains("uncommitted changes") && n.contains("README.md")),
        "{notes:?}"
    );
    assert_eq!(read(&rec.root, "README.md"), "# demo\n");
    assert!(!rec.root.join("notes.txt").exists());
    assert_eq!(
        sh(&rec.root, &["rev-parse", "--abbrev-ref", "HEAD"]),
        format!("modix/{}", rec.short_id)
    );

    // A whole step cycle in the workspace: settle, reject, settle again.
    write(&rec.root, "src/app.py", "def f():\n    return 2\n");
    write(&rec.root, "src/new.py", "x = 1\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert!(!s.empty);
    ws.reject(1, &s.commit, &s.parent).unwrap();
    write(&rec.root, "src/new.py", "x = 2\n");
    ws.settle(2, "execute", 2).unwrap();
    drop(ws);

    assert_eq!(
        user_state(&repo),
        before,
        "the user's checkout, index or branches changed"
    );
}

#[test]
fn no_hook_of_the_user_ever_runs() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let marker = fx.projects.join("hook-ran");
    // post-checkout runs on `worktree add`, reference-transaction on every
    // ref update (update-ref included), pre-commit/post-commit on commits.
    for hook in [
        "post-checkout",
        "reference-transaction",
        "pre-commit",
        "post-commit",
        "post-merge",
    ] {
        let p = repo.join(".git/hooks").join(hook);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho {hook} >> '{}'\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let rec = finished_run(&fx, &repo);
    apply(&fx.git, &rec, ApplyStrategy::Merge, None).unwrap();
    prune(&fx.git, &rec, true).unwrap();
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(ran, "", "hooks ran");
}

#[test]
fn include_dirty_starts_from_a_snapshot_of_the_dirty_tree() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    make_dirty(&repo);
    let before = user_state(&repo);
    let mut o = fx.opts(Mode::Worktree, &repo);
    o.include_dirty = true;
    let (ws, notes) = Workspace::create(&fx.git, &o).unwrap();
    let root = ws.record().root.clone();
    assert!(
        notes.iter().any(|n| n.contains("uncommitted changes too")),
        "{notes:?}"
    );
    assert_eq!(read(&root, "README.md"), "# demo, edited\n");
    assert_eq!(read(&root, "src/data.txt"), "one\nstaged\n");
    assert_eq!(read(&root, "notes.txt"), "untracked\n");
    assert!(
        !root.join("debug.log").exists(),
        "ignored files are not part of the snapshot"
    );
    // The snapshot is a child of HEAD, and the user's HEAD did not move.
    let parent = sh(&root, &["rev-parse", &format!("{}^", ws.base_commit())]);
    assert_eq!(parent, before.head);
    assert_ne!(ws.base_commit(), before.head);
    assert_eq!(user_state(&repo), before);
}

#[test]
fn a_monorepo_project_works_in_its_subfolder_of_the_worktree() {
    let fx = Fixture::new();
    let repo = fx.repo("mono");
    write(&repo, "apps/web/index.js", "console.log(1)\n");
    write(&repo, "libs/shared.js", "export {}\n");
    sh(&repo, &["add", "-A"]);
    sh(&repo, &["commit", "-q", "-m", "apps"]);
    let (mut ws, _) = fx.create(Mode::Worktree, &repo.join("apps/web"));
    let rec = ws.record().clone();
    assert_eq!(rec.workdir, rec.root.join("apps/web"));
    assert!(rec.workdir.join("index.js").is_file());
    assert_eq!(rec.repo_root.as_deref(), Some(repo.as_path()));
    // The whole worktree is tracked: an edit outside the subfolder is recorded too.
    write(&rec.workdir, "index.js", "console.log(2)\n");
    write(&rec.root, "libs/shared.js", "export const x = 1\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    let paths: Vec<&str> = s.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["apps/web/index.js", "libs/shared.js"]);
}

#[test]
fn refusals_say_what_to_do() {
    let fx = Fixture::new();
    // No commits yet.
    let empty = fx.projects.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    sh(&empty, &["init", "-q"]);
    let err = Workspace::create(&fx.git, &fx.opts(Mode::Worktree, &empty)).unwrap_err();
    assert!(matches!(err, WorkspaceError::NoCommits { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("commit something first or use workspace: copy"),
        "{err}"
    );

    // Not a repository.
    let plain = fx.projects.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let err = Workspace::create(&fx.git, &fx.opts(Mode::Worktree, &plain)).unwrap_err();
    assert!(matches!(err, WorkspaceError::NotAGitRepo { .. }), "{err:?}");

    // Submodules.
    let sub = fx.repo("sub");
    write(
        &sub,
        ".gitmodules",
        "[submodule \"x\"]\n\tpath = x\n\turl = ../x\n",
    );
    sh(&sub, &["add", "-A"]);
    sh(&sub, &["commit", "-q", "-m", "modules"]);
    let err = Workspace::create(&fx.git, &fx.opts(Mode::Worktree, &sub)).unwrap_err();
    assert!(err.to_string().contains("submodules"), "{err}");

    // Git LFS without git-lfs installed.
    let lfs = fx.repo("lfs");
    write(
        &lfs,
        "assets/.gitattributes",
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    );
    sh(&lfs, &["add", "-A"]);
    sh(&lfs, &["commit", "-q", "-m", "lfs"]);
    let has_lfs = Command::new("git")
        .args(["lfs", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let res = Workspace::create(&fx.git, &fx.opts(Mode::Worktree, &lfs));
    if has_lfs {
        assert!(res.is_ok());
    } else {
        let err = res.unwrap_err();
        assert!(err.to_string().contains("Git LFS"), "{err}");
    }

    // Unknown base, and a root inside the project.
    let repo = fx.repo("app");
    let mut o = fx.opts(Mode::Worktree, &repo);
    o.base = Some("no-such-branch".into());
    let err = Workspace::create(&fx.git, &o).unwrap_err();
    assert!(matches!(err, WorkspaceError::BadBase { .. }), "{err:?}");
    let mut o = fx.opts(Mode::Worktree, &repo);
    o.root = Some(repo.join(".modix/worktrees"));
    let err = Workspace::create(&fx.git, &o).unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::BadRoot {
                problem: super::RootProblem::Inside(_),
                ..
            }
        ),
        "{err:?}"
    );
    // Refused before anything was made there.
    assert!(!repo.join(".modix/worktrees").exists());
    // Nothing was left behind by the failed attempts.
    assert_eq!(
        sh(&repo, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert_eq!(sh(&repo, &["for-each-ref", "refs/heads/modix/"]), "");
}

#[test]
fn a_base_revision_can_be_given() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let first = sh(&repo, &["rev-parse", "HEAD"]);
    write(&repo, "later.txt", "later\n");
    sh(&repo, &["add", "-A"]);
    sh(&repo, &["commit", "-q", "-m", "later"]);
    let mut o = fx.opts(Mode::Worktree, &repo);
    o.base = Some("HEAD~1".into());
    let (ws, _) = Workspace::create(&fx.git, &o).unwrap();
    assert_eq!(ws.base_commit(), first);
    assert!(!ws.record().root.join("later.txt").exists());
}

// ---------------------------------------------------------------- settle

#[test]
fn settle_without_changes_runs_no_git_at_all() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    // Ignored output and test-runner noise are not changes either.
    let root = ws.record().root.clone();
    write(&root, "build/out.o", "binary");
    write(&root, "src/__pycache__/app.cpython-312.pyc", "pyc");
    write(&root, ".pytest_cache/v/cache/lastfailed", "{}");
    write(&root, "stray.pyc", "pyc");
    let calls = ws.git().invocations();
    for seq in 1..=3 {
        let s = ws.settle(seq, "test", 1).unwrap();
        assert!(s.empty && s.fast_path, "{s:?}");
        assert_eq!(s.commit, ws.base_commit());
    }
    assert_eq!(ws.git().invocations(), calls, "the fast path started git");
}

/// The `.git` link, read once pointing home and then left alone a tick,
/// is not read at each settle; rewritten in place with its mtime put back
/// and its size kept (the ctime moves all the same), it is found and put
/// back.
#[test]
fn a_git_link_rewritten_with_its_mtime_put_back_is_still_put_back() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let link = ws.record().root.join(".git");
    let home = std::fs::read_to_string(&link).unwrap();
    // Past the racy window, so that the next read is remembered.
    std::thread::sleep(std::time::Duration::from_millis(120));
    for seq in 1..=2 {
        let s = ws.settle(seq, "test", 1).unwrap();
        assert!(s.notes.is_empty(), "{s:?}");
    }
    assert!(
        ws.link_seen.is_some(),
        "a link read pointing home, a tick old"
    );
    let mtime = std::fs::symlink_metadata(&link)
        .unwrap()
        .modified()
        .unwrap();
    // As long as the link (its size as it was): only the ctime tells.
    let elsewhere = format!("gitdir: /{}\n", "x".repeat(home.len() - 10));
    assert_eq!(elsewhere.len(), home.len());
    std::fs::write(&link, &elsewhere).unwrap();
    let file = std::fs::File::options().write(true).open(&link).unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    let s = ws.settle(3, "test", 1).unwrap();
    assert!(
        s.notes.iter().any(|n| n.contains("it is put back")),
        "{s:?}"
    );
    assert_eq!(std::fs::read_to_string(&link).unwrap(), home);
}

#[test]
fn settle_records_edits_adds_deletes_and_binaries_with_line_counts() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    let base = ws.base_commit().to_owned();

    write(&root, "src/data.txt", "one\n2\n3\nfour\n"); // 3 added, 2 removed
    write(&root, "src/extra.py", "a = 1\nb = 2\n");
    std::fs::remove_file(root.join("README.md")).unwrap();
    std::fs::write(root.join("logo.png"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    write(&root, "src/__pycache__/x.pyc", "noise");
    let s = ws.settle(7, "execute", 2).unwrap();
    assert!(!s.empty && !s.fast_path);
    assert_eq!(s.parent, base);
    assert_eq!(s.changes.len(), 4, "{:?}", s.changes);
    let c = change(&s, "src/data.txt");
    assert_eq!(
        (c.status, c.added, c.removed),
        (ChangeStatus::Modified, Some(3), Some(2))
    );
    let c = change(&s, "src/extra.py");
    assert_eq!(
        (c.status, c.added, c.removed),
        (ChangeStatus::Added, Some(2), Some(0))
    );
    let c = change(&s, "README.md");
    assert_eq!(
        (c.status, c.added, c.removed),
        (ChangeStatus::Deleted, Some(0), Some(1))
    );
    let c = change(&s, "logo.png");
    assert_eq!(
        (c.status, c.added, c.removed),
        (ChangeStatus::Added, None, None)
    );

    // The commit: on the run branch, child of the base, with trailers, by modix.
    assert_eq!(sh(&root, &["rev-parse", &ws.record().run_ref]), s.commit);
    assert_eq!(sh(&root, &["rev-parse", &format!("{}^", s.commit)]), base);
    assert_eq!(
        sh(&root, &["rev-parse", &format!("{}^{{tree}}", s.commit)]),
        s.tree
    );
    let msg = sh(&root, &["log", "-1", "--format=%B", &s.commit]);
    for t in [
        format!("Modix-Run: {}", ws.record().run_id),
        "Modix-Seq: 7".into(),
        "Modix-State: execute".into(),
        "Modix-Attempt: 2".into(),
    ] {
        assert!(msg.contains(&t), "{t} missing in {msg}");
    }
    assert_eq!(
        sh(&root, &["log", "-1", "--format=%an <%ae>", &s.commit]),
        "modix <modix@localhost>"
    );
    // The agent's view is clean: its index follows the recorded step.
    assert_eq!(
        sh(&root, &["status", "--porcelain", "--untracked-files=all"]),
        "?? src/__pycache__/x.pyc"
    );
    assert_eq!(ws.last_commit(), s.commit);

    // Nothing more changed: the fast path again.
    let calls = ws.git().invocations();
    let again = ws.settle(8, "execute", 1).unwrap();
    assert!(again.empty && again.fast_path);
    assert_eq!(
        (again.commit.as_str(), again.tree.as_str()),
        (s.commit.as_str(), s.tree.as_str())
    );
    assert_eq!(ws.git().invocations(), calls);
}

#[test]
fn edits_to_tracked_files_that_ignore_rules_hide_are_recorded() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    // Committed first, ignored later: git still tracks it.
    write(&repo, "build/keep.cfg", "v1\n");
    write(&repo, "config.local", "v1\n");
    sh(&repo, &["add", "-f", "build/keep.cfg", "config.local"]);
    write(&repo, ".gitignore", "build/\n*.log\nconfig.local\n");
    sh(&repo, &["commit", "-q", "-am", "tracked but ignored"]);
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "build/keep.cfg", "v2\n");
    write(&root, "config.local", "v2\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert!(!s.fast_path && !s.empty, "{s:?}");
    let paths: Vec<&str> = s.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["build/keep.cfg", "config.local"]);
}

#[test]
fn a_touched_but_unchanged_file_gives_an_empty_step() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    let text = read(&root, "README.md");
    write(&root, "README.md", &text);
    let s = ws.settle(1, "execute", 1).unwrap();
    assert!(s.empty && !s.fast_path);
    assert_eq!(s.commit, ws.base_commit());
    assert_eq!(
        sh(&root, &["rev-parse", &ws.record().run_ref]),
        ws.base_commit()
    );
}

#[test]
fn an_agent_that_commits_on_its_own_is_recorded_on_top_of_its_commits() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    let base = ws.base_commit().to_owned();

    write(&root, "src/app.py", "def f():\n    return 42\n");
    sh(&root, &["commit", "-q", "-am", "agent: fix f"]);
    let agent = sh(&root, &["rev-parse", "HEAD"]);
    write(&root, "src/more.py", "m = 1\n"); // not committed by the agent
    let s = ws.settle(1, "execute", 1).unwrap();
    assert_eq!(s.agent_commits, std::slice::from_ref(&agent));
    assert_eq!(
        s.parent, base,
        "changes are measured from the last recorded step"
    );
    let paths: Vec<&str> = s.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["src/app.py", "src/more.py"]);
    assert_eq!(sh(&root, &["rev-parse", &format!("{}^", s.commit)]), agent);

    // An agent commit alone (files already as the commit says) is seen too:
    // the fast path watches git's own files.
    write(&root, "src/later.py", "l = 1\n");
    let s2 = ws.settle(2, "execute", 1).unwrap();
    sh(
        &root,
        &["commit", "-q", "--allow-empty", "-m", "agent: empty"],
    );
    let s3 = ws.settle(3, "execute", 1).unwrap();
    assert!(s3.empty && !s3.fast_path, "{s3:?}");
    assert_eq!(sh(&root, &["rev-parse", &ws.record().run_ref]), s2.commit);
}

#[test]
fn an_agent_that_moves_head_elsewhere_is_recorded_from_the_last_step() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "a.txt", "a\n");
    let s1 = ws.settle(1, "execute", 1).unwrap();
    // The agent switches to a new orphan-ish branch made from the base.
    sh(
        &root,
        &["checkout", "-q", "-b", "agent-branch", ws.base_commit()],
    );
    write(&root, "b.txt", "b\n");
    let s2 = ws.settle(2, "execute", 1).unwrap();
    assert_eq!(s2.parent, s1.commit);
    assert!(
        s2.notes.iter().any(|n| n.contains("moved")),
        "{:?}",
        s2.notes
    );
    assert_eq!(
        sh(&root, &["rev-parse", &format!("{}^", s2.commit)]),
        s1.commit
    );
    // a.txt is gone from the files (the agent's checkout removed it): recorded as deleted.
    assert_eq!(change(&s2, "a.txt").status, ChangeStatus::Deleted);
    assert_eq!(change(&s2, "b.txt").status, ChangeStatus::Added);
    assert_eq!(sh(&root, &["symbolic-ref", "HEAD"]), ws.record().run_ref);
}

// ---------------------------------------------------------------- reject, resume

#[test]
fn reject_restores_the_files_and_keeps_the_rejected_commit() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    let before = tree_files(&root);

    write(&root, "src/app.py", "broken(\n");
    write(&root, "src/new/deep.py", "new\n");
    std::fs::remove_file(root.join("src/data.txt")).unwrap();
    write(&root, "build/out.o", "build output"); // ignored
    let s = ws.settle(3, "execute", 1).unwrap();
    let r = ws.reject(3, &s.commit, &s.parent).unwrap();
    assert_eq!(r.restored_to, ws.base_commit());
    let kept = format!("refs/modix/runs/{}/rejected/3", ws.record().short_id);
    assert_eq!(r.rejected_ref.as_deref(), Some(kept.as_str()));
    assert_eq!(sh(&root, &["rev-parse", &kept]), s.commit);
    assert_eq!(
        sh(&root, &["rev-parse", &ws.record().run_ref]),
        ws.base_commit()
    );
    assert_eq!(ws.last_commit(), ws.base_commit());

    let mut after = tree_files(&root);
    assert_eq!(
        after.remove("build/out.o").as_deref(),
        Some(&b"build output"[..]),
        "ignored files are left alone"
    );
    assert_eq!(after, before);
    assert!(!root.join("src/new").exists());
    assert_eq!(sh(&root, &["status", "--porcelain"]), "");
    // Back where it was: no change, no git.
    let calls = ws.git().invocations();
    assert!(ws.settle(4, "execute", 2).unwrap().empty);
    assert_eq!(ws.git().invocations(), calls);
    // Only the last step can be taken off.
    let err = ws.reject(3, &s.commit, &s.parent).unwrap_err();
    assert!(matches!(err, WorkspaceError::NotLastStep { .. }), "{err:?}");
}

/// The user's repository gets a step once it is judged and kept
/// (`publish_step`), a rejected step's kept commit with the reject, and a
/// step taken off unkept (it held a secret) never: none of its objects.
#[test]
fn steps_reach_the_users_repository_only_once_judged_and_unkept_ones_never() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    let run_ref = ws.record().run_ref.clone();
    assert_eq!(sh(&repo, &["rev-parse", &run_ref]), ws.base_commit());

    write(&root, "kept.txt", "kept\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert!(s.moved);
    assert_eq!(
        sh(&repo, &["rev-parse", &run_ref]),
        ws.base_commit(),
        "not judged yet"
    );
    assert_eq!(ws.publish_step(), None);
    assert_eq!(sh(&repo, &["rev-parse", &run_ref]), s.commit);

    write(&root, "key.txt", "sk-secret-value\n");
    let bad = ws.settle(2, "execute", 1).unwrap();
    let r = ws.reject_unkept(2, &bad.commit, &bad.parent).unwrap();
    assert_eq!(r.rejected_ref, None);
    assert!(!root.join("key.txt").exists());
    assert_eq!(sh(&repo, &["rev-parse", &run_ref]), s.commit);
    let listed = sh(&repo, &["for-each-ref", "refs/modix/"]);
    assert_eq!(listed, "", "{listed}");
    let present = Command::new("git")
        .args(["cat-file", "-e", &bad.commit])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(
        !present.success(),
        "the unkept commit reached the user's objects"
    );
    let own = sh(&root, &["for-each-ref", "refs/modix/"]);
    assert_eq!(own, "", "{own}");
}

#[test]
fn reject_refuses_unrecorded_changes() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "x.txt", "x\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    write(&root, "y.txt", "not recorded\n");
    let err = ws.reject(1, &s.commit, &s.parent).unwrap_err();
    assert!(
        matches!(&err, WorkspaceError::Unrecorded { paths } if paths == &["y.txt"]),
        "{err:?}"
    );
    assert!(root.join("x.txt").exists() && root.join("y.txt").exists());
}

#[test]
fn resume_discards_what_an_abandoned_agent_left() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "step1.txt", "kept\n");
    ws.settle(1, "execute", 1).unwrap();
    let record = ws.record().clone();
    // The agent of step 2 edits, stages and then modix crashes.
    write(&root, "src/app.py", "half done\n");
    write(&root, "scratch.txt", "scratch\n");
    sh(&root, &["add", "scratch.txt"]);
    drop(ws);

    let (mut ws, notes) = Workspace::reopen(&fx.git, record.clone(), false).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let d = ws
        .discard_uncommitted()
        .unwrap()
        .expect("changes were left");
    let mut paths = d.paths.clone();
    paths.sort();
    assert_eq!(paths, ["scratch.txt", "src/app.py"]);
    assert_eq!(
        d.reference,
        Some(format!("refs/modix/runs/{}/discarded/1", record.short_id))
    );
    assert_eq!(
        sh(&root, &["rev-parse", d.reference.as_deref().unwrap()]),
        d.commit
    );
    assert_eq!(
        sh(&root, &["rev-parse", &format!("{}^", d.commit)]),
        record.last_commit
    );
    assert_eq!(read(&root, "src/app.py"), "def f():\n    return 1\n");
    assert!(!root.join("scratch.txt").exists());
    assert_eq!(read(&root, "step1.txt"), "kept\n");
    assert_eq!(sh(&root, &["status", "--porcelain"]), "");
    assert!(ws.discard_uncommitted().unwrap().is_none());
    assert_eq!(ws.last_commit(), record.last_commit);
}

#[test]
fn resume_refuses_a_moved_run_branch_unless_reset() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "a.txt", "a\n");
    ws.settle(1, "execute", 1).unwrap();
    let record = ws.record().clone();
    drop(ws);
    // Someone commits in the worktree after the last recorded step.
    write(&root, "b.txt", "b\n");
    sh(&root, &["add", "-A"]);
    sh(&root, &["commit", "-q", "-m", "after the crash"]);
    let moved = sh(&root, &["rev-parse", "HEAD"]);

    let err = Workspace::reopen(&fx.git, record.clone(), false).unwrap_err();
    match &err {
        WorkspaceError::RefMoved {
            expected, actual, ..
        } => {
            assert_eq!(expected, &record.last_commit);
            assert_eq!(actual.as_deref(), Some(moved.as_str()));
        }
        other => panic!("expected RefMoved, got {other:?}"),
    }
    assert!(err.to_string().contains("--reset"), "{err}");

    let (mut ws, notes) = Workspace::reopen(&fx.git, record.clone(), true).unwrap();
    assert!(notes.iter().any(|n| n.contains("put back")), "{notes:?}");
    assert_eq!(
        sh(&root, &["rev-parse", &record.run_ref]),
        record.last_commit
    );
    let d = ws.discard_uncommitted().unwrap().unwrap();
    assert_eq!(d.paths, ["b.txt"]);
    assert!(!root.join("b.txt").exists());
}

#[test]
fn resume_of_a_pruned_workspace_says_it_is_gone() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (ws, _) = fx.create(Mode::Worktree, &repo);
    let record = ws.record().clone();
    drop(ws);
    prune(&fx.git, &record, true).unwrap();
    let err = Workspace::reopen(&fx.git, record, false).unwrap_err();
    assert!(matches!(err, WorkspaceError::Missing { .. }), "{err:?}");
}

#[test]
fn a_live_workspace_cannot_be_opened_twice() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (ws, _) = fx.create(Mode::Worktree, &repo);
    let err = Workspace::reopen(&fx.git, ws.record().clone(), false).unwrap_err();
    assert!(matches!(err, WorkspaceError::Locked { .. }), "{err:?}");
    let err = prune(&fx.git, ws.record(), true).unwrap_err();
    assert!(matches!(err, WorkspaceError::Locked { .. }), "{err:?}");
}

// ---------------------------------------------------------------- copy

/// Long because it is one tree with every case the copy must get right, set
/// up once and checked once.
#[test]
fn copy_honours_ignore_files_keeps_symlinks_and_modes() {
    let fx = Fixture::new();
    let p = fx.projects.join("plain");
    write(&p, ".gitignore", "build/\n*.log\n");
    write(&p, "main.py", "print(1)\n");
    write(&p, "run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(p.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    write(&p, "build/out.o", "o");
    write(&p, "app.log", "log");
    write(
        &p,
        "target/keep.txt",
        "a folder named target that is not ignored",
    );
    write(&p, "sub/.gitignore", "generated/\n");
    write(&p, "sub/generated/g.txt", "g");
    write(&p, "sub/code.py", "c = 1\n");
    write(&p, ".ignore", "secret.txt\n");
    write(&p, "secret.txt", "s");
    write(&p, ".env.example", "KEY=\n");
    write(&p, "vendor/lib/.git/HEAD", "ref: refs/heads/main\n");
    write(&p, "vendor/lib/lib.py", "l = 1\n");
    write(
        &p,
        ".modix/.gitignore",
        "modix.db\nmodix.db-*\nruns/\nstate.json\n",
    );
    write(&p, ".modix/settings.toml", "x = 1\n");
    write(&p, ".modix/modix.db", "db");
    write(&p, ".modix/modix.db-wal", "wal");
    write(&p, ".modix/state.json", "{}");
    write(&p, ".modix/runs/R1/workspace/old.txt", "old");
    write(&p, "__pycache__/m.cpython-312.pyc", "pyc");
    std::os::unix::fs::symlink("main.py", p.join("link.py")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", p.join("dangling")).unwrap();

    let (mut ws, _) = fx.create(Mode::Copy, &p);
    let rec = ws.record().clone();
    let root = &rec.root;
    assert!(!root.starts_with(&p));
    let files = tree_files(root);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            ".env.example",
            ".gitignore",
            ".ignore",
            ".modix/.gitignore",
            ".modix/settings.toml",
            "dangling",
            "link.py",
            "main.py",
            "run.sh",
            "sub/.gitignore",
            "sub/code.py",
            "target/keep.txt",
            "vendor/lib/lib.py",
        ]
    );
    assert!(
        std::fs::symlink_metadata(root.join("link.py"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(root.join("link.py")).unwrap(),
        Path::new("main.py")
    );
    assert_ne!(
        std::fs::metadata(root.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0
    );
    // A repository of its own, kept outside the copy (`.git` is a link).
    assert!(root.join(".git").is_file());
    assert_eq!(
        rec.git_dir.as_deref(),
        Some(rec.state_dir.join("git").as_path())
    );
    assert!(rec.state_dir.join("git/HEAD").is_file());
    assert!(!root.join("vendor/lib/.git").exists());
    assert!(
        !root
            .with_file_name(format!("{}.partial", rec.short_id))
            .exists()
    );
    assert!(
        !p.join(".git").exists(),
        "nothing created in the user's folder"
    );
    // Baseline: one commit with everything copied; the copy is clean.
    assert_eq!(sh(root, &["rev-list", "--count", "HEAD"]), "1");
    assert_eq!(sh(root, &["status", "--porcelain"]), "");
    assert_eq!(
        sh(root, &["ls-tree", "HEAD", "run.sh"]).split(' ').next(),
        Some("100755")
    );
    // Same tracking as a worktree.
    write(root, "main.py", "print(2)\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert_eq!(change(&s, "main.py").status, ChangeStatus::Modified);
}

// ---------------------------------------------------------------- in place

#[test]
fn in_place_is_locked_refuses_dirty_trees_and_never_touches_index_or_branch() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    write(&repo, "README.md", "dirty\n");
    let err = Workspace::create(&fx.git, &fx.opts(Mode::InPlace, &repo)).unwrap_err();
    match &err {
        WorkspaceError::Dirty { paths } => assert_eq!(paths, &["README.md"]),
        other => panic!("expected Dirty, got {other:?}"),
    }
    assert!(
        err.to_string().contains("1 file: README.md") && err.to_string().contains("--allow-dirty"),
        "{err}"
    );
    sh(&repo, &["checkout", "README.md"]);

    let o = fx.opts(Mode::InPlace, &repo);
    let (mut ws, _) = Workspace::create(&fx.git, &o).unwrap();
    let head = sh(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(
        ws.base_commit(),
        head,
        "a clean tree starts from HEAD itself"
    );
    assert_eq!(ws.workdir(), repo);

    // A second run on the same tree is refused, naming the first.
    let other = fx.opts(Mode::InPlace, &repo);
    let err = Workspace::create(&fx.git, &other).unwrap_err();
    match &err {
        WorkspaceError::Locked { run_id, pid, .. } => {
            assert_eq!(run_id, &o.run_id);
            assert_eq!(pid, &std::process::id().to_string());
        }
        other => panic!("expected Locked, got {other:?}"),
    }

    let index_before = std::fs::read(repo.join(".git/index")).unwrap();
    write(&repo, "src/app.py", "changed in place\n");
    write(&repo, "src/added.py", "a = 1\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert_eq!(s.changes.len(), 2);
    let run_ref = format!("refs/modix/runs/{}/head", ws.record().short_id);
    assert_eq!(ws.record().run_ref, run_ref);
    assert_eq!(sh(&repo, &["rev-parse", &run_ref]), s.commit);
    assert_eq!(sh(&repo, &["rev-parse", "HEAD"]), head);
    assert_eq!(
        std::fs::read(repo.join(".git/index")).unwrap(),
        index_before
    );
    assert_eq!(sh(&repo, &["diff", "--cached"]), "");

    ws.reject(1, &s.commit, &s.parent).unwrap();
    assert_eq!(read(&repo, "src/app.py"), "def f():\n    return 1\n");
    assert!(!repo.join("src/added.py").exists());
    assert_eq!(sh(&repo, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read(repo.join(".git/index")).unwrap(),
        index_before
    );

    drop(ws);
    let (_ws2, _) = Workspace::create(&fx.git, &other).unwrap();
}

#[test]
fn in_place_allow_dirty_starts_from_the_dirty_tree() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    write(&repo, "README.md", "dirty\n");
    let mut o = fx.opts(Mode::InPlace, &repo);
    o.allow_dirty = true;
    let (mut ws, notes) = Workspace::create(&fx.git, &o).unwrap();
    assert!(!notes.is_empty());
    assert_ne!(ws.base_commit(), sh(&repo, &["rev-parse", "HEAD"]));
    write(&repo, "new.txt", "n\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    assert_eq!(
        s.changes.len(),
        1,
        "the user's dirty change is not the agent's: {:?}",
        s.changes
    );
    ws.reject(1, &s.commit, &s.parent).unwrap();
    assert_eq!(
        read(&repo, "README.md"),
        "dirty\n",
        "rejecting never goes behind the user's own changes"
    );
}

#[test]
fn in_place_in_a_monorepo_tracks_only_the_project_folder() {
    let fx = Fixture::new();
    let repo = fx.repo("mono");
    write(&repo, "apps/api/main.py", "m = 1\n");
    sh(&repo, &["add", "-A"]);
    sh(&repo, &["commit", "-q", "-m", "api"]);
    let (mut ws, _) = fx.create(Mode::InPlace, &repo.join("apps/api"));
    assert_eq!(ws.record().scope, "apps/api/");
    write(&repo, "apps/api/main.py", "m = 2\n");
    write(
        &repo,
        "README.md",
        "someone else's edit elsewhere in the repo\n",
    );
    let s = ws.settle(1, "execute", 1).unwrap();
    let paths: Vec<&str> = s.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["apps/api/main.py"]);
    ws.reject(1, &s.commit, &s.parent).unwrap();
    assert_eq!(read(&repo, "apps/api/main.py"), "m = 1\n");
    assert_eq!(
        read(&repo, "README.md"),
        "someone else's edit elsewhere in the repo\n"
    );
}

#[test]
fn in_place_without_git_uses_a_git_dir_of_its_own() {
    let fx = Fixture::new();
    let p = fx.projects.join("plain");
    write(&p, "a.txt", "a\n");
    write(&p, ".gitignore", "out/\n");
    let (mut ws, _) = fx.create(Mode::InPlace, &p);
    assert!(!p.join(".git").exists());
    let gd = ws.record().git_dir.clone().unwrap();
    assert!(gd.starts_with(&fx.home));
    write(&p, "a.txt", "b\n");
    write(&p, "out/x", "ignored\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    let paths: Vec<&str> = s.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["a.txt"]);
    ws.reject(1, &s.commit, &s.parent).unwrap();
    assert_eq!(read(&p, "a.txt"), "a\n");
    assert!(p.join("out/x").exists());
    assert!(!p.join(".git").exists());
}

// ---------------------------------------------------------------- apply, diff, prune

/// A worktree run that changed src/app.py, added src/feature.py, removed
/// src/data.txt; returns the record.
fn finished_run(fx: &Fixture, repo: &Path) -> WorkspaceRecord {
    let (mut ws, _) = fx.create(Mode::Worktree, repo);
    let root = ws.record().root.clone();
    write(&root, "src/app.py", "def f():\n    return 2\n");
    write(&root, "src/feature.py", "def g():\n    return 3\n");
    ws.settle(1, "execute", 1).unwrap();
    std::fs::remove_file(root.join("src/data.txt")).unwrap();
    ws.settle(2, "execute", 1).unwrap();
    ws.record().clone()
}

#[test]
fn apply_squash_lands_one_commit_on_the_users_branch() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let rec = finished_run(&fx, &repo);
    // The user went on meanwhile, without touching the same lines.
    write(&repo, "README.md", "# demo\nmore\n");
    sh(&repo, &["commit", "-q", "-am", "user work"]);
    let user_head = sh(&repo, &["rev-parse", "HEAD"]);

    let a = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap();
    let c = a.commit.clone().unwrap();
    assert_eq!(a.branch.as_deref(), Some("main"));
    assert_eq!(sh(&repo, &["rev-parse", "HEAD"]), c);
    assert_eq!(sh(&repo, &["rev-parse", "HEAD^"]), user_head);
    assert_eq!(
        sh(&repo, &["rev-list", "--parents", "-1", "HEAD"])
            .split(' ')
            .count(),
        2,
        "one parent"
    );
    assert!(
        sh(&repo, &["log", "-1", "--format=%B"]).contains(&format!("Modix-Run: {}", rec.run_id))
    );
    assert_eq!(read(&repo, "src/app.py"), "def f():\n    return 2\n");
    assert_eq!(read(&repo, "src/feature.py"), "def g():\n    return 3\n");
    assert!(!repo.join("src/data.txt").exists());
    assert_eq!(read(&repo, "README.md"), "# demo\nmore\n");
    assert_eq!(sh(&repo, &["status", "--porcelain"]), "");
    // Applying again changes nothing.
    let again = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap();
    assert!(again.commit.is_none(), "{again:?}");
}

#[test]
fn apply_merge_makes_a_no_ff_merge_of_the_run_branch() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let rec = finished_run(&fx, &repo);
    let user_head = sh(&repo, &["rev-parse", "HEAD"]);
    let a = apply(
        &fx.git,
        &rec,
        ApplyStrategy::Merge,
        Some("Merge the feature"),
    )
    .unwrap();
    let parents = sh(&repo, &["rev-list", "--parents", "-1", "HEAD"]);
    assert_eq!(
        parents,
        format!("{} {} {}", a.commit.unwrap(), user_head, rec.last_commit)
    );
    assert!(sh(&repo, &["log", "-1", "--format=%s"]).starts_with("Merge the feature"));
    assert_eq!(read(&repo, "src/feature.py"), "def g():\n    return 3\n");
    assert_eq!(sh(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn an_apply_conflict_changes_nothing_and_names_the_files() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let rec = finished_run(&fx, &repo);
    write(&repo, "src/app.py", "def f():\n    return 'user'\n");
    sh(&repo, &["commit", "-q", "-am", "user edits the same line"]);
    write(&repo, "untracked.txt", "mine\n");
    write(&repo, "debug.log", "ignored\n");
    let before = user_state(&repo);
    for strategy in [ApplyStrategy::Squash, ApplyStrategy::Merge] {
        let err = apply(&fx.git, &rec, strategy, None).unwrap_err();
        match &err {
            WorkspaceError::Conflict { paths, .. } => assert_eq!(paths, &["src/app.py"]),
            other => panic!("expected Conflict, got {other:?}"),
        }
        assert!(err.to_string().contains("src/app.py"), "{err}");
        assert_eq!(user_state(&repo), before);
    }
}

#[test]
fn apply_refuses_a_dirty_checkout_and_untracked_files_in_the_way() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let rec = finished_run(&fx, &repo);
    write(&repo, "README.md", "uncommitted\n");
    let err = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap_err();
    assert!(
        matches!(&err, WorkspaceError::DirtyTarget { paths } if paths == &["README.md"]),
        "{err:?}"
    );
    sh(&repo, &["checkout", "README.md"]);
    // A merge in progress with a clean tree: still refused.
    let head = sh(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join(".git/MERGE_HEAD"), format!("{head}\n")).unwrap();
    let err = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap_err();
    assert!(err.to_string().contains("MERGE_HEAD"), "{err}");
    std::fs::remove_file(repo.join(".git/MERGE_HEAD")).unwrap();
    write(&repo, "src/feature.py", "the user's own file\n");
    let before = user_state(&repo);
    let err = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap_err();
    assert!(
        matches!(&err, WorkspaceError::UntrackedInTheWay { paths } if paths == &["src/feature.py"]),
        "{err:?}"
    );
    assert_eq!(user_state(&repo), before);
}

#[test]
fn copy_apply_writes_back_and_refuses_when_the_original_changed() {
    let fx = Fixture::new();
    let p = fx.projects.join("plain");
    write(&p, "a.txt", "a\n");
    write(&p, "b.txt", "b\n");
    write(&p, "gone.txt", "bye\n");
    write(&p, "tool.sh", "#!/bin/sh\n");
    let (mut ws, _) = fx.create(Mode::Copy, &p);
    let root = ws.record().root.clone();
    write(&root, "a.txt", "a, by the agent\n");
    write(&root, "dir/new.txt", "new\n");
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::set_permissions(root.join("tool.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    ws.settle(1, "execute", 1).unwrap();
    let rec = ws.record().clone();
    drop(ws);

    // The user edited a.txt meanwhile: refused, nothing written.
    write(&p, "a.txt", "a, by the user\n");
    let before = tree_files(&p);
    let err = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap_err();
    match &err {
        WorkspaceError::OriginalChanged { paths, .. } => assert_eq!(paths, &["a.txt"]),
        other => panic!("expected OriginalChanged, got {other:?}"),
    }
    assert_eq!(tree_files(&p), before);
    assert!(matches!(
        apply(&fx.git, &rec, ApplyStrategy::Merge, None),
        Err(WorkspaceError::Unsupported { .. })
    ));

    write(&p, "a.txt", "a\n");
    let a = apply(&fx.git, &rec, ApplyStrategy::Squash, None).unwrap();
    assert_eq!(a.paths.len(), 5, "{:?}", a.paths);
    assert_eq!(read(&p, "a.txt"), "a, by the agent\n");
    assert_eq!(read(&p, "dir/new.txt"), "new\n");
    assert!(!p.join("gone.txt").exists());
    assert_ne!(
        std::fs::metadata(p.join("tool.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0
    );
    assert_eq!(
        std::fs::read_link(p.join("link")).unwrap(),
        Path::new("a.txt")
    );
    assert_eq!(read(&p, "b.txt"), "b\n");
    assert!(!p.join(".git").exists());
}

#[test]
fn diff_runs_git_diff_for_the_run_and_a_step() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let rec = finished_run(&fx, &repo);
    assert!(
        diff(&fx.git, &rec, &DiffRange::Run, (true, false), &|l| l
            .to_owned())
        .unwrap()
        .success()
    );
    let step = DiffRange::Step {
        parent: rec.base_commit.clone(),
        commit: rec.last_commit.clone(),
    };
    assert!(
        diff(&fx.git, &rec, &step, (false, false), &|l| l.to_owned())
            .unwrap()
            .success()
    );
}

#[test]
fn prune_removes_the_worktree_and_optionally_the_refs() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (mut ws, _) = fx.create(Mode::Worktree, &repo);
    let root = ws.record().root.clone();
    write(&root, "x.txt", "x\n");
    let s = ws.settle(1, "execute", 1).unwrap();
    ws.reject(1, &s.commit, &s.parent).unwrap();
    let rec = ws.record().clone();
    drop(ws);

    let kept = prune(&fx.git, &rec, false).unwrap();
    assert!(kept.removed.contains(&rec.root) && kept.refs_deleted.is_empty());
    assert!(!rec.root.exists() && !rec.state_dir.exists());
    assert_eq!(
        sh(&repo, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert_eq!(sh(&repo, &["rev-parse", &rec.run_ref]), rec.last_commit);
    // diff still works from the user's repository once the worktree is gone.
    assert!(
        diff(&fx.git, &rec, &DiffRange::Run, (true, false), &|l| l
            .to_owned())
        .unwrap()
        .success()
    );

    let gone = prune(&fx.git, &rec, true).unwrap();
    assert_eq!(gone.refs_deleted.len(), 2, "{:?}", gone.refs_deleted);
    assert_eq!(
        sh(&repo, &["for-each-ref", "refs/modix/", "refs/heads/modix/"]),
        ""
    );
}

#[test]
fn prune_removes_copies() {
    let fx = Fixture::new();
    let p = fx.projects.join("plain");
    write(&p, "a.txt", "a\n");
    let (ws, _) = fx.create(Mode::Copy, &p);
    let rec = ws.record().clone();
    drop(ws);
    prune(&fx.git, &rec, true).unwrap();
    assert!(!rec.root.exists() && !rec.state_dir.exists());
    assert_eq!(read(&p, "a.txt"), "a\n");
}

#[test]
fn records_round_trip_through_json() {
    let fx = Fixture::new();
    let repo = fx.repo("app");
    let (ws, _) = fx.create(Mode::Worktree, &repo);
    let json = serde_json::to_string(ws.record()).unwrap();
    assert!(json.contains("\"mode\":\"worktree\""), "{json}");
    let back: WorkspaceRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, ws.record());
}

#[test]
fn short_ids_are_stable_and_safe_in_ref_names() {
    assert_eq!(short_id("01HQ3X7Z9KABCDEFGHJKMNPQRS"), "jkmnpqrs");
    let odd = short_id("a/b c");
    assert_eq!(odd.len(), 8);
    assert!(odd.chars().all(|c| c.is_ascii_hexdigit()), "{odd}");
    assert_eq!(odd, short_id("a/b c"));
}

// ---------------------------------------------------------------- measurements

/// Prints what the fast path costs next to one git process (medians). Not
/// an assertion: run with
/// `cargo test --release --lib workspace::tests::measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_fast_path_against_a_git_spawn() {
    fn median(mut v: Vec<std::time::Duration>) -> std::time::Duration {
        v.sort();
        v[v.len() / 2]
    }
    fn time<T>(f: impl FnOnce() -> T) -> (std::time::Duration, T) {
        let t = std::time::Instant::now();
        let r = f();
        (t.elapsed(), r)
    }
    for files in [100usize, 1_000, 10_000] {
        let fx = Fixture::new();
        let repo = fx.repo("big");
        for i in 0..files {
            write(
                &repo,
                &format!("src/d{}/f{i}.txt", i % 50),
                &format!("file {i}\n"),
            );
        }
        sh(&repo, &["add", "-A"]);
        sh(&repo, &["commit", "-q", "-m", "many"]);
        let (mut ws, _) = fx.create(Mode::Worktree, &repo);
        let root = ws.record().root.clone();
        std::thread::sleep(std::time::Duration::from_millis(100));
        ws.settle(0, "warm", 1).unwrap();
        let fast = median(
            (1..=31)
                .map(|i| {
                    let (d, s) = time(|| ws.settle(i, "m", 1).unwrap());
                    assert!(s.fast_path);
                    d
                })
                .collect(),
        );
        let spawn = median(
            (0..31)
                .map(|_| time(|| fx.git.cmd(&root).args(["rev-parse", "HEAD"]).run().unwrap()).0)
                .collect(),
        );
        let slow = median(
            (0..7)
                .map(|i| {
                    write(&root, "src/d0/f0.txt", &format!("changed {i}\n"));
                    let (d, s) = time(|| ws.settle(100 + i, "m", 1).unwrap());
                    assert!(!s.empty);
                    std::thread::sleep(std::time::Duration::from_millis(60));
                    ws.settle(200 + i, "m", 1).unwrap();
                    d
                })
                .collect(),
        );
        println!(
            "{files:>6} files ({} paths watched): fast-path settle {fast:>9.2?}   one git spawn {spawn:>9.2?}   settle recording a change {slow:>9.2?}",
            ws.plan.len()
        );
    }
}

#[test]
fn orphans_are_only_this_projects_unrecorded_and_unused_workspaces() {
    let fx = Fixture::new();
    let repo = fx.repo("mono");
    write(&repo, "apps/a/a.txt", "a\n");
    write(&repo, "apps/b/b.txt", "b\n");
    sh(&repo, &["add", "-A"]);
    sh(&repo, &["commit", "-q", "-m", "apps"]);
    let (a, b) = (repo.join("apps/a"), repo.join("apps/b"));
    // Two projects in one repository share its workspace folder.
    let record = |mode| fx.create(mode, &a).0.record().clone();
    let (recorded, dead, copy) = (
        record(Mode::Worktree),
        record(Mode::Worktree),
        record(Mode::Copy),
    );
    let other = fx.create(Mode::Worktree, &b).0.record().clone();
    // In use (its lock held) while the others' makers are gone.
    let (live_ws, _) = fx.create(Mode::Worktree, &a);
    let live = live_ws.record().clone();
    let runs: HashSet<String> = [recorded.run_id.clone()].into();
    let removed = prune_orphans(&fx.git, &fx.home, &a, Vec::new(), &runs).unwrap();
    let mut ids: Vec<&str> = removed.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort();
    let mut want = [dead.run_id.as_str(), copy.run_id.as_str()];
    want.sort();
    assert_eq!(ids, want);
    assert!(!dead.root.exists() && !dead.state_dir.exists() && !copy.root.exists());
    for kept in [&recorded, &live, &other] {
        assert!(kept.root.is_dir(), "{}", kept.root.display());
    }
    let branches = sh(&repo, &["branch", "--format=%(refname:short)"]);
    assert!(
        !branches.contains(&format!("modix/{}", dead.short_id)),
        "{branches}"
    );
    assert!(
        branches.contains(&format!("modix/{}", other.short_id)),
        "{branches}"
    );
}

#[test]
fn a_workspace_folder_never_starts_with_a_dash_or_a_dot() {
    use super::create::project_key;
    for (tree, starts) in [
        ("/tmp/ünï proj", "n--proj-"),
        ("/tmp/-rf", "rf-"),
        ("/tmp/.hidden", "hidden-"),
        ("/tmp/ü", "project-"),
        ("/tmp/my-app", "my-app-"),
    ] {
        let key = project_key(Path::new(tree));
        assert!(key.starts_with(starts), "{tree}: {key}");
    }
}
