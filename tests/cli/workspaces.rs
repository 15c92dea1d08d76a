//! Workspaces through the binary, on real git repositories made here: a run
//! works on its own branch (or a copy), never touches the user's checkout,
//! has every step's changes recorded and judged, and has a way back.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::scenarios;
use crate::scenarios::{git, modix, repo};
use crate::util::{GoResult, Sandbox, make_executable, output_text, write_file};

/// What the user's repository looks like: HEAD, its branch, the index's
/// bytes, the files' bytes and `git status`.
#[derive(Debug, PartialEq)]
struct Checkout {
    head: String,
    branch: String,
    index: Vec<u8>,
    files: Vec<(String, Vec<u8>)>,
    status: String,
}

fn checkout(root: &Path) -> Checkout {
    let mut files = Vec::new();
    for name in ["calc.py", "test_calc.py", "notes.txt"] {
        if let Ok(bytes) = std::fs::read(root.join(name)) {
            files.push((name.to_owned(), bytes));
        }
    }
    Checkout {
        head: git(root, &["rev-parse", "HEAD"]),
        branch: git(root, &["symbolic-ref", "HEAD"]),
        index: std::fs::read(root.join(".git/index")).unwrap(),
        files,
        status: git(root, &["status", "--porcelain"]),
    }
}

/// The run's record as `history --json` shows it.
fn run_record(sb: &Sandbox, run: &str) -> Value {
    sb.history_json(run)
}

fn workspace(sb: &Sandbox, run: &str) -> Value {
    run_record(sb, run)["run"]["workspace"].clone()
}

fn short(sb: &Sandbox, run: &str) -> String {
    workspace(sb, run)["short_id"].as_str().unwrap().to_owned()
}

fn ws_root(sb: &Sandbox, run: &str) -> PathBuf {
    PathBuf::from(workspace(sb, run)["root"].as_str().unwrap())
}

/// The reasons of the run's transitions, one per line.
fn reasons(r: &GoResult) -> String {
    r.transitions
        .iter()
        .map(|t| {
            format!(
                "{} -{}-> {}: {}",
                t["from"].as_str().unwrap(),
                t["event"].as_str().unwrap(),
                t["to"].as_str().unwrap(),
                t["reason"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A planner whose task may change `files`, then `rest` for other states.
fn agent_with_scope(sb: &Sandbox, files: &[&str], rest: &str) {
    let files = serde_json::to_string(files).unwrap();
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"fix","files":{files},"acceptance":["tests pass"]}}]}}'
    ;;
  *)
{rest}
    ;;
esac
"#
    ));
}

/// The example's real fix of `mean()`, as a sh line.
const FIX: &str = r#"    sed 's|return sum(values) / (len(values) + 1)|return sum(values) / len(values)|' calc.py > calc.py.new && mv calc.py.new calc.py"#;
const DONE: &str = r#"    echo '{"outcome":"success","summary":"fixed","files_changed":["calc.py"],"error":null}'"#;

#[test]
fn a_run_in_a_repository_works_on_its_own_branch_and_never_touches_the_checkout() {
    let sb = repo();
    let root = sb.root();
    // Uncommitted work of the user's: a function in the file the agent edits,
    // and a staged new file.
    let mut calc = sb.read("calc.py");
    calc.push_str("\n\ndef keep_me():\n    return 42\n");
    sb.write("calc.py", &calc);
    sb.write("notes.txt", "my notes\n");
    git(&root, &["add", "notes.txt"]);
    let list = ["branch", "--list", "--format=%(refname:short)"];
    let branches = git(&root, &list);
    let before = checkout(&root);

    let r = sb.go_json("Fix mean() in calc.py");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    // The user's files, index, HEAD and branch are exactly as they were.
    assert_eq!(checkout(&root), before);
    let run = r.run_id();
    let id = short(&sb, &run);
    assert_eq!(git(&root, &list), format!("{branches}modix/{id}\n"));
    // The run said where it worked and that it left the dirty files out.
    let ws = r.events.iter().find(|e| e["type"] == "workspace").unwrap();
    assert_eq!(ws["mode"], "worktree");
    assert_eq!(ws["branch"], format!("modix/{id}"));
    assert!(
        ws["notes"][0].as_str().unwrap().contains("uncommitted"),
        "{ws}"
    );
    let workdir = PathBuf::from(ws["workdir"].as_str().unwrap());
    assert!(!workdir.starts_with(&root), "{}", workdir.display());
    // The fix is on the run's branch, step by step, with modix's trailers.
    let fixed = git(&root, &["show", &format!("modix/{id}:calc.py")]);
    assert!(
        fixed.contains("return sum(values) / len(values)"),
        "{fixed}"
    );
    assert!(!fixed.contains("keep_me"), "{fixed}");
    let log = git(&root, &["log", "--format=%B", &format!("modix/{id}")]);
    assert!(log.contains(&format!("Modix-Run: {run}")), "{log}");
    assert!(log.contains("Modix-State: EXECUTING"), "{log}");
    // The summary says what changed and how to get it.
    let changes = &r.summary["changes"];
    assert_eq!(changes["files"], 1, "{}", r.summary);
    assert_eq!(changes["branch"], format!("modix/{id}"));
    let out = modix(&sb, &["go", "-q", "Fix mean() again"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(
            |l| l.starts_with("Changes: 1 file (+1 −1) on branch modix/")
                && l.contains(" · modix diff ")
                && l.contains(" · modix apply ")
        ),
        "{text}"
    );
}

#[test]
fn include_dirty_starts_the_branch_from_the_uncommitted_changes() {
    let sb = repo();
    let mut calc = sb.read("calc.py");
    calc.push_str("\n\ndef keep_me():\n    return 42\n");
    sb.write("calc.py", &calc);
    let before = checkout(&sb.root());
    let out = modix(&sb, &["go", "--json", "--include-dirty", "Fix mean()"]);
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(checkout(&sb.root()), before);
    let id = short(&sb, &r.run_id());
    let fixed = git(&sb.root(), &["show", &format!("modix/{id}:calc.py")]);
    assert!(fixed.contains("keep_me"), "{fixed}");
    assert!(
        fixed.contains("return sum(values) / len(values)"),
        "{fixed}"
    );
}

#[test]
fn base_starts_the_run_from_another_revision_and_a_bad_one_is_refused() {
    let sb = repo();
    let root = sb.root();
    let base = git(&root, &["rev-parse", "HEAD"]).trim().to_owned();
    sb.write("later.txt", "later\n");
    git(&root, &["add", "later.txt"]);
    git(&root, &["commit", "-q", "-m", "later"]);
    let out = modix(&sb, &["go", "--json", "--base", &base[..10], "Fix mean()"]);
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let ws = workspace(&sb, &r.run_id());
    assert_eq!(ws["base_commit"], base);
    let out = modix(&sb, &["go", "--base", "no-such-branch", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown base revision `no-such-branch`"),
        "{err}"
    );
    // Nothing was recorded for the refused run.
    assert_eq!(sb.runs().as_array().unwrap().len(), 1);
}

#[test]
fn diff_and_apply_bring_the_result_back_and_a_conflict_changes_nothing() {
    let sb = repo();
    let root = sb.root();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let id = short(&sb, &r.run_id());

    let out = modix(&sb, &["diff", &id, "--stat"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let stat = String::from_utf8_lossy(&out.stdout);
    assert!(
        stat.contains("calc.py") && stat.contains("1 file changed"),
        "{stat}"
    );
    let out = modix(&sb, &["diff", "last"]);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-    return sum(values) / (len(values) + 1)"),
        "{diff}"
    );
    assert!(
        diff.contains("+    return sum(values) / len(values)"),
        "{diff}"
    );
    assert!(!diff.contains('\u{1b}'), "piped output is plain: {diff:?}");
    // One step alone: the first executor step rounded the mean.
    let out = modix(&sb, &["diff", "last", "--step", "3"]);
    let step = String::from_utf8_lossy(&out.stdout);
    assert!(step.contains("+    return round("), "{step}");
    let out = modix(&sb, &["diff", "last", "--step", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));

    // A commit of the user's on the same line: applying would conflict.
    sb.write(
        "calc.py",
        &sb.read("calc.py")
            .replace("(len(values) + 1)", "(len(values) + 2)"),
    );
    git(&root, &["commit", "-q", "-am", "mine"]);
    let before = checkout(&root);
    let out = modix(&sb, &["apply", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("conflict") && err.contains("calc.py"), "{err}");
    assert_eq!(checkout(&root), before);

    // Back to where the run started: it applies as one commit.
    git(&root, &["reset", "-q", "--hard", "HEAD~1"]);
    let out = modix(&sb, &["apply", &id]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Applied run"),
        "{}",
        output_text(&out)
    );
    assert!(
        sb.read("calc.py")
            .contains("return sum(values) / len(values)")
    );
    let msg = git(&root, &["log", "-1", "--format=%B"]);
    assert!(
        msg.contains("Fix mean()") && msg.contains("Modix-Run:"),
        "{msg}"
    );
    assert_eq!(git(&root, &["status", "--porcelain"]), "");
}

#[test]
fn apply_refuses_a_checkout_with_uncommitted_changes() {
    let sb = repo();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    sb.write(
        "test_calc.py",
        &format!("{}\n# wip\n", sb.read("test_calc.py")),
    );
    let before = checkout(&sb.root());
    let out = modix(&sb, &["apply", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("uncommitted changes"),
        "{}",
        output_text(&out)
    );
    assert_eq!(checkout(&sb.root()), before);
}

#[test]
fn a_copy_run_honours_ignore_files_keeps_target_folders_and_writes_back() {
    let sb = Sandbox::example();
    sb.write(".gitignore", "ignored/\n");
    sb.write("ignored/big.bin", "cache\n");
    sb.write("target/keep.txt", "a folder named target is the user's\n");
    sb.write("lib/node_modules/keep.js", "so is this\n");
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    let ws = workspace(&sb, &run);
    assert_eq!(ws["mode"], "copy");
    let copy = ws_root(&sb, &run);
    assert!(!copy.starts_with(sb.root()), "{}", copy.display());
    assert!(copy.join("target/keep.txt").is_file());
    assert!(copy.join("lib/node_modules/keep.js").is_file());
    assert!(!copy.join("ignored").exists());
    // The copy has a repository of its own: git run there by an agent
    // cannot reach anything of the user's.
    assert!(copy.join(".git").exists());
    // The user's folder is as it was until they apply.
    assert!(sb.read("calc.py").contains("(len(values) + 1)"));
    let out = modix(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        sb.read("calc.py")
            .contains("return sum(values) / len(values)")
    );
    assert_eq!(
        sb.read("target/keep.txt"),
        "a folder named target is the user's\n"
    );
}

#[test]
fn a_change_outside_the_task_is_rejected_taken_off_and_named_to_the_next_attempt() {
    let sb = repo();
    agent_with_scope(
        &sb,
        &["calc.py"],
        &format!(
            r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then echo 'x = 1' > extra.py; fi
{FIX}
{DONE}"#
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    let text = reasons(&r);
    assert!(
        text.contains("EXECUTING -execution_rejected-> EXECUTING: rejected: changed 1 file outside its task's scope: extra.py"),
        "{text}"
    );
    // Said once, not once as the reason and again as what the step did.
    assert_eq!(
        text.matches("outside its task's scope").count(),
        1,
        "{text}"
    );
    let run = r.run_id();
    let id = short(&sb, &run);
    // The rejected step is kept for audit, not on the branch.
    let kept = git(
        &sb.root(),
        &["for-each-ref", "--format=%(refname)", "refs/modix/"],
    );
    assert!(
        kept.contains(&format!("refs/modix/runs/{id}/rejected/3")),
        "{kept}"
    );
    let tree = git(
        &sb.root(),
        &["ls-tree", "--name-only", &format!("modix/{id}")],
    );
    assert!(!tree.contains("extra.py"), "{tree}");
    assert!(!ws_root(&sb, &run).join("extra.py").exists());
    // The next attempt was told which path and what it may change.
    let inv = sb.invocation(&run, 3);
    let feedback = inv["context"]["feedback"].as_str().unwrap_or_default();
    assert!(
        feedback.contains("extra.py") && feedback.contains("Change only these paths: calc.py"),
        "{}",
        inv["context"]
    );
    // The record of the rejected step says what git saw.
    let inv = sb.invocation(&run, 2);
    assert_eq!(inv["changes"]["rejected"]["paths"][0], "extra.py");
}

#[test]
fn a_test_file_changed_by_the_executor_is_rejected_even_when_the_task_lists_it() {
    let sb = repo();
    agent_with_scope(
        &sb,
        &["calc.py", "test_calc.py"],
        &format!(
            r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then printf 'import unittest\n' > test_calc.py; fi
{FIX}
{DONE}"#
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    let text = reasons(&r);
    assert!(
        text.contains("rejected: changed protected path test_calc.py"),
        "{text}"
    );
    let id = short(&sb, &r.run_id());
    let tests = git(&sb.root(), &["show", &format!("modix/{id}:test_calc.py")]);
    assert_eq!(tests, sb.read("test_calc.py"));
    // The next attempt was told to leave the tests alone.
    let inv = sb.invocation(&r.run_id(), 3);
    let feedback = inv["context"]["feedback"].as_str().unwrap_or_default();
    assert!(
        feedback.contains("Fix the code, not the tests"),
        "{feedback}"
    );
}

#[test]
fn a_manifest_may_allow_protected_paths() {
    let sb = repo();
    agent_with_scope(
        &sb,
        &["calc.py", "test_calc.py"],
        &format!("    echo '# more tests' >> test_calc.py\n{FIX}\n{DONE}"),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["executor"]["manifest"]["permissions"]["protected"] = true.into();
    });
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    assert!(!reasons(&r).contains("rejected"), "{}", reasons(&r));
}

#[test]
fn a_read_only_planner_that_writes_a_file_is_rejected() {
    let sb = repo();
    sb.agent_script(
        r#"#!/bin/sh
cat > /dev/null
echo 'my plan' > PLAN.md
echo '{"title":"t","summary":"s","complexity":"low","tasks":[{"id":"T1","title":"fix","files":["calc.py"],"acceptance":["ok"]}]}'
"#,
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let text = reasons(&r);
    assert!(
        text.contains("PLANNING -task_spec_invalid-> FAILED: rejected: agent `planner` may not change files (its manifest says `write_files: false`), but it changed PLAN.md"),
        "{text}"
    );
    assert!(!ws_root(&sb, &r.run_id()).join("PLAN.md").exists());
}

#[test]
fn a_tester_that_changes_the_tree_never_reaches_done() {
    let sb = repo();
    scenarios::agent(&sb, &format!("    echo '# touched' >> calc.py\n{DONE}"));
    // A "tester" that fixes the code itself and then says the tests pass.
    let tester = sb.root().join("agents/tester");
    write_file(
        &tester,
        "#!/bin/sh\nsed -i 's|(len(values) + 1)|len(values)|' calc.py\nexit 0\n",
    );
    make_executable(&tester);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["agents/tester"]);
        // Even one allowed to write may not change what it judges.
        v["agents"]["tester"]["manifest"]["permissions"] = serde_json::json!({"write_files": true});
    });
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let text = reasons(&r);
    assert!(!text.contains("-> DONE"), "{text}");
    assert!(
        text.contains("rejected: the tree changed during a step whose result would end the run"),
        "{text}"
    );
}

/// A tester that changes `calc.py` by `how` (a Python snippet given `f`, the
/// file's path) without changing its size, then sets its mtime back.
fn hidden_edit_tester(sb: &Sandbox, how: &str) {
    let tester = sb.root().join("agents/tester");
    write_file(
        &tester,
        &format!(
            r#"#!/bin/sh
python3 - <<'EOF'
import mmap, os
f = "calc.py"
st = os.stat(f)
{how}
os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
EOF
exit 0
"#
        ),
    );
    make_executable(&tester);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["agents/tester"]);
        v["agents"]["tester"]["manifest"]["permissions"] = serde_json::json!({"write_files": true});
    });
}

#[test]
fn a_tester_that_hides_its_edit_from_the_stats_is_still_caught() {
    // Through a shared mapping (no write call at all), and through a hard
    // link outside the tree, each with the size and mtime as they were.
    let mapped = r#"with open(f, "r+b") as fd:
    m = mmap.mmap(fd.fileno(), 0)
    i = m.find(b"len(values)")
    m[i:i + 11] = b"len(valuez)"
    m.close()"#;
    let linked = r#"outside = os.path.join(os.environ["TMPDIR"], "calc-link")
os.link(f, outside)
with open(outside, "r+b") as fd:
    text = fd.read()
    fd.seek(0)
    fd.write(text.replace(b"len(values)", b"len(valuez)"))
os.utime(outside, ns=(st.st_atime_ns, st.st_mtime_ns))
os.unlink(outside)"#;
    for how in [mapped, linked] {
        let sb = repo();
        scenarios::agent(&sb, &format!("{FIX}\n{DONE}"));
        hidden_edit_tester(&sb, how);
        let r = sb.go_json("Fix mean()");
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        let text = reasons(&r);
        assert!(!text.contains("-> DONE"), "{how}: {text}");
        assert!(
            text.contains(
                "rejected: the tree changed during a step whose result would end the run"
            ),
            "{how}: {text}"
        );
    }
}

#[test]
fn done_is_bound_to_the_tree_the_tests_ran_on() {
    let sb = repo();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    let id = short(&sb, &run);
    let last = r.transitions.last().unwrap();
    assert_eq!(last["to"], "DONE");
    let n = last["invocation"].as_u64().unwrap() as u32;
    let verified = &sb.invocation(&run, n)["changes"]["verified"];
    let tip = git(&sb.root(), &["rev-parse", &format!("modix/{id}")]);
    assert_eq!(verified["commit"], tip.trim());
    let tree = git(&sb.root(), &["rev-parse", &format!("modix/{id}^{{tree}}")]);
    assert_eq!(verified["tree"], tree.trim());
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("verified on commit {}", &tip[..10])),
        "{last}"
    );
    let out = modix(&sb, &["history", &run, "--invocation", &n.to_string()]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("verified on tree {}", tree.trim())),
        "{}",
        output_text(&out)
    );
}

/// The shipped workflow with `no_progress` routed to FAILED, as a project file.
fn with_no_progress_rules(sb: &Sandbox) {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    let mut text = shipped.replace("id = \"plan_execute_test\"", "id = \"watched\"");
    for from in ["EXECUTING", "TESTING"] {
        if !text.contains(&format!("from = \"{from}\"\nevent = \"no_progress\"")) {
            text.push_str(&format!(
                "\n[[transitions]]\nfrom = \"{from}\"\nevent = \"no_progress\"\nto = \"FAILED\"\n"
            ));
        }
    }
    sb.write(".modix/fsm/watched.toml", &text);
    sb.edit_json(".modix/projects.json", |v| v["workflow"] = "watched".into());
}

/// Whether the kernel reports every change on the filesystem holding
/// `dir`, so a run's workspace there is watched (`workspace::watch`).
fn watchable(dir: &Path) -> bool {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .unwrap();
    let kind = String::from_utf8_lossy(&out.stdout);
    ["ext2/ext3", "xfs", "btrfs", "tmpfs"].contains(&kind.trim())
}

#[test]
fn a_watched_workspace_keeps_none_of_its_files_open_while_agents_run() {
    // Every process modix starts gets a copy of its open files at the fork
    // and closes them at its exec: under a watch, the tree's files are not
    // among them, however many there are.
    let sb = repo();
    let root = sb.root();
    if !watchable(&root) {
        eprintln!(
            "SKIPPED: {} is not on a filesystem the watch trusts",
            root.display()
        );
        return;
    }
    for i in 0..200 {
        write_file(&root.join(format!("pkg/f{i:03}.txt")), "x\n");
    }
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "more files"]);
    let seen = tempfile::tempdir().unwrap();
    let log = seen.path().join("fds");
    scenarios::agent(
        &sb,
        &format!(
            "    ls /proc/$PPID/fd | wc -l >> {}\n{}",
            log.display(),
            scenarios::EXECUTOR_OK
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert!(r.code.is_some(), "{}", r.stderr);
    let counts: Vec<usize> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(!counts.is_empty(), "the executor ran");
    // A few dozen of its own (the store, pipes, the watch): not the 200.
    assert!(
        counts.iter().all(|&n| n < 100),
        "modix's open files: {counts:?}"
    );
}

#[test]
fn an_executor_that_changes_nothing_makes_no_progress_and_the_run_fails_early() {
    let sb = repo();
    with_no_progress_rules(&sb);
    scenarios::agent(&sb, DONE);
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -task_spec_valid-> EXECUTING",
            "EXECUTING -no_progress-> FAILED"
        ]
    );
    let text = reasons(&r);
    assert!(
        text.contains("no progress: the step changed nothing in the workspace"),
        "{text}"
    );
    // The agent's claim is kept beside the record, and the mismatch shown.
    assert!(text.contains("it claimed calc.py"), "{text}");
}

#[test]
fn the_same_test_failure_twice_is_no_progress() {
    let sb = repo();
    with_no_progress_rules(&sb);
    // A different edit each attempt, none of which fixes anything.
    scenarios::agent(
        &sb,
        &format!("    echo \"# attempt $MODIX_ATTEMPT\" >> calc.py\n{DONE}"),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let path = r.path();
    assert_eq!(
        path.last().unwrap(),
        "TESTING -no_progress-> FAILED",
        "{path:?}"
    );
    assert_eq!(path.len(), 6, "{path:?}");
    let text = reasons(&r);
    assert!(
        text.contains("no progress: the same tests failed the same way 2 times in a row"),
        "{text}"
    );
}

#[test]
fn an_executor_that_puts_back_an_earlier_tree_makes_no_progress() {
    let sb = repo();
    with_no_progress_rules(&sb);
    // Attempt 1 and 3 leave the same files; attempt 2 another version.
    scenarios::agent(
        &sb,
        &format!(
            "    if [ \"$MODIX_ATTEMPT\" = 2 ]; then n=2; else n=1; fi\n    printf 'def mean(v):\\n    return %s\\n' $n > calc.py\n{DONE}"
        ),
    );
    sb.edit_json(".modix/runtimes.json", |v| {
        v["loops"]["no_progress_after"] = 5.into()
    });
    let r = sb.go_json("Fix mean()");
    let text = reasons(&r);
    assert_eq!(r.code, Some(1), "{text}");
    assert!(
        text.contains("EXECUTING -no_progress-> FAILED: no progress: the step left the files exactly as an earlier step had"),
        "{text}"
    );
}

#[test]
fn kill_nine_mid_step_then_resume_discards_what_the_step_left() {
    let sb = repo();
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then echo half > half-done.txt; echo '# half' >> calc.py; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let ws = r.events.iter().find(|e| e["type"] == "workspace").unwrap();
    assert!(
        ws["notes"]
            .to_string()
            .contains("recorded under refs/modix/runs/"),
        "{ws}"
    );
    // The abandoned invocation's record says what was discarded.
    let inv = sb.invocation(&run, 2);
    assert_eq!(inv["status"], "abandoned");
    let mut paths: Vec<&str> = inv["changes"]["discarded"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    paths.sort();
    assert_eq!(paths, ["calc.py", "half-done.txt"]);
    // The run ended on the fix alone.
    let id = short(&sb, &run);
    let tree = git(
        &sb.root(),
        &["ls-tree", "--name-only", &format!("modix/{id}")],
    );
    assert!(!tree.contains("half-done.txt"), "{tree}");
    let calc = git(&sb.root(), &["show", &format!("modix/{id}:calc.py")]);
    assert!(
        !calc.contains("# half") && calc.contains("/ len(values)"),
        "{calc}"
    );
    let kept = git(
        &sb.root(),
        &[
            "show",
            &format!("refs/modix/runs/{id}/discarded/1:half-done.txt"),
        ],
    );
    assert_eq!(kept, "half\n");
}

#[test]
fn resume_refuses_a_run_branch_someone_moved_unless_reset() {
    let sb = repo();
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    // Someone commits on the run's branch in its worktree.
    let wt = ws_root(&sb, &run);
    std::fs::write(wt.join("mine.txt"), "mine\n").unwrap();
    git(&wt, &["add", "mine.txt"]);
    git(&wt, &["commit", "-q", "-m", "mine"]);
    let out = modix(&sb, &["resume", &run]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--reset"), "{err}");
    let out = modix(&sb, &["resume", "--reset", "--json", &run]);
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let id = short(&sb, &run);
    let tree = git(
        &sb.root(),
        &["ls-tree", "--name-only", &format!("modix/{id}")],
    );
    assert!(!tree.contains("mine.txt"), "{tree}");
}

#[test]
fn commits_a_person_made_on_the_run_branch_are_never_overwritten() {
    let sb = repo();
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    // The person reviews the run branch in their own repository and
    // commits a fix-up on it.
    let id = short(&sb, &run);
    let branch = format!("modix/{id}");
    let root = sb.root();
    git(&root, &["checkout", "-q", &branch]);
    std::fs::write(root.join("mine.txt"), "mine\n").unwrap();
    git(&root, &["add", "mine.txt"]);
    git(&root, &["commit", "-q", "-m", "my fix-up"]);
    let mine = git(&root, &["rev-parse", "HEAD"]).trim().to_owned();
    git(&root, &["checkout", "-q", "-"]);
    for args in [vec!["resume", run.as_str()], vec!["apply", run.as_str()]] {
        let out = modix(&sb, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            output_text(&out)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "the run branch {branch} in your repository has commits the run did not make: it is at {mine}"
            )) && err.contains("--reset"),
            "{err}"
        );
        assert_eq!(git(&root, &["rev-parse", &branch]).trim(), mine, "{args:?}");
    }
    // `--reset` puts the branch back and keeps the person's commit.
    let out = modix(&sb, &["resume", "--reset", "--json", &run]);
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let ws = r.events.iter().find(|e| e["type"] == "workspace").unwrap();
    assert!(
        ws["notes"].to_string().contains(&format!("{branch}-yours")),
        "{ws}"
    );
    assert_eq!(
        git(&root, &["rev-parse", &format!("{branch}-yours")]).trim(),
        mine
    );
    let tree = git(&root, &["ls-tree", "--name-only", &branch]);
    assert!(!tree.contains("mine.txt"), "{tree}");
    let calc = git(&root, &["show", &format!("{branch}:calc.py")]);
    assert!(calc.contains("/ len(values)"), "{calc}");
}

#[test]
fn in_place_refuses_a_dirty_tree_and_a_second_run_on_the_same_tree() {
    let sb = repo();
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "in_place".into()
    });
    git(&sb.root(), &["commit", "-q", "-am", "in place"]);
    sb.write("notes.txt", "wip\n");
    let out = modix(&sb, &["go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("uncommitted changes (1 file: notes.txt)"),
        "{}",
        output_text(&out)
    );
    // A second live run on the tree is refused, naming the first.
    let marker = sb.dir.path().join("executing");
    scenarios::agent(
        &sb,
        &format!(
            "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
            m = marker.display()
        ),
    );
    let mut first = sb.spawn(&["go", "--json", "--allow-dirty", "first"]);
    scenarios::wait_for(&marker);
    let out = modix(&sb, &["go", "--allow-dirty", "second"]);
    let first_id = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    first.wait().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("in use by run {first_id}")), "{err}");
    // With --allow-dirty the run changes the files in place, and records it.
    let r = GoResult::parse(&modix(&sb, &["go", "--json", "--allow-dirty", "third"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(sb.read("calc.py").contains("/ len(values)"));
    assert_eq!(sb.read("notes.txt"), "wip\n");
}

#[test]
fn in_place_resume_removes_nothing_unasked() {
    let sb = repo();
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "in_place".into()
    });
    git(&sb.root(), &["commit", "-q", "-am", "in place"]);
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then echo half > half.txt; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    scenarios::agent(&sb, &executor);
    scenarios::passing_tester(&sb);
    git(&sb.root(), &["commit", "-q", "-am", "agents"]);
    let run = scenarios::killed_once(&sb, &["go", "--json", "crash mid-step"], &marker);
    // The person goes on working in their checkout meanwhile.
    sb.write("mine.txt", "my work\n");
    let out = modix(&sb, &["resume", &run]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no recorded step of the run made (2 files: half.txt, mine.txt)")
            && err.contains("`modix resume --reset`"),
        "{err}"
    );
    assert_eq!(sb.read("mine.txt"), "my work\n");
    assert_eq!(sb.read("half.txt"), "half\n");
    // Theirs put aside, `--reset` takes the rest off and the run goes on.
    std::fs::rename(sb.root().join("mine.txt"), sb.dir.path().join("mine.txt")).unwrap();
    let r = GoResult::parse(&modix(&sb, &["resume", "--reset", "--json", &run]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!sb.root().join("half.txt").exists());
    assert!(sb.read("calc.py").contains("/ len(values)"));
    let inv = sb.invocation(&run, 2);
    assert_eq!(
        inv["changes"]["discarded"]["paths"],
        serde_json::json!(["half.txt"])
    );
}

/// Stopped by Ctrl-C while modix still runs, an in-place run notes what its
/// agent left: the resume takes exactly that off without asking, and asks
/// as soon as anything else changed since.
#[test]
fn in_place_resume_after_ctrl_c_takes_off_what_the_agent_left_and_only_that() {
    for touched in [false, true] {
        let sb = repo();
        sb.edit_json(".modix/projects.json", |v| {
            v["workspace"] = "in_place".into()
        });
        let marker = sb.dir.path().join("executing");
        scenarios::agent(
            &sb,
            &format!(
                "    if [ ! -e {m} ]; then echo half > half.txt; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
                m = marker.display()
            ),
        );
        scenarios::passing_tester(&sb);
        git(&sb.root(), &["commit", "-q", "-am", "in place"]);
        let mut child = sb.spawn(&["go", "--json", "interrupted in place"]);
        scenarios::wait_for(&marker);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(130));
        if touched {
            sb.write("mine.txt", "my work\n");
        }
        let out = modix(&sb, &["resume", "--json"]);
        if touched {
            assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
            assert!(output_text(&out).contains("left_in_place"));
            assert_eq!(sb.read("mine.txt"), "my work\n");
            assert_eq!(sb.read("half.txt"), "half\n");
        } else {
            let r = GoResult::parse(&out);
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            assert!(!sb.root().join("half.txt").exists());
            assert!(sb.read("calc.py").contains("/ len(values)"));
        }
    }
}

#[test]
fn prune_removes_finished_workspaces_but_never_a_resumable_one() {
    let sb = repo();
    let done = sb.go_json("finish");
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let stopped = scenarios::stopped_run(&sb, "stop", nix::sys::signal::Signal::SIGTERM);
    let (done_root, stopped_root) = (ws_root(&sb, &done.run_id()), ws_root(&sb, &stopped));
    let (done_id, stopped_id) = (short(&sb, &done.run_id()), short(&sb, &stopped));
    let out = modix(&sb, &["prune", "--older-than", "1d"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(done_root.exists(), "not a day old yet");
    let out = modix(&sb, &["prune"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(!done_root.exists());
    assert!(stopped_root.exists());
    let branches = git(&sb.root(), &["branch", "--list", "modix/*"]);
    assert!(
        branches.contains(&done_id) && branches.contains(&stopped_id),
        "{branches}"
    );
    // The pruned run's changes are still on its branch.
    let out = modix(&sb, &["diff", &done_id, "--stat"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = modix(&sb, &["prune", "--branches"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let branches = git(&sb.root(), &["branch", "--list", "modix/*"]);
    assert!(
        !branches.contains(&done_id) && branches.contains(&stopped_id),
        "{branches}"
    );
    // Workspaces are never registered in the user's repository.
    assert_eq!(git(&sb.root(), &["worktree", "list"]).lines().count(), 1);
    assert!(stopped_root.is_dir() && !done_root.exists());
    // The stopped run resumes in its workspace.
    let r = GoResult::parse(&modix(&sb, &["resume", "--json", &stopped]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn a_project_in_a_subfolder_of_a_repository_works_in_that_subfolder() {
    let sb = Sandbox::new();
    let mono = sb.dir.path().join("mono");
    let project = mono.join("services/calc");
    crate::util::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bugfix"),
        &project,
    );
    std::fs::write(mono.join("README.md"), "a monorepo\n").unwrap();
    git(&mono, &["init", "-q"]);
    git(&mono, &["add", "-A"]);
    git(&mono, &["commit", "-q", "-m", "base"]);
    let out = sb
        .modix()
        .arg("--project")
        .arg(&project)
        .args(["go", "--json", "Fix mean()"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    let ws = r.events.iter().find(|e| e["type"] == "workspace").unwrap();
    assert!(
        ws["workdir"]
            .as_str()
            .unwrap()
            .trim_end_matches('/')
            .ends_with("services/calc"),
        "{ws}"
    );
    let branch = ws["branch"].as_str().unwrap();
    let calc = git(&mono, &["show", &format!("{branch}:services/calc/calc.py")]);
    assert!(calc.contains("/ len(values)"), "{calc}");
}

#[test]
fn a_subfolder_projects_agent_may_not_change_the_repositorys_ci_or_tests() {
    let sb = Sandbox::example();
    scenarios::agent(
        &sb,
        &format!(
            "    if [ \"$MODIX_ATTEMPT\" = 1 ]; then echo '  # agent' >> ../../.github/workflows/ci.yml; echo '# agent' >> ../../tests/test_all.py; fi\n{FIX}\n{DONE}"
        ),
    );
    scenarios::passing_tester(&sb);
    let mono = sb.dir.path().join("mono");
    let project = mono.join("services/calc");
    crate::util::copy_tree(&sb.root(), &project);
    crate::util::write_file(&mono.join(".github/workflows/ci.yml"), "on: push\n");
    crate::util::write_file(
        &mono.join("tests/test_all.py"),
        "# the repository's tests\n",
    );
    git(&mono, &["init", "-q"]);
    git(&mono, &["add", "-A"]);
    git(&mono, &["commit", "-q", "-m", "base"]);
    let out = sb
        .modix()
        .arg("--project")
        .arg(&project)
        .args(["go", "--json", "Fix mean()"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    assert!(
        reasons(&r).contains("changed protected paths .github/workflows/ci.yml, tests/test_all.py"),
        "{}",
        reasons(&r)
    );
    let branch = r.events.iter().find(|e| e["type"] == "workspace").unwrap()["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    let ci = git(
        &mono,
        &["show", &format!("{branch}:.github/workflows/ci.yml")],
    );
    assert_eq!(ci, "on: push\n");
}

#[test]
fn a_branch_named_modix_is_named_before_anything_is_recorded() {
    let sb = repo();
    git(&sb.root(), &["branch", "modix"]);
    // Asked for: with no setting, the run works on a copy instead.
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "worktree".into()
    });
    let out = modix(&sb, &["go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "your repository has a branch named `modix`, and git cannot make the run's branch `modix/<id>` beside it; refusing. Rename it (`git branch -m modix NEW-NAME`)"
        ),
        "{}",
        output_text(&out)
    );
    assert_eq!(sb.runs().as_array().unwrap().len(), 0);
}

#[test]
fn doctor_and_go_name_a_git_too_old_for_workspaces() {
    let sb = repo();
    let out = modix(&sb, &["doctor"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("each run works in a git worktree on its own branch"),
        "{}",
        output_text(&out)
    );
    sb.fake_bin("git", "#!/bin/sh\necho 'git version 2.20.1'\n");
    let out = modix(&sb, &["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("git 2.20.1 is too old"), "{text}");
    let out = modix(&sb, &["go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "git 2.20.1 is too old: modix workspaces needs git 2.30.0 or newer; upgrade git"
        ),
        "{}",
        output_text(&out)
    );
    assert!(
        sb.runs().as_array().is_none_or(|a| a.is_empty()),
        "nothing recorded"
    );
}

/// Submodules a worktree cannot hold: asked for a worktree, `go` refuses
/// before anything is recorded; with no `workspace` setting, the run works
/// on a copy, as `modix init` would have chosen, and says why.
#[test]
fn submodules_refuse_a_worktree_asked_for_and_give_an_automatic_run_a_copy() {
    let sb = repo();
    sb.write(
        ".gitmodules",
        "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib.git\n",
    );
    git(&sb.root(), &["add", ".gitmodules"]);
    git(&sb.root(), &["commit", "-q", "-m", "submodule"]);
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "worktree".into()
    });
    let out = modix(&sb, &["go", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the project uses git submodules (.gitmodules); refusing")
            && err.contains("use workspace: copy (a copy of the folder, the submodules' files included) or in_place."),
        "{err}"
    );
    let out = modix(&sb, &["history"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("No runs yet"));

    sb.edit_json(".modix/projects.json", |v| {
        v.as_object_mut().unwrap().remove("workspace");
    });
    let out = modix(&sb, &["doctor"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Workspaces: each run works in a copy"),
        "{}",
        output_text(&out)
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(workspace(&sb, &r.run_id())["mode"], "copy");
    let said = serde_json::to_string(&r.events).unwrap();
    assert!(
        said.contains("a branch of its own cannot hold the project, as the project uses git submodules (.gitmodules): this run works on a copy"),
        "{said}"
    );
}

/// In place (what `go` advises for submodules), a change inside a submodule
/// is one git cannot record from the project: the step is refused, the
/// submodule put back, and what the agent did there kept in its stash.
#[test]
fn in_place_a_change_inside_a_submodule_is_taken_off_and_kept_in_its_stash() {
    let sb = repo();
    let lib = sb.dir.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("lib.txt"), "lib\n").unwrap();
    git(&lib, &["init", "-q"]);
    git(&lib, &["add", "-A"]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    let root = sb.root();
    git(
        &root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "vendor/lib",
        ],
    );
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "in_place".into()
    });
    scenarios::agent(
        &sb,
        &format!(
            "    if [ \"$MODIX_ATTEMPT\" = 1 ]; then echo agent >> vendor/lib/lib.txt; echo new > vendor/lib/new.txt; fi\n{FIX}\n{DONE}"
        ),
    );
    scenarios::passing_tester(&sb);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "vendored, in place"]);
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    assert!(
        reasons(&r).contains(
            "changed files inside the submodule vendor/lib (git records a submodule only as the commit it is at); taken off, and kept in its stash (`git -C vendor/lib stash list`)"
        ),
        "{}",
        reasons(&r)
    );
    let sub = root.join("vendor/lib");
    assert_eq!(git(&sub, &["status", "--porcelain"]), "");
    let kept = git(
        &sub,
        &["stash", "show", "-p", "--include-untracked", "stash@{0}"],
    );
    assert!(kept.contains("+agent") && kept.contains("+new"), "{kept}");
}

/// With `durability: pipelined` a power cut can take a step off the disk
/// after the next agent started: the record then ends at the step before,
/// and the in-flight note names that next agent. Made here by killing modix
/// before the executor's commit (step 3) and rewriting its note as such a
/// cut leaves it: the tester of step 4 running. Resume records that tester
/// abandoned (it ran; nothing of it is lost), discards the settled work and
/// runs the executor's step once more, then the tester: the record has no
/// gap, no duplicate step, and the change lands once.
#[test]
fn a_step_lost_after_the_next_agent_started_is_run_again_on_resume() {
    let (sb, count) = executor_counted();
    sb.edit_json(".modix/runtimes.json", |v| {
        v["durability"] = "pipelined".into()
    });
    let run = killed_before_the_executors_commit(&sb, "a power cut");
    let note = sb.root().join(format!(".modix/runs/{run}/inflight.json"));
    let mut flight: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&note).unwrap()).unwrap();
    assert_eq!(
        (flight["seq"].as_u64(), flight["state"].as_str()),
        (Some(3), Some("EXECUTING"))
    );
    flight["seq"] = 4.into();
    flight["state"] = "TESTING".into();
    flight["agent"] = "tester".into();
    std::fs::write(&note, serde_json::to_vec(&flight).unwrap()).unwrap();

    resumed_once_more(&sb, &run, &count, "TESTING");
    let id = short(&sb, &run);
    let calc = git(&sb.root(), &["show", &format!("modix/{id}:calc.py")]);
    assert_eq!(calc.matches("# attempt").count(), 1, "{calc}");
}

/// A repository whose executor notes each of its runs in the returned file
/// (and changes `calc.py`), and whose tester passes.
fn executor_counted() -> (Sandbox, PathBuf) {
    let sb = repo();
    let count = sb.dir.path().join("executor-runs");
    scenarios::agent(
        &sb,
        &format!(
            "    echo run >> {c}\n    echo '# attempt' >> calc.py\n{FIX}\n{DONE}",
            c = count.display()
        ),
    );
    scenarios::passing_tester(&sb);
    (sb, count)
}

/// `go` killed (as by `kill -9`) at the commit of step 3, the executor's
/// (INIT→PLANNING, the planner's, the executor's): the run's id.
fn killed_before_the_executors_commit(sb: &Sandbox, epic: &str) -> String {
    let out = sb
        .modix()
        .env("MODIX_CRASH_AT", "commit:3")
        .args(["go", "--json", epic])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(9), "{}", output_text(&out));
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(sb.runs()[0]["state"], "EXECUTING");
    assert_eq!(
        history_seqs(sb, &run),
        [1, 2],
        "the crashed step left no transition"
    );
    run
}

/// Resumed, the run ran the executor once more and ended: the planner, the
/// invocation the crash left (in state `abandoned`, recorded so), the
/// executor again, the tester.
fn resumed_once_more(sb: &Sandbox, run: &str, count: &Path, abandoned: &str) {
    let r = sb.resume_json(run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(history_seqs(sb, run), [1, 2, 3, 4]);
    assert_eq!(std::fs::read_to_string(count).unwrap(), "run\nrun\n");
    let invs: Vec<(String, String)> = (1..=4)
        .map(|n| {
            let inv = sb.invocation(run, n);
            let s = |k: &str| inv[k].as_str().unwrap().to_owned();
            (s("state"), s("status"))
        })
        .collect();
    let want = [
        ("PLANNING", "completed"),
        (abandoned, "abandoned"),
        ("EXECUTING", "completed"),
        ("TESTING", "completed"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(invs, want);
}

/// Killed (as by `kill -9`) after the executor ran and its work was settled
/// on the run's branch, but before the step was committed: the record has no
/// trace of the step, so resume records the invocation as abandoned, discards
/// the settled work and runs the executor again — its change lands once, the history has no gap and no
/// duplicate, and the database is intact.
#[test]
fn kill_nine_between_the_agent_and_the_commit_then_resume_runs_the_step_once() {
    let (sb, count) = executor_counted();
    let run = killed_before_the_executors_commit(&sb, "crash before the commit");
    // The killed executor abandoned, its settled work discarded.
    resumed_once_more(&sb, &run, &count, "EXECUTING");
    let discarded = sb.invocation(&run, 2)["changes"]["discarded"]["paths"].clone();
    assert_eq!(discarded, serde_json::json!(["calc.py"]));
    let id = short(&sb, &run);
    let calc = git(&sb.root(), &["show", &format!("modix/{id}:calc.py")]);
    assert_eq!(calc.matches("# attempt").count(), 1, "{calc}");
    let db = rusqlite::Connection::open(sb.root().join(".modix/modix.db")).unwrap();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// The seqs of the run's transitions.
fn history_seqs(sb: &Sandbox, run: &str) -> Vec<u64> {
    let out = modix(sb, &["history", run, "--json"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seq"].as_u64().unwrap())
        .collect()
}

/// A `go` killed after making its workspace but before recording its run
/// leaves a worktree and a `modix/<short>` branch no run refers to: `modix
/// prune` removes them, and leaves a resumable run's workspace alone.
#[test]
fn prune_removes_the_workspace_of_a_run_that_was_never_recorded() {
    let sb = repo();
    let root = sb.root();
    // A resumable run (interrupted mid-step) whose workspace must stay.
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let kept = scenarios::crashed_while(&sb, &marker, &executor);
    let out = sb
        .modix()
        .env("MODIX_CRASH_AT", "record-run")
        .args(["go", "--json", "killed before its run is recorded"])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(9), "{}", output_text(&out));
    assert_eq!(sb.runs().as_array().unwrap().len(), 1, "no second run");
    let branches = || git(&root, &["branch", "--format=%(refname:short)"]);
    // The workspaces' folders (each beside its `<short>.state`).
    let folders = ws_root(&sb, &kept).parent().unwrap().to_path_buf();
    let worktrees = || {
        let mut names: Vec<String> = std::fs::read_dir(&folders)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".state"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(branches().matches("modix/").count(), 2, "{}", branches());
    assert_eq!(worktrees().len(), 2, "{:?}", worktrees());

    let out = modix(&sb, &["prune"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("never recorded"), "{text}");
    assert!(text.contains("deleted 1 ref"), "{text}");
    let short = short(&sb, &kept);
    let ours: Vec<String> = branches()
        .lines()
        .filter(|b| b.starts_with("modix/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(ours, [format!("modix/{short}")]);
    assert_eq!(worktrees(), std::slice::from_ref(&short));
    assert!(ws_root(&sb, &kept).is_dir());
    // Nothing is left to prune, and the kept run still resumes to DONE.
    let out = modix(&sb, &["prune"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Kept 1 workspace"),
        "{}",
        output_text(&out)
    );
    let r = GoResult::parse(&modix(&sb, &["resume", "--json", &kept]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// An executor that destroys its workspace's `.git` (worktree), replaces
/// it with a repository of its own (copy) or with a file too long to be a
/// link (read no further than a link can be) takes nothing of the run's
/// history: the step is recorded, the link is put back and the step says
/// so, and the run ends with the fix on its branch.
#[test]
fn an_agent_that_destroys_the_workspace_git_takes_nothing_of_the_run() {
    for (sb, destroy) in [
        (repo(), "rm -rf .git"),
        (Sandbox::example(), "rm -rf .git && git init -q"),
        (
            repo(),
            "rm -rf .git && head -c 300000 /dev/zero | tr '\\0' g > .git",
        ),
    ] {
        scenarios::agent(&sb, &format!("    {destroy}\n{FIX}\n{DONE}"));
        scenarios::passing_tester(&sb);
        let r = sb.go_json("break .git");
        assert_eq!(r.code, Some(0), "{destroy}: {}", r.stderr);
        let run = r.run_id();
        let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
        assert!(notes.contains("it is put back"), "{destroy}: {notes}");
        let root = ws_root(&sb, &run);
        assert!(root.join(".git").is_file(), "{destroy}");
        let calc = git(&root, &["show", "HEAD:calc.py"]);
        assert!(calc.contains("/ len(values)"), "{destroy}: {calc}");
        let log = git(&root, &["log", "--format=%s"]);
        assert!(log.contains("modix: step"), "{destroy}: {log}");
    }
}

/// The `.git` link, read pointing home once it is a tick old, is not read
/// again at each settle while its stat stays as it was; an executor that
/// rewrites it in place — same size, its mtime put back — still has it put
/// back, as its ctime moved. The planner waits so that the settle after it
/// remembers the link.
#[test]
fn a_git_link_rewritten_in_place_with_its_mtime_put_back_is_put_back() {
    let sb = repo();
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    sleep 0.2
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":["calc.py"],"acceptance":["tests pass"]}}]}}'
    ;;
  *)
    m=$(stat -c %.9Y .git)
    n=$(wc -c < .git)
    printf 'gitdir: /%s\n' "$(head -c $((n - 10)) /dev/zero | tr '\0' x)" > .git
    touch -d "@$m" .git
    [ "$(wc -c < .git)" = "$n" ] && [ "$(stat -c %.9Y .git)" = "$m" ] || exit 7
{FIX}
{DONE}
    ;;
esac
"#
    ));
    scenarios::passing_tester(&sb);
    let r = sb.go_json("rewrite .git");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    assert_eq!(sb.invocation(&run, 1)["changes"]["notes"], Value::Null);
    let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
    assert!(
        notes.contains("changed the workspace's .git link"),
        "{notes}"
    );
    assert!(notes.contains("it is put back"), "{notes}");
    let root = ws_root(&sb, &run);
    let link = std::fs::read_to_string(root.join(".git")).unwrap();
    assert!(!link.contains("/xxxx"), "{link}");
    let calc = git(&root, &["show", "HEAD:calc.py"]);
    assert!(calc.contains("/ len(values)"), "{calc}");
}

/// The run's files are the agent's, and so is the repository config it can
/// write: `modix diff` shows the change with its control characters made
/// visible, and runs no `diff.external` program an agent set (which would
/// run as the user and could show nothing instead of the change).
#[test]
fn diff_shows_an_agents_change_as_it_is_and_runs_none_of_its_programs() {
    let sb = repo();
    let marker = sb.dir.path().join("external-ran");
    let external = sb.dir.path().join("external.sh");
    std::fs::write(
        &external,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &external,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    agent_with_scope(
        &sb,
        &["calc.py"],
        &format!(
            r#"{FIX}
    printf '# \033]0;pwned\007\033]52;c;cHduZWQ=\007\033[2J\033[31mred\n' >> calc.py
    git config diff.external '{}'
{DONE}"#,
            external.display()
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    for args in [
        &["diff", "last"][..],
        &["--color", "always", "diff", "last"],
    ] {
        let out = modix(&sb, args);
        assert!(out.status.success(), "{}", output_text(&out));
        let diff = String::from_utf8_lossy(&out.stdout);
        assert!(diff.contains("return sum(values) / len(values)"), "{diff}");
        assert!(
            diff.contains("␛]0;pwned␇␛]52;c;cHduZWQ=␇␛[2J"),
            "{args:?}: {diff:?}"
        );
        for raw in ["\u{1b}]", "\u{7}", "\u{1b}[2J"] {
            assert!(!diff.contains(raw), "{args:?} passed {raw:?}: {diff:?}");
        }
    }
    assert!(!marker.exists(), "the agent's diff.external ran");
}

/// A file name is the agent's to choose, newlines included: the audit
/// shows each name on the line that lists it, never as lines of its own.
#[test]
fn a_file_name_cannot_forge_a_line_of_the_audit() {
    let sb = repo();
    agent_with_scope(
        &sb,
        &["**"],
        &format!(
            r#"{FIX}
    printf 'x\n' > "$(printf 'z\nfiles claimed by the agent: calc.py\nlifecycle: ok')"
{DONE}"#
        ),
    );
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}\n{}", reasons(&r), r.stderr);
    let out = modix(&sb, &["history", "last", "--invocation", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("z␤files claimed by the agent: calc.py␤lifecycle: ok"),
        "{text}"
    );
    let forged = text
        .lines()
        .filter(|l| l.starts_with("files claimed by the agent") || l.starts_with("lifecycle: ok"))
        .count();
    assert_eq!(forged, 1, "only the record's own claim line: {text}");
}

/// A key in the run's change stays out of what `modix diff` prints, as out
/// of everything else modix prints. (A step that writes a key the run knows
/// is taken off; here the key is the project's only by the time of the
/// diff — set after the run, as when a key is rotated in.)
#[test]
fn diff_keeps_the_projects_secrets_out_of_what_it_prints() {
    const KEY: &str = "sk-ant-api03-DIFFSECRETDIFFSECRET0123456789";
    let sb = repo();
    agent_with_scope(
        &sb,
        &["calc.py"],
        &format!(
            r##"{FIX}
    printf "# key = '{KEY}'\n" >> calc.py
{DONE}"##
        ),
    );
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    for args in [&["diff", "last"][..], &["diff", "last", "--step", "3"]] {
        let out = sb
            .modix()
            .env("ANTHROPIC_API_KEY", KEY)
            .args(args)
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(!text.contains(KEY), "{args:?}: {text}");
        assert!(text.contains("+# key = '"), "{args:?}: {text}");
    }
}

/// The user's repository as git keeps it beside the checkout: every ref
/// (modix's own run branch left out), the stash, the config, the hooks and
/// `info/`.
fn repository_state(root: &Path) -> Vec<(String, Vec<u8>)> {
    let refs: String = git(root, &["for-each-ref", "--format=%(objectname) %(refname)"])
        .lines()
        .filter(|l| !l.contains(" refs/heads/modix/"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut state = vec![
        ("refs".to_owned(), refs.into_bytes()),
        (
            "stash".to_owned(),
            git(root, &["stash", "list"]).into_bytes(),
        ),
    ];
    let gd = root.join(".git");
    state.push(("config".into(), std::fs::read(gd.join("config")).unwrap()));
    for dir in ["hooks", "info"] {
        let mut names: Vec<_> = std::fs::read_dir(gd.join(dir))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        names.sort();
        for p in names {
            state.push((
                p.display().to_string(),
                std::fs::read(&p).unwrap_or_default(),
            ));
        }
    }
    state
}

/// What an agent's ordinary git commands in its workspace did to the user's
/// repository when the workspace was a `git worktree` (sharing refs, stash,
/// config, hooks and info/ with it): moved the user's branch, stashed into
/// the user's stash, added branches and tags, set aliases, a hooks path and
/// a clean filter that modix's own `git add -A` then ran. Now the workspace's
/// repository is its own: none of it reaches the user's, and what it planted
/// in its own is put back before modix runs git there.
#[test]
fn an_agents_git_commands_never_reach_the_users_repository() {
    for sb in [repo(), Sandbox::example()] {
        let in_git = sb.root().join(".git").is_dir();
        let ran = sb.dir.path().join("planted-command-ran");
        let executor = format!(
            r#"    G="git -c user.name=agent -c user.email=agent@example.com"
    common=$(git rev-parse --git-common-dir)
    $G update-ref refs/heads/main $($G commit-tree -m moved HEAD^{{tree}} -p HEAD) 2>/dev/null
    echo wip > wip.txt && $G stash push -q -u -m agent && $G stash apply -q && rm wip.txt
    $G branch agent-branch; $G tag agent-tag
    git config core.hooksPath /nonexistent; git config alias.st '!touch {ran}'
    mkdir -p "$common/hooks" "$common/info" && printf '#!/bin/sh\ntouch {ran}\n' > "$common/hooks/pre-commit" && chmod +x "$common/hooks/pre-commit"
    git config filter.ev.clean 'sh -c "touch {ran}; cat"'
    echo 'calc.py filter=ev' >> "$common/info/attributes"
{FIX}
{DONE}"#,
            ran = ran.display()
        );
        scenarios::agent(&sb, &executor);
        scenarios::passing_tester(&sb);
        let before = in_git.then(|| (repository_state(&sb.root()), checkout(&sb.root())));
        let r = sb.go_json("git everywhere");
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let run = r.run_id();
        assert!(!ran.exists(), "in_git={in_git}: the planted filter ran");
        let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
        assert!(
            notes.contains("config (changed)")
                && notes.contains("info/attributes (changed)")
                && notes.contains("hooks (made by the agent, removed)")
                && notes.contains("nothing it planted ran"),
            "in_git={in_git}: {notes}"
        );
        let out = modix(&sb, &["diff", &run]);
        assert!(out.status.success(), "{}", output_text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("+    return sum(values) / len(values)")
        );
        if let Some((repository, files)) = before {
            let root = sb.root();
            assert_eq!(repository_state(&root), repository);
            assert_eq!(checkout(&root), files);
            let id = short(&sb, &run);
            let fixed = git(&root, &["show", &format!("modix/{id}:calc.py")]);
            assert!(fixed.contains("/ len(values)"), "{fixed}");
            // The user's own git commands run nothing the agent planted.
            git(&root, &["status", "--porcelain"]);
            git(&root, &["commit", "-q", "--allow-empty", "-m", "user"]);
            assert!(!ran.exists(), "the user's git ran what the agent planted");
        }
        assert!(!ran.exists());
    }
}

/// An agent's own commits are in its repository's objects; the run branch
/// the user's repository gets carries them, and keeps them once the
/// workspace (and its repository) is pruned: the branch still reads, git
/// finds nothing missing, and the run still applies.
#[test]
fn an_agents_own_commits_reach_the_users_repository_with_the_run_branch() {
    let sb = repo();
    let root = sb.root();
    scenarios::agent(
        &sb,
        &format!(
            "{FIX}\n    git -c user.name=agent -c user.email=agent@example.com commit -q -am 'agent: fix mean'\n{DONE}"
        ),
    );
    scenarios::passing_tester(&sb);
    git(&root, &["commit", "-q", "-am", "the scripted agents"]);
    let r = sb.go_json("the agent commits");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    let id = short(&sb, &run);
    let branch = format!("modix/{id}");
    let subjects = git(&root, &["log", "--format=%s", &branch]);
    assert!(subjects.contains("agent: fix mean"), "{subjects}");
    let out = modix(&sb, &["prune"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(!ws_root(&sb, &run).exists());
    git(&root, &["fsck", "--connectivity-only", "--no-dangling"]);
    let agents = git(&root, &["log", "--format=%H", "--author=agent", &branch]);
    assert_eq!(agents.lines().count(), 1, "{agents}");
    let out = modix(&sb, &["apply", &run]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(sb.read("calc.py").contains("/ len(values)"));
}

/// A stop during modix's own git (here a clean filter of the user's that
/// takes 30 s and ignores SIGINT and SIGTERM, run by the settle's `git add`)
/// is not kept waiting: git's group is stopped, the run ends interrupted
/// with exit 130 at once, and resumes to DONE, the step recorded again.
#[test]
fn a_stop_during_modixs_own_git_is_not_kept_waiting() {
    let sb = repo();
    let root = sb.root();
    let started = sb.dir.path().join("filter-started");
    let home = sb.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Slow only on the fixed file, once: not on the checkouts before it.
    let filter = sb.dir.path().join("slow-filter");
    std::fs::write(
        &filter,
        format!(
            "#!/bin/sh\ntrap '' INT TERM\nf=$(mktemp)\ncat > \"$f\"\n\
             if grep -q '/ len(values)' \"$f\" && [ ! -e {m} ]; then echo $$ > {m}; sleep 30; fi\n\
             cat \"$f\"; rm -f \"$f\"\n",
            m = started.display()
        ),
    )
    .unwrap();
    make_executable(&filter);
    std::fs::write(
        home.join(".gitconfig"),
        format!("[filter \"slow\"]\n\tclean = {}\n", filter.display()),
    )
    .unwrap();
    sb.write(".gitattributes", "calc.py filter=slow\n");
    scenarios::agent(&sb, &format!("{FIX}\n{DONE}"));
    scenarios::passing_tester(&sb);
    git(&root, &["add", "-A"]);
    git(
        &root,
        &["commit", "-q", "-m", "a slow filter, the scripted agents"],
    );
    let child = sb.spawn(&["go", "--json", "slow filter"]);
    scenarios::wait_for(&started);
    let pid: i32 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let asked = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", output_text(&out));
    // Far less than the filter's 30 s: a bound, not a measurement.
    assert!(asked.elapsed() < std::time::Duration::from_secs(15));
    // Gone, or a zombie no one has reaped yet (in a container, pid 1 may not).
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z'));
    assert!(!running, "the filter lives on: {state}");
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    let r = GoResult::parse(&modix(&sb, &["resume", "--json", &run]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    let id = short(&sb, &run);
    let fixed = git(&root, &["show", &format!("modix/{id}:calc.py")]);
    assert!(fixed.contains("/ len(values)"), "{fixed}");
}

/// An executor that removes its whole workspace folder (`.git` link and
/// all) took nothing of the run — its repository is outside — and is judged
/// like any other change: the folder is made again, the removal recorded and
/// rejected (protected files among it), the files put back; the next attempt
/// fixes the bug and the run reaches DONE. Before, `go` ended with exit 3 and
/// `resume` refused.
#[test]
fn an_agent_that_removes_its_workspace_folder_is_judged_and_the_run_goes_on() {
    for sb in [repo(), Sandbox::example()] {
        scenarios::agent(
            &sb,
            &format!(
                "    if [ \"$MODIX_ATTEMPT\" = 1 ]; then d=$PWD; cd /; rm -rf \"$d\"; fi\n    cd \"$MODIX_WORKDIR\" 2>/dev/null || true\n{FIX}\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        let r = sb.go_json("remove the workspace");
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let run = r.run_id();
        let reasons = reasons(&r);
        assert!(
            reasons.contains("rejected: changed protected paths"),
            "{reasons}"
        );
        let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
        assert!(
            notes.contains("removed the workspace folder itself"),
            "{notes}"
        );
        let root = ws_root(&sb, &run);
        assert!(root.join(".git").is_file());
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("/ len(values)")
        );
        assert!(root.join("test_calc.py").is_file());
    }
}

/// The same, with modix killed while the agent that removed the folder
/// still runs: `resume` makes the folder again, records the removal as what
/// the abandoned agent left (discarded), puts the files back and finishes.
#[test]
fn a_run_whose_agent_removed_the_workspace_folder_resumes() {
    let sb = repo();
    let marker = sb.dir.path().join("removed");
    let executor = format!(
        "    if [ ! -e {m} ]; then d=$PWD; cd /; rm -rf \"$d\"; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    assert!(!ws_root(&sb, &run).exists());
    let out = modix(&sb, &["resume", "--json", &run]);
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    let text = output_text(&out);
    assert!(
        text.contains("removed the workspace folder itself"),
        "{text}"
    );
    let id = short(&sb, &run);
    let discarded = git(
        &sb.root(),
        &["for-each-ref", &format!("refs/modix/runs/{id}/discarded/")],
    );
    assert_eq!(discarded.lines().count(), 1, "{discarded}");
    let fixed = git(&sb.root(), &["show", &format!("modix/{id}:calc.py")]);
    assert!(fixed.contains("/ len(values)"), "{fixed}");
}

/// An executor that writes the run's key (here the brain's
/// ANTHROPIC_API_KEY) into a file and into its own commit's author and
/// message: the step is taken off for it, before anything was published,
/// and its commit is not kept — the user's repository holds no object with
/// the key, reachable or not; the next attempt fixes the bug cleanly.
#[test]
fn a_step_that_writes_a_secret_is_taken_off_and_never_kept() {
    let sb = repo();
    let root = sb.root();
    let secret = "sk-ant-api03-WRITTEN-INTO-A-FILE-0123456789";
    scenarios::agent(
        &sb,
        &format!(
            r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then
        echo "key = '{secret}'" > settings_local.py
        git add -A && git -c user.name='{secret}' -c user.email=a@example.com commit -q -m "add {secret}"
    fi
{FIX}
{DONE}"#
        ),
    );
    scenarios::passing_tester(&sb);
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", secret)
        .args(["go", "--json", "keep the key out"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    let reasons = reasons(&r);
    assert!(
        reasons.contains("the change writes the value of ANTHROPIC_API_KEY"),
        "{reasons}"
    );
    assert!(!output_text(&out).contains(secret));
    let run = r.run_id();
    let rejected = &sb.invocation(&run, 2)["changes"]["rejected"];
    assert!(rejected["reference"].is_null(), "{rejected}");
    // No object of the user's repository holds the key.
    let all = Command::new("git")
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(all.status.success());
    let text = String::from_utf8_lossy(&all.stdout);
    assert!(!text.contains(secret), "the key is in the user's objects");
    let id = short(&sb, &run);
    assert_eq!(
        git(&root, &["for-each-ref", &format!("refs/modix/runs/{id}/")]),
        ""
    );
    let fixed = git(&root, &["show", &format!("modix/{id}:calc.py")]);
    assert!(fixed.contains("/ len(values)"), "{fixed}");
    let out = modix(&sb, &["history", &run, "--invocation", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(not kept)"), "{text}");
}

/// A file over `projects.json` `max_file_bytes` is removed before the step
/// is recorded — no object of it is made in the run's repository or the
/// user's — and the step is rejected naming it, whether the step changed
/// other files too (taken off) or nothing else (refused as it is); the next
/// attempt that keeps to the limit is recorded.
#[test]
fn a_file_over_the_size_limit_is_never_recorded_and_its_step_is_rejected() {
    let sb = repo();
    let root = sb.root();
    let big = "    head -c 3000000 /dev/zero | tr '\\0' x > big.bin";
    scenarios::agent(
        &sb,
        &format!(
            "    case $MODIX_ATTEMPT in\n    1) {big}\n{FIX} ;;\n    2) {big} ;;\n    *) {FIX} ;;\n    esac\n{DONE}"
        ),
    );
    scenarios::passing_tester(&sb);
    sb.edit_json(".modix/projects.json", |v| {
        v["max_file_bytes"] = 1_000_000.into()
    });
    let r = sb.go_json("write a big file");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.transitions.last().unwrap()["to"], "DONE");
    let reasons = reasons(&r);
    assert_eq!(
        reasons
            .matches("wrote 1 file over the limit of 1000000 bytes for a file: big.bin (2.9 MiB)")
            .count(),
        2,
        "{reasons}"
    );
    let run = r.run_id();
    let ws = ws_root(&sb, &run);
    assert!(!ws.join("big.bin").exists());
    // No object of the big file anywhere.
    let copy = sb.dir.path().join("big-copy.bin");
    std::fs::write(&copy, "x".repeat(3_000_000)).unwrap();
    let id = git(&root, &["hash-object", copy.to_str().unwrap()]);
    for repo in [&root, &ws] {
        let found = Command::new("git")
            .args(["cat-file", "-e", id.trim()])
            .current_dir(repo)
            .status()
            .unwrap();
        assert!(!found.success(), "{} has the big file", repo.display());
    }
    let short = short(&sb, &run);
    let fixed = git(&root, &["show", &format!("modix/{short}:calc.py")]);
    assert!(fixed.contains("/ len(values)"), "{fixed}");
}

/// The agents' repository starts with copies of the user's branches and
/// tags, so the git an agent runs to see where it stands works as in a
/// checkout of the user's own (`git diff main`, `git log main..`); what the
/// agent does to those copies stays in its repository.
#[test]
fn an_agent_sees_the_users_branches_and_tags_and_moving_them_moves_only_its_copies() {
    let sb = repo();
    let root = sb.root();
    git(&root, &["tag", "v1"]);
    let main = git(&root, &["rev-parse", "main"]);
    let seen = sb.dir.path().join("seen");
    scenarios::agent(
        &sb,
        &format!(
            "{FIX}\n    {{ git rev-parse main v1; git diff --stat main | tail -1; }} > {seen} || exit 3\n    git branch -f main HEAD~0 && git tag -d v1 >/dev/null\n{DONE}",
            seen = seen.display()
        ),
    );
    scenarios::passing_tester(&sb);
    let r = sb.go_json("where do I stand");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let text = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], [main.trim(), main.trim()], "{text}");
    assert!(lines[2].contains("1 file changed"), "{text}");
    assert_eq!(git(&root, &["rev-parse", "main"]), main);
    assert_eq!(git(&root, &["tag", "--list"]), "v1\n");
}

/// What an agent committed and removed again in a later commit of its own
/// is in the step's history though not in its tree: a key or an oversized
/// file there refuses the step just the same, and it is not kept — none of
/// its objects reaches the user's repository.
#[test]
fn a_key_or_a_big_file_committed_and_removed_again_is_caught_in_the_history() {
    let secret = "sk-ant-api03-COMMITTED-THEN-REMOVED-0123456789";
    let commit = "git add -A && git -c user.name=agent -c user.email=a@example.com commit -q -m";
    let cases = [
        (
            format!("echo 'k = \"{secret}\"' > k.py"),
            "k.py",
            "the change writes the value of ANTHROPIC_API_KEY",
        ),
        (
            "head -c 3000000 /dev/zero | tr '\\0' x > big.bin".to_owned(),
            "big.bin",
            "its own commits hold 1 file over the limit of 1000000 bytes",
        ),
    ];
    for (write, name, why) in cases {
        let sb = repo();
        let root = sb.root();
        scenarios::agent(
            &sb,
            &format!(
                "    if [ \"$MODIX_ATTEMPT\" = 1 ]; then {write} && {commit} add && git rm -q {name} && {commit} remove; fi\n{FIX}\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        sb.edit_json(".modix/projects.json", |v| {
            v["max_file_bytes"] = 1_000_000.into()
        });
        let out = sb
            .modix()
            .env("ANTHROPIC_API_KEY", secret)
            .args(["go", "--json", "commit and remove"])
            .output()
            .unwrap();
        let r = GoResult::parse(&out);
        assert_eq!(r.code, Some(0), "{name}: {}", r.stderr);
        let reasons = reasons(&r);
        assert!(reasons.contains(why), "{name}: {reasons}");
        let all = Command::new("git")
            .args([
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objectsize)",
            ])
            .current_dir(&root)
            .output()
            .unwrap();
        let biggest = String::from_utf8_lossy(&all.stdout)
            .lines()
            .filter_map(|l| l.parse::<u64>().ok())
            .max()
            .unwrap();
        assert!(
            biggest < 1_000_000,
            "{name}: a {biggest}-byte object reached the user's repository"
        );
        let log = git(&root, &["log", "--all", "--format=%B"]);
        assert!(
            !log.contains("remove") && !log.contains(secret),
            "{name}: {log}"
        );
        let contents = Command::new("git")
            .args(["cat-file", "--batch-all-objects", "--batch"])
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&contents.stdout).contains(secret),
            "{name}"
        );
    }
}

/// What modix keeps to guard the agents' repository is as reachable as the
/// repository: an agent that plants its clean filter in the kept copy too
/// still has nothing run (the run holds what it kept in memory), and the
/// commands that read the run later (`diff`, `apply`) refuse that copy and
/// read what was published instead. A line the agent adds to the run's
/// excludes file to hide a file from the record is put back the same way,
/// and the hidden file is judged (here: out of scope).
#[test]
fn what_modix_keeps_beside_the_agents_repository_is_not_trusted_either() {
    let sb = repo();
    let ran = sb.dir.path().join("planted-filter-ran");
    scenarios::agent(
        &sb,
        &format!(
            r#"    GD=$(git rev-parse --absolute-git-dir); G=$GD/../guard
    if [ "$MODIX_ATTEMPT" = 1 ]; then
        git config filter.ev.clean 'sh -c "touch {ran}; cat"'
        mkdir -p $GD/info && echo 'calc.py filter=ev' >> $GD/info/attributes
        cp $GD/config $G/config && cp $GD/info/attributes $G/info-attributes
        mkdir -p shadow && echo 'x = 1' > shadow/hidden.py && echo '/shadow/' >> $GD/../exclude
    fi
{FIX}
{DONE}"#,
            ran = ran.display()
        ),
    );
    scenarios::passing_tester(&sb);
    let r = sb.go_json("tamper with modix's copies");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!ran.exists(), "the planted filter ran");
    assert!(!r.stderr.contains("cannot summarise"), "{}", r.stderr);
    let reasons = reasons(&r);
    assert!(
        reasons.contains("outside its task's scope: shadow/hidden.py"),
        "{reasons}"
    );
    let run = r.run_id();
    let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
    assert!(
        notes.contains("config (changed)") && notes.contains("modix's exclude file (changed)"),
        "{notes}"
    );
    let out = modix(&sb, &["diff", &run]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/ len(values)"));
    // The user's tree is dirty with the scripted agent's edits: commit them.
    git(&sb.root(), &["commit", "-q", "-am", "the scripted agents"]);
    let out = modix(&sb, &["apply", &run]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(sb.read("calc.py").contains("/ len(values)"));
    assert!(!ran.exists(), "the planted filter ran");
}

/// `git replace` in the agents' repository would show modix's judge, its
/// secret scan and `modix diff` another tree than the one recorded: modix
/// reads objects as they are, so the step that changed a test is judged for
/// what it did.
#[test]
fn a_replace_ref_shows_modix_nothing_but_the_real_tree() {
    let sb = repo();
    scenarios::agent(
        &sb,
        &format!(
            r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then
{FIX}
        git add -A; FAKE=$(git write-tree)
        echo '# weakened' >> test_calc.py
        git add -A; REAL=$(git write-tree)
        git replace -f $REAL $FAKE; git reset -q
    else
{FIX}
    fi
{DONE}"#
        ),
    );
    scenarios::passing_tester(&sb);
    let r = sb.go_json("replace");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let reasons = reasons(&r);
    assert!(
        reasons.contains("changed protected path test_calc.py"),
        "{reasons}"
    );
    let id = short(&sb, &r.run_id());
    let test = git(&sb.root(), &["show", &format!("modix/{id}:test_calc.py")]);
    assert!(!test.contains("# weakened"), "{test}");
}

/// Wherever in a step's history a key is, the step is refused: a side
/// branch merged with `-s ours` (its commit is in the history, not in the
/// tree), the name of an empty file (no content line), a header of its own
/// in a commit object. And a ref an agent makes where modix keeps rejected
/// steps is never published.
#[test]
fn a_key_anywhere_in_a_steps_history_is_caught_and_planted_refs_stay_put() {
    let secret = "sk-ant-api03-ANYWHERE-IN-HISTORY-0123456789";
    // The script the test commits must not hold the key itself: the agent
    // puts it together.
    let key = r#"$K1-IN-HISTORY-0123456789"#;
    let gc = "git -c user.name=agent -c user.email=a@example.com";
    let cases = [
        format!(
            "git checkout -q -b side && echo \"k='{key}'\" > leak.py && git add leak.py && {gc} commit -qm side && git checkout -q - && {gc} merge -q -s ours --no-edit side && git branch -q -D side"
        ),
        format!(": > \"notes-{key}.txt\""),
        format!(
            "T=$(git write-tree) && P=$(git rev-parse HEAD) && C=$(printf 'tree %s\\nparent %s\\nauthor e <e@e> 1700000000 +0000\\ncommitter e <e@e> 1700000000 +0000\\nx-note %s\\n\\nagent\\n' $T $P \"{key}\" | git hash-object -t commit -w --stdin) && git update-ref HEAD $C"
        ),
    ];
    for case in cases {
        let sb = repo();
        let root = sb.root();
        scenarios::agent(
            &sb,
            &format!(
                "    S=$(basename \"$PWD\"); K1=sk-ant-api03-ANYWHERE\n    if [ \"$MODIX_ATTEMPT\" = 1 ]; then\n{FIX}\n        {case}\n        B=$(echo pla\"nted\"-marker | git hash-object -w --stdin); T=$(printf '100644 blob %s\\tp\\n' $B | git mktree)\n        git update-ref refs/modix/runs/$S/rejected/999 $({gc} commit-tree -m planted $T)\n    else\n{FIX}\n    fi\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        let out = sb
            .modix()
            .env("ANTHROPIC_API_KEY", secret)
            .args(["go", "--json", "hide a key"])
            .output()
            .unwrap();
        let r = GoResult::parse(&out);
        assert_eq!(r.code, Some(0), "{case}: {}", r.stderr);
        let reasons = reasons(&r);
        assert!(
            reasons.contains("writes the value of ANTHROPIC_API_KEY"),
            "{case}: {reasons}"
        );
        git(&root, &["commit", "-q", "-am", "the scripted agents"]);
        let out = modix(&sb, &["apply", &r.run_id()]);
        assert!(out.status.success(), "{}", output_text(&out));
        let out = modix(&sb, &["prune"]);
        assert!(out.status.success(), "{}", output_text(&out));
        let all = Command::new("git")
            .args(["cat-file", "--batch-all-objects", "--batch"])
            .current_dir(&root)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&all.stdout);
        assert!(
            !text.contains(secret),
            "{case}: the key is in the user's objects"
        );
        assert!(
            !text.contains("planted-marker"),
            "{case}: the planted ref was published"
        );
        assert_eq!(git(&root, &["for-each-ref", "refs/modix/"]), "", "{case}");
    }
}

/// FIFOs where git (and modix's walk) read their rules — a `.gitignore` in
/// a folder the step made, a `.gitattributes` at the top — and in place of
/// the `.git` link: git and modix would wait for a writer forever. They are
/// removed (git records no FIFO anyway), the step's record says so, and the
/// run goes on to DONE.
#[test]
fn fifos_where_git_reads_its_rules_never_hang_a_run() {
    let sb = repo();
    scenarios::agent(
        &sb,
        &format!(
            "{FIX}\n    mkdir -p sub && mkfifo sub/.gitignore && mkfifo .gitattributes && rm .git && mkfifo .git\n{DONE}"
        ),
    );
    scenarios::passing_tester(&sb);
    let out =
        scenarios::finished_within(sb.spawn(&["go", "--json", "fifos"]), "modix hung on a FIFO");
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    let notes = sb.invocation(&run, 2)["changes"]["notes"].to_string();
    assert!(
        notes.contains("sub/.gitignore") && notes.contains(".gitattributes"),
        "{notes}"
    );
    let root = ws_root(&sb, &run);
    assert!(root.join(".git").is_file());
}

/// A symlinked `.gitignore`: git does not follow one, so its rules hide
/// nothing from the record, and modix's watch must not follow it either.
/// Here its target, outside the workspace, says `sub/`: a read-only tester
/// that writes into `d/sub/` (which git records) is still caught, and the
/// run never reaches DONE on a tree other than the one recorded.
#[test]
fn a_symlinked_gitignore_hides_nothing_from_the_watch() {
    let sb = repo();
    let rules = sb.dir.path().join("rules");
    write_file(&rules, "sub/\n");
    agent_with_scope(
        &sb,
        &["calc.py", "d/.gitignore", "d/sub/keep"],
        &format!(
            "{FIX}\n    mkdir -p d/sub && ln -s {} d/.gitignore && echo keep > d/sub/keep\n{DONE}",
            rules.display()
        ),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] =
            serde_json::json!(["sh", "-c", "echo sneaky > d/sub/new.txt"]);
    });
    let r = sb.go_json("Fix mean()");
    let text = reasons(&r);
    assert_eq!(r.code, Some(1), "{text}\n{}", r.stderr);
    assert!(!text.contains("-> DONE"), "{text}");
    assert!(
        text.contains("may not change files") && text.contains("d/sub/new.txt"),
        "{text}"
    );
}

/// A repository an agent makes inside the tree (`git init` in a folder)
/// is one git records as a bare commit id, none of its files: the step is
/// refused, naming it, rather than recorded as a change `diff` and `apply`
/// cannot show or bring back. Once the next attempt removes its `.git`,
/// the files are recorded as the project's.
#[test]
fn a_git_repository_made_inside_the_workspace_is_refused_until_it_is_a_plain_folder() {
    let sb = repo();
    agent_with_scope(
        &sb,
        &[],
        &format!(
            r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then
      mkdir sub && cd sub && git init -q && echo hi > f && git add f && git -c user.name=a -c user.email=a@b commit -qm x && cd ..
    else
      rm -rf sub/.git
    fi
{FIX}
{DONE}"#
        ),
    );
    scenarios::passing_tester(&sb);
    let r = sb.go_json("Fix mean()");
    let text = reasons(&r);
    assert_eq!(r.code, Some(0), "{text}\n{}", r.stderr);
    assert!(
        text.contains("made a git repository inside the workspace: sub"),
        "{text}"
    );
    let branch = format!("modix/{}", short(&sb, &r.run_id()));
    let tree = git(&sb.root(), &["ls-tree", "-r", &branch, "--", "sub"]);
    assert!(
        tree.starts_with("100644 blob ") && tree.contains("\tsub/f"),
        "{tree}"
    );
}

/// The same FIFO left by an agent whose modix was killed: `resume` walks
/// the workspace before anything else and removes it, says so, and
/// finishes the run.
#[test]
fn a_fifo_left_by_an_abandoned_agent_never_hangs_resume() {
    let sb = repo();
    let marker = sb.dir.path().join("fifo-made");
    let executor = format!(
        "    if [ ! -e {m} ]; then mkdir -p sub && mkfifo sub/.gitignore && touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    let out = scenarios::finished_within(
        sb.spawn(&["resume", "--json", &run]),
        "resume hung on a FIFO",
    );
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let text = output_text(&out);
    assert!(text.contains("sub/.gitignore"), "{text}");
}

/// What an interrupted step left is judged for secrets when `resume`
/// discards it: a key there is not kept under `discarded/<n>` and never
/// reaches the user's repository.
#[test]
fn a_key_an_abandoned_agent_left_is_not_kept_on_resume() {
    let sb = repo();
    let root = sb.root();
    let secret = "sk-ant-api03-LEFT-BY-AN-ABANDONED-AGENT-0123";
    let marker = sb.dir.path().join("key-written");
    let executor = format!(
        "    if [ ! -e {m} ]; then echo \"k = '{secret}'\" > leak.py; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    scenarios::agent(&sb, &executor);
    scenarios::passing_tester(&sb);
    let mut child = sb
        .command(&["go", "--json", "crash mid-step"])
        .env("ANTHROPIC_API_KEY", secret)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    scenarios::wait_for(&marker);
    child.kill().unwrap();
    child.wait().unwrap();
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", secret)
        .args(["resume", "--json", &run])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let text = output_text(&out);
    assert!(
        text.contains("wrote the value of ANTHROPIC_API_KEY: it is not kept"),
        "{text}"
    );
    assert!(!text.contains(secret));
    assert_eq!(git(&root, &["for-each-ref", "refs/modix/"]), "");
    let all = Command::new("git")
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&all.stdout).contains(secret));
}

/// A step whose files git cannot record — here a `.gitattributes` asking
/// for UTF-16 a plain ASCII file does not have, so `git add` fails — is the
/// step's fault: the workspace goes back to the last recorded step, the step
/// is refused with git's words, and the next attempt is recorded. Before,
/// `go` ended with exit 3 and every `resume` failed the same way.
#[test]
fn a_step_git_cannot_record_is_refused_and_put_back() {
    for sb in [repo(), Sandbox::example()] {
        scenarios::agent(
            &sb,
            &format!(
                "    if [ \"$MODIX_ATTEMPT\" = 1 ]; then echo 'notes.txt working-tree-encoding=UTF-16' > .gitattributes; echo plain > notes.txt; fi\n{FIX}\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        let r = sb.go_json("unrecordable");
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let reasons = reasons(&r);
        assert!(
            reasons.contains("its files could not be recorded"),
            "{reasons}"
        );
        let root = ws_root(&sb, &r.run_id());
        assert!(!root.join(".gitattributes").exists());
        assert!(!root.join("notes.txt").exists());
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("/ len(values)")
        );
    }
}

/// A disk that fills while an agent works makes modix's own `git add`
/// fail: the machine's failure, not the step's — exit 3, the run left
/// resumable, and the agent's work not refused as its own fault.
#[test]
fn a_full_disk_under_modixs_own_git_stops_the_run_resumable() {
    let sb = repo();
    let real = which::which("git").unwrap();
    let full = sb.dir.path().join("disk-full");
    sb.fake_bin(
        "git",
        &format!(
            "#!/bin/sh\nif [ -e {f} ]; then for a in \"$@\"; do if [ \"$a\" = add ]; then echo 'error: unable to write new index file: No space left on device' >&2; echo 'fatal: adding files failed' >&2; exit 128; fi; done; fi\nexec {g} \"$@\"\n",
            f = full.display(),
            g = real.display()
        ),
    );
    scenarios::agent(
        &sb,
        &format!(
            "    if [ ! -e {f}.once ]; then touch {f} {f}.once; fi\n{FIX}\n{DONE}",
            f = full.display()
        ),
    );
    scenarios::passing_tester(&sb);
    let r = sb.go_json("the disk fills");
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    // The stream's last line is the error, one JSON line like the others.
    let error = &r.events.last().unwrap()["error"];
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device")
            && error["help"].as_str().unwrap().contains("free disk space"),
        "{error}"
    );
    let run = r.events[1]["run_id"].as_str().unwrap().to_owned();
    assert!(
        !reasons(&r).contains("could not be recorded"),
        "{}",
        reasons(&r)
    );
    assert_eq!(run_record(&sb, &run)["run"]["status"], "interrupted");
    std::fs::remove_file(&full).unwrap();
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// An agent killed in the middle of its own `git commit` (its timeout)
/// leaves `index.lock` in its repository; modix's next git there would fail
/// on it (exit 3, and every resume the same). The agent is gone when modix
/// records the step, so the lock is stale: it is removed, and said.
#[test]
fn git_locks_an_agent_left_behind_are_removed_before_modix_runs_git() {
    for sb in [repo(), Sandbox::example()] {
        scenarios::agent(
            &sb,
            &format!(
                "{FIX}\n    GD=$(git rev-parse --absolute-git-dir); touch $GD/index.lock $GD/HEAD.lock $GD/../index.lock\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        let r = sb.go_json("stale locks");
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let notes = sb.invocation(&r.run_id(), 2)["changes"]["notes"].to_string();
        assert!(
            notes.contains("git locks the agent left behind were removed")
                && notes.contains("index.lock"),
            "{notes}"
        );
    }
}

/// A FIFO a step leaves where git reads its rules in a folder git already
/// knows, while changing nothing git records: that step's settle still
/// looks (a FIFO there counts as a change to look at), removes it, and the
/// next step's git never waits on it.
#[test]
fn a_fifo_left_by_a_step_that_changed_nothing_else_is_removed_at_once() {
    let sb = repo();
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    mkfifo agents/.gitignore
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":["calc.py"],"acceptance":["tests pass"]}}]}}'
    ;;
  *)
{FIX}
{DONE}
    ;;
esac
"#
    ));
    scenarios::passing_tester(&sb);
    let out = scenarios::finished_within(
        sb.spawn(&["go", "--json", "a quiet fifo"]),
        "modix hung on a FIFO",
    );
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let notes = sb.invocation(&r.run_id(), 1)["changes"]["notes"].to_string();
    assert!(notes.contains("agents/.gitignore"), "{notes}");
}

/// The agents' repository borrows the user's objects whatever the user's
/// repository is like: a shallow clone (its boundary copied), a SHA-256
/// repository, a project checked out in a linked worktree of the user's own.
/// Each run reaches DONE, the run branch is published, and applies.
#[test]
fn runs_work_and_apply_in_shallow_sha256_and_linked_worktree_repositories() {
    for layout in ["shallow", "sha256", "linked"] {
        let sb = Sandbox::example();
        let root = sb.root();
        let elsewhere = sb.dir.path().join("elsewhere");
        let move_to_elsewhere = || {
            std::fs::rename(&root, &elsewhere).unwrap();
        };
        match layout {
            "shallow" => {
                move_to_elsewhere();
                git(&elsewhere, &["init", "-q"]);
                git(&elsewhere, &["add", "-A"]);
                git(&elsewhere, &["commit", "-q", "-m", "one"]);
                std::fs::write(elsewhere.join("notes.md"), "two\n").unwrap();
                git(&elsewhere, &["add", "-A"]);
                git(&elsewhere, &["commit", "-q", "-m", "two"]);
                let url = format!("file://{}", elsewhere.display());
                git(
                    sb.dir.path(),
                    &["clone", "-q", "--depth", "1", &url, "project"],
                );
                assert_eq!(
                    git(&root, &["rev-parse", "--is-shallow-repository"]),
                    "true\n"
                );
            }
            "sha256" => {
                git(&root, &["init", "-q", "--object-format=sha256"]);
                git(&root, &["add", "-A"]);
                git(&root, &["commit", "-q", "-m", "one"]);
            }
            _ => {
                move_to_elsewhere();
                git(&elsewhere, &["init", "-q"]);
                git(&elsewhere, &["add", "-A"]);
                git(&elsewhere, &["commit", "-q", "-m", "one"]);
                let project = root.display().to_string();
                git(
                    &elsewhere,
                    &["worktree", "add", "-q", "-b", "feature", &project],
                );
            }
        }
        scenarios::agent(&sb, &format!("{FIX}\n{DONE}"));
        scenarios::passing_tester(&sb);
        git(&root, &["commit", "-q", "-am", "the scripted agents"]);
        let r = sb.go_json("fix");
        assert_eq!(r.code, Some(0), "{layout}: {}", r.stderr);
        let id = short(&sb, &r.run_id());
        let fixed = git(&root, &["show", &format!("modix/{id}:calc.py")]);
        assert!(fixed.contains("/ len(values)"), "{layout}: {fixed}");
        let out = modix(&sb, &["apply", &r.run_id()]);
        assert!(out.status.success(), "{layout}: {}", output_text(&out));
        assert!(sb.read("calc.py").contains("/ len(values)"), "{layout}");
    }
}

/// An index broken by the agent — modix's private one beside its
/// repository, or the agent's own — makes git fail when the step is
/// recorded; the step is refused and both indexes are made again from the
/// last recorded step, so the run goes on.
#[test]
fn a_broken_index_is_made_again_and_the_run_goes_on() {
    for which in ["$GD/../index", "$GD/index"] {
        let sb = repo();
        scenarios::agent(
            &sb,
            &format!(
                "    GD=$(git rev-parse --absolute-git-dir)\n    if [ \"$MODIX_ATTEMPT\" = 1 ]; then echo garbage > {which}; fi\n{FIX}\n{DONE}"
            ),
        );
        scenarios::passing_tester(&sb);
        let r = sb.go_json("broken index");
        assert_eq!(r.code, Some(0), "{which}: {}", r.stderr);
        let reasons = reasons(&r);
        assert!(
            reasons.contains("its files could not be recorded"),
            "{which}: {reasons}"
        );
    }
}

/// `resume` refuses a workspace whose kept copy of its repository's
/// settings no longer matches what the store recorded (an agent wrote its
/// filter there too, then modix was killed), saying where the run's
/// recorded steps are and how to go on from them.
#[test]
fn resume_refuses_a_tampered_kept_copy_and_says_how_to_go_on() {
    let sb = repo();
    let marker = sb.dir.path().join("tampered");
    let executor = format!(
        "    if [ ! -e {m} ]; then GD=$(git rev-parse --absolute-git-dir); echo '[filter \"x\"]' >> $GD/../guard/config; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display()
    );
    let run = scenarios::crashed_while(&sb, &marker, &executor);
    let out = modix(&sb, &["resume", &run]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let text = output_text(&out);
    assert!(
        text.contains("was changed (not by modix)") && text.contains("modix go --base modix/"),
        "{text}"
    );
}

/// A step's record holds exactly what `git add -A` would: the settle hands
/// git the paths `ls-files -m -o` found rather than scanning the tree
/// twice, and that list has to cover every kind of change — an edit, a
/// delete, a mode change, new files in new folders, names git would read
/// as patterns (`*`, `:(glob)…`), spaces — and leave out what the
/// project ignores and what is over the size limit.
#[test]
fn a_steps_record_holds_every_kind_of_change_by_name_and_nothing_ignored() {
    let sb = repo();
    let root = sb.root();
    sb.write("gone.txt", "to delete\n");
    sb.write("run.sh", "echo run\n");
    sb.write("keep.txt", "unchanged\n");
    sb.write(".gitignore", "*.log\n");
    let files = [
        "calc.py",
        "gone.txt",
        "run.sh",
        "a b.txt",
        "*",
        ":(glob)x",
        "new/deep/f.txt",
        "big.bin",
        "debug.log",
    ];
    let listed = serde_json::to_string(&files).unwrap();
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":{listed},"acceptance":["tests pass"]}}]}}'
    ;;
  *)
{FIX}
    rm gone.txt
    chmod +x run.sh
    echo spaced > 'a b.txt'
    echo star > '*'
    echo magic > ':(glob)x'
    mkdir -p new/deep && echo deep > new/deep/f.txt
    echo noise > debug.log
    head -c 3000 /dev/zero > big.bin
{DONE}
    ;;
esac
"#
    ));
    scenarios::passing_tester(&sb);
    sb.edit_json(".modix/projects.json", |v| {
        v["max_file_bytes"] = 2000.into()
    });
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "files to change"]);
    let r = sb.go_json("change every kind of thing");
    assert!(
        reasons(&r).contains("big.bin"),
        "{}\n{}",
        reasons(&r),
        r.stderr
    );
    // The step that wrote big.bin was taken off; its record is kept.
    let step = git(
        &root,
        &["for-each-ref", "--format=%(refname)", "refs/modix/"],
    );
    let kept = step
        .lines()
        .find(|r| r.contains("/rejected/"))
        .unwrap_or_else(|| panic!("no rejected step: {step}\n{}", r.stderr));
    // Names as git quotes them off (core.quotePath is on in the test's git).
    let printed: Vec<String> = git(&root, &["ls-tree", "-r", "--name-only", "-z", kept])
        .split('\0')
        .map(str::to_owned)
        .collect();
    for name in [
        "*",
        ":(glob)x",
        "a b.txt",
        "new/deep/f.txt",
        "run.sh",
        "keep.txt",
    ] {
        assert!(
            printed.iter().any(|p| p == name),
            "{name} not recorded: {printed:?}"
        );
    }
    for name in ["gone.txt", "debug.log", "big.bin"] {
        assert!(
            !printed.iter().any(|p| p == name),
            "{name} recorded: {printed:?}"
        );
    }
    let mode = git(&root, &["ls-tree", kept, "run.sh"]);
    assert!(mode.starts_with("100755"), "{mode}");
}
