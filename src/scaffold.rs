//! What `modix init` writes: the embedded `.modix-template/`, with the agents
//! bound to an agent CLI found on PATH and the tester bound to the project's own
//! test command when one can be recognised.

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
    /// Where the shell's binary was found, if it was.
    pub found_at: Option<PathBuf>,
    /// Every preset CLI found on PATH.
    pub detected: Vec<(String, PathBuf)>,
    /// The project's test command, when recognised.
    pub test_command: Option<Vec<String>>,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    Created,
    Kept,
    Rewritten,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown shell `{0}`")]
pub struct UnknownShell(String);

/// The brain a preset shell talks to by default.
fn brain_for(shell: &str) -> &'static str {
    match shell {
        "codex" => "openai",
        "gemini" => "google",
        _ => "anthropic",
    }
}

/// Picks the shell: `--shell`, else the settings' default, else the first CLI on PATH.
pub fn choose_binding(
    root: &Path,
    wanted: Option<&str>,
    default: Option<&str>,
) -> Result<Binding, UnknownShell> {
    let detected: Vec<(String, PathBuf)> = presets::PRESET_NAMES
        .iter()
        .filter_map(|name| {
            let bin = presets::preset(name)?.binary;
            which::which(&bin).ok().map(|p| ((*name).to_owned(), p))
        })
        .collect();
    let shell = match wanted.or(default) {
        Some(s) if presets::PRESET_NAMES.contains(&s) => s.to_owned(),
        Some(s) if wanted.is_some() => return Err(UnknownShell(s.to_owned())),
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
        found_at,
        detected,
        test_command: detect_test_command(root),
    })
}

/// The project's test command, from the files that usually say how to test.
pub fn detect_test_command(root: &Path) -> Option<Vec<String>> {
    let has = |f: &str| root.join(f).is_file();
    let argv: &[&str] = if has("Cargo.toml") {
        &["cargo", "test"]
    } else if has("package.json") {
        &["npm", "test"]
    } else if has("go.mod") {
        &["go", "test", "./..."]
    } else if has("pyproject.toml") || has("setup.py") || has("pytest.ini") {
        &["python3", "-m", "pytest"]
    } else if std::fs::read_to_string(root.join("Makefile"))
        .is_ok_and(|m| m.lines().any(|l| l.starts_with("test:")))
    {
        &["make", "test"]
    } else {
        return None;
    };
    Some(argv.iter().map(|s| (*s).to_owned()).collect())
}

/// Every file of the template, as it would be written for this project.
pub fn render(root: &Path, binding: &Binding) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    collect(&TEMPLATE, &mut files);
    for (name, bytes) in &mut files {
        let patched = match name.as_str() {
            "agents.json" => patch_agents(bytes, binding),
            "projects.json" => patch_project(bytes, root, binding),
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
    if let (Some(argv), Some(tester)) = (&b.test_command, agents.get_mut("tester")) {
        *tester = json!({
            "role": "tester",
            "command": argv,
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

fn patch_project(bytes: &[u8], root: &Path, b: &Binding) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(bytes).ok()?;
    if let Some(name) = root.file_name().and_then(|n| n.to_str()) {
        v["name"] = json!(name);
    }
    if let Some(argv) = &b.test_command {
        v["commands"]["test"] = json!(argv);
    }
    Some(pretty(&v))
}

/// Writes the rendered files under `root/.modix/`; existing files are kept
/// unless `force`.
pub fn write(
    root: &Path,
    files: &[(String, Vec<u8>)],
    force: bool,
) -> Result<Vec<(String, FileAction)>, crate::error::Error> {
    let mut done = Vec::new();
    for (name, bytes) in files {
        let path = root.join(MODIX_DIR).join(name);
        let shown = crate::config::discover::shown(name);
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
