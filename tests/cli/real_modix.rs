//! `modix doctor` and `modix go` through the binary, with the real agent CLIs
//! (installed by `.ci/agent-clis/install.sh`) bound by the shipped presets,
//! found through PATH, and no key: doctor says what is missing in the CLI's
//! own terms; go ends within seconds with the failure class the CLI's own
//! signals give (auth; Codex offline never says, so its "waiting for
//! network" rule stops it: network), its reason in go's output and in
//! `history --json`, nothing of the prompt or the environment left in HOME
//! or TMPDIR, and no process left behind.
//!
//! A missing CLI skips its test (loudly), or fails it with
//! `MODIX_REQUIRE_AGENT_CLIS=1`, as in `real_clis.rs`. No request leaves
//! 127.0.0.1: Claude Code and Codex are pointed at a closed local port (the
//! brain's `endpoint`), Gemini fails its auth check before any request.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mock_anthropic::{INPUT_TOKENS, MockAnthropic, OUTPUT_TOKENS, Script};
use crate::real_clis::{FAKE_ANTHROPIC_KEY, bin_dir, closed_port_url, find_cli, is_root};
use crate::util::{GoResult, Sandbox, output_text};

/// What each go must stay under, the CLI's start-up included.
const LIMIT: Duration = Duration::from_secs(30);

/// The example project with its planner bound to `preset` on `brain`, and a
/// TMPDIR of its own to look into afterwards.
struct RealProject {
    sb: Sandbox,
}

impl RealProject {
    fn new(preset: &str, brain: Value) -> Self {
        let sb = Sandbox::example();
        std::fs::create_dir_all(sb.dir.path().join("tmp")).unwrap();
        sb.edit_json(".modix/shells.json", |v| {
            v["shells"][preset] = json!({ "preset": preset })
        });
        sb.edit_json(".modix/brains.json", |v| v["brains"]["real"] = brain);
        sb.edit_json(".modix/agents.json", |v| {
            v["agents"]["planner"]["shell"] = preset.into();
            v["agents"]["planner"]["brain"] = "real".into();
        });
        // The shipped workflow without its retries (up to a few minutes of
        // waits for a network failure): these tests pin how each CLI's own
        // failure is classified and caught; retrying is tested with
        // emulators (recovery.rs).
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
        )
        .unwrap();
        let no_retries: String = shipped
            .split("\nretry = [\n")
            .enumerate()
            .map(|(i, part)| match i {
                0 => part.to_owned(),
                _ => part
                    .split_once("\n]\n")
                    .map_or(part, |(_, rest)| rest)
                    .to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!no_retries.contains("retry ="), "{no_retries}");
        sb.write(".modix/fsm/plan_execute_test.toml", &no_retries);
        RealProject { sb }
    }

    fn home(&self) -> PathBuf {
        self.sb.dir.path().join("home")
    }

    fn tmp(&self) -> PathBuf {
        self.sb.dir.path().join("tmp")
    }

    /// `modix ARGS` with the real CLIs first on PATH (then the host's, for
    /// `node`), the sandbox's HOME and its own TMPDIR.
    fn modix(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = self.sb.modix();
        let host = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        cmd.env(
            "PATH",
            format!("{}:{}:{host}", bin_dir().display(), self.sb.bin().display()),
        )
        .env("TMPDIR", self.tmp())
        .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("GOOGLE_GENAI_USE_VERTEXAI")
        .env_remove("GOOGLE_GENAI_USE_GCA")
        .args(args);
        cmd
    }

    /// `modix doctor --json` (with `extra` flags): its exit code and report.
    fn doctor(&self, extra: &[&str]) -> (Option<i32>, Value, Duration) {
        let started = Instant::now();
        let out = self
            .modix(&[&["doctor", "--json"], extra].concat())
            .output()
            .unwrap();
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
        (out.status.code(), report, started.elapsed())
    }

    /// `modix go --json EPIC`, past `go`'s readiness check (which would stop
    /// it before the CLI runs): what the CLI itself does is the point.
    fn go(&self, epic: &str) -> (GoResult, Duration) {
        let started = Instant::now();
        let out = self
            .modix(&["go", "--json", epic])
            .env("MODIX_SKIP_READINESS", "1")
            .timeout(LIMIT * 2)
            .output()
            .unwrap();
        (GoResult::parse(&out), started.elapsed())
    }
}

fn agent<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap()
}

fn shell<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["shells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

/// Doctor with no key: the CLI found, at a version in its preset's tested
/// range, every flag of the preset in its `--help` (`--deep`), and the
/// planner not ready, in the CLI's own terms.
fn doctor_says_not_logged_in(p: &RealProject, preset: &str, says: &str) {
    let (code, report, took) = p.doctor(&["--deep"]);
    assert!(took < LIMIT, "doctor took {took:?}");
    assert_eq!(code, Some(1), "{report:#}");
    let s = shell(&report, preset);
    assert_eq!(s["ok"], true, "{s:#}");
    assert_eq!(s["in_tested_range"], true, "{s:#}");
    assert_eq!(s["flags"]["unknown"], json!([]), "{s:#}");
    assert_eq!(s["flags"]["error"], Value::Null, "{s:#}");
    let cli = report["clis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == preset);
    assert!(
        cli.is_some_and(|c| c["shells"] == json!([preset])),
        "{report:#}"
    );
    let planner = agent(&report, "planner");
    assert_eq!(planner["ready"], false);
    let problem = planner["problems"][0].as_str().unwrap();
    assert!(problem.contains(says), "{problem}");
}

/// Go with no key: FAILED from PLANNING with `class` and the CLI's own
/// `reason`, within the limit, the same reason in `history --json`.
fn go_fails_with(p: &RealProject, class: &str, reason: &str) -> String {
    let epic = "Fix mean() in calc.py (modix-real-prompt-marker)";
    let (r, took) = p.go(epic);
    assert!(took < LIMIT, "go took {took:?}: {}", r.stderr);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    // A failure no retry can fix is caught to FAILED; the others go by the
    // emit rules (a process error: the plan is invalid, FAILED).
    let caught = ["auth", "not_found", "bad_invocation", "budget_exceeded"].contains(&class);
    let event = if caught {
        format!("catch:{class}")
    } else {
        "task_spec_invalid".to_owned()
    };
    assert_eq!(
        r.path()[1],
        format!("PLANNING -{event}-> FAILED"),
        "{}",
        r.stderr
    );
    let want = format!("agent failed ({class}): {reason}");
    let said = r.transitions[1]["reason"].as_str().unwrap();
    assert!(said.contains(&want), "{said}");
    let run = r.run_id();
    let out = p.modix(&["history", &run, "--json"]).output().unwrap();
    let history: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recorded = history["transitions"][1]["reason"].as_str().unwrap();
    assert!(recorded.contains(&want), "{recorded}");
    let n = history["transitions"][1]["invocation"].as_u64().unwrap() as u32;
    let inv = p.sb.invocation(&run, n);
    assert_eq!(inv["class"], class, "{inv}");
    assert!(inv["reason"].as_str().unwrap().contains(reason), "{inv}");
    nothing_left(p, &run, epic);
    run
}

/// No process of the run alive, no shell snapshot, and neither the prompt
/// nor an environment dump in HOME or TMPDIR.
fn nothing_left(p: &RealProject, run: &str, epic: &str) {
    let gone_by = Instant::now() + Duration::from_secs(5);
    while !processes_of(run).is_empty() && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        processes_of(run),
        Vec::<i32>::new(),
        "processes of run {run} left"
    );
    assert!(!p.home().join(".codex/shell_snapshots").exists());
    for dir in [p.home(), p.tmp()] {
        for file in files_under(&dir) {
            let text =
                String::from_utf8_lossy(&std::fs::read(&file).unwrap_or_default()).into_owned();
            for leak in [epic, "MODIX_RUN_ID", "declare -x"] {
                assert!(!text.contains(leak), "{} holds `{leak}`", file.display());
            }
        }
    }
}

/// Live (not zombie) processes whose environment carries this run's id:
/// every agent and anything it started gets MODIX_RUN_ID.
fn processes_of(run: &str) -> Vec<i32> {
    let needle = format!("MODIX_RUN_ID={run}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if !zombie && env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => out.push(path),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn real_claude_through_modix_without_a_key() {
    if find_cli("claude", "real_claude_through_modix_without_a_key").is_none() {
        return;
    }
    let p = RealProject::new(
        "claude",
        json!({"provider": "anthropic", "model": "sonnet", "api_key_env": "ANTHROPIC_API_KEY",
               "endpoint": closed_port_url(), "capabilities": ["json-output"]}),
    );
    doctor_says_not_logged_in(&p, "claude", "`claude auth status`: not logged in");
    go_fails_with(&p, "auth", "Not logged in · Please run /login");
}

#[test]
fn real_codex_through_modix_without_a_key() {
    if find_cli("codex", "real_codex_through_modix_without_a_key").is_none() {
        return;
    }
    let endpoint = format!("{}/v1", closed_port_url());
    let p = RealProject::new(
        "codex",
        json!({"provider": "openai", "model": "gpt-5-codex", "api_key_env": "OPENAI_API_KEY",
               "endpoint": endpoint, "capabilities": ["json-output"]}),
    );
    doctor_says_not_logged_in(&p, "codex", "`codex login status`: Not logged in");
    // Codex offline never fails by itself: its "waiting for network" line
    // (~10 s in) stops it, well before any wall clock.
    go_fails_with(&p, "network", "Reconnecting... waiting for network");
}

#[test]
fn real_gemini_through_modix_without_a_key() {
    if find_cli("gemini", "real_gemini_through_modix_without_a_key").is_none() {
        return;
    }
    let p = RealProject::new(
        "gemini",
        json!({"provider": "google", "model": "gemini-2.5-flash", "api_key_env": "GEMINI_API_KEY",
               "capabilities": ["json-output"]}),
    );
    doctor_says_not_logged_in(&p, "gemini", "no auth chosen in ~/.gemini/settings.json");
    go_fails_with(&p, "auth", "Please set an Auth method");
}

/// The shipped `claude` preset carried to DONE by a scripted model: the
/// planner answers a TaskSpec; the executor reads calc.py, fixes it with
/// Claude Code's own Edit tool and answers an ExecutionResult; the tester
/// runs the project's real test suite. No key, no network: the brain's
/// `endpoint` is the mock (the preset's ANTHROPIC_BASE_URL).
#[test]
fn real_claude_through_modix_to_done() {
    if find_cli("claude", "real_claude_through_modix_to_done").is_none() {
        return;
    }
    let plan = json!({"title": "Fix mean()", "summary": "Divide by len(values).", "complexity": "low",
        // Strict: every field present, `null` for the optional ones (modix
        // drops those nulls before it validates).
        "tasks": [{"id": "T1", "title": "Fix the divisor", "description": null,
                   "files": ["calc.py"], "acceptance": ["tests pass"]}]});
    let result = json!({"outcome": "success", "summary": "mean() divides by len(values).",
        "files_changed": ["calc.py"], "error": null});
    let mock = MockAnthropic::start(
        Script::new()
            .route(
                "You are the planner",
                // The preset passes the strict schema (--json-schema): the
                // answer comes through Claude Code's StructuredOutput tool.
                Script::new().tool("StructuredOutput", plan.clone()),
            )
            .route(
                "You are the executor",
                Script::new()
                    // Relative paths: Claude Code resolves them in its working
                    // directory, the run's workspace, wherever that is.
                    .tool("Read", json!({"file_path": "calc.py"}))
                    .tool(
                        "Edit",
                        json!({"file_path": "calc.py",
                        "old_string": "sum(values) / (len(values) + 1)",
                        "new_string": "sum(values) / len(values)"}),
                    )
                    .tool("StructuredOutput", result.clone()),
            )
            .time_limit(LIMIT * 2),
    );
    let p = RealProject::new(
        "claude",
        json!({"provider": "anthropic", "model": "sonnet", "api_key_env": "ANTHROPIC_API_KEY",
               "endpoint": mock.url(), "params": {"max_turns": 10},
               "capabilities": ["json-output", "code-edit"]}),
    );
    p.sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["executor"]["shell"] = "claude".into();
        v["agents"]["executor"]["brain"] = "real".into();
    });
    let before = p.sb.read("calc.py");
    let mut cmd = p.modix(&["go", "--json", "Fix mean() in calc.py"]);
    cmd.env("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY)
        // Through the preset's `env`, not the allowlist: no telemetry or
        // error reports from a test, and root may run it in a sandbox.
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .timeout(LIMIT * 2);
    if is_root() {
        cmd.env("IS_SANDBOX", "1");
    }
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}\n{:#?}", r.stderr, mock.requests());
    assert!(started.elapsed() < LIMIT, "{:?}", started.elapsed());
    assert_eq!(
        r.path(),
        [
            "INIT -epic_received-> PLANNING",
            "PLANNING -task_spec_valid-> EXECUTING",
            "EXECUTING -execution_done-> TESTING",
            "TESTING -tests_pass-> DONE",
        ]
    );

    // The fix is on disk in the run's workspace, made by Claude Code's Edit.
    let run = r.run_id();
    let out = p.modix(&["history", &run, "--json"]).output().unwrap();
    let history: Value = serde_json::from_slice(&out.stdout).unwrap();
    let workdir = PathBuf::from(history["run"]["workdir"].as_str().unwrap());
    let fixed = std::fs::read_to_string(workdir.join("calc.py")).unwrap();
    assert!(
        fixed.contains("return sum(values) / len(values)\n"),
        "{fixed}"
    );
    assert_eq!(p.sb.read("calc.py"), before, "the run works on its copy");
    let reqs = mock.messages_requests();
    let edit = reqs
        .iter()
        .find(|q| q.tool_results() == 2)
        .expect("the Edit's result went back");
    assert!(
        !edit.body["messages"]
            .to_string()
            .contains("\"is_error\":true"),
        "{:#}",
        edit.body
    );
    assert_eq!(
        reqs.len(),
        4,
        "1 planner turn + 3 executor turns: {reqs:#?}"
    );
    // Each agent was offered its schema as Claude Code's StructuredOutput tool.
    for q in &reqs {
        assert!(
            q.body["tools"].to_string().contains("StructuredOutput"),
            "{:#}",
            q.body["tools"]
        );
    }
    assert!(
        reqs.iter()
            .all(|q| q.headers["x-api-key"] == FAKE_ANTHROPIC_KEY)
    );

    // What it used is on record, parsed from Claude Code's own totals in its
    // result line (the executor: 3 requests of the mock's 100 in / 10 out;
    // Claude Code counts the StructuredOutput answer as a turn of its own).
    let executor = p.sb.invocation(&run, 2);
    assert_eq!(executor["agent"], "executor");
    let usage = &executor["usage"];
    assert_eq!(usage["turns"], 4, "{usage}");
    assert_eq!(usage["output_tokens"], 3 * OUTPUT_TOKENS);
    assert_eq!(usage["input_tokens"], 3 * INPUT_TOKENS);
    assert!(
        usage["cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "{usage}"
    );
    assert!(usage["session_id"].is_string(), "{usage}");
    assert_eq!(executor["parsed_output"], result);
    // The run's total: the planner's one request and the executor's three,
    // as history and go's summary say it.
    let total = &history["usage"];
    assert_eq!(total["input_tokens"], 4 * INPUT_TOKENS, "{total}");
    assert_eq!(total["output_tokens"], 4 * OUTPUT_TOKENS, "{total}");
    assert_eq!(total["invocations"], 2, "{total}");
    assert_eq!(r.summary["usage"], *total);
    nothing_left(&p, &run, "Fix mean() in calc.py");
}

/// Gemini with a (fake) key and no network retries for ~4 minutes on its
/// own; modix stops it at its first retry line (its network rule), so it
/// never writes its error report, which holds the prompt and the
/// workspace's listing, to `$TMPDIR/gemini-client-error-*.json`. (It does
/// keep the prompt in `~/.gemini/tmp/<project>/chats/`, as every run does:
/// 0.61 has no switch for that.)
#[test]
fn real_gemini_through_modix_with_a_key_and_no_network() {
    if find_cli(
        "gemini",
        "real_gemini_through_modix_with_a_key_and_no_network",
    )
    .is_none()
    {
        return;
    }
    let p = RealProject::new(
        "gemini",
        json!({"provider": "google", "model": "gemini-2.5-flash", "api_key_env": "GEMINI_API_KEY",
               "endpoint": closed_port_url(), "capabilities": ["json-output"]}),
    );
    // A base URL alone makes Gemini choose "gateway" auth, which it refuses
    // headless; key auth must be chosen in its settings.
    p.sb.write(
        "../home/.gemini/settings.json",
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    );
    let started = Instant::now();
    let out = p
        .modix(&["go", "--json", "Fix mean() (modix-real-prompt-marker)"])
        .env("GEMINI_API_KEY", "AIzaFAKE-modix-test-0000000000000000")
        .timeout(LIMIT * 2)
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert!(started.elapsed() < LIMIT, "{:?}", started.elapsed());
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let reason = r.transitions[1]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("agent failed (network): Attempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed"),
        "{reason}"
    );
    let run = r.run_id();
    assert_eq!(processes_of(&run), Vec::<i32>::new());
    // Give a process that is not there any more no chance to write late.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(files_under(&p.tmp()), Vec::<PathBuf>::new());
}
