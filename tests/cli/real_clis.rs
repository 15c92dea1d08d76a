//! Tests against the real agent CLIs (Claude Code, Codex, Gemini), installed by
//! `.ci/agent-clis/install.sh` into `.ci/agent-clis/node_modules/.bin/` (or found in
//! the directory named by `MODIX_AGENT_CLIS_BIN`). No key and no model network:
//! Claude Code and Codex are pointed at [`MockAnthropic`] (Anthropic Messages and OpenAI
//! Responses flavours); all three are also run into their no-key failures. The facts
//! asserted here are written up in docs/agent-clis-observed.md.
//!
//! When the CLIs are not installed each test prints why it is skipped (straight to
//! stderr, so it shows even when the harness captures output) and returns; with
//! `MODIX_REQUIRE_AGENT_CLIS=1` a missing CLI is a failure instead. When a CLI is
//! installed, its test runs and must pass: never a silent pass.
//!
//! `MODIX_AGENT_CLIS_RECORD=1` also writes each run's stdout/stderr/meta under
//! tests/fixtures/agent-clis/mock-*/ (to refresh the captures the doc quotes).
//!
//! Every child runs in its own process group with a scratch HOME/TMPDIR and an
//! environment built from nothing (`env_clear`), is killed as a group at its time
//! limit, and the test checks that no process of the group is left.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::mock_anthropic::{ApiError, MockAnthropic, OUTPUT_TOKENS, Script};

pub(crate) const FAKE_ANTHROPIC_KEY: &str = "sk-ant-api03-FAKE-modix-test-0000000000";

/// Where the CLIs are: `MODIX_AGENT_CLIS_BIN`, else `<repo>/.ci/agent-clis/node_modules/.bin`.
pub(crate) fn bin_dir() -> PathBuf {
    match std::env::var_os("MODIX_AGENT_CLIS_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/agent-clis/node_modules/.bin"),
    }
}

/// The CLI's path, or `None` after printing why the test is skipped.
pub(crate) fn find_cli(name: &str, test: &str) -> Option<PathBuf> {
    let path = bin_dir().join(name);
    if path.is_file() {
        return Some(path);
    }
    let why = format!(
        "{test}: SKIPPED, real `{name}` not installed at {} \
         (run .ci/agent-clis/install.sh, which needs npm, or set MODIX_AGENT_CLIS_BIN)",
        path.display()
    );
    if std::env::var_os("MODIX_REQUIRE_AGENT_CLIS").is_some_and(|v| v == "1") {
        panic!("{why}; MODIX_REQUIRE_AGENT_CLIS=1 makes this a failure");
    }
    // Straight to the process's stderr: libtest captures only print!/eprint!.
    let _ = writeln!(std::io::stderr(), "{why}");
    None
}

/// A scratch HOME, TMPDIR and working directory, removed on drop.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["home", "tmp", "work"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        Scratch { dir }
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `cli ARGS` in `work/` with only these variables (plus PATH, HOME, TMPDIR, LANG).
    fn command(&self, cli: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(cli);
        // The CLIs' own bin dir first (node wrappers find their siblings), then the host's
        // PATH for `node`; nothing else of the host's environment (no keys) reaches them.
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
        );
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("TMPDIR", self.tmp())
            .env("LANG", "C.UTF-8")
            .current_dir(self.work())
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }
}

/// What a bounded run produced.
#[derive(Debug)]
struct Outcome {
    /// `None` when killed (by us at the time limit, or by a signal).
    code: Option<i32>,
    timed_out: bool,
    elapsed: Duration,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// stdout as JSON lines; panics (with the output) on a line that is not JSON.
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}\n{self:#?}"))
            })
            .collect()
    }

    fn record(&self, name: &str) {
        if std::env::var_os("MODIX_AGENT_CLIS_RECORD").is_none_or(|v| v != "1") {
            return;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agent-clis")
            .join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("stdout.txt"), &self.stdout).expect("write");
        std::fs::write(dir.join("stderr.txt"), &self.stderr).expect("write");
        std::fs::write(
            dir.join("meta.txt"),
            format!(
                "exit_code: {:?}\ntimed_out: {}\nwall_seconds: {:.1}\n",
                self.code,
                self.timed_out,
                self.elapsed.as_secs_f64()
            ),
        )
        .expect("write");
    }
}

/// Processes (not zombies) whose process group is `pgid`, from /proc. Zombies are
/// ignored: a container's init may reap them late, and they hold no resources.
pub(crate) fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name (which may hold spaces): state ppid pgrp …
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

/// Runs `cmd` in its own process group with `stdin` as input; kills the group at
/// `limit`, then (whatever happened) kills what is left of the group and asserts
/// that nothing of it survives.
fn run_bounded(mut cmd: Command, stdin: &str, limit: Duration) -> Outcome {
    cmd.process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn the CLI");
    let pgid = Pid::from_raw(child.id() as i32);

    // Readers and the writer on threads, so a full pipe never blocks the wait loop.
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    for (is_err, mut src) in [
        (
            false,
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        ),
        (true, Box::new(child.stderr.take().unwrap())),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = src.read_to_end(&mut buf);
            let _ = tx.send((is_err, String::from_utf8_lossy(&buf).into_owned()));
        });
    }
    drop(tx);
    let mut input = child.stdin.take().unwrap();
    let prompt = stdin.to_owned();
    std::thread::spawn(move || {
        let _ = input.write_all(prompt.as_bytes());
    });

    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() >= limit {
            timed_out = true;
            let _ = killpg(pgid, Signal::SIGKILL);
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    // The leader is gone; children it left in the group go too (ESRCH when none).
    let _ = killpg(pgid, Signal::SIGKILL);

    let (mut stdout, mut stderr) = (String::new(), String::new());
    let read_deadline = Instant::now() + Duration::from_secs(5);
    for _ in 0..2 {
        let left = read_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((false, s)) => stdout = s,
            Ok((true, s)) => stderr = s,
            // A process outside the group still holds a pipe: report what we have.
            Err(_) => break,
        }
    }

    let gone_by = Instant::now() + Duration::from_secs(5);
    while !live_group_members(pgid.as_raw()).is_empty() && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = live_group_members(pgid.as_raw());
    assert!(
        left.is_empty(),
        "processes of group {pgid} still alive after SIGKILL: {left:?}"
    );
    Outcome {
        code: status.and_then(|s| s.code()),
        timed_out,
        elapsed,
        stdout,
        stderr,
    }
}

/// Running as root? Claude Code refuses `bypassPermissions` for root unless IS_SANDBOX=1;
/// `acceptEdits` was observed to work without it, the variable is set for root anyway so a
/// test switching modes does not trip on it.
pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The headless flags a modix preset gives Claude Code.
fn claude_args(permission_mode: &str) -> Vec<&str> {
    vec![
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "sonnet",
        "--permission-mode",
        permission_mode,
        "--no-session-persistence",
    ]
}

/// Claude Code against the mock: fake key, `retries` as its own retry bound
/// (`CLAUDE_CODE_MAX_RETRIES`), nothing but the mock to talk to.
fn claude_against(
    scratch: &Scratch,
    claude: &Path,
    mock: &MockAnthropic,
    retries: &str,
) -> Command {
    let url = mock.url();
    let mut env = vec![
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY),
        ("CLAUDE_CODE_MAX_RETRIES", retries),
        // No telemetry, error reports, update checks or other side traffic.
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
    ];
    if is_root() {
        env.push(("IS_SANDBOX", "1"));
    }
    scratch.command(claude, &claude_args("acceptEdits"), &env)
}

/// The last stdout line, which must be Claude Code's `result` event.
fn claude_result(out: &Outcome) -> Value {
    let lines = out.json_lines();
    let last = lines.last().cloned().unwrap_or(Value::Null);
    assert_eq!(
        last["type"], "result",
        "last line is not the result: {out:#?}"
    );
    last
}

const BUGGY: &str = "def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n";
const FIXED: &str = "def mean(xs):\n    return sum(xs) / len(xs)\n";

/// Test A: the mock scripts Read → Edit → final text, and the real Claude Code's own
/// Edit tool fixes the file on disk.
#[test]
fn real_claude_edits_a_file_driven_by_the_mock() {
    let Some(claude) = find_cli("claude", "real_claude_edits_a_file_driven_by_the_mock") else {
        return;
    };
    let scratch = Scratch::new();
    let file = scratch.work().join("calc.py");
    std::fs::write(&file, BUGGY).expect("write");
    let file_path = file.to_str().expect("utf-8 path");
    let final_text = "Fixed the off-by-one in mean().\n{\"fixed\": true, \"file\": \"calc.py\"}";
    let mock = MockAnthropic::start(
        Script::new()
            .tool("Read", json!({"file_path": file_path}))
            .tool(
                "Edit",
                json!({
                    "file_path": file_path,
                    "old_string": "sum(xs) / (len(xs) - 1)",
                    "new_string": "sum(xs) / len(xs)",
                }),
            )
            .text(final_text)
            .time_limit(Duration::from_secs(60)),
    );

    let out = run_bounded(
        claude_against(&scratch, &claude, &mock, "0"),
        "Fix mean() in calc.py",
        Duration::from_secs(60),
    );
    out.record("mock-edit");

    assert_eq!(
        out.code,
        Some(0),
        "{out:#?}\nrequests: {:#?}",
        mock.requests()
    );
    assert_eq!(std::fs::read_to_string(&file).expect("read"), FIXED);

    let lines = out.json_lines();
    assert_eq!(lines[0]["type"], "system");
    assert_eq!(lines[0]["subtype"], "init");
    // Both tool calls ran and neither was refused.
    let tool_results: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "user")
        .flat_map(|l| l["message"]["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(tool_results.len(), 2, "{out:#?}");
    for r in &tool_results {
        assert_ne!(r["is_error"], true, "a tool call failed: {r}");
    }

    let result = claude_result(&out);
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], final_text);
    assert_eq!(result["num_turns"], 3);
    // Usage is summed over the three answers the mock gave.
    assert_eq!(result["usage"]["output_tokens"], 3 * OUTPUT_TOKENS);
    assert!(result["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0);
    assert!(result["total_cost_usd"].as_f64().is_some());

    // The CLI's traffic: the connectivity probe, then one streaming POST per turn.
    let reqs = mock.requests();
    assert_eq!(reqs[0].method, "HEAD", "{reqs:#?}");
    let msgs = mock.messages_requests();
    assert_eq!(msgs.len(), 3);
    for (turn, r) in msgs.iter().enumerate() {
        assert_eq!(r.tool_results(), turn);
        assert_eq!(r.headers["x-api-key"], FAKE_ANTHROPIC_KEY);
        assert_eq!(r.body["stream"], true);
        // The alias `sonnet` goes out as a full model name.
        let model = r.body["model"].as_str().unwrap_or_default();
        assert!(model.starts_with("claude-"), "{model}");
    }
    assert!(
        reqs.iter().all(|r| r.method == "HEAD" || r.is_messages()),
        "unexpected traffic: {reqs:#?}"
    );
}

/// Test C: what Claude Code does when the API answers with an error status.
fn claude_against_error(err: ApiError, retries: &str, record: &str) -> (Outcome, MockAnthropic) {
    let claude = bin_dir().join("claude");
    let scratch = Scratch::new();
    let mock = MockAnthropic::start(
        Script::error(err)
            .max_requests(20)
            .time_limit(Duration::from_secs(30)),
    );
    let out = run_bounded(
        claude_against(&scratch, &claude, &mock, retries),
        "Say hi",
        Duration::from_secs(30),
    );
    out.record(record);
    (out, mock)
}

/// The `error` fields of assistant events, and the `api_retry` events.
fn claude_errors(out: &Outcome) -> (Vec<String>, Vec<Value>) {
    let lines = out.json_lines();
    let errors = lines
        .iter()
        .filter(|l| l["type"] == "assistant")
        .filter_map(|l| l["error"].as_str().map(str::to_owned))
        .collect();
    let retries = lines
        .iter()
        .filter(|l| l["type"] == "system" && l["subtype"] == "api_retry")
        .cloned()
        .collect();
    (errors, retries)
}

#[test]
fn real_claude_reports_overloaded_529() {
    if find_cli("claude", "real_claude_reports_overloaded_529").is_none() {
        return;
    }
    // One retry allowed, so the stream shows an `api_retry` event before the failure.
    let (out, mock) = claude_against_error(ApiError::Overloaded, "1", "mock-529");
    assert_eq!(out.code, Some(1), "{out:#?}");
    let (errors, retries) = claude_errors(&out);
    assert_eq!(retries.len(), 1, "{out:#?}");
    assert_eq!(retries[0]["error_status"], 529);
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["max_retries"], 1);
    assert!(retries[0]["retry_delay_ms"].as_f64().is_some());
    assert_eq!(errors, ["server_error"], "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 529);
    let text = result["result"].as_str().unwrap_or_default();
    assert!(text.contains("Overloaded"), "{text}");
    assert_eq!(mock.messages_requests().len(), 2);
    assert!(out.stderr.trim().is_empty(), "{}", out.stderr);
}

#[test]
fn real_claude_reports_rate_limit_429() {
    if find_cli("claude", "real_claude_reports_rate_limit_429").is_none() {
        return;
    }
    // One retry, to see whether the `retry-after` header sets the delay.
    let (out, mock) = claude_against_error(
        ApiError::RateLimited {
            retry_after_secs: 2,
        },
        "1",
        "mock-429",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let (errors, retries) = claude_errors(&out);
    assert_eq!(retries.len(), 1, "{out:#?}");
    assert_eq!(retries[0]["error_status"], 429);
    assert_eq!(errors, ["rate_limit"], "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 429);
    assert_eq!(mock.messages_requests().len(), 2);
}

#[test]
fn real_claude_reports_model_not_found_404() {
    if find_cli("claude", "real_claude_reports_model_not_found_404").is_none() {
        return;
    }
    let (out, mock) = claude_against_error(
        ApiError::Other {
            status: 404,
            kind: "not_found_error".into(),
            message: "model: claude-sonnet-5".into(),
        },
        "0",
        "mock-404",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let (errors, retries) = claude_errors(&out);
    assert!(retries.is_empty(), "{out:#?}");
    assert_eq!(errors, ["model_not_found"], "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 404);
    // A 404 on the streaming request is retried once without streaming (no `stream`
    // field), even with CLAUDE_CODE_MAX_RETRIES=0, before it gives up.
    let reqs = mock.messages_requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(reqs[0].body["stream"], true);
    assert_eq!(reqs[1].body["stream"], Value::Null);
}

#[test]
fn real_claude_reports_unauthorized_401() {
    if find_cli("claude", "real_claude_reports_unauthorized_401").is_none() {
        return;
    }
    let (out, mock) = claude_against_error(ApiError::Unauthorized, "0", "mock-401");
    assert_eq!(out.code, Some(1), "{out:#?}");
    let (errors, retries) = claude_errors(&out);
    assert!(retries.is_empty(), "{out:#?}");
    assert_eq!(errors, ["authentication_failed"], "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 401);
    assert_eq!(mock.messages_requests().len(), 1);
}

/// A retried 529 that then succeeds: `api_retry` events are not failures by themselves.
#[test]
fn real_claude_recovers_after_one_529() {
    if find_cli("claude", "real_claude_recovers_after_one_529").is_none() {
        return;
    }
    let claude = bin_dir().join("claude");
    let scratch = Scratch::new();
    let mock = MockAnthropic::start(
        Script::new()
            .text("hello after a retry")
            .fail_first(1, ApiError::Overloaded)
            .time_limit(Duration::from_secs(30)),
    );
    let out = run_bounded(
        claude_against(&scratch, &claude, &mock, "2"),
        "Say hi",
        Duration::from_secs(30),
    );
    out.record("mock-529-then-ok");
    assert_eq!(out.code, Some(0), "{out:#?}");
    let (errors, retries) = claude_errors(&out);
    assert_eq!(retries.len(), 1, "{out:#?}");
    assert_eq!(retries[0]["error_status"], 529);
    assert!(errors.is_empty(), "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "hello after a retry");
}

/// Test B, Claude Code: no key → exit 1 within seconds, reason on stdout in the stream.
#[test]
fn real_claude_without_key_fails_fast() {
    let Some(claude) = find_cli("claude", "real_claude_without_key_fails_fast") else {
        return;
    };
    let scratch = Scratch::new();
    // A closed local port, so that nothing could reach Anthropic even on a machine with network.
    let nowhere = closed_port_url();
    let cmd = scratch.command(
        &claude,
        &claude_args("plan"),
        &[
            ("ANTHROPIC_BASE_URL", nowhere.as_str()),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
        ],
    );
    let out = run_bounded(cmd, "Say hi", Duration::from_secs(30));
    out.record("test-claude-nokey");
    assert!(!out.timed_out, "{out:#?}");
    assert_eq!(out.code, Some(1), "{out:#?}");
    let (errors, _) = claude_errors(&out);
    assert_eq!(errors, ["authentication_failed"], "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], true);
    // Not `error_*`: an API failure still says "success"; judge by is_error and the exit code.
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["result"], "Not logged in · Please run /login");
    assert!(out.stderr.trim().is_empty(), "{}", out.stderr);
}

/// Test B, Gemini: no key → exit 41 (FATAL_AUTHENTICATION_ERROR) within seconds; with
/// `-o stream-json` the reason is one plain-text line on stderr and stdout is empty.
#[test]
fn real_gemini_without_key_fails_fast() {
    let Some(gemini) = find_cli("gemini", "real_gemini_without_key_fails_fast") else {
        return;
    };
    let scratch = Scratch::new();
    let cmd = scratch.command(
        &gemini,
        &[
            "-o",
            "stream-json",
            "-m",
            "gemini-2.5-flash",
            "--skip-trust",
            "--approval-mode",
            "plan",
        ],
        &[],
    );
    let out = run_bounded(cmd, "Say hi", Duration::from_secs(30));
    out.record("test-gemini-nokey");
    assert!(!out.timed_out, "{out:#?}");
    assert_eq!(out.code, Some(41), "{out:#?}");
    assert_eq!(out.stdout, "", "{out:#?}");
    assert!(
        out.stderr.contains("Please set an Auth method"),
        "{}",
        out.stderr
    );
}

/// `http://127.0.0.1:PORT` where nothing listens (bound, then released).
pub(crate) fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// Test B, Codex: with no key and no reachable API it never fails by itself; it keeps
/// emitting non-final `type:"error"` "Reconnecting…" events (gaps growing to ~63 s).
/// modix must bound it with its own wall-clock timeout. The test gives it 12 s, checks
/// it is still going and that the group kill cleans up. Its endpoint is a closed local
/// port rather than the default one (which behaves the same offline, observe.sh shows),
/// so that on a machine with network the test neither reaches OpenAI nor changes meaning.
#[test]
fn real_codex_without_key_never_fails_by_itself() {
    let Some(codex) = find_cli("codex", "real_codex_without_key_never_fails_by_itself") else {
        return;
    };
    let scratch = Scratch::new();
    let work = scratch.work();
    let base_url = format!("openai_base_url=\"{}/v1\"", closed_port_url());
    let cmd = scratch.command(
        &codex,
        &[
            "exec",
            "--disable",
            "shell_snapshot",
            "-c",
            &base_url,
            "--json",
            "--skip-git-repo-check",
            "-C",
            work.to_str().expect("utf-8"),
            "-m",
            "gpt-5-codex",
            "-s",
            "read-only",
            "--ephemeral",
            "-",
        ],
        &[],
    );
    let out = run_bounded(cmd, "Say hi", Duration::from_secs(12));
    out.record("test-codex-nokey");
    assert!(out.timed_out, "Codex ended by itself: {out:#?}");
    let lines = out.json_lines();
    assert_eq!(lines[0]["type"], "thread.started", "{out:#?}");
    assert!(lines.iter().any(|l| l["type"] == "turn.started"));
    let reconnecting = lines
        .iter()
        .filter(|l| l["type"] == "error")
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Reconnecting..."))
        })
        .count();
    assert!(reconnecting >= 1, "{out:#?}");
    // Nothing final: no turn.failed / turn.completed.
    assert!(
        lines
            .iter()
            .all(|l| l["type"] != "turn.failed" && l["type"] != "turn.completed"),
        "{out:#?}"
    );
    // `--disable shell_snapshot`: no copy of the environment left on disk.
    assert!(!scratch.home().join(".codex/shell_snapshots").exists());
}

const FAKE_CODEX_KEY: &str = "sk-proj-FAKE-modix-test-0000000000";

/// `codex exec` as a modix preset runs it, pointed at the mock through a custom provider:
/// a custom provider makes no WebSocket attempt (the built-in one makes five, ~6 s, before
/// falling back to HTTPS) and takes its retry bounds from config. Codex 0.169 ignores
/// `OPENAI_BASE_URL` and sends no key from `OPENAI_API_KEY` with its built-in provider;
/// `env_key` names the variable the custom provider reads.
fn codex_against(scratch: &Scratch, codex: &Path, mock: &MockAnthropic) -> Command {
    let work = scratch.work();
    let base_url = format!("model_providers.mock.base_url=\"{}/v1\"", mock.url());
    let args = [
        "exec",
        // Otherwise ~/.codex/shell_snapshots/*.sh keeps every variable, keys included.
        "--disable",
        "shell_snapshot",
        "-c",
        "model_provider=mock",
        "-c",
        "model_providers.mock.name=mock",
        "-c",
        &base_url,
        "-c",
        "model_providers.mock.env_key=CODEX_API_KEY",
        "-c",
        "model_providers.mock.wire_api=responses",
        // HTTP errors are retried 5 times by default (a 500 took ~25 s); connection
        // failures are retried forever whatever these say.
        "-c",
        "model_providers.mock.request_max_retries=0",
        "-c",
        "model_providers.mock.stream_max_retries=0",
        "--json",
        "--skip-git-repo-check",
        "-C",
        work.to_str().expect("utf-8"),
        "-m",
        "gpt-5-codex",
        "-s",
        "read-only",
        "--ephemeral",
        "-",
    ];
    scratch.command(codex, &args, &[("CODEX_API_KEY", FAKE_CODEX_KEY)])
}

/// Stretch: the real `codex exec` driven by the mock (Responses API) to a final agent_message.
#[test]
fn real_codex_answers_from_the_mock() {
    let Some(codex) = find_cli("codex", "real_codex_answers_from_the_mock") else {
        return;
    };
    let scratch = Scratch::new();
    let answer = "All good.\n{\"ok\": true}";
    let mock = MockAnthropic::start(
        Script::openai()
            .text(answer)
            .time_limit(Duration::from_secs(30)),
    );
    let out = run_bounded(
        codex_against(&scratch, &codex, &mock),
        "Say hi",
        Duration::from_secs(30),
    );
    out.record("mock-codex-text");
    assert_eq!(out.code, Some(0), "{out:#?}\n{:#?}", mock.requests());
    let lines = out.json_lines();
    assert_eq!(lines[0]["type"], "thread.started");
    let messages: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "item.completed" && l["item"]["type"] == "agent_message")
        .collect();
    assert_eq!(messages.len(), 1, "{out:#?}");
    assert_eq!(messages[0]["item"]["text"], answer);
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn.completed", "{out:#?}");
    assert_eq!(
        last["usage"]["input_tokens"],
        crate::mock_anthropic::INPUT_TOKENS
    );
    assert_eq!(last["usage"]["output_tokens"], OUTPUT_TOKENS);
    assert!(lines.iter().all(|l| l["type"] != "error"), "{out:#?}");

    let reqs = mock.responses_requests();
    assert_eq!(reqs.len(), 1, "{:#?}", mock.requests());
    assert_eq!(
        reqs[0].headers["authorization"],
        format!("Bearer {FAKE_CODEX_KEY}")
    );
    assert_eq!(reqs[0].body["model"], "gpt-5-codex");
    assert_eq!(reqs[0].body["stream"], true);
    assert!(!scratch.home().join(".codex/shell_snapshots").exists());
}

/// What `codex exec` prints when the API answers an error (retries off).
fn codex_against_error(err: ApiError, record: &str) -> (Outcome, MockAnthropic) {
    let codex = bin_dir().join("codex");
    let scratch = Scratch::new();
    let mock = MockAnthropic::start(
        Script::openai()
            .always(err)
            .max_requests(20)
            .time_limit(Duration::from_secs(30)),
    );
    let out = run_bounded(
        codex_against(&scratch, &codex, &mock),
        "Say hi",
        Duration::from_secs(30),
    );
    out.record(record);
    (out, mock)
}

/// The final failure: the last two lines are `error` then `turn.failed`, with the same message.
fn codex_failure(out: &Outcome) -> String {
    let lines = out.json_lines();
    let n = lines.len();
    assert!(n >= 2, "{out:#?}");
    assert_eq!(lines[n - 1]["type"], "turn.failed", "{out:#?}");
    assert_eq!(lines[n - 2]["type"], "error", "{out:#?}");
    let message = lines[n - 1]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(lines[n - 2]["message"], message.as_str());
    message
}

#[test]
fn real_codex_reports_unauthorized_401() {
    if find_cli("codex", "real_codex_reports_unauthorized_401").is_none() {
        return;
    }
    let (out, mock) = codex_against_error(ApiError::Unauthorized, "mock-codex-401");
    assert_eq!(out.code, Some(1), "{out:#?}");
    let message = codex_failure(&out);
    assert!(
        message.starts_with("unexpected status 401 Unauthorized: invalid x-api-key"),
        "{message}"
    );
    assert_eq!(mock.responses_requests().len(), 1);
}

#[test]
fn real_codex_reports_server_error_500() {
    if find_cli("codex", "real_codex_reports_server_error_500").is_none() {
        return;
    }
    let (out, mock) = codex_against_error(
        ApiError::Other {
            status: 500,
            kind: "server_error".into(),
            message: "The server had an error while processing your request.".into(),
        },
        "mock-codex-500",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    // The server's message is replaced by Codex's own.
    let message = codex_failure(&out);
    assert!(message.contains("high demand"), "{message}");
    assert_eq!(mock.responses_requests().len(), 1);
}

#[test]
fn real_codex_reports_rate_limit_429() {
    if find_cli("codex", "real_codex_reports_rate_limit_429").is_none() {
        return;
    }
    let (out, _mock) = codex_against_error(
        ApiError::RateLimited {
            retry_after_secs: 1,
        },
        "mock-codex-429",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let message = codex_failure(&out);
    assert_eq!(
        message,
        "exceeded retry limit, last status: 429 Too Many Requests"
    );
}

#[test]
fn real_codex_reports_bad_request_400() {
    if find_cli("codex", "real_codex_reports_bad_request_400").is_none() {
        return;
    }
    let model_gone = "The model `gpt-x` does not exist or you do not have access to it.";
    // `error.code: model_not_found`: the server's message alone.
    let (out, mock) = codex_against_error(
        ApiError::Other {
            status: 400,
            kind: "model_not_found".into(),
            message: model_gone.into(),
        },
        "mock-codex-400-model",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert_eq!(codex_failure(&out), model_gone);
    assert_eq!(mock.responses_requests().len(), 1);

    // Any other 400: the raw response body as the message.
    let (out, _mock) = codex_against_error(
        ApiError::Other {
            status: 400,
            kind: "invalid_request_error".into(),
            message: "Invalid value for 'input'.".into(),
        },
        "mock-codex-400-other",
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    let message = codex_failure(&out);
    let body: Value = serde_json::from_str(&message).expect("the raw JSON body");
    assert_eq!(body["error"]["message"], "Invalid value for 'input'.");
}

/// Stretch: a Codex tool call (its `exec_command`) scripted by the mock, then the answer.
#[test]
fn real_codex_runs_a_scripted_command() {
    let Some(codex) = find_cli("codex", "real_codex_runs_a_scripted_command") else {
        return;
    };
    let scratch = Scratch::new();
    std::fs::write(scratch.work().join("calc.py"), BUGGY).expect("write");
    // Running a command makes Codex create /tmp/codex-daemon-<uid>/ (ignoring TMPDIR) and
    // leave it. Remove it afterwards if this test made it and it is still empty
    // (remove_dir refuses a non-empty one, so a real Codex's files are never touched).
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    let daemon_dir = PathBuf::from(format!("/tmp/codex-daemon-{uid}"));
    let made_daemon_dir = !daemon_dir.exists();
    let mock = MockAnthropic::start(
        Script::openai()
            .tool("exec_command", json!({"cmd": "cat calc.py"}))
            .text("read it")
            .time_limit(Duration::from_secs(30)),
    );
    let out = run_bounded(
        codex_against(&scratch, &codex, &mock),
        "Show calc.py",
        Duration::from_secs(30),
    );
    out.record("mock-codex-tool");
    if made_daemon_dir {
        let _ = std::fs::remove_dir(&daemon_dir);
    }
    assert_eq!(out.code, Some(0), "{out:#?}\n{:#?}", mock.requests());
    let reqs = mock.responses_requests();
    assert_eq!(reqs.len(), 2, "{out:#?}");
    let output = reqs[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .cloned()
        .unwrap_or_default();
    assert!(output.to_string().contains("len(xs) - 1"), "{output:#}");

    // The stream shows the command (run through a login shell) with its output and exit code.
    let lines = out.json_lines();
    let ran = lines
        .iter()
        .find(|l| l["type"] == "item.completed" && l["item"]["type"] == "command_execution")
        .unwrap_or_else(|| panic!("no command_execution: {out:#?}"));
    assert_eq!(ran["item"]["command"], "/bin/bash -lc 'cat calc.py'");
    assert_eq!(ran["item"]["exit_code"], 0);
    assert_eq!(ran["item"]["aggregated_output"], BUGGY);
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn.completed");
    // Usage is summed over the two answers.
    assert_eq!(last["usage"]["output_tokens"], 2 * OUTPUT_TOKENS);
}

/// A TaskSpec schema as Claude Code's `--json-schema` gets it, with or
/// without a draft 2020-12 `$schema` (modix's schema files have one).
fn task_spec_schema(with_dollar_schema: bool) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/task_spec.schema.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    if !with_dollar_schema {
        v.as_object_mut().unwrap().remove("$schema");
    }
    v.to_string()
}

const TASK_SPEC_ANSWER: &str = r#"{"title": "Fix mean", "summary": "s", "complexity": "low", "tasks": [{"id": "T1", "title": "t", "files": ["calc.py"], "acceptance": ["tests pass"]}]}"#;

/// Claude Code with `--json-schema` against the mock's `turns`.
fn claude_with_schema(schema: &str, script: Script) -> (Outcome, MockAnthropic) {
    let claude = bin_dir().join("claude");
    let scratch = Scratch::new();
    let mock = MockAnthropic::start(script.time_limit(Duration::from_secs(30)));
    let mut cmd = claude_against(&scratch, &claude, &mock, "0");
    cmd.args(["--json-schema", schema]);
    let out = run_bounded(cmd, "Plan it", Duration::from_secs(30));
    (out, mock)
}

/// `--json-schema` adds a StructuredOutput tool whose input Claude Code
/// validates: a valid call ends the turn at once, the object in the result's
/// `structured_output` and its JSON text in `result`.
#[test]
fn real_claude_json_schema_answers_through_its_structured_output_tool() {
    if find_cli(
        "claude",
        "real_claude_json_schema_answers_through_its_structured_output_tool",
    )
    .is_none()
    {
        return;
    }
    let answer: Value = serde_json::from_str(TASK_SPEC_ANSWER).unwrap();
    let (out, mock) = claude_with_schema(
        &task_spec_schema(false),
        Script::new()
            .tool("StructuredOutput", answer.clone())
            .text("unused"),
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["structured_output"], answer);
    let text: Value = serde_json::from_str(result["result"].as_str().unwrap()).unwrap();
    assert_eq!(text, answer);
    let reqs = mock.messages_requests();
    assert_eq!(reqs.len(), 1, "no turn after the structured answer");
    let tool = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "StructuredOutput")
        .cloned();
    assert!(tool.is_some_and(|t| t["input_schema"]["required"].is_array()));

    // A text answer: Claude Code asks once more ("[structured-output-enforce]"),
    // then gives up and returns the text as the result, is_error false.
    let (out, mock) = claude_with_schema(
        &task_spec_schema(false),
        Script::new().text(TASK_SPEC_ANSWER),
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let result = claude_result(&out);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], TASK_SPEC_ANSWER);
    assert_eq!(result["structured_output"], Value::Null);
    assert_eq!(mock.messages_requests().len(), 2);
    assert!(out.stdout.contains("[structured-output-enforce]"));
}

/// With the draft 2020-12 `$schema` modix's schema files carry, Claude Code
/// silently drops its StructuredOutput tool: the model's call of it fails
/// ("No such tool available"), nothing says why, and no structured output
/// comes back. modix must strip `$schema` (`schema::strict` does).
#[test]
fn real_claude_json_schema_with_a_dollar_schema_loses_its_tool() {
    if find_cli(
        "claude",
        "real_claude_json_schema_with_a_dollar_schema_loses_its_tool",
    )
    .is_none()
    {
        return;
    }
    let answer: Value = serde_json::from_str(TASK_SPEC_ANSWER).unwrap();
    let (out, _mock) = claude_with_schema(
        &task_spec_schema(true),
        Script::new().tool("StructuredOutput", answer).text("done"),
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stdout
            .contains("No such tool available: StructuredOutput"),
        "{out:#?}"
    );
    let result = claude_result(&out);
    assert_eq!(result["structured_output"], Value::Null);
    assert_eq!(result["result"], "done");
}

/// Codex sends `--output-schema`'s file as a strict structured-output
/// schema (`strict: true`): the real API refuses one that does not require
/// every property and close every object, so modix's own schema files
/// cannot go there as they are (`schema::strict` makes them fit).
#[test]
fn real_codex_sends_the_output_schema_as_strict() {
    let Some(codex) = find_cli("codex", "real_codex_sends_the_output_schema_as_strict") else {
        return;
    };
    let scratch = Scratch::new();
    let mock = MockAnthropic::start(
        Script::openai()
            .text(r#"{"passed": true, "summary": "ok"}"#)
            .time_limit(Duration::from_secs(30)),
    );
    let schema = json!({"type": "object", "properties": {"passed": {"type": "boolean"}, "summary": {"type": "string"}},
        "required": ["passed"]});
    let schema_path = scratch.dir.path().join("schema.json");
    std::fs::write(&schema_path, schema.to_string()).unwrap();
    let base = codex_against(&scratch, &codex, &mock);
    let mut args: Vec<String> = base
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let stdin_dash = args.pop().unwrap();
    args.extend([
        "--output-schema".into(),
        schema_path.display().to_string(),
        stdin_dash,
    ]);
    let cmd = scratch.command(
        &codex,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[("CODEX_API_KEY", FAKE_CODEX_KEY)],
    );
    let out = run_bounded(cmd, "Say hi", Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{out:#?}");
    let format = &mock.responses_requests()[0].body["text"]["format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["strict"], true);
    assert_eq!(format["name"], "codex_output_schema");
    assert_eq!(format["schema"], schema, "sent as written, not made strict");
}
