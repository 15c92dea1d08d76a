//! Usage, budgets, the pre-flight ceiling and the JSON shape prompts state,
//! through the binary, against emulators that print exactly the shapes the
//! real CLIs print (their usage included), and answer exactly what the
//! prompt they were given says to answer.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{GoResult, Sandbox, output_text};

/// The CLIs whose output shapes the emulators print: the three presets
/// with JSON output, and the example's own text shell.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    Text,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Text => "scripted",
        }
    }
}

/// What an emulator does besides answering.
#[derive(Clone, Copy)]
struct Act {
    /// What each invocation reports it cost (Claude's `total_cost_usd`).
    cost: f64,
    /// Seconds the executor takes.
    executor_sleep: u32,
    /// The planner gives up the way its prompt says to.
    planner_gives_up: bool,
}

const ACT: Act = Act {
    cost: 0.02,
    executor_sleep: 0,
    planner_gives_up: false,
};

/// An emulator of `cli`: it keeps its prompt and argv under $HOME, takes the
/// JSON shape its prompt states (the ```jsonc block, comments off) as its
/// answer — as a model following the prompt would — and prints it in the
/// CLI's own output format, with the CLI's own usage report (100 tokens in
/// and 10 out an invocation). The executor fixes calc.py first.
fn emulator(cli: Cli, act: Act) -> String {
    let print = match cli {
        Cli::Claude => format!(
            r#"print(json.dumps({{"type": "system", "subtype": "init", "session_id": "c-" + state, "model": "claude-emu"}}))
print(json.dumps({{"type": "assistant", "message": {{"content": [{{"type": "text", "text": "Done."}}], "usage": {{"input_tokens": 50, "output_tokens": 5}}}}, "session_id": "c-" + state}}))
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": "```json\n" + text + "\n```",
                  "num_turns": 2, "total_cost_usd": {cost}, "session_id": "c-" + state,
                  "usage": {{"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 7}}}}))"#,
            cost = act.cost
        ),
        Cli::Codex => r#"print(json.dumps({"type": "thread.started", "thread_id": "t-" + state}))
print(json.dumps({"type": "turn.started"}))
print(json.dumps({"type": "item.completed", "item": {"id": "i1", "type": "agent_message", "text": text}}))
print(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 60, "cached_input_tokens": 20, "output_tokens": 6}}))
print(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 4}}))"#
            .to_owned(),
        Cli::Gemini => r#"print(json.dumps({"type": "init", "timestamp": "t", "session_id": "g-" + state, "model": "gemini-emu"}))
half = len(text) // 2
for piece in (text[:half], text[half:]):
    print(json.dumps({"type": "message", "timestamp": "t", "role": "assistant", "content": piece, "delta": True}))
print(json.dumps({"type": "result", "timestamp": "t", "status": "success",
                  "stats": {"total_tokens": 110, "input_tokens": 100, "output_tokens": 10, "cached": 0, "input": 100, "duration_ms": 5, "tool_calls": 0, "models": {}}}))"#
            .to_owned(),
        Cli::Text => r#"print("Here is my answer.\n```json\n" + text + "\n```")"#.to_owned(),
    };
    let version = match cli {
        Cli::Claude => "2.1.330 (Claude Code)",
        Cli::Codex => "codex-cli 0.169.0",
        Cli::Gemini => "0.61.0",
        Cli::Text => "scripted-agent 1.0.0",
    };
    format!(
        r#"#!/usr/bin/env python3
import json, os, sys, time
if sys.argv[1:] == ["--version"]:
    print({version:?})
    sys.exit(0)
state = os.environ.get("MODIX_STATE", "")
home = os.environ["HOME"]
prompt = sys.stdin.read()
with open(os.path.join(home, "{name}-" + state + ".prompt"), "w") as f:
    f.write(prompt)
with open(os.path.join(home, "{name}-" + state + ".argv"), "w") as f:
    json.dump(sys.argv[1:], f)
# The shape the prompt states, its comments taken off.
block = prompt.split("```jsonc\n", 1)[1].split("\n```", 1)[0]
lines = [l.split("  // ")[0] for l in block.splitlines() if not l.startswith("//")]
answer = json.loads("\n".join(lines))
# What a model fills in: the file the plan is about.
if state == "PLANNING":
    answer["tasks"][0]["files"] = ["calc.py"]
if state == "PLANNING" and {gives_up}:
    answer = {{"error": "the epic names no file I can find"}}
if state == "EXECUTING":
    answer["files_changed"] = ["calc.py"]
    time.sleep({sleep})
    src = open("calc.py").read().replace("(len(values) + 1)", "len(values)")
    open("calc.py", "w").write(src)
text = json.dumps(answer)
{print}
"#,
        name = cli.name(),
        gives_up = if act.planner_gives_up {
            "True"
        } else {
            "False"
        },
        sleep = act.executor_sleep,
    )
}

/// The example with its planner and executor on `cli` (emulated) and the
/// project's tests as the tester; `--json` output parsed.
fn project(cli: Cli, act: Act) -> Sandbox {
    let sb = Sandbox::example();
    let script = emulator(cli, act);
    match cli {
        Cli::Text => {
            let path = sb.root().join("agents/scripted-agent");
            crate::util::write_file(&path, &script);
            crate::util::make_executable(&path);
        }
        _ => {
            sb.fake_bin(cli.name(), &script);
        }
    }
    let (shell, brain) = match cli {
        Cli::Claude => (
            "claude",
            json!({"provider": "anthropic", "model": "sonnet", "api_key_env": "ANTHROPIC_API_KEY"}),
        ),
        Cli::Codex => (
            "codex",
            json!({"provider": "openai", "model": "gpt-5-codex", "api_key_env": "OPENAI_API_KEY"}),
        ),
        Cli::Gemini => (
            "gemini",
            json!({"provider": "google", "model": "gemini-2.5-flash", "api_key_env": "GEMINI_API_KEY"}),
        ),
        Cli::Text => (
            "scripted",
            json!({"provider": "local", "model": "scripted-v1"}),
        ),
    };
    sb.edit_json(".modix/shells.json", |v| {
        if cli != Cli::Text {
            v["shells"][shell] = json!({ "preset": shell });
        }
    });
    sb.edit_json(".modix/brains.json", |v| v["brains"]["emu"] = brain);
    sb.edit_json(".modix/agents.json", |v| {
        for agent in ["planner", "executor"] {
            v["agents"][agent]["shell"] = shell.into();
            v["agents"][agent]["brain"] = "emu".into();
            let m = v["agents"][agent]["manifest"].as_object_mut().unwrap();
            m.remove("requires");
        }
    });
    sb
}

fn go(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    sb.modix()
        .args(args)
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-emulator-key-000000")
        .env("OPENAI_API_KEY", "sk-emulator-key-0000000000000000000000")
        .env("GEMINI_API_KEY", "AIzaEmulator0000000000000000000000000")
        // Gemini's own login settings are no business of these tests.
        .env("MODIX_SKIP_READINESS", "1")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap()
}

fn go_json(sb: &Sandbox, extra: &[&str]) -> GoResult {
    let mut args = vec!["go", "--json"];
    args.extend(extra);
    args.push("Fix mean() in calc.py");
    GoResult::parse(&go(sb, &args))
}

fn home(sb: &Sandbox) -> PathBuf {
    sb.dir.path().join("home")
}

fn set_budget(sb: &Sandbox, budget: Value) {
    sb.edit_json(".modix/runtimes.json", |v| v["budget"] = budget);
}

/// The planner's prompt states its JSON shape; each CLI's emulator answers
/// exactly that shape in its own output format, and modix parses it, runs
/// to DONE, and records what each CLI reported it used.
#[test]
fn each_cli_carries_the_stated_shape_and_its_usage_is_recorded() {
    for cli in [Cli::Claude, Cli::Codex, Cli::Gemini, Cli::Text] {
        let sb = project(cli, ACT);
        let r = go_json(&sb, &[]);
        assert_eq!(
            r.code,
            Some(0),
            "{cli:?}: {}\n{:#?}",
            r.stderr,
            r.transitions
        );
        assert_eq!(
            r.path()[1..3],
            [
                "PLANNING -task_spec_valid-> EXECUTING",
                "EXECUTING -execution_done-> TESTING"
            ],
            "{cli:?}"
        );
        let prompt =
            std::fs::read_to_string(home(&sb).join(format!("{}-PLANNING.prompt", cli.name())))
                .unwrap();
        assert!(
            prompt.contains(r#"  "complexity": "low""#)
                && prompt.contains(r#"// one of "low", "medium", "high""#)
                && prompt.contains(r#"If you cannot do the task, answer {"error": "#),
            "{cli:?}: {prompt}"
        );
        let executor =
            std::fs::read_to_string(home(&sb).join(format!("{}-EXECUTING.prompt", cli.name())))
                .unwrap();
        assert!(
            executor.contains(r#"answer with "outcome": "failure" and say why in "error""#),
            "{executor}"
        );

        let run = r.run_id();
        let summary = &r.summary["usage"];
        let planner = sb.invocation(&run, 1);
        if cli == Cli::Text {
            // Its output reports no usage: nothing is made up.
            assert_eq!(planner["usage"], Value::Null);
            assert_eq!(summary["invocations"], 0, "{summary}");
            continue;
        }
        let model = match cli {
            Cli::Claude => json!("claude-emu"),
            Cli::Gemini => json!("gemini-emu"),
            _ => Value::Null,
        };
        let session = match cli {
            Cli::Claude => "c-PLANNING",
            Cli::Codex => "t-PLANNING",
            _ => "g-PLANNING",
        };
        assert_eq!(planner["usage"]["input_tokens"], 100, "{cli:?}: {planner}");
        assert_eq!(planner["usage"]["output_tokens"], 10, "{cli:?}");
        assert_eq!(planner["usage"]["session_id"], session, "{cli:?}");
        assert_eq!(planner["usage"]["model"], model, "{cli:?}");
        // Planner and executor, summed (the tester is a plain command).
        assert_eq!(summary["input_tokens"], 200, "{cli:?}: {summary}");
        assert_eq!(summary["output_tokens"], 20, "{cli:?}");
        assert_eq!(summary["invocations"], 2, "{cli:?}");
        match cli {
            Cli::Claude => {
                assert_eq!(planner["usage"]["turns"], 2);
                assert_eq!(summary["turns"], 4);
                assert!((summary["cost_usd"].as_f64().unwrap() - 0.04).abs() < 1e-9);
            }
            _ => assert_eq!(summary["cost_usd"], Value::Null, "{cli:?}: {summary}"),
        }
        assert_eq!(sb.history_json(&run)["usage"], *summary);

        // The same, for people: go's summary, history's header and the invocation.
        let text = sb.modix().args(["history", &run]).output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(
            text.contains("Usage: 200 tokens in, 20 out"),
            "{cli:?}: {text}"
        );
        let one = sb
            .modix()
            .args(["history", &run, "--invocation", "1"])
            .output()
            .unwrap();
        let one = String::from_utf8_lossy(&one.stdout).into_owned();
        assert!(
            one.contains("usage: 100 tokens in, 10 out") && one.contains(session),
            "{cli:?}: {one}"
        );
    }
}

#[test]
fn go_says_what_the_run_used() {
    let sb = project(Cli::Claude, ACT);
    let out = go(&sb, &["go", "Fix mean() in calc.py"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "Usage: 200 tokens in, 20 out, $0.04, 4 turns (2 invocations reported usage)"
        ),
        "{stdout}"
    );
}

/// A planner that gives up the way its prompt says (`{"error": …}`) failed
/// as the agent's own failure, its reason on record — not a schema error.
#[test]
fn a_planner_that_gives_up_as_told_fails_with_its_reason() {
    let sb = project(
        Cli::Claude,
        Act {
            planner_gives_up: true,
            ..ACT
        },
    );
    let r = go_json(&sb, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.path()[1], "PLANNING -task_spec_invalid-> FAILED");
    let inv = sb.invocation(&r.run_id(), 1);
    assert_eq!(inv["class"], "agent_error", "{inv}");
    assert_eq!(
        inv["reason"],
        "the agent reported failure: the epic names no file I can find"
    );
}

/// Claude reports what each invocation cost; once the run has spent
/// `max_cost_usd`, the next invocation is failed unstarted with
/// `budget_exceeded`, which the shipped workflow catches to FAILED. Codex
/// reports tokens only: `max_tokens` does the same.
#[test]
fn a_spent_budget_fails_the_next_invocation_unstarted() {
    for (cli, budget, said) in [
        (
            Cli::Claude,
            json!({"max_cost_usd": 0.4}),
            "the run has spent $0.50 (as its CLIs reported); budget.max_cost_usd is $0.40",
        ),
        (
            Cli::Codex,
            json!({"max_tokens": 100}),
            "the run has used 110 tokens (in and out, as its CLIs reported); budget.max_tokens is 100",
        ),
    ] {
        let sb = project(cli, Act { cost: 0.5, ..ACT });
        set_budget(&sb, budget);
        let r = go_json(&sb, &[]);
        assert_eq!(r.code, Some(1), "{cli:?}: {}", r.stderr);
        assert_eq!(
            r.path(),
            [
                "INIT -epic_received-> PLANNING",
                "PLANNING -task_spec_valid-> EXECUTING",
                "EXECUTING -catch:budget_exceeded-> FAILED",
            ],
            "{cli:?}"
        );
        assert_eq!(r.summary["status"], "failed");
        let inv = sb.invocation(&r.run_id(), 2);
        assert_eq!(inv["class"], "budget_exceeded", "{inv}");
        assert_eq!(inv["reason"], said, "{cli:?}");
        assert_eq!(inv["error"], said, "{cli:?}");
        assert_eq!(inv["pgid"], Value::Null, "never started");
        assert!(
            !home(&sb)
                .join(format!("{}-EXECUTING.prompt", cli.name()))
                .exists(),
            "{cli:?}: the executor ran"
        );
        // A redrive goes on once the budget allows more; what was spent stays spent.
        set_budget(&sb, json!({"max_cost_usd": 10, "max_tokens": 10_000}));
        let run = r.run_id();
        let out = go(
            &sb,
            &[
                "resume",
                &run,
                "--from",
                "EXECUTING",
                "--note",
                "budget raised",
                "--json",
            ],
        );
        let again = GoResult::parse(&out);
        assert_eq!(again.code, Some(0), "{cli:?}: {}", again.stderr);
        assert_eq!(again.summary["state"], "DONE");
        assert_eq!(again.summary["usage"]["invocations"], 2, "{cli:?}");
    }
}

/// `max_run_secs` is the run's deadline: the agent running when it passes is
/// stopped there (its class `budget_exceeded`, caught to FAILED), long
/// before its own timeout.
#[test]
fn the_deadline_stops_a_running_agent() {
    let sb = project(
        Cli::Text,
        Act {
            executor_sleep: 60,
            ..ACT
        },
    );
    set_budget(&sb, json!({"max_run_secs": 3}));
    let started = Instant::now();
    let r = go_json(&sb, &[]);
    let took = started.elapsed();
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(r.path()[2], "EXECUTING -catch:budget_exceeded-> FAILED");
    let inv = sb.invocation(&r.run_id(), 2);
    assert_eq!(inv["class"], "budget_exceeded", "{inv}");
    let reason = inv["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "stopped at the run's deadline (budget.max_run_secs is 3 s; timed out after"
        ),
        "{reason}"
    );
    assert!(inv["pgid"].is_u64(), "it ran: {inv}");
    // The ceiling said the deadline bounds the run (3 s + the 2 s kill grace).
    let ceiling = r.events.iter().find(|e| e["type"] == "ceiling").unwrap();
    assert_eq!(ceiling["deadline_secs"], 5, "{ceiling}");
}

/// A workflow with no `catch` for `budget_exceeded`: the failure meets the
/// state's `process_error` emit rule like any other; each further visit is
/// refused the same way, unstarted, until the workflow's bounds end the run.
#[test]
fn without_a_catch_the_emit_rules_and_bounds_end_the_run() {
    let sb = project(Cli::Claude, Act { cost: 0.5, ..ACT });
    set_budget(&sb, json!({"max_cost_usd": 0.4}));
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    let catch = "catch = [\n  { on = [\"auth\", \"not_found\", \"bad_invocation\", \"budget_exceeded\"], next = \"FAILED\" },\n]\n";
    assert_eq!(shipped.matches(catch).count(), 3);
    let text = shipped
        .replace("id = \"plan_execute_test\"", "id = \"uncaught\"")
        .replace(catch, "");
    sb.write(".modix/fsm/uncaught.toml", &text);
    let r = go_json(&sb, &["--workflow", "uncaught"]);
    assert_eq!(r.code, Some(1), "{}\n{text}", r.stderr);
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -task_spec_valid-> EXECUTING",
            "EXECUTING -execution_rejected-> EXECUTING",
            "EXECUTING -execution_rejected-> EXECUTING",
            "EXECUTING -execution_rejected-> FAILED",
        ],
        "{:#?}",
        r.transitions
    );
    for n in 2..=4 {
        let inv = sb.invocation(&r.run_id(), n);
        assert_eq!(inv["class"], "budget_exceeded", "{inv}");
        assert_eq!(inv["pgid"], Value::Null, "never started: {inv}");
    }
}

/// The ceiling: Claude takes a per-invocation cap (`--max-budget-usd`), so
/// with one the worst case has a price: (5 planner + 30 executor
/// invocations, retries included) × $0.50. Above `--max-cost` (or
/// `budget.refuse_above_usd`) the run is refused, nothing recorded, unless
/// `--force-cost`; `fsm show` prints the same figures.
#[test]
fn the_preflight_ceiling_refuses_above_the_limit_unless_forced() {
    let sb = project(Cli::Claude, ACT);
    set_budget(&sb, json!({"invocation_max_cost_usd": 0.5}));
    let epic = "Fix mean() in calc.py";

    let out = go(&sb, &["go", "--max-cost", "10", epic]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Worst case: at most 55 invocations (retries included), at most 1h 30m of wall time, at most $17.50"),
        "{stderr}"
    );
    assert!(
        stderr.contains("refusing to start: the worst case costs $17.50, more than the $10.00 allowed; nothing was recorded"),
        "{stderr}"
    );
    assert!(stderr.contains("--force-cost starts anyway"), "{stderr}");
    assert_eq!(sb.runs(), json!([]), "nothing recorded");
    assert!(!home(&sb).join("claude-PLANNING.prompt").exists());

    // The same from runtimes.json, with the JSON line that says it.
    set_budget(
        &sb,
        json!({"invocation_max_cost_usd": 0.5, "refuse_above_usd": 10}),
    );
    let out = go(&sb, &["go", "--json", epic]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ceiling");
    assert_eq!(first["cost_usd"], 17.5);
    assert_eq!(first["invocations"], 55);
    assert_eq!(sb.runs(), json!([]));

    // `fsm show` prints the same figures.
    let show = sb
        .modix()
        .args(["fsm", "show", "plan_execute_test", "--json"])
        .output()
        .unwrap();
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    let mut ceiling = first.clone();
    ceiling.as_object_mut().unwrap().remove("type");
    ceiling.as_object_mut().unwrap().remove("schema_version");
    assert_eq!(show["ceiling"], ceiling);
    let text = sb
        .modix()
        .args(["fsm", "show", "plan_execute_test"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(
            "with this project's timeouts and budget (what `modix go` checks): at most 55 invocations"
        ),
        "{}",
        output_text(&text)
    );

    // A higher --max-cost lets it start; so does --force-cost, with a warning.
    let r = go_json(&sb, &["--max-cost", "20"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let argv: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(home(&sb).join("claude-PLANNING.argv")).unwrap(),
    )
    .unwrap();
    let at = argv.iter().position(|a| a == "--max-budget-usd").unwrap();
    assert_eq!(argv[at + 1], "0.5", "the cap reaches the CLI");
    let out = go(&sb, &["go", "--force-cost", epic]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("more than the $10.00 allowed; starting anyway (--force-cost)"),
        "{}",
        output_text(&out)
    );
}

/// An agent on a shell that takes no cap has no bound on its cost: a cost
/// limit refuses the run, and says what would bound it.
#[test]
fn an_unbounded_cost_is_refused_under_a_limit() {
    let sb = project(Cli::Codex, ACT);
    let out = go(&sb, &["go", "--max-cost", "100", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cost not bounded (no per-invocation cap for planner, executor)")
            && stderr.contains("the worst case's cost has no bound")
            && stderr.contains("budget.invocation_max_cost_usd"),
        "{stderr}"
    );
    // A malformed amount is clap's to refuse.
    let out = go(&sb, &["go", "--max-cost", "-1", "Fix mean()"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert_eq!(sb.runs(), json!([]));
}

/// The largest bound there is makes a worst case of years: said in years,
/// not as the hours of a millisecond count that overflowed.
#[test]
fn a_worst_case_of_years_is_said_in_years() {
    let sb = project(Cli::Claude, ACT);
    set_budget(&sb, json!({"invocation_max_cost_usd": 0.5}));
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    sb.write(
        ".modix/fsm/plan_execute_test.toml",
        &shipped.replacen("max = 3\n", "max = 4294967295\n", 1),
    );
    let out = go(&sb, &["go", "--max-cost", "10", "Fix mean() in calc.py"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("years of wall time"), "{stderr}");
    assert_eq!(sb.runs(), json!([]), "nothing recorded");
}
