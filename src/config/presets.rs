//! Built-in shell definitions for the agent CLIs modix knows by name. A
//! `shells.json` entry `{ "preset": "claude" }` starts from these; any field it
//! spells out wins. Flags follow each CLI's headless mode, checked against
//! the CLI's own `--help` (`modix doctor --deep` does it again on any
//! machine); `requires` is the oldest version that takes them, `tested` the
//! versions they were checked against (outside it, `doctor` warns).

use std::collections::BTreeMap;

use super::types::{
    FailureRule, FailureRuleEntry, OutputFormat, OutputSpec, PermissionModes, PromptMode, Shell,
    ShellEntry, StreamChoice, UsageSpec, VersionProbe,
};
use crate::fsm::FailureClass;

/// Names of every preset, in detection order for `modix init`.
pub const PRESET_NAMES: [&str; 4] = ["claude", "codex", "gemini", "aider"];

/// A version's digits are ASCII ones (semver's); `\d` would be every
/// Unicode digit, a class whose automata took ~7× the time to check at
/// every `validate` (docs/performance.md, twenty-third round).
const SEMVER_REGEX: &str = r"([0-9]+\.[0-9]+\.[0-9]+)";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A rule that a failure line of the given stream holds `pattern`.
fn rule(class: FailureClass, pattern: &str) -> FailureRule {
    FailureRule {
        class,
        pattern: Some(pattern.to_owned()),
        pointer: None,
        stream: StreamChoice::Any,
        exit_code: None,
        stop: false,
    }
}

/// A rule on the string (or number) at `pointer` of a JSON line.
fn field(class: FailureClass, pointer: &str, pattern: &str) -> FailureRule {
    FailureRule {
        pointer: Some(pointer.to_owned()),
        ..rule(class, pattern)
    }
}

/// A rule on the exit code alone.
fn exit(class: FailureClass, code: i32) -> FailureRule {
    FailureRule {
        pattern: None,
        exit_code: Some(code),
        ..rule(class, "")
    }
}

/// The same rule, stopping the agent as soon as the line appears.
fn stopping(r: FailureRule) -> FailureRule {
    FailureRule { stop: true, ..r }
}

fn usage(pointers: [Option<&str>; 6]) -> UsageSpec {
    let p = |i: usize| pointers[i].map(str::to_owned);
    UsageSpec {
        input_tokens: p(0),
        output_tokens: p(1),
        cost_usd: p(2),
        turns: p(3),
        model: p(4),
        session_id: p(5),
    }
}

fn select(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The preset called `name`, as a complete shell.
pub fn preset(name: &str) -> Option<Shell> {
    let shell = match name {
        "claude" => claude(),
        "codex" => codex(),
        "gemini" => gemini(),
        "aider" => aider(),
        _ => return None,
    };
    Some(shell)
}

/// What every preset shares; each fills in the rest.
fn base(name: &str) -> Shell {
    Shell {
        name: name.into(),
        preset: Some(name.into()),
        binary: name.into(),
        version: Some(VersionProbe {
            args: strings(&["--version"]),
            regex: SEMVER_REGEX.to_owned(),
        }),
        requires: None,
        args: Vec::new(),
        prompt: PromptMode::Stdin,
        output: OutputSpec::default(),
        env: Vec::new(),
        endpoint_env: None,
        permission_modes: None,
        capabilities: strings(&["code-edit", "json-output", "shell"]),
        tested: None,
        failures: Vec::new(),
        reason: Vec::new(),
        noise: Vec::new(),
        keepalive: Vec::new(),
        usage: UsageSpec::default(),
        set_env: BTreeMap::new(),
        key_env: None,
        idle: true,
    }
}

/// Variables every preset passes through when set: the Claude Code and
/// Gemini cloud providers' own credentials (Bedrock, Vertex AI) name them.
const AWS: [&str; 9] = [
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
];

fn with(names: &[&str], more: &[&str]) -> Vec<String> {
    strings(names).into_iter().chain(strings(more)).collect()
}

/// Claude Code (flags checked against 2.1.197's `--help`; `--max-turns` is
/// accepted though the help does not list it): the answer is the
/// `result` event's text; `is_error` marks failures that still exit 0 or 1
/// (`subtype` says "success" either way); every reason is on stdout; the
/// assistant event's `error` names the class. modix owns retries, so the
/// CLI's own are off (`CLAUDE_CODE_MAX_RETRIES=0`). Long because it is one
/// table: every field of the preset in one place, as the CLI's docs list them.
fn claude() -> Shell {
    use FailureClass::*;
    Shell {
        requires: Some(">=2.0.0".into()),
        tested: Some(">=2.1.0, <2.2.0".into()),
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
            "--allowedTools",
            "{allowed_tools}",
            "--max-turns",
            "{max_turns}",
            "--max-budget-usd",
            "{max_budget_usd}",
            "--json-schema",
            "{json_schema}",
            "--no-session-persistence",
        ]),
        output: OutputSpec {
            format: OutputFormat::JsonLines,
            result_pointer: Some("/result".into()),
            error_pointer: Some("/is_error".into()),
            select: select(&[("/type", "result")]),
            concat: false,
        },
        // Its keys and login token; Bedrock, Vertex AI and Foundry and
        // their credentials; switches for side traffic (telemetry, error
        // reports) and for running as root in a sandbox (IS_SANDBOX).
        env: with(
            &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "ANTHROPIC_MODEL",
                "CLAUDE_CODE_USE_BEDROCK",
                "ANTHROPIC_BEDROCK_BASE_URL",
                "CLAUDE_CODE_USE_VERTEX",
                "ANTHROPIC_VERTEX_PROJECT_ID",
                "ANTHROPIC_VERTEX_BASE_URL",
                "CLOUD_ML_REGION",
                "GOOGLE_APPLICATION_CREDENTIALS",
                "CLAUDE_CODE_USE_FOUNDRY",
                "ANTHROPIC_FOUNDRY_API_KEY",
                "ANTHROPIC_FOUNDRY_RESOURCE",
                "DISABLE_TELEMETRY",
                "DISABLE_ERROR_REPORTING",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "IS_SANDBOX",
            ],
            &AWS,
        ),
        endpoint_env: Some("ANTHROPIC_BASE_URL".into()),
        // Headless, `default` refuses what is not allowed (edits, other
        // commands) instead of asking; `plan` may end on a plan, not JSON.
        permission_modes: modes("acceptEdits", "default"),
        failures: vec![
            field(Auth, "/error", "^authentication_failed$"),
            field(Auth, "/api_error_status", "^(401|403)$"),
            rule(
                Auth,
                "Not logged in|Invalid API key|OAuth token has expired|authentication_error",
            ),
            // The account's credit or quota is spent: no retry brings it back.
            field(BudgetExceeded, "/error", "^billing_error$"),
            rule(BudgetExceeded, "Credit balance is too low|billing_error"),
            // The request as built does not fit the model: the same prompt
            // fails the same way however often it is sent.
            rule(
                BadInvocation,
                "Prompt is too long|exceeds? (the )?(model's )?(maximum )?context",
            ),
            stopping(field(RateLimited, "/error", "^rate_limit$")),
            field(RateLimited, "/api_error_status", "^429$"),
            stopping(field(Overloaded, "/error", "^overloaded$")),
            field(Overloaded, "/api_error_status", "^(5\\d\\d)$"),
            field(NotFound, "/error", "^model_not_found$"),
            field(NotFound, "/api_error_status", "^404$"),
            rule(
                Network,
                "Unable to connect to API|ConnectionRefused|FailedToOpenSocket",
            ),
            // An `api_retry` event of another kind: the CLI is retrying on its
            // own despite CLAUDE_CODE_MAX_RETRIES; stop it, modix retries.
            stopping(field(Network, "/subtype", "^api_retry$")),
            field(BudgetExceeded, "/subtype", "^error_max_(turns|budget)"),
            rule(
                BadInvocation,
                "^error: (unknown option|option .* argument missing)",
            ),
        ],
        reason: strings(&["/result"]),
        keepalive: strings(&["\"subtype\":\"api_retry\""]),
        usage: usage([
            Some("/usage/input_tokens"),
            Some("/usage/output_tokens"),
            Some("/total_cost_usd"),
            Some("/num_turns"),
            Some("/model"),
            Some("/session_id"),
        ]),
        set_env: select(&[
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("DISABLE_AUTOUPDATER", "1"),
        ]),
        ..base("claude")
    }
}

/// Codex (flags checked against 0.169.0's `codex exec --help`): `--full-auto`
/// is gone since 0.147; `-` reads the prompt from stdin; the answer is the
/// last `agent_message`. No `--output-schema`: Codex sends that file as a
/// strict structured-output schema (`strict: true`), which the API refuses
/// unless every property is required and every object closed — what
/// `schema::strict` writes, once the orchestrator passes that file.
/// It sends `CODEX_API_KEY` (not `OPENAI_API_KEY`) and ignores
/// `OPENAI_BASE_URL` (the endpoint goes in as `-c openai_base_url=…`).
/// Offline it never fails: it prints "waiting for network" forever, so that
/// line stops it. `--disable shell_snapshot` keeps it from writing every
/// variable it got, keys included, to a world-readable file.
fn codex() -> Shell {
    use FailureClass::*;
    Shell {
        requires: Some(">=0.147.0".into()),
        tested: Some(">=0.169.0, <0.170.0".into()),
        args: strings(&[
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--disable",
            "shell_snapshot",
            "-C",
            "{workdir}",
            "-m",
            "{model}",
            "-s",
            "{permission_mode}",
            "-c",
            "openai_base_url={endpoint}",
            "--output-schema",
            "{output_schema_strict}",
            "--ephemeral",
            "-",
        ]),
        output: OutputSpec {
            format: OutputFormat::JsonLines,
            result_pointer: Some("/item/text".into()),
            error_pointer: None,
            select: select(&[("/type", "item.completed"), ("/item/type", "agent_message")]),
            concat: false,
        },
        // OPENAI_ORGANIZATION and OPENAI_PROJECT become its request headers.
        env: strings(&[
            "OPENAI_API_KEY",
            "CODEX_API_KEY",
            "CODEX_HOME",
            "OPENAI_ORGANIZATION",
            "OPENAI_PROJECT",
        ]),
        endpoint_env: None,
        permission_modes: modes("workspace-write", "read-only"),
        failures: vec![
            rule(Auth, "unexpected status 40[13]|Not logged in|Unauthorized"),
            // A spent quota comes as a 429 too: it is told apart first.
            rule(
                BudgetExceeded,
                "Quota exceeded|insufficient_quota|exceeded your current quota|usage limit",
            ),
            rule(
                BadInvocation,
                "context window|context_length_exceeded|maximum context length",
            ),
            rule(RateLimited, "last status: 429|429 Too Many Requests"),
            rule(
                Overloaded,
                "high demand|last status: 5\\d\\d\\b|status 5\\d\\d\\b",
            ),
            rule(
                NotFound,
                "model_not_found|does not exist or you do not have access",
            ),
            stopping(rule(Network, "waiting for network")),
            rule(
                BadInvocation,
                "^error: unexpected argument|^error: invalid value",
            ),
            exit(BadInvocation, 2),
        ],
        reason: strings(&["/error/message", "/message"]),
        keepalive: strings(&["Reconnecting\\.\\.\\."]),
        usage: usage([
            Some("/usage/input_tokens"),
            Some("/usage/output_tokens"),
            None,
            None,
            None,
            Some("/thread_id"),
        ]),
        key_env: Some("CODEX_API_KEY".into()),
        ..base("codex")
    }
}

/// Gemini CLI (flags checked against 0.61.0's `--help`): `--skip-trust` is required headless
/// (or it exits 55); `stream-json` streams the answer in `message` deltas
/// (`json` prints nothing until the end); exit codes carry the class (41
/// auth, 42 input, 52 config, 53 turn limit); a start-up failure's reason is
/// on stderr; once it retries on its own, stop it (modix owns retries).
fn gemini() -> Shell {
    use FailureClass::*;
    Shell {
        requires: Some(">=0.50.0".into()),
        tested: Some(">=0.61.0, <0.62.0".into()),
        args: strings(&[
            "-o",
            "stream-json",
            "-m",
            "{model}",
            "--skip-trust",
            "--approval-mode",
            "{permission_mode}",
        ]),
        output: OutputSpec {
            format: OutputFormat::JsonLines,
            result_pointer: Some("/content".into()),
            error_pointer: None,
            select: select(&[("/type", "message"), ("/role", "assistant")]),
            concat: true,
        },
        // Its key; Vertex AI (project, location, credentials) and Google
        // login switches.
        env: strings(&[
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_GENAI_USE_GCA",
            "GOOGLE_CLOUD_PROJECT",
            "GOOGLE_CLOUD_LOCATION",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ]),
        endpoint_env: Some("GOOGLE_GEMINI_BASE_URL".into()),
        permission_modes: modes("auto_edit", "plan"),
        failures: vec![
            exit(Auth, 41),
            rule(
                Auth,
                "Please set an Auth method|Invalid auth method|API key not valid",
            ),
            exit(BadInvocation, 42),
            exit(BadInvocation, 52),
            exit(BudgetExceeded, 53),
            // Status codes as whole numbers: a port or a pid in the same
            // text (`127.0.0.1:45031`) is not a 503.
            // A daily quota spent is not a rate limit: no retry today helps.
            rule(
                BudgetExceeded,
                "exhausted your daily quota|daily quota|per ?day",
            ),
            rule(
                NotFound,
                "models/\\S+ is not found|\\bNOT_FOUND\\b|model .*not found",
            ),
            rule(
                BadInvocation,
                "input token count .*exceeds|exceeds the maximum number of tokens|context window",
            ),
            rule(RateLimited, "\\b429\\b|RESOURCE_EXHAUSTED|Quota exceeded"),
            rule(Overloaded, "\\b503\\b|UNAVAILABLE|overloaded"),
            stopping(rule(Network, "Attempt \\d+ failed.*fetch failed")),
            rule(Network, "fetch failed|ENOTFOUND|ECONNREFUSED"),
        ],
        reason: strings(&["/error/message"]),
        noise: strings(&[
            "^Warning: 256-color",
            "^Ripgrep is not available",
            "^\\s+at ",
        ]),
        keepalive: strings(&["^Attempt \\d+ failed"]),
        usage: usage([
            Some("/stats/input_tokens"),
            Some("/stats/output_tokens"),
            None,
            None,
            Some("/model"),
            Some("/session_id"),
        ]),
        ..base("gemini")
    }
}

/// Aider (flags from 0.86's documentation; not installed by
/// `.ci/agent-clis`, so not checked there): no JSON mode (the answer is a ```json
/// block in its text) and no read-only mode; with `--no-stream` it prints
/// nothing until the end, so the idle timeout is off. The message goes in
/// a file, not an argument (Linux caps one argument at 128 KiB).
fn aider() -> Shell {
    use FailureClass::*;
    Shell {
        requires: Some(">=0.80.0".into()),
        tested: Some(">=0.80.0, <0.90.0".into()),
        args: strings(&[
            "--message-file",
            "{prompt_file}",
            "--yes-always",
            "--no-pretty",
            "--no-stream",
            "--no-auto-commits",
            "--model",
            "{model}",
        ]),
        prompt: PromptMode::File,
        env: with(
            &[
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "GEMINI_API_KEY",
                "OPENROUTER_API_KEY",
                "DEEPSEEK_API_KEY",
            ],
            &AWS,
        ),
        // Aider has no read-only mode: a read-only agent must not be bound to it.
        permission_modes: None,
        capabilities: strings(&["code-edit"]),
        failures: vec![
            rule(
                Auth,
                "AuthenticationError|invalid x-api-key|Incorrect API key",
            ),
            rule(RateLimited, "RateLimitError"),
            rule(Overloaded, "OverloadedError|ServiceUnavailableError"),
            rule(Network, "APIConnectionError"),
            rule(NotFound, "NotFoundError|model .* not found"),
        ],
        idle: false,
        ..base("aider")
    }
}

/// Settles a shell entry: the preset (if any) with the entry's own fields on top.
/// `Err` says what is missing when there is no preset to fill it.
pub fn resolve(name: &str, entry: &ShellEntry) -> Result<Shell, String> {
    let preset = match &entry.preset {
        Some(p) => Some(preset(p).ok_or_else(|| format!("unknown preset `{p}`"))?),
        None => None,
    };
    if preset.is_none() && entry.binary.is_none() {
        return Err("a shell needs `preset` or `binary`".into());
    }
    if preset.is_none() && entry.args.is_none() {
        return Err("a shell without a preset needs `args` (the invocation)".into());
    }
    // A shell without a preset starts from nothing but the defaults.
    let base = preset.unwrap_or_else(|| Shell {
        preset: None,
        version: None,
        capabilities: Vec::new(),
        ..base(name)
    });
    // Lists add to the preset's (the shell's own entries first); the rest
    // replace it.
    let joined = |own: &Option<Vec<String>>, preset: &[String]| -> Vec<String> {
        own.iter().flatten().chain(preset).cloned().collect()
    };
    let own_failures = entry
        .failures
        .iter()
        .flatten()
        .map(FailureRuleEntry::typed)
        .collect::<Result<Vec<_>, _>>()?;
    let mut set_env = base.set_env.clone();
    set_env.extend(entry.set_env.clone().unwrap_or_default());
    Ok(Shell {
        name: name.to_owned(),
        preset: entry.preset.clone(),
        binary: entry.binary.clone().unwrap_or(base.binary),
        version: entry.version.clone().or(base.version),
        requires: entry.requires.clone().or(base.requires),
        args: entry.args.clone().unwrap_or(base.args),
        prompt: entry.prompt.unwrap_or(base.prompt),
        output: entry.output.clone().unwrap_or(base.output),
        env: entry.env.clone().unwrap_or(base.env),
        endpoint_env: entry.endpoint_env.clone().or(base.endpoint_env),
        permission_modes: entry.permission_modes.clone().or(base.permission_modes),
        capabilities: entry.capabilities.clone().unwrap_or(base.capabilities),
        tested: entry.tested.clone().or(base.tested),
        failures: own_failures.into_iter().chain(base.failures).collect(),
        reason: joined(&entry.reason, &base.reason),
        noise: joined(&entry.noise, &base.noise),
        keepalive: joined(&entry.keepalive, &base.keepalive),
        usage: entry.usage.clone().unwrap_or(base.usage),
        set_env,
        key_env: entry.key_env.clone().or(base.key_env),
        idle: entry.idle.unwrap_or(base.idle),
    })
}

fn modes(write: &str, read_only: &str) -> Option<PermissionModes> {
    Some(PermissionModes {
        write: write.to_owned(),
        read_only: read_only.to_owned(),
    })
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

    /// What `validate` checks in a shells.json entry holds for the presets.
    #[test]
    fn every_preset_rule_compiles_and_points() {
        for name in PRESET_NAMES {
            let s = preset(name).unwrap();
            let patterns = s.failures.iter().filter_map(|r| r.pattern.as_ref());
            for re in patterns.chain(&s.noise).chain(&s.keepalive) {
                regex::Regex::new(re).unwrap_or_else(|e| panic!("{name}: {re}: {e}"));
            }
            let u = &s.usage;
            let pointers = [&u.input_tokens, &u.output_tokens, &u.cost_usd, &u.turns]
                .into_iter()
                .chain([&u.model, &u.session_id, &s.output.result_pointer])
                .flatten()
                .chain(&s.reason)
                .chain(s.output.select.keys())
                .chain(s.failures.iter().filter_map(|r| r.pointer.as_ref()));
            for p in pointers {
                assert!(p.starts_with('/'), "{name}: {p}");
            }
            for range in [&s.requires, &s.tested].into_iter().flatten() {
                semver::VersionReq::parse(range).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
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
