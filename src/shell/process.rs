//! Running one agent process: spawn it directly (never through a shell) with
//! exactly the environment we choose, feed stdin, capture bounded output, and
//! make sure that when we stop it, it and everything it started is gone.
//!
//! The child leads its own process group, so stopping means signalling the
//! group: SIGTERM, a grace period, then SIGKILL (the way cargo-nextest stops
//! tests). Agent CLIs start node, language servers, test runners and shells;
//! killing only the leader would leave those running.
//!
//! Lifetimes of the group:
//! - Normal exit, pipes closed soon after: leftovers that detached from our
//!   pipes (daemons) are left alone — they are not our business.
//! - Normal exit, but something still holds stdout/stderr open: after
//!   [`PIPE_DRAIN`] we stop reading and SIGKILL the group, because otherwise
//!   the run would never finish.
//! - Timeout, idle timeout or cancellation: SIGTERM, grace, SIGKILL; and a
//!   final SIGKILL to the group once the leader is gone.
//! - The future is dropped mid-run: a guard SIGKILLs the group.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::Instant;

use super::capture::{CaptureBuffer, CaptureLimits, Captured};

/// How long to keep reading stdout/stderr after the leader exited, for
/// output still buffered in the pipes or written by its last children.
pub const PIPE_DRAIN: Duration = Duration::from_millis(500);

/// Longest line passed to the echo callback in one piece; longer lines are
/// split so a process printing one endless line cannot grow memory.
const ECHO_LINE_MAX: usize = 64 * 1024;

const READ_BUF: usize = 32 * 1024;

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Receives each output line (without its newline) as it arrives.
pub type EchoFn = Arc<dyn Fn(Stream, &str) + Send + Sync>;

/// What a line of output means to the runner (see [`ProcessSpec::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// Progress: it resets the idle timeout.
    Activity,
    /// A keep-alive ("Reconnecting…"): not progress, so a CLI that only
    /// says it is still waiting is stopped by the idle rule.
    KeepAlive,
    /// The process went into a wait or retry loop it will not leave in
    /// useful time: stop it now ([`EndReason::Stopped`]).
    Stop,
}

/// Classifies each complete output line as it arrives.
pub type LineWatch = Arc<dyn Fn(Stream, &str) -> LineKind + Send + Sync>;

/// Everything needed to run one process.
#[derive(Clone)]
pub struct ProcessSpec {
    /// Already resolved (no PATH lookup happens here).
    pub program: PathBuf,
    /// Passed as argv, never through a shell.
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment: nothing is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Written then closed; `None` gives the process `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Stop the process if it prints nothing (stdout or stderr) this long.
    pub idle_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL to the group.
    pub kill_grace: Duration,
    /// Per stream.
    pub capture: CaptureLimits,
    /// Live copy of each output line (for `-v`). Unredacted: the callback
    /// must redact before printing. Holds at most one partial line (≤ 64 KiB)
    /// per stream on top of the capture limits.
    pub echo: Option<EchoFn>,
    /// Called with the pid (= the process group) as soon as the process
    /// exists, so the caller can note it where a later modix finds it.
    pub on_spawn: Option<SpawnHook>,
    /// Says which lines are keep-alives (not activity for the idle timeout)
    /// and which mean "stop now"; without it every byte is activity.
    pub watch: Option<LineWatch>,
}

/// Receives the pid of a process that was just started, and when it
/// started ([`process_start_ticks`]'s measure; `None` if unknown).
pub type SpawnHook = Arc<dyn Fn(u32, Option<u64>) + Send + Sync>;

impl std::fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Deliberately omits env and stdin: they hold secrets and prompts.
        f.debug_struct("ProcessSpec")
            .field("program", &self.program)
            .field("args", &self.args.len())
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("kill_grace", &self.kill_grace)
            .field("capture", &self.capture)
            .field("echo", &self.echo.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the process stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// It exited (or was killed) on its own.
    Exited,
    WallTimeout,
    IdleTimeout,
    Cancelled,
    /// A line the watch said means "stop now".
    Stopped,
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EndReason::Exited => "exited",
            EndReason::WallTimeout => "timed out",
            EndReason::IdleTimeout => "idle timeout",
            EndReason::Cancelled => "cancelled",
            EndReason::Stopped => "stopped on a line of its output",
        })
    }
}

#[derive(Debug, Clone)]
pub struct ProcessOutcome {
    /// Exit code if the leader exited normally.
    pub exit_code: Option<i32>,
    /// Signal number if the leader was killed by a signal.
    pub signal: Option<i32>,
    pub end: EndReason,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
    pub pid: u32,
}

impl ProcessOutcome {
    /// Exited on its own with code 0.
    pub fn success(&self) -> bool {
        self.end == EndReason::Exited && self.exit_code == Some(0)
    }
}

#[derive(Debug, Error)]
pub enum SpawnError {
    #[error("cannot run `{}`: program not found", program.display())]
    NotFound { program: PathBuf },
    /// The program is a script whose `#!` interpreter does not exist (the
    /// OS reports that as "not found" too, which would blame the script).
    #[error("cannot run `{}`: its interpreter `{interpreter}` (from its #! line) was not found", program.display())]
    InterpreterNotFound {
        program: PathBuf,
        interpreter: String,
    },
    #[error("cannot run `{}`: permission denied (is it executable?)", program.display())]
    PermissionDenied { program: PathBuf },
    #[error("cannot run `{}`: working directory `{}` is not a directory", program.display(), cwd.display())]
    BadCwd { program: PathBuf, cwd: PathBuf },
    #[error("cannot run `{}`: {source}", program.display())]
    Io {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The interpreter a script's `#!` line names, when the script exists and
/// that interpreter does not (why spawning an existing file says ENOENT).
fn shebang_interpreter(program: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n]
        .strip_prefix(b"#!")?
        .split(|&b| b == b'\n')
        .next()?;
    let interpreter = String::from_utf8_lossy(line)
        .split_whitespace()
        .next()?
        .to_owned();
    (!std::path::Path::new(&interpreter).exists()).then_some(interpreter)
}

/// When process `pid` started, in clock ticks after boot (field 22 of
/// `/proc/<pid>/stat`): with the pid, it names one process even after the
/// pid is reused. `None` when the process is gone or /proc is unavailable.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = crate::fsutil::read_small(std::path::Path::new(&path), 4096).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// The variable that names, in an agent's environment, the modix process
/// that started it (its pid and start, as [`driver_id`] gives them).
pub const DRIVER_VAR: &str = "MODIX_DRIVER";

/// This process as [`DRIVER_VAR`] names it: `pid.start` (start in clock
/// ticks after boot), which names one process even after its pid is reused.
pub fn driver_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let me = std::process::id();
        format!("{me}.{}", process_start_ticks(me).unwrap_or(0))
    })
}

/// Whether a [`driver_id`] names a process that still runs.
fn driver_alive(id: &[u8]) -> bool {
    let Some((pid, start)) = std::str::from_utf8(id).ok().and_then(|s| s.split_once('.')) else {
        return false;
    };
    match (pid.parse::<u32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => process_start_ticks(pid) == Some(start),
        _ => false,
    }
}

/// Processes (other than this one) whose environment holds the exact entry
/// `entry` (`NAME=value`) and whose driver (see [`DRIVER_VAR`]) is gone,
/// found through `/proc`: how a crashed run's leftovers are found once their
/// process group is no help — a daemon an agent started in a session of its
/// own keeps the environment it was given. The agents of a live modix (a
/// resume that took the run up a moment ago) are not leftovers, however the
/// run looked when the search began. Only processes this user may read are
/// seen.
pub fn processes_with_env(entry: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    let driver = format!("{DRIVER_VAR}=");
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            // An environment is at most a few hundred KiB (ARG_MAX).
            let path = std::path::PathBuf::from(format!("/proc/{pid}/environ"));
            crate::fsutil::read_small_bytes(&path, 4 << 20).is_ok_and(|env| {
                let mut vars = env.split(|&b| b == 0);
                vars.clone().any(|e| e == entry.as_bytes())
                    && !vars.any(|e| e.strip_prefix(driver.as_bytes()).is_some_and(driver_alive))
            })
        })
        .collect()
}

/// Stops every process [`processes_with_env`] finds for `entry`: TERM,
/// then KILL what is left after `grace`; looked for again after each, as a
/// dying process may fork. Returns how many were signalled.
pub fn stop_processes_with_env(entry: &str, grace: std::time::Duration) -> usize {
    use nix::sys::signal::{Signal, kill};
    let signal_all = |pids: &[u32], signal| {
        for &pid in pids {
            if let Ok(raw) = i32::try_from(pid) {
                let _ = kill(nix::unistd::Pid::from_raw(raw), signal);
            }
        }
    };
    let first = processes_with_env(entry);
    if first.is_empty() {
        return 0;
    }
    signal_all(&first, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    let mut left = first.clone();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = processes_with_env(entry);
        signal_all(&left, Signal::SIGTERM);
    }
    for _ in 0..3 {
        if left.is_empty() {
            break;
        }
        signal_all(&left, Signal::SIGKILL);
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = processes_with_env(entry);
    }
    first.len()
}

/// The boot clock (`CLOCK_BOOTTIME`, ns): what the kernel stamps a new
/// process's start with.
fn boot_ns() -> Option<u64> {
    use nix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
    u64::try_from(t.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(t.tv_nsec()).ok()?)
}

/// The start, in [`process_start_ticks`]'s measure, of a process forked
/// between the boot clock's readings `before` and `after`, when both fall
/// in one clock tick (10 ms): the kernel's own figure is that tick. Saves
/// reading `/proc/<pid>/stat` just after a spawn, which waits for the
/// child's `exec` (~15 µs, against ~2 µs later). `None` when the readings
/// straddle a tick, or the tick does not divide a second in nanoseconds.
fn start_ticks_between(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    static TICK_NS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let tick = (*TICK_NS.get_or_init(|| {
        use nix::unistd::{SysconfVar, sysconf};
        let hz = u64::try_from(sysconf(SysconfVar::CLK_TCK).ok()??).ok()?;
        (hz > 0 && 1_000_000_000 % hz == 0).then(|| 1_000_000_000 / hz)
    }))?;
    let (first, last) = (before? / tick, after? / tick);
    (first == last).then_some(first)
}

/// SIGKILLs the process group when dropped while armed, so a dropped
/// `run_process` future does not leave the agent's children running.
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        match killpg(self.pgid, sig) {
            // ESRCH: the whole group is already gone — fine.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid = %self.pgid, "killpg({sig}) failed: {e}"),
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// One output pipe being read: capture plus optional line echo.
struct Reader<R> {
    pipe: Option<R>,
    stream: Stream,
    capture: CaptureBuffer,
    line: Vec<u8>,
    echo: Option<EchoFn>,
    watch: Option<LineWatch>,
}

impl<R: AsyncRead + Unpin + 'static> Reader<R> {
    fn new(pipe: Option<R>, stream: Stream, spec: &ProcessSpec) -> Self {
        Self {
            pipe,
            stream,
            capture: CaptureBuffer::new(spec.capture),
            line: Vec::new(),
            echo: spec.echo.clone(),
            watch: spec.watch.clone(),
        }
    }

    fn is_open(&self) -> bool {
        self.pipe.is_some()
    }

    /// Read once into `buf`'s spare room (emptied first: never zeroed, so
    /// a short answer costs no 32 KiB of zeroes); `read_buf` is cancel-safe,
    /// so this can sit in a `select!`.
    async fn read(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        buf.clear();
        match &mut self.pipe {
            Some(p) => p.read_buf(buf).await,
            None => std::future::pending().await,
        }
    }

    /// Takes a chunk: captures it, echoes and watches its complete lines.
    /// Says whether it was activity and whether a line asked to stop.
    fn accept(&mut self, chunk: &[u8]) -> (bool, bool) {
        self.capture.push(chunk);
        if self.echo.is_none() && self.watch.is_none() {
            return (true, false);
        }
        let (mut active, mut stop) = (false, false);
        for &b in chunk {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.line).into_owned();
                self.line.clear();
                match self.watch.as_ref().map(|w| w(self.stream, &line)) {
                    Some(LineKind::KeepAlive) => {}
                    Some(LineKind::Stop) => stop = true,
                    Some(LineKind::Activity) | None => active = true,
                }
                if let Some(echo) = &self.echo {
                    echo(self.stream, &line);
                }
            } else {
                self.line.push(b);
                if self.line.len() >= ECHO_LINE_MAX {
                    // Split a too-long line between words, never inside
                    // one: half a key in each piece would escape redaction.
                    let cut = super::capture::word_end(&self.line);
                    let cut = if cut == 0 { self.line.len() } else { cut };
                    if let Some(echo) = &self.echo {
                        echo(self.stream, &String::from_utf8_lossy(&self.line[..cut]));
                    }
                    self.line.drain(..cut);
                }
            }
        }
        // A line still being written is progress until it proves otherwise.
        (active || !self.line.is_empty(), stop)
    }

    fn close(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            lay_aside(pipe);
        }
    }

    fn finish(self) -> Captured {
        if let Some(echo) = &self.echo
            && !self.line.is_empty()
        {
            echo(self.stream, &String::from_utf8_lossy(&self.line));
        }
        self.capture.finish()
    }
}

/// `now + d`, saturating far into the future instead of overflowing.
fn deadline(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    NotYet,
    Terminating { kill_at: Instant },
    Killed,
}

thread_local! {
    /// The ended process's read ends and handle ([`lay_aside`]).
    static LAID_ASIDE: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps an ended process's pipe or handle to be dropped once the next
/// process has started: dropping one takes it out of the runtime's poll set
/// and closes it, a few system calls each (~10 µs for the three), between
/// the agent's end and its step's commit, where everything counts
/// (docs/performance.md, twenty-seventh round). Only what holds nothing
/// back: a read end whose writer has gone or been killed, a handle whose
/// child was reaped (its kill-on-drop does nothing then; tokio's child
/// reaped is never signalled) — never the agent's stdin, whose close is
/// its end of input. At most one process's (three descriptors) wait here,
/// on the thread that ran it.
fn lay_aside(item: impl std::any::Any) {
    LAID_ASIDE.with_borrow_mut(|kept| kept.push(Box::new(item)));
}

/// Starts `spec`'s program in a process group of its own, with a clean
/// environment and piped output; the child and its pid (= its group's id).
fn spawn_group(spec: &ProcessSpec) -> Result<(tokio::process::Child, u32), SpawnError> {
    let program = spec.program.clone();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // Nothing to say (a command agent's empty prompt): `/dev/null`,
        // which reads as the same end of input without a pipe to make,
        // register and close.
        .stdin(if spec.stdin.as_ref().is_some_and(|s| !s.is_empty()) {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|source| match source.kind() {
        // Asked only once spawn failed (a stat less at every start): a
        // missing cwd fails it with ENOENT too, which would be misreported
        // as "program not found".
        _ if !spec.cwd.is_dir() => SpawnError::BadCwd {
            program: program.clone(),
            cwd: spec.cwd.clone(),
        },
        io::ErrorKind::NotFound => match shebang_interpreter(&program) {
            Some(interpreter) => SpawnError::InterpreterNotFound {
                program: program.clone(),
                interpreter,
            },
            None => SpawnError::NotFound {
                program: program.clone(),
            },
        },
        io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied {
            program: program.clone(),
        },
        _ => SpawnError::Io {
            program: program.clone(),
            source,
        },
    })?;
    let Some(pid) = child.id() else {
        return Err(SpawnError::Io {
            program,
            source: io::Error::other("child exited before its pid was known"),
        });
    };
    Ok((child, pid))
}

/// Run `spec` to completion, timeout or cancellation. Only failing to start
/// is an error; every way the process can end is a [`ProcessOutcome`].
///
/// Long on purpose: it is one `select!` loop over the pipes, stdin, the
/// child, the timers and cancellation, whose shared state (deadlines, kill
/// stage, drain window) is easier to check for races in one place than
/// spread over helpers.
pub async fn run_process(
    spec: &ProcessSpec,
    mut cancel: watch::Receiver<bool>,
) -> Result<ProcessOutcome, SpawnError> {
    let program = spec.program.clone();
    let before = spec.on_spawn.as_ref().and_then(|_| boot_ns());
    // A start that failed has no next process to wait for.
    let (mut child, pid) = spawn_group(spec).inspect_err(|_| drop(LAID_ASIDE.take()))?;
    super::reaper::started(pid, true);
    let start = Instant::now();
    let mut guard = GroupGuard {
        // A pid above i32::MAX cannot happen on Unix; 0 would signal our own group.
        pgid: Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
        armed: true,
    };
    tracing::debug!(pid, program = %program.display(), "spawned agent process");
    if let Some(hook) = &spec.on_spawn {
        let started = start_ticks_between(before, boot_ns()).or_else(|| process_start_ticks(pid));
        hook(pid, started);
    }
    // The last process's pipes and handle are closed now, while this one
    // runs, rather than on the step's path ([`lay_aside`]); after the hook,
    // which notes the new process's group for a crash's recovery at once.
    drop(LAID_ASIDE.take());

    let mut out = Reader::new(child.stdout.take(), Stream::Stdout, spec);
    let mut err = Reader::new(child.stderr.take(), Stream::Stderr, spec);
    let mut out_buf = Vec::with_capacity(READ_BUF);
    let mut err_buf = Vec::with_capacity(READ_BUF);

    // Written concurrently with reading, so a child that does not read its
    // stdin (or reads it only after printing a lot) cannot deadlock us.
    let stdin_pipe = child.stdin.take();
    let stdin_data = spec.stdin.as_deref();
    let stdin_task = async move {
        if let (Some(mut pipe), Some(data)) = (stdin_pipe, stdin_data) {
            match pipe.write_all(data).await {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
                Err(e) => tracing::debug!("writing agent stdin failed: {e}"),
            }
            // Dropping the pipe closes it: the child sees EOF.
        }
    };
    tokio::pin!(stdin_task);
    let mut stdin_done = false;

    let wall_deadline = deadline(start, spec.timeout);
    let mut last_activity = start;
    let mut status: Option<Option<ExitStatus>> = None; // Some(None): wait() failed
    let mut end: Option<EndReason> = None;
    let mut kill = Kill::NotYet;
    let mut drain_until: Option<Instant> = None;
    let mut cancel_alive = true;

    let start_kill =
        |reason: EndReason, end: &mut Option<EndReason>, kill: &mut Kill, guard: &GroupGuard| {
            tracing::debug!(pid, %reason, "stopping agent process group");
            *end = Some(reason);
            if spec.kill_grace.is_zero() {
                guard.signal(Signal::SIGKILL);
                *kill = Kill::Killed;
            } else {
                guard.signal(Signal::SIGTERM);
                *kill = Kill::Terminating {
                    kill_at: deadline(Instant::now(), spec.kill_grace),
                };
            }
        };

    if *cancel.borrow_and_update() {
        start_kill(EndReason::Cancelled, &mut end, &mut kill, &guard);
    }

    loop {
        if status.is_some() && !out.is_open() && !err.is_open() {
            break;
        }
        // The earliest moment something time-based must happen.
        let mut next = None::<Instant>;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if status.is_none() && end.is_none() {
            consider(wall_deadline);
            if let Some(idle) = spec.idle_timeout {
                consider(deadline(last_activity, idle));
            }
        }
        if let Kill::Terminating { kill_at } = kill {
            consider(kill_at);
        }
        if let Some(t) = drain_until {
            consider(t);
        }
        let sleep_until = next.unwrap_or_else(|| deadline(Instant::now(), Duration::MAX));

        tokio::select! {
            r = out.read(&mut out_buf), if out.is_open() => match r {
                Ok(0) | Err(_) => out.close(),
                Ok(n) => {
                    let (active, stop) = out.accept(&out_buf[..n]);
                    if active {
                        last_activity = Instant::now();
                    }
                    if stop && end.is_none() && status.is_none() {
                        start_kill(EndReason::Stopped, &mut end, &mut kill, &guard);
                    }
                }
            },
            r = err.read(&mut err_buf), if err.is_open() => match r {
                Ok(0) | Err(_) => err.close(),
                Ok(n) => {
                    let (active, stop) = err.accept(&err_buf[..n]);
                    if active {
                        last_activity = Instant::now();
                    }
                    if stop && end.is_none() && status.is_none() {
                        start_kill(EndReason::Stopped, &mut end, &mut kill, &guard);
                    }
                }
            },
            () = &mut stdin_task, if !stdin_done => stdin_done = true,
            r = child.wait(), if status.is_none() => {
                status = Some(r.map_err(|e| tracing::warn!(pid, "waiting for agent failed: {e}")).ok());
                drain_until = Some(deadline(Instant::now(), PIPE_DRAIN));
            },
            r = cancel.changed(), if cancel_alive && end.is_none() && status.is_none() => match r {
                Ok(()) if *cancel.borrow_and_update() => {
                    start_kill(EndReason::Cancelled, &mut end, &mut kill, &guard);
                }
                Ok(()) => {}
                // Sender gone: nobody can cancel any more.
                Err(_) => cancel_alive = false,
            },
            () = tokio::time::sleep_until(sleep_until) => {
                let now = Instant::now();
                if status.is_none() && end.is_none() {
                    if now >= wall_deadline {
                        start_kill(EndReason::WallTimeout, &mut end, &mut kill, &guard);
                    } else if spec.idle_timeout.is_some_and(|i| now >= deadline(last_activity, i)) {
                        start_kill(EndReason::IdleTimeout, &mut end, &mut kill, &guard);
                    }
                }
                if let Kill::Terminating { kill_at } = kill
                    && now >= kill_at {
                        guard.signal(Signal::SIGKILL);
                        kill = Kill::Killed;
                    }
                if drain_until.is_some_and(|t| now >= t) {
                    // The leader is gone but someone still holds our pipes.
                    tracing::debug!(pid, "pipes still open after exit; killing the group");
                    out.close();
                    err.close();
                    guard.signal(Signal::SIGKILL);
                }
            },
        }
    }

    // Whatever of the group outlived its leader (a background job the agent
    // started, a group we were stopping whose leader died from SIGTERM
    // first) ends with it; so do descendants that left the group.
    guard.signal(Signal::SIGKILL);
    guard.armed = false;
    super::reaper::started(pid, false);
    super::reaper::kill_adopted();

    lay_aside(child);
    let status = status.flatten();
    Ok(ProcessOutcome {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        end: end.unwrap_or(EndReason::Exited),
        stdout: out.finish(),
        stderr: err.finish(),
        duration: start.elapsed(),
        pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Mutex;

    /// A run's processes are leftovers only when the modix that started
    /// them is gone: the agents of a live one (a resume that took the run
    /// up while `stop` looked) are not, however the run looked.
    #[test]
    fn leftovers_are_the_processes_of_a_modix_that_is_gone() {
        let run = format!("MODIX_RUN_ID=leftover-test-{}", std::process::id());
        let (name, value) = run.split_once('=').unwrap();
        let sleeper = |driver: Option<&str>| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("30").env(name, value);
            if let Some(d) = driver {
                cmd.env(DRIVER_VAR, d);
            }
            cmd.spawn().unwrap()
        };
        // A driver that never ran: pid 1 did not start at tick 0.
        let mut children = [
            sleeper(Some(driver_id())),
            sleeper(Some("1.0")),
            sleeper(None),
            sleeper(Some("not a driver")),
        ];
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut found = processes_with_env(&run);
        found.sort_unstable();
        let mut gone: Vec<u32> = children[1..].iter().map(std::process::Child::id).collect();
        gone.sort_unstable();
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(found, gone);
    }

    fn spec(script: &str) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: None,
            timeout: Duration::from_secs(20),
            idle_timeout: None,
            kill_grace: Duration::from_millis(300),
            capture: CaptureLimits::default(),
            echo: None,
            on_spawn: None,
            watch: None,
        }
    }

    fn no_cancel() -> watch::Receiver<bool> {
        // The sender is dropped: the run must treat that as "never cancelled".
        watch::channel(false).1
    }

    /// Gone or a zombie (a zombie is dead; only its reaper is late).
    fn is_dead(pid: i32) -> bool {
        if nix::sys::signal::kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
            return true;
        }
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    async fn eventually_dead(pid: i32) -> bool {
        for _ in 0..40 {
            if is_dead(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    fn first_line_pid(c: &Captured) -> i32 {
        c.text()
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("script printed a pid")
    }

    #[tokio::test]
    async fn exit_code_and_output() {
        let got = run_process(&spec("echo out; echo err >&2; exit 3"), no_cancel())
            .await
            .unwrap();
        assert_eq!(got.end, EndReason::Exited);
        assert_eq!(got.exit_code, Some(3));
        assert_eq!(got.signal, None);
        assert_eq!(got.stdout.text(), "out\n");
        assert_eq!(got.stderr.text(), "err\n");
        assert!(!got.success());
    }

    #[tokio::test]
    async fn signal_is_reported() {
        let got = run_process(&spec("kill -KILL $$"), no_cancel())
            .await
            .unwrap();
        assert_eq!(got.end, EndReason::Exited);
        assert_eq!(got.exit_code, None);
        assert_eq!(got.signal, Some(9));
    }

    #[tokio::test]
    async fn environment_is_exactly_the_given_one() {
        let mut s = spec("echo \"$FOO|${HOME-unset}\"");
        s.env.push(("FOO".into(), "bar baz".into()));
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert_eq!(got.stdout.text(), "bar baz|unset\n");
    }

    #[tokio::test]
    async fn args_are_not_reinterpreted() {
        let mut s = spec("printf '%s|' \"$@\"");
        s.args
            .extend(["sh", "a b", "$(echo no)", "'q'"].map(OsString::from));
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert_eq!(got.stdout.text(), "a b|$(echo no)|'q'|");
    }

    /// An ended process's read ends and handle wait to be closed until the
    /// next process has started: one process's at most, on this thread.
    #[tokio::test]
    async fn an_ended_process_is_closed_once_the_next_has_started() {
        let waiting = || LAID_ASIDE.with_borrow(Vec::len);
        drop(LAID_ASIDE.take());
        for _ in 0..3 {
            let got = run_process(&spec("echo out; echo err >&2"), no_cancel())
                .await
                .unwrap();
            assert_eq!(got.stdout.text(), "out\n");
            assert_eq!(waiting(), 3, "stdout, stderr and the child's handle");
        }
        let missing = ProcessSpec {
            program: "/nonexistent/agent".into(),
            ..spec("true")
        };
        assert!(run_process(&missing, no_cancel()).await.is_err());
        assert_eq!(waiting(), 0, "a failed start closes them too");
    }

    #[tokio::test]
    async fn stdin_is_delivered_and_closed() {
        let mut s = spec("cat");
        s.stdin = Some(b"hello\nworld".to_vec());
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert_eq!(got.stdout.text(), "hello\nworld");
        assert!(got.success());
        // No stdin, or an empty one: /dev/null, so `cat` ends at once.
        let got = run_process(&spec("cat"), no_cancel()).await.unwrap();
        assert_eq!(got.stdout.text(), "");
        let mut s = spec("test -c /dev/stdin && cat");
        s.stdin = Some(Vec::new());
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert!(got.success(), "stdin is /dev/null");
        assert_eq!(got.stdout.text(), "");
    }

    #[tokio::test]
    async fn unread_stdin_does_not_deadlock() {
        let mut s = spec("head -c 100000 /dev/zero; exit 0");
        s.stdin = Some(vec![b'x'; 8 * 1024 * 1024]);
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert!(got.success());
        assert_eq!(got.stdout.total_bytes, 100_000);
    }

    #[tokio::test]
    async fn wall_timeout_kills_the_whole_group() {
        let mut s = spec("sleep 1000 & echo $!; sleep 1000");
        s.timeout = Duration::from_secs(1);
        let t0 = std::time::Instant::now();
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(got.end, EndReason::WallTimeout);
        assert_eq!(got.signal, Some(libc_sigterm()));
        let grandchild = first_line_pid(&got.stdout);
        assert!(
            eventually_dead(grandchild).await,
            "grandchild {grandchild} survived"
        );
        assert!(eventually_dead(got.pid as i32).await);
    }

    fn libc_sigterm() -> i32 {
        Signal::SIGTERM as i32
    }

    #[tokio::test]
    async fn term_ignoring_group_dies_after_grace() {
        // The ignore disposition is inherited by `sleep` too.
        let mut s = spec("trap '' TERM; sleep 1000 & echo $!; sleep 1000");
        s.timeout = Duration::from_millis(500);
        s.kill_grace = Duration::from_millis(500);
        let t0 = std::time::Instant::now();
        let got = run_process(&s, no_cancel()).await.unwrap();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert_eq!(got.end, EndReason::WallTimeout);
        assert_eq!(got.signal, Some(Signal::SIGKILL as i32));
        assert!(eventually_dead(first_line_pid(&got.stdout)).await);
    }

    #[tokio::test]
    async fn idle_timeout() {
        let mut s = spec("echo hi; sleep 1000");
        s.idle_timeout = Some(Duration::from_millis(400));
        let t0 = std::time::Instant::now();
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(4));
        assert_eq!(got.end, EndReason::IdleTimeout);
        assert_eq!(got.stdout.text(), "hi\n");
    }

    #[tokio::test]
    async fn steady_output_is_not_idle() {
        let mut s = spec("for i in 1 2 3 4 5 6; do echo $i >&2; sleep 0.1; done");
        s.idle_timeout = Some(Duration::from_millis(400));
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert_eq!(got.end, EndReason::Exited);
        assert_eq!(got.stderr.text(), "1\n2\n3\n4\n5\n6\n");
    }

    #[tokio::test]
    async fn cancel_stops_the_group() {
        let (tx, rx) = watch::channel(false);
        let s = spec("sleep 1000 & echo $!; sleep 1000");
        let t0 = std::time::Instant::now();
        let (got, ()) = tokio::join!(run_process(&s, rx), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.send(true).unwrap();
        });
        let got = got.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(4));
        assert_eq!(got.end, EndReason::Cancelled);
        assert!(eventually_dead(first_line_pid(&got.stdout)).await);
    }

    #[tokio::test]
    async fn already_cancelled_runs_nothing_long() {
        let (_tx, rx) = watch::channel(true);
        let got = run_process(&spec("sleep 1000"), rx).await.unwrap();
        assert_eq!(got.end, EndReason::Cancelled);
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!("sleep 1000 & echo $! > '{}'; sleep 1000", pidfile.display());
        let s = spec(&script);
        let run = run_process(&s, no_cancel());
        assert!(
            tokio::time::timeout(Duration::from_millis(500), run)
                .await
                .is_err()
        );
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            eventually_dead(pid).await,
            "grandchild {pid} survived the drop"
        );
    }

    #[tokio::test]
    async fn grandchild_holding_pipes_does_not_hang_the_run() {
        let t0 = std::time::Instant::now();
        let got = run_process(&spec("sleep 1000 & echo $!; exit 0"), no_cancel())
            .await
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        assert_eq!(got.end, EndReason::Exited);
        assert_eq!(got.exit_code, Some(0));
        assert!(eventually_dead(first_line_pid(&got.stdout)).await);
    }

    /// A background job that does not hold the pipes ends with its agent:
    /// agents are bounded in time, and what they started with them.
    #[tokio::test]
    async fn background_jobs_end_with_their_agent() {
        let got = run_process(
            &spec("sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"),
            no_cancel(),
        )
        .await
        .unwrap();
        assert_eq!(got.end, EndReason::Exited);
        assert!(eventually_dead(first_line_pid(&got.stdout)).await);
    }

    #[tokio::test]
    async fn huge_output_is_capped_and_fast() {
        let mut s = spec("head -c 20000000 /dev/zero | tr '\\0' a; echo; echo END");
        s.capture = CaptureLimits {
            head_bytes: 1000,
            tail_bytes: 1000,
        };
        let t0 = std::time::Instant::now();
        let got = run_process(&s, no_cancel()).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert_eq!(got.stdout.total_bytes, 20_000_005);
        assert!(got.stdout.is_truncated());
        assert!(got.stdout.text().len() < 2100);
        // The cut word (a run of `a`s) is dropped, not kept in part.
        assert!(
            got.stdout.text().ends_with("]…\n\nEND\n"),
            "{}",
            got.stdout.text()
        );
    }

    #[tokio::test]
    async fn echo_gets_lines() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let mut s = spec("echo one; echo two >&2; printf 'three'");
        s.echo = Some(Arc::new(move |st, l: &str| {
            sink.lock().unwrap().push((st, l.to_owned()))
        }));
        run_process(&s, no_cancel()).await.unwrap();
        let mut got = lines.lock().unwrap().clone();
        got.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(
            got,
            vec![
                (Stream::Stdout, "one".to_owned()),
                (Stream::Stdout, "three".to_owned()),
                (Stream::Stderr, "two".to_owned()),
            ]
        );
    }

    /// A process's start read off the boot clock around its spawn is the
    /// kernel's own (`/proc/<pid>/stat`), whenever the two readings fall
    /// in one tick; nearly always, the spawn being far shorter than a tick.
    #[test]
    fn the_start_read_off_the_boot_clock_is_the_kernels() {
        let mut known = 0;
        for _ in 0..100 {
            let before = boot_ns();
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let after = boot_ns();
            // Read before the reap: a zombie keeps its start.
            let kernels = process_start_ticks(child.id());
            if let Some(ours) = start_ticks_between(before, after) {
                assert_eq!(Some(ours), kernels, "pid {}", child.id());
                known += 1;
            }
            child.wait().unwrap();
        }
        assert!(known >= 50, "only {known} of 100 starts were known");
    }

    /// The spawn hook gets the process's start as the kernel has it: what a
    /// later modix checks the process group's leader against.
    #[tokio::test]
    async fn the_spawn_hook_gets_the_pid_and_its_start() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..20 {
            let mut s = spec("exit 0");
            let noted = Arc::clone(&seen);
            s.on_spawn = Some(Arc::new(move |pid, started| {
                noted
                    .lock()
                    .unwrap()
                    .push((started, process_start_ticks(pid)));
            }));
            run_process(&s, no_cancel()).await.unwrap();
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 20);
        for (given, kernels) in seen.iter() {
            assert!(given.is_some());
            assert_eq!(given, kernels);
        }
    }

    #[tokio::test]
    async fn spawn_errors_name_the_program() {
        let mut s = spec("");
        s.program = "/nonexistent/agent-xyz".into();
        let err = run_process(&s, no_cancel()).await.unwrap_err();
        assert!(matches!(err, SpawnError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/agent-xyz"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-executable");
        std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
        let mut s = spec("");
        s.program = file.clone();
        s.args.clear();
        let err = run_process(&s, no_cancel()).await.unwrap_err();
        assert!(matches!(err, SpawnError::PermissionDenied { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_missing_interpreter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent");
        std::fs::write(&script, "#!/nonexistent/python9 -u\nprint(1)\n").unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        let mut s = spec("");
        s.program = script;
        s.args = vec![];
        // A script just written can be "busy" for a moment: another test's
        // fork may still hold its write descriptor until that child execs
        // (the engine retries this, see `orchestrator::retry`).
        let mut tries = 0;
        let err = loop {
            let err = run_process(&s, no_cancel()).await.unwrap_err();
            tries += 1;
            match &err {
                SpawnError::Io { source, .. }
                    if source.raw_os_error() == Some(nix::libc::ETXTBSY) && tries < 100 =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                _ => break err,
            }
        };
        assert!(
            err.to_string().contains(
                "its interpreter `/nonexistent/python9` (from its #! line) was not found"
            ),
            "{err}"
        );

        let mut s = spec("true");
        s.cwd = Path::new("/nonexistent/dir").into();
        let err = run_process(&s, no_cancel()).await.unwrap_err();
        assert!(matches!(err, SpawnError::BadCwd { .. }), "{err}");
        // A file where the folder should be, and a missing program in a
        // missing folder: the folder is what is wrong.
        let mut s = spec("true");
        s.cwd = dir.path().join("agent");
        let err = run_process(&s, no_cancel()).await.unwrap_err();
        assert!(matches!(err, SpawnError::BadCwd { .. }), "{err}");
        let mut s = spec("modix-test-no-such-program");
        s.cwd = Path::new("/nonexistent/dir").into();
        let err = run_process(&s, no_cancel()).await.unwrap_err();
        assert!(matches!(err, SpawnError::BadCwd { .. }), "{err}");
    }

    #[tokio::test]
    async fn script_file_runs_with_args() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.sh");
        std::fs::write(&file, "#!/bin/sh\necho \"$1\"; pwd\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = spec("");
        s.program = file;
        s.args = vec!["hello world".into()];
        s.cwd = dir.path().into();
        let got = run_process(&s, no_cancel()).await.unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(
            got.stdout.text(),
            format!("hello world\n{}\n", cwd.display())
        );
    }
}
