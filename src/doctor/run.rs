//! Running a short command for a check — a probe, a login status, a
//! `--help` — the way an agent runs (its environment, the project root),
//! bounded in time, and reading what it said.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::shell::{
    CaptureLimits, EndReason, ProcessOutcome, ProcessSpec, last_lines, run_process,
};

/// Runs `program args…` in `cwd` with exactly `env`, for at most `timeout`.
/// `Err` says why it could not start or did not finish.
pub async fn capture(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
) -> Result<ProcessOutcome, String> {
    let spec = ProcessSpec {
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        cwd: cwd.to_path_buf(),
        env,
        stdin: None,
        timeout,
        idle_timeout: None,
        kill_grace: Duration::from_millis(500),
        capture: CaptureLimits {
            head_bytes: 16 * 1024,
            tail_bytes: 48 * 1024,
        },
        echo: None,
        on_spawn: None,
        watch: None,
    };
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let out = run_process(&spec, cancel)
        .await
        .map_err(|e| e.to_string())?;
    match out.end {
        EndReason::Exited => Ok(out),
        _ => Err(format!("did not finish within {}s", timeout.as_secs())),
    }
}

/// The command's own last words: its last line on stderr, else on stdout,
/// else how it ended.
pub fn last_word(out: &ProcessOutcome) -> String {
    let line = last_lines(&out.stderr.text(), 1)
        .into_iter()
        .chain(last_lines(&out.stdout.text(), 1))
        .next()
        .map(|l| l.trim().to_owned());
    line.unwrap_or_else(|| match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended abnormally".to_owned(),
    })
}
