//! What `modix init` writes: the embedded `.modix-template/`, with the agents
//! bound to an agent CLI found on PATH (or a shell the project already
//! defines) and the tester bound to the project's own test command when one
//! can be recognised; and the global settings file when there is none.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::config::{MODIX_DIR, presets};
use crate::embedded::TEMPLATE;
use crate::fsutil::write_durable;

/// What init decided to bind the agents to.
#[derive(Debug, Clone)]
pub struct Binding {
    pub shell: String,
    pub brain: String,
    /// The shell is defined in the project's existing `shells.json`, not a
    /// preset: that file (and `brains.json`) must be kept, even with --force.
    pub custom: bool,
    /// Where the shell's binary was found, if it was.
    pub found_at: Option<PathBuf>,
    /// Every preset CLI found on PATH.
    pub detected: Vec<(String, PathBuf)>,
    /// The project's test command, when recognised, and what else init
    /// found out about its tests.
    pub tests: TestDetection,
}

/// The project's own test command, and what told init so.
#[derive(Debug, Clone)]
pub struct TestCommand {
    pub argv: Vec<String>,
    /// E.g. `Cargo.toml`, `tests/test_calc.py uses unittest`.
    pub because: String,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    Created,
    Kept,
    Rewritten,
}

/// Why `--shell NAME` names no shell modix can bind.
#[derive(Debug, thiserror::Error)]
pub enum UnknownShell {
    #[error("unknown shell `{0}`")]
    Unknown(String),
    /// A file of the project's `.modix/` that says which shells it has
    /// cannot be read or parsed.
    #[error("{0}")]
    Unreadable(String),
}

/// The brain a preset shell talks to by default.
fn brain_for(shell: &str) -> &'static str {
    match shell {
        "codex" => "openai",
        "gemini" => "google",
        _ => "anthropic",
    }
}

/// A JSON file of the project's existing `.modix/` (`None`: there is
/// none), read as `validate` reads it: confined to `.modix/`, a regular
/// file (a FIFO would block the read forever), of a config file's size.
fn existing(root: &Path, name: &str) -> Result<Option<Value>, String> {
    use crate::config::confine::{self, PathProblem};
    let shown = format!("`.modix/{name}`");
    let modix_dir = root.join(MODIX_DIR);
    let text = confine::resolve(&modix_dir, name)
        .and_then(|r| confine::read_text(&r.path, crate::config::source::MAX_FILE_BYTES));
    match text {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{shown} is not valid JSON ({e}); `modix validate` shows where")),
        Err(PathProblem::Missing) => Ok(None),
        Err(p) => Err(p.message(&shown)),
    }
}

/// The names of the shells the project's existing `shells.json` defines.
pub fn existing_shells(root: &Path) -> Vec<String> {
    existing(root, "shells.json")
        .ok()
        .flatten()
        .and_then(|v| {
            v.get("shells")?
                .as_object()
                .map(|o| o.keys().cloned().collect())
        })
        .unwrap_or_default()
}

/// Picks the shell: `--shell` (a preset, or a shell the project's
/// `shells.json` defines), else the settings' default, else the first CLI on PATH.
pub fn choose_binding(
    root: &Path,
    wanted: Option<&str>,
    default: Option<&str>,
    default_brain: Option<&str>,
) -> Result<Binding, UnknownShell> {
    let detected: Vec<(String, PathBuf)> = presets::PRESET_NAMES
        .iter()
        .filter_map(|name| {
            let bin = presets::preset(name)?.binary;
            which::which(&bin).ok().map(|p| ((*name).to_owned(), p))
        })
        .collect();
    if let Some(name) = wanted.filter(|w| !presets::PRESET_NAMES.contains(w)) {
        return custom_binding(root, name, default_brain, detected);
    }
    let shell = match wanted.or(default) {
        Some(s) if presets::PRESET_NAMES.contains(&s) => s.to_owned(),
        _ => detected
            .first()
            .map_or_else(|| "claude".to_owned(), |(n, _)| n.clone()),
    };
    let found_at = detected
        .iter()
        .find(|(n, _)| *n == shell)
        .map(|(_, p)| p.clone());
    Ok(Binding {
        brain: brain_for(&shell).to_owned(),
        shell,
        custom: false,
        found_at,
        detected,
        tests: detect_tests(root),
    })
}

/// A binding to a shell the project's existing `shells.json` defines, with
/// a brain its `brains.json` defines (the settings' default brain, the one
/// its agents already pair with the shell, the shell's preset's usual one,
/// or the first).
fn custom_binding(
    root: &Path,
    name: &str,
    default_brain: Option<&str>,
    detected: Vec<(String, PathBuf)>,
) -> Result<Binding, UnknownShell> {
    let shells = existing(root, "shells.json").map_err(UnknownShell::Unreadable)?;
    let Some(entry) = shells.as_ref().and_then(|v| v.get("shells")?.get(name)) else {
        return Err(UnknownShell::Unknown(name.to_owned()));
    };
    let preset = entry.get("preset").and_then(Value::as_str);
    let binary = entry
        .get("binary")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| preset.and_then(presets::preset).map(|p| p.binary))
        .unwrap_or_else(|| name.to_owned());
    let brains: Vec<String> = existing(root, "brains.json")
        .map_err(UnknownShell::Unreadable)?
        .and_then(|v| {
            v.get("brains")?
                .as_object()
                .map(|o| o.keys().cloned().collect())
        })
        .unwrap_or_default();
    // The brain the project already pairs with this shell, if any.
    let paired = existing(root, "agents.json").ok().flatten().and_then(|v| {
        v.get("agents")?.as_object()?.values().find_map(|a| {
            (a.get("shell")?.as_str()? == name)
                .then(|| a.get("brain")?.as_str().map(str::to_owned))?
        })
    });
    let usual = brain_for(preset.unwrap_or_default());
    let known = |b: &str| brains.iter().any(|x| x == b);
    let brain = default_brain
        .filter(|b| known(b))
        .map(str::to_owned)
        .or(paired.filter(|b| known(b)))
        .or_else(|| known(usual).then(|| usual.to_owned()))
        .or_else(|| brains.first().cloned())
        .unwrap_or_else(|| usual.to_owned());
    Ok(Binding {
        shell: name.to_owned(),
        brain,
        custom: true,
        found_at: crate::shell::find_binary(root, &binary),
        detected,
        tests: detect_tests(root),
    })
}

/// The stacks init recognises, for its "looked for" message.
pub const STACKS: &str = "Cargo, Go, npm/yarn/pnpm, pytest, unittest, tox, nox, Gradle, Maven, dotnet, mix, RSpec/Rake, PHPUnit/Composer, SwiftPM, make";

/// What init found out about the project's tests.
#[derive(Debug, Clone, Default)]
pub struct TestDetection {
    /// The test command bound to the tester.
    pub chosen: Option<TestCommand>,
    /// Other test commands the project's files also name (a Rust crate
    /// with a Makefile, a pyo3 package's `cargo test`), for the user to
    /// choose from.
    pub others: Vec<TestCommand>,
    /// Files that would have said but could not be read (an invalid
    /// `package.json`).
    pub warnings: Vec<String>,
}

/// The project's test command, from the files that usually say how to
/// test: every stack's own files are looked at, the first found in this
/// order is chosen — but a Python package built from Rust (maturin in
/// `pyproject.toml`'s build system) is tested as Python — and the others
/// are kept to be named.
pub fn detect_tests(root: &Path) -> TestDetection {
    let has = |f: &str| root.join(f).is_file();
    let mut warnings = Vec::new();
    let mut found: Vec<TestCommand> = [
        has("Cargo.toml")
            .then(|| command(&["cargo", "test"], "Cargo.toml"))
            .flatten(),
        has("go.mod")
            .then(|| command(&["go", "test", "./..."], "go.mod"))
            .flatten(),
        node(root, &mut warnings),
        python(root),
        jvm_and_dotnet(root),
        has("mix.exs")
            .then(|| command(&["mix", "test"], "mix.exs"))
            .flatten(),
        ruby_and_php(root),
        has("Package.swift")
            .then(|| command(&["swift", "test"], "Package.swift"))
            .flatten(),
        make(root),
    ]
    .into_iter()
    .flatten()
    .collect();
    let maturin = std::fs::read_to_string(root.join("pyproject.toml"))
        .is_ok_and(|t| t.contains("[build-system]") && t.contains("maturin"));
    let python_first = found.iter().position(|t| t.argv[0] == "python3");
    if let (true, Some(i)) = (maturin, python_first) {
        let mut t = found.remove(i);
        t.because.push_str(", a Python package built with maturin");
        found.insert(0, t);
    }
    let mut found = found.into_iter();
    TestDetection {
        chosen: found.next(),
        others: found.collect(),
        warnings,
    }
}

/// `make test` when a makefile (as GNU make looks for one: `GNUmakefile`,
/// `makefile`, `Makefile`) has a `test` target: `test:`, `test :`,
/// `check test::` — not a variable (`test := …`) nor a recipe line.
fn make(root: &Path) -> Option<TestCommand> {
    let (name, text) = ["GNUmakefile", "makefile", "Makefile"]
        .into_iter()
        .find_map(|n| Some((n, std::fs::read_to_string(root.join(n)).ok()?)))?;
    let has_target = text.lines().any(|line| {
        if line.starts_with(['\t', ' ', '#', '.']) {
            return false;
        }
        let Some((targets, rest)) = line.split_once(':') else {
            return false;
        };
        let assignment = rest.trim_start_matches(':').starts_with('=');
        !assignment && targets.split_whitespace().any(|t| t == "test")
    });
    has_target.then(|| command(&["make", "test"], format!("{name}'s `test` target")))?
}

fn command(argv: &[&str], because: impl Into<String>) -> Option<TestCommand> {
    Some(TestCommand {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        because: because.into(),
    })
}

/// `npm test` (or yarn's, pnpm's, bun's, by the lock file) when
/// `package.json` has a real `test` script: not empty, not npm's
/// placeholder. A `package.json` that is not JSON is a warning.
fn node(root: &Path, warnings: &mut Vec<String>) -> Option<TestCommand> {
    let text = std::fs::read_to_string(root.join("package.json")).ok()?;
    let package: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!(
                "package.json is not valid JSON ({e}), so its `test` script was not looked at; fix it and run `modix init --force`, or give the tester a \"command\" in .modix/agents.json"
            ));
            return None;
        }
    };
    let script = package.pointer("/scripts/test")?.as_str()?.trim();
    if script.is_empty() || script.contains("no test specified") {
        return None;
    }
    let runner = [
        ("pnpm-lock.yaml", "pnpm"),
        ("yarn.lock", "yarn"),
        ("bun.lockb", "bun"),
    ]
    .iter()
    .find(|(lock, _)| root.join(lock).is_file())
    .map_or("npm", |(_, runner)| runner);
    command(&[runner, "test"], "package.json's `test` script")
}

/// pytest when its configuration or pytest-style tests say so; unittest
/// when the test files use it; tox or nox when the project drives its tests
/// through them.
fn python(root: &Path) -> Option<TestCommand> {
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap_or_default();
    let pytest = |because: &str| command(&["python3", "-m", "pytest"], because);
    if root.join("pytest.ini").is_file() {
        return pytest("pytest.ini");
    }
    if root.join("conftest.py").is_file() {
        return pytest("conftest.py");
    }
    if read("pyproject.toml").contains("[tool.pytest") {
        return pytest("pyproject.toml's [tool.pytest.ini_options]");
    }
    if read("setup.cfg").contains("[tool:pytest]") {
        return pytest("setup.cfg's [tool:pytest]");
    }
    if read("tox.ini").contains("[pytest]") {
        return pytest("tox.ini's [pytest]");
    }
    if root.join("tox.ini").is_file() {
        return command(&["tox"], "tox.ini");
    }
    if root.join("noxfile.py").is_file() {
        return command(&["nox"], "noxfile.py");
    }
    if let Some(t) = python_test_files(root) {
        return Some(t);
    }
    // A package that names pytest (a test dependency) is tested with it;
    // one that does not, with no tests to look at, says nothing.
    ["pyproject.toml", "setup.cfg", "setup.py"]
        .into_iter()
        .find(|f| read(f).contains("pytest"))
        .and_then(|f| pytest(&format!("{f} names pytest")))
}

/// The framework the project's `test_*.py` / `*_test.py` files (in the root,
/// `tests/` or `test/`) use: unittest when they import it and not pytest.
fn python_test_files(root: &Path) -> Option<TestCommand> {
    for dir in [".", "tests", "test"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.ends_with(".py") && (n.starts_with("test_") || n.ends_with("_test.py"))
                })
            })
            .collect();
        if files.is_empty() {
            continue;
        }
        files.sort();
        let texts: Vec<String> = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap_or_default())
            .collect();
        let uses = |what: &str| texts.iter().any(|t| t.contains(what));
        let first = files[0].strip_prefix(root).unwrap_or(&files[0]);
        let shown = first
            .display()
            .to_string()
            .trim_start_matches("./")
            .to_owned();
        if uses("unittest") && !uses("pytest") {
            // unittest finds `test*.py` by itself; other names need a pattern.
            let mut argv = vec!["python3", "-m", "unittest"];
            let by_prefix = files.iter().all(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("test"))
            });
            if dir != "." || !by_prefix {
                argv.extend(["discover", "-s", dir]);
                if !by_prefix {
                    argv.extend(["-p", "*_test.py"]);
                }
            }
            return command(&argv, format!("{shown} uses unittest"));
        }
        return command(
            &["python3", "-m", "pytest"],
            format!("{shown} (pytest-style tests)"),
        );
    }
    None
}

/// Gradle, Maven (their wrappers when present) and dotnet.
fn jvm_and_dotnet(root: &Path) -> Option<TestCommand> {
    let has = |f: &str| root.join(f).is_file();
    for build in ["build.gradle.kts", "build.gradle"] {
        if has(build) {
            let gradle = if has("gradlew") {
                "./gradlew"
            } else {
                "gradle"
            };
            return command(&[gradle, "test"], build);
        }
    }
    if has("pom.xml") {
        let mvn = if has("mvnw") { "./mvnw" } else { "mvn" };
        return command(&[mvn, "test"], "pom.xml");
    }
    let project = std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        [".sln", ".csproj", ".fsproj"]
            .iter()
            .any(|ext| name.ends_with(ext))
            .then_some(name)
    })?;
    command(&["dotnet", "test"], project)
}

/// RSpec or Rake (through Bundler when there is a Gemfile), PHPUnit or Composer.
fn ruby_and_php(root: &Path) -> Option<TestCommand> {
    let has = |f: &str| root.join(f).exists();
    let bundled = |argv: &[&'static str]| -> Vec<&'static str> {
        if has("Gemfile") {
            [&["bundle", "exec"][..], argv].concat()
        } else {
            argv.to_vec()
        }
    };
    if has(".rspec") || root.join("spec").is_dir() {
        let because = if has(".rspec") { ".rspec" } else { "spec/" };
        return command(&bundled(&["rspec"]), because);
    }
    if has("Rakefile") {
        return command(&bundled(&["rake", "test"]), "Rakefile");
    }
    for config in ["phpunit.xml", "phpunit.xml.dist"] {
        if has(config) {
            return command(&["vendor/bin/phpunit"], config);
        }
    }
    let composer: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("composer.json")).ok()?).ok()?;
    composer.pointer("/scripts/test")?;
    command(&["composer", "test"], "composer.json's `test` script")
}

/// The global settings file (`~/.modix/settings.json`, or in `$MODIX_HOME`),
/// created with the defaults when there is none; never overwritten.
pub fn ensure_settings() -> Result<Option<(PathBuf, FileAction)>, crate::error::Error> {
    let Some(path) = crate::config::settings::file() else {
        return Ok(None);
    };
    if path.exists() {
        return Ok(Some((path, FileAction::Kept)));
    }
    // Only what is the same for every project; `default_shell` is left
    // out, so `init` keeps binding to the CLI it finds.
    let defaults = json!({ "color": "auto", "log_level": "warn", "context_mode": "isolated" });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::error::Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    write_durable(&path, &pretty(&defaults))
        .map_err(|e| crate::error::Error::io(format!("cannot write {}", path.display()), e))?;
    Ok(Some((path, FileAction::Created)))
}

/// Every file of the template, as it would be written for this project.
pub fn render(
    root: &Path,
    binding: &Binding,
    workspace: &WorkspaceChoice,
) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    collect(&TEMPLATE, &mut files);
    for (name, bytes) in &mut files {
        let patched = match name.as_str() {
            "agents.json" => patch_agents(bytes, binding),
            "projects.json" => patch_project(bytes, root, binding, workspace),
            _ => None,
        };
        if let Some(p) = patched {
            *bytes = p;
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

fn collect(dir: &include_dir::Dir<'static>, out: &mut Vec<(String, Vec<u8>)>) {
    for f in dir.files() {
        let mut name = f.path().to_string_lossy().into_owned();
        // Stored without its dot so git does not apply it to the template itself.
        if name == "gitignore" {
            name = ".gitignore".to_owned();
        }
        out.push((name, f.contents().to_vec()));
    }
    for d in dir.dirs() {
        collect(d, out);
    }
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s.into_bytes()
}

fn patch_agents(bytes: &[u8], b: &Binding) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(bytes).ok()?;
    let agents = v.get_mut("agents")?.as_object_mut()?;
    for agent in agents.values_mut() {
        if agent.get("shell").is_some() {
            agent["shell"] = json!(b.shell);
            agent["brain"] = json!(b.brain);
        }
    }
    // A real test suite beats an LLM's opinion of it: run it as a command agent.
    if let (Some(test), Some(tester)) = (&b.tests.chosen, agents.get_mut("tester")) {
        *tester = json!({
            "role": "tester",
            "command": test.argv,
            "manifest": {
                "output_schema": "test_result",
                "output_mode": "exit_status",
                "timeout_secs": 900,
                "context": "isolated"
            }
        });
    }
    Some(pretty(&v))
}

/// The workspace mode `init` writes, and what it says about it.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceChoice {
    /// `None`: left out of projects.json, so runs get the automatic choice.
    pub mode: Option<&'static str>,
    /// Why the mode is not the plain one for where the project is.
    pub note: Option<String>,
    /// What keeps `go` from making a workspace until the user fixes it.
    pub warning: Option<String>,
}

/// Picks the workspace mode that works here, by the checks `go` makes: a
/// worktree in a git repository with commits whose checkout can hold the
/// project; a copy outside git, or where a checkout cannot (submodules, an
/// ignored folder, …); nothing in a repository without commits (runs work
/// on a copy until the first commit, then on a branch of their own). A
/// repository git refuses stays a worktree, with git's reason and its fix
/// as a warning: silently copying it would hide both.
pub fn choose_workspace(root: &Path) -> WorkspaceChoice {
    use crate::workspace::{CreateOptions, Git, Mode, Workspace, WorkspaceError, automatic_mode};
    let git = Git::new();
    let worktree = |warning: Option<String>| WorkspaceChoice {
        mode: Some("worktree"),
        note: None,
        warning,
    };
    match automatic_mode(&git, root) {
        Err(e) => worktree(Some(e.to_string())),
        Ok((Mode::Copy, Some(_))) => WorkspaceChoice {
            mode: None,
            note: Some("The repository has no commits yet, so projects.json leaves `workspace` out: runs work on a copy of the project until the first commit, then on a branch of their own.".into()),
            warning: None,
        },
        Ok((Mode::Worktree, _)) => {
            let Some(home) = crate::config::settings::home_dir() else {
                return worktree(None);
            };
            let opts = CreateOptions::new(Mode::Worktree, root, home, "init");
            match Workspace::check(&git, &opts) {
                Ok(()) => worktree(None),
                Err(WorkspaceError::Unsupported { what, .. }) => WorkspaceChoice {
                    mode: Some("copy"),
                    note: Some(format!("Runs work on a copy of the project (`workspace: copy` in .modix/projects.json): a branch of their own cannot hold it, as {what}.")),
                    warning: None,
                },
                Err(e) => worktree(Some(e.to_string())),
            }
        }
        Ok(_) => WorkspaceChoice {
            mode: Some("copy"),
            ..WorkspaceChoice::default()
        },
    }
}

fn patch_project(bytes: &[u8], root: &Path, b: &Binding, ws: &WorkspaceChoice) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(bytes).ok()?;
    if let Some(name) = root.file_name().and_then(|n| n.to_str()) {
        v["name"] = json!(name);
    }
    if let Some(test) = &b.tests.chosen {
        v["commands"]["test"] = json!(test.argv);
    }
    match ws.mode {
        Some(mode) => v["workspace"] = json!(mode),
        None => {
            if let Some(o) = v.as_object_mut() {
                o.remove("workspace");
            }
        }
    }
    Some(pretty(&v))
}

/// Writes the rendered files under `root/.modix/`; existing files are kept
/// unless `force` — and those named in `keep` even then.
pub fn write(
    root: &Path,
    files: &[(String, Vec<u8>)],
    force: bool,
    keep: &[&str],
) -> Result<Vec<(String, FileAction)>, crate::error::Error> {
    let mut done = Vec::new();
    for (name, bytes) in files {
        let path = root.join(MODIX_DIR).join(name);
        let shown = crate::config::discover::shown(name);
        let force = force && !keep.contains(&name.as_str());
        let action = match (path.exists(), force) {
            (true, false) => FileAction::Kept,
            (exists, _) => {
                write_durable(&path, bytes)
                    .map_err(|e| crate::error::Error::io(format!("cannot write {shown}"), e))?;
                if exists {
                    FileAction::Rewritten
                } else {
                    FileAction::Created
                }
            }
        };
        done.push((shown, action));
    }
    Ok(done)
}
