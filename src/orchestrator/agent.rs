//! One agent invocation: the argv and environment it gets, the process run
//! (bounded in time and output), and what its output means — the structured
//! result, validated against its schema, as one of the four outcomes the FSM's
//! emit rules know.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{Agent, Binding, Config, OutputMode, PromptMode, Shell};
use crate::doctor::find_binary;
use crate::fsm::AgentState;
use crate::fsm::InvocationOutcome;
use crate::schema;
use crate::shell::{
    self, CaptureLimits, EchoFn, EndReason, Placeholders, ProcessOutcome, ProcessSpec, Redactor,
};

/// What modix hands one invocation.
pub struct Invocation<'a> {
    pub config: &'a Config,
    pub agent: &'a Agent,
    pub state: &'a str,
    pub prompt: String,
    pub system_prompt: Option<String>,
    pub workdir: PathBuf,
    pub output_schema_path: PathBuf,
    pub context_path: PathBuf,
    pub run_id: &'a str,
    pub attempt: u32,
    pub timeout: Duration,
    pub echo: Option<EchoFn>,
}

/// The process to start, before it starts.
pub struct Prepared {
    pub spec: ProcessSpec,
    /// argv as recorded: program first, secrets redacted.
    pub argv_redacted: Vec<String>,
}

/// What an invocation came to.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Output that satisfies the schema.
    Output(Value),
    /// Output that could not be read or failed its schema; the reasons.
    Invalid(Vec<String>),
    /// The process failed (spawn error, non-zero exit, a CLI-reported error).
    ProcessError(String),
    Timeout(String),
    Cancelled,
}

impl Verdict {
    /// The outcome as the FSM's emit rules see it (`None` when cancelled).
    pub fn as_outcome(&self) -> Option<InvocationOutcome<'_>> {
        Some(match self {
            Verdict::Output(v) => InvocationOutcome::Output(v),
            Verdict::Invalid(_) => InvocationOutcome::InvalidOutput,
            Verdict::ProcessError(_) => InvocationOutcome::ProcessError,
            Verdict::Timeout(_) => InvocationOutcome::Timeout,
            Verdict::Cancelled => return None,
        })
    }

    pub fn outcome_name(&self) -> &'static str {
        match self {
            Verdict::Output(_) => "output",
            Verdict::Invalid(_) => "invalid_output",
            Verdict::ProcessError(_) => "process_error",
            Verdict::Timeout(_) => "timeout",
            Verdict::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(
        "agent `{agent}`: program `{program}` not found (looked on PATH and in the project root)"
    )]
    NotFound { agent: String, program: String },
    #[error("agent `{agent}`: {message}")]
    Args { agent: String, message: String },
}

/// The secrets the run must never record: every brain's key, and passed-through
/// variables that look like credentials.
pub fn redactor(config: &Config) -> Redactor {
    let mut secrets: Vec<(String, String)> = Vec::new();
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
    for name in names {
        if let Ok(value) = std::env::var(name) {
            secrets.push((name.to_owned(), value));
        }
    }
    Redactor::new(secrets)
}

fn looks_secret(name: &str) -> bool {
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| name.to_ascii_uppercase().contains(w))
}

/// Builds the process for an invocation. Nothing here goes through a shell:
/// user text only ever becomes one argv element or stdin.
pub fn prepare(inv: &Invocation, redactor: &Redactor) -> Result<Prepared, PrepareError> {
    let config = inv.config;
    let mut env = base_env(config, inv);
    let (program, args, stdin) = match &inv.agent.binding {
        Binding::Command { argv } => {
            let (first, rest) = argv.split_first().ok_or_else(|| PrepareError::Args {
                agent: inv.agent.id.clone(),
                message: "empty command".into(),
            })?;
            (
                locate(config, &inv.agent.id, first)?,
                rest.to_vec(),
                Some(inv.prompt.clone().into_bytes()),
            )
        }
        Binding::Shell { shell, brain } => {
            let shell: &Shell = config.shells.get(shell).ok_or_else(|| PrepareError::Args {
                agent: inv.agent.id.clone(),
                message: format!("shell `{shell}` is not defined"),
            })?;
            let brain = config.brains.get(brain);
            for name in &shell.env {
                if let Some(v) = std::env::var_os(name) {
                    env.push((name.into(), v));
                }
            }
            if let Some(key) = brain.and_then(|b| b.api_key_env.as_ref())
                && let Some(v) = std::env::var_os(key)
            {
                env.push((key.into(), v));
            }
            if let (Some(var), Some(ep)) =
                (&shell.endpoint_env, brain.and_then(|b| b.endpoint.as_ref()))
            {
                env.push((var.into(), ep.into()));
            }
            let by_argument = shell.prompt == PromptMode::Argument;
            let values = Placeholders {
                prompt: by_argument.then(|| inv.prompt.clone()),
                model: brain.map(|b| b.model.clone()),
                system_prompt: inv.system_prompt.clone(),
                workdir: Some(inv.workdir.display().to_string()),
                output_schema: Some(inv.output_schema_path.display().to_string()),
                endpoint: brain.and_then(|b| b.endpoint.clone()),
                role: Some(inv.agent.role.clone()),
                permission_mode: shell.permission_modes.as_ref().map(|m| {
                    if inv.agent.manifest.permissions.write_files {
                        m.write.clone()
                    } else {
                        m.read_only.clone()
                    }
                }),
            };
            let args =
                shell::render_args(&shell.args, &values).map_err(|e| PrepareError::Args {
                    agent: inv.agent.id.clone(),
                    message: e.to_string(),
                })?;
            let stdin = (!by_argument).then(|| inv.prompt.clone().into_bytes());
            (locate(config, &inv.agent.id, &shell.binary)?, args, stdin)
        }
    };
    let mut argv_redacted = vec![program.display().to_string()];
    argv_redacted.extend(redactor.redact_args(&args));
    let max = config.runtimes.output.max_capture_bytes as usize;
    Ok(Prepared {
        spec: ProcessSpec {
            program,
            args: args.into_iter().map(OsString::from).collect(),
            cwd: inv.workdir.clone(),
            env,
            stdin,
            timeout: inv.timeout,
            idle_timeout: inv
                .agent
                .manifest
                .idle_timeout_secs
                .or(Some(config.runtimes.timeouts.idle_secs))
                .map(Duration::from_secs),
            kill_grace: Duration::from_secs(config.runtimes.timeouts.kill_grace_secs),
            // The answer is at the end of the output, so keep more of the tail.
            capture: CaptureLimits {
                head_bytes: max / 4,
                tail_bytes: max - max / 4,
            },
            echo: inv.echo.clone(),
        },
        argv_redacted,
    })
}

fn locate(config: &Config, agent: &str, program: &str) -> Result<PathBuf, PrepareError> {
    find_binary(&config.paths.root, program).ok_or_else(|| PrepareError::NotFound {
        agent: agent.to_owned(),
        program: program.to_owned(),
    })
}

/// The allow-listed part of modix's environment plus the MODIX_* contract.
fn base_env(config: &Config, inv: &Invocation) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = config
        .runtimes
        .env
        .allow
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.into(), v)))
        .collect();
    let path = |p: &Path| p.as_os_str().to_owned();
    env.extend([
        ("MODIX_RUN_ID".into(), inv.run_id.into()),
        ("MODIX_STATE".into(), inv.state.into()),
        ("MODIX_AGENT".into(), inv.agent.id.as_str().into()),
        ("MODIX_ROLE".into(), inv.agent.role.as_str().into()),
        ("MODIX_ATTEMPT".into(), inv.attempt.to_string().into()),
        ("MODIX_WORKDIR".into(), path(&inv.workdir)),
        ("MODIX_CONTEXT".into(), path(&inv.context_path)),
        ("MODIX_OUTPUT_SCHEMA".into(), path(&inv.output_schema_path)),
    ]);
    env
}

/// The state's timeout: the FSM's override, the manifest, `runtimes.json` by
/// state, by the TaskSpec's complexity, then the default.
pub fn timeout_for(
    config: &Config,
    agent: &Agent,
    state: &AgentState,
    state_name: &str,
    task_spec: Option<&Value>,
) -> Duration {
    let t = &config.runtimes.timeouts;
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
pub fn judge(
    agent: &Agent,
    shell: Option<&Shell>,
    output_schema: &str,
    out: &ProcessOutcome,
) -> Verdict {
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
        return Verdict::ProcessError(exit_reason(out));
    }
    let (format, pointer, error_pointer) = match shell {
        Some(s) => (
            s.output.format,
            s.output.result_pointer.as_deref(),
            s.output.error_pointer.as_deref(),
        ),
        None => (crate::config::OutputFormat::Text, None, None),
    };
    if let Some(ptr) = error_pointer
        && cli_reported_error(&out.stdout.text, ptr)
    {
        return Verdict::ProcessError(format!("the CLI reported an error ({ptr} is true)"));
    }
    let format = match format {
        crate::config::OutputFormat::Text => shell::OutputFormat::Text,
        crate::config::OutputFormat::Json => shell::OutputFormat::Json,
        crate::config::OutputFormat::JsonLines => shell::OutputFormat::JsonLines,
    };
    match shell::extract_json(&out.stdout.text, format, pointer) {
        Ok(value) => validated(output_schema, value),
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
                    format!(
                        "{}: {}",
                        if x.pointer.is_empty() {
                            "/"
                        } else {
                            &x.pointer
                        },
                        x.message
                    )
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

fn exit_reason(out: &ProcessOutcome) -> String {
    let how = match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".to_owned(),
    };
    let tail = tail_lines(&out.stderr.text, 5);
    if tail.is_empty() {
        how
    } else {
        format!("{how}: {}", tail.join(" | "))
    }
}

fn tail_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

/// A result made from the exit code, for commands such as test runners.
fn synthesize(output_schema: &str, agent: &Agent, out: &ProcessOutcome) -> Value {
    let passed = out.exit_code == Some(0);
    let command = match &agent.binding {
        Binding::Command { argv } => argv.join(" "),
        Binding::Shell { shell, .. } => shell.clone(),
    };
    let summary = format!(
        "`{command}` {}",
        if passed {
            "exited with 0".to_owned()
        } else {
            exit_reason_short(out)
        }
    );
    let mut tail = tail_lines(
        &format!("{}\n{}", out.stdout.text, out.stderr.text),
        TAIL_LINES,
    );
    if passed {
        tail.clear();
    }
    match output_schema {
        "execution_result" => json!({
            "outcome": if passed { "success" } else { "failure" },
            "summary": summary,
            "files_changed": [],
            "error": if passed { Value::Null } else { Value::String(tail.join("\n")) },
        }),
        _ => json!({ "passed": passed, "summary": summary, "failures": tail }),
    }
}

fn exit_reason_short(out: &ProcessOutcome) -> String {
    match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exited with {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended abnormally".to_owned(),
    }
}

/// An echo callback printing live agent output to stderr, prefixed by the
/// agent and redacted like everything recorded.
pub fn stderr_echo(agent: &str, redactor: &Redactor) -> EchoFn {
    let prefix = format!("[{agent}] ");
    let redactor = redactor.clone();
    Arc::new(move |_stream, line: &str| {
        eprintln!("{prefix}{}", redactor.redact(line));
    })
}
