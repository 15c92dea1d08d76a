//! Runs in the states `history` and friends must show: failed through a
//! used-up bound, killed mid-step (owner gone), interrupted by Ctrl-C.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::{GoResult, Sandbox, output_text};

/// The example's scripted agent with a valid plan, and `rest` (a sh body)
/// for every other state.
pub fn agent(sb: &Sandbox, rest: &str) {
    sb.agent_script(&format!(
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
    ));
}

/// An executor that changes a file (one that changes nothing makes no
/// progress) and says it succeeded.
pub const EXECUTOR_OK: &str = r##"    echo "# attempt $MODIX_ATTEMPT" >> calc.py
    echo '{"outcome":"success","summary":"done","files_changed":["calc.py"],"error":null}'"##;

/// A run whose tester always fails: it ends in FAILED, its last step
/// redirected there once the retry bound was used up.
pub fn failed_run(sb: &Sandbox, epic: &str) -> GoResult {
    agent(sb, EXECUTOR_OK);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["false"])
    });
    // Not cut short as no progress: it is the bound that ends it.
    sb.edit_json(".modix/runtimes.json", |v| {
        v["loops"]["no_progress_after"] = 10.into()
    });
    let r = sb.go_json(epic);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    r
}

/// An executor that touches `marker`, then (the first time only) sleeps 30 s.
pub fn slow_first_executor(sb: &Sandbox, marker: &Path) {
    agent(
        sb,
        &format!(
            "    if [ ! -e {m} ]; then touch {m}; sleep 30; fi\n{EXECUTOR_OK}\n",
            m = marker.display()
        ),
    );
    passing_tester(sb);
}

/// A tester that always passes (`true`).
pub fn passing_tester(sb: &Sandbox) {
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
}

/// `child`'s output once it ended, or a failure naming `what` when it did
/// not end within 60 s (then it is killed: a hang fails the test instead of
/// hanging it).
pub fn finished_within(mut child: std::process::Child, what: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Waits (at most 30 s) for `marker` to exist.
pub fn wait_for(marker: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            marker.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `modix go` killed with SIGKILL once `marker` exists (the executor,
/// whose script `executor` is, has started); the run's id.
pub fn crashed_while(sb: &Sandbox, marker: &Path, executor: &str) -> String {
    agent(sb, executor);
    passing_tester(sb);
    killed_once(sb, &["go", "--json", "crash mid-step"], marker)
}

/// `modix ARGS` killed with SIGKILL once `marker` exists; the newest run's id.
pub fn killed_once(sb: &Sandbox, args: &[&str], marker: &Path) -> String {
    let mut child = sb.spawn(args);
    wait_for(marker);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    sb.runs()[0]["run_id"].as_str().unwrap().to_owned()
}

/// `modix go` stopped by `signal` while the executor runs; the run's id.
pub fn stopped_run(sb: &Sandbox, epic: &str, signal: nix::sys::signal::Signal) -> String {
    let marker = sb.dir.path().join(format!("executing-{epic}"));
    slow_first_executor(sb, &marker);
    let mut child = sb.spawn(&["go", "--json", epic]);
    wait_for(&marker);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    child.wait().unwrap();
    sb.runs()[0]["run_id"].as_str().unwrap().to_owned()
}

/// `git ARGS` in `dir` with a fixed identity and no user config (local
/// submodule URLs allowed); its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The example project as a git repository with one commit.
pub fn repo() -> Sandbox {
    let sb = Sandbox::example();
    let root = sb.root();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "base"]);
    sb
}

/// `modix ARGS` in the sandbox, run to its end.
pub fn modix(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    sb.modix().args(args).output().unwrap()
}

/// A script that touches the returned marker (whoever runs it: a filter,
/// a hook) and passes its input through: what a hostile agent plants for
/// modix's own git to run. (marker, script)
pub fn planted_script(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let ran = sb.dir.path().join("planted-command-ran");
    let script = sb.dir.path().join("planted");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\ncat\n", ran.display()),
    )
    .unwrap();
    crate::util::make_executable(&script);
    (ran, script)
}
