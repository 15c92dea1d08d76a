//! The git driver: every git command modix runs goes through [`Git`], as an
//! argv (never a shell), with an environment a user's shell cannot redirect and
//! modix's own identity (but for the commit `apply` makes on the user's
//! branch: the user's), no hooks, no pager, `-z` output. Also: the version
//! check, discovery of a folder's repository, dirty state, and the parsing of
//! `diff-tree` output into typed changes.
//!
//! Configuration: the user's global and system git config are *kept* (no
//! `GIT_CONFIG_NOSYSTEM`), because settings that change file contents —
//! `core.autocrlf`, `core.eol`, `filter.lfs.*`, `core.ignoreCase` — must be the
//! ones the user's own git uses, or the blobs modix records (and later applies
//! to the user's branch) would differ from what the user's git would write.
//! A run's git reads them as the run found them: a copy taken at its start,
//! named by `GIT_CONFIG_GLOBAL`/`GIT_CONFIG_SYSTEM` (see `pinned`), so what
//! an agent writes into the live files never reaches it.
//! What modix must decide itself it overrides with `-c` (highest precedence):
//! identity, hooks, signing, fsmonitor, automatic gc, path quoting, the
//! `ext::` transport; every command that prints a diff passes
//! `--no-ext-diff --no-textconv`. What no `-c` can override — a filter an
//! agent names, an attributes file, an include — is held to what the run
//! found: the user's global and system config (`pinned`), the repository's
//! in an in-place run (`settings`), and put back in the repositories modix
//! owns (`guard`).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{Result, WorkspaceError};

/// The oldest git modix supports (`worktree`, `restore`-era plumbing, `-z` everywhere).
pub const MIN_GIT: GitVersion = GitVersion::new(2, 30, 0);
/// `git merge-tree --write-tree`: conflict detection without touching any checkout.
pub const MERGE_TREE_GIT: GitVersion = GitVersion::new(2, 38, 0);
/// `git merge-tree --merge-base=`: squash applies only the run's own changes.
pub const MERGE_BASE_GIT: GitVersion = GitVersion::new(2, 40, 0);

/// Settings modix always decides, whatever the user's config says.
const FIXED_CONFIG: &[&str] = &[
    "core.quotePath=false",
    // A path that is not a folder: git finds no hook to run (post-checkout on
    // `worktree add`, pre-commit, …), and no empty folder has to be kept around.
    "core.hooksPath=/dev/null",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    // No daemon started per temporary worktree.
    "core.fsmonitor=false",
    // Our commands must never start a gc or maintenance in the user's repo.
    "gc.auto=0",
    "maintenance.auto=false",
    // No transport that runs a command (`ext::CMD` as a remote or
    // alternate's URL), and no signature checked by a `gpg.program` when
    // modix reads a log: programs a repository's config could name.
    "protocol.ext.allow=never",
    "log.showSignature=false",
];

/// modix's identity, on the commits it makes for itself (the steps of a
/// run, its baselines). A commit on the user's branch (`apply`) is the
/// user's: see [`Git::user_identity`].
const MODIX_IDENTITY: &[&str] = &[
    "user.name=modix",
    "user.email=modix@localhost",
    // author.*/committer.* win over user.*; a user's setting must not leak in.
    "author.name=modix",
    "author.email=modix@localhost",
    "committer.name=modix",
    "committer.email=modix@localhost",
];

/// The inherited variables git reads an identity from (they win over any
/// config): removed from modix's own commands, kept when asking git for the
/// user's identity.
const IDENTITY_ENV: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Inherited `GIT_*` variables that are kept: they say which git and which
/// config files to use, not which repository, index or identity.
const KEEP_ENV: &[&str] = &[
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
];

/// A git version, compared by (major, minor, patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GitVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl GitVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        GitVersion {
            major,
            minor,
            patch,
        }
    }

    /// Reads `git version 2.47.3`, `git version 2.39.3 (Apple Git-146)`,
    /// `git version 2.45.2.windows.1`.
    pub fn parse(text: &str) -> Option<Self> {
        let word = text.split_whitespace().nth(2)?;
        let mut parts = word.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(GitVersion::new(major, minor, patch))
    }
}

impl std::fmt::Display for GitVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Runs git. Cheap to clone; clones share the invocation counter and the
/// cached version.
#[derive(Clone, Debug)]
pub struct Git {
    program: OsString,
    env: Vec<(OsString, OsString)>,
    scrub: Vec<OsString>,
    calls: Arc<AtomicU64>,
    version: Arc<OnceLock<GitVersion>>,
}

impl Default for Git {
    fn default() -> Self {
        Git::new()
    }
}

impl Git {
    /// `git` from PATH, with every inherited `GIT_*` variable that could point
    /// it at another repository, index, object store or identity removed.
    pub fn new() -> Self {
        Git {
            program: "git".into(),
            env: Vec::new(),
            scrub: scrubbed(std::env::vars_os().map(|(k, _)| k)),
            calls: Arc::new(AtomicU64::new(0)),
            version: Arc::new(OnceLock::new()),
        }
    }

    /// An environment variable for every git command, e.g.
    /// `GIT_CONFIG_GLOBAL=/dev/null` to run independently of `$HOME`, or
    /// the run's copy of the user's config (see `pinned`).
    pub(crate) fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// How many git processes this driver (and its clones) has started.
    #[cfg(test)]
    pub fn invocations(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The installed git's version (asked once, then cached).
    pub fn version(&self) -> Result<GitVersion> {
        if let Some(v) = self.version.get() {
            return Ok(*v);
        }
        let out = self.cmd(Path::new(".")).arg("version").run_text()?;
        let v = GitVersion::parse(&out).ok_or_else(|| {
            WorkspaceError::GitMissing(format!("unreadable `git version`: {out:?}"))
        })?;
        Ok(*self.version.get_or_init(|| v))
    }

    /// The version, or [`WorkspaceError::GitTooOld`] naming `what` needs `min`.
    pub fn require(&self, min: GitVersion, what: &'static str) -> Result<GitVersion> {
        let found = self.version()?;
        if found < min {
            return Err(WorkspaceError::GitTooOld {
                found,
                needed: min,
                what,
            });
        }
        Ok(found)
    }

    /// A git command run in `cwd` (git discovers the repository from there).
    pub(crate) fn cmd(&self, cwd: &Path) -> GitCmd {
        self.command(cwd, true)
    }

    /// [`cmd`](Self::cmd), as modix (`modix_identity`) or with the
    /// identity the user's config and variables give.
    fn command(&self, cwd: &Path, modix_identity: bool) -> GitCmd {
        let mut cmd = Command::new(&self.program);
        cmd.current_dir(cwd);
        for k in self.scrub.iter() {
            if modix_identity || !is_identity_env(k) {
                cmd.env_remove(k);
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            // Read-only commands (status, diff) must not refresh and rewrite
            // the user's index behind their back.
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_ADVICE", "0")
            // `refs/replace/` would let an agent show modix (the judge, the
            // secret scan, `modix diff`) another tree than the one recorded,
            // published and applied: objects are read as they are.
            .env("GIT_NO_REPLACE_OBJECTS", "1");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.arg("--no-pager");
        let identity = if modix_identity { MODIX_IDENTITY } else { &[] };
        for kv in FIXED_CONFIG.iter().chain(identity) {
            cmd.arg("-c").arg(kv);
        }
        GitCmd {
            cmd,
            shown: Vec::new(),
            cwd: cwd.to_path_buf(),
            input: None,
            calls: self.calls.clone(),
        }
    }

    /// The identity git gives a commit the user makes in `repo`, resolved
    /// by git itself (the repository's config, the global one, the user's
    /// `GIT_AUTHOR_*`/`GIT_COMMITTER_*` and `EMAIL`), or `None` when git
    /// has none it would commit with (it would say "Please tell me who you
    /// are").
    pub(crate) fn user_identity(&self, repo: &Path) -> Result<Option<Identity>> {
        let mut lines = Vec::new();
        for var in ["GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"] {
            let (code, out) = self
                .command(repo, false)
                .args(["var", var])
                .run_codes(&[0, 128])?;
            match Identity::parse_line(&lossy(&out)) {
                Some(who) if code == 0 => lines.push(who),
                _ => return Ok(None),
            }
        }
        let committer = lines.pop();
        Ok(lines
            .pop()
            .zip(committer)
            .map(|(author, committer)| Identity { author, committer }))
    }

    /// A git command in a workspace context: its git dir, work tree, private
    /// index and tracking excludes.
    pub(crate) fn at(&self, ctx: &Ctx) -> GitCmd {
        let mut c = self.cmd(&ctx.cwd);
        if let Some(ex) = &ctx.excludes {
            c.cmd
                .arg("-c")
                .arg(format!("core.excludesFile={}", ex.display()));
        }
        if let Some(d) = &ctx.git_dir {
            c.cmd.arg(format!("--git-dir={}", d.display()));
        }
        if let Some(w) = &ctx.work_tree {
            c.cmd.arg(format!("--work-tree={}", w.display()));
        }
        if let Some(i) = &ctx.index {
            c.cmd.env("GIT_INDEX_FILE", i);
        }
        c
    }
}

/// The inherited variables to remove: every `GIT_*` but [`KEEP_ENV`] and
/// `GIT_TRACE*` (debugging output only).
fn scrubbed(keys: impl Iterator<Item = OsString>) -> Vec<OsString> {
    keys.filter(|k| {
        let k = k.to_string_lossy();
        k.starts_with("GIT_") && !KEEP_ENV.contains(&k.as_ref()) && !k.starts_with("GIT_TRACE")
    })
    .collect()
}

fn is_identity_env(key: &OsStr) -> bool {
    IDENTITY_ENV.iter().any(|v| key == OsStr::new(v))
}

/// Who a commit is by: git's author and committer, each as (name, email,
/// date), the date in git's own `@<seconds> <zone>` form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub author: (String, String, String),
    pub committer: (String, String, String),
}

impl Identity {
    /// `git var GIT_AUTHOR_IDENT`'s line: `Name <email> 1700000000 +0100`.
    fn parse_line(line: &str) -> Option<(String, String, String)> {
        let line = line.trim();
        let (who, date) = line.rsplit_once('>')?;
        let (name, email) = who.rsplit_once('<')?;
        Some((
            name.trim().to_owned(),
            email.to_owned(),
            format!("@{}", date.trim()),
        ))
    }
}

/// Where and how a workspace's git commands run. `index` is a private index
/// file (`GIT_INDEX_FILE`), so neither the user's nor the agent's index is
/// used; `excludes` is modix's `core.excludesFile` (user's global excludes plus
/// the tracking-ignore list).
#[derive(Clone, Debug, Default)]
pub(crate) struct Ctx {
    pub cwd: PathBuf,
    pub git_dir: Option<PathBuf>,
    pub work_tree: Option<PathBuf>,
    pub index: Option<PathBuf>,
    pub excludes: Option<PathBuf>,
}

impl Ctx {
    /// Plain: git discovers the repository from `cwd`, default index.
    pub fn at(cwd: impl Into<PathBuf>) -> Self {
        Ctx {
            cwd: cwd.into(),
            ..Ctx::default()
        }
    }

    /// The same place with the default index (the checkout's own).
    pub fn without_index(&self) -> Self {
        Ctx {
            index: None,
            excludes: None,
            ..self.clone()
        }
    }
}

/// Where a streamed command's stdout goes, piece by piece.
type Sink<'a> = dyn FnMut(&[u8]) + 'a;

/// One git invocation being built.
pub(crate) struct GitCmd {
    cmd: Command,
    shown: Vec<OsString>,
    cwd: PathBuf,
    input: Option<Vec<u8>>,
    calls: Arc<AtomicU64>,
}

impl GitCmd {
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(a.as_ref());
        self.shown.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    /// An environment variable for this command only.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Bytes for the command's standard input.
    pub fn input(mut self, bytes: Vec<u8>) -> Self {
        self.input = Some(bytes);
        self
    }

    fn described(&self) -> String {
        self.shown
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs it and returns whatever happened; only a failure to start is an error.
    pub fn output(self) -> Result<Output> {
        self.output_into(None)
    }

    /// [`output`](Self::output), with stdout handed to `sink` as it comes
    /// (then the output's stdout is empty).
    fn output_into(mut self, mut sink: Option<&mut Sink<'_>>) -> Result<Output> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        self.cmd.stdin(if self.input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        // A group of its own: a stop reaches git and what it started (a
        // filter, a hook) together, and the terminal's Ctrl-C reaches modix,
        // which decides (see `drain`). Its output is piped: it never needs
        // the terminal.
        std::os::unix::process::CommandExt::process_group(&mut self.cmd, 0);
        let stopped_before = crate::stops::caught();
        let mut child = self.cmd.spawn().map_err(|e| self.spawn_error(e))?;
        let group = child.id() as i32;
        let _forward = crate::stops::helper_group(group);
        // Written from a thread so a large input cannot deadlock against a
        // large output.
        let writer = match (self.input.take(), child.stdin.take()) {
            (Some(bytes), Some(mut stdin)) => Some(std::thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            })),
            _ => None,
        };
        let pipes = [
            child.stdout.take().map(std::os::fd::OwnedFd::from),
            child.stderr.take().map(std::os::fd::OwnedFd::from),
        ];
        let mut stdout = Vec::new();
        let (stderr, stopped) = drain(pipes, group, stopped_before, &mut |b| match &mut sink {
            Some(sink) => sink(b),
            None => stdout.extend_from_slice(b),
        });
        let status = child
            .wait()
            .map_err(|e| WorkspaceError::GitMissing(e.to_string()))?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        if stopped {
            return Err(WorkspaceError::Stopped {
                command: self.described(),
            });
        }
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    /// Runs it; a non-zero exit is [`WorkspaceError::Git`] with git's stderr.
    pub fn run(self) -> Result<Vec<u8>> {
        let command = self.described();
        let dir = self.cwd.clone();
        let out = self.output()?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(failure(command, dir, &out))
        }
    }

    /// [`run`](Self::run), stdout as trimmed text.
    pub fn run_text(self) -> Result<String> {
        let out = self.run()?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// Runs it with its stdout streamed to `sink` as it comes (memory stays
    /// bounded whatever git prints); a non-zero exit is an error.
    pub fn run_streamed(self, sink: &mut dyn FnMut(&[u8])) -> Result<()> {
        let command = self.described();
        let dir = self.cwd.clone();
        let out = self.output_into(Some(sink))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(failure(command, dir, &out))
        }
    }

    /// Runs it; exit codes in `ok` are answers (returned), others are errors.
    pub fn run_codes(self, ok: &[i32]) -> Result<(i32, Vec<u8>)> {
        let command = self.described();
        let dir = self.cwd.clone();
        let out = self.output()?;
        match out.status.code() {
            Some(c) if ok.contains(&c) => Ok((c, out.stdout)),
            _ => Err(failure(command, dir, &out)),
        }
    }

    /// Runs it with stdout and stderr inherited (git colours on a TTY and is
    /// plain when piped); for commands whose output is for the user.
    /// Runs it with each line of its output, as `show` makes it, printed
    /// on stdout; stderr goes to the user's.
    pub fn run_lines(mut self, show: impl Fn(&[u8]) -> String) -> Result<ExitStatus> {
        use std::io::BufRead as _;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = self.cmd.spawn().map_err(|e| self.spawn_error(e))?;
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut stdout = std::io::stdout().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                // A closed stdout (`| head`) ends the listing, not modix.
                Ok(_) if stdout.write_all(show(&line).as_bytes()).is_err() => break,
                Ok(_) => {}
            }
        }
        drop(lines);
        child
            .wait()
            .map_err(|e| WorkspaceError::GitMissing(e.to_string()))
    }

    /// A folder that is gone is not a missing git.
    fn spawn_error(&self, e: std::io::Error) -> WorkspaceError {
        if self.cwd.is_dir() {
            WorkspaceError::GitMissing(e.to_string())
        } else {
            WorkspaceError::Missing {
                path: self.cwd.clone(),
            }
        }
    }
}

/// How long git has, once told to stop, to remove its lock files and end
/// (then its group is killed), and how long modix then still reads what a
/// process that left the group holds open.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Reads both pipes to their end, as `wait_with_output` does, but wakes
/// every 100 ms to see whether a stop (Ctrl-C, SIGTERM) arrived since git
/// started: then git's group gets SIGTERM, SIGKILL after [`STOP_GRACE`],
/// and the pipes are let go after another. modix's own git is never what
/// keeps a stop waiting — a clean filter or a 10 GB file included. A stop
/// that came before git started is the run winding down: its git runs on.
/// Hands stdout to `out` as it comes; returns stderr, and whether git was
/// told to stop.
fn drain(
    mut pipes: [Option<std::os::fd::OwnedFd>; 2],
    group: i32,
    stopped_before: bool,
    out: &mut dyn FnMut(&[u8]),
) -> (Vec<u8>, bool) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::signal::{Signal, killpg};
    use std::os::fd::AsFd;
    let mut stderr = Vec::new();
    let mut told: Option<(std::time::Instant, bool)> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    while pipes.iter().any(Option::is_some) {
        let open: Vec<usize> = (0..2).filter(|&i| pipes[i].is_some()).collect();
        let readable: Vec<usize> = {
            let mut fds: Vec<PollFd<'_>> = open
                .iter()
                .filter_map(|&i| Some(PollFd::new(pipes[i].as_ref()?.as_fd(), PollFlags::POLLIN)))
                .collect();
            match poll(&mut fds, PollTimeout::from(100u16)) {
                Ok(n) if n > 0 => open
                    .iter()
                    .zip(&fds)
                    .filter(|(_, f)| f.revents().is_some_and(|e| !e.is_empty()))
                    .map(|(&i, _)| i)
                    .collect(),
                _ => Vec::new(),
            }
        };
        for i in readable {
            let Some(fd) = &pipes[i] else { continue };
            match nix::unistd::read(fd.as_fd(), &mut chunk) {
                Ok(n) if n > 0 && i == 0 => out(&chunk[..n]),
                Ok(n) if n > 0 => stderr.extend_from_slice(&chunk[..n]),
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Ok(_) | Err(_) => pipes[i] = None,
            }
        }
        if stopped_before || !crate::stops::caught() {
            continue;
        }
        let group = nix::unistd::Pid::from_raw(group);
        match told {
            None => {
                let _ = killpg(group, Signal::SIGTERM);
                told = Some((std::time::Instant::now(), false));
            }
            Some((at, false)) if at.elapsed() >= STOP_GRACE => {
                let _ = killpg(group, Signal::SIGKILL);
                told = Some((std::time::Instant::now(), true));
            }
            Some((at, true)) if at.elapsed() >= STOP_GRACE => break,
            Some(_) => {}
        }
    }
    (stderr, told.is_some())
}

/// A failed command as an error, with the first lines of git's stderr.
pub(crate) fn failure(command: String, dir: PathBuf, out: &Output) -> WorkspaceError {
    let text = String::from_utf8_lossy(&out.stderr);
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let more = lines.len().saturating_sub(6);
    lines.truncate(6);
    let mut stderr = lines.join(" / ");
    if more > 0 {
        stderr.push_str(&format!(" / … ({more} more lines)"));
    }
    if stderr.is_empty() {
        stderr = "git printed no error".into();
    }
    WorkspaceError::Git {
        command,
        dir,
        status: match out.status.code() {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".into(),
        },
        stderr,
    }
}

/// Splits `-z` output into records (the trailing empty one dropped).
pub(crate) fn nul_split(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .strip_suffix(b"\0")
        .unwrap_or(bytes)
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
}

pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where a folder sits in git: its work tree's top, the folder's path inside
/// it (the monorepo prefix, `""` or `"sub/dir/"`), the git dirs, and HEAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoInfo {
    pub toplevel: PathBuf,
    pub prefix: String,
    pub git_dir: PathBuf,
    pub common_dir: PathBuf,
    /// HEAD's commit; `None` for a repository with no commits (unborn HEAD).
    pub head: Option<String>,
}

/// The repository `dir` is in, or `None` when it is not inside a git work tree.
pub fn discover(git: &Git, dir: &Path) -> Result<Option<RepoInfo>> {
    let out = git
        .cmd(dir)
        .args([
            "rev-parse",
            "--is-inside-work-tree",
            "--show-toplevel",
            "--show-prefix",
            "--absolute-git-dir",
            "--git-common-dir",
        ])
        .output()?;
    if !out.status.success() {
        return match refusal(dir, &out.stderr) {
            Some(e) => Err(e),
            None => Ok(None),
        };
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    if lines.first() != Some(&"true") || lines.len() < 5 {
        return Ok(None);
    }
    let toplevel = PathBuf::from(lines[1]);
    let prefix = lines[2].to_owned();
    let git_dir = PathBuf::from(lines[3]);
    let common = Path::new(lines[4]);
    let common_dir = if common.is_absolute() {
        common.to_path_buf()
    } else {
        dir.join(common)
    };
    let common_dir = common_dir.canonicalize().unwrap_or(common_dir);
    Ok(Some(RepoInfo {
        toplevel,
        prefix,
        git_dir,
        common_dir,
        head: resolve_commit(git, &Ctx::at(dir), "HEAD")?,
    }))
}

/// Why `rev-parse` failed in `dir`, when not because `dir` is outside any
/// repository: git found one and refuses to use it (ownership, a broken
/// config or HEAD). Taking that for "no git here" would silently give the
/// project another workspace mode (a copy) and hide what git said.
fn refusal(dir: &Path, stderr: &[u8]) -> Option<WorkspaceError> {
    let text = String::from_utf8_lossy(stderr);
    // Outside any work tree (or in a bare repository or a `.git` folder,
    // which no project is): no git here, as when `--is-inside-work-tree`
    // says false.
    if text.contains("not a git repository") || text.contains("must be run in a work tree") {
        return None;
    }
    if text.contains("detected dubious ownership") {
        // git names the repository it refused: `… repository at '/path'`.
        let repo = text
            .split_once("repository at '")
            .and_then(|(_, rest)| rest.split_once('\''))
            .map_or_else(|| dir.to_path_buf(), |(path, _)| PathBuf::from(path));
        return Some(WorkspaceError::DubiousOwnership { repo });
    }
    let first: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    Some(WorkspaceError::GitRefuses {
        dir: dir.to_path_buf(),
        stderr: first.join(" / "),
    })
}

/// `rev` as a commit id, or `None` if it names no commit.
pub(crate) fn resolve_commit(git: &Git, ctx: &Ctx, rev: &str) -> Result<Option<String>> {
    let (code, out) = git
        .at(ctx)
        .args(["rev-parse", "-q", "--verify", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .run_codes(&[0, 1])?;
    Ok((code == 0).then(|| lossy(&out).trim().to_owned()))
}

/// The value of a ref, or `None` if it does not exist.
pub(crate) fn read_ref(git: &Git, ctx: &Ctx, name: &str) -> Result<Option<String>> {
    let (code, out) = git
        .at(ctx)
        .args(["rev-parse", "-q", "--verify", "--end-of-options", name])
        .run_codes(&[0, 1])?;
    Ok((code == 0).then(|| lossy(&out).trim().to_owned()))
}

/// The tree id of a commit.
pub(crate) fn tree_of(git: &Git, ctx: &Ctx, commit: &str) -> Result<String> {
    git.at(ctx)
        .arg("rev-parse")
        .arg(format!("{commit}^{{tree}}"))
        .run_text()
}

/// Sets `name` to `new` only if it is still `old` (`None`: must not exist).
pub(crate) fn update_ref(
    git: &Git,
    ctx: &Ctx,
    message: &str,
    name: &str,
    new: &str,
    old: Option<&str>,
) -> Result<()> {
    git.at(ctx)
        .args(["update-ref", "-m", message, name, new, old.unwrap_or("")])
        .run()
        .map(drop)
}

/// Makes a commit object (no hook runs: this is plumbing), by modix.
pub(crate) fn commit_tree(
    git: &Git,
    ctx: &Ctx,
    tree: &str,
    parents: &[&str],
    message: &str,
) -> Result<String> {
    commit_tree_by(git, ctx, (tree, parents), message, None)
}

/// [`commit_tree`] by `who` (modix when `None`): the variables beat the
/// identity modix's config sets.
pub(crate) fn commit_tree_by(
    git: &Git,
    ctx: &Ctx,
    (tree, parents): (&str, &[&str]),
    message: &str,
    who: Option<&Identity>,
) -> Result<String> {
    let mut c = git.at(ctx).arg("commit-tree").arg(tree);
    if let Some(who) = who {
        for (role, (name, email, date)) in [("AUTHOR", &who.author), ("COMMITTER", &who.committer)]
        {
            c = c
                .env(&format!("GIT_{role}_NAME"), name)
                .env(&format!("GIT_{role}_EMAIL"), email)
                .env(&format!("GIT_{role}_DATE"), date);
        }
    }
    for p in parents {
        c = c.arg("-p").arg(p);
    }
    c.arg("-F")
        .arg("-")
        .input(message.as_bytes().to_vec())
        .run_text()
}

/// Whether `ancestor` is an ancestor of (or equal to) `descendant`.
pub(crate) fn is_ancestor(git: &Git, ctx: &Ctx, ancestor: &str, descendant: &str) -> Result<bool> {
    let (code, _) = git
        .at(ctx)
        .args(["merge-base", "--is-ancestor", ancestor, descendant])
        .run_codes(&[0, 1])?;
    Ok(code == 0)
}

/// Paths with uncommitted changes: tracked changes (staged or not) and
/// untracked files that are not ignored, limited to `pathspec` if given.
/// Never writes the index (`GIT_OPTIONAL_LOCKS=0`).
pub fn dirty_paths(git: &Git, dir: &Path, pathspec: Option<&str>) -> Result<Vec<String>> {
    status_paths(git, &Ctx::at(dir), pathspec, true)
}

pub(crate) fn status_paths(
    git: &Git,
    ctx: &Ctx,
    pathspec: Option<&str>,
    untracked: bool,
) -> Result<Vec<String>> {
    let mut c = git.at(ctx).args([
        "status",
        "--porcelain=v1",
        "-z",
        "--no-renames",
        if untracked {
            "--untracked-files=all"
        } else {
            "--untracked-files=no"
        },
    ]);
    if let Some(p) = pathspec {
        c = c.arg("--").arg(p);
    }
    let out = c.run()?;
    Ok(nul_split(&out)
        .filter(|r| r.len() > 3)
        .map(|r| lossy(&r[3..]))
        .collect())
}

/// How a path changed between two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    Added,
    /// Content, mode or type (file ↔ symlink) changed.
    Modified,
    Deleted,
}

/// One changed path (relative to the workspace's top folder), with line counts
/// (`None` for binary files).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub path: String,
    pub status: ChangeStatus,
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A `diff-tree --raw` entry: the public [`Change`] plus what `apply` needs.
#[derive(Clone, Debug)]
pub(crate) struct DiffEntry {
    pub change: Change,
    pub raw_path: Vec<u8>,
    pub old_mode: String,
    pub old_oid: String,
    pub new_mode: String,
    pub new_oid: String,
}

/// `git diff-tree -r -z --raw --numstat --no-renames a b`: both formats in one
/// process (raw carries the status letter, modes and blob ids; numstat the
/// line counts). No rename detection, so a rename shows as delete + add and a
/// scope check sees both paths.
pub(crate) fn diff_trees(git: &Git, ctx: &Ctx, a: &str, b: &str) -> Result<Vec<DiffEntry>> {
    let out = git
        .at(ctx)
        .args([
            "diff-tree",
            "-r",
            "-z",
            "--raw",
            "--numstat",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            a,
            b,
        ])
        .run()?;
    Ok(parse_diff_tree(&out))
}

fn parse_diff_tree(out: &[u8]) -> Vec<DiffEntry> {
    let mut entries: Vec<DiffEntry> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut it = nul_split(out);
    while let Some(rec) = it.next() {
        if rec.first() == Some(&b':') {
            // ":<old mode> <new mode> <old oid> <new oid> <status>" then the path.
            let head = lossy(&rec[1..]);
            let f: Vec<&str> = head.split(' ').collect();
            let Some(path) = it.next() else { break };
            let status = match f.get(4).and_then(|s| s.chars().next()) {
                Some('A') => ChangeStatus::Added,
                Some('D') => ChangeStatus::Deleted,
                _ => ChangeStatus::Modified,
            };
            index.insert(path.to_vec(), entries.len());
            entries.push(DiffEntry {
                change: Change {
                    path: lossy(path),
                    status,
                    added: None,
                    removed: None,
                },
                raw_path: path.to_vec(),
                old_mode: f.first().unwrap_or(&"").to_string(),
                old_oid: f.get(2).unwrap_or(&"").to_string(),
                new_mode: f.get(1).unwrap_or(&"").to_string(),
                new_oid: f.get(3).unwrap_or(&"").to_string(),
            });
        } else {
            // "<added>\t<removed>\t<path>"; binary files say "-\t-".
            let mut parts = rec.splitn(3, |b| *b == b'\t');
            let (Some(a), Some(r), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if let Some(&i) = index.get(path) {
                let e: &mut DiffEntry = &mut entries[i];
                e.change.added = lossy(a).parse().ok();
                e.change.removed = lossy(r).parse().ok();
            }
        }
    }
    entries
}

/// The per-worktree and shared paths git uses for `names` (`--git-path`), made
/// absolute; git decides the layout, modix only stats them.
pub(crate) fn git_paths(git: &Git, ctx: &Ctx, names: &[&str]) -> Result<Vec<PathBuf>> {
    let mut c = git.at(ctx).arg("rev-parse");
    for n in names {
        c = c.arg("--git-path").arg(n);
    }
    let text = c.run_text()?;
    Ok(text
        .lines()
        .map(|l| {
            let p = Path::new(l);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                ctx.cwd.join(p)
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            GitVersion::parse("git version 2.47.3"),
            Some(GitVersion::new(2, 47, 3))
        );
        assert_eq!(
            GitVersion::parse("git version 2.39.3 (Apple Git-146)"),
            Some(GitVersion::new(2, 39, 3))
        );
        assert_eq!(
            GitVersion::parse("git version 2.45.2.windows.1"),
            Some(GitVersion::new(2, 45, 2))
        );
        assert_eq!(
            GitVersion::parse("git version 2.50"),
            Some(GitVersion::new(2, 50, 0))
        );
        assert_eq!(GitVersion::parse("nonsense"), None);
        assert!(GitVersion::new(2, 38, 0) > GitVersion::new(2, 30, 9));
    }

    #[test]
    fn reads_git_var_identity_lines() {
        assert_eq!(
            Identity::parse_line("Ann O'Neil <ann@example.com> 1700000000 +0100\n"),
            Some((
                "Ann O'Neil".into(),
                "ann@example.com".into(),
                "@1700000000 +0100".into()
            ))
        );
        assert_eq!(Identity::parse_line("no identity"), None);
    }

    #[test]
    fn parses_raw_and_numstat_together() {
        let out = [
            &b":100644 100644 aaaa bbbb M\0a.txt\0"[..],
            b":100644 000000 cccc 0000 D\0bin\0",
            b":000000 120000 0000 dddd A\0link\0",
            b"2\t1\ta.txt\0",
            b"-\t-\tbin\0",
            b"1\t0\tlink\0",
        ]
        .concat();
        let e = parse_diff_tree(&out);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].change.status, ChangeStatus::Modified);
        assert_eq!((e[0].change.added, e[0].change.removed), (Some(2), Some(1)));
        assert_eq!(e[1].change.status, ChangeStatus::Deleted);
        assert_eq!((e[1].change.added, e[1].change.removed), (None, None));
        assert_eq!(e[1].old_oid, "cccc");
        assert_eq!(e[2].change.status, ChangeStatus::Added);
        assert_eq!(e[2].change.path, "link");
    }

    #[test]
    fn inherited_variables_that_redirect_git_are_removed() {
        let keys = [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_COMMON_DIR",
            "GIT_NAMESPACE",
            "GIT_CONFIG_PARAMETERS",
            "GIT_AUTHOR_NAME",
            "GIT_COMMITTER_EMAIL",
            "GIT_CONFIG_GLOBAL",
            "GIT_EXEC_PATH",
            "GIT_TRACE2_EVENT",
            "HOME",
        ];
        let removed = scrubbed(keys.iter().map(OsString::from));
        let removed: Vec<&str> = removed.iter().map(|k| k.to_str().unwrap()).collect();
        assert_eq!(removed, &keys[..10]);
    }

    /// Programs a repository's config names that modix's own git must not
    /// run: an `ext::` remote the config allows, a `gpg.program` that
    /// `log.showSignature` would run on a signed commit.
    #[test]
    fn a_repositorys_config_runs_no_transport_or_signature_program() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, ran) = (tmp.path().join("r"), tmp.path().join("ran"));
        let git = Git::new()
            .with_env("GIT_CONFIG_GLOBAL", "/dev/null")
            .with_env("GIT_CONFIG_NOSYSTEM", "1");
        git.cmd(tmp.path())
            .args(["init", "-q"])
            .arg(&repo)
            .run()
            .unwrap();
        let script = tmp.path().join("planted");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh
touch {}
",
                ran.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let tree = git.cmd(&repo).args(["write-tree"]).run_text().unwrap();
        let signed = format!(
            "tree {tree}\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n -----END PGP SIGNATURE-----\n\nsigned\n"
        );
        let commit = git
            .cmd(&repo)
            .args(["hash-object", "-t", "commit", "-w", "--stdin"])
            .input(signed.into_bytes())
            .run_text()
            .unwrap();
        for kv in [
            ["protocol.ext.allow", "always"],
            ["remote.x.url", &format!("ext::{} %S", script.display())],
            ["log.showSignature", "true"],
            ["gpg.program", &script.display().to_string()],
        ] {
            git.cmd(&repo).arg("config").args(kv).run().unwrap();
        }
        let _ = git.cmd(&repo).args(["fetch", "-q", "x"]).output().unwrap();
        git.cmd(&repo)
            .args(["log", "-1", "--format=raw", &commit])
            .run()
            .unwrap();
        assert!(!ran.exists(), "modix's git ran a program the config named");
    }

    #[test]
    fn a_too_old_git_is_named_with_what_needs_the_newer_one() {
        let git = Git::new();
        let err = git
            .require(GitVersion::new(99, 0, 0), "time travel")
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("time travel needs git 99.0.0 or newer"),
            "{msg}"
        );
        assert!(git.require(MIN_GIT, "workspaces").is_ok());
    }

    #[test]
    fn the_driver_counts_and_reports_failures() {
        let git = Git::new();
        let before = git.invocations();
        let v = git.version().unwrap();
        assert!(v >= MIN_GIT, "git {v} is older than {MIN_GIT}");
        let tmp = tempfile::tempdir().unwrap();
        let err = git
            .cmd(tmp.path())
            .args(["rev-parse", "HEAD"])
            .run()
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`git rev-parse HEAD` failed"), "{msg}");
        assert!(msg.contains("not a git repository"), "{msg}");
        assert_eq!(git.invocations(), before + 2);
        assert!(discover(&git, tmp.path()).unwrap().is_none());
    }
}
