//! What a command can end with: an [`Exit`] code when it ran, or an
//! [`Error`] when it could not do what was asked. Every error variant knows
//! its exit code and its advice; `cli::report` renders them, in one place,
//! for people or as a JSON object.

use std::io;

use std::sync::Mutex;

use crate::diagnostics::Diagnostics;
use crate::orchestrator::RunError;
use crate::store::StoreError;

/// Exit codes, the same for every command (documented in README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything went as asked.
    Ok = 0,
    /// A check failed (doctor found something missing) or a run ended in a
    /// failure state.
    Failed = 1,
    /// Bad usage or bad configuration: nothing was run.
    Usage = 2,
    /// modix itself failed: the run database, the file system, a bug. The
    /// run (if any) is left resumable.
    Internal = 3,
    /// The run waits for a human at a gate (`modix approve`, `reject`,
    /// `answer` continue it).
    Waiting = 4,
    /// Interrupted by Ctrl-C or SIGTERM; the run can be resumed.
    Interrupted = 130,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// Why a command could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line asks for something that cannot be done as asked.
    #[error("{message}")]
    Usage {
        message: String,
        help: Option<String>,
    },
    /// The project's configuration has errors (the diagnostics say which).
    #[error("the configuration has errors, so {doing}")]
    Config {
        diagnostics: Box<Diagnostics>,
        doing: &'static str,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// `diff`, `apply` or `prune` could not do what was asked.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// modix ended itself at once, where nothing could be told no: a prompt
    /// template past its memory budget (see `alloc::within`). A run it was
    /// in is left resumable, as after a crash.
    #[error("{message}")]
    Aborted {
        code: &'static str,
        message: String,
        help: String,
    },
}

impl Error {
    pub fn usage(message: impl Into<String>, help: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
            help: Some(help.into()).filter(|h: &String| !h.is_empty()),
        }
    }

    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> Exit {
        match self {
            Error::Usage { .. } | Error::Config { .. } => Exit::Usage,
            Error::Store(e) => store_exit(e),
            Error::Run(e) => e.exit_code(),
            Error::Workspace(e) => workspace_exit(e),
            Error::Io { .. } | Error::Aborted { .. } => Exit::Internal,
        }
    }

    /// What the user can do about it, naming the run the command is about
    /// where the advice says `<run>` (see [`about_run`]).
    pub fn help(&self) -> Option<String> {
        self.advice().map(|help| fill_run(&help))
    }

    fn advice(&self) -> Option<String> {
        match self {
            Error::Usage { help, .. } => help.clone(),
            Error::Config { .. } => Some("run `modix validate` and fix what it reports".into()),
            Error::Store(e) => store_help(e).map(str::to_owned),
            Error::Run(e) => e.help(),
            Error::Workspace(_) => None,
            Error::Io { .. } => Some("check the folder's permissions and free space".into()),
            Error::Aborted { help, .. } => Some(help.clone()),
        }
    }

    /// A stable, short name of the kind of error, for `--json` consumers.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Usage { .. } => "usage",
            Error::Config { .. } => "config",
            Error::Store(e) => store_code(e),
            Error::Run(e) => e.code(),
            Error::Workspace(e) => e.code(),
            Error::Io { .. } => "io",
            Error::Aborted { code, .. } => code,
        }
    }

    /// The configuration diagnostics behind the error, if any.
    pub fn diagnostics(&self) -> Option<&Diagnostics> {
        match self {
            Error::Config { diagnostics, .. } => Some(diagnostics),
            Error::Run(RunError::Config(d)) => Some(d),
            _ => None,
        }
    }
}

/// A run id nobody has, an ambiguous prefix, a run someone else is driving
/// or a database from a newer modix is the user's to sort out; anything
/// else the store reports is modix's own failure.
pub(crate) fn store_exit(e: &StoreError) -> Exit {
    match e {
        StoreError::UnknownRun { .. }
        | StoreError::UnknownInvocation { .. }
        | StoreError::Ambiguous { .. }
        | StoreError::Busy { .. }
        | StoreError::Changed { .. }
        | StoreError::TooNew { .. }
        | StoreError::NeedsMigration { .. } => Exit::Usage,
        _ => Exit::Internal,
    }
}

/// The `code` of a store error in a `--json` error object: what the user
/// can tell apart and act on differently, else `store`.
pub(crate) fn store_code(e: &StoreError) -> &'static str {
    match e {
        StoreError::UnknownRun { .. } | StoreError::UnknownInvocation { .. } => "not_found",
        StoreError::Ambiguous { .. } => "ambiguous",
        StoreError::Busy { .. } => "busy",
        StoreError::Changed { .. } => "changed",
        StoreError::TooNew { .. } => "too_new",
        StoreError::NeedsMigration { .. } => "needs_migration",
        _ => "store",
    }
}

/// git or the file system failing is modix's failure; a merge that would
/// conflict or a tree in the way is a refusal (nothing was changed); the
/// rest asks the user to change something first.
pub(crate) fn workspace_exit(e: &crate::workspace::WorkspaceError) -> Exit {
    use crate::workspace::WorkspaceError as W;
    match e {
        _ if e.is_internal() => Exit::Internal,
        W::Stopped { .. } => Exit::Interrupted,
        W::Conflict { .. }
        | W::DirtyTarget { .. }
        | W::UntrackedInTheWay { .. }
        | W::OriginalChanged { .. }
        | W::InTheWay { .. } => Exit::Failed,
        _ => Exit::Usage,
    }
}

/// SQLite saying the file is not a database it can read.
fn damaged(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

pub(crate) fn store_help(e: &StoreError) -> Option<&'static str> {
    Some(match e {
        StoreError::UnknownRun { .. } => "`modix history` lists the runs and their ids",
        StoreError::UnknownInvocation { .. } => {
            "`modix history <run>` shows the run; its invocations are numbered from 1"
        }
        StoreError::Ambiguous { .. } => "give more characters of the id",
        StoreError::Gone { .. } => {
            "leave .modix/modix.db and the files beside it alone while a run goes on; put back a copy if you have one, else `modix go` starts a new record"
        }
        StoreError::Busy { .. } => {
            "wait for that process to finish, or stop it (`modix stop RUN`, or Ctrl-C in its terminal); then `modix resume`"
        }
        StoreError::Changed { .. } => {
            "someone else answered, resumed or stopped it meanwhile: `modix status RUN` shows where it is now"
        }
        StoreError::TooNew { .. } => "use the newer modix that wrote it",
        StoreError::NeedsMigration { .. } => {
            "run `modix go` or `modix resume` once with write access to .modix/, then audit again"
        }
        StoreError::Open { source, .. } | StoreError::Sqlite { source, .. } if damaged(source) => {
            "the run database is damaged: move .modix/modix.db (and its -wal and -shm files) \
             away — `sqlite3 modix.db .recover` can save what is left — and modix starts a new record"
        }
        _ => return None,
    })
}

/// The run the command at work is about, once it is known (resolved from
/// its RUN argument, created by `go` or `fork`, taken up by `resume`).
static SUBJECT: Mutex<Option<String>> = Mutex::new(None);

/// Notes that the command is about run `id`: advice written for any run
/// (`modix resume <run>`) names it when the command fails.
pub(crate) fn about_run(id: &str) {
    if let Ok(mut subject) = SUBJECT.lock() {
        *subject = Some(id.to_owned());
    }
}

/// `help` with `<run>` replaced by the run the command is about — or by
/// `RUN`, the README's name for any run reference, when none is known yet:
/// pasted into a shell, `<run>` would read a file named `run`.
fn fill_run(help: &str) -> String {
    if !help.contains("<run>") {
        return help.to_owned();
    }
    let subject = SUBJECT.lock().ok().and_then(|s| s.clone());
    help.replace("<run>", subject.as_deref().unwrap_or("RUN"))
}

/// How an [`Error::Aborted`] is said: set once by the command line to its
/// own report (a JSON object on stdout for `--json`, `error:` on stderr
/// otherwise), so the process's last word reads like any other failure.
type Reporter = Box<dyn Fn(&Error) + Send + Sync>;
static FATAL: std::sync::OnceLock<Reporter> = std::sync::OnceLock::new();

/// Sets how [`report_fatal`] says an error (the first call wins).
pub(crate) fn on_fatal(report: impl Fn(&Error) + Send + Sync + 'static) {
    let _ = FATAL.set(Box::new(report));
}

/// Says `e` as the command line reports errors — or, with no command line
/// (a benchmark, a test), on stderr.
pub(crate) fn report_fatal(e: &Error) {
    match FATAL.get() {
        Some(report) => report(e),
        None => {
            use std::io::Write as _;
            let _ = writeln!(io::stderr(), "error: {e}");
        }
    }
}
