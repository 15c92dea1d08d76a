//! `doctor --deep`: every flag a shell passes, looked up in the CLI's own
//! `--help` (of the subcommand it runs: `codex exec --help`), and both of
//! its permission modes among the values the help lists. A flag the CLI
//! dropped in a new version fails every run with "unknown option"; this
//! finds it before a run does.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::run;
use crate::config::Shell;

/// Flags a CLI accepts but its `--help` does not list, by preset, as
/// observed: `claude -p --max-turns 2 …` runs (an unknown option fails with
/// `error: unknown option`), though 2.1.197's help leaves it out.
const HIDDEN: &[(&str, &str)] = &[("claude", "--max-turns")];

/// What the help said about the shell's flags.
#[derive(Debug, Clone, Serialize)]
pub struct FlagsCheck {
    /// The help command run, e.g. `codex exec --help`.
    pub help: String,
    /// Every flag looked up.
    pub checked: Vec<String>,
    /// Flags (and permission modes) the help does not know.
    pub unknown: Vec<String>,
    /// Flags missing from the help that the CLI is known to accept.
    pub hidden: Vec<String>,
    /// Why the help could not be read, if it could not.
    pub error: Option<String>,
}

/// The subcommands a shell's args start with, and every flag after them.
/// Arguments with placeholders are values, not flags; `-` is stdin.
pub fn flags_of(args: &[String]) -> (Vec<String>, Vec<String>) {
    let plain = |a: &String| !a.contains('{');
    let subcommands: Vec<String> = args
        .iter()
        .take_while(|a| plain(a) && !a.starts_with('-'))
        .cloned()
        .collect();
    let mut flags: Vec<String> = Vec::new();
    for a in args.iter().skip(subcommands.len()) {
        if plain(a) && a.starts_with('-') && a.len() > 1 && a != "--" {
            let flag = a.split('=').next().unwrap_or(a).to_owned();
            if !flags.contains(&flag) {
                flags.push(flag);
            }
        }
    }
    (subcommands, flags)
}

/// Whether `help` lists `word` as a flag or value of its own (not as part
/// of a longer one: `-p` is not in `--print`, `plan` not in `planner`).
fn listed(help: &str, word: &str) -> bool {
    let boundary =
        |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    help.match_indices(word).any(|(i, _)| {
        boundary(help[..i].chars().next_back()) && boundary(help[i + word.len()..].chars().next())
    })
}

const HELP_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs the shell's help and judges its flags and permission modes.
pub async fn check(
    shell: &Shell,
    binary: &Path,
    root: &Path,
    env: Vec<(OsString, OsString)>,
) -> FlagsCheck {
    let (mut argv, flags) = flags_of(&shell.args);
    argv.push("--help".into());
    let mut check = FlagsCheck {
        help: format!("{} {}", shell.binary, argv.join(" ")),
        checked: flags.clone(),
        unknown: Vec::new(),
        hidden: Vec::new(),
        error: None,
    };
    let help = match run::capture(binary, &argv, root, env, HELP_TIMEOUT).await {
        Ok(o) if o.exit_code == Some(0) => format!("{}\n{}", o.stdout.text(), o.stderr.text()),
        Ok(o) => {
            check.error = Some(run::last_word(&o));
            return check;
        }
        Err(e) => {
            check.error = Some(e);
            return check;
        }
    };
    let preset = shell.preset.as_deref().unwrap_or_default();
    for flag in flags {
        if listed(&help, &flag) {
            continue;
        }
        if HIDDEN.contains(&(preset, flag.as_str())) {
            check.hidden.push(flag);
        } else {
            check.unknown.push(flag);
        }
    }
    let modes = shell.permission_modes.iter();
    for mode in modes.flat_map(|m| [&m.write, &m.read_only]) {
        if !listed(&help, mode) {
            check.unknown.push(format!("permission mode `{mode}`"));
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn subcommands_then_flags() {
        let (sub, flags) = flags_of(&strings(&[
            "exec",
            "--json",
            "-C",
            "{workdir}",
            "-c",
            "openai_base_url={endpoint}",
            "--json",
            "-",
        ]));
        assert_eq!(sub, ["exec"]);
        assert_eq!(flags, ["--json", "-C", "-c"]);
        let (sub, flags) = flags_of(&strings(&["-p", "--output-format=stream-json"]));
        assert!(sub.is_empty());
        assert_eq!(flags, ["-p", "--output-format"]);
    }

    #[test]
    fn a_flag_is_listed_only_as_itself() {
        let help = "  -p, --print   Print\n  --permission-mode <mode>  (choices: \"acceptEdits\", \"plan\")\n  --allowedTools, --allowed-tools <tools...>";
        assert!(listed(help, "-p"));
        assert!(listed(help, "--print"));
        assert!(listed(help, "--allowedTools"));
        assert!(listed(help, "plan"));
        assert!(!listed(help, "--permission"));
        assert!(!listed(help, "-o"));
        assert!(!listed(help, "accept"));
    }
}
