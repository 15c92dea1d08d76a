//! A state's `retry` and `catch` rules at run time: what passes by itself is
//! run again after a wait (each failed attempt on record, no loop bound
//! spent), what cannot goes where the catch rule says, at once.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use crate::util::Sandbox;

/// The example with its scripted shell classifying two failures the way a
/// real CLI's rules do, and a project copy of the shipped workflow whose
/// retries wait `wait_secs` (no jitter) at most `max` times.
fn flaky(wait_secs: u32, max: u32) -> Sandbox {
    let sb = Sandbox::example();
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["scripted"]["failures"] = serde_json::json!([
            { "class": "network", "pattern": "ECONNRESET" },
            { "class": "auth", "pattern": "401 Unauthorized" }
        ]);
    });
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    let old = "max_attempts = 4, interval_secs = 5, backoff_rate = 2.0, max_delay_secs = 120, jitter = \"full\"";
    assert!(shipped.contains(old));
    let text = shipped
        .replace("id = \"plan_execute_test\"", "id = \"quick\"")
        .replace(
            old,
            &format!("max_attempts = {max}, interval_secs = {wait_secs}, backoff_rate = 1.0, jitter = \"none\""),
        );
    sb.write(".modix/fsm/quick.toml", &text);
    sb.edit_json(".modix/projects.json", |v| v["workflow"] = "quick".into());
    sb
}

/// An executor that fails `n` times with `line` on stderr, then fixes calc.py.
fn failing_first(sb: &Sandbox, n: u32, line: &str) {
    let count = sb.dir.path().join("count");
    crate::scenarios::agent(
        sb,
        &format!(
            r#"    c=$(cat {count} 2>/dev/null || echo 0); echo $((c + 1)) > {count}
    if [ "$c" -lt {n} ]; then echo '{line}' >&2; exit 1; fi
{ok}"#,
            count = count.display(),
            ok = crate::scenarios::EXECUTOR_OK
        ),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
}

#[test]
fn a_passing_failure_is_retried_without_spending_the_loop_bound() {
    let sb = flaky(1, 3);
    failing_first(&sb, 2, "fetch failed: read ECONNRESET");
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -task_spec_valid-> EXECUTING",
            "EXECUTING -execution_done-> TESTING",
            "TESTING -tests_pass-> DONE"
        ]
    );
    // The step is the same visit: attempt 1, its reason saying how it got there.
    let step = &r.transitions[2];
    assert_eq!(step["attempt"], 1);
    assert!(
        step["reason"]
            .as_str()
            .unwrap()
            .contains("(after 2 retries)"),
        "{step}"
    );
    let retrying: Vec<&serde_json::Value> = r
        .events
        .iter()
        .filter(|e| e["type"] == "retrying")
        .collect();
    assert_eq!(retrying.len(), 2, "{:?}", r.events);
    assert_eq!(retrying[0]["class"], "network");
    assert_eq!(
        (retrying[0]["retry"].as_u64(), retrying[0]["of"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(retrying[1]["wait_ms"], 1000);
    // Each failed attempt is on record, with its class, reason and the retry.
    let run = r.run_id();
    for n in [2, 3] {
        let inv = sb.invocation(&run, n);
        assert_eq!(inv["status"], "failed", "{inv}");
        assert_eq!(inv["class"], "network");
        assert!(
            inv["reason"].as_str().unwrap().contains("ECONNRESET"),
            "{inv}"
        );
        assert_eq!(inv["retry"]["retry"], n - 1);
    }
    assert_eq!(sb.invocation(&run, 4)["status"], "completed");
    // No feedback for a failure that was not the agent's doing.
    let ctx = &sb.invocation(&run, 4)["context"];
    assert!(ctx["feedback"].is_null(), "{ctx}");
    // The terminal says it too.
    let sb = flaky(1, 3);
    failing_first(&sb, 1, "fetch failed: read ECONNRESET");
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("↻ EXECUTING: executor failed (network): ")
            && err.contains("retry 1 of 3 in 1.0s"),
        "{err}"
    );
}

#[test]
fn retries_used_up_leave_the_failure_to_the_emit_rules() {
    let sb = flaky(1, 1);
    failing_first(&sb, 5, "fetch failed: read ECONNRESET");
    let r = sb.go_json("Fix mean()");
    // One retry, then the emit rule for a process error: rejected, bounded.
    let text = format!("{:?}", r.path());
    assert!(
        text.contains("EXECUTING -execution_rejected-> EXECUTING"),
        "{text}"
    );
    assert_eq!(
        r.events.iter().filter(|e| e["type"] == "retrying").count(),
        3,
        "one retry per visit, three visits: {text}"
    );
}

#[test]
fn a_permanent_failure_is_caught_and_ends_the_run_at_once() {
    let sb = flaky(1, 3);
    failing_first(&sb, 9, "API error: 401 Unauthorized (invalid x-api-key)");
    let started = Instant::now();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(r.path().last().unwrap(), "EXECUTING -catch:auth-> FAILED");
    let reason = r.transitions.last().unwrap()["reason"].as_str().unwrap();
    assert!(
        reason.contains("agent failed (auth)") && reason.contains("401 Unauthorized"),
        "{reason}"
    );
    assert!(r.events.iter().all(|e| e["type"] != "retrying"));
    assert_eq!(sb.invocation(&r.run_id(), 2)["class"], "auth");
}

#[test]
fn ctrl_c_during_a_retry_wait_stops_at_once_and_resume_runs_it_again() {
    let sb = flaky(60, 2);
    failing_first(&sb, 1, "fetch failed: read ECONNRESET");
    let mut child = sb.spawn(&["go", "--json", "Fix mean()"]);
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no retrying event");
        let line = lines.next().unwrap().unwrap();
        if line.contains("\"type\":\"retrying\"") {
            break;
        }
    }
    let stopped = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.path().last().unwrap(), "TESTING -tests_pass-> DONE");
}
