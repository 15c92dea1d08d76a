//! `modix apply` through the binary, on real git repositories and folders
//! made here: a run that changes a path's type (folder ↔ file, symlink ↔
//! file) lands as git would land it, in a checkout and in a copy's folder;
//! what stands in its way is named and nothing is touched; a second apply
//! says the changes are already there; the commit on the user's branch is
//! the user's, with the run's trailers once.

use std::path::Path;

use crate::scenarios;
use crate::scenarios::{git, modix};
use crate::util::{Sandbox, output_text};

/// The example project with a folder `d/`, a file `e`, a symlink `l` and a
/// file `s`, and an executor that turns `d/` into a file, `e` into a folder,
/// the symlink `l` into a file, the file `s` into a symlink, and adds
/// `n/new.txt`. In a git repository (all committed) when `git_repo`.
fn type_changing_project(git_repo: bool) -> Sandbox {
    let sb = Sandbox::example();
    let root = sb.root();
    sb.write("d/f", "in a folder\n");
    sb.write("e", "a file\n");
    sb.write("s", "a file\n");
    std::os::unix::fs::symlink("calc.py", root.join("l")).unwrap();
    sb.write(".gitignore", "*.pyc\n");
    sb.agent_script(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    echo '{"title":"t","summary":"s","complexity":"low","tasks":[{"id":"T1","title":"types","files":["d","d/**","e","e/**","l","s","n/**"],"acceptance":["ok"]}]}'
    ;;
  *)
    rm -r d && echo "now a file" > d
    rm e && mkdir e && echo inside > e/f
    rm l && echo plain > l
    rm s && ln -s calc.py s
    mkdir n && echo new > n/new.txt
    echo '{"outcome":"success","summary":"types","files_changed":["d","e/f","l","s","n/new.txt"],"error":null}'
    ;;
esac
"#,
    );
    scenarios::passing_tester(&sb);
    if git_repo {
        git(&root, &["init", "-q"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "base"]);
    }
    sb
}

/// The run's type changes, as the folder at `root` must show them.
fn assert_types_changed(root: &Path) {
    assert_eq!(
        std::fs::read_to_string(root.join("d")).unwrap(),
        "now a file\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("e/f")).unwrap(),
        "inside\n"
    );
    let l = root.join("l").symlink_metadata().unwrap();
    assert!(l.file_type().is_file(), "l is a plain file now");
    assert_eq!(std::fs::read_to_string(root.join("l")).unwrap(), "plain\n");
    assert_eq!(
        std::fs::read_link(root.join("s")).unwrap(),
        Path::new("calc.py")
    );
    assert_eq!(
        std::fs::read_to_string(root.join("n/new.txt")).unwrap(),
        "new\n"
    );
}

/// HEAD, the index's bytes and `git status` of the checkout.
fn checkout_state(root: &Path) -> (String, Vec<u8>, String) {
    (
        git(root, &["rev-parse", "HEAD"]),
        std::fs::read(root.join(".git/index")).unwrap(),
        git(root, &["status", "--porcelain", "--ignored", "-uall"]),
    )
}

#[test]
fn a_run_changing_types_applies_to_a_checkout_and_what_is_in_its_way_is_named() {
    let sb = type_changing_project(true);
    let root = sb.root();
    let r = sb.go_json("change types");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();

    // A tracked edit of the user's: refused, the count in the singular.
    sb.write("calc.py", &format!("{}# mine\n", sb.read("calc.py")));
    let out = modix(&sb, &["apply", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: your checkout has uncommitted changes to tracked files (1 file: calc.py); commit or stash them before applying\n"
    );
    git(&root, &["checkout", "-q", "--", "calc.py"]);

    // Untracked and ignored files in the folder the run replaces by a file,
    // and a file where it makes a folder: named, nothing changed.
    sb.write("d/mine.txt", "mine\n");
    sb.write("d/cache.pyc", "ignored, but still mine\n");
    sb.write("n", "a file of mine\n");
    let before = checkout_state(&root);
    let out = modix(&sb, &["apply", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: untracked files in your checkout would be overwritten or removed by the run's result (3 files: d/cache.pyc, d/mine.txt, n); move them away first; nothing was changed\n"
    );
    assert_eq!(checkout_state(&root), before);
    assert_eq!(sb.read("d/f"), "in a folder\n");

    // Out of the way: it lands as git would land it.
    for p in ["d/mine.txt", "d/cache.pyc", "n"] {
        std::fs::remove_file(root.join(p)).unwrap();
    }
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_types_changed(&root);
    assert_eq!(git(&root, &["status", "--porcelain"]), "");
    let short = &run[run.len() - 8..];
    assert_eq!(
        git(&root, &["rev-parse", "HEAD^{tree}"]),
        git(
            &root,
            &[
                "rev-parse",
                &format!("modix/{}^{{tree}}", short.to_lowercase())
            ]
        )
    );

    // A second time: already there, nothing changed, exit 0.
    let head = git(&root, &["rev-parse", "HEAD"]);
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "Nothing to apply: run {run}'s changes are already on branch main; nothing was changed.\n"
        )
    );
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head);
    let out = modix(&sb, &["apply", "last", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["applied"]["nothing"], "already_applied", "{v}");
}

#[test]
fn a_copy_run_changing_types_writes_back_and_what_is_in_its_way_is_named() {
    let sb = type_changing_project(false);
    let root = sb.root();
    let r = sb.go_json("change types");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();

    // Made since the run started, where its result goes: named, nothing
    // written.
    sb.write("d/mine.txt", "mine\n");
    sb.write("n", "a file of mine\n");
    let out = modix(&sb, &["apply", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: files in {} stand where the run's result puts a path (the run did not start from them: made since, or ignored and not copied), and writing it back would overwrite or remove them (2 files: d/mine.txt, n); move them away first; nothing was written\n",
            root.display()
        )
    );
    assert_eq!(sb.read("d/f"), "in a folder\n");
    assert_eq!(sb.read("e"), "a file\n");
    assert!(root.join("l").symlink_metadata().unwrap().is_symlink());

    std::fs::remove_file(root.join("d/mine.txt")).unwrap();
    std::fs::remove_file(root.join("n")).unwrap();
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_types_changed(&root);

    // A second time: already there (not "your edits"), exit 0.
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "Nothing to apply: run {run}'s changes are already in {}; nothing was changed.\n",
            root.display()
        )
    );
    // A real edit since is still refused, in the singular.
    sb.write("e/f", "edited\n");
    let out = modix(&sb, &["apply", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("would lose your edits (1 file: e/f)"),
        "{}",
        output_text(&out)
    );
}

/// The example in a git repository, with an executor that fixes `mean()`,
/// all committed; the run has ended. Its id.
fn applied_later(sb: &Sandbox) -> String {
    let root = sb.root();
    scenarios::passing_tester(sb);
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let r = sb.go_json("Fix mean() in calc.py");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    r.run_id()
}

#[test]
fn the_applied_commit_carries_the_runs_trailers_once_after_either_message() {
    let sb = Sandbox::example();
    let root = sb.root();
    let run = applied_later(&sb);
    let base = git(&root, &["rev-parse", "HEAD"]);
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let msg = git(&root, &["log", "-1", "--format=%B"]);
    let run_head = git(
        &root,
        &[
            "rev-parse",
            &format!("modix/{}", run[run.len() - 8..].to_lowercase()),
        ],
    );
    assert_eq!(
        msg,
        format!(
            "Fix mean() in calc.py\n\nApplied from modix run {run} (succeeded).\n\nModix-Run: {run}\nModix-Base: {}\nModix-Head: {}\n\n",
            base.trim(),
            run_head.trim()
        )
    );
    let trailers = git(
        &root,
        &["log", "-1", "--format=%(trailers:key=Modix-Run,valueonly)"],
    );
    assert_eq!(trailers, format!("{run}\n\n"));

    // The user's message, with blank lines after it, gets them once too.
    git(&root, &["reset", "-q", "--hard", "HEAD~1"]);
    let out = modix(&sb, &["apply", "last", "-m", "Mine\n\n"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let msg = git(&root, &["log", "-1", "--format=%B"]);
    assert!(
        msg.starts_with(&format!("Mine\n\nModix-Run: {run}\n")),
        "{msg:?}"
    );
}

/// Author and committer of `rev`, `name <email>` each.
fn who(root: &Path, rev: &str) -> String {
    git(root, &["log", "-1", "--format=%an <%ae> / %cn <%ce>", rev])
}

#[test]
fn the_applied_commit_is_the_users_and_modix_only_when_git_knows_no_user() {
    let sb = Sandbox::example();
    let root = sb.root();
    let run = applied_later(&sb);
    let branch = format!("modix/{}", run[run.len() - 8..].to_lowercase());
    // The run's own commits are modix's.
    assert_eq!(
        who(&root, &branch),
        "modix <modix@localhost> / modix <modix@localhost>\n"
    );
    // Applied with `env` set; who made the commit, and what apply said.
    let apply_with = |env: &[(&str, &str)]| {
        let out = sb
            .modix()
            .args(["apply", "last"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        let by = who(&root, "HEAD");
        git(&root, &["reset", "-q", "--hard", "HEAD~1"]);
        (by, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // The global config (in the sandbox's HOME), then the repository's,
    // then the user's variables: as git itself resolves them.
    std::fs::write(
        sb.dir.path().join("home/.gitconfig"),
        "[user]\n\tname = Global User\n\temail = global@example.com\n",
    )
    .unwrap();
    let (by, text) = apply_with(&[]);
    assert_eq!(
        by,
        "Global User <global@example.com> / Global User <global@example.com>\n"
    );
    assert!(!text.contains("Note:"), "{text}");
    git(&root, &["config", "user.name", "Repo User"]);
    git(&root, &["config", "user.email", "repo@example.com"]);
    assert_eq!(
        apply_with(&[]).0,
        "Repo User <repo@example.com> / Repo User <repo@example.com>\n"
    );
    let env = [
        ("GIT_AUTHOR_NAME", "Env Author"),
        ("GIT_AUTHOR_EMAIL", "env@example.com"),
    ];
    assert_eq!(
        apply_with(&env).0,
        "Env Author <env@example.com> / Repo User <repo@example.com>\n"
    );
    // None at all (and no guessing from the host's name): modix's, and said.
    std::fs::remove_file(sb.dir.path().join("home/.gitconfig")).unwrap();
    git(&root, &["config", "--unset", "user.name"]);
    git(&root, &["config", "--unset", "user.email"]);
    git(&root, &["config", "user.useConfigOnly", "true"]);
    let (by, text) = apply_with(&[]);
    assert_eq!(by, "modix <modix@localhost> / modix <modix@localhost>\n");
    assert!(
        text.contains("  Note: git has no identity of yours here (user.name, user.email), so the commit is by modix <modix@localhost>;"),
        "{text}"
    );
}

/// `modix prune --branches` removes an ended run's workspace and branch,
/// not its commits: `diff` still shows the run's changes, and `apply`
/// brings them in from the recorded last step and says where the branch
/// went — not that "an agent or a person moved it" and to resume a run that
/// ended.
#[test]
fn a_run_whose_branch_was_pruned_still_applies_from_its_record() {
    let sb = Sandbox::example();
    let root = sb.root();
    applied_later(&sb);
    let out = modix(&sb, &["prune", "--branches", "--json"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = modix(&sb, &["apply", "last", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = v["applied"]["notes"].to_string();
    assert!(notes.contains("is gone (`modix prune --branches`"), "{v}");
    assert_eq!(v["applied"]["paths"], serde_json::json!(["calc.py"]), "{v}");
    let log = git(&root, &["log", "-1", "--format=%s"]);
    assert_eq!(log.trim(), "Fix mean() in calc.py");
}
