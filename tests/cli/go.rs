//! `modix go` end to end: real processes, the SQLite record, bounds, timeouts,
//! hostile epics, and resuming after kill -9.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::{GoResult, Sandbox, output_text};

const DONE_PATH: [&str; 6] = [
    "INIT -epic_received-> PLANNING",
    "PLANNING -task_spec_valid-> EXECUTING",
    "EXECUTING -execution_done-> TESTING",
    "TESTING -tests_fail-> EXECUTING",
    "EXECUTING -execution_done-> TESTING",
    "TESTING -tests_pass-> DONE",
];

/// A planner that answers a valid TaskSpec; other states as `rest` says.
fn script(rest: &str) -> String {
    format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE" in
  PLANNING)
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":["calc.py"],"acceptance":["tests pass"]}}]}}'
    ;;
  *)
{rest}
    ;;
esac
"#
    )
}

use crate::scenarios::{EXECUTOR_OK, passing_tester};

/// A brain keyed by ANTHROPIC_API_KEY and an executor that prints the key to
/// stderr after `words`, then succeeds.
fn executor_printing_its_key(sb: &Sandbox, words: &str) {
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["scripted"]["api_key_env"] = "ANTHROPIC_API_KEY".into()
    });
    sb.agent_script(&script(&format!(
        "    echo \"{words} $ANTHROPIC_API_KEY\" >&2\n{EXECUTOR_OK}\n"
    )));
}

fn history_json(sb: &Sandbox, run: &str) -> Vec<serde_json::Value> {
    sb.history_json(run)["transitions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn example_reaches_done_through_one_retry_and_stays_unchanged() {
    let sb = Sandbox::example();
    let before = sb.read("calc.py");
    let r = sb.go_json("Fix mean() in calc.py");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.path(), DONE_PATH);
    assert_eq!(r.summary["status"], "succeeded");
    assert_eq!(r.summary["state"], "DONE");
    // The shipped workflow's `on_enter` notifications reach observers.
    assert_eq!(r.notifications, ["INIT:run_started", "DONE:run_succeeded"]);
    assert_eq!(sb.read("calc.py"), before, "the run must work on a copy");

    let history = history_json(&sb, &r.run_id());
    let seqs: Vec<u64> = history.iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    for t in &history {
        for field in [
            "seq", "at", "from", "to", "event", "attempt", "agent", "reason",
        ] {
            assert!(t.get(field).is_some(), "{field} missing in {t}");
        }
    }
    // The messages passed between agents are on record, in order.
    let out = sb
        .modix()
        .args(["history", &r.run_id(), "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workdir = v["run"]["workdir"].as_str().unwrap();
    // The run worked on a copy outside the project (the example is not in git).
    assert!(
        !std::path::Path::new(workdir).starts_with(sb.root()),
        "{workdir}"
    );
    assert_eq!(v["run"]["workspace"]["mode"], "copy");
    let kinds: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "epic",
            "task_spec",
            "execution_result",
            "test_result",
            "feedback",
            "execution_result",
            "test_result"
        ]
    );
    // The second EXECUTING visit is attempt 2 and got the tester's failures as feedback.
    assert_eq!(history[4]["attempt"], 2);
    assert_eq!(history[3]["agent"], "tester");
    assert!(
        history[3]["reason"]
            .as_str()
            .unwrap()
            .contains("tests failed")
    );
    // The manifest's write permission picks the shell's permission mode.
    let argv_of = |n: u32| sb.invocation(&r.run_id(), n)["argv"].clone();
    let planner = argv_of(1);
    assert!(
        planner[0]
            .as_str()
            .unwrap()
            .ends_with("agents/scripted-agent"),
        "{planner}"
    );
    assert_eq!(
        planner.as_array().unwrap()[1..],
        serde_json::json!(["--model", "scripted-v1", "--mode", "read-only"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(argv_of(2)[4], "write");
    // Invocations: planner, executor, tester, then the executor again (4th).
    let inv = sb.invocation(&r.run_id(), 4);
    assert_eq!(
        (inv["state"].as_str(), inv["attempt"].as_u64()),
        (Some("EXECUTING"), Some(2))
    );
    let ctx = &inv["context"];
    // The executor's manifest says `shared`: it sees every message so far.
    assert_eq!(ctx["context_mode"], "shared");
    assert_eq!(ctx["brain"]["model"], "scripted-v1");
    let kinds: Vec<&str> = ctx["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "epic",
            "task_spec",
            "execution_result",
            "test_result",
            "feedback"
        ]
    );
    assert!(
        ctx["feedback"]
            .as_str()
            .unwrap()
            .contains("The tests failed"),
        "{ctx:#}"
    );
    assert_eq!(ctx["task_spec"]["title"], "Fix mean()");

    // state.json points at the finished run.
    let state: serde_json::Value = serde_json::from_str(&sb.read(".modix/state.json")).unwrap();
    assert_eq!(state["run_id"], r.run_id());
    assert_eq!(state["state"], "DONE");
}

#[test]
fn human_output_ends_with_a_summary() {
    let sb = Sandbox::example();
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("PLANNING —task_spec_valid→ EXECUTING"),
        "{text}"
    );
    assert!(
        text.contains("succeeded: reached DONE — 6 transitions in"),
        "{text}"
    );
    assert!(text.contains("Details: modix history "), "{text}");
}

#[test]
fn always_failing_tester_visits_executing_bound_plus_one_times() {
    let sb = Sandbox::example();
    sb.agent_script(&script(EXECUTOR_OK));
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["false"])
    });
    // The same failure every time would be no progress: the bound is what
    // this is about.
    sb.edit_json(".modix/runtimes.json", |v| {
        v["loops"]["no_progress_after"] = 10.into()
    });
    let r = sb.go_json("never passes");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let into_executing = r
        .transitions
        .iter()
        .filter(|t| t["to"] == "EXECUTING")
        .count();
    assert_eq!(
        into_executing,
        4,
        "bound 3 + the first visit: {:?}",
        r.path()
    );
    let last = r.transitions.last().unwrap();
    assert_eq!(last["from"], "TESTING");
    assert_eq!(last["to"], "FAILED");
    assert_eq!(last["redirected"], true);
    assert_eq!(r.summary["status"], "failed");
    assert_eq!(r.transitions.len(), 10);
}

#[test]
fn invalid_task_spec_fails_planning_with_the_errors_recorded() {
    let sb = Sandbox::example();
    sb.agent_script("#!/bin/sh\ncat > /dev/null\necho '{\"title\": \"only a title\"}'\n");
    let r = sb.go_json("plan badly");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -task_spec_invalid-> FAILED"
        ]
    );
    let history = history_json(&sb, &r.run_id());
    assert!(
        history[1]["reason"]
            .as_str()
            .unwrap()
            .contains("output rejected"),
        "{:?}",
        history[1]
    );

    let inv = sb.invocation(&r.run_id(), 1);
    let errors = inv["validation_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e
            .as_str()
            .unwrap()
            .contains("\"summary\" is a required property")),
        "{errors:?}"
    );
    assert_eq!(inv["outcome"], "invalid_output");
    let out = sb
        .modix()
        .args(["history", &r.run_id(), "--invocation", "1"])
        .output()
        .unwrap();
    assert!(output_text(&out).contains("\"tasks\" is a required property"));
}

pub(crate) fn pid_alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie still counts, so look at its state too.
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !status.is_empty() && !status.split(") ").nth(1).unwrap_or("").starts_with('Z')
}

/// An executor that leaves two processes behind when it ends: a background
/// job in its own group, and a daemon that left the group (`setsid`) and
/// would write into the workspace a second later. Both are killed when the
/// agent ends; nothing is written after its step was recorded.
#[test]
fn processes_an_agent_leaves_running_are_killed_when_it_ends() {
    let sb = Sandbox::example();
    let pids = sb.dir.path().join("pids");
    sb.agent_script(&script(&format!(
        "    sleep 30 </dev/null >/dev/null 2>&1 &\n    echo $! >> {p}\n             setsid sh -c 'echo $$ >> {p}; sleep 1; echo late > late.txt; sleep 30' </dev/null >/dev/null 2>&1 &\n             while [ $(wc -l < {p}) -lt 2 ]; do sleep 0.01; done\n{EXECUTOR_OK}\n",
        p = pids.display()
    )));
    passing_tester(&sb);
    let r = sb.go_json("leave processes behind");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let left: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(left.len(), 2);
    std::thread::sleep(Duration::from_millis(1500));
    for pid in left {
        assert!(!pid_alive(pid), "process {pid} outlived its agent");
    }
    let ws = r.events.iter().find(|e| e["type"] == "workspace").unwrap();
    let workdir = std::path::PathBuf::from(ws["workdir"].as_str().unwrap());
    assert!(workdir.join("calc.py").is_file());
    assert!(!workdir.join("late.txt").exists(), "written after its step");
}

#[test]
fn timeout_kills_the_agent_and_the_child_it_spawned() {
    let sb = Sandbox::example();
    let pidfile = sb.dir.path().join("child.pid");
    sb.agent_script(&script(&format!(
        "    sleep 1000 &\n    echo $! > {}\n    sleep 1000\n",
        pidfile.display()
    )));
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["executor"]["manifest"]["timeout_secs"] = 1.into()
    });
    let started = Instant::now();
    let r = sb.go_json("hang");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.path()[2], "EXECUTING -execution_failed-> FAILED");
    assert!(
        r.transitions[2]["reason"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );
    let child: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!pid_alive(child), "the agent's child {child} survived");
}

#[test]
fn megabytes_of_output_are_capped_and_the_run_goes_on() {
    let sb = Sandbox::example();
    sb.agent_script(&script(
        "    echo '# big' >> calc.py\n    head -c 6000000 /dev/zero | tr '\\0' 'x'\n    echo\n    echo '{\"outcome\":\"success\",\"summary\":\"big\",\"files_changed\":[],\"error\":null}'\n",
    ));
    passing_tester(&sb);
    let r = sb.go_json("talk a lot");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let inv = sb.invocation(&r.run_id(), 2);
    assert!(inv["stdout_bytes"].as_u64().unwrap() > 6_000_000);
    assert!(
        inv["stdout"].as_str().unwrap().len() < 300_000,
        "stored output must be capped"
    );
    assert!(inv["stdout"].as_str().unwrap().contains("bytes omitted"));
}

#[test]
fn shell_metacharacters_in_the_epic_are_passed_intact_and_never_run() {
    let sb = Sandbox::example();
    let seen = sb.dir.path().join("seen-prompt.txt");
    sb.agent_script(&format!(
        "#!/bin/sh\ncat > {seen}\ncp \"$MODIX_CONTEXT\" {ctx}\necho '{{\"title\": \"x\"}}'\n",
        seen = seen.display(),
        ctx = sb.dir.path().join("seen-context.json").display()
    ));
    let epic = "Fix $(touch pwned) and `touch pwned2`; rm -rf x && echo 'single' \"double\" \\ back\nsecond line $HOME *";
    let r = sb.go_json(epic);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let ctx: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sb.dir.path().join("seen-context.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(ctx["epic"], epic);
    assert!(std::fs::read_to_string(&seen).unwrap().contains(epic));
    for dir in [sb.root(), sb.dir.path().to_path_buf()] {
        for name in ["pwned", "pwned2"] {
            assert!(
                !dir.join(name).exists(),
                "{name} was created: the epic ran through a shell"
            );
        }
    }
    let runs = sb.root().join(".modix/runs");
    assert!(!walk_has(&runs, "pwned"));
    let runs = sb.runs();
    assert_eq!(runs[0]["epic"], epic);
}

fn walk_has(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name() == name || (e.path().is_dir() && walk_has(&e.path(), name)))
}

/// Starts `modix go` in the background and waits until `marker` exists.
fn start_go_until(sb: &Sandbox, epic: &str, marker: &Path) -> std::process::Child {
    let child = sb.spawn(&["go", "--json", epic]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "marker {} never appeared",
            marker.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Starts a run whose first executor stalls, kills `modix go` with SIGKILL
/// while it does, and returns the run's id.
fn crash_while_executing(sb: &Sandbox, epic: &str) -> String {
    let marker = sb.dir.path().join("executing");
    slow_first_executor(sb, &marker);
    crate::scenarios::killed_once(sb, &["go", "--json", epic], &marker)
}

/// An executor that announces itself in `marker`, then (first time only) sleeps.
fn slow_first_executor(sb: &Sandbox, marker: &Path) {
    sb.agent_script(&script(&format!(
        "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{EXECUTOR_OK}\n",
        m = marker.display()
    )));
    passing_tester(sb);
}

/// `go --model` is the run's, not only that process's: a run killed while
/// its executor worked resumes with the same model.
#[test]
fn resume_runs_the_agents_go_was_told_to_use() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    slow_first_executor(&sb, &marker);
    let args = [
        "go",
        "--json",
        "--model",
        "executor=scripted-v9",
        "keep my model",
    ];
    let run = crate::scenarios::killed_once(&sb, &args, &marker);
    assert_eq!(
        sb.runs()[0]["overrides"],
        serde_json::json!({"brains": [], "models": [["executor", "scripted-v9"]], "env": []})
    );
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // The planner kept its own model; both executor invocations used the override.
    let argv = |n: u32| sb.invocation(&run, n)["argv"].to_string();
    assert!(argv(1).contains("scripted-v1"), "{}", argv(1));
    for n in [2, 3] {
        assert!(argv(n).contains("scripted-v9"), "{n}: {}", argv(n));
    }
}

#[test]
fn kill_dash_nine_then_resume_finishes_with_gapless_history() {
    let sb = Sandbox::example();
    let run = crash_while_executing(&sb, "survive a crash");
    // Its process is gone, so it shows as interrupted, not running.
    let runs = sb.runs();
    assert_eq!(runs[0]["status"], "interrupted");
    assert_eq!(runs[0]["owner_gone"], true);
    assert_eq!(runs[0]["state"], "EXECUTING");

    let out = sb
        .modix()
        .args(["resume", "--json", &run[..10]])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let history = history_json(&sb, &run);
    let seqs: Vec<u64> = history.iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let path: Vec<String> = history
        .iter()
        .map(|t| {
            format!(
                "{}->{}",
                t["from"].as_str().unwrap(),
                t["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        path,
        [
            "INIT->PLANNING",
            "PLANNING->EXECUTING",
            "EXECUTING->TESTING",
            "TESTING->DONE"
        ]
    );
    // The interrupted invocation is on record as abandoned; the planner was not run again.
    let inv = sb.invocation(&run, 2);
    assert_eq!(inv["status"], "abandoned");
    // planner, abandoned executor, executor again, tester: the planner ran once.
    let out = sb
        .modix()
        .args(["history", &run, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = sb
        .modix()
        .args(["history", &run, "--invocation", "5", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let first = sb.invocation(&run, 1);
    assert_eq!(first["state"], "PLANNING");
    let third = sb.invocation(&run, 3);
    assert_eq!(
        (third["state"].as_str(), third["status"].as_str()),
        (Some("EXECUTING"), Some("completed"))
    );
}

#[test]
fn ctrl_c_interrupts_kills_the_agent_and_resume_completes() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    slow_first_executor(&sb, &marker);
    let child = start_go_until(&sb, "be interrupted", &marker);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(15));
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    assert_eq!(r.summary["status"], "interrupted");
    let run = r.run_id();
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.summary["state"], "DONE");
    // planner, the interrupted executor (recorded once, as abandoned), the
    // executor again, the tester: four invocations.
    assert_eq!(sb.invocation(&run, 2)["status"], "abandoned");
    assert_eq!(sb.invocation(&run, 4)["state"], "TESTING");
    let out = sb
        .modix()
        .args(["history", &run, "--invocation", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    // The advice names the run, where a placeholder pasted into a shell
    // would read a file named `run`.
    assert!(
        output_text(&out).contains(&format!("`modix history {run}` shows the run")),
        "{}",
        output_text(&out)
    );
    // Resuming a finished run is refused, and how to go on names it too,
    // by whatever reference the user gave.
    let out = sb.modix().args(["resume", "last"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = output_text(&out);
    assert!(text.contains("already ended"), "{text}");
    assert!(
        text.contains(&format!("`modix resume {run} --from STATE --note TEXT`")),
        "{text}"
    );
    assert!(!text.contains("<run>"), "{text}");
    let out = sb
        .modix()
        .args(["resume", &run, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let help = v["error"]["help"].as_str().unwrap();
    assert!(help.contains(&format!("modix history {run}`")), "{help}");
}

#[test]
fn two_runs_at_once_on_one_project_both_finish() {
    let sb = Sandbox::example();
    let a = sb.spawn(&["go", "--json", "first"]);
    let b = sb.spawn(&["go", "--json", "second"]);
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let r = GoResult::parse(&out);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(!r.stderr.contains("locked"), "{}", r.stderr);
        assert_eq!(r.path(), DONE_PATH);
    }
    let runs = sb.runs();
    assert_eq!(runs.as_array().unwrap().len(), 2);
}

#[test]
fn api_keys_never_reach_the_record() {
    let sb = Sandbox::example();
    let secret = "sk-ant-api03-THIS-IS-A-TEST-SECRET-123456";
    executor_printing_its_key(&sb, "my key is");
    passing_tester(&sb);
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", secret)
        .args(["go", "--json", "keep it secret"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let inv = sb.invocation(&r.run_id(), 2);
    assert!(
        inv["stderr"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:ANTHROPIC_API_KEY]"),
        "{inv:#}"
    );
    for entry in std::fs::read_dir(sb.root().join(".modix"))
        .unwrap()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("modix.db") {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{:?} holds the key",
                entry.path()
            );
        }
    }
}

#[test]
fn history_lists_runs_and_resolves_prefixes() {
    let sb = Sandbox::example();
    let r = sb.go_json("Fix mean()");
    let out = sb.modix().arg("history").output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&r.run_id()) && text.contains("Fix mean()") && text.contains("succeeded"),
        "{text}"
    );
    let out = sb
        .modix()
        .args(["history", &r.run_id()[..8]])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("TESTING → DONE") && text.contains("tests_pass"),
        "{text}"
    );
    let out = sb.modix().args(["history", "ZZZZ"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(output_text(&out).contains("no run matches `ZZZZ`"));
    // `--limit 0` lists every run.
    let out = sb
        .modix()
        .args(["history", "--limit", "0", "--json"])
        .output()
        .unwrap();
    let runs = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["runs"];
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
}

#[test]
fn empty_epic_is_a_usage_error() {
    let sb = Sandbox::example();
    let out = sb.modix().args(["go", "  "]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(output_text(&out).contains("the epic is empty"));
}

#[test]
fn verbose_streams_agent_output_redacted() {
    let sb = Sandbox::example();
    let secret = "sk-ant-api03-ANOTHER-TEST-SECRET-987654";
    executor_printing_its_key(&sb, "working with");
    passing_tester(&sb);
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", secret)
        .args(["-v", "go", "stream it"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[executor] working with [REDACTED:ANTHROPIC_API_KEY]"),
        "{text}"
    );
    assert!(!text.contains(secret));
}

#[test]
fn unknown_workflow_is_a_usage_error_and_a_custom_one_runs() {
    let sb = Sandbox::example();
    let out = sb
        .modix()
        .args(["go", "--workflow", "plan_exec_test", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = output_text(&out);
    assert!(text.contains("unknown workflow `plan_exec_test`"), "{text}");
    assert!(text.contains("did you mean `plan_execute_test`?"), "{text}");

    // A project workflow: plan, then test straight away.
    sb.write(
        ".modix/fsm/plan_test.toml",
        r#"id = "plan_test"
version = "1.0.0"
description = "Plan, then run the tests."
initial = "INIT"

[states.INIT]
kind = "input"
event = "epic_received"

[states.PLANNING]
kind = "agent"
agent = "planner"
output = "task_spec"
emit = [
  { on = "output", event = "planned" },
  { on = "invalid_output", event = "failed" },
  { on = "process_error", event = "failed" },
  { on = "timeout", event = "failed" },
]

[states.TESTING]
kind = "agent"
agent = "tester"
output = "test_result"
emit = [
  { on = "output", when = "passed == true", event = "passed" },
  { on = "output", event = "failed" },
  { on = "invalid_output", event = "failed" },
  { on = "process_error", event = "failed" },
  { on = "timeout", event = "failed" },
]

[states.DONE]
kind = "terminal"
outcome = "success"

[states.FAILED]
kind = "terminal"
outcome = "failure"

[[transitions]]
from = "INIT"
event = "epic_received"
to = "PLANNING"

[[transitions]]
from = "PLANNING"
event = "planned"
to = "TESTING"

[[transitions]]
from = "PLANNING"
event = "failed"
to = "FAILED"

[[transitions]]
from = "TESTING"
event = "passed"
to = "DONE"

[[transitions]]
from = "TESTING"
event = "failed"
to = "FAILED"
"#,
    );
    let out = sb
        .modix()
        .args(["go", "--json", "--workflow", "plan_test", "check only"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(
        r.code,
        Some(1),
        "the example's tests fail before the fix: {}",
        r.stderr
    );
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -planned-> TESTING",
            "TESTING -failed-> FAILED"
        ]
    );
}

#[test]
fn on_a_terminal_a_live_line_shows_the_running_agent() {
    if which::which("script").is_err() {
        eprintln!("note: `script` (util-linux) not found; the terminal test is skipped");
        return;
    }
    let sb = Sandbox::example();
    let modix = assert_cmd::cargo::cargo_bin("modix");
    // `script` gives modix a pseudo-terminal, as a person's shell would.
    let mut cmd = std::process::Command::new("script");
    for (k, v) in sb.modix().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd
        .current_dir(sb.root())
        .env("TERM", "xterm")
        .args([
            "-qec",
            &format!("{} go 'Fix mean()'", modix.display()),
            "/dev/null",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("EXECUTING: executor (attempt 2 · loop 1 of 3 · at most 6)"),
        "{text}"
    );
    // The live line is redrawn in place (indicatif), not printed line by line.
    assert!(text.contains("\u{1b}[2K"), "no live line redraw: {text}");
    assert!(!text.contains("  … EXECUTING"), "{text}");
    assert!(text.contains("TESTING —tests_pass→ DONE"), "{text}");
    assert!(text.contains("succeeded: reached DONE"), "{text}");
}

#[test]
fn resume_refuses_a_run_whose_workflow_changed() {
    let sb = Sandbox::example();
    let run = crash_while_executing(&sb, "change the rules");

    // The same workflow id, different rules: a project override.
    let shipped = include_str!("../../fsm/plan_execute_test.toml");
    sb.write(
        ".modix/fsm/plan_execute_test.toml",
        &shipped.replace("max = 3", "max = 5"),
    );
    let out = sb.modix().args(["resume", &run]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("workflow `plan_execute_test` changed since run"),
        "{text}"
    );
    assert!(text.contains("start a new run with `modix go`"), "{text}");

    std::fs::remove_file(sb.root().join(".modix/fsm/plan_execute_test.toml")).unwrap();
    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn context_mode_defaults_from_the_global_settings() {
    let sb = Sandbox::example();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["manifest"]
            .as_object_mut()
            .unwrap()
            .remove("context");
    });
    let planner_context = |sb: &Sandbox| {
        let r = sb.go_json("Fix mean()");
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        sb.invocation(&r.run_id(), 1)["context"].clone()
    };
    let ctx = planner_context(&sb);
    assert_eq!(ctx["context_mode"], "isolated");
    assert!(ctx.get("history").is_none());
    sb.write(
        "../home/settings.json",
        "{ \"context_mode\": \"shared\" }\n",
    );
    let ctx = planner_context(&sb);
    assert_eq!(ctx["context_mode"], "shared");
    assert_eq!(ctx["history"][0]["kind"], "epic");
}

#[test]
fn ctrl_c_at_any_moment_of_start_up_is_recorded_never_lost() {
    use std::os::unix::process::ExitStatusExt;
    let sb = Sandbox::example();
    // Every executor stalls, so no run can finish before its signal.
    sb.agent_script(&script("    sleep 30\n"));
    // From "modix has just started" to "the first agent runs": wherever the
    // signal lands, modix exits 130 on its own — or, before its handler
    // exists (while the loader still runs, which a loaded machine can
    // stretch past any fixed delay), dies of it with nothing created — and
    // any run it created is recorded as interrupted, never left running.
    // Once the handler exists, the signal must be handled: the last round
    // waits for it. (That it exists before modix reads anything of the
    // user's is `ctrl_c_before_go_listens_is_held_not_fatal`.)
    let mut handled = 0;
    for delay_ms in [0, 2, 5, 10, 20, 40, 80, 160, u64::MAX] {
        let child = sb.spawn(&["go", "--json", "start and stop"]);
        let pid = child.id() as i32;
        if delay_ms == u64::MAX {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !catches_sigint(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        } else {
            std::thread::sleep(Duration::from_millis(delay_ms));
        }
        let caught = catches_sigint(pid);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        match out.status.signal() {
            Some(_) => {
                assert!(
                    !caught,
                    "died of a signal it had a handler for (+{delay_ms} ms)"
                );
                assert!(out.stdout.is_empty(), "died mid-run: {}", output_text(&out));
            }
            None => {
                assert_eq!(out.status.code(), Some(130), "{}", output_text(&out));
                handled += 1;
            }
        }
    }
    assert!(
        handled >= 1,
        "modix handled none of the start-up interrupts"
    );
    for run in sb.runs().as_array().unwrap() {
        assert_eq!(run["status"], "interrupted", "{run}");
    }
}

/// Whether process `pid` has a handler for SIGINT (its `SigCgt` mask).
fn catches_sigint(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (nix::libc::SIGINT - 1)) != 0)
}

/// `modix args` under strace, with a SIGINT delivered as modix first looks
/// for its settings file — early in `main`, before `go` could listen for
/// signals: its output and whether the signal killed it.
fn interrupted_while_reading_settings(sb: &Sandbox, args: &[&str]) -> (String, bool) {
    let settings = sb.dir.path().join("home/settings.json");
    let (out, trace) = crate::record::straced_with(
        sb,
        &[
            "-P",
            &settings.to_string_lossy(),
            "-e",
            "trace=%file",
            "-e",
            "inject=%file:signal=SIGINT:when=1",
        ],
        args,
    );
    assert!(
        trace.contains("--- SIGINT"),
        "no signal delivered:\n{trace}"
    );
    (output_text(&out), trace.contains("killed by SIGINT"))
}

/// A Ctrl-C in modix's first instants — before `go` has parsed its command
/// line — is held, then stops the run as any later one does: exit 130,
/// nothing run. A command that records no stop dies of it, as before.
#[test]
fn ctrl_c_before_go_listens_is_held_not_fatal() {
    let sb = Sandbox::example();
    let (text, killed) = interrupted_while_reading_settings(&sb, &["go", "--json", "early"]);
    assert!(!killed, "modix died of the held signal: {text}");
    assert!(
        text.contains("interrupted before the run started; nothing was recorded"),
        "{text}"
    );
    assert!(sb.runs().as_array().unwrap().is_empty(), "{}", sb.runs());

    let (text, killed) = interrupted_while_reading_settings(&sb, &["validate"]);
    assert!(killed, "validate outlived a Ctrl-C: {text}");
}

/// While `go` waits for its epic on a pipe, Ctrl-C ends it at once: the
/// signals held for the run are let through while modix may block.
#[test]
fn ctrl_c_while_go_reads_its_epic_from_a_pipe_ends_it() {
    use std::os::unix::process::ExitStatusExt;
    let sb = Sandbox::example();
    let mut cmd = sb.command(&["go", "--epic-file", "-"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let _writer = child.stdin.take();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("modix went on waiting for its epic after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let sigint = nix::sys::signal::Signal::SIGINT as i32;
    assert_eq!(status.signal(), Some(sigint), "{status:?}");
    assert!(sb.runs().as_array().unwrap().is_empty(), "{}", sb.runs());
}

#[test]
fn a_daemon_a_crashed_runs_agent_started_is_stopped_by_stop_and_by_resume() {
    for how in ["stop", "resume"] {
        let sb = Sandbox::example();
        let marker = sb.dir.path().join("executing");
        let daemon_pid = sb.dir.path().join("daemon.pid");
        // The first executor starts a daemon in a session of its own (in
        // no process group of the run's), then works on.
        sb.agent_script(&script(&format!(
            "    if [ ! -e {m} ]; then setsid sh -c 'echo $$ > {d}; while :; do sleep 0.2; done' </dev/null >/dev/null 2>&1 & \n    while [ ! -s {d} ]; do sleep 0.05; done; touch {m}; sleep 30; fi\n{EXECUTOR_OK}\n",
            m = marker.display(),
            d = daemon_pid.display(),
        )));
        passing_tester(&sb);
        let run = crate::scenarios::killed_once(&sb, &["go", "--json", how], &marker);
        let daemon: i32 = std::fs::read_to_string(&daemon_pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(pid_alive(daemon), "{how}: the daemon should run before");
        if how == "stop" {
            let out = sb.modix().args(["stop", &run]).output().unwrap();
            let text = crate::util::output_text(&out);
            assert_eq!(out.status.code(), Some(0), "{text}");
            assert!(
                text.contains("stopped what its agent left running"),
                "{text}"
            );
        } else {
            let r = sb.resume_json(&run);
            assert_eq!(r.code, Some(0), "{}", r.stderr);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while pid_alive(daemon) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!pid_alive(daemon), "{how} left the daemon {daemon} running");
    }
}

#[test]
fn resume_stops_the_agent_a_crashed_modix_left_running() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    let pidfile = sb.dir.path().join("agent.pid");
    let late = sb.dir.path().join("late-write");
    // The first executor notes its pid, then keeps working long after modix
    // died; if it lived on, it would write next to the re-run.
    sb.agent_script(&script(&format!(
        "    if [ ! -e {m} ]; then touch {m}; echo $$ > {p}; sleep 3; touch {l}; sleep 30; fi\n{EXECUTOR_OK}\n",
        m = marker.display(),
        p = pidfile.display(),
        l = late.display()
    )));
    passing_tester(&sb);
    let run = crate::scenarios::killed_once(&sb, &["go", "--json", "crash and orphan"], &marker);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pidfile.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let agent: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        pid_alive(agent),
        "the orphan should still be running before resume"
    );

    let r = sb.resume_json(&run);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !pid_alive(agent),
        "resume left the crashed run's agent {agent} running"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !late.exists(),
        "the orphan wrote after the run was recorded DONE"
    );
    let abandoned = sb.invocation(&run, 2);
    assert_eq!(abandoned["status"], "abandoned");
    assert_eq!(abandoned["pgid"], agent, "{abandoned:#}");
}

/// `modix -v go … 2>&1 | head -1`: the reader of stderr goes away while the
/// agents' own output is still echoed there. The run goes on to its end —
/// an echo nobody reads must not panic modix mid-step (exit 101, the run
/// left "interrupted (owner gone)").
#[test]
fn a_verbose_run_whose_stderr_reader_goes_away_still_ends() {
    use std::io::Read as _;
    let sb = Sandbox::example();
    let mut cmd = sb.command(&["-v", "go", "Fix mean()"]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut first = [0u8; 1];
    child
        .stderr
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(sb.runs()[0]["status"], "succeeded");
}
