//! Whether an agent CLI can authenticate without the brain's key: a key
//! or token of its own in the environment, a cloud provider it is switched
//! to, or a login it stored (`claude auth status`, `codex login status`,
//! Gemini's chosen auth in `~/.gemini/settings.json`). Observed with the
//! versions in `.ci/agent-clis/` (docs/agent-clis-observed.md).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::run;

/// How a CLI is (or is not) signed in, for people.
#[derive(Debug, Clone, Serialize)]
pub struct Login {
    pub ok: bool,
    /// `$CLAUDE_CODE_OAUTH_TOKEN is set`, `logged in (claude auth status)`, …
    pub how: String,
}

/// The ways a preset's CLI signs in besides the brain's key.
pub struct Ways {
    /// A key or token the CLI reads, when set and passed to it.
    keys: &'static [&'static str],
    /// Switches to a cloud provider's own credentials, when true.
    switches: &'static [&'static str],
    status: Status,
    /// What to do when none works, for the message.
    pub fix: &'static str,
}

enum Status {
    /// `claude auth status`: JSON with `loggedIn`.
    ClaudeJson,
    /// `codex login status`: exit 0 when credentials are stored. It ignores
    /// keys in the environment, which `keys` covers.
    ExitZero(&'static [&'static str]),
    /// Gemini has no status command; its chosen auth is in its settings.
    GeminiSettings,
}

/// The ways of a preset's CLI; `None` for a CLI that only takes keys.
pub fn ways(preset: &str) -> Option<Ways> {
    Some(match preset {
        "claude" => Ways {
            keys: &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            switches: &[
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
                "CLAUDE_CODE_USE_FOUNDRY",
            ],
            status: Status::ClaudeJson,
            fix: "run `claude auth login` (or `claude setup-token` and set CLAUDE_CODE_OAUTH_TOKEN)",
        },
        // 0.169 sends CODEX_API_KEY, not OPENAI_API_KEY (which counts only
        // as the brain's key: modix passes that as CODEX_API_KEY too).
        "codex" => Ways {
            keys: &["CODEX_API_KEY"],
            switches: &[],
            status: Status::ExitZero(&["login", "status"]),
            fix: "run `codex login` (or set CODEX_API_KEY)",
        },
        "gemini" => Ways {
            keys: &["GEMINI_API_KEY"],
            switches: &["GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA"],
            status: Status::GeminiSettings,
            fix: "set GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI=true or GOOGLE_GENAI_USE_GCA=true, or sign in once in `gemini`",
        },
        _ => return None,
    })
}

fn value<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.to_str())
        .filter(|v| !v.is_empty())
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

/// A key, token or switch in the environment the CLI receives.
pub fn by_env(ways: &Ways, env: &[(OsString, OsString)]) -> Option<Login> {
    let key = ways.keys.iter().find(|k| value(env, k).is_some());
    let switch = ways
        .switches
        .iter()
        .find(|s| value(env, s).is_some_and(truthy));
    let how = match (key, switch) {
        (Some(k), _) => format!("${k} is set"),
        (None, Some(s)) => format!("${s} is on (the provider's own credentials)"),
        (None, None) => return None,
    };
    Some(Login { ok: true, how })
}

/// How long a login status may take (Claude's takes 1–2 s).
const STATUS_TIMEOUT: Duration = Duration::from_secs(15);

/// The login the CLI stored, asked the way it answers.
pub async fn by_cli(
    ways: &Ways,
    binary: &Path,
    root: &Path,
    env: Vec<(OsString, OsString)>,
) -> Login {
    match &ways.status {
        Status::GeminiSettings => gemini_settings(&env),
        Status::ClaudeJson => {
            let args = ["auth".to_owned(), "status".to_owned()];
            let out = run::capture(binary, &args, root, env, STATUS_TIMEOUT).await;
            let logged_in = out.as_ref().ok().and_then(|o| {
                let v: Value = serde_json::from_str(o.stdout.text().trim()).ok()?;
                Some((
                    v["loggedIn"] == true,
                    v["authMethod"].as_str().map(str::to_owned),
                ))
            });
            match (logged_in, out) {
                (Some((true, method)), _) => Login {
                    ok: true,
                    how: format!(
                        "logged in (`claude auth status`: {})",
                        method.unwrap_or_else(|| "yes".into())
                    ),
                },
                (Some((false, _)), _) => not_logged_in("`claude auth status`: not logged in"),
                (None, Err(e)) => not_logged_in(&format!("`claude auth status` {e}")),
                (None, Ok(o)) => {
                    not_logged_in(&format!("`claude auth status`: {}", run::last_word(&o)))
                }
            }
        }
        Status::ExitZero(args) => {
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            let shown = format!("`{} {}`", file_name(binary), args.join(" "));
            match run::capture(binary, &args, root, env, STATUS_TIMEOUT).await {
                Ok(o) if o.exit_code == Some(0) => Login {
                    ok: true,
                    how: format!("logged in ({shown})"),
                },
                Ok(o) => not_logged_in(&format!("{shown}: {}", run::last_word(&o))),
                Err(e) => not_logged_in(&format!("{shown} {e}")),
            }
        }
    }
}

fn not_logged_in(how: &str) -> Login {
    Login {
        ok: false,
        how: how.to_owned(),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Gemini's headless auth, when no variable chooses one: the type chosen
/// once in its settings (`security.auth.selectedType`; older versions
/// `selectedAuthType`), in the HOME the agent gets.
fn gemini_settings(env: &[(OsString, OsString)]) -> Login {
    let Some(home) = value(env, "HOME") else {
        return not_logged_in("no HOME, so no ~/.gemini/settings.json");
    };
    let path = Path::new(home).join(".gemini/settings.json");
    let chosen = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| {
            let t = v
                .pointer("/security/auth/selectedType")
                .or(v.get("selectedAuthType"))?;
            t.as_str().filter(|t| !t.is_empty()).map(str::to_owned)
        });
    match chosen {
        Some(t) => Login {
            ok: true,
            how: format!("auth `{t}` chosen in ~/.gemini/settings.json"),
        },
        None => not_logged_in("no auth chosen in ~/.gemini/settings.json"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn keys_tokens_and_switches_count() {
        let claude = ways("claude").unwrap();
        assert!(by_env(&claude, &env(&[("PATH", "/bin")])).is_none());
        let oauth = by_env(&claude, &env(&[("CLAUDE_CODE_OAUTH_TOKEN", "t")])).unwrap();
        assert_eq!(oauth.how, "$CLAUDE_CODE_OAUTH_TOKEN is set");
        assert!(by_env(&claude, &env(&[("CLAUDE_CODE_USE_BEDROCK", "1")])).is_some());
        assert!(by_env(&claude, &env(&[("CLAUDE_CODE_USE_BEDROCK", "0")])).is_none());
        assert!(by_env(&claude, &env(&[("ANTHROPIC_API_KEY", "")])).is_none());
        let codex = ways("codex").unwrap();
        // Codex 0.169 does not send OPENAI_API_KEY by itself.
        assert!(by_env(&codex, &env(&[("OPENAI_API_KEY", "k")])).is_none());
        let gemini = ways("gemini").unwrap();
        assert!(by_env(&gemini, &env(&[("GOOGLE_GENAI_USE_GCA", "true")])).is_some());
        assert!(ways("aider").is_none());
    }

    #[test]
    fn gemini_reads_the_auth_chosen_in_its_settings() {
        let home = tempfile::tempdir().unwrap();
        let e = env(&[("HOME", home.path().to_str().unwrap())]);
        assert!(!gemini_settings(&e).ok);
        std::fs::create_dir(home.path().join(".gemini")).unwrap();
        std::fs::write(
            home.path().join(".gemini/settings.json"),
            r#"{"security": {"auth": {"selectedType": "oauth-personal"}}}"#,
        )
        .unwrap();
        let login = gemini_settings(&e);
        assert!(login.ok);
        assert_eq!(
            login.how,
            "auth `oauth-personal` chosen in ~/.gemini/settings.json"
        );
    }
}
