//! Starting an agent again when the OS refused to start it for a passing
//! reason (a script still being written, a full process table), under the
//! `retry` policy of `runtimes.json`. An agent that started and then failed is
//! not retried here: that is an event for the workflow to handle.

use std::time::Duration;

use crate::config::RetryPolicy;
use crate::shell::{ProcessOutcome, ProcessSpec, SpawnError, run_process};

/// errno values that say "try again later".
const TRANSIENT: [i32; 5] = [
    nix::libc::ETXTBSY,
    nix::libc::EAGAIN,
    nix::libc::ENOMEM,
    nix::libc::EMFILE,
    nix::libc::ENFILE,
];

fn is_transient(e: &SpawnError) -> bool {
    matches!(e, SpawnError::Io { source, .. } if source.raw_os_error().is_some_and(|c| TRANSIENT.contains(&c)))
}

/// Runs the process, retrying transient spawn failures with backoff.
pub async fn run_with_retry(
    spec: ProcessSpec,
    cancel: tokio::sync::watch::Receiver<bool>,
    policy: &RetryPolicy,
) -> Result<ProcessOutcome, SpawnError> {
    let mut attempt = 1;
    loop {
        match run_process(&spec, cancel.clone()).await {
            Err(e) if attempt < policy.max_attempts && is_transient(&e) && !*cancel.borrow() => {
                let wait = delay(policy, attempt, jitter_fraction());
                tracing::warn!("{e}; retrying in {} ms", wait.as_millis());
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// `initial × rate^(attempt-1)`, capped at `max_delay`; with jitter, scaled
/// by `fraction` (0.5..1.0) so concurrent runs do not retry in lockstep.
pub fn delay(policy: &RetryPolicy, attempt: u32, fraction: f64) -> Duration {
    let exp = policy.backoff_rate.powi(attempt.saturating_sub(1) as i32);
    let ms = (policy.initial_interval_ms as f64 * exp).min(policy.max_delay_ms as f64);
    let ms = if policy.jitter { ms * fraction } else { ms };
    Duration::from_millis(ms.max(0.0) as u64)
}

/// A random number in [0, 1), for the jitter of the workflow's retry
/// waits: std's per-process random hash keys, mixed with the clock.
pub(super) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn jitter_fraction() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    0.5 + f64::from(nanos % 1000) / 2000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial_interval_ms: 100,
            backoff_rate: 2.0,
            max_delay_ms: 300,
            jitter: false,
        };
        let ms: Vec<u128> = (1..=4).map(|a| delay(&p, a, 1.0).as_millis()).collect();
        assert_eq!(ms, [100, 200, 300, 300]);
        let jittered = delay(&RetryPolicy { jitter: true, ..p }, 2, 0.5);
        assert_eq!(jittered.as_millis(), 100);
    }

    #[test]
    fn only_os_refusals_to_start_are_transient() {
        let busy = SpawnError::Io {
            program: "x".into(),
            source: std::io::Error::from_raw_os_error(nix::libc::ETXTBSY),
        };
        assert!(is_transient(&busy));
        assert!(!is_transient(&SpawnError::NotFound {
            program: "x".into()
        }));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_missing_program_is_not_retried() {
        let spec = ProcessSpec {
            program: "/nonexistent/agent".into(),
            args: vec![],
            cwd: std::env::temp_dir(),
            env: vec![],
            stdin: None,
            timeout: Duration::from_secs(5),
            idle_timeout: None,
            kill_grace: Duration::from_secs(1),
            capture: Default::default(),
            echo: None,
            on_spawn: None,
            watch: None,
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let started = std::time::Instant::now();
        let policy = RetryPolicy {
            max_attempts: 5,
            initial_interval_ms: 1000,
            ..RetryPolicy::default()
        };
        assert!(matches!(
            run_with_retry(spec, rx, &policy).await,
            Err(SpawnError::NotFound { .. })
        ));
        assert!(started.elapsed() < Duration::from_millis(900));
    }
}
