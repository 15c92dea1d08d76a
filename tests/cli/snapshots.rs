//! Human output pinned with insta snapshots (`tests/cli/snapshots/`): what a
//! person reads from `doctor`, `history`, `history RUN`, `fsm show`,
//! diagnostics and `go`. Paths, times, durations and run ids are filtered,
//! so a snapshot changes only when the output itself does. Review a change
//! with `cargo insta review` (or `INSTA_UPDATE=always cargo test` and read
//! the diff in git).

use crate::util::{Sandbox, output_text};

/// Filters for what differs between runs: the sandbox path, run ids, clock
/// times and durations.
fn settings(sb: &Sandbox) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    let root = regex::escape(&sb.dir.path().display().to_string());
    s.add_filter(&root, "[SANDBOX]");
    s.add_filter(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", "[RUN_ID]");
    s.add_filter(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?Z?",
        "[DATETIME]",
    );
    s.add_filter(r"\b\d{2}:\d{2}:\d{2}\.\d{3}\b", "[TIME]");
    // A workspace's folder, branch and short id follow the run id.
    s.add_filter(r"-[0-9a-f]{8}/[0-9a-z]{8}\b", "-[KEY]/[SHORT]");
    s.add_filter(r"\bmodix/[0-9a-z]{8}(\s|$)", "modix/[SHORT]$1");
    s.add_filter(r"\bmodix (diff|apply) [0-9a-z]{8}\b", "modix $1 [SHORT]");
    s.add_filter(r"\b[0-9a-f]{10,40}\b", "[COMMIT]");
    s.add_filter(r"\bgit \d+\.\d+\.\d+\b", "git [VERSION]");
    s.add_filter(r"\b\d+\.\d+s\b", "[DUR]");
    // Table widths follow the unfiltered text (a temp dir's path, a
    // duration): collapse padding and rules so only the content is pinned.
    s.add_filter(r"─+", "─");
    s.add_filter(r"═+", "═");
    s.add_filter(r"([^\s]) {2,}([┆│])", "$1 $2");
    s
}

/// The example project without the `claude` shell, whose presence on a
/// developer's PATH would change `doctor`'s answer.
fn example() -> Sandbox {
    let sb = Sandbox::example();
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"].as_object_mut().unwrap().remove("claude");
    });
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"].as_object_mut().unwrap().remove("anthropic");
    });
    sb
}

fn stdout(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.modix().args(args).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn doctor() {
    let sb = example();
    let text = stdout(&sb, &["doctor"]);
    settings(&sb).bind(|| insta::assert_snapshot!("doctor", text));
}

#[test]
fn go_and_history() {
    let sb = example();
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let go = format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let list = stdout(&sb, &["history"]);
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    let one = stdout(&sb, &["history", &run]);
    let s = settings(&sb);
    s.bind(|| {
        insta::assert_snapshot!("go", go);
        insta::assert_snapshot!("history", list);
        insta::assert_snapshot!("history_run", one);
    });
}

#[test]
fn fsm_show() {
    let sb = Sandbox::new();
    let text = stdout(&sb, &["fsm", "show", "plan_execute_test"]);
    settings(&sb).bind(|| insta::assert_snapshot!("fsm_show", text));
}

#[test]
fn diagnostics() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/brains.json",
        "{\n  \"brains\": {\n    \"anthropic\": {\n      \"provider\": \"anthropic\",\n      \"modle\": \"sonnet\"\n    }\n  }\n}\n",
    );
    sb.write(
        ".modix/runtimes.json",
        "{\n  \"timeouts\": { \"default_secs\": \"ten\" }\n}\n",
    );
    let out = sb.modix().arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let text = String::from_utf8(out.stderr).unwrap();
    settings(&sb).bind(|| insta::assert_snapshot!("diagnostics", text));
}
