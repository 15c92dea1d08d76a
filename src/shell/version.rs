//! Reading an agent CLI's version: run its probe (bounded in time, like any
//! agent process), pull the version out with the shell's regex, and make it
//! semver even when the CLI prints `2.1` or `0.061.0`.

use std::path::Path;
use std::time::Duration;

use super::{CaptureLimits, EndReason, ProcessSpec, run_process};

/// Runs `program args…` and returns (the raw matched text, the parsed version).
pub async fn probe_version(
    program: &Path,
    args: &[String],
    regex: &str,
    timeout: Duration,
) -> Result<(String, semver::Version), String> {
    let re = regex::Regex::new(regex).map_err(|e| format!("bad version regex: {e}"))?;
    let spec = ProcessSpec {
        program: program.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        cwd: std::env::current_dir().unwrap_or_else(|_| "/".into()),
        env: std::env::vars_os().collect(),
        stdin: None,
        timeout,
        idle_timeout: None,
        kill_grace: Duration::from_millis(500),
        capture: CaptureLimits {
            head_bytes: 16 * 1024,
            tail_bytes: 0,
        },
        echo: None,
        on_spawn: None,
        watch: None,
    };
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let outcome = run_process(&spec, cancel)
        .await
        .map_err(|e| e.to_string())?;
    if !matches!(outcome.end, EndReason::Exited) {
        return Err(format!(
            "`{} {}` did not answer within {}s",
            program.display(),
            args.join(" "),
            timeout.as_secs()
        ));
    }
    let text = format!("{}\n{}", outcome.stdout.text(), outcome.stderr.text());
    let raw = re
        .captures(&text)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_owned())
        .ok_or_else(|| {
            format!(
                "could not read a version from `{} {}` (printed: {:?})",
                program.display(),
                args.join(" "),
                text.trim().chars().take(120).collect::<String>()
            )
        })?;
    let version = normalize(&raw).ok_or_else(|| format!("`{raw}` is not a version"))?;
    Ok((raw, version))
}

/// `2.1` → 2.1.0, `0.061.0` → 0.61.0, `1.2.3-beta` → 1.2.3-beta.
pub fn normalize(raw: &str) -> Option<semver::Version> {
    let raw = raw.trim().trim_start_matches('v');
    let (core, rest) = match raw.find(['-', '+']) {
        Some(i) => raw.split_at(i),
        None => (raw, ""),
    };
    let mut parts: Vec<u64> = core
        .split('.')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    parts.resize(3, 0);
    semver::Version::parse(&format!("{}.{}.{}{rest}", parts[0], parts[1], parts[2])).ok()
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn versions_are_normalised() {
        assert_eq!(normalize("2.1").unwrap().to_string(), "2.1.0");
        assert_eq!(normalize("0.061.0").unwrap().to_string(), "0.61.0");
        assert_eq!(
            normalize("v1.2.3-beta.1").unwrap().to_string(),
            "1.2.3-beta.1"
        );
        assert!(normalize("abc").is_none());
    }
}
