//! One agent invocation's process: the argv and environment it gets (made
//! from the invocation's [`Call`]), and what its output means — the
//! structured result, validated against its schema, as a [`Verdict`].

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::invoke::Call;
use crate::config::{Agent, Binding, Config, OutputFormat, OutputMode, PromptMode, Runtimes};
use crate::fsm::{AgentState, Outcome};
use crate::schema;
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
    /// Output that could not be read or failed its schema; the reasons.
    Invalid(Vec<String>),
    /// The process failed (spawn error, non-zero exit, a CLI-reported error).
    ProcessError(String),
    Timeout(String),
    /// Ctrl-C or SIGTERM stopped it: no outcome; the run is interrupted.
    Cancelled,
}

impl Verdict {
    /// The outcome as the emit rules and the store see it (`None` when cancelled).
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            Verdict::Output(_) => Outcome::Output,
            Verdict::Invalid(_) => Outcome::InvalidOutput,
            Verdict::ProcessError(_) => Outcome::ProcessError,
            Verdict::Timeout(_) => Outcome::Timeout,
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
pub(super) fn redactor(config: &Config) -> Redactor {
    let mut names: Vec<&str> = config
        .brains
        .values()
        .filter_map(|b| b.api_key_env.as_deref())
        .collect();
    for s in config.shells.values() {
        names.extend(s.env.iter().map(String::as_str).filter(|n| looks_secret(n)));
    }
    names.sort_unstable();
    names.dedup();
    Redactor::new(
        names
            .into_iter()
            .filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?))),
    )
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
    root: &Path,
    prompt: &str,
    system_prompt: Option<&str>,
    runtimes: &Runtimes,
    redactor: &Redactor,
) -> Result<Prepared, PrepareError> {
    let agent = call.agent;
    let mut env = base_env(runtimes, call);
    let (args, stdin) = match &agent.binding {
        Binding::Command { argv } => (argv[1..].to_vec(), Some(prompt.as_bytes().to_vec())),
        Binding::Shell { shell, brain } => {
            let var = |name: &str| std::env::var_os(name).map(|v| (name.into(), v));
            env.extend(shell.env.iter().filter_map(|n| var(n)));
            env.extend(brain.api_key_env.as_deref().and_then(var));
            if let (Some(name), Some(ep)) = (&shell.endpoint_env, &brain.endpoint) {
                env.push((name.into(), ep.into()));
            }
            let by_argument = shell.prompt == PromptMode::Argument;
            let values = Placeholders {
                prompt: by_argument.then(|| prompt.to_owned()),
                model: Some(brain.model.clone()),
                system_prompt: system_prompt.map(str::to_owned),
                workdir: Some(call.workdir.display().to_string()),
                output_schema: Some(call.schema_path.display().to_string()),
                endpoint: brain.endpoint.clone(),
                role: Some(agent.role.clone()),
                permission_mode: shell.permission_modes.as_ref().map(|m| {
                    if agent.manifest.permissions.write_files {
                        m.write.clone()
                    } else {
                        m.read_only.clone()
                    }
                }),
            };
            let args =
                shell::render_args(&shell.args, &values).map_err(|e| PrepareError::Args {
                    agent: agent.id.clone(),
                    message: e.to_string(),
                })?;
            (args, (!by_argument).then(|| prompt.as_bytes().to_vec()))
        }
    };
    let written = program_of(agent);
    let mut argv_redacted = vec![written.to_owned()];
    argv_redacted.extend(redactor.redact_args(&args));
    let Some(program) = shell::find_binary(root, written) else {
        return Err(PrepareError::NotFound {
            agent: agent.id.clone(),
            program: written.to_owned(),
            argv: argv_redacted,
        });
    };
    argv_redacted[0] = program.display().to_string();
    let max = runtimes.output.max_capture_bytes as usize;
    Ok(Prepared {
        spec: ProcessSpec {
            program,
            args: args.into_iter().map(OsString::from).collect(),
            cwd: call.workdir.to_path_buf(),
            env,
            stdin,
            timeout: call.timeout,
            idle_timeout: agent
                .manifest
                .idle_timeout_secs
                .or(Some(runtimes.timeouts.idle_secs))
                .map(Duration::from_secs),
            kill_grace: Duration::from_secs(runtimes.timeouts.kill_grace_secs),
            // The answer is at the end of the output, so keep more of the tail.
            capture: CaptureLimits {
                head_bytes: max / 4,
                tail_bytes: max - max / 4,
            },
            echo: call.echo.clone(),
            on_spawn: None,
        },
        argv_redacted,
    })
}

/// The program an agent runs, as written in the config.
fn program_of(agent: &Agent) -> &str {
    match &agent.binding {
        Binding::Command { argv } => argv.first().map(String::as_str).unwrap_or_default(),
        Binding::Shell { shell, .. } => &shell.binary,
    }
}

/// The allow-listed part of modix's environment plus the MODIX_* contract.
fn base_env(runtimes: &Runtimes, call: &Call) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = runtimes
        .env
        .allow
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.into(), v)))
        .collect();
    let path = |p: &Path| p.as_os_str().to_owned();
    env.extend([
        ("MODIX_RUN_ID".into(), call.run_id.into()),
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

/// Turns a finished process into a verdict, by the agent's output contract.
pub(super) fn judge(agent: &Agent, output_schema: &str, out: &ProcessOutcome) -> Verdict {
    match out.end {
        EndReason::Cancelled => return Verdict::Cancelled,
        EndReason::WallTimeout => {
            return Verdict::Timeout(format!(
                "timed out after {:.0}s",
                out.duration.as_secs_f64()
            ));
        }
        EndReason::IdleTimeout => {
            return Verdict::Timeout(format!(
                "no output for the idle limit; killed after {:.0}s",
                out.duration.as_secs_f64()
            ));
        }
        EndReason::Exited => {}
    }
    if agent.manifest.output_mode == OutputMode::ExitStatus {
        return validated(output_schema, synthesize(output_schema, agent, out));
    }
    if out.exit_code != Some(0) {
        let stderr = out.stderr.text();
        let tail = last_lines(&stderr, 5);
        let how = ended(out);
        return Verdict::ProcessError(if tail.is_empty() {
            how
        } else {
            format!("{how}: {}", tail.join(" | "))
        });
    }
    let (format, pointer, error_pointer) = match agent.binding.shell() {
        Some(s) => (
            s.output.format,
            s.output.result_pointer.as_deref(),
            s.output.error_pointer.as_deref(),
        ),
        None => (OutputFormat::Text, None, None),
    };
    if let Some(ptr) = error_pointer
        && cli_reported_error(&out.stdout.text(), ptr)
    {
        return Verdict::ProcessError(format!("the CLI reported an error ({ptr} is true)"));
    }
    match shell::extract_json(&out.stdout.text(), format, pointer) {
        Ok(value) => validated(output_schema, value),
        // The answer may well be fine: it was cut to fit the capture limit.
        Err(_) if out.stdout.is_truncated() => Verdict::Invalid(vec![format!(
            "the answer was cut: the agent printed {} on stdout and modix keeps {} \
             (runtimes.json output.max_capture_bytes); raise the limit or make the agent print less",
            bytes(out.stdout.total_bytes),
            bytes(out.stdout.total_bytes - out.stdout.omitted_bytes)
        )]),
        Err(e) => Verdict::Invalid(vec![e.to_string()]),
    }
}

fn validated(output_schema: &str, value: Value) -> Verdict {
    if output_schema == "any" {
        return Verdict::Output(value);
    }
    match schema::validate(output_schema, &value) {
        Ok(v) if v.is_empty() => Verdict::Output(value),
        Ok(v) => Verdict::Invalid(
            v.into_iter()
                .map(|x| {
                    let at = if x.pointer.is_empty() {
                        "/"
                    } else {
                        &x.pointer
                    };
                    format!("{at}: {}", x.message)
                })
                .collect(),
        ),
        Err(e) => Verdict::Invalid(vec![e.to_string()]),
    }
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
fn bytes(n: u64) -> String {
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
        eprintln!("{prefix}{}", redactor.redact(line));
    })
}
