//! Shared helpers for the integration tests: a temp project with an isolated
//! environment (its own MODIX_HOME, PATH and no API keys), and the binary.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use tempfile::TempDir;

/// Variables that must not leak from the developer's machine into a test.
const SCRUBBED: [&str; 10] = [
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MODIX_PROJECT",
    "MODIX_DEFAULT_SHELL",
    "MODIX_DEFAULT_BRAIN",
    "MODIX_LOG",
    "MODIX_COLOR",
];

/// A temp directory holding a project, a fake home and a `bin/` put first on PATH.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["project", "home", "bin"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        Sandbox { dir }
    }

    /// A sandbox with `modix init` already run in the project.
    pub fn initialized() -> Self {
        let sb = Sandbox::new();
        sb.modix().arg("init").assert().success();
        sb
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// `modix` run in the project, with an environment that knows nothing of the host.
    pub fn modix(&self) -> Command {
        let mut cmd = Command::cargo_bin("modix").expect("binary");
        cmd.current_dir(self.root())
            .env("MODIX_HOME", self.dir.path().join("home"))
            .env("HOME", self.dir.path().join("home"))
            .env("NO_COLOR", "1")
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin().display()),
            );
        for var in SCRUBBED {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `modix ARGS` as a plain command (no input), with the same
    /// environment as [`Sandbox::modix`].
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("modix"));
        for (k, v) in self.modix().get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.current_dir(self.root())
            .args(args)
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// `modix ARGS` started in the background, with the same environment as
    /// [`Sandbox::modix`] and piped output (for signals and concurrency tests).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        let mut cmd = self.command(args);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // As from a terminal: a test runner started as a background job has
        // SIGINT ignored, and an ignored signal sent before modix's `main`
        // runs is discarded — the signal tests would then depend on where
        // they were run from.
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                use nix::sys::signal::{SigHandler, Signal, signal};
                for sig in [Signal::SIGINT, Signal::SIGTERM] {
                    signal(sig, SigHandler::SigDfl).map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
        cmd.spawn().expect("spawn modix")
    }

    /// `modix history RUN --invocation N --json`, which must succeed.
    pub fn invocation(&self, run: &str, n: u32) -> serde_json::Value {
        let out = self
            .modix()
            .args(["history", run, "--invocation", &n.to_string(), "--json"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", output_text(&out));
        serde_json::from_slice(&out.stdout).expect("json")
    }

    /// `modix history --json`: the runs, newest first.
    pub fn runs(&self) -> serde_json::Value {
        let out = self
            .modix()
            .args(["history", "--json"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", output_text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["schema_version"], 1, "{v}");
        v["runs"].clone()
    }

    /// One run's record, as `modix history RUN --json` prints it.
    pub fn history_json(&self, run: &str) -> serde_json::Value {
        let out = self
            .modix()
            .args(["history", run, "--json"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", output_text(&out));
        serde_json::from_slice(&out.stdout).expect("json")
    }

    /// Writes a file under the project root (parents created).
    pub fn write(&self, rel: &str, text: &str) {
        write_file(&self.root().join(rel), text);
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).expect("read")
    }

    /// Puts an executable script called `name` in the sandbox's `bin/`.
    pub fn fake_bin(&self, name: &str, script: &str) -> PathBuf {
        let path = self.bin().join(name);
        write_file(&path, script);
        make_executable(&path);
        path
    }

    /// Edits a JSON file of the project in place.
    pub fn edit_json(&self, rel: &str, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut v: serde_json::Value = serde_json::from_str(&self.read(rel)).expect("json");
        edit(&mut v);
        self.write(rel, &serde_json::to_string_pretty(&v).expect("json"));
    }
}

pub fn write_file(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

pub fn make_executable(path: &Path) {
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// stdout + stderr of an assertion, as text.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Copies a directory tree (files and folders; skips run records).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if [
            "modix.db",
            "modix.db-wal",
            "modix.db-shm",
            "runs",
            // Written by a run of the example (README's quickstart), ignored
            // by git: a sandbox starts without it, as a clean clone does.
            "state.json",
            "__pycache__",
        ]
        .iter()
        .any(|s| name == *s)
        {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

impl Sandbox {
    /// A sandbox whose project is a copy of `examples/bugfix`.
    pub fn example() -> Self {
        let sb = Sandbox::new();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bugfix");
        copy_tree(&example, &sb.root());
        sb
    }

    /// Replaces the example's scripted agent with `script` (a POSIX sh body).
    /// It answers `--version` as the example's does (its shell requires
    /// `>=1.0.0`, and `go` checks that before it starts a run).
    pub fn agent_script(&self, script: &str) {
        let path = self.root().join("agents/scripted-agent");
        let script = match script.split_once('\n') {
            Some((shebang, rest)) if shebang.starts_with("#!") => format!(
                "{shebang}\nif [ \"${{1:-}}\" = --version ]; then echo 'scripted-agent 1.0.0'; exit 0; fi\n{rest}"
            ),
            _ => script.to_owned(),
        };
        write_file(&path, &script);
        make_executable(&path);
    }

    /// Runs `modix go EPIC --json` and returns (exit code, transition lines, summary, stderr).
    pub fn go_json(&self, epic: &str) -> GoResult {
        let out = self
            .modix()
            .args(["go", "--json", epic])
            .output()
            .expect("run");
        GoResult::parse(&out)
    }

    /// Runs `modix resume RUN --json`, as [`Sandbox::go_json`] does `go`.
    pub fn resume_json(&self, run: &str) -> GoResult {
        let out = self
            .modix()
            .args(["resume", "--json", run])
            .output()
            .expect("run");
        GoResult::parse(&out)
    }

    /// Resumes `run`, which must then finish: exit 0, `succeeded`.
    pub fn resume_to_success(&self, run: &str) -> GoResult {
        let r = self.resume_json(run);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert_eq!(r.summary["status"], "succeeded", "{:?}", r.summary);
        r
    }
}

/// What `modix go --json` printed.
#[derive(Debug)]
pub struct GoResult {
    pub code: Option<i32>,
    /// Every event line, in order.
    pub events: Vec<serde_json::Value>,
    pub transitions: Vec<serde_json::Value>,
    /// `on_enter` notifications as `STATE:name`.
    pub notifications: Vec<String>,
    pub summary: serde_json::Value,
    pub stderr: String,
}

impl GoResult {
    pub fn parse(out: &std::process::Output) -> Self {
        let mut events = Vec::new();
        let mut transitions = Vec::new();
        let mut summary = serde_json::Value::Null;
        let mut notifications = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{}", output_text(out)));
            assert_eq!(v["schema_version"], 1, "{line}");
            match v["type"].as_str() {
                Some("transition") => transitions.push(v.clone()),
                Some("run_finished") => summary = v.clone(),
                Some("notification") => notifications.push(format!(
                    "{}:{}",
                    v["state"].as_str().unwrap_or_default(),
                    v["name"].as_str().unwrap_or_default()
                )),
                Some(
                    "ceiling" | "run_started" | "agent_started" | "workspace" | "notice"
                    | "retrying",
                ) => {}
                // The error that ended the stream, as one line.
                None if v.get("error").is_some() => {}
                _ => panic!("unexpected line {line}"),
            }
            events.push(v);
        }
        GoResult {
            code: out.status.code(),
            events,
            transitions,
            notifications,
            summary,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `FROM -event-> TO` for every transition.
    pub fn path(&self) -> Vec<String> {
        self.transitions
            .iter()
            .map(|t| {
                format!(
                    "{} -{}-> {}",
                    t["from"].as_str().unwrap(),
                    t["event"].as_str().unwrap(),
                    t["to"].as_str().unwrap()
                )
            })
            .collect()
    }

    pub fn run_id(&self) -> String {
        self.summary["run_id"].as_str().expect("run id").to_owned()
    }
}
