//! Running `modix` as a person does, on a terminal: through util-linux
//! `script` (a pseudo-terminal, for what is printed) or tmux (a real
//! terminal emulator, for what is left on the screen). Tests skip with a
//! note when the tool is missing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::Sandbox;

/// `s` quoted for `sh`.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn modix_line(args: &[&str]) -> String {
    let modix = assert_cmd::cargo::cargo_bin("modix");
    let mut line = quoted(&modix.display().to_string());
    for a in args {
        line.push(' ');
        line.push_str(&quoted(a));
    }
    line
}

/// A command with the sandbox's environment (isolated HOME, PATH, no keys).
fn with_sandbox_env(sb: &Sandbox, program: &str) -> Command {
    let mut cmd = Command::new(program);
    for (k, v) in sb.modix().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.current_dir(sb.root())
        .env("TERM", "xterm")
        .env("TZ", "UTC");
    cmd
}

/// What `modix ARGS` printed on a terminal `cols` wide (stdout and stderr
/// together, as a terminal shows them, `\r\n` as `\n`), and its exit code.
/// `envs` go on top of the sandbox's (`NO_COLOR` is set unless removed
/// with an empty value). `None` when `script` is not installed.
pub fn on_terminal(
    sb: &Sandbox,
    args: &[&str],
    cols: usize,
    envs: &[(&str, &str)],
) -> Option<(Option<i32>, String)> {
    if which::which("script").is_err() {
        eprintln!("note: `script` (util-linux) not found; the terminal test is skipped");
        return None;
    }
    let mut cmd = with_sandbox_env(sb, "script");
    cmd.env("COLUMNS", cols.to_string());
    for (k, v) in envs {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .args(["-qec", &modix_line(args), "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    Some((out.status.code(), text))
}

/// A tmux server of its own running `modix ARGS` in a `cols`×`rows` window.
pub struct Screen {
    socket: String,
}

impl Screen {
    /// `None` when tmux is not installed.
    pub fn start(sb: &Sandbox, args: &[&str], cols: usize, rows: usize) -> Option<Screen> {
        if which::which("tmux").is_err() {
            eprintln!("note: tmux not found; the terminal test is skipped");
            return None;
        }
        let socket = format!(
            "modix-test-{}-{}",
            std::process::id(),
            sb.dir.path().file_name()?.to_string_lossy()
        );
        // The command ends in a pause so its last screen can still be read.
        let line = format!("{}; echo \"[exit $?]\"; sleep 60", modix_line(args));
        let status = with_sandbox_env(sb, "tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &cols.to_string(), "-y", &rows.to_string(), &line])
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux did not start");
        Some(Screen { socket })
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the window shows now.
    pub fn text(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    /// Types `keys` (tmux key names, e.g. `C-c`).
    pub fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", keys]);
    }

    /// Waits until the window shows `needle` (or the marker file exists);
    /// panics with the screen after 30 s.
    pub fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "never showed {needle:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_for_file(&self, marker: &Path) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marker.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared:\n{}",
                marker.display(),
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// Lines longer than `cols` terminal columns (ANSI escapes not counted).
pub fn too_wide(text: &str, cols: usize) -> Vec<String> {
    let ansi = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").unwrap();
    text.lines()
        .map(|l| ansi.replace_all(l, "").into_owned())
        .filter(|l| l.chars().count() > cols)
        .collect()
}
