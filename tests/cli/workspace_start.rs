//! Whether a run's workspace can be made, asked before anything is made:
//! `validate` refuses a `worktrees` setting that cannot hold one, `init`
//! picks a mode that works, `doctor` runs the checks `go` runs (never
//! "ready" for a project `go` refuses), and `go` refuses with exit 2, a
//! clear reason and its fix, recording nothing. Real git repositories,
//! made here.

use std::path::Path;
use std::process::Command;

use crate::scenarios::{git, modix, repo};
use crate::util::{Sandbox, output_text, write_file};

fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `go` refused with exit 2 and `message` as its error, and recorded nothing.
fn go_refuses(sb: &Sandbox, args: &[&str], message: &str) {
    let mut all = vec!["go"];
    all.extend(args);
    all.push("Fix mean()");
    let out = modix(sb, &all);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!("error: {message}\n")),
        "{}",
        output_text(&out)
    );
    assert!(
        sb.runs().as_array().is_none_or(|a| a.is_empty()),
        "nothing recorded"
    );
}

/// `doctor` is not ready (exit 1) and says `message` about the workspace.
fn doctor_not_ready(sb: &Sandbox, message: &str) {
    let out = modix(sb, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("✗ {message}\n")), "{text}");
    assert!(
        text.contains(
            "Not ready: `modix go` cannot make a run's workspace — see Workspaces above."
        ),
        "{text}"
    );
}

fn set_worktrees(sb: &Sandbox, value: &str) {
    sb.edit_json(".modix/projects.json", |v| v["worktrees"] = value.into());
}

#[test]
fn a_worktrees_setting_that_cannot_hold_workspaces_is_refused_by_validate_and_go() {
    let sb = repo();
    let file = sb.dir.path().join("a-file");
    write_file(&file, "not a folder\n");
    set_worktrees(&sb, file.to_str().unwrap());
    let out = modix(&sb, &["validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "error[config::worktrees]: `worktrees` is `{}`, a file, not a folder: workspaces cannot go there (at /worktrees)",
            file.display()
        )) && err.contains("help: set it to a folder outside the project and its repository"),
        "{err}"
    );
    go_refuses(&sb, &[], "the configuration has errors, so nothing was run");

    // Inside the project, and nothing made there.
    set_worktrees(&sb, ".");
    let out = modix(&sb, &["validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let root = sb.root().canonicalize().unwrap();
    assert!(
        stderr(&out).contains(&format!(
            "`worktrees` is `.` ({}), inside {} (the project): a run's workspace must be outside the tree it is made from",
            root.display(),
            root.display()
        )),
        "{}",
        output_text(&out)
    );
    go_refuses(&sb, &[], "the configuration has errors, so nothing was run");
    assert_eq!(
        git(
            &sb.root(),
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        " M .modix/projects.json\n"
    );
}

#[test]
fn a_worktrees_setting_inside_the_repository_of_a_monorepo_project_is_refused() {
    let sb = Sandbox::new();
    let top = sb.root();
    let app = top.join("apps/app");
    crate::util::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bugfix"),
        &app,
    );
    git(&top, &["init", "-q"]);
    commit_all(&top, "base");
    let edit = |value: &str| {
        let path = app.join(".modix/projects.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["worktrees"] = value.into();
        std::fs::write(&path, v.to_string()).unwrap();
    };
    edit("../../workspaces");
    let out = modix(&sb, &["--project", "apps/app", "validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let top = top.canonicalize().unwrap();
    assert!(
        stderr(&out).contains(&format!(
            "`worktrees` is `../../workspaces` ({}/apps/app/../../workspaces), inside {} (the project's git repository)",
            top.display(),
            top.display()
        )),
        "{}",
        output_text(&out)
    );
    // Outside the repository it is fine.
    edit("../../../elsewhere");
    let out = modix(&sb, &["--project", "apps/app", "validate"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
}

#[test]
fn a_modix_home_that_is_a_file_is_said_before_anything_is_written() {
    let sb = repo();
    let file = sb.dir.path().join("home-file");
    write_file(&file, "not a folder\n");
    std::fs::remove_dir_all(sb.root().join(".modix")).unwrap();
    let out = sb
        .modix()
        .arg("init")
        .env("MODIX_HOME", &file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "error: modix's home {} (MODIX_HOME) cannot be a folder: {} is a file\n  help: point MODIX_HOME at a folder (it is made when missing), or unset it to use ~/.modix",
            file.display(),
            file.display()
        )),
        "{}",
        output_text(&out)
    );
    assert!(!sb.root().join(".modix").exists(), "nothing written");

    // go and doctor, on a project made with a good home, say the same
    // thing of the workspaces' folder in it.
    let sb = repo();
    let message = format!(
        "the workspace root in modix's home (MODIX_HOME, else ~/.modix), {}/worktrees, cannot hold workspaces: {} is a file, not a folder; point MODIX_HOME at a folder outside the project (it is made when missing), or unset it for ~/.modix",
        file.display(),
        file.display()
    );
    write_file(&file, "not a folder\n");
    let out = sb
        .modix()
        .args(["go", "Fix mean()"])
        .env("MODIX_HOME", &file)
        .env("MODIX_SKIP_READINESS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!("error: {message}\n")),
        "{}",
        output_text(&out)
    );
    let out = sb
        .modix()
        .arg("doctor")
        .env("MODIX_HOME", &file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        stdout(&out).contains(&format!("✗ {message}\n")),
        "{}",
        output_text(&out)
    );
    assert!(sb.runs().as_array().is_none_or(|a| a.is_empty()));
}

const SUBMODULES: &str = "the project uses git submodules (.gitmodules); refusing. A worktree would leave them empty and filling them needs the network; use workspace: copy (a copy of the folder, the submodules' files included) or in_place.";

/// The example in a repository with a real submodule at `vendor/lib`.
fn with_submodule() -> Sandbox {
    let sb = repo();
    let lib = sb.dir.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    git(&lib, &["init", "-q"]);
    write_file(&lib.join("lib.txt"), "lib\n");
    commit_all(&lib, "lib");
    git(
        &sb.root(),
        &[
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "vendor/lib",
        ],
    );
    commit_all(&sb.root(), "submodule");
    sb
}

#[test]
fn doctor_is_not_ready_for_a_worktree_that_go_refuses_and_init_picks_a_copy() {
    let sb = with_submodule();
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "worktree".into()
    });
    doctor_not_ready(&sb, SUBMODULES);
    go_refuses(&sb, &[], SUBMODULES);

    // init, in the same repository, writes the mode that works and says why.
    std::fs::remove_file(sb.root().join(".modix/projects.json")).unwrap();
    let out = modix(&sb, &["init"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        stdout(&out).contains("Runs work on a copy of the project (`workspace: copy` in .modix/projects.json): a branch of their own cannot hold it, as the project uses git submodules (.gitmodules)."),
        "{}",
        output_text(&out)
    );
    let project: serde_json::Value =
        serde_json::from_str(&sb.read(".modix/projects.json")).unwrap();
    assert_eq!(project["workspace"], "copy");
    let out = modix(&sb, &["doctor"]);
    assert!(
        stdout(&out)
            .contains("Workspaces: each run works in a copy with a repository of its own; git"),
        "{}",
        output_text(&out)
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn a_repository_without_commits_gets_no_mode_from_init_and_runs_on_a_copy() {
    let sb = Sandbox::example();
    git(&sb.root(), &["init", "-q"]);
    std::fs::remove_file(sb.root().join(".modix/projects.json")).unwrap();
    let out = modix(&sb, &["init"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        stdout(&out).contains("The repository has no commits yet, so projects.json leaves `workspace` out: runs work on a copy of the project until the first commit, then on a branch of their own."),
        "{}",
        output_text(&out)
    );
    let project: serde_json::Value =
        serde_json::from_str(&sb.read(".modix/projects.json")).unwrap();
    assert!(project.get("workspace").is_none(), "{project}");
    let out = modix(&sb, &["doctor"]);
    assert!(
        stdout(&out).contains(
            "Workspaces: each run works in a copy with a repository of its own (projects.json names none); git"
        ),
        "{}",
        output_text(&out)
    );
    // A worktree named anyway: doctor says what go says.
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "worktree".into()
    });
    let message = format!(
        "the repository at {} has no commits yet; commit something first or use workspace: copy",
        sb.root().canonicalize().unwrap().display()
    );
    doctor_not_ready(&sb, &message);
    go_refuses(&sb, &[], &message);
}

#[test]
fn a_new_orphan_branch_starts_from_base_and_says_so_without_it() {
    let sb = repo();
    let main = git(&sb.root(), &["rev-parse", "HEAD"]);
    git(&sb.root(), &["checkout", "-q", "--orphan", "fresh"]);
    let message = "the current branch `fresh` has no commits yet (the repository has commits on other branches); pass --base REV to start the run from one (e.g. `--base main`), or commit on `fresh` first";
    doctor_not_ready(&sb, message);
    go_refuses(&sb, &[], message);
    let out = modix(&sb, &["go", "--json", "--base", "main", "Fix mean()"]);
    let r = crate::util::GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.summary["run_id"].as_str().unwrap().to_owned();
    let record = sb.history_json(&run);
    assert_eq!(
        record["run"]["workspace"]["base_commit"].as_str(),
        Some(main.trim()),
        "{record}"
    );
}

#[test]
fn a_project_folder_the_repository_ignores_is_said_to_be_ignored() {
    let sb = Sandbox::new();
    let top = sb.root();
    write_file(&top.join("README"), "r\n");
    write_file(&top.join(".gitignore"), "newproj/\n");
    git(&top, &["init", "-q"]);
    commit_all(&top, "base");
    crate::util::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bugfix"),
        &top.join("newproj"),
    );
    // Asked for: with no setting, the run works on a copy instead.
    let projects = top.join("newproj/.modix/projects.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&projects).unwrap()).unwrap();
    v["workspace"] = "worktree".into();
    std::fs::write(&projects, v.to_string()).unwrap();
    let at = |args: &[&str]| {
        let mut all = vec!["--project", "newproj"];
        all.extend(args);
        modix(&sb, &all)
    };
    let message = "the project folder newproj/ is ignored by its repository (`newproj/` in .gitignore line 1), so no commit or snapshot of the repository can hold it; refusing. Un-ignore it (and commit it) for runs on a branch of their own, or set \"workspace\": \"copy\" in .modix/projects.json for runs on a copy of the folder.";
    for flags in [&[][..], &["--include-dirty"][..]] {
        let mut args = vec!["go"];
        args.extend(flags);
        args.push("Fix mean()");
        let out = at(&args);
        assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
        assert!(
            stderr(&out).contains(&format!("error: {message}\n")),
            "{}",
            output_text(&out)
        );
    }
    let out = at(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        stdout(&out).contains(&format!("✗ {message}\n")),
        "{}",
        output_text(&out)
    );

    // init there picks the copy that works.
    std::fs::remove_file(top.join("newproj/.modix/projects.json")).unwrap();
    let out = at(&["init"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        stdout(&out).contains("a branch of their own cannot hold it, as the project folder newproj/ is ignored by its repository"),
        "{}",
        output_text(&out)
    );
    let out = at(&["go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
}

#[test]
fn a_repository_git_refuses_for_its_owner_is_said_so_not_copied() {
    let sb = repo();
    let root = sb.root();
    // Another owner for the repository's top folder: only root can give
    // one, and only then does git refuse it.
    let chowned = std::os::unix::fs::chown(&root, Some(54321), Some(54321));
    let refused = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&root)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("dubious ownership"));
    if chowned.is_err() || !refused {
        eprintln!(
            "skipped: cannot give {} another owner git refuses (needs root): {chowned:?}",
            root.display()
        );
        return;
    }
    let path = root.canonicalize().unwrap();
    let message = format!(
        "git refuses to use the repository at {p}: it belongs to another user (git's `safe.directory` check, \"dubious ownership\"), so modix cannot read or record anything there; if you trust it, run `git config --global --add safe.directory {p}` (or change its owner to you), then try again",
        p = path.display()
    );
    doctor_not_ready(&sb, &message);
    go_refuses(&sb, &[], &message);

    std::fs::remove_file(root.join(".modix/projects.json")).unwrap();
    let out = modix(&sb, &["init"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "warning: `modix go` cannot make a run's workspace here yet: {message}"
        )),
        "{}",
        output_text(&out)
    );
    let project: serde_json::Value =
        serde_json::from_str(&sb.read(".modix/projects.json")).unwrap();
    assert_eq!(project["workspace"], "worktree");
}
