//! The typed shape of every config file. The JSON Schemas in `schemas/` are the
//! contract users see; these types mirror them (`deny_unknown_fields` as a
//! second guard) so the rest of modix never touches raw JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `.modix/version.json`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VersionFile {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// `.modix/shells.json`.
// The whole file's shape, as the schema has it; `config::read` types the
// file entry by entry (`config::Entries`), and the fuzz tests use this.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShellsFile {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub shells: BTreeMap<String, ShellEntry>,
}

/// One shell as written: a preset, fields that override it, or a full definition.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShellEntry {
    pub preset: Option<String>,
    pub binary: Option<String>,
    pub version: Option<VersionProbe>,
    pub requires: Option<String>,
    pub args: Option<Vec<String>>,
    pub prompt: Option<PromptMode>,
    pub output: Option<OutputSpec>,
    pub env: Option<Vec<String>>,
    pub endpoint_env: Option<String>,
    pub permission_modes: Option<PermissionModes>,
    pub capabilities: Option<Vec<String>>,
    pub tested: Option<String>,
    pub failures: Option<Vec<FailureRuleEntry>>,
    pub reason: Option<Vec<String>>,
    pub noise: Option<Vec<String>>,
    pub keepalive: Option<Vec<String>>,
    pub usage: Option<UsageSpec>,
    pub set_env: Option<BTreeMap<String, String>>,
    pub key_env: Option<String>,
    pub idle: Option<bool>,
}

/// One way a CLI says how it failed. Every condition given must hold:
/// the exit code, and a line (of `stream`) matching `pattern` — or, with
/// `pointer`, a JSON line whose value there matches it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FailureRule {
    pub class: crate::fsm::FailureClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(default)]
    pub stream: StreamChoice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Stop the agent as soon as such a line appears: the CLI went into a
    /// wait or retry loop of its own (modix owns retries).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
}

/// A failure rule as written in `shells.json`: its class is a name checked
/// (with "did you mean") when the file is, then typed into [`FailureRule`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FailureRuleEntry {
    pub class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(default)]
    pub stream: StreamChoice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
}

impl FailureRuleEntry {
    /// The typed rule; `Err` names the class when it is not one modix knows.
    pub fn typed(&self) -> Result<FailureRule, String> {
        let class = self
            .class
            .parse()
            .map_err(|_| format!("unknown failure class `{}`", self.class))?;
        Ok(FailureRule {
            class,
            pattern: self.pattern.clone(),
            pointer: self.pointer.clone(),
            stream: self.stream,
            exit_code: self.exit_code,
            stop: self.stop,
        })
    }
}

/// Which output stream a rule looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamChoice {
    #[default]
    Any,
    Stdout,
    Stderr,
}

/// Where a CLI's JSON output says what an invocation used: JSON pointers
/// into its last lines that have them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// The values `{permission_mode}` takes, by the manifest's `write_files`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionModes {
    /// For agents that may change files (e.g. Claude's `acceptEdits`).
    pub write: String,
    /// For agents that must not (e.g. Claude's `plan`).
    pub read_only: String,
}

/// How to ask a CLI for its version.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VersionProbe {
    pub args: Vec<String>,
    /// First capture group is the version.
    pub regex: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptMode {
    Stdin,
    Argument,
    /// Written to a file whose path is `{prompt_file}` (for CLIs that read
    /// a message file and would take stdin as interactive input).
    File,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    pub format: OutputFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_pointer: Option<String>,
    /// With `json-lines`: only lines whose value at each pointer is the given
    /// string (e.g. `{"/type": "result"}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub select: BTreeMap<String, String>,
    /// With `json-lines`: the answer is the texts at `result_pointer` of all
    /// selected lines, joined (a CLI that streams it in pieces).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub concat: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
    JsonLines,
}

/// A shell with its preset applied and every field settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shell {
    pub name: String,
    pub preset: Option<String>,
    pub binary: String,
    pub version: Option<VersionProbe>,
    pub requires: Option<String>,
    pub args: Vec<String>,
    pub prompt: PromptMode,
    pub output: OutputSpec,
    pub env: Vec<String>,
    pub endpoint_env: Option<String>,
    pub permission_modes: Option<PermissionModes>,
    pub capabilities: Vec<String>,
    /// The versions its flags were checked against; outside them `doctor`
    /// warns (the CLI may have changed them).
    pub tested: Option<String>,
    /// How it fails: the shell's own rules first, then its preset's.
    pub failures: Vec<FailureRule>,
    /// JSON pointers to its own one-line reason in its last JSON lines.
    pub reason: Vec<String>,
    /// Lines that are never a reason (warnings every run prints).
    pub noise: Vec<String>,
    /// Lines that are not progress: they do not reset the idle timeout.
    pub keepalive: Vec<String>,
    pub usage: UsageSpec,
    /// Variables modix sets for it (e.g. its own retries off: modix owns them).
    pub set_env: BTreeMap<String, String>,
    /// The name the CLI reads its key from, when it is not the brain's
    /// variable (Codex sends `CODEX_API_KEY`, not `OPENAI_API_KEY`): the
    /// brain's key is passed under this name too.
    pub key_env: Option<String>,
    /// Whether the idle timeout applies (a CLI that prints nothing until
    /// the end must not be stopped for being quiet).
    pub idle: bool,
}

/// `.modix/brains.json`.
// The whole file's shape, as the schema has it; `config::read` types the
// file entry by entry (`config::Entries`), and the fuzz tests use this.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BrainsFile {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub brains: BTreeMap<String, Brain>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Brain {
    /// Its key in `brains.json` (filled in when the file is checked).
    #[serde(skip)]
    pub name: String,
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The NAME of the variable holding the key; the key never appears in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// `.modix/agents.json`.
// The whole file's shape, as the schema has it; `config::read` types the
// file entry by entry (`config::Entries`), and the fuzz tests use this.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsFile {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub agents: BTreeMap<String, AgentEntry>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    pub role: String,
    pub shell: Option<String>,
    pub brain: Option<String>,
    pub command: Option<Vec<String>>,
    pub fsm: Option<String>,
    pub manifest: Option<ManifestRef>,
}

/// A manifest file's path (a string), or the manifest itself (an object).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ManifestRef {
    Path(String),
    Inline(Manifest),
}

// By hand rather than `untagged`: the JSON type decides the branch first,
// so a mistake inside an inline manifest is reported as itself instead of
// "data did not match any variant".
impl<'de> Deserialize<'de> for ManifestRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(path) => Ok(ManifestRef::Path(path)),
            v @ serde_json::Value::Object(_) => serde_json::from_value(v)
                .map(ManifestRef::Inline)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "a manifest is a path (a string) or the manifest itself (an object), not {other}"
            ))),
        }
    }
}

/// How an agent is invoked: its prompt, its output contract, its limits.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub prompt: Option<String>,
    pub system_prompt: Option<String>,
    pub output_schema: Option<String>,
    #[serde(default)]
    pub output_mode: OutputMode,
    pub timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub context: Option<ContextMode>,
    #[serde(default)]
    pub permissions: Permissions,
    #[serde(default)]
    pub requires: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// The agent prints its result as JSON.
    #[default]
    Json,
    /// The exit code is the result (test runners and other plain commands).
    ExitStatus,
}

#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ContextMode {
    #[default]
    Isolated,
    Shared,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    /// May change files (an agent that may not and does is rejected).
    #[serde(default)]
    pub write_files: bool,
    /// May change protected paths (an agent that writes tests).
    #[serde(default)]
    pub protected: bool,
}

/// How an agent is run, resolved: the shell and brain themselves, not
/// their names, so nothing is looked up again once a run has started.
#[derive(Debug, Clone)]
pub enum Binding {
    /// An LLM CLI (shell) driven by a brain.
    Shell {
        shell: Box<Shell>,
        brain: Box<Brain>,
    },
    /// A plain command run as-is.
    Command { argv: Vec<String> },
}

impl Binding {
    /// `shell + brain`, or `command: argv…`, for people.
    pub fn describe(&self) -> String {
        match self {
            Binding::Shell { shell, brain } => format!("{} + {}", shell.name, brain.name),
            Binding::Command { argv } => format!("command: {}", argv.join(" ")),
        }
    }

    pub fn shell(&self) -> Option<&Shell> {
        match self {
            Binding::Shell { shell, .. } => Some(shell),
            Binding::Command { .. } => None,
        }
    }

    pub fn brain(&self) -> Option<&Brain> {
        match self {
            Binding::Shell { brain, .. } => Some(brain),
            Binding::Command { .. } => None,
        }
    }
}

/// An agent with its manifest loaded and its binding settled.
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: String,
    pub role: String,
    pub binding: Binding,
    pub fsm: String,
    pub manifest: Manifest,
}

/// `.modix/runtimes.json`, every field defaulted.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Runtimes {
    #[serde(rename = "$schema", skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub retry: RetryPolicy,
    pub timeouts: Timeouts,
    pub loops: Loops,
    pub output: OutputLimits,
    pub env: EnvPolicy,
    pub budget: Budget,
    pub durability: Durability,
}

/// When a step's record must be on disk, relative to the next agent's start
/// (docs/record.md, "Crash safety"). Either way the step's commit is synced
/// before anything is said of it and before any later step commits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// The step is on disk before the next agent starts.
    #[default]
    Full,
    /// The step's sync runs while the next agent starts: a power cut in that
    /// moment can lose the step after that agent began, and a resume then
    /// runs the step again.
    Pipelined,
}

/// What a run may spend: a whole-run ceiling on time, cost and tokens, and
/// per-invocation caps passed to CLIs that take them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// The whole run's deadline, from its start.
    pub max_run_secs: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_tokens: Option<u64>,
    /// Passed as `{max_turns}` (Claude's `--max-turns`).
    pub invocation_max_turns: Option<u32>,
    /// Passed as `{max_budget_usd}` (Claude's `--max-budget-usd`).
    pub invocation_max_cost_usd: Option<f64>,
    /// `go` refuses to start when the worst case it can bound costs more.
    pub refuse_above_usd: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_interval_ms: u64,
    pub backoff_rate: f64,
    pub max_delay_ms: u64,
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 2,
            initial_interval_ms: 500,
            backoff_rate: 2.0,
            max_delay_ms: 10_000,
            jitter: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    pub default_secs: u64,
    pub idle_secs: u64,
    pub kill_grace_secs: u64,
    pub by_state: BTreeMap<String, u64>,
    pub by_complexity: ByComplexity,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            default_secs: 900,
            idle_secs: 300,
            kill_grace_secs: 5,
            by_state: BTreeMap::new(),
            by_complexity: ByComplexity::default(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ByComplexity {
    pub low: Option<u64>,
    pub medium: Option<u64>,
    pub high: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Loops {
    pub default_max: u32,
    /// A test failure repeated this many times in a row is no progress.
    pub no_progress_after: u32,
}

impl Default for Loops {
    fn default() -> Self {
        Loops {
            default_max: 3,
            no_progress_after: 2,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputLimits {
    pub max_capture_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_capture_bytes: 1 << 20,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvPolicy {
    /// Variables every agent inherits from modix's environment.
    pub allow: Vec<String>,
}

/// What every agent inherits by default: the basics, the proxies (a CLI
/// behind a corporate proxy cannot reach its API without them) and the CA
/// bundles (nor, behind a TLS-inspecting proxy, trust it). Keys are not
/// here: each shell passes its own (`env`), and the brain's.
pub const DEFAULT_ENV_ALLOW: [&str; 21] = [
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "SHELL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

impl Default for EnvPolicy {
    fn default() -> Self {
        EnvPolicy {
            allow: DEFAULT_ENV_ALLOW.map(String::from).to_vec(),
        }
    }
}

/// `.modix/projects.json`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "default_workflow")]
    pub workflow: String,
    /// `None`: a worktree inside a git repository, a copy elsewhere
    /// (`docs/workspaces.md`).
    #[serde(default)]
    pub workspace: Option<crate::workspace::Mode>,
    /// Where run workspaces go (default `~/.modix/worktrees`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktrees: Option<String>,
    #[serde(default)]
    pub scope: Scope,
    /// `None`: [`DEFAULT_PROTECTED`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
    /// Never recorded as a change, besides the built-in list.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// The largest file a step may write (bytes): a bigger one is removed
    /// before the step is recorded and the step rejected.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    #[serde(default)]
    pub commands: Commands,
    #[serde(default)]
    pub stack: Vec<String>,
    #[serde(default)]
    pub conventions: Vec<String>,
}

/// 100 MiB: GitHub's limit for a file in a repository.
pub fn default_max_file_bytes() -> u64 {
    100 * 1024 * 1024
}

pub fn default_workflow() -> String {
    "plan_execute_test".to_owned()
}

/// What an executor may change besides its task's files.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    #[serde(default)]
    pub always: Vec<String>,
}

/// Paths no agent may change unless its manifest allows it, when
/// `projects.json` names none: the tests (the oracle of a fix), the files
/// that change how they are collected or run, modix's own config and CI
/// config, across the common stacks. Files that also hold what ordinary
/// work changes (`package.json`, `pyproject.toml`, `setup.cfg`: a project's
/// dependencies) are not among them: a test command run through them is
/// held to its runner's summary instead (see `orchestrator::evidence`).
pub const DEFAULT_PROTECTED: &[&str] = &[
    "tests/**",
    "test/**",
    "**/tests/**",
    "**/__tests__/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/*_test.go",
    "**/*.test.*",
    "**/*.spec.*",
    "**/*Test.java",
    "**/*Tests.cs",
    "spec/**",
    // What decides which tests run, or runs before them.
    "**/conftest.py",
    "pytest.ini",
    "tox.ini",
    "noxfile.py",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    // A module by a runner's name shadows it (`python -m unittest`).
    "unittest.py",
    "pytest.py",
    "**/jest.config.*",
    "**/vitest.config.*",
    "**/vitest.workspace.*",
    "**/.mocharc*",
    ".config/nextest.toml",
    ".modix/**",
    ".github/workflows/**",
    ".gitlab-ci.yml",
    ".circleci/**",
    ".ci/**",
];

/// Added to [`DEFAULT_PROTECTED`] when the project's tests run through
/// `make`: its test target is then the test command.
pub const MAKEFILES: &[&str] = &["GNUmakefile", "makefile", "Makefile"];

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Commands {
    pub build: Option<Vec<String>>,
    pub test: Option<Vec<String>>,
    pub lint: Option<Vec<String>>,
    /// Cheap commands `modix doctor` runs to see that a command can run,
    /// by the command's name (`"test": ["python3", "-m", "pytest", "--version"]`);
    /// used for a command agent that runs exactly that command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub probes: BTreeMap<String, Vec<String>>,
}

/// `~/.modix/settings.json` after layering.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    #[serde(rename = "$schema", skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub default_shell: Option<String>,
    pub default_brain: Option<String>,
    pub context_mode: Option<ContextMode>,
    pub log_level: Option<LogLevel>,
    pub color: Option<ColorChoice>,
}

/// When to colour output (`--color`, `MODIX_COLOR`, settings `color`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Deserialize,
    Serialize,
    strum::EnumString,
    strum::VariantNames,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// How much modix logs (`-q`/`-v`, `MODIX_LOG`, settings `log_level`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Deserialize,
    Serialize,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `modix init` writes the same allowlist a project without one gets.
    #[test]
    fn the_template_allows_what_the_default_does() {
        let file = crate::embedded::TEMPLATE
            .get_file("runtimes.json")
            .and_then(|f| f.contents_utf8())
            .unwrap();
        let runtimes: Runtimes = serde_json::from_str(file).unwrap();
        assert_eq!(runtimes.env.allow, EnvPolicy::default().allow);
    }
}
