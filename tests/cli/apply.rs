//! `modix apply` through the binary, on real git repositories made here:
//! the commit on the user's branch carries the run's trailers once.

use std::path::Path;
use std::process::Command;

use crate::scenarios;
use crate::util::{Sandbox, output_text};

/// `git ARGS` in `dir` with a fixed identity and no user config; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn modix(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    sb.modix().args(args).output().unwrap()
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
