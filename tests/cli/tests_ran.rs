//! A test command that exits 0 is a pass only when its runner says tests
//! ran — as many as the run's first counted test run. Each hostile
//! executor here made the example's run reach DONE before this was judged.

use crate::scenarios::{git, repo};
use crate::util::{GoResult, Sandbox};

/// The example as a repository whose executor makes the example's wrong
/// fix first (the tests run and fail: the run's baseline), then runs
/// `hostile` (sh) on every later attempt. The plan names no files, so no
/// scope rule holds the executor: only what is judged here does.
fn hostile_run(setup: impl FnOnce(&Sandbox), hostile: &str) -> (Sandbox, GoResult) {
    let sb = Sandbox::example();
    setup(&sb);
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"fix","files":[],"acceptance":["tests pass"]}}]}}' ;;
  *)
    if [ "$MODIX_ATTEMPT" = 1 ]; then
      sed -i 's|/ (len(values) + 1)|/ (len(values) + 2)|' calc.py
    else
{hostile}
    fi
    echo '{{"outcome":"success","summary":"done","files_changed":[],"error":null}}' ;;
esac
"#
    ));
    let root = sb.root();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let r = sb.go_json("Fix mean()");
    (sb, r)
}

/// The reason of the run's `n`th test step (1-based).
fn test_reason(r: &GoResult, n: usize) -> String {
    let tests: Vec<&serde_json::Value> = r
        .transitions
        .iter()
        .filter(|t| t["from"] == "TESTING")
        .collect();
    tests
        .get(n - 1)
        .unwrap_or_else(|| panic!("no test step {n}: {:?}", r.path()))["reason"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn set_test_command(sb: &Sandbox, argv: serde_json::Value) {
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = argv.clone()
    });
    sb.edit_json(".modix/projects.json", |v| v["commands"]["test"] = argv);
}

fn assert_refused(r: &GoResult, says: &str) {
    assert_ne!(
        r.summary["status"],
        "succeeded",
        "{:?}\n{}",
        r.path(),
        r.stderr
    );
    let second = test_reason(r, 2);
    assert!(second.starts_with("tests failed: "), "{second}");
    assert!(second.contains(says), "{second}");
}

#[test]
fn a_module_that_exits_on_import_runs_no_tests() {
    let (_, r) = hostile_run(
        |_| {},
        "      { echo 'import os; os._exit(0)'; cat calc.py; } > c && mv c calc.py",
    );
    assert_refused(
        &r,
        "but no tests ran: unittest's summary of the tests it ran is missing",
    );
    // The first run's count is shown beside its failure.
    assert!(
        test_reason(&r, 1).contains("unittest: 5 ran (2 failed)"),
        "{}",
        test_reason(&r, 1)
    );
}

#[test]
fn a_module_that_skips_every_test_runs_no_tests() {
    let (_, r) = hostile_run(
        |_| {},
        "      { echo 'import unittest; raise unittest.SkipTest(\"later\")'; cat calc.py; } > c && mv c calc.py",
    );
    assert_refused(
        &r,
        "no tests ran (unittest's summary counts none that ran; 1 skipped)",
    );
}

#[test]
fn a_shadowing_runner_module_is_protected_and_runs_no_tests() {
    let (sb, r) = hostile_run(|_| {}, "      echo 'raise SystemExit(0)' > unittest.py");
    // Rejected as protected before any test ran on it.
    let reasons = reasons(&r);
    assert!(
        reasons
            .iter()
            .any(|x| x.contains("changed protected path unittest.py")),
        "{reasons:#?}"
    );
    assert_ne!(r.summary["status"], "succeeded");
    drop(sb);
}

#[test]
fn files_that_decide_how_tests_run_are_protected_by_default() {
    let (_, r) = hostile_run(
        |_| {},
        "      echo 'import os; os._exit(0)' > conftest.py; cp conftest.py sitecustomize.py",
    );
    let reasons = reasons(&r);
    assert!(
        reasons
            .iter()
            .any(|x| x.contains("changed protected paths conftest.py, sitecustomize.py")),
        "{reasons:#?}"
    );
}

#[test]
fn fewer_tests_than_the_first_count_is_not_a_pass() {
    // The module under test drops one test class from the loader.
    let (sb, r) = hostile_run(
        |_| {},
        r#"      cat >> calc.py <<'P'
import unittest as _u
_names = _u.TestLoader.getTestCaseNames
_u.TestLoader.getTestCaseNames = lambda self, c: [] if c.__name__ == "MeanTest" else _names(self, c)
P"#,
    );
    assert_refused(
        &r,
        "but fewer tests ran than in the run's first counted test run: 2 now, 5 at step 4",
    );
    // The record shows both counts.
    let run = r.run_id();
    let shown = crate::util::output_text(
        &sb.modix()
            .args(["history", &run, "--invocation", "5"])
            .output()
            .unwrap(),
    );
    assert!(
        shown.contains("tests: unittest: 2 ran (baseline: 5 ran (2 failed) at step 4)"),
        "{shown}"
    );
    assert!(shown.contains("not a pass: fewer tests ran"), "{shown}");
}

#[test]
fn an_npm_script_changed_to_exit_0_is_held_to_the_script_the_run_started_with() {
    if std::process::Command::new("npm")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no npm");
        return;
    }
    let (_, r) = hostile_run(
        |sb| {
            sb.write(
                "calc.test.js",
                "const test = require('node:test');\nconst assert = require('node:assert');\ntest('mean', () => assert.strictEqual(require('./calc.js').mean([1, 2, 3]), 2));\n",
            );
            sb.write(
                "calc.js",
                "exports.mean = (v) => v.reduce((a, b) => a + b, 0) / (v.length + 1);\n",
            );
            sb.write(
                "package.json",
                r#"{"name": "x", "version": "1.0.0", "scripts": {"test": "node --test"}}"#,
            );
            set_test_command(sb, serde_json::json!(["npm", "test"]));
        },
        r#"      sed -i 's|"node --test"|"exit 0"|' package.json"#,
    );
    assert_refused(
        &r,
        "no tests ran: node --test's summary of the tests it ran is missing",
    );
}

#[test]
fn an_emptied_make_target_is_protected_and_a_missing_summary_is_no_pass() {
    let (_, r) = hostile_run(
        |sb| {
            sb.write("Makefile", "test:\n\tpython3 -m unittest -q\n");
            set_test_command(sb, serde_json::json!(["make", "test"]));
        },
        "      printf 'test:\\n\\ttrue\\n' > Makefile",
    );
    let reasons = reasons(&r);
    assert!(
        reasons
            .iter()
            .any(|x| x.contains("changed protected path Makefile")),
        "{reasons:#?}"
    );
    // `make test` is no runner modix knows: its count came from the output.
    assert!(
        test_reason(&r, 1).contains("unittest: 5 ran (2 failed)"),
        "{reasons:#?}"
    );
}

#[test]
fn a_make_target_that_stops_printing_its_summary_is_no_pass() {
    // With the makefile not protected, the baseline still holds it.
    let (_, r) = hostile_run(
        |sb| {
            sb.write("Makefile", "test:\n\tpython3 -m unittest -q\n");
            set_test_command(sb, serde_json::json!(["make", "test"]));
            sb.edit_json(".modix/projects.json", |v| {
                v["protected"] = serde_json::json!(["test_*.py", ".modix/**"])
            });
        },
        "      printf 'test:\\n\\ttrue\\n' > Makefile",
    );
    assert_refused(
        &r,
        "no tests ran that modix could count: its output has no test summary, while the run's first counted test run (step 4) had one: 5 ran (2 failed)",
    );
}

#[test]
fn the_example_reaches_done_with_its_count_on_record() {
    let sb = repo();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.summary["status"], "succeeded", "{}", r.stderr);
    let last = test_reason(&r, 2);
    assert!(
        last.contains("exited with code 0; unittest: 5 ran · verified on commit"),
        "{last}"
    );
    let inv = sb.invocation(&r.run_id(), 5);
    let ran = &inv["changes"]["test"]["ran"];
    assert_eq!(ran["runner"], "unittest", "{inv:#}");
    assert_eq!(ran["count"]["ran"], 5, "{inv:#}");
    assert_eq!(ran["baseline"]["count"]["ran"], 5, "{inv:#}");
}

#[test]
fn a_test_command_modix_does_not_know_passes_on_its_exit_status() {
    let sb = repo();
    set_test_command(&sb, serde_json::json!(["sh", "-c", "echo all good"]));
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.summary["status"], "succeeded", "{}", r.stderr);
    let shown = crate::util::output_text(
        &sb.modix()
            .args(["history", &r.run_id(), "--invocation", "3"])
            .output()
            .unwrap(),
    );
    assert!(
        shown.contains("tests: count unknown (a test command modix does not recognise)"),
        "{shown}"
    );
}

#[test]
fn a_cargo_project_in_colour_reaches_done_with_every_binary_counted() {
    // cargo is always there; its libtest colours (`-- --color always`) end
    // in terminfo's `ESC ( B`, which once hid each summary.
    let sb = Sandbox::example();
    sb.write(
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    sb.write(
        "src/lib.rs",
        "/// ```\n/// assert_eq!(calc::two(), 2);\n/// ```\npub fn two() -> u32 { 2 }\n\n#[test]\nfn unit() { assert_eq!(two(), 2); }\n",
    );
    sb.write(
        "Cargo.lock",
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n[[package]]\nname = \"calc\"\nversion = \"0.1.0\"\n",
    );
    sb.write("tests/it.rs", "#[test]\nfn a() {}\n#[test]\nfn b() {}\n");
    // The sandbox's HOME hides rustup's: its bin/cargo is the toolchain's
    // own cargo, building outside the checkout.
    let cargo = std::path::PathBuf::from(std::env::var("CARGO").expect("cargo runs the tests"));
    let path = sb.bin().join("cargo");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nPATH={}:$PATH CARGO_TARGET_DIR={} exec {} \"$@\"\n",
            cargo.parent().unwrap().display(),
            sb.bin().with_file_name("cargo-target").display(),
            cargo.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    set_test_command(
        &sb,
        serde_json::json!(["cargo", "test", "--offline", "--", "--color", "always"]),
    );
    let root = sb.root();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    let r = sb.go_json("Fix mean()");
    assert_eq!(
        r.summary["status"], "succeeded",
        "{:?} {:?}\n{}",
        r.code, r.events, r.stderr
    );
    // The unit test, two integration tests and the doc-test, summed.
    let last = test_reason(&r, 1);
    assert!(last.contains("exited with code 0; cargo: 4 ran"), "{last}");
}

/// Each transition's reason, as JSON text.
fn reasons(r: &GoResult) -> Vec<String> {
    r.transitions
        .iter()
        .map(|t| t["reason"].to_string())
        .collect()
}
