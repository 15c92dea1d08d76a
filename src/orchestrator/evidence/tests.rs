//! Each recogniser on its runner's real output (`tests/fixtures/runners/`,
//! captured where the tool was installed; see its README).

use super::*;

macro_rules! sample {
    ($name:literal) => {
        include_str!(concat!("../../../tests/fixtures/runners/", $name, ".out"))
    };
}

fn tally(ran: u64, passed: u64, failed: u64, skipped: u64) -> Option<Tally> {
    Some(Tally {
        ran,
        passed,
        failed,
        skipped,
        unit: Unit::Tests,
    })
}

fn as_(runner: Runner, text: &str) -> Option<Tally> {
    read(Some(runner), text).tally
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

#[test]
fn unittest_summaries() {
    use Runner::Unittest as U;
    assert_eq!(as_(U, sample!("unittest_ok")), tally(5, 5, 0, 0));
    assert_eq!(as_(U, sample!("unittest_fail")), tally(5, 3, 2, 0));
    assert_eq!(as_(U, sample!("unittest_none")), tally(0, 0, 0, 0));
    // The module under test raised SkipTest on import: nothing ran.
    assert_eq!(as_(U, sample!("unittest_skipmod")), tally(0, 0, 0, 1));
    // A test module that failed to import is no test that ran.
    assert_eq!(as_(U, sample!("unittest_importerr")), tally(0, 0, 0, 0));
    assert_eq!(as_(U, ""), None);
    assert_eq!(
        as_(U, "Ran 3 tests in 0.1s\n\nNO TESTS RAN\n"),
        tally(3, 3, 0, 0)
    );
}

#[test]
fn pytest_summaries() {
    use Runner::Pytest as P;
    // 1 failed, 2 passed, 1 skipped, 1 xfailed: an xfail's body ran.
    for fail in [
        sample!("pytest_fail"),
        sample!("pytest_fail_q"),
        sample!("pytest_fail_ra"),
        sample!("pytest_fail_color"),
    ] {
        assert_eq!(as_(P, fail), tally(4, 3, 1, 1));
    }
    assert_eq!(as_(P, sample!("pytest_fail_x")), tally(2, 1, 1, 0));
    for ok in [
        sample!("pytest_ok"),
        sample!("pytest_ok_q"),
        sample!("pytest_ok_color"),
        sample!("pytest_ok_xdist"),
    ] {
        assert_eq!(as_(P, ok), tally(3, 3, 0, 0));
    }
    assert_eq!(as_(P, sample!("pytest_skip_q")), tally(2, 2, 0, 1));
    assert_eq!(as_(P, sample!("pytest_warn")), tally(2, 2, 0, 0));
    for none in [sample!("pytest_none"), sample!("pytest_none_q")] {
        assert_eq!(as_(P, none), tally(0, 0, 0, 0));
    }
    assert_eq!(
        as_(P, sample!("pytest_collection_error")),
        tally(0, 0, 1, 0)
    );
    // `-qq` (`addopts = "-q"` and `pytest -q`) prints no summary line: its
    // progress line is the count.
    assert_eq!(as_(P, sample!("pytest_ok_qq")), tally(3, 3, 0, 0));
    assert_eq!(as_(P, sample!("pytest_fail_qq")), tally(4, 3, 1, 1));
    // pytest before 5.4 said `seconds`.
    assert_eq!(as_(P, "5 passed in 0.12 seconds"), tally(5, 5, 0, 0));
}

#[test]
fn cargo_and_nextest_summaries() {
    // The unit tests' binary and the doc-tests, summed.
    assert_eq!(as_(Runner::Cargo, sample!("cargo_ok")), tally(3, 3, 0, 1));
    assert_eq!(as_(Runner::Cargo, sample!("cargo_ok_q")), tally(3, 3, 0, 1));
    assert_eq!(as_(Runner::Cargo, sample!("cargo_fail")), tally(2, 1, 1, 1));
    assert_eq!(
        as_(Runner::Cargo, sample!("cargo_filtered")),
        tally(0, 0, 0, 0)
    );
    // A workspace of two crates: each one's unit tests, integration tests
    // and doc-tests, and a binary's empty harness — seven summaries.
    for ok in [
        sample!("cargo_workspace"),
        sample!("cargo_workspace_q"),
        // `-- --color always`: libtest's terminfo colours (`ESC ( B`).
        sample!("cargo_workspace_color"),
    ] {
        assert_eq!(as_(Runner::Cargo, ok), tally(8, 8, 0, 2));
    }
    assert_eq!(
        as_(Runner::Cargo, sample!("cargo_workspace_fail")),
        tally(8, 7, 1, 2)
    );
    assert_eq!(
        as_(Runner::Nextest, sample!("nextest_ok")),
        tally(2, 2, 0, 1)
    );
    assert_eq!(
        as_(Runner::Nextest, sample!("nextest_fail")),
        tally(2, 1, 1, 1)
    );
    assert_eq!(
        as_(Runner::Nextest, sample!("nextest_none")),
        tally(0, 0, 0, 3)
    );
}

#[test]
fn go_summaries() {
    let packages = |ran, passed, failed| {
        Some(Tally {
            ran,
            passed,
            failed,
            skipped: 0,
            unit: Unit::Packages,
        })
    };
    assert_eq!(as_(Runner::Go, sample!("go_ok")), packages(2, 2, 0));
    assert_eq!(as_(Runner::Go, sample!("go_none")), packages(0, 0, 0));
    assert_eq!(as_(Runner::Go, sample!("go_fail")), tally(1, 0, 1, 0));
    // `-v`: top-level tests counted, subtests not.
    assert_eq!(as_(Runner::Go, sample!("go_verbose")), tally(2, 2, 0, 1));
}

#[test]
fn jest_summaries() {
    use Runner::Jest as J;
    for ok in [
        sample!("jest_ok"),
        sample!("jest_ok_ci"),
        sample!("jest_ok_color"),
        sample!("jest_ok_npm"),
    ] {
        assert_eq!(as_(J, ok), tally(4, 4, 0, 0));
    }
    // 1 failed, 1 skipped, 1 todo, 1 passed.
    for fail in [sample!("jest_fail"), sample!("jest_fail_silent")] {
        assert_eq!(as_(J, fail), tally(2, 1, 1, 2));
    }
    assert_eq!(as_(J, sample!("jest_skip")), tally(1, 1, 0, 3));
    for none in [sample!("jest_none"), sample!("jest_none_pass")] {
        assert_eq!(as_(J, none), tally(0, 0, 0, 0));
    }
}

#[test]
fn vitest_summaries() {
    use Runner::Vitest as V;
    // vitest colours its output even into a pipe.
    for ok in [sample!("vitest_ok"), sample!("vitest_ok_npm")] {
        assert_eq!(as_(V, ok), tally(4, 4, 0, 0));
    }
    for fail in [
        sample!("vitest_fail"),
        sample!("vitest_fail_nocolor"),
        sample!("vitest_fail_dot"),
    ] {
        assert_eq!(as_(V, fail), tally(2, 1, 1, 2));
    }
    assert_eq!(as_(V, sample!("vitest_skip")), tally(1, 1, 0, 2));
    assert_eq!(as_(V, sample!("vitest_none")), tally(0, 0, 0, 0));
}

#[test]
fn mocha_and_node_test_summaries() {
    use Runner::Mocha as M;
    for ok in [
        sample!("mocha_ok"),
        sample!("mocha_ok_color"),
        sample!("mocha_ok_npm"),
    ] {
        assert_eq!(as_(M, ok), tally(2, 2, 0, 0));
    }
    assert_eq!(as_(M, sample!("mocha_fail")), tally(2, 1, 1, 2));
    assert_eq!(as_(M, sample!("mocha_skip")), tally(1, 1, 0, 1));
    // `--reporter tap` ends with TAP's counts.
    assert_eq!(as_(M, sample!("mocha_fail_tap")), tally(2, 1, 1, 0));
    // No test files: an error, no summary.
    assert_eq!(as_(M, sample!("mocha_none")), None);
    for ok in [sample!("node_ok_tap"), sample!("node_ok_spec")] {
        assert_eq!(as_(Runner::NodeTest, ok), tally(2, 2, 0, 1));
    }
    assert_eq!(
        as_(Runner::NodeTest, sample!("node_fail_tap")),
        tally(2, 1, 1, 1)
    );
    assert_eq!(
        as_(Runner::NodeTest, sample!("node_none")),
        tally(0, 0, 0, 0)
    );
}

#[test]
fn escapes_and_carriage_returns_are_no_obstacle() {
    assert_eq!(
        as_(
            Runner::Vitest,
            "\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[32m3 passed\x1b[39m\x1b[22m\x1b[90m (3)\x1b[39m\n"
        ),
        tally(3, 3, 0, 0)
    );
    // A hyperlink (OSC 8) around a count, a progress line redrawn with `\r`,
    // Windows line ends.
    assert_eq!(
        as_(
            Runner::Jest,
            "\x1b]8;;file:///src\x1b\\x\x1b]8;;\x1b\\\nRUNS a.test.js\rTests:       2 passed, 2 total\r\n"
        ),
        tally(2, 2, 0, 0)
    );
    assert_eq!(
        as_(Runner::Unittest, "Ran 2 tests in 0.001s\r\n\r\nOK\r\n"),
        tally(2, 2, 0, 0)
    );
}

#[test]
fn commands_are_recognised_by_their_words() {
    let of = |w: &[&str]| runner_of(&argv(w), None);
    assert_eq!(
        of(&["python3", "-m", "unittest", "-q"]),
        Some(Runner::Unittest)
    );
    assert_eq!(
        of(&["/usr/bin/python", "-munittest"]),
        Some(Runner::Unittest)
    );
    assert_eq!(of(&["python3", "-m", "pytest", "-x"]), Some(Runner::Pytest));
    assert_eq!(of(&["uv", "run", "pytest"]), Some(Runner::Pytest));
    assert_eq!(of(&["cargo", "test", "--locked"]), Some(Runner::Cargo));
    assert_eq!(of(&["cargo", "+nightly", "test"]), Some(Runner::Cargo));
    assert_eq!(of(&["cargo", "nextest", "run"]), Some(Runner::Nextest));
    assert_eq!(of(&["go", "test", "./..."]), Some(Runner::Go));
    assert_eq!(of(&["npx", "jest", "--ci"]), Some(Runner::Jest));
    assert_eq!(
        of(&["node_modules/.bin/vitest", "run"]),
        Some(Runner::Vitest)
    );
    assert_eq!(of(&["node", "--test"]), Some(Runner::NodeTest));
    assert_eq!(
        of(&["sh", "-c", "cd pkg && pytest -q"]),
        Some(Runner::Pytest)
    );
    for unknown in [
        &["make", "test"][..],
        &["true"],
        &["cargo", "build"],
        &["go", "vet"],
        &["tox"],
        &["./run-tests.sh"],
        &["npm", "test"],
    ] {
        assert_eq!(of(unknown), None, "{unknown:?}");
    }
}

#[test]
fn a_package_manager_runs_the_script_the_run_started_with() {
    let pkg =
        r#"{"scripts": {"test": "npm run unit --silent", "unit": "jest --ci", "e2e": "mocha"}}"#;
    let of = |w: &[&str]| runner_of(&argv(w), Some(pkg));
    assert_eq!(of(&["npm", "test"]), Some(Runner::Jest));
    assert_eq!(of(&["yarn", "test"]), Some(Runner::Jest));
    assert_eq!(of(&["pnpm", "run", "e2e"]), Some(Runner::Mocha));
    assert_eq!(of(&["npm", "run", "lint"]), None);
    assert_eq!(runner_of(&argv(&["npm", "test"]), Some("not json")), None);
}

#[test]
fn an_unrecognised_command_is_read_with_every_recogniser() {
    let r = read(None, &format!("make: entering\n{}", sample!("unittest_ok")));
    assert_eq!(
        (r.runner, r.tally, r.by_command),
        (Some(Runner::Unittest), tally(5, 5, 0, 0), false)
    );
    // nextest quotes cargo's summaries of each binary: its own wins.
    assert_eq!(
        read(None, sample!("nextest_fail")).runner,
        Some(Runner::Nextest)
    );
    // TAP's counts are node --test's, though mocha's TAP prints them too.
    assert_eq!(
        read(None, sample!("node_ok_tap")).runner,
        Some(Runner::NodeTest)
    );
    let r = read(None, "all good\n");
    assert_eq!((r.runner, r.tally), (None, None));
    // A known command that printed no summary: no count, known runner.
    let r = read(Some(Runner::Unittest), "");
    assert_eq!(
        (r.runner, r.tally, r.by_command),
        (Some(Runner::Unittest), None, true)
    );
}

#[test]
fn tallies_describe_themselves() {
    assert_eq!(tally(5, 5, 0, 0).unwrap().describe(), "5 ran");
    assert_eq!(
        tally(4, 3, 1, 2).unwrap().describe(),
        "4 ran (1 failed, 2 skipped)"
    );
    let p = Tally {
        unit: Unit::Packages,
        ..tally(3, 3, 0, 0).unwrap()
    };
    assert_eq!(p.describe(), "3 packages ran");
}
