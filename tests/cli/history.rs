//! `modix history` (and `resume`) as a record at a glance: how a run ended
//! and how long it took, each step's duration, runs whose process is gone,
//! filters, `last~N`, and the timeline.

use nix::sys::signal::Signal;

use crate::scenarios;
use crate::term::{on_terminal, too_wide};
use crate::util::{Sandbox, output_text};

fn stdout(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.modix().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn json(sb: &Sandbox, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(sb, args)).unwrap()
}

fn matches(re: &str, text: &str) -> bool {
    regex::Regex::new(re).unwrap().is_match(text)
}

#[test]
fn the_header_says_how_the_run_ended_and_how_long_it_took() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    let text = stdout(&sb, &["history", "last"]);
    let first = text.lines().next().unwrap();
    assert!(
        matches(r"^Run \w{26} — succeeded: reached DONE in \d+\.\ds$", first),
        "{first}"
    );

    let sb = Sandbox::example();
    scenarios::failed_run(&sb, "never passes");
    let first = stdout(&sb, &["history", "last"])
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        matches(r"— failed: ended in FAILED after \d+\.\ds$", &first),
        "{first}"
    );

    // Ctrl-C: interrupted, where, after how long, and why.
    let sb = Sandbox::example();
    scenarios::stopped_run(&sb, "stop", Signal::SIGINT);
    let first = stdout(&sb, &["history", "last"])
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        matches(
            r"— interrupted in EXECUTING after \d+\.\ds: interrupted while an agent ran",
            &first
        ),
        "{first}"
    );
}

#[test]
fn each_step_shows_how_long_it_took() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    let text = stdout(&sb, &["history", "last"]);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.contains('\t'))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    for row in &rows {
        assert_eq!(row.len(), 8, "{row:?}");
        assert!(matches(r"^\d+\.\ds$", row[6]), "{row:?}");
        assert!(row[1].parse::<jiff::Timestamp>().is_ok(), "{row:?}");
    }
}

#[test]
fn a_run_whose_process_is_gone_is_interrupted_in_every_form() {
    let sb = Sandbox::example();
    let run = scenarios::stopped_run(&sb, "crash", Signal::SIGKILL);
    // The list, piped.
    let list = stdout(&sb, &["history"]);
    assert!(list.contains("\tinterrupted (owner gone)\t"), "{list}");
    assert!(!list.contains("\trunning\t"), "{list}");
    // One run.
    let first = stdout(&sb, &["history", &run])
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        first.contains("interrupted (owner gone) in EXECUTING after")
            && first.contains("owner gone: process"),
        "{first}"
    );
    // JSON, both forms.
    let v = json(&sb, &["history", "--json"]);
    assert_eq!(v["runs"][0]["status"], "interrupted");
    assert_eq!(v["runs"][0]["owner_gone"], true);
    let v = json(&sb, &["history", &run, "--json"]);
    assert_eq!(v["run"]["status"], "interrupted");
    assert!(
        v["run"]["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("owner gone")
    );
    // Filters go by what is shown.
    assert!(stdout(&sb, &["history", "--status", "interrupted"]).contains(&run));
    assert!(!stdout(&sb, &["history", "--status", "running"]).contains(&run));
    // On a terminal too.
    if let Some((_, text)) = on_terminal(&sb, &["history"], 100, &[]) {
        assert!(text.contains("interrupted (owner gone)"), "{text}");
    }
}

#[test]
fn limit_status_and_since_filter_the_list() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    let failed = scenarios::failed_run(&sb, "never passes").run_id();
    let count = |args: &[&str]| stdout(&sb, args).lines().count();
    assert_eq!(count(&["history", "--limit", "0"]), 2, "0 lists every run");
    assert_eq!(count(&["history", "--limit", "1"]), 1);
    let only_failed = stdout(&sb, &["history", "--status", "failed"]);
    assert_eq!(only_failed.lines().count(), 1);
    assert!(only_failed.starts_with(&failed), "{only_failed}");
    assert_eq!(count(&["history", "--status", "failed,succeeded"]), 2);
    assert_eq!(
        count(&["history", "--status", "failed", "--since", "1d"]),
        1
    );
    assert_eq!(
        count(&["history", "--since", "2h", "--status", "running"]),
        1
    );
    // Nothing matches: said so, not "no runs yet".
    let none = stdout(&sb, &["history", "--status", "running"]);
    assert!(none.contains("No runs match; 2 runs recorded"), "{none}");
    let v = json(&sb, &["history", "--status", "interrupted", "--json"]);
    assert_eq!(v["runs"], serde_json::json!([]));
    // Ages and statuses are checked.
    for bad in [
        ["history", "--since", "3 days"],
        ["history", "--status", "done"],
    ] {
        let out = sb.modix().args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

#[test]
fn last_and_its_ancestors_name_runs_wherever_a_run_is_taken() {
    let sb = Sandbox::example();
    let older = sb.go_json("first").run_id();
    let newer = sb.go_json("second").run_id();
    let header = |r: &str| {
        stdout(&sb, &["history", r])
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    assert!(header("last").contains(&newer));
    assert!(header("last~1").contains(&older));
    assert!(header("last~").contains(&older));
    let v = json(&sb, &["history", "last~1", "--invocation", "1", "--json"]);
    assert_eq!(v["run_id"], older.as_str());
    let out = sb.modix().args(["history", "last~2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        output_text(&out).contains("there is no run `last~2`: only 2 runs recorded"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn resume_takes_last_or_defaults_to_the_newest_interrupted_run() {
    let sb = Sandbox::example();
    // Nothing to resume yet.
    let out = sb.modix().arg("resume").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(output_text(&out).contains("there is no interrupted run to resume"));
    let crashed = scenarios::stopped_run(&sb, "crash", Signal::SIGKILL);
    sb.go_json("done anyway");
    // The newest run succeeded; the newest interrupted one is the crash.
    let out = sb.modix().args(["resume", "--json"]).output().unwrap();
    let r = crate::util::GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.run_id(), crashed);
    let out = sb.modix().arg("resume").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    // `last~1` is the crashed (now finished) run: already ended.
    let out = sb.modix().args(["resume", "last~1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        output_text(&out).contains("already ended"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn timeline_charts_each_step_on_a_terminal_and_lists_milliseconds_in_a_pipe() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    let text = stdout(&sb, &["history", "last", "--timeline"]);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 6, "{text}");
    assert_eq!(
        rows[3][..5],
        ["4", "TESTING", "EXECUTING", "tests_fail", "tester"]
    );
    assert!(rows.iter().all(|r| r[5].parse::<u64>().is_ok()), "{text}");
    let v = json(&sb, &["history", "last", "--timeline", "--json"]);
    assert_eq!(v["steps"].as_array().unwrap().len(), 6);
    assert!(v["steps"][5]["duration_ms"].is_u64());
    // Both forms are read row by row; they agree step by step.
    for (row, step) in rows.iter().zip(v["steps"].as_array().unwrap()) {
        assert_eq!(row[0], step["seq"].to_string());
        assert_eq!(row[5], step["duration_ms"].to_string());
    }
    let Some((code, chart)) = on_terminal(&sb, &["history", "last", "--timeline"], 70, &[]) else {
        return;
    };
    assert_eq!(code, Some(0), "{chart}");
    assert!(too_wide(&chart, 70).is_empty(), "{chart}");
    assert!(chart.contains("  4 TESTING → EXECUTING"), "{chart}");
    // The slowest step's bar fills the chart.
    assert!(chart.contains(&"█".repeat(30)), "{chart}");
}

/// `history RUN --json` is written as it is read from the store, a row at a
/// time (a run of a million steps takes the memory of one): the run, every
/// step with the loop it was in, every message and the usage, its members
/// in alphabetical order like every object modix prints.
#[test]
fn a_runs_json_has_every_step_with_its_loop_and_every_message() {
    let sb = Sandbox::example();
    let r = scenarios::failed_run(&sb, "never passes");
    let text = stdout(&sb, &["history", &r.run_id(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let at = |key: &str| text.find(&format!("\n  \"{key}\": ")).unwrap();
    let order = [
        "messages",
        "run",
        "schema_version",
        "steps_left_out",
        "transitions",
        "usage",
    ]
    .map(at);
    assert!(order.is_sorted(), "{order:?}");
    let steps = v["transitions"].as_array().unwrap();
    let seqs: Vec<u64> = steps.iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(seqs.len(), r.transitions.len());
    // The retry loop's steps say how often its transition had fired.
    let counts: Vec<u64> = steps
        .iter()
        .filter_map(|t| t["loop"]["count"].as_u64())
        .collect();
    assert!(counts.len() >= 2 && counts.contains(&2), "{steps:?}");
    let ids: Vec<u64> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert!(ids.len() >= seqs.len() / 2 && ids.is_sorted(), "{ids:?}");
    assert_eq!(v["run"]["run_id"], r.run_id());
    assert_eq!(v["usage"]["invocations"], 0);
}

/// `--steps N` cuts `--json` as it cuts the table: the last N steps'
/// transitions and messages, how many it left out, and no loops (which
/// loop a step was in needs every step before it); a run of a million
/// steps prints its last thousand by default, not 600 MB.
#[test]
fn a_runs_json_of_its_last_steps_has_their_messages_and_says_what_it_left_out() {
    let sb = Sandbox::example();
    let r = scenarios::failed_run(&sb, "never passes");
    let id = r.run_id();
    let all = json(&sb, &["history", &id, "--json"]);
    assert_eq!(all["steps_left_out"], 0);
    assert_eq!(all, json(&sb, &["history", &id, "--json", "--steps", "0"]));
    let total = all["transitions"].as_array().unwrap().len();
    assert!(total > 4, "{all}");

    let last = json(&sb, &["history", &id, "--json", "--steps", "3"]);
    assert_eq!(last["steps_left_out"], total - 3);
    let cut = total as u64 - 3;
    let seqs: Vec<u64> = last["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![cut + 1, cut + 2, cut + 3]);
    assert!(
        last["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["loop"].is_null())
    );
    // Exactly the whole record's messages of those steps, in order.
    let of_last: Vec<&serde_json::Value> = all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["seq"].as_u64().unwrap() > cut)
        .collect();
    assert!(!of_last.is_empty());
    assert_eq!(
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        of_last
    );
    assert_eq!(last["run"], all["run"]);
    assert_eq!(last["usage"], all["usage"]);

    // The table says the same.
    let table = stdout(&sb, &["history", &id, "--steps", "3"]);
    assert!(
        table.contains(&format!(
            "Its last 3 of {total} steps (`--steps 0` shows every one):"
        )),
        "{table}"
    );
}

#[test]
fn a_step_resumed_after_a_stop_counts_its_work_and_says_how_long_it_stood_stopped() {
    let sb = Sandbox::example();
    let run = scenarios::stopped_run(&sb, "stop", Signal::SIGINT);
    // The run stands stopped a while before it is resumed.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    sb.resume_to_success(&run);

    let v = json(&sb, &["history", &run, "--timeline", "--json"]);
    let steps = v["steps"].as_array().unwrap();
    let resumed = steps
        .iter()
        .find(|s| s["from"] == "EXECUTING")
        .expect("an executor step");
    let stopped = resumed["stopped_ms"].as_u64().expect("stopped_ms");
    let took = resumed["duration_ms"].as_u64().unwrap();
    assert!(stopped >= 2500, "{resumed}");
    assert!(took < stopped, "the work, not the wait: {resumed}");
    // Nothing is lost: the work and the stop make the step's wall time.
    let i = steps.iter().position(|s| s == resumed).unwrap();
    let ms = |s: &serde_json::Value| {
        let at: jiff::Timestamp = s["at"].as_str().unwrap().parse().unwrap();
        at.as_millisecond()
    };
    let wall = u64::try_from(ms(resumed) - ms(&steps[i - 1])).unwrap();
    assert_eq!(took + stopped, wall, "{resumed}");
    // No other step stood stopped.
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.get("stopped_ms").is_some())
            .count(),
        1,
        "{v}"
    );

    // The table and the headline say it too.
    let text = stdout(&sb, &["history", &run]);
    let first = text.lines().next().unwrap();
    assert!(
        matches(
            r"— succeeded: reached DONE in \d+\.\ds \(\d+\.\ds of it stopped\)$",
            first
        ),
        "{first}"
    );
    let row = text
        .lines()
        .find(|l| l.contains("EXECUTING → TESTING"))
        .unwrap();
    assert!(
        matches(r"\t\d+\.\ds \(\+\d+\.\ds stopped\)\t", row),
        "{row}"
    );
}
