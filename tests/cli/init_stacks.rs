//! `modix init` binds the tester to the project's own test runner for the
//! common stacks, and says which file told it; creates the global settings
//! file once; accepts a shell the project defines.

use crate::util::{Sandbox, output_text};

fn tester_after_init(files: &[(&str, &str)]) -> (serde_json::Value, String, Sandbox) {
    let sb = Sandbox::new();
    for (path, text) in files {
        if let Some(dir) = path.strip_suffix('/') {
            std::fs::create_dir_all(sb.root().join(dir)).unwrap();
        } else {
            sb.write(path, text);
        }
    }
    let out = sb.modix().arg("init").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    let tester = agents["agents"]["tester"]["command"].clone();
    (tester, String::from_utf8(out.stdout).unwrap(), sb)
}

/// Files of a project, the tester init should bind, and why it should say.
type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);

#[test]
fn recognises_the_common_test_runners_and_says_which_file_told() {
    let unittest =
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_x(self):\n        pass\n";
    let cases: Vec<Case> = vec![
        (
            vec![("tests/test_calc.py", unittest)],
            vec!["python3", "-m", "unittest", "discover", "-s", "tests"],
            "tests/test_calc.py uses unittest",
        ),
        (
            vec![("test_calc.py", unittest)],
            vec!["python3", "-m", "unittest"],
            "test_calc.py uses unittest",
        ),
        (
            vec![("tests/calc_test.py", unittest)],
            vec![
                "python3",
                "-m",
                "unittest",
                "discover",
                "-s",
                "tests",
                "-p",
                "*_test.py",
            ],
            "tests/calc_test.py uses unittest",
        ),
        (
            vec![("tests/test_a.py", "def test_a():\n    assert True\n")],
            vec!["python3", "-m", "pytest"],
            "pytest-style tests",
        ),
        (
            vec![
                ("pyproject.toml", "[tool.pytest.ini_options]\n"),
                ("tests/test_a.py", unittest),
            ],
            vec!["python3", "-m", "pytest"],
            "pyproject.toml's [tool.pytest.ini_options]",
        ),
        (vec![("tox.ini", "[tox]\n")], vec!["tox"], "(tox.ini)"),
        (vec![("noxfile.py", "")], vec!["nox"], "(noxfile.py)"),
        (
            vec![("build.gradle.kts", ""), ("gradlew", "")],
            vec!["./gradlew", "test"],
            "(build.gradle.kts)",
        ),
        (
            vec![("pom.xml", "<project/>")],
            vec!["mvn", "test"],
            "(pom.xml)",
        ),
        (
            vec![("App.csproj", "<Project/>")],
            vec!["dotnet", "test"],
            "(App.csproj)",
        ),
        (vec![("mix.exs", "")], vec!["mix", "test"], "(mix.exs)"),
        (
            vec![("Gemfile", ""), ("spec/", "")],
            vec!["bundle", "exec", "rspec"],
            "(spec/)",
        ),
        (vec![("Rakefile", "")], vec!["rake", "test"], "(Rakefile)"),
        (
            vec![("phpunit.xml.dist", "<phpunit/>")],
            vec!["vendor/bin/phpunit"],
            "(phpunit.xml.dist)",
        ),
        (
            vec![("composer.json", r#"{"scripts": {"test": "phpunit"}}"#)],
            vec!["composer", "test"],
            "composer.json's `test` script",
        ),
        (
            vec![
                ("package.json", r#"{"scripts": {"test": "vitest"}}"#),
                ("yarn.lock", ""),
            ],
            vec!["yarn", "test"],
            "package.json's `test` script",
        ),
        (
            vec![("Package.swift", "")],
            vec!["swift", "test"],
            "(Package.swift)",
        ),
        (
            vec![("go.mod", "module x\n")],
            vec!["go", "test", "./..."],
            "(go.mod)",
        ),
        // Every makefile name GNU make reads, every way to write the target.
        (
            vec![("makefile", "test:\n\techo ok\n")],
            vec!["make", "test"],
            "(makefile's `test` target)",
        ),
        (
            vec![("GNUmakefile", "all: build\ncheck test:: all\n\techo ok\n")],
            vec!["make", "test"],
            "(GNUmakefile's `test` target)",
        ),
        (
            vec![("Makefile", ".PHONY: test\ntest : build\n\techo ok\n")],
            vec!["make", "test"],
            "(Makefile's `test` target)",
        ),
        (
            vec![(
                "pyproject.toml",
                "[project]\nname = \"x\"\n[project.optional-dependencies]\ntest = [\"pytest\"]\n",
            )],
            vec!["python3", "-m", "pytest"],
            "(pyproject.toml names pytest)",
        ),
    ];
    for (files, argv, because) in cases {
        let (tester, stdout, _) = tester_after_init(&files);
        assert_eq!(tester, serde_json::json!(argv), "{files:?}: {stdout}");
        let said = format!("Bound the tester to `{}` ", argv.join(" "));
        assert!(
            stdout.contains(&said) && stdout.contains(because),
            "{files:?}:\n{stdout}"
        );
    }
}

#[test]
fn no_recognised_runner_is_said_plainly() {
    // npm's placeholder script is not a test suite.
    let (tester, stdout, _) = tester_after_init(&[(
        "package.json",
        r#"{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}"#,
    )]);
    assert!(tester.is_null(), "{tester}");
    assert!(
        stdout.contains("No test command recognised (looked for Cargo, Go,")
            && stdout.contains("give the tester a \"command\""),
        "{stdout}"
    );
}

#[test]
fn files_that_name_no_real_test_suite_bind_no_test_command() {
    let cases: Vec<Vec<(&str, &str)>> = vec![
        // A package with neither pytest's configuration nor tests.
        vec![("pyproject.toml", "[project]\nname = \"x\"\n")],
        vec![("setup.py", "from setuptools import setup\nsetup()\n")],
        // An empty script is not a test suite.
        vec![("package.json", r#"{"scripts": {"test": ""}}"#)],
        vec![("package.json", r#"{"scripts": {"test": "  "}}"#)],
        // A variable named test, and a recipe line, are not a target.
        vec![("Makefile", "test := unit\nTESTS ::= a\nall:\n\ttest: x\n")],
    ];
    for files in cases {
        let (tester, stdout, _) = tester_after_init(&files);
        assert!(tester.is_null(), "{files:?}: {tester}");
        assert!(
            stdout.contains("No test command recognised"),
            "{files:?}:\n{stdout}"
        );
    }
}

#[test]
fn an_invalid_package_json_is_a_warning_not_silence() {
    let sb = Sandbox::new();
    sb.write("package.json", r#"{"scripts": {"test": "jest""#);
    let out = sb.modix().arg("init").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l
            == "warning: package.json is not valid JSON (EOF while parsing an object at line 1 column 27), so its `test` script was not looked at; fix it and run `modix init --force`, or give the tester a \"command\" in .modix/agents.json"),
        "{err}"
    );
}

#[test]
fn a_project_with_two_stacks_gets_one_and_is_told_of_the_other() {
    // A pyo3/maturin package: a Rust crate, tested as the Python package it is.
    let (tester, stdout, _) = tester_after_init(&[
        (
            "Cargo.toml",
            "[package]\nname = \"x\"\n[lib]\ncrate-type = [\"cdylib\"]\n",
        ),
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"maturin>=1.0\"]\nbuild-backend = \"maturin\"\n",
        ),
        ("tests/test_x.py", "def test_x():\n    assert True\n"),
    ]);
    assert_eq!(tester, serde_json::json!(["python3", "-m", "pytest"]));
    assert!(
        stdout.contains("Bound the tester to `python3 -m pytest` (tests/test_x.py (pytest-style tests), a Python package built with maturin)")
            && stdout.contains("Also recognised: `cargo test` (Cargo.toml). To use one instead, set it as the tester's \"command\" in .modix/agents.json and `commands.test` in .modix/projects.json."),
        "{stdout}"
    );
    // A Rust crate with a Makefile: cargo's, and make's named.
    let (tester, stdout, _) = tester_after_init(&[
        ("Cargo.toml", "[package]\nname = \"x\"\n"),
        ("Makefile", "test:\n\tcargo test\n"),
    ]);
    assert_eq!(tester, serde_json::json!(["cargo", "test"]));
    assert!(
        stdout.contains("Also recognised: `make test` (Makefile's `test` target)."),
        "{stdout}"
    );
}

#[test]
fn the_unittest_project_of_the_issue_gets_a_tester_that_runs() {
    let sb = Sandbox::example();
    std::fs::remove_dir_all(sb.root().join(".modix")).unwrap();
    let out = sb.modix().arg("init").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    assert_eq!(
        agents["agents"]["tester"]["command"],
        serde_json::json!(["python3", "-m", "unittest"])
    );
    let project: serde_json::Value =
        serde_json::from_str(&sb.read(".modix/projects.json")).unwrap();
    assert_eq!(
        project["commands"]["test"],
        serde_json::json!(["python3", "-m", "unittest"])
    );
    let out = sb.modix().args(["doctor", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tester = report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "tester")
        .unwrap();
    assert_eq!(tester["ready"], true, "{tester}");
}

#[test]
fn init_creates_the_global_settings_once_and_never_overwrites_them() {
    let sb = Sandbox::new();
    let settings = sb.dir.path().join("home/settings.json");
    let out = sb.modix().arg("init").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains(&format!("created {} (global settings)", settings.display())),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(v["color"], "auto");
    assert!(
        v.get("default_shell").is_none(),
        "init would stop detecting CLIs: {v}"
    );
    sb.modix().arg("validate").assert().success();
    std::fs::write(&settings, "{\"color\": \"never\"}\n").unwrap();
    let out = sb.modix().args(["init", "--force"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("kept    {}", settings.display()))
    );
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        "{\"color\": \"never\"}\n"
    );
}

#[test]
fn init_shell_accepts_a_shell_the_project_defines() {
    let sb = Sandbox::example();
    let out = sb
        .modix()
        .args(["init", "--force", "--shell", "scripted"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("kept    .modix/shells.json"), "{text}");
    assert!(
        text.contains("Bound the planner and executor to `scripted`"),
        "{text}"
    );
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    assert_eq!(agents["agents"]["executor"]["shell"], "scripted");
    assert_eq!(agents["agents"]["executor"]["brain"], "scripted");
    assert!(sb.read(".modix/shells.json").contains("scripted-agent"));
    sb.modix().arg("validate").assert().success();
    // An unknown name lists what is known, the project's own included.
    let out = sb
        .modix()
        .args(["init", "--shell", "cursor"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        output_text(&out).contains("`claude`, `codex`, `gemini`, `aider`, `scripted`"),
        "{}",
        output_text(&out)
    );
}

/// `init --shell NAME` reads the project's shells as `validate` does: a
/// FIFO is named (its read would block forever), a symlink out of the
/// project is not read, and a broken file is said to be broken — never
/// reported as an unknown shell. Nothing is written.
#[test]
fn init_shell_says_why_the_projects_shells_cannot_be_read() {
    type BreakIt = fn(&std::path::Path);
    let cases: [(&str, BreakIt); 3] = [
        ("is a FIFO (named pipe), not a file", |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap()
        }),
        ("is not valid JSON (EOF while parsing", |p| {
            std::fs::write(p, r#"{"shells": {"scripted": {"binary": "x""#).unwrap()
        }),
        (
            "outside the project's .modix/ folder (through a symlink)",
            |p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap(),
        ),
    ];
    for (said, break_it) in cases {
        let sb = Sandbox::example();
        let shells = sb.root().join(".modix/shells.json");
        std::fs::remove_file(&shells).unwrap();
        break_it(&shells);
        let agents = sb.read(".modix/agents.json");
        let out = sb
            .modix()
            .args(["init", "--force", "--shell", "scripted"])
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}\n{text}");
        assert!(text.contains(said), "{text}");
        assert!(!text.contains("unknown shell"), "{text}");
        assert!(!text.contains("root:x:0:0"), "{text}");
        assert_eq!(sb.read(".modix/agents.json"), agents, "nothing written");
    }
}
