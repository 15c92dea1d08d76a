//! The record can be trusted: no secret reaches it (or the terminal) by any
//! route, an auditor can read it without write access, and what an agent
//! did — even when it could not start or printed too much — is on it.

use std::path::Path;

use crate::util::{GoResult, Sandbox, output_text};

/// A realistic Anthropic key: configured (the brain's key variable) and
/// shaped like one, so both kinds of redaction are exercised.
const KEY: &str =
    "sk-ant-api03-Zr8vQ2mX9pL4kT7wN1bC6yH3jF5dS0aG8eU2iO9qW4rT6yP1lK3jH5gF7dS9aZ-x2Jq7wAA";
/// A key nobody configured: only its shape can give it away.
const UNCONFIGURED: &str = "sk-proj-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5Nm7Qw9Er1Ty3Ui";

fn keyed(sb: &Sandbox) {
    sb.edit_json(".modix/brains.json", |v| {
        v["brains"]["scripted"]["api_key_env"] = "ANTHROPIC_API_KEY".into()
    });
}

/// Every file under `dir` (db, WAL, runs folder, state.json…) as bytes.
fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, bytes));
        }
    }
    out
}

fn assert_nowhere(sb: &Sandbox, printed: &str) {
    for secret in [KEY, UNCONFIGURED] {
        assert!(!printed.contains(secret), "printed: {printed}");
        // Part of a key is a leak too (a line split, a capture cut).
        for part in [&secret[..20], &secret[secret.len() - 20..]] {
            assert!(
                !printed.contains(part),
                "part of a key was printed: {printed}"
            );
            for (path, bytes) in files(&sb.root().join(".modix")) {
                assert!(
                    !bytes.windows(20).any(|w| w == part.as_bytes()),
                    "{} holds part of a key",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn no_secret_reaches_the_record_or_the_terminal_by_any_route() {
    let sb = Sandbox::example();
    keyed(&sb);
    // Planner: valid. Executor, attempt 1: fails quoting both keys in its
    // error (reason, feedback, progress line); attempt 2: an answer whose
    // schema error quotes a key (validation_errors); attempt 3: succeeds
    // after a huge line with a key across the 64 KiB echo boundary and a
    // key where the capture cut falls. Tester: fails printing a key
    // (messages payload), then passes.
    // The echo splits lines at 64 KiB: this one would split 30 characters
    // into the key that follows the filler.
    let filler = "x".repeat(65_536 - 31);
    // The unconfigured key comes from outside the project, so the only
    // copies under .modix/ are those modix itself might make.
    let other = sb.dir.path().join("other-key");
    std::fs::write(&other, UNCONFIGURED).unwrap();
    let unconfigured = format!("$(cat {})", other.display());
    // The capture keeps the last 150,000 bytes: pad so that its cut falls
    // ten characters into a key.
    let json = r#"{"outcome":"success","summary":"done","files_changed":[],"error":null}"#;
    let pad = 150_000 - (KEY.len() - 10) - 1 - (json.len() + 1);
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
case "$MODIX_STATE:$MODIX_ATTEMPT" in
  PLANNING:*)
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":["calc.py"],"acceptance":["ok"]}}]}}' ;;
  EXECUTING:1)
    echo "auth failed for key $ANTHROPIC_API_KEY and {unconfigured}" >&2; exit 1 ;;
  EXECUTING:2)
    echo "{{\"outcome\": \"$ANTHROPIC_API_KEY\", \"summary\": \"{unconfigured}\"}}" ;;
  *)
    echo '# fixed' >> calc.py
    printf '%s %s\n' "{filler}" "$ANTHROPIC_API_KEY"
    printf '%s' "$ANTHROPIC_API_KEY"; head -c {pad} /dev/zero | tr '\0' ' '; echo
    echo '{json}' ;;
esac
"#
    ));
    let tester = sb.root().join("agents/tester");
    crate::util::write_file(
        &tester,
        &format!(
            "#!/bin/sh\nif [ -e {marker} ]; then exit 0; fi\ntouch {marker}\necho \"FAIL test_key {unconfigured} $ANTHROPIC_API_KEY\"\nexit 1\n",
            // Outside the workspace: a tester that changes files is rejected.
            marker = sb.dir.path().join("passed").display()
        ),
    );
    crate::util::make_executable(&tester);
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["agents/tester"]);
    });
    sb.edit_json(".modix/runtimes.json", |v| {
        v["output"]["max_capture_bytes"] = 200_000.into();
    });
    let epic = format!("Fix it; my key is {KEY} and the other {UNCONFIGURED}");
    let mut printed = String::new();
    for args in [
        vec!["-v", "go", epic.as_str()],
        vec!["go", "--json", epic.as_str()],
    ] {
        let out = sb
            .modix()
            .env("ANTHROPIC_API_KEY", KEY)
            .args(&args)
            .output()
            .unwrap();
        printed.push_str(&output_text(&out));
        assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    }
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    for args in [
        vec!["history".to_owned()],
        vec!["history".into(), "--json".into()],
        vec!["history".into(), run.clone()],
        vec!["history".into(), run.clone(), "--json".into()],
    ]
    .into_iter()
    .chain((1..=7).flat_map(|n| {
        let n = n.to_string();
        [
            vec![
                "history".into(),
                run.clone(),
                "--invocation".into(),
                n.clone(),
            ],
            vec![
                "history".into(),
                run.clone(),
                "--invocation".into(),
                n,
                "--json".into(),
            ],
        ]
    })) {
        let out = sb.modix().args(&args).output().unwrap();
        printed.push_str(&output_text(&out));
    }
    // The routes were taken: the reason, the schema error and the tester's
    // failure are on record (redacted).
    assert!(
        printed.contains("auth failed for key [REDACTED:ANTHROPIC_API_KEY]"),
        "{printed}"
    );
    assert!(printed.contains("[REDACTED:openai-key]"), "{printed}");
    assert_nowhere(&sb, &printed);
}

#[test]
fn a_cut_answer_says_it_was_cut() {
    let sb = Sandbox::example();
    sb.agent_script(
        "#!/bin/sh\ncat > /dev/null\nprintf '{\"title\": \"'; head -c 400000 /dev/zero | tr '\\0' a; echo '\"}'\n",
    );
    sb.edit_json(".modix/runtimes.json", |v| {
        v["output"]["max_capture_bytes"] = 65_536.into();
    });
    let r = sb.go_json("plan too much");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let inv = sb.invocation(&r.run_id(), 1);
    let errors = inv["validation_errors"].to_string();
    assert!(
        errors.contains("the answer was cut")
            && errors.contains("output.max_capture_bytes")
            && errors.contains("raise the limit"),
        "{errors}"
    );
}

#[test]
fn output_that_is_not_text_is_kept_as_written() {
    let sb = Sandbox::example();
    sb.agent_script("#!/bin/sh\ncat > /dev/null\nprintf 'nul\\000 and \\377\\n' >&2\nexit 3\n");
    let r = sb.go_json("bytes");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let inv = sb.invocation(&r.run_id(), 1);
    assert_eq!(inv["stderr"], "nul\u{0} and \u{fffd}\n", "{inv:#}");
    assert_eq!(inv["stderr_bytes"], 11);
}

#[test]
fn a_missing_interpreter_and_a_missing_program_are_named_and_recorded() {
    let sb = Sandbox::example();
    sb.agent_script("#!/nonexistent/bin/python9\nprint('hi')\n");
    // `go` checks before it starts: nothing is recorded, the cause is named.
    let out = sb.modix().args(["go", "no interpreter"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        output_text(&out).contains(
            "its interpreter `/nonexistent/bin/python9` (from its #! line) was not found"
        ),
        "{}",
        output_text(&out)
    );
    assert!(sb.runs().as_array().is_none_or(|a| a.is_empty()));
    // Past that check, the failed start is recorded with the same words.
    let go = |epic: &str| {
        let out = sb
            .modix()
            .env("MODIX_SKIP_READINESS", "1")
            .args(["go", "--json", epic])
            .output()
            .unwrap();
        crate::util::GoResult::parse(&out)
    };
    let r = go("no interpreter");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let reason = r.transitions[1]["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains(
            "its interpreter `/nonexistent/bin/python9` (from its #! line) was not found"
        ),
        "{reason}"
    );
    // A program that is not there at all: the error and the command line
    // it would have run are on the invocation's record.
    sb.edit_json(".modix/shells.json", |v| {
        v["shells"]["scripted"]["binary"] = "agents/no-such-agent".into()
    });
    let r = go("no program");
    let inv = sb.invocation(&r.run_id(), 1);
    assert!(
        inv["error"]
            .as_str()
            .unwrap()
            .contains("program `agents/no-such-agent` not found")
    );
    assert_eq!(inv["argv"][0], "agents/no-such-agent", "{inv:#}");
    let out = sb
        .modix()
        .args(["history", &r.run_id(), "--invocation", "1"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("could not start: agent `planner`: program `agents/no-such-agent` not found"),
        "{text}"
    );
}

/// `history` on a project the auditor cannot write to: as root, run modix
/// as another user (root ignores file permissions); otherwise drop write
/// permission.
#[test]
fn history_reads_a_project_it_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::example();
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let modix_dir = sb.root().join(".modix");
    let set = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    // SAFETY-free check of who we are: geteuid never fails.
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    let modix = assert_cmd::cargo::cargo_bin("modix");
    let mut cmd = if root {
        if which::which("setpriv").is_err() {
            eprintln!(
                "note: running as root without setpriv; the read-only history test is skipped"
            );
            return;
        }
        // The auditor can reach and read everything, write nothing.
        for dir in [sb.dir.path().to_path_buf(), sb.root(), modix_dir.clone()] {
            set(&dir, 0o755);
        }
        for (path, _) in files(&modix_dir) {
            set(&path, 0o644);
        }
        set(&modix_dir, 0o555);
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&modix);
        c
    } else {
        set(&modix_dir, 0o555);
        std::process::Command::new(&modix)
    };
    for (k, v) in sb.modix().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd
        .current_dir(sb.root())
        .args(["history", &r.run_id()])
        .output()
        .unwrap();
    set(&modix_dir, 0o755);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("TESTING → DONE"), "{text}");
    let _ = GoResult::parse;
}

#[test]
fn each_agent_gets_a_private_tmpdir_that_is_removed_when_it_ends() {
    let sb = Sandbox::example();
    let seen = sb.dir.path().join("seen");
    crate::scenarios::agent(
        &sb,
        &format!(
            "    echo \"$TMPDIR $TMP $TEMP $(stat -c %a \"$TMPDIR\") $(ls -A \"$TMPDIR\" | wc -l)\" >> {seen}\n    echo 'a report quoting the prompt' > \"$TMPDIR/report.txt\"\n{ok}",
            seen = seen.display(),
            ok = crate::scenarios::EXECUTOR_OK
        ),
    );
    let r = sb.go_json("tmp");
    let run = r.run_id();
    let lines = std::fs::read_to_string(&seen).unwrap();
    let dir = sb.root().join(format!(".modix/runs/{run}/tmp"));
    for line in lines.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let shown = dir.display().to_string();
        // The same folder under all three names, private, and empty each time.
        assert_eq!(
            f,
            [shown.as_str(), shown.as_str(), shown.as_str(), "700", "0"],
            "{lines}"
        );
    }
    assert!(lines.lines().count() >= 2, "{lines}");
    assert!(!dir.exists(), "the folder outlived the invocations");
}

/// The tmp folder is not listed again while its stat is as when it was
/// last found empty; a file made in it since is still found and cleared,
/// even when its maker puts the folder's mtime back as it was: making an
/// entry sets the ctime, which no process can set back. The planner leaves
/// the folder alone and waits, so that the executor's preparation finds it
/// empty and old enough to remember; the executor hides a file in it.
#[test]
fn a_file_hidden_in_the_tmpdir_with_its_mtime_put_back_is_still_cleared() {
    let sb = Sandbox::example();
    let seen = sb.dir.path().join("seen");
    sb.agent_script(&format!(
        r#"#!/bin/sh
cat > /dev/null
echo "$MODIX_STATE $(ls -A "$TMPDIR" | wc -l)" >> {seen}
case "$MODIX_STATE" in
  PLANNING)
    sleep 0.2
    echo '{{"title":"t","summary":"s","complexity":"low","tasks":[{{"id":"T1","title":"do","files":["calc.py"],"acceptance":["tests pass"]}}]}}'
    ;;
  *)
    m=$(stat -c %.9Y "$TMPDIR")
    echo 'a report quoting the prompt' > "$TMPDIR/report.txt"
    touch -d "@$m" "$TMPDIR"
    [ "$(stat -c %.9Y "$TMPDIR")" = "$m" ] || echo "mtime not put back" >> {seen}
    sleep 0.2
{ok}
    ;;
esac
"#,
        seen = seen.display(),
        ok = crate::scenarios::EXECUTOR_OK
    ));
    sb.go_json("tmp");
    let lines = std::fs::read_to_string(&seen).unwrap();
    let states: Vec<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(
        states.len() >= 3 && states[..2] == ["PLANNING", "EXECUTING"],
        "{lines}"
    );
    assert!(
        lines.lines().all(|l| l.ends_with(" 0")),
        "an agent found what the one before it left: {lines}"
    );
}

/// What an agent stopped half way left in its TMPDIR goes with the run's
/// stop, as the last agent's does when a run ends.
#[test]
fn an_interrupted_agents_tmpdir_goes_when_the_run_stops() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("working");
    crate::scenarios::agent(
        &sb,
        &format!(
            "    echo 'a report quoting the prompt' > \"$TMPDIR/report.txt\"\n    touch {m}\n    sleep 30\n{ok}",
            m = marker.display(),
            ok = crate::scenarios::EXECUTOR_OK
        ),
    );
    let child = sb.spawn(&["go", "--json", "stopped half way"]);
    crate::scenarios::wait_for(&marker);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let r = GoResult::parse(&child.wait_with_output().unwrap());
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    let dir = sb.root().join(format!(".modix/runs/{}/tmp", r.run_id()));
    assert!(!dir.exists(), "the folder outlived the stopped run");
}

#[test]
fn credentials_in_a_proxy_url_are_redacted_like_keys() {
    let sb = Sandbox::example();
    let password = "Pr0xyPassw0rd-7Hq2";
    crate::scenarios::agent(
        &sb,
        &format!(
            "    echo \"connecting through $HTTPS_PROXY\" >&2\n{}",
            crate::scenarios::EXECUTOR_OK
        ),
    );
    let out = sb
        .modix()
        .env(
            "HTTPS_PROXY",
            format!("http://alice:{password}@proxy.internal:3128"),
        )
        .args(["-v", "go", "proxy"])
        .output()
        .unwrap();
    let printed = output_text(&out);
    assert!(printed.contains("connecting through http://"), "{printed}");
    assert!(!printed.contains(password), "{printed}");
    for (path, bytes) in files(&sb.root().join(".modix")) {
        assert!(
            !bytes
                .windows(password.len())
                .any(|w| w == password.as_bytes()),
            "{} holds the proxy password",
            path.display()
        );
    }
}

/// A key an agent prints base64-encoded (an env dump piped through
/// `base64`, a Basic auth header: the key after a prefix, at every place in
/// a 3-byte group) is the key: redacted from the terminal and the record.
#[test]
fn a_key_printed_base64_encoded_is_redacted_like_the_key() {
    let sb = Sandbox::example();
    keyed(&sb);
    crate::scenarios::agent(
        &sb,
        &format!(
            "    for p in '' 'u:' 'us:' 'ANTHROPIC_API_KEY='; do printf '%s%s' \"$p\" \"$ANTHROPIC_API_KEY\" | base64 -w0; echo; done\n\
             printf 'Authorization: Basic %s\\n' \"$(printf 'me:%s' \"$ANTHROPIC_API_KEY\" | base64 -w0)\" >&2\n{}",
            crate::scenarios::EXECUTOR_OK
        ),
    );
    crate::scenarios::passing_tester(&sb);
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", KEY)
        .args(["-v", "go", "encode"])
        .output()
        .unwrap();
    let mut printed = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(printed.contains("Authorization: Basic"), "{printed}");
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    for n in ["2", "3"] {
        let out = sb
            .modix()
            .args(["history", &run, "--invocation", n, "--json"])
            .output()
            .unwrap();
        printed.push_str(&output_text(&out));
    }
    let encodings = ["", "u:", "us:", "me:", "ANTHROPIC_API_KEY="].map(|p| {
        let plain = format!("{p}{KEY}");
        let mut child = std::process::Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(plain.as_bytes())
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    });
    for encoded in &encodings {
        // The middle of the encoded key: what no neighbour's bits touch.
        let part = &encoded[encoded.len() / 2 - 10..encoded.len() / 2 + 10];
        assert!(!printed.contains(part), "{encoded} printed: {printed}");
        for (path, bytes) in files(&sb.root().join(".modix")) {
            assert!(
                !bytes.windows(20).any(|w| w == part.as_bytes()),
                "{} holds the base64 of a key",
                path.display()
            );
        }
    }
}

/// Peak memory of finished children of this process (Linux: kilobytes).
fn children_max_rss_kb() -> i64 {
    let mut usage = std::mem::MaybeUninit::<nix::libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe { nix::libc::getrusage(nix::libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    unsafe { usage.assume_init() }.ru_maxrss
}

#[test]
fn a_huge_answer_costs_memory_by_the_capture_limit_not_its_size() {
    let sb = Sandbox::example();
    // 64 MB of output before the answer, with the capture limit at 4 MiB.
    crate::scenarios::agent(
        &sb,
        &format!(
            "    head -c 64000000 /dev/zero | tr '\\0' 'x'\n    echo\n{}",
            crate::scenarios::EXECUTOR_OK
        ),
    );
    sb.edit_json(".modix/runtimes.json", |v| {
        v["output"]["max_capture_bytes"] = (4 << 20).into()
    });
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
    // In a child process of its own, so its peak is the only one measured.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "record::huge_answer_child",
            "--ignored",
            "--nocapture",
        ])
        .env("MODIX_HUGE_PROJECT", sb.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("peak-kb="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in {text}"));
    assert!(
        peak < 64_000,
        "modix peaked at {peak} KB for a 64 MB answer"
    );
    let db = std::fs::metadata(sb.root().join(".modix/modix.db"))
        .unwrap()
        .len();
    assert!(db < 16 << 20, "the record is {db} bytes");
}

/// The measured half of the test above: runs `modix go` on the project it
/// is given and prints the peak memory of its children (modix, and the
/// agent's small processes).
#[test]
#[ignore = "run by a_huge_answer_costs_memory_by_the_capture_limit_not_its_size"]
fn huge_answer_child() {
    let Some(dir) = std::env::var_os("MODIX_HUGE_PROJECT") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("modix"))
        .args(["-q", "go", "talk a lot"])
        .current_dir(dir.join("project"))
        .env("MODIX_HOME", dir.join("home"))
        .env("HOME", dir.join("home"))
        .env("MODIX_SKIP_READINESS", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    println!("peak-kb={}", children_max_rss_kb());
}

/// `modix args` in the sandbox's project under `strace -f -y`, tracing
/// `calls`: its output and the trace's lines. (CI installs strace; without
/// it the tests that use this fail, they do not skip.)
fn straced(sb: &Sandbox, calls: &str, args: &[&str]) -> (std::process::Output, String) {
    straced_with(sb, &["-e", &format!("trace={calls}")], args)
}

/// [`straced`] with strace's own options (what to trace, faults to inject).
pub(crate) fn straced_with(
    sb: &Sandbox,
    options: &[&str],
    args: &[&str],
) -> (std::process::Output, String) {
    let trace = sb.dir.path().join("trace");
    let mut cmd = std::process::Command::new("strace");
    for (k, v) in sb.modix().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd
        .current_dir(sb.root())
        .args(["-f", "-y", "-qq"])
        .args(options)
        .arg("-o")
        .arg(&trace)
        .arg(assert_cmd::cargo::cargo_bin("modix"))
        .args(args)
        .output()
        .expect("strace must be installed (.ci/run installs it)");
    (out, std::fs::read_to_string(&trace).unwrap())
}

/// A 30-step loop of the `echo` tester run under `strace`, tracing
/// `calls`: the sandbox, the run (which succeeded) and the trace.
fn straced_loop(calls: &str) -> (Sandbox, GoResult, String) {
    let sb = Sandbox::example();
    echo_tester(&sb);
    sb.write(".modix/fsm/long_loop.toml", &long_loop(30));
    let (out, lines) = straced(
        &sb,
        calls,
        &["go", "--json", "--workflow", "long_loop", "loop"],
    );
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", output_text(&out));
    (sb, r, lines)
}

/// What a traced run did with its write-ahead log, checked as it goes:
/// every transition event printed (`--json` on stdout) and every later
/// write to the log come after a sync of the log that began after its last
/// write, and modix exits with the log synced.
struct LogTrace {
    /// The example's agents started.
    agents: usize,
    /// Syncs of the log that settled a write.
    syncs: usize,
    /// Agents started while the log held a write not yet synced.
    beside_a_sync: usize,
}

fn follow_the_log(sb: &Sandbox, lines: &str) -> LogTrace {
    let log = format!("{}-wal>", sb.root().join(".modix/modix.db").display());
    let mut t = LogTrace {
        agents: 0,
        syncs: 0,
        beside_a_sync: 0,
    };
    // `written`: the log holds a write no sync has settled; `agent_since`:
    // an agent started since that write.
    let (mut written, mut agent_since) = (false, false);
    // A sync counts only if it began after the last write: it is noted at
    // its start and settles the log when it returns.
    let mut began: std::collections::HashMap<String, bool> = Default::default();
    for line in lines.lines() {
        let (pid, call) = line.split_once(' ').unwrap_or(("", line));
        let call = call.trim_start();
        if call.starts_with("pwrite64(") && call.contains(&log) {
            assert!(
                !(written && agent_since),
                "a step was recorded before the last one was on disk: {line}\n{lines}"
            );
            written = true;
            began.values_mut().for_each(|b| *b = false);
        } else if (call.starts_with("fdatasync(") || call.starts_with("fsync("))
            && call.contains(&log)
        {
            began.insert(pid.to_owned(), true);
        }
        let sync_returned = (call.starts_with("fdatasync(")
            || call.starts_with("fsync(")
            || call.starts_with("<... fdatasync resumed>")
            || call.starts_with("<... fsync resumed>"))
            && call.ends_with("= 0");
        if sync_returned && began.remove(pid).unwrap_or(false) {
            (written, agent_since) = (false, false);
            t.syncs += 1;
        }
        // An event line's first 32 bytes: `{"schema_version":1,"type":"tran`.
        if call.starts_with("write(1<") && call.contains(r#"\"type\":\"tran"#) {
            assert!(
                !written,
                "a step was said before it was on disk: {line}\n{lines}"
            );
        }
        if call.starts_with("execve(")
            && call.contains("agents/scripted-agent")
            && !call.contains("--version")
        {
            t.agents += 1;
            t.beside_a_sync += usize::from(written);
            agent_since |= written;
        }
    }
    assert!(!written, "modix exited with a commit not on disk\n{lines}");
    t
}

/// A step's commit goes to disk while the engine prepares the next agent's
/// prompt, and is on disk before that agent starts: in the system calls of
/// a whole run, every write to the write-ahead log is followed by an fsync
/// of the log that began after it, before any agent's `execve`, before the
/// step's event is printed and before modix exits. (CI installs strace;
/// without it this test fails, it does not skip.)
#[test]
fn every_step_is_on_disk_before_the_next_agent_starts() {
    let (_, t, lines) = traced_example(&Sandbox::example());
    assert_eq!(
        t.beside_a_sync, 0,
        "an agent started before the last step was on disk\n{lines}"
    );
}

/// The example run through under strace, its log followed
/// ([`follow_the_log`]): it ended DONE, with at least one sync for each of
/// its agents. The run, the log's trace and strace's lines.
fn traced_example(sb: &Sandbox) -> (GoResult, LogTrace, String) {
    let (out, lines) = straced(
        sb,
        "execve,pwrite64,fdatasync,fsync,write",
        &["go", "--json", "Fix mean() in calc.py"],
    );
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", output_text(&out));
    assert_eq!(r.summary["state"], "DONE", "{}", output_text(&out));
    let t = follow_the_log(sb, &lines);
    assert!(t.agents >= 3, "the run's agents: {}\n{lines}", t.agents);
    assert!(
        t.syncs >= t.agents,
        "{} syncs of the log for {} agents",
        t.syncs,
        t.agents
    );
    (r, t, lines)
}

/// With `durability: pipelined` a step's sync runs while the next agent
/// starts, and only that moves: every agent starts beside its last step's
/// sync, yet no step is said (`--json`) or followed by another's record
/// before it is on disk, and modix exits with every step on disk; the run
/// is the same run.
#[test]
fn with_pipelined_durability_the_next_agent_starts_beside_the_sync_and_nothing_else_moves() {
    let sb = Sandbox::example();
    sb.edit_json(".modix/runtimes.json", |v| {
        v["durability"] = "pipelined".into()
    });
    let (r, t, lines) = traced_example(&sb);
    assert_eq!(
        t.beside_a_sync, t.agents,
        "each agent's start beside its step's sync\n{lines}"
    );
    // Events in the same order: each step, then the next agent's start.
    let kinds: Vec<&str> = r.events.iter().filter_map(|e| e["type"].as_str()).collect();
    let shape: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(*k, "transition" | "agent_started"))
        .collect();
    let want: Vec<&str> = ["transition", "agent_started"]
        .repeat(5)
        .into_iter()
        .chain(["transition"])
        .collect();
    assert_eq!(shape, want, "{kinds:?}");
}

/// The example with `durability: pipelined` and a planner that runs
/// `planner` (then leaves a mark), named in its first bytes: strace prints
/// the first 32 of each argument.
fn pipelined_planner(planner: &str) -> Sandbox {
    let sb = Sandbox::example();
    sb.edit_json(".modix/runtimes.json", |v| {
        v["durability"] = "pipelined".into()
    });
    let mark = sb.dir.path().join("planner-finished");
    let script = format!(": the-planner; {planner}; touch {}", mark.display());
    sb.edit_json(".modix/agents.json", |v| {
        let planner = v["agents"]["planner"].as_object_mut().unwrap();
        planner.insert("command".into(), serde_json::json!(["sh", "-c", script]));
        planner.remove("shell");
        planner.remove("brain");
    });
    sb
}

/// In a run of [`pipelined_planner`], how many syncs and process starts
/// (`clone3`) the engine's thread makes up to the planner's start: strace
/// counts a call's invocations per thread, for its fault injection.
fn engine_calls_to_the_planner() -> (usize, usize) {
    let sb = pipelined_planner("true");
    let (_, lines) = straced(&sb, "execve,fdatasync,clone3", &["go", "--json", "once"]);
    let calls: Vec<(&str, &str)> = lines
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(pid, c)| (pid, c.trim_start())))
        .collect();
    let planner = calls
        .iter()
        .position(|(_, c)| c.starts_with("execve(") && c.contains("the-planner"))
        .unwrap_or_else(|| panic!("the planner's start\n{lines}"));
    let (engine, _) = *calls[planner..]
        .iter()
        .find(|(_, c)| c.starts_with("fdatasync("))
        .unwrap_or_else(|| panic!("a sync after the planner's start\n{lines}"));
    let count = |call: &str| {
        calls[..planner]
            .iter()
            .filter(|(pid, c)| *pid == engine && c.starts_with(call))
            .count()
    };
    (count("fdatasync("), count("clone3("))
}

/// `modix go` in `sb` under strace injecting `faults`: its output, and how
/// long it took.
fn go_with_faults(sb: &Sandbox, faults: &[String]) -> (std::process::Output, std::time::Duration) {
    let options: Vec<&str> = faults.iter().flat_map(|f| ["-e", f.as_str()]).collect();
    let started = std::time::Instant::now();
    let (out, _) = straced_with(sb, &options, &["go", "--json", "twice"]);
    (out, started.elapsed())
}

/// The run stopped at once with the log's sync error, said nothing of the
/// step, and left no planner (which would sleep 30 s) behind.
fn stopped_by_the_failed_sync(sb: &Sandbox, out: &std::process::Output, took: std::time::Duration) {
    let text = output_text(out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("modix.db-wal: cannot make a commit durable: Input/output error"),
        "{text}"
    );
    assert!(
        !text.contains(r#""type":"transition""#),
        "a step said unsynced: {text}"
    );
    assert!(
        took < std::time::Duration::from_secs(20),
        "waited {took:?} for the planner"
    );
    let mark = sb.dir.path().join("planner-finished");
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).contains(&*mark.to_string_lossy()));
    assert!(!alive, "the planner's group outlived the failed sync");
    assert!(!mark.exists());
}

/// With `durability: pipelined`, a step whose sync fails after the next
/// agent started stops that agent's whole process group at once, and the
/// run with the error naming the log: strace makes the first sync after the
/// planner's start fail (`EIO`).
#[test]
fn with_pipelined_durability_a_failed_sync_stops_the_agent_started_beside_it() {
    let (syncs, _) = engine_calls_to_the_planner();
    let sb = pipelined_planner("sleep 30");
    let (out, took) = go_with_faults(
        &sb,
        &[format!("inject=fdatasync:error=EIO:when={}", syncs + 1)],
    );
    stopped_by_the_failed_sync(&sb, &out, took);
}

/// The same when the planner's first start fails as a transient error
/// (`EAGAIN`, retried after a wait): the sync runs, and fails, during that
/// wait, and the planner started after it is stopped as it starts.
#[test]
fn with_pipelined_durability_a_sync_failed_before_a_retried_start_stops_that_start() {
    let (syncs, clones) = engine_calls_to_the_planner();
    let sb = pipelined_planner("sleep 30");
    let (out, took) = go_with_faults(
        &sb,
        &[
            format!("inject=clone3:error=EAGAIN:when={clones}"),
            format!("inject=fdatasync:error=EIO:when={}", syncs + 1),
        ],
    );
    stopped_by_the_failed_sync(&sb, &out, took);
    let trace = std::fs::read_to_string(sb.dir.path().join("trace")).unwrap();
    assert!(
        trace.contains("EAGAIN (Resource temporarily unavailable) (INJECTED)"),
        "{trace}"
    );
}

/// `modix go --json twice` in `sb` under strace, seeing only the log's
/// syncs and the agents' starts (`-P`: strace then counts, for a fault's
/// `when`, only the calls on those paths), with `options`.
fn log_syncs_and_agents(sb: &Sandbox, options: &[&str]) -> (std::process::Output, String) {
    let wal = sb.root().join(".modix/modix.db-wal");
    let agent = sb.root().join("agents/scripted-agent");
    let (wal, agent) = (wal.to_str().unwrap(), agent.to_str().unwrap());
    let mut all = vec!["-P", wal, "-P", agent, "-e", "trace=execve,fdatasync"];
    all.extend_from_slice(options);
    straced_with(sb, &all, &["go", "--json", "twice"])
}

/// The log's syncs and the agents' starts (not the readiness check's
/// `--version`) in a trace of [`log_syncs_and_agents`], in order, with the
/// thread that made each.
fn log_syncs_and_starts(lines: &str) -> Vec<(&str, &str)> {
    lines
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(pid, c)| (pid, c.trim_start())))
        .filter(|(_, c)| c.starts_with("fdatasync(") || is_agent_start(c))
        .collect()
}

fn is_agent_start(call: &str) -> bool {
    call.starts_with("execve(") && call.contains("--model")
}

/// With the default durability a step's sync runs on the engine's thread,
/// its write-out started at the commit; should it fail, the next agent
/// never starts: the run stops with the error naming the log, says nothing
/// of the step, and a resume finishes the run. strace fails (`EIO`) the sync
/// of the step of the run's second agent, found in a first run: the first
/// sync of the log after that agent's start. strace counts a fault's `when`
/// per thread, so the test also checks that every sync of a step is made
/// by the engine's thread — the one that starts the agents.
#[test]
fn a_step_whose_sync_fails_stops_the_run_before_the_next_agent() {
    let (clean, lines) = log_syncs_and_agents(&Sandbox::example(), &[]);
    let calls = log_syncs_and_starts(&lines);
    let starts: Vec<usize> = (0..calls.len())
        .filter(|&i| is_agent_start(calls[i].1))
        .collect();
    assert!(starts.len() >= 3, "three agents at least\n{lines}");
    let engine = calls[0].0;
    let syncs_of = |pid: &str, range: std::ops::Range<usize>| {
        calls[range]
            .iter()
            .filter(|(p, c)| *p == pid && c.starts_with("fdatasync("))
            .count()
    };
    // Each agent's step is synced by the engine before the next starts.
    for pair in starts.windows(2) {
        let (agent, next) = (calls[pair[0]].0, calls[pair[1]].0);
        assert_ne!(agent, engine, "the agent's own process\n{lines}");
        assert!(
            syncs_of(engine, pair[0]..pair[1]) >= 1,
            "no sync of the engine's between two agents\n{lines}"
        );
        assert_ne!(next, engine);
    }
    let when = syncs_of(engine, 0..starts[1]) + 1;
    let clean = String::from_utf8_lossy(&clean.stdout).into_owned();
    let second = clean
        .find(r#""type":"agent_started""#)
        .and_then(|first| {
            clean[first + 1..]
                .find(r#""type":"agent_started""#)
                .map(|i| i + first + 1)
        })
        .unwrap_or_else(|| panic!("two agents started\n{clean}"));
    let said_before = clean[..second].matches(r#""type":"transition""#).count();

    let sb = Sandbox::example();
    let fault = format!("inject=fdatasync:error=EIO:when={when}");
    let (out, lines) = log_syncs_and_agents(&sb, &["-e", &fault]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("modix.db-wal: cannot make a commit durable: Input/output error"),
        "{text}"
    );
    let trace: Vec<&str> = lines.lines().collect();
    let failed = trace
        .iter()
        .position(|l| l.contains("(INJECTED)"))
        .unwrap_or_else(|| panic!("no sync failed\n{lines}"));
    assert_eq!(
        trace[..failed]
            .iter()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, c)| is_agent_start(c.trim_start()))
            .count(),
        2,
        "the sync failed is not the second agent's step's\n{lines}"
    );
    assert!(
        !trace[failed..].iter().any(|l| l.contains("execve(")),
        "an agent started after the failed sync\n{lines}"
    );
    // The error ends stdout as a document of its own.
    let said = String::from_utf8_lossy(&out.stdout)
        .matches(r#""type":"transition""#)
        .count();
    assert_eq!(said, said_before, "only the steps on disk are said: {text}");
    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    sb.resume_to_success(&run);
}

/// The example's tester made an `echo` of a passing result: a step as
/// cheap as a step gets.
fn echo_tester(sb: &Sandbox) {
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] =
            serde_json::json!(["echo", r#"{"passed": true, "summary": "ok"}"#]);
    });
}

/// A workflow whose tester passes `loops` more times after the first.
fn long_loop(loops: u32) -> String {
    format!(
        r#"id = "long_loop"
version = "1.0.0"
initial = "INIT"

[states.INIT]
kind = "input"
event = "go"

[states.TESTING]
kind = "agent"
agent = "tester"
output = "test_result"
emit = [
  {{ on = "output", when = "passed == true", event = "again" }},
  {{ on = "output", event = "stop" }},
  {{ on = "invalid_output", event = "stop" }},
  {{ on = "process_error", event = "stop" }},
  {{ on = "timeout", event = "stop" }},
]

[states.DONE]
kind = "terminal"
outcome = "success"

[[transitions]]
from = "INIT"
event = "go"
to = "TESTING"

[[transitions]]
from = "TESTING"
event = "again"
to = "TESTING"
max = {loops}
exhausted = "DONE"

[[transitions]]
from = "TESTING"
event = "stop"
to = "DONE"
"#
    )
}

#[test]
fn an_answer_printed_as_a_document_is_stored_once_and_read_back_as_judged() {
    // A tester printing its answer as it is, different at every step (so no
    // two steps share it): each step keeps that text once, as its stdout
    // and as its answer, and reads back as the answer it judged.
    let sb = Sandbox::example();
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!([
            "sh",
            "-c",
            r#"echo "{\"summary\": \"attempt $MODIX_ATTEMPT\",  \"passed\": true}""#
        ]);
        v["agents"]["tester"]["manifest"]["output_mode"] = "json".into();
    });
    sb.write(".modix/fsm/long_loop.toml", &long_loop(3));
    let out = sb
        .modix()
        .args(["go", "--json", "--workflow", "long_loop", "loop"])
        .output()
        .unwrap();
    let r = GoResult::parse(&out);
    assert_eq!(r.code, Some(0), "{}", output_text(&out));
    let db = sb.root().join(".modix/modix.db");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let shared: Vec<(i64, i64)> = conn
        .prepare("SELECT stdout, parsed_output FROM invocations ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(shared.len(), 4);
    assert!(
        shared.iter().all(|(out, answer)| out == answer),
        "{shared:?}"
    );
    for attempt in 1..=4 {
        let text = format!("attempt {attempt}");
        let blobs: i64 = conn
            .query_row(
                "SELECT count(*) FROM blobs WHERE instr(text, ?1) AND NOT instr(text, 'came_from')",
                [&text],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(blobs, 1, "{text}");
        let inv = sb.invocation(&r.run_id(), attempt);
        assert_eq!(
            inv["parsed_output"],
            serde_json::json!({"passed": true, "summary": text})
        );
    }
}

/// A run long enough that its log is copied into the database several
/// times (by the store's checkpoint thread and the commits after it),
/// killed with SIGKILL at random moments and resumed each time, ends with
/// every step once, no gap, and a database SQLite finds intact.
#[test]
fn kill_nine_at_random_through_checkpoints_then_resume_loses_no_step() {
    let sb = Sandbox::example();
    echo_tester(&sb);
    const LOOPS: u32 = 500;
    sb.write(".modix/fsm/long_loop.toml", &long_loop(LOOPS));
    // Output not read (a pipe would fill and stall the run).
    let start = |args: &[&str]| {
        sb.command(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn modix")
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut child = start(&["go", "--workflow", "long_loop", "loop through checkpoints"]);
    let db = sb.root().join(".modix/modix.db");
    let mut run = String::new();
    for kill in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(150 + next() % 600));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if run.is_empty() {
            let runs = sb.runs();
            let Some(id) = runs[0]["run_id"].as_str() else {
                child = start(&["go", "--workflow", "long_loop", "loop through checkpoints"]);
                continue;
            };
            run = id.to_owned();
        }
        let done = sb.runs()[0]["status"] == "succeeded";
        eprintln!("seed {seed}: kill {kill}, run done: {done}");
        if done {
            break;
        }
        child = start(&["resume", &run]);
    }
    let _ = child.kill();
    let _ = child.wait();
    if sb.runs()[0]["status"] != "succeeded" {
        let r = sb.resume_json(&run);
        assert_eq!(r.code, Some(0), "seed {seed}: {}", r.stderr);
    }
    let history = sb.history_json(&run);
    let steps = history["transitions"].as_array().unwrap();
    let seqs: Vec<u64> = steps.iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "seed {seed}"
    );
    let again = steps.iter().filter(|t| t["event"] == "again").count();
    assert_eq!(again as u32, LOOPS + 1, "seed {seed}: every loop once");
    assert_eq!(steps.last().unwrap()["to"], "DONE", "seed {seed}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok", "seed {seed}");
}

/// The store keeps its write-ahead log between runs (so the next run writes
/// over it instead of growing a new one), yet after a clean exit the
/// database file alone holds every step, and a second run reuses the log
/// without making it longer.
#[test]
fn a_run_leaves_its_log_for_the_next_and_the_database_whole() {
    let sb = Sandbox::example();
    let r = sb.go_json("Fix mean() in calc.py");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let db = sb.root().join(".modix/modix.db");
    let wal = sb.root().join(".modix/modix.db-wal");
    let kept = std::fs::metadata(&wal).expect("the log is kept").len();
    assert!(kept > 0);

    let alone = tempfile::tempdir().unwrap();
    std::fs::copy(&db, alone.path().join("modix.db")).unwrap();
    let conn = rusqlite::Connection::open(alone.path().join("modix.db")).unwrap();
    let steps: i64 = conn
        .query_row("SELECT count(*) FROM transitions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(steps, r.transitions.len() as i64, "the database file alone");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");

    // The first run's log (which made the schema too) has room for the
    // second's steps: written over, not grown.
    let again = sb.go_json("Fix mean() in calc.py");
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), kept, "the log grew");
    let out = sb.modix().args(["history"]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

/// Each step's frames reach the write-ahead log in one write, not two per
/// page (SQLite's own way: a frame's header, then its page): in the system
/// calls of a 30-step run, the writes to the log are about as many as the
/// commits (the fsyncs of the log), where they would be ~12 times as many.
/// The log then holds what a reader and a resume need: the run's history
/// reads back every step. (CI installs strace.)
#[test]
fn each_step_reaches_the_log_in_one_write() {
    let (sb, r, lines) = straced_loop("pwrite64,fdatasync,fsync");
    let log = format!("{}-wal>", sb.root().join(".modix/modix.db").display());
    let calls = |name: &str| {
        lines
            .lines()
            .filter(|l| l.contains(&log))
            .filter(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, c)| c.trim_start().starts_with(name))
            })
            .count()
    };
    let (writes, syncs) = (calls("pwrite64("), calls("fdatasync(") + calls("fsync("));
    assert!(syncs >= 30, "{syncs} syncs of the log\n{lines}");
    // A few more than the commits: the schema's creation (more than one
    // write's worth of frames) and the log's header when it starts over.
    assert!(
        writes <= syncs + 8,
        "{writes} writes to the log for {syncs} commits\n{lines}"
    );
    let run = r.summary["run_id"].as_str().expect("the run id");
    let history = sb.history_json(run);
    assert_eq!(
        history["transitions"].as_array().unwrap().len(),
        r.transitions.len()
    );
}

/// The files a run writes at every step (the context package, the
/// in-flight note, `state.json`) are never asked for their times or size:
/// Linux gives a file whose times were read fine-grained times at its next
/// change, and that moves the clock every other file's times come from
/// (multigrain timestamps), so the store's log got a new mtime at every
/// commit and, on a filesystem without a journal, its `fdatasync` wrote
/// the inode as well as the frames (~60 µs a step here; docs/performance.md,
/// fifteenth round). In the system calls of a 30-step run, no `stat` of any
/// of them that finds it. (CI installs strace.)
#[test]
fn the_files_rewritten_at_each_step_are_never_stated() {
    // Every stat-like call, by class: the names differ by architecture.
    let (_sb, r, lines) = straced_loop("%stat,%lstat,%fstat");
    assert!(r.transitions.len() > 30);
    let rewritten = ["context.json", "inflight.json", "state.json"];
    let stated: Vec<&str> = lines
        .lines()
        .filter(|l| rewritten.iter().any(|f| l.contains(&format!("/{f}"))))
        // A file looked for and not there has no times to read.
        .filter(|l| !l.contains("= -1 ENOENT"))
        .collect();
    assert!(stated.is_empty(), "{}", stated.join("\n"));
}

/// Every invocation's context package reads back from `history` as its
/// agent read it, while what it quotes of the run's messages (the other
/// states' outputs, a shared agent's whole history) is stored once, in the
/// messages, not again in each invocation's row.
#[test]
fn a_context_reads_back_as_its_agent_saw_it_and_stores_each_message_once() {
    let sb = Sandbox::example();
    // Every agent shares the run's messages (no manifest says otherwise).
    sb.edit_json(".modix/agents.json", |v| {
        for agent in v["agents"].as_object_mut().unwrap().values_mut() {
            agent["manifest"].as_object_mut().unwrap().remove("context");
        }
    });
    sb.write(
        "../home/settings.json",
        "{ \"context_mode\": \"shared\" }\n",
    );
    let seen = sb.dir.path().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let original = std::fs::read_to_string(sb.root().join("agents/scripted-agent")).unwrap();
    let (shebang, rest) = original.split_once('\n').unwrap();
    sb.agent_script(&format!(
        "{shebang}\nn=$(ls {dir} | grep -c \"^$MODIX_STATE-\" || true)\ncp \"$MODIX_CONTEXT\" {dir}/$MODIX_STATE-$((n + 1)).json\n{rest}",
        dir = seen.display()
    ));
    let r = sb.go_json("Fix mean()");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run = r.run_id();
    // Planner, executor, tester (a command, not the scripted agent), then
    // the executor and the tester again.
    let mut compared = 0;
    let mut count = 0;
    for n in 1.. {
        let out = sb
            .modix()
            .args(["history", &run, "--invocation", &n.to_string(), "--json"])
            .output()
            .unwrap();
        if !out.status.success() {
            break;
        }
        count = n;
        let inv: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let stored = &inv["context"];
        assert!(stored["history"].as_array().unwrap().len() >= n, "{stored}");
        for (_, o) in stored["outputs"].as_object().unwrap() {
            assert!(
                o.get("output").is_some() && o.get("output_blob").is_none(),
                "{o}"
            );
        }
        let file = seen.join(format!(
            "{}-{}.json",
            inv["state"].as_str().unwrap(),
            inv["attempt"]
        ));
        if let Ok(text) = std::fs::read_to_string(file) {
            let saw: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(stored, &saw, "invocation {n}");
            compared += 1;
        }
    }
    assert_eq!((count, compared), (5, 3));
    // Each step's row holds the references, not the payloads: the plan
    // (the first output) is in no invocation's stored step part.
    let db = sb.root().join(".modix/modix.db");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let plan_in_rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM invocations WHERE instr(context_now, 'divides by len(values) + 1')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let quoting_rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM invocations WHERE instr(context_now, '\"payload_blob\"')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(plan_in_rows, 0);
    assert_eq!(quoting_rows, count as i64);
    drop(conn);
    // A reference to a blob the store lacks (a damaged file) is said as
    // such, with the store's path, not taken for a missing invocation.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE invocations SET context_now =              json_set(context_now, '$.history[0].payload_blob', 999999) WHERE n = 2",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let out = sb
        .modix()
        .args(["history", &run, "--invocation", "2"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("invocation 2 of run")
            && text.contains("blob 999999, which is not in the store"),
        "{text}"
    );
    assert!(text.contains("modix.db"), "{text}");
    assert!(!text.contains("no invocation"), "{text}");
}

/// A FIFO where the run database belongs: every command that reads or
/// writes the record says so at once instead of waiting on it forever.
#[test]
fn a_fifo_in_place_of_the_record_is_named_not_waited_on() {
    let sb = Sandbox::example();
    let db = sb.root().join(".modix/modix.db");
    nix::unistd::mkfifo(&db, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for args in [
        &["history"][..],
        &["status"],
        &["history", "last"],
        &["go", "Fix mean()"],
    ] {
        let t0 = std::time::Instant::now();
        let out = sb
            .modix()
            .args(args)
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(!out.status.success(), "{args:?}\n{text}");
        assert!(
            text.contains("is a FIFO (named pipe), not a file"),
            "{args:?}\n{text}"
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{args:?}"
        );
    }
}

#[test]
fn a_record_removed_under_a_running_run_is_never_reported_as_made() {
    let sb = Sandbox::example();
    let (marker, go_on) = (sb.dir.path().join("executing"), sb.dir.path().join("go-on"));
    crate::scenarios::agent(
        &sb,
        &format!(
            "    touch {m}\n    for i in $(seq 100); do [ -e {g} ] && break; sleep 0.1; done\n{ok}",
            m = marker.display(),
            g = go_on.display(),
            ok = crate::scenarios::EXECUTOR_OK
        ),
    );
    crate::scenarios::passing_tester(&sb);
    let child = sb.spawn(&["go", "a run whose record goes"]);
    crate::scenarios::wait_for(&marker);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(sb.root().join(format!(".modix/modix.db{suffix}")));
    }
    std::fs::write(&go_on, "").unwrap();
    let out = crate::scenarios::finished_within(child, "the run");
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("was removed or replaced while this run went on"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_key_an_agent_prints_escaped_inside_json_is_redacted_too() {
    let sb = Sandbox::example();
    keyed(&sb);
    // A password-like key: JSON escapes its quote and backslash.
    let key = r#"s3cr3t"pa\ss-0123456789abcdef"#;
    let escaped = r#"s3cr3t\"pa\\ss-0123456789abcdef"#;
    sb.agent_script(
        r#"#!/bin/sh
cat > /dev/null
python3 -c 'import json, os; print(json.dumps({"type": "error", "message": "bad key: " + os.environ["ANTHROPIC_API_KEY"]}))'
exit 1
"#,
    );
    let out = sb
        .modix()
        .env("ANTHROPIC_API_KEY", key)
        .args(["go", "an agent quoting its key"])
        .output()
        .unwrap();
    let printed = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{printed}");
    let history = output_text(
        &sb.modix()
            .env("ANTHROPIC_API_KEY", key)
            .args(["history", "last", "--invocation", "1", "--json"])
            .output()
            .unwrap(),
    );
    assert!(
        history.contains("[REDACTED:ANTHROPIC_API_KEY]"),
        "{history}"
    );
    for (what, text) in [("go", printed.as_bytes()), ("history", history.as_bytes())] {
        for form in [key, escaped, &escaped[..12]] {
            assert!(
                !text.windows(form.len()).any(|w| w == form.as_bytes()),
                "{what}: {form}"
            );
        }
    }
    for (path, bytes) in files(&sb.root().join(".modix")) {
        assert!(
            !bytes.windows(12).any(|w| w == &escaped.as_bytes()[..12]),
            "{} holds the escaped key",
            path.display()
        );
    }
}

#[test]
fn a_damaged_record_says_how_to_go_on() {
    let sb = Sandbox::example();
    sb.modix().arg("history").assert().success();
    std::fs::write(sb.root().join(".modix/modix.db"), vec![0x5a; 8192]).unwrap();
    for args in [&["history"][..], &["go", "Fix mean()"]] {
        let out = sb.modix().args(args).output().unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {text}");
        assert!(
            text.contains("help: the run database is damaged: move .modix/modix.db"),
            "{args:?}: {text}"
        );
    }
}
