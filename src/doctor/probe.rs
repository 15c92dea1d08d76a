//! Cheap commands run in place of command agents (test runners, builds),
//! to see that they can run at all: the project's own (`commands.probes`)
//! or a built-in one for the program (`python3 -m pytest --version`).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::run;
use crate::config::{Agent, Binding, Config};
use crate::shell::find_binary;

/// The probe for a command agent: the one the project declares for the
/// command it runs (`commands.probes.NAME` for the argv of `commands.NAME`),
/// else a built-in one for the program it runs.
pub fn probe_for(config: &Config, a: &Agent) -> Option<(Vec<String>, String)> {
    let Binding::Command { argv } = &a.binding else {
        return None;
    };
    // A program that is not there is reported as such; nothing to probe.
    find_binary(&config.paths.root, argv.first()?)?;
    let c = &config.project.commands;
    let named = [("build", &c.build), ("test", &c.test), ("lint", &c.lint)];
    for (name, command) in named {
        if command.as_ref() == Some(argv)
            && let Some(probe) = c.probes.get(name).filter(|p| !p.is_empty())
        {
            return Some((
                probe.clone(),
                format!("projects.json commands.probes.{name}"),
            ));
        }
    }
    known_probe(argv).map(|p| (p, "built-in".to_owned()))
}

/// A cheap command that fails the way `argv` would if its tool is missing:
/// `--version` of most runners, `python3 -m pytest --version` for pytest,
/// `python3 -c "import MODULE"` for other Python modules.
pub fn known_probe(argv: &[String]) -> Option<Vec<String>> {
    let program = argv.first()?;
    let base = Path::new(program).file_name()?.to_str()?;
    let with = |args: &[&str]| {
        Some(
            std::iter::once(program.clone())
                .chain(args.iter().map(|a| (*a).to_owned()))
                .collect(),
        )
    };
    if base.starts_with("python") {
        let Some(module) = argv.get(1).filter(|a| *a == "-m").and_then(|_| argv.get(2)) else {
            return with(&["--version"]);
        };
        return match module.as_str() {
            // `python3 -m unittest --version` is a usage error; its help is as cheap.
            "unittest" => with(&["-m", "unittest", "--help"]),
            "pytest" | "tox" | "nox" | "mypy" | "ruff" | "black" | "flake8" | "pylint" => {
                with(&["-m", module, "--version"])
            }
            m if m
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') =>
            {
                with(&["-c", &format!("import {m}")])
            }
            _ => None,
        };
    }
    match base {
        "go" => with(&["version"]),
        // Whether the Gemfile's gems are installed: what `bundle exec` needs.
        "bundle" => with(&["check"]),
        // Wrappers (gradlew, mvnw) may download a whole toolchain: no probe.
        "cargo" | "npm" | "npx" | "yarn" | "pnpm" | "node" | "deno" | "bun" | "make" | "gmake"
        | "mvn" | "gradle" | "dotnet" | "mix" | "rake" | "rspec" | "composer" | "phpunit"
        | "pytest" | "tox" | "nox" | "ruby" | "php" | "swift" | "ctest" | "just" => {
            with(&["--version"])
        }
        _ => None,
    }
}

/// How long a probe may take: some start a JVM.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `argv` in the project root with `env`; `Err` holds its error line.
pub async fn run_probe(
    root: &Path,
    argv: &[String],
    env: Vec<(OsString, OsString)>,
) -> Result<(), String> {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let Some(path) = find_binary(root, program) else {
        return Err(format!("`{program}` not found"));
    };
    match run::capture(&path, &argv[1..], root, env, PROBE_TIMEOUT).await {
        Ok(out) if out.exit_code == Some(0) => Ok(()),
        Ok(out) => Err(run::last_word(&out)),
        Err(e) => Err(e),
    }
}
