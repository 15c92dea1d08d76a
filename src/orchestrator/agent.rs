//! One agent invocation's process: the argv and environment it gets (made
//! from the invocation's [`Call`]), and what its output means — the
//! structured result, validated against its schema, as a [`Verdict`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::classify::Rules;
use super::invoke::Call;
use crate::config::{
    Agent, Binding, Brain, Commands, Config, OutputMode, OutputSpec, PromptMode, Runtimes, Shell,
};
use crate::fsm::{AgentState, FailureClass, Outcome};
use crate::fsutil::Seen;
use crate::shell::{
    self, CaptureLimits, EchoFn, EndReason, Placeholders, ProcessOutcome, ProcessSpec, Redactor,
    last_lines,
};

/// The process to start, before it starts.
pub(super) struct Prepared {
    pub spec: ProcessSpec,
    /// argv as recorded: program first, secrets redacted.
    pub argv_redacted: Vec<String>,
}

/// What an invocation came to.
#[derive(Debug, Clone)]
pub(super) enum Verdict {
    /// Output that satisfies the schema.
    Output(Value),
    /// No valid output, and why.
    Failed(Failure),
    /// Ctrl-C or SIGTERM stopped it: no outcome; the run is interrupted.
    Cancelled,
}

/// Why an invocation did not produce valid output.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub class: FailureClass,
    /// The CLI's own one-line reason (or modix's, when it has none).
    pub reason: String,
    /// For invalid output: every way it broke its schema.
    pub errors: Vec<String>,
    /// What the agent's next attempt is told, when not the schema errors
    /// (e.g. why the orchestrator took its changes off).
    pub feedback: Option<String>,
}

impl Failure {
    pub fn new(class: FailureClass, reason: impl Into<String>) -> Self {
        Failure {
            class,
            reason: reason.into(),
            errors: Vec::new(),
            feedback: None,
        }
    }

    fn invalid(errors: Vec<String>) -> Self {
        Failure {
            class: FailureClass::InvalidOutput,
            reason: errors.first().cloned().unwrap_or_default(),
            errors,
            feedback: None,
        }
    }
}

impl Verdict {
    /// The outcome as the emit rules and the store see it (`None` when cancelled).
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            Verdict::Output(_) => Outcome::Output,
            Verdict::Failed(f) => f.class.outcome(),
            Verdict::Cancelled => return None,
        })
    }

    /// The validated output, for `output` verdicts.
    pub fn output(&self) -> Option<&Value> {
        match self {
            Verdict::Output(v) => Some(v),
            _ => None,
        }
    }

    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Verdict::Failed(f) => Some(f),
            _ => None,
        }
    }
}

/// Why an agent could not be started, with the command line as far as it
/// was known (recorded with the invocation).
#[derive(Debug, thiserror::Error)]
pub(super) enum PrepareError {
    #[error(
        "agent `{agent}`: program `{program}` not found (looked on PATH and in the project root)"
    )]
    NotFound {
        agent: String,
        program: String,
        argv: Vec<String>,
    },
    #[error("agent `{agent}`: {message}")]
    Args { agent: String, message: String },
}

impl PrepareError {
    pub fn class(&self) -> FailureClass {
        match self {
            PrepareError::NotFound { .. } => FailureClass::NotFound,
            PrepareError::Args { .. } => FailureClass::BadInvocation,
        }
    }

    /// The command line that would have run, redacted.
    pub fn argv(&self) -> &[String] {
        match self {
            PrepareError::NotFound { argv, .. } => argv,
            PrepareError::Args { .. } => &[],
        }
    }
}

/// The secrets the run must never record: every brain's key, and passed-through
/// variables that look like credentials.
pub(crate) fn redactor(config: &Config) -> Redactor {
    let mut names: Vec<&str> = config
        .brains
        .values()
        .filter_map(|b| b.api_key_env.as_deref())
        .collect();
    for s in config.shells.values() {
        names.extend(s.env.iter().map(String::as_str).filter(|n| looks_secret(n)));
    }
    names.extend(
        config
            .runtimes
            .env
            .allow
            .iter()
            .map(String::as_str)
            .filter(|n| looks_secret(n)),
    );
    names.sort_unstable();
    names.dedup();
    let mut secrets: Vec<(String, String)> = names
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?)))
        .collect();
    // Credentials inside a URL an agent is handed (`https://user:pass@proxy`).
    let passed = config
        .runtimes
        .env
        .allow
        .iter()
        .chain(config.shells.values().flat_map(|s| s.env.iter()));
    for name in passed {
        if let Some(userinfo) = std::env::var(name)
            .ok()
            .as_deref()
            .and_then(url_credentials)
        {
            if let Some((_, password)) = userinfo.split_once(':') {
                secrets.push((format!("{name} password"), password.to_owned()));
            }
            secrets.push((format!("{name} credentials"), userinfo.to_owned()));
        }
    }
    Redactor::new(secrets)
}

/// The `user:password` of a URL (`scheme://user:password@host/…`), if any.
fn url_credentials(value: &str) -> Option<&str> {
    let rest = value.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    (!userinfo.is_empty()).then_some(userinfo)
}

fn looks_secret(name: &str) -> bool {
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| name.to_ascii_uppercase().contains(w))
}

/// Builds the process for an invocation. Nothing here goes through a shell:
/// user text only ever becomes one argv element or stdin.
pub(super) fn prepare(
    call: &Call,
    setup: &Setup,
    prompt: &str,
    system_prompt: Option<&str>,
    redactor: &Redactor,
) -> Result<Prepared, PrepareError> {
    let agent = call.agent;
    let runtimes = setup.runtimes;
    let mut env = base_env(setup.inherited, call);
    let (args, stdin, idle) = match &agent.binding {
        Binding::Command { argv } => (argv[1..].to_vec(), Some(prompt.as_bytes().to_vec()), true),
        Binding::Shell { shell, brain } => {
            env.extend(shell_env(shell, brain));
            let values = placeholders(call, setup, shell, brain, prompt, system_prompt);
            let args =
                shell::render_args(&shell.args, &values).map_err(|e| PrepareError::Args {
                    agent: agent.id.clone(),
                    message: e.to_string(),
                })?;
            if shell.prompt == PromptMode::File {
                super::invoke::overwrite(&call.prompt_path, prompt.as_bytes()).map_err(|e| {
                    PrepareError::Args {
                        agent: agent.id.clone(),
                        message: format!("cannot write {}: {e}", call.prompt_path.display()),
                    }
                })?;
            }
            let stdin = (shell.prompt == PromptMode::Stdin).then(|| prompt.as_bytes().to_vec());
            (args, stdin, shell.idle)
        }
    };
    env.extend(
        private_tmp(&call.tmp_dir, setup.tmp_seen).map_err(|e| PrepareError::Args {
            agent: agent.id.clone(),
            message: format!("cannot make {}: {e}", call.tmp_dir.display()),
        })?,
    );
    let written = program_of(agent);
    let mut argv_redacted = vec![written.to_owned()];
    argv_redacted.extend(redactor.redact_args(&args));
    // Looked up on PATH once per run: a lookup walks every PATH entry, each
    // step. A program removed since fails to spawn, as it would have.
    let known = setup.programs.borrow().get(written).cloned();
    let Some(program) = known.or_else(|| shell::find_binary(setup.root, written)) else {
        return Err(PrepareError::NotFound {
            agent: agent.id.clone(),
            program: written.to_owned(),
            argv: argv_redacted,
        });
    };
    setup
        .programs
        .borrow_mut()
        .insert(written.to_owned(), program.clone());
    argv_redacted[0] = program.display().to_string();
    let max = runtimes.output.max_capture_bytes as usize;
    let idle_secs = agent
        .manifest
        .idle_timeout_secs
        .or(Some(runtimes.timeouts.idle_secs));
    Ok(Prepared {
        spec: ProcessSpec {
            program,
            args: args.into_iter().map(OsString::from).collect(),
            cwd: call.workdir.to_path_buf(),
            env,
            stdin,
            timeout: call.timeout,
            idle_timeout: idle_secs.filter(|_| idle).map(Duration::from_secs),
            kill_grace: Duration::from_secs(runtimes.timeouts.kill_grace_secs),
            // The answer is at the end of the output, so keep more of the tail.
            capture: CaptureLimits {
                head_bytes: max / 4,
                tail_bytes: max - max / 4,
            },
            echo: call.echo.clone(),
            on_spawn: None,
            watch: call.rules.as_ref().map(|r| r.watch()),
        },
        argv_redacted,
    })
}

/// A temporary folder of the invocation's own, empty and private (0700),
/// as `TMPDIR`/`TMP`/`TEMP` (set last, so they win over the allowlist):
/// what a CLI writes there (error reports that quote the prompt, scratch
/// files) stays with the run and is cleared before the next invocation and
/// when the run stops, instead of piling up in the machine's shared /tmp.
/// An empty folder is kept from one invocation to the next: making and
/// removing a folder costs a journal write each, every step. Nor is it
/// listed again while its stat is the one `seen` remembers from when it was
/// last listed empty: nothing was made in it since (an open, a read of its
/// entries and a close, every step, were a sixth of preparing an agent).
fn private_tmp(dir: &Path, seen: &TmpSeen) -> std::io::Result<Vec<(OsString, OsString)>> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let reuse = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() && m.permissions().mode() & 0o777 == 0o700 => {
            let now = Seen::of(&m);
            if seen.get() == Some(now) {
                return Ok(tmp_env(dir));
            }
            let checked = std::time::SystemTime::now();
            let empty = std::fs::read_dir(dir)?.next().is_none();
            seen.set(if empty { now.settled(checked) } else { None });
            if !empty {
                std::fs::remove_dir_all(dir)?;
            }
            empty
        }
        Ok(_) => {
            remove_any(dir)?;
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    // Made only when it is not already there, empty and private (a `mkdir`
    // that fails on every step still costs a path walk and a lock).
    if !reuse {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    Ok(tmp_env(dir))
}

/// The private tmp folder as last listed empty ([`private_tmp`]), for a run.
pub(super) type TmpSeen = std::cell::Cell<Option<Seen>>;

fn tmp_env(dir: &Path) -> Vec<(OsString, OsString)> {
    let value = dir.as_os_str().to_owned();
    ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|k| (OsString::from(k), value.clone()))
        .collect()
}

/// Removes whatever is at `path` (a folder with its content, a file, a link).
pub(super) fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Where each program an agent names was found, by that name.
pub(super) type Programs = std::cell::RefCell<std::collections::HashMap<String, PathBuf>>;

/// What preparing an agent needs from the project, besides the call.
pub(super) struct Setup<'a> {
    pub root: &'a Path,
    /// What agents inherit of modix's environment ([`inherited`]).
    pub inherited: &'a [(OsString, OsString)],
    /// Programs already found (by the name an agent gives), for this run.
    pub programs: &'a Programs,
    /// The run's tmp folder as last listed empty.
    pub tmp_seen: &'a TmpSeen,
    pub runtimes: &'a Runtimes,
    pub commands: &'a Commands,
}

/// A shell agent's own variables: the shell's pass-through list, the
/// brain's key (also under the name the CLI reads, when it differs), the
/// endpoint, and what modix sets for the CLI (its own retries off).
fn shell_env(shell: &Shell, brain: &Brain) -> Vec<(OsString, OsString)> {
    let var = |name: &str| std::env::var_os(name).map(|v| (OsString::from(name), v));
    let mut env: Vec<(OsString, OsString)> = shell.env.iter().filter_map(|n| var(n)).collect();
    if let Some(key) = brain.api_key_env.as_deref().and_then(var) {
        if let Some(alias) = &shell.key_env {
            env.push((alias.into(), key.1.clone()));
        }
        env.push(key);
    }
    if let (Some(name), Some(ep)) = (&shell.endpoint_env, &brain.endpoint) {
        env.push((name.into(), ep.into()));
    }
    env.extend(shell.set_env.iter().map(|(k, v)| (k.into(), v.into())));
    env
}

/// The values of a shell's argument placeholders for one invocation.
fn placeholders(
    call: &Call,
    setup: &Setup,
    shell: &Shell,
    brain: &Brain,
    prompt: &str,
    system_prompt: Option<&str>,
) -> Placeholders {
    let agent = call.agent;
    let budget = &setup.runtimes.budget;
    let max_turns = budget
        .invocation_max_turns
        .map(u64::from)
        .or_else(|| brain.params.get("max_turns").and_then(Value::as_u64));
    Placeholders {
        prompt: (shell.prompt == PromptMode::Argument).then(|| prompt.to_owned()),
        model: Some(brain.model.clone()),
        system_prompt: system_prompt.map(str::to_owned),
        workdir: Some(call.workdir.display().to_string()),
        output_schema: (call.output != "any").then(|| call.schema_path.display().to_string()),
        output_schema_strict: (call.output != "any")
            .then(|| call.strict_schema_path.display().to_string()),
        endpoint: brain.endpoint.clone(),
        role: Some(agent.role.clone()),
        permission_mode: shell.permission_modes.as_ref().map(|m| {
            if agent.manifest.permissions.write_files {
                m.write.clone()
            } else {
                m.read_only.clone()
            }
        }),
        json_schema: call.schemas.strict(call.output).map(|v| v.to_string()),
        max_turns: max_turns.map(|n| n.to_string()),
        max_budget_usd: budget.invocation_max_cost_usd.map(|c| c.to_string()),
        allowed_tools: allowed_tools(setup.commands),
        prompt_file: Some(call.prompt_path.display().to_string()),
    }
}

/// The project's own commands as Claude-style tool permissions, so an
/// agent may run the tests (and build and lint) without being asked.
fn allowed_tools(commands: &Commands) -> Option<String> {
    let tools: Vec<String> = [&commands.test, &commands.build, &commands.lint]
        .into_iter()
        .flatten()
        .map(|argv| format!("Bash({}:*)", argv.join(" ")))
        .collect();
    (!tools.is_empty()).then(|| tools.join(","))
}

/// The program an agent runs, as written in the config.
fn program_of(agent: &Agent) -> &str {
    match &agent.binding {
        Binding::Command { argv } => argv.first().map(String::as_str).unwrap_or_default(),
        Binding::Shell { shell, .. } => &shell.binary,
    }
}

/// The variables of modix's environment that `runtimes.json` lets agents
/// inherit, read once for a run: looking each one up scans the whole
/// environment, at every step.
pub(crate) fn inherited(runtimes: &Runtimes) -> Vec<(OsString, OsString)> {
    runtimes
        .env
        .allow
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.into(), v)))
        .collect()
}

/// The allow-listed part of modix's environment plus the MODIX_* contract.
fn base_env(inherited: &[(OsString, OsString)], call: &Call) -> Vec<(OsString, OsString)> {
    let mut env = inherited.to_vec();
    let path = |p: &Path| p.as_os_str().to_owned();
    env.extend([
        ("MODIX_RUN_ID".into(), call.run_id.into()),
        // Which modix started it: its leftovers are only those of a modix
        // that is gone (`shell::processes_with_env`).
        (
            crate::shell::DRIVER_VAR.into(),
            crate::shell::driver_id().into(),
        ),
        ("MODIX_STATE".into(), call.state.into()),
        ("MODIX_AGENT".into(), call.agent.id.as_str().into()),
        ("MODIX_ROLE".into(), call.agent.role.as_str().into()),
        ("MODIX_ATTEMPT".into(), call.attempt.to_string().into()),
        ("MODIX_WORKDIR".into(), path(call.workdir)),
        ("MODIX_CONTEXT".into(), path(&call.context_path)),
        ("MODIX_OUTPUT_SCHEMA".into(), path(&call.schema_path)),
    ]);
    env
}

/// The state's timeout: the FSM's override, the manifest, `runtimes.json` by
/// state, by the TaskSpec's complexity, then the default.
pub(super) fn timeout_for(
    runtimes: &Runtimes,
    agent: &Agent,
    state: &AgentState,
    state_name: &str,
    task_spec: Option<&Value>,
) -> Duration {
    let t = &runtimes.timeouts;
    let by_complexity = task_spec
        .and_then(|s| s.get("complexity"))
        .and_then(Value::as_str)
        .and_then(|c| match c {
            "low" => t.by_complexity.low,
            "medium" => t.by_complexity.medium,
            "high" => t.by_complexity.high,
            _ => None,
        });
    let secs = state
        .timeout_secs
        .or(agent.manifest.timeout_secs)
        .or_else(|| t.by_state.get(state_name).copied())
        .or(by_complexity)
        .unwrap_or(t.default_secs);
    Duration::from_secs(secs)
}

/// How many lines of output a synthesized result keeps as failures.
const TAIL_LINES: usize = 40;

/// Turns a finished process into a verdict, by the agent's output contract
/// and its shell's failure rules.
pub(super) fn judge(call: &Call, out: &ProcessOutcome) -> Verdict {
    let (agent, rules, output_schema) = (call.agent, call.rules.as_deref(), call.output);
    let validated = |value| validated(call.schemas, output_schema, value);
    let secs = out.duration.as_secs_f64();
    match out.end {
        EndReason::Cancelled => return Verdict::Cancelled,
        EndReason::WallTimeout => {
            return Verdict::Failed(Failure::new(
                FailureClass::Timeout,
                format!("timed out after {secs:.0}s"),
            ));
        }
        EndReason::IdleTimeout => {
            return Verdict::Failed(Failure::new(
                FailureClass::Idle,
                format!("no output for the idle limit; stopped after {secs:.0}s"),
            ));
        }
        EndReason::Stopped | EndReason::Exited => {}
    }
    if agent.manifest.output_mode == OutputMode::ExitStatus && out.end == EndReason::Exited {
        return validated(synthesize(output_schema, agent, out));
    }
    let spec = agent.binding.shell().map(|s| &s.output);
    let reported = spec
        .and_then(|s| s.error_pointer.as_deref())
        .is_some_and(|p| cli_reported_error(&out.stdout.text(), p));
    if out.end == EndReason::Stopped || out.exit_code != Some(0) || reported {
        let how = match (reported, out.exit_code) {
            (true, Some(0)) => "the CLI reported an error".to_owned(),
            _ => ended(out),
        };
        return Verdict::Failed(failure(rules, out, how));
    }
    let fallback = OutputSpec::default();
    match shell::extract(&out.stdout.text(), spec.unwrap_or(&fallback)) {
        Ok(value) => validated(value),
        // The answer may well be fine: it was cut to fit the capture limit.
        Err(_) if out.stdout.is_truncated() => Verdict::Failed(Failure::invalid(vec![format!(
            "the answer was cut: the agent printed {} on stdout and modix keeps {} \
             (runtimes.json output.max_capture_bytes); raise the limit or make the agent print less",
            bytes(out.stdout.total_bytes),
            bytes(out.stdout.total_bytes - out.stdout.omitted_bytes)
        )])),
        Err(e) => Verdict::Failed(Failure::invalid(vec![e.to_string()])),
    }
}

/// A process that failed: the class its shell's rules give, else what its
/// end says (a signal: crashed; otherwise the agent reported failure).
fn failure(rules: Option<&Rules>, out: &ProcessOutcome, how: String) -> Failure {
    if let Some((class, reason)) = rules.and_then(|r| r.classify(out)) {
        return Failure::new(class, reason);
    }
    let class = match (out.signal, out.end) {
        (Some(_), EndReason::Exited) => FailureClass::Crashed,
        _ => FailureClass::AgentError,
    };
    let said = match rules {
        Some(r) => r.reason(out),
        None => {
            let stderr = out.stderr.text();
            last_lines(&stderr, 5).join(" | ")
        }
    };
    Failure::new(
        class,
        if said.is_empty() {
            how
        } else {
            format!("{how}: {said}")
        },
    )
}

/// The answer judged against its schema, after dropping the `null`s a
/// strict-mode model gives for the optional fields it would leave out.
fn validated(schemas: &crate::schema::Schemas, output_schema: &str, mut value: Value) -> Verdict {
    if output_schema == "any" {
        return Verdict::Output(value);
    }
    schemas.drop_optional_nulls(output_schema, &mut value);
    let errors: Vec<String> = match schemas.validate(output_schema, &value) {
        Ok(v) if v.is_empty() => return Verdict::Output(value),
        Ok(v) => v
            .into_iter()
            .map(|x| {
                let at = if x.pointer.is_empty() {
                    "/"
                } else {
                    &x.pointer
                };
                format!("{at}: {}", x.message)
            })
            .collect(),
        Err(e) => vec![e.to_string()],
    };
    // The way every prompt states to give up (`{"error": "why"}`), when the
    // schema has no way of its own: the agent's failure, not a bad answer.
    if let Some(why) = reported_failure(&value) {
        let why = crate::text::truncate(why, 400);
        return Verdict::Failed(Failure::new(
            FailureClass::AgentError,
            format!("the agent reported failure: {why}"),
        ));
    }
    Verdict::Failed(Failure::invalid(errors))
}

/// The reason of an answer that is exactly `{"error": "<why>"}`.
fn reported_failure(value: &Value) -> Option<&str> {
    let o = value.as_object().filter(|o| o.len() == 1)?;
    o.get("error")?
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// True when the last JSON line's `ptr` is `true` (e.g. Claude's `is_error`).
fn cli_reported_error(stdout: &str, ptr: &str) -> bool {
    stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find_map(|v| v.pointer(ptr).and_then(Value::as_bool))
        .unwrap_or(false)
}

/// `1.5 MiB`, `800 bytes`.
pub(super) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} bytes"),
    }
}

/// How the process ended: `exited with code 1`, `killed by signal 9`.
fn ended(out: &ProcessOutcome) -> String {
    match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".to_owned(),
    }
}

/// What a test command judged by its exit status printed (stdout, then
/// stderr), for the judge to read its runner's summary from
/// ([`super::evidence`]); `None` for any other agent, whose answer is its
/// own.
pub(super) fn test_output(call: &Call, out: &ProcessOutcome) -> Option<String> {
    let by_exit = call.agent.manifest.output_mode == OutputMode::ExitStatus;
    (by_exit && out.end == EndReason::Exited && call.output == "test_result")
        .then(|| format!("{}\n{}", out.stdout.text(), out.stderr.text()))
}

/// A result made from the exit code, for commands such as test runners.
fn synthesize(output_schema: &str, agent: &Agent, out: &ProcessOutcome) -> Value {
    let passed = out.exit_code == Some(0);
    let command = match &agent.binding {
        Binding::Command { argv } => argv.join(" "),
        Binding::Shell { shell, .. } => shell.name.clone(),
    };
    let summary = format!("`{command}` {}", ended(out));
    let failures = if passed {
        Vec::new()
    } else {
        let both = format!("{}\n{}", out.stdout.text(), out.stderr.text());
        last_lines(&both, TAIL_LINES)
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    match output_schema {
        "execution_result" => json!({
            "outcome": if passed { "success" } else { "failure" },
            "summary": summary,
            "files_changed": [],
            "error": if passed { Value::Null } else { Value::String(failures.join("\n")) },
        }),
        _ => json!({ "passed": passed, "summary": summary, "failures": failures }),
    }
}

/// An echo callback printing live agent output to stderr, prefixed by the
/// agent and redacted like everything recorded.
pub(super) fn stderr_echo(agent: &str, redactor: &Redactor) -> EchoFn {
    let prefix = format!("[{agent}] ");
    let redactor = redactor.clone();
    Arc::new(move |_stream, line: &str| {
        let line = format!("{prefix}{}", redactor.redact(line));
        let safe = format!("{}\n", crate::text::escape_controls(&line));
        // Not `eprintln!`, which panics when stderr's reader has gone
        // (`modix -v go … 2>&1 | head`): that would kill the run mid-step.
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), safe.as_bytes());
    })
}
