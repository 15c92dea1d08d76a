//! Built-in shell definitions for the agent CLIs modix knows by name. A
//! `shells.json` entry `{ "preset": "claude" }` starts from these; any field it
//! spells out wins. Flags follow each CLI's headless mode; `requires` pins the
//! versions those flags were checked against.

use super::types::{
    OutputFormat, OutputSpec, PermissionModes, PromptMode, Shell, ShellEntry, VersionProbe,
};

/// Names of every preset, in detection order for `modix init`.
pub const PRESET_NAMES: [&str; 4] = ["claude", "codex", "gemini", "aider"];

const SEMVER_REGEX: &str = r"(\d+\.\d+\.\d+)";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The preset called `name`, as a complete shell. Long because it is a
/// table: one literal per CLI, each read on its own.
pub fn preset(name: &str) -> Option<Shell> {
    let probe = |regex: &str| {
        Some(VersionProbe {
            args: strings(&["--version"]),
            regex: regex.to_owned(),
        })
    };
    let shell = match name {
        // Claude Code: answer on the last `type:"result"` line; `is_error` marks API failures
        // that still exit 0.
        "claude" => Shell {
            name: name.into(),
            preset: Some(name.into()),
            binary: "claude".into(),
            version: probe(SEMVER_REGEX),
            requires: Some(">=2.0.0".into()),
            args: strings(&[
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--model",
                "{model}",
                "--append-system-prompt",
                "{system_prompt}",
                "--permission-mode",
                "{permission_mode}",
                "--no-session-persistence",
            ]),
            prompt: PromptMode::Stdin,
            output: OutputSpec {
                format: OutputFormat::JsonLines,
                result_pointer: Some("/result".into()),
                error_pointer: Some("/is_error".into()),
            },
            env: strings(&["ANTHROPIC_API_KEY", "CLAUDE_CODE_MAX_RETRIES"]),
            endpoint_env: Some("ANTHROPIC_BASE_URL".into()),
            permission_modes: modes("acceptEdits", "plan"),
            capabilities: strings(&["code-edit", "json-output", "shell"]),
        },
        // Codex: `--full-auto` is gone since 0.147; `-` reads the prompt from stdin.
        "codex" => Shell {
            name: name.into(),
            preset: Some(name.into()),
            binary: "codex".into(),
            version: probe(SEMVER_REGEX),
            requires: Some(">=0.147.0".into()),
            args: strings(&[
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-C",
                "{workdir}",
                "-m",
                "{model}",
                "-s",
                "{permission_mode}",
                "--output-schema",
                "{output_schema}",
                "--ephemeral",
                "-",
            ]),
            prompt: PromptMode::Stdin,
            output: OutputSpec {
                format: OutputFormat::JsonLines,
                result_pointer: Some("/item/text".into()),
                error_pointer: None,
            },
            env: strings(&["OPENAI_API_KEY", "CODEX_API_KEY"]),
            endpoint_env: Some("OPENAI_BASE_URL".into()),
            permission_modes: modes("workspace-write", "read-only"),
            capabilities: strings(&["code-edit", "json-output", "shell"]),
        },
        // Gemini: `--skip-trust` is required headless, or it exits 55.
        "gemini" => Shell {
            name: name.into(),
            preset: Some(name.into()),
            binary: "gemini".into(),
            version: probe(SEMVER_REGEX),
            requires: Some(">=0.50.0".into()),
            args: strings(&[
                "-o",
                "json",
                "-m",
                "{model}",
                "--skip-trust",
                "--approval-mode",
                "{permission_mode}",
            ]),
            prompt: PromptMode::Stdin,
            output: OutputSpec {
                format: OutputFormat::Json,
                result_pointer: Some("/response".into()),
                error_pointer: None,
            },
            env: strings(&["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
            endpoint_env: Some("GOOGLE_GEMINI_BASE_URL".into()),
            permission_modes: modes("auto_edit", "plan"),
            capabilities: strings(&["code-edit", "json-output", "shell"]),
        },
        // Aider has no JSON mode: the answer is plain text with a ```json block.
        "aider" => Shell {
            name: name.into(),
            preset: Some(name.into()),
            binary: "aider".into(),
            version: probe(SEMVER_REGEX),
            requires: Some(">=0.80.0".into()),
            args: strings(&[
                "--message",
                "{prompt}",
                "--yes-always",
                "--no-pretty",
                "--no-stream",
                "--no-auto-commits",
                "--model",
                "{model}",
            ]),
            prompt: PromptMode::Argument,
            output: OutputSpec {
                format: OutputFormat::Text,
                result_pointer: None,
                error_pointer: None,
            },
            env: strings(&["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"]),
            endpoint_env: None,
            // Aider has no read-only mode: a read-only agent must not be bound to it.
            permission_modes: None,
            capabilities: strings(&["code-edit"]),
        },
        _ => return None,
    };
    Some(shell)
}

/// Settles a shell entry: the preset (if any) with the entry's own fields on top.
/// `Err` says what is missing when there is no preset to fill it.
pub fn resolve(name: &str, entry: &ShellEntry) -> Result<Shell, String> {
    let base = match &entry.preset {
        Some(p) => Some(preset(p).ok_or_else(|| format!("unknown preset `{p}`"))?),
        None => None,
    };
    let binary = entry
        .binary
        .clone()
        .or_else(|| base.as_ref().map(|b| b.binary.clone()))
        .ok_or("a shell needs `preset` or `binary`")?;
    let args = entry
        .args
        .clone()
        .or_else(|| base.as_ref().map(|b| b.args.clone()))
        .ok_or("a shell without a preset needs `args` (the invocation)")?;
    Ok(Shell {
        name: name.to_owned(),
        preset: entry.preset.clone(),
        binary,
        version: pick(&entry.version, &base, |b| b.version.clone()),
        requires: pick(&entry.requires, &base, |b| b.requires.clone()),
        args,
        prompt: entry
            .prompt
            .or(base.as_ref().map(|b| b.prompt))
            .unwrap_or(PromptMode::Stdin),
        output: entry
            .output
            .clone()
            .or(base.as_ref().map(|b| b.output.clone()))
            .unwrap_or(OutputSpec {
                format: OutputFormat::Text,
                result_pointer: None,
                error_pointer: None,
            }),
        env: entry
            .env
            .clone()
            .or(base.as_ref().map(|b| b.env.clone()))
            .unwrap_or_default(),
        endpoint_env: pick(&entry.endpoint_env, &base, |b| b.endpoint_env.clone()),
        permission_modes: pick(&entry.permission_modes, &base, |b| {
            b.permission_modes.clone()
        }),
        capabilities: entry
            .capabilities
            .clone()
            .or(base.as_ref().map(|b| b.capabilities.clone()))
            .unwrap_or_default(),
    })
}

fn modes(write: &str, read_only: &str) -> Option<PermissionModes> {
    Some(PermissionModes {
        write: write.to_owned(),
        read_only: read_only.to_owned(),
    })
}

/// The entry's own value, else the preset's.
fn pick<T: Clone>(
    own: &Option<T>,
    base: &Option<Shell>,
    from: fn(&Shell) -> Option<T>,
) -> Option<T> {
    own.clone().or_else(|| base.as_ref().and_then(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_resolves() {
        for name in PRESET_NAMES {
            let entry = ShellEntry {
                preset: Some(name.into()),
                ..ShellEntry::default()
            };
            let shell = resolve(name, &entry).unwrap();
            assert_eq!(shell.binary, name);
        }
    }

    #[test]
    fn entry_fields_override_the_preset() {
        let entry = ShellEntry {
            preset: Some("claude".into()),
            binary: Some("/opt/claude".into()),
            requires: Some(">=3".into()),
            ..ShellEntry::default()
        };
        let shell = resolve("c", &entry).unwrap();
        assert_eq!(shell.binary, "/opt/claude");
        assert_eq!(shell.requires.as_deref(), Some(">=3"));
        assert_eq!(shell.prompt, PromptMode::Stdin);
    }
}
