//! Evidence that tests ran: which runner a test command is, and what that
//! runner's own summary says ran (`Ran 5 tests` … `OK`, `5 passed in 0.1s`,
//! `test result: ok. 5 passed; …`). An exit code alone says nothing about
//! whether tests ran: a module that calls `os._exit(0)` on import, a
//! `scripts.test` of `exit 0` or an emptied `make test` all exit 0 having run
//! none. The judge ([`super::work`]) decides with what is read here; this
//! module only reads.
//!
//! One table, [`RECOGNISERS`]: each runner's words in a command line and its
//! summary's shape. A command is recognised by its words (a wrapper — `npm
//! test`, `sh -c "…"` — by the words it runs); an unrecognised one's output
//! is read with every recogniser in turn, so `make test` or `tox` that run a
//! known runner still get a count.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A test runner whose summary modix reads.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::Display, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Runner {
    Unittest,
    Pytest,
    Nextest,
    Cargo,
    Go,
    Jest,
    Vitest,
    Mocha,
    #[strum(serialize = "node --test")]
    NodeTest,
}

/// What a summary counts: tests, or (`go test` without `-v`, which prints
/// one line a package) packages whose tests ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    #[default]
    Tests,
    Packages,
}

/// How many tests a run's summary says ran. `ran` counts those whose body
/// ran (passed or failed); skipped ones, and a module that failed to import,
/// are not tests that ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub ran: u64,
    pub passed: u64,
    pub failed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    #[serde(default, skip_serializing_if = "is_tests")]
    pub unit: Unit,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_tests(u: &Unit) -> bool {
    *u == Unit::Tests
}

impl Tally {
    fn add(self, o: Tally) -> Tally {
        Tally {
            ran: self.ran + o.ran,
            passed: self.passed + o.passed,
            failed: self.failed + o.failed,
            skipped: self.skipped + o.skipped,
            unit: o.unit,
        }
    }

    /// `5 ran`, `4 ran (1 failed, 2 skipped)`, `3 packages ran`.
    pub fn describe(&self) -> String {
        let what = match self.unit {
            Unit::Tests => "",
            Unit::Packages => " packages",
        };
        let mut detail = Vec::new();
        if self.failed > 0 {
            detail.push(format!("{} failed", self.failed));
        }
        if self.skipped > 0 {
            detail.push(format!("{} skipped", self.skipped));
        }
        match detail.is_empty() {
            true => format!("{}{what} ran", self.ran),
            false => format!("{}{what} ran ({})", self.ran, detail.join(", ")),
        }
    }
}

/// What a test run's output says: the runner (by its command, or by the
/// summary found) and its count; no count when the summary is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub runner: Option<Runner>,
    pub tally: Option<Tally>,
    /// The runner is known from the command itself: a missing summary is
    /// then evidence that it never got to its tests.
    pub by_command: bool,
}

/// One runner: how its command line looks, how its summary reads.
struct Recogniser {
    runner: Runner,
    command: fn(&[&str]) -> bool,
    summary: fn(&str) -> Option<Tally>,
}

/// In the order an unrecognised command's output is read: nextest before
/// cargo (its output quotes cargo's per-binary summaries), `node --test`
/// before mocha (whose TAP reporter ends with the same counts).
const RECOGNISERS: &[Recogniser] = &[
    Recogniser {
        runner: Runner::Unittest,
        command: |w| module(w, "unittest"),
        summary: unittest,
    },
    Recogniser {
        runner: Runner::Pytest,
        command: |w| module(w, "pytest") || has(w, &["pytest", "py.test"]),
        summary: pytest,
    },
    Recogniser {
        runner: Runner::Nextest,
        command: |w| has(w, &["nextest", "cargo-nextest"]),
        summary: nextest,
    },
    Recogniser {
        runner: Runner::Cargo,
        command: |w| subcommand(w, "cargo", "test"),
        summary: cargo,
    },
    Recogniser {
        runner: Runner::Go,
        command: |w| subcommand(w, "go", "test"),
        summary: go,
    },
    Recogniser {
        runner: Runner::Jest,
        command: |w| has(w, &["jest"]),
        summary: jest,
    },
    Recogniser {
        runner: Runner::Vitest,
        command: |w| has(w, &["vitest"]),
        summary: vitest,
    },
    Recogniser {
        runner: Runner::NodeTest,
        command: |w| has(w, &["node"]) && w.contains(&"--test"),
        summary: node_test,
    },
    Recogniser {
        runner: Runner::Mocha,
        command: |w| has(w, &["mocha", "_mocha"]),
        summary: mocha,
    },
];

/// The runner a test command runs, if modix knows it. `package_json` is
/// the project's as the run started (an agent's later `scripts.test` of
/// `exit 0` does not make `npm test` another command).
pub fn runner_of(argv: &[String], package_json: Option<&str>) -> Option<Runner> {
    let words = words(argv, package_json);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    RECOGNISERS
        .iter()
        .find(|r| (r.command)(&words))
        .map(|r| r.runner)
}

/// What `output` (stdout and stderr) says ran: read as `runner`'s when the
/// command is known, else with each recogniser until one finds a summary.
pub fn read(runner: Option<Runner>, output: &str) -> Reading {
    let text = plain(output);
    match runner {
        Some(runner) => Reading {
            runner: Some(runner),
            tally: RECOGNISERS
                .iter()
                .find(|r| r.runner == runner)
                .and_then(|r| (r.summary)(&text)),
            by_command: true,
        },
        None => RECOGNISERS
            .iter()
            .find_map(|r| (r.summary)(&text).map(|t| (r.runner, t)))
            .map_or(
                Reading {
                    runner: None,
                    tally: None,
                    by_command: false,
                },
                |(runner, tally)| Reading {
                    runner: Some(runner),
                    tally: Some(tally),
                    by_command: false,
                },
            ),
    }
}

/// The command's words, basenames of paths, with every argument that holds
/// spaces split (`sh -c "pytest -q"`) and a package manager's `test` script
/// replaced by what it runs (a few levels: `npm test` → `npm run unit` →
/// `jest`).
fn words(argv: &[String], package_json: Option<&str>) -> Vec<String> {
    let scripts: Option<Value> = package_json
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .and_then(|p| p.get("scripts").cloned());
    let mut words: Vec<String> = argv
        .iter()
        .flat_map(|a| a.split_whitespace())
        .map(basename)
        .collect();
    for _ in 0..3 {
        let Some(script) = script_run(&words) else {
            break;
        };
        match scripts.as_ref().and_then(|s| s.get(script)?.as_str()) {
            Some(body) => words = body.split_whitespace().map(basename).collect(),
            None => break,
        }
    }
    words
}

/// The `package.json` script a package manager's command line runs:
/// `npm test`, `npm t`, `npm run test`, `yarn test`, `pnpm run unit`.
fn script_run(words: &[String]) -> Option<&str> {
    let at = words
        .iter()
        .position(|w| matches!(w.as_str(), "npm" | "yarn" | "pnpm"))?;
    let rest: Vec<&str> = words[at + 1..]
        .iter()
        .map(String::as_str)
        .filter(|w| !w.starts_with('-'))
        .collect();
    match rest.as_slice() {
        ["test" | "t", ..] => Some("test"),
        ["run" | "run-script", name, ..] => Some(name),
        _ => None,
    }
}

fn basename(word: &str) -> String {
    word.rsplit('/').next().unwrap_or(word).to_owned()
}

/// `python -m NAME` (or `-mNAME`).
fn module(words: &[&str], name: &str) -> bool {
    let joined = format!("-m{name}");
    words.windows(2).any(|w| w == ["-m", name]) || words.contains(&joined.as_str())
}

fn has(words: &[&str], names: &[&str]) -> bool {
    words.iter().any(|w| names.contains(w))
}

/// `tool … sub`: the first word after `tool` that is not an option.
fn subcommand(words: &[&str], tool: &str, sub: &str) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        *w == tool
            && words[i + 1..]
                .iter()
                .find(|w| !w.starts_with('-') && !w.starts_with('+'))
                == Some(&sub)
    })
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a recogniser's pattern compiles")
}

/// The output as a terminal shows it, once for every recogniser: escape
/// sequences gone — colours (`ESC [ 32 m`, which vitest prints even into a
/// pipe), libtest's terminfo reset (`ESC ( B`, `-- --color always`), a
/// hyperlink (`ESC ] 8 ; ; … ESC \`) — and each `\r` (a Windows line end, a
/// progress line redrawn over) a line break, so a summary starts its line.
fn plain(text: &str) -> String {
    static ESCAPE: LazyLock<Regex> = LazyLock::new(|| {
        re(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()*+].|[@-Z\\-_])")
    });
    ESCAPE
        .replace_all(text, "")
        .replace("\r\n", "\n")
        .replace('\r', "\n")
}

/// `N word` pairs of a summary line: `2 failed, 3 passed` → [(2, failed), …].
fn counts(line: &str) -> Vec<(u64, &str)> {
    static PAIR: LazyLock<Regex> = LazyLock::new(|| re(r"(\d+) ([a-z]+(?: [a-z]+)?)"));
    PAIR.captures_iter(line)
        .filter_map(|c| Some((c[1].parse().ok()?, c.get(2)?.as_str())))
        .collect()
}

fn count_of(pairs: &[(u64, &str)], names: &[&str]) -> u64 {
    pairs
        .iter()
        .filter(|(_, w)| names.contains(w))
        .map(|(n, _)| n)
        .sum()
}

/// Sums a summary found once per test binary, package or environment.
fn sum(tallies: impl Iterator<Item = Tally>) -> Option<Tally> {
    tallies.reduce(Tally::add)
}

/// `Ran 5 tests in 0.001s` then `OK`, `OK (skipped=1)`, `FAILED (failures=1,
/// errors=2)` or `NO TESTS RAN`. A test module that failed to import is
/// reported as an erroring test (`unittest.loader._FailedTest`): not one
/// that ran.
fn unittest(text: &str) -> Option<Tally> {
    static RAN: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?m)^Ran (\d+) tests? in [0-9.]+s\s+(OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?")
    });
    static IMPORT: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?m)^ERROR: .*\(unittest\.loader\._FailedTest"));
    let imports = IMPORT.find_iter(text).count() as u64;
    let tally = sum(RAN.captures_iter(text).map(|c| {
        let total: u64 = c[1].parse().unwrap_or(0);
        let detail = c.get(3).map_or("", |m| m.as_str());
        let field = |name: &str| {
            detail
                .split(',')
                .filter_map(|p| p.trim().split_once('='))
                .filter(|(k, _)| *k == name)
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum::<u64>()
        };
        let skipped = field("skipped");
        let failed = field("failures") + field("errors") + field("unexpected successes");
        let ran = total.saturating_sub(skipped);
        Tally {
            ran,
            passed: ran.saturating_sub(failed),
            failed,
            skipped,
            unit: Unit::Tests,
        }
    }))?;
    Some(Tally {
        ran: tally.ran.saturating_sub(imports),
        failed: tally.failed.saturating_sub(imports),
        ..tally
    })
}

/// pytest's last line: `=== 1 failed, 4 passed, 1 skipped in 0.03s ===`
/// (`-q`: without the rules; before pytest 5.4 `in 0.03 seconds`), `no
/// tests ran in 0.01s`; without it (`-qq`), its progress lines. Errors (in
/// collection or fixtures) count as failed, not as tests that ran.
fn pytest(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?m)^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in [0-9.]+ ?s(?:econds)?(?: \([0-9:.]+\))?\s*=*\s*$",
        )
    });
    sum(LINE.captures_iter(text).map(|c| {
        let pairs = counts(&c[1]);
        let passed = count_of(&pairs, &["passed", "xpassed", "xfailed"]);
        let failed = count_of(&pairs, &["failed"]);
        let errors = count_of(&pairs, &["error", "errors"]);
        Tally {
            ran: passed + failed,
            passed,
            failed: failed + errors,
            skipped: count_of(&pairs, &["skipped"]),
            unit: Unit::Tests,
        }
    }))
    .or_else(|| pytest_progress(text))
}

/// pytest's progress, one mark a test, each line ending in its percentage
/// (`test_a.py .Fsx. [100%]`; `-q`: without the file): `-qq` — which a
/// project's `addopts = "-q"` and a `pytest -q` make — prints no summary
/// line, only these and the failures.
fn pytest_progress(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?m)^(?:\S+ )?([.FEsxX]+)\s*\[\s*\d+%\]\s*$"));
    let marks: String = LINE.captures_iter(text).map(|c| c[1].to_owned()).collect();
    let n = |of: &str| marks.chars().filter(|m| of.contains(*m)).count() as u64;
    let (passed, failed) = (n(".xX"), n("F"));
    (!marks.is_empty()).then(|| Tally {
        ran: passed + failed,
        passed,
        failed: failed + n("E"),
        skipped: n("s"),
        unit: Unit::Tests,
    })
}

/// nextest: `Summary [   0.005s] 2 tests run: 2 passed, 1 skipped`.
fn nextest(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?m)^\s*Summary \[[^\]]*\] (\d+) tests? run: (.*)$"));
    let c = LINE.captures_iter(text).last()?;
    let pairs = counts(&c[2]);
    let ran: u64 = c[1].parse().ok()?;
    let passed = count_of(&pairs, &["passed"]);
    Some(Tally {
        ran,
        passed,
        failed: ran.saturating_sub(passed),
        skipped: count_of(&pairs, &["skipped"]),
        unit: Unit::Tests,
    })
}

/// cargo test, once per test binary and for the doc-tests: `test result:
/// ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; …`.
fn cargo(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?m)^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;")
    });
    sum(LINE.captures_iter(text).map(|c| {
        let n = |i: usize| c[i].parse::<u64>().unwrap_or(0);
        Tally {
            ran: n(1) + n(2),
            passed: n(1),
            failed: n(2),
            skipped: n(3),
            unit: Unit::Tests,
        }
    }))
}

/// go test: with `-v`, one `--- PASS: TestX` line a test (subtests are
/// indented); without, one line a package — `ok  pkg 0.01s` (`[no tests to
/// run]` when none did), `FAIL pkg 0.01s`, `?   pkg [no test files]`.
fn go(text: &str) -> Option<Tally> {
    static TEST: LazyLock<Regex> = LazyLock::new(|| re(r"(?m)^--- (PASS|FAIL|SKIP): "));
    static PACKAGE: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?m)^(ok|FAIL|\?)\s+\S+\s+(?:[0-9.]+s|\(cached\)|\[[^\]]*\])(.*)$"));
    let tests: Vec<&str> = TEST
        .captures_iter(text)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str())
        .collect();
    if !tests.is_empty() {
        let n = |s: &str| tests.iter().filter(|t| **t == s).count() as u64;
        return Some(Tally {
            ran: n("PASS") + n("FAIL"),
            passed: n("PASS"),
            failed: n("FAIL"),
            skipped: n("SKIP"),
            unit: Unit::Tests,
        });
    }
    sum(PACKAGE.captures_iter(text).map(|c| {
        let none = c[0].contains("[no tests to run]") || c[0].contains("[no test files]");
        let (passed, failed) = match (&c[1], none) {
            (_, true) | ("?", _) => (0, 0),
            ("ok", _) => (1, 0),
            _ => (0, 1),
        };
        Tally {
            ran: passed + failed,
            passed,
            failed,
            skipped: 0,
            unit: Unit::Packages,
        }
    }))
}

/// jest: `Tests:       1 failed, 1 skipped, 3 passed, 5 total`, or `No tests
/// found, exiting with code 0` (with `--passWithNoTests`).
fn jest(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> = LazyLock::new(|| re(r"(?m)^Tests:\s+(.*\d+ total)\s*$"));
    if let Some(c) = LINE.captures_iter(text).last() {
        return Some(passed_failed(
            &counts(&c[1]),
            &["skipped", "todo", "pending"],
        ));
    }
    text.contains("No tests found, exiting with code")
        .then(Tally::default)
}

/// vitest: `      Tests  1 failed | 4 passed | 1 skipped (6)`, or `No test
/// files found, exiting with code 0`.
fn vitest(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> = LazyLock::new(|| re(r"(?m)^\s*Tests\s+(\d+ [^\n]*)\(\d+\)\s*$"));
    if let Some(c) = LINE.captures_iter(text).last() {
        return Some(passed_failed(&counts(&c[1]), &["skipped", "todo"]));
    }
    text.contains("No test files found, exiting with code")
        .then(Tally::default)
}

/// mocha: `  3 passing (8ms)`, `  1 pending`, `  1 failing`; with
/// `--reporter tap`, TAP's `# tests 3` … as `node --test` prints them.
fn mocha(text: &str) -> Option<Tally> {
    static PASSING: LazyLock<Regex> = LazyLock::new(|| re(r"(?m)^\s*(\d+) passing \("));
    static OTHER: LazyLock<Regex> = LazyLock::new(|| re(r"(?m)^\s*(\d+) (failing|pending)\s*$"));
    let Some(c) = PASSING.captures_iter(text).last() else {
        return node_test(text);
    };
    let passed: u64 = c[1].parse().ok()?;
    let of = |what: &str| {
        OTHER
            .captures_iter(text)
            .filter(|c| &c[2] == what)
            .filter_map(|c| c[1].parse::<u64>().ok())
            .last()
            .unwrap_or(0)
    };
    let failed = of("failing");
    Some(Tally {
        ran: passed + failed,
        passed,
        failed,
        skipped: of("pending"),
        unit: Unit::Tests,
    })
}

/// node --test, spec reporter (`ℹ tests 3`, `ℹ pass 2`, …) or TAP (`# tests
/// 3`, `# pass 2`, …).
fn node_test(text: &str) -> Option<Tally> {
    static LINE: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?m)^(?:ℹ|#) (tests|pass|fail|skipped|todo|cancelled) (\d+)\s*$"));
    let mut found = std::collections::HashMap::new();
    for c in LINE.captures_iter(text) {
        found.insert(c[1].to_owned(), c[2].parse::<u64>().unwrap_or(0));
    }
    let n = |k: &str| found.get(k).copied().unwrap_or(0);
    found.contains_key("tests").then(|| Tally {
        ran: n("pass") + n("fail") + n("cancelled"),
        passed: n("pass"),
        failed: n("fail") + n("cancelled"),
        skipped: n("skipped") + n("todo"),
        unit: Unit::Tests,
    })
}

/// A tally from `N passed`/`N failed` pairs, `skipped` naming what did not
/// run.
fn passed_failed(pairs: &[(u64, &str)], skipped: &[&str]) -> Tally {
    let passed = count_of(pairs, &["passed"]);
    let failed = count_of(pairs, &["failed"]);
    Tally {
        ran: passed + failed,
        passed,
        failed,
        skipped: count_of(pairs, skipped),
        unit: Unit::Tests,
    }
}

#[cfg(test)]
mod tests;
