//! `modix doctor` runs a cheap probe of each command agent before calling it
//! ready, and `doctor -v` lists the environment names each agent receives.

use crate::term::on_terminal;
use crate::util::{Sandbox, output_text};

fn doctor_json(sb: &Sandbox, envs: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let mut cmd = sb.modix();
    cmd.args(["doctor", "--json"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
    (out.status.code(), v)
}

fn agent<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap()
}

/// A `python3` that has no pytest, as the machine had.
const PYTHON_WITHOUT_PYTEST: &str = "#!/bin/sh\nif [ \"$1\" = \"-m\" ] && [ \"$2\" = \"pytest\" ]; then\n  echo \"/usr/bin/python3: No module named pytest\" >&2\n  exit 1\nfi\nexec /usr/bin/env -i PATH=/usr/bin:/bin python3 \"$@\"\n";

#[test]
fn a_tester_whose_runner_is_missing_is_not_ready_and_says_why() {
    let sb = Sandbox::example();
    sb.fake_bin("python3", PYTHON_WITHOUT_PYTEST);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["python3", "-m", "pytest"])
    });
    let (code, report) = doctor_json(&sb, &[]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["ready"], false);
    let tester = agent(&report, "tester");
    assert_eq!(tester["ready"], false);
    assert_eq!(
        tester["probe"]["argv"],
        serde_json::json!(["python3", "-m", "pytest", "--version"])
    );
    assert_eq!(tester["probe"]["from"], "built-in");
    assert_eq!(
        tester["problems"][0],
        "`python3 -m pytest --version` failed: /usr/bin/python3: No module named pytest"
    );
    // People see it in the status column, and the verdict.
    let out = sb.modix().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No module named pytest"), "{text}");
    assert!(
        text.contains("Not ready: workflow `plan_execute_test` needs tester"),
        "{text}"
    );
    // On a terminal, a red ✗ (here without colour: NO_COLOR).
    if let Some((_, text)) = on_terminal(&sb, &["doctor"], 160, &[]) {
        assert!(
            text.contains("✗ `python3 -m pytest --version` failed"),
            "{text}"
        );
        assert!(text.contains("✓ ready"), "{text}");
    }
}

#[test]
fn a_runner_that_works_is_ready_after_its_probe_ran() {
    let sb = Sandbox::example();
    let (code, report) = doctor_json(&sb, &[]);
    let tester = agent(&report, "tester");
    assert_eq!(tester["ready"], true, "{report}");
    assert_eq!(tester["probe"]["ok"], true);
    assert_eq!(
        tester["probe"]["argv"],
        serde_json::json!(["python3", "-m", "unittest", "--help"])
    );
    assert_eq!(code, Some(0), "{report}");
}

#[test]
fn a_probe_the_project_declares_is_used() {
    let sb = Sandbox::example();
    let test = serde_json::json!(["python3", "-m", "unittest", "-q"]);
    sb.edit_json(".modix/projects.json", |v| {
        v["commands"]["test"] = test.clone();
        v["commands"]["probes"] = serde_json::json!({
            "test": ["sh", "-c", "echo 'fixtures are not downloaded: run make fixtures' >&2; exit 3"]
        });
    });
    sb.modix().arg("validate").assert().success();
    let (code, report) = doctor_json(&sb, &[]);
    assert_eq!(code, Some(1), "{report}");
    let tester = agent(&report, "tester");
    assert_eq!(
        tester["probe"]["from"],
        "projects.json commands.probes.test"
    );
    assert!(
        tester["problems"][0]
            .as_str()
            .unwrap()
            .ends_with("failed: fixtures are not downloaded: run make fixtures"),
        "{report}"
    );
}

#[test]
fn doctor_verbose_lists_the_variable_names_each_agent_receives() {
    let sb = Sandbox::example();
    sb.edit_json(
        ".modix/runtimes.json",
        |v| v["env"] = serde_json::json!({ "allow": ["PATH", "HOME", "BOT_DELAY", "LC_ALL"] }),
    );
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["scripted"]["api_key_env"] = "ANTHROPIC_API_KEY".into()
    });
    let secret = "sk-ant-api03-DOCTOR-NEVER-PRINTS-THIS";
    let out = sb
        .modix()
        .env("BOT_DELAY", "5")
        .env("MY_OWN_SETTING", "x")
        .env("ANTHROPIC_API_KEY", secret)
        .env_remove("LC_ALL")
        .args(["doctor", "-v"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!output_text(&out).contains(secret));
    // The environment section comes after the agents table.
    let env_rows = text
        .split_once("\nEnvironment\n")
        .unwrap_or_else(|| panic!("{text}"))
        .1;
    let planner = env_rows
        .lines()
        .find(|l| l.starts_with("planner\t"))
        .unwrap();
    assert!(
        planner.contains("PATH HOME BOT_DELAY (env.allow)")
            && planner.contains("ANTHROPIC_API_KEY (brain key)")
            && planner.contains("MODIX_RUN_ID")
            && planner.contains("MODIX_OUTPUT_SCHEMA"),
        "{planner}"
    );
    assert!(!planner.contains("MY_OWN_SETTING"), "{planner}");
    let tester = env_rows
        .lines()
        .find(|l| l.starts_with("tester\t"))
        .unwrap();
    assert!(
        !tester.contains("ANTHROPIC_API_KEY"),
        "a command gets no key: {tester}"
    );
    assert!(
        text.contains("Allow-listed but not set here, so not passed: LC_ALL."),
        "{text}"
    );
    assert!(text.contains("\"env\": {\"allow\": [...]}"), "{text}");
    // Without -v, no environment section.
    let out = sb.modix().arg("doctor").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Environment"));
    // JSON always has the names, with where they come from.
    let (_, report) = doctor_json(&sb, &[("BOT_DELAY", "5")]);
    let env = &agent(&report, "executor")["env"];
    assert!(
        env.as_array()
            .unwrap()
            .contains(&serde_json::json!({"name": "BOT_DELAY", "from": "env.allow"})),
        "{env}"
    );
}

/// The example with a tester whose probe (`pytest --version`) notes its pid
/// and then hangs: the sandbox and the pid file.
fn hanging_probe() -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::example();
    let pidfile = hang_the_probe(&sb);
    (sb, pidfile)
}

/// Makes `sb`'s tester a `pytest` whose probe notes its pid in the file
/// returned and then hangs.
fn hang_the_probe(sb: &Sandbox) -> std::path::PathBuf {
    let pidfile = sb.dir.path().join("probe.pid");
    sb.fake_bin(
        "pytest",
        &format!(
            "#!/bin/sh\necho $$ > '{}'\nexec sleep 30\n",
            pidfile.display()
        ),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["pytest"])
    });
    pidfile
}

/// `modix args` with Ctrl-C sent once the hanging probe runs: its output,
/// after checking it ended soon, with 130, and took the probe with it.
fn interrupted_during_the_probe(args: &[&str]) -> (Sandbox, String) {
    let (sb, pidfile) = hanging_probe();
    let text = interrupted_during_the_probe_in(&sb, &pidfile, args);
    (sb, text)
}

/// [`interrupted_during_the_probe`] in a sandbox whose probe hangs
/// ([`hang_the_probe`]), noting its pid in `pidfile`.
fn interrupted_during_the_probe_in(
    sb: &Sandbox,
    pidfile: &std::path::Path,
    args: &[&str],
) -> String {
    let child = sb.spawn(args);
    crate::scenarios::wait_for(pidfile);
    let probe: i32 = loop {
        // The file exists a moment before its pid is written.
        if let Ok(pid) = std::fs::read_to_string(pidfile).unwrap().trim().parse() {
            break pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let asked = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = output_text(&out);
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(10),
        "Ctrl-C waited {:?} for the probe: {text}",
        asked.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{text}");
    // Killed as modix ended; reaped a moment later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while crate::go::pid_alive(probe) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !crate::go::pid_alive(probe),
        "the probe {probe} outlived the stop"
    );
    text
}

/// Ctrl-C stops `doctor` at once, its checks' processes with it, though a
/// probe would hang for its whole timeout.
#[test]
fn ctrl_c_stops_doctor_and_its_probes() {
    let (_sb, text) = interrupted_during_the_probe(&["doctor"]);
    assert!(
        text.contains("interrupted; the checks still running were stopped"),
        "{text}"
    );
}

/// Ctrl-C during a fork's readiness check (the fork's run is made first)
/// stops the probes at once and leaves that run interrupted before its
/// next step, resumable; the run it came from is untouched.
#[test]
fn ctrl_c_during_the_readiness_check_of_a_fork_leaves_it_resumable() {
    let sb = Sandbox::example();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let source = r.run_id();
    let agents = sb.root().join(".modix/agents.json");
    let as_it_was = std::fs::read_to_string(&agents).unwrap();
    let pidfile = hang_the_probe(&sb);
    let text = interrupted_during_the_probe_in(&sb, &pidfile, &["fork", &source, "--at", "3"]);
    let runs = sb.runs();
    let status = |id: &str| {
        runs.as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .map(|r| r["status"].clone())
    };
    let fork = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .find(|id| *id != source)
        .unwrap_or_else(|| panic!("no fork recorded: {runs}"));
    assert_eq!(status(&source), Some("succeeded".into()), "{runs}");
    assert_eq!(status(&fork), Some("interrupted".into()), "{runs}");
    for line in [
        format!("Forked run {fork} from run {source} at step 3 (workflow plan_execute_test)"),
        format!("Run {fork} interrupted in TESTING: `modix resume {fork}` continues it"),
    ] {
        assert!(text.contains(&line), "{line}\n{text}");
    }
    std::fs::write(&agents, as_it_was).unwrap();
    // Its resume is a resume, no longer its fork.
    let resumed = sb.resume_to_success(&fork);
    let started = resumed.events.iter().find(|e| e["type"] == "run_started");
    assert_eq!(
        started.map(|e| (e["resumed"].clone(), e.get("forked_from").is_some())),
        Some((true.into(), false)),
        "{:?}",
        resumed.events
    );
}

/// Ctrl-C during `go`'s readiness check stops it as before any run: the
/// probes killed, nothing recorded.
#[test]
fn ctrl_c_during_the_readiness_check_stops_go_with_nothing_recorded() {
    let (sb, text) = interrupted_during_the_probe(&["go", "--json", "not yet"]);
    assert!(
        text.contains("interrupted before the run started; nothing was recorded"),
        "{text}"
    );
    assert!(sb.runs().as_array().unwrap().is_empty(), "{}", sb.runs());
}
