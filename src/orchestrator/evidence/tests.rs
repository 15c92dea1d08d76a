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
    assert_eq!(as_(P, sample!("pytest_fail")), tally(5, 4, 1, 1));
    assert_eq!(as_(P, sample!("pytest_ok_q")), tally(5, 5, 0, 0));
    assert_eq!(as_(P, sample!("pytest_none")), tally(0, 0, 0, 0));
    assert_eq!(
        as_(P, sample!("pytest_collection_error")),
        tally(0, 0, 1, 0)
    );
    assert_eq!(as_(P, "5 passed, 1 warning in 0.01s"), tally(5, 5, 0, 0));
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
fn javascript_summaries() {
    assert_eq!(as_(Runner::Jest, sample!("jest_fail")), tally(4, 3, 1, 1));
    assert_eq!(as_(Runner::Jest, sample!("jest_none")), tally(0, 0, 0, 0));
    assert_eq!(as_(Runner::Vitest, sample!("vitest_ok")), tally(4, 4, 0, 1));
    assert_eq!(
        as_(Runner::Vitest, sample!("vitest_none")),
        tally(0, 0, 0, 0)
    );
    assert_eq!(as_(Runner::Mocha, sample!("mocha_fail")), tally(4, 3, 1, 1));
    assert_eq!(as_(Runner::Mocha, sample!("mocha_none")), tally(0, 0, 0, 0));
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
    // Colours are no obstacle.
    assert_eq!(
        as_(
            Runner::Vitest,
            "\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[32m3 passed\x1b[39m\x1b[22m\x1b[90m (3)\x1b[39m\n"
        ),
        tally(3, 3, 0, 0)
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
