//! Owns running untrusted agent processes and reading what they print.
//!
//! An agent (Claude Code, Codex, Gemini, Aider, or any command) is treated as
//! untrusted: it is spawned directly from a rendered argv ([`argv`]), with a
//! complete environment we choose, in its own process group that is killed
//! as a whole on timeout or cancellation ([`process`]). Its output is kept
//! within fixed memory ([`capture`]), scrubbed of secrets before anyone sees
//! it ([`redact`]), and searched for the structured JSON answer ([`extract`]).

mod argv;
mod capture;
mod extract;
mod process;
mod reaper;
mod redact;
mod usage;
mod version;

use std::path::{Path, PathBuf};

pub use argv::{Placeholders, placeholders_in, render_args};
#[cfg(test)]
pub use capture::Captured;
pub use capture::{CaptureLimits, last_lines};
pub use extract::extract;
pub use process::{
    DRIVER_VAR, EchoFn, EndReason, LineKind, LineWatch, ProcessOutcome, ProcessSpec, SpawnError,
    Stream, driver_id, process_start_ticks, run_process, stop_processes_with_env,
};
pub use reaper::adopt_orphans;
pub use redact::{CleanText, Redactor};
pub use usage::parse_usage;
pub use version::probe_version;

/// A program as an agent or shell names it: looked up on PATH, or — when it
/// contains a `/` — relative to the project root.
pub fn find_binary(root: &Path, program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = root.join(program);
        return p.is_file().then_some(p);
    }
    which::which(program).ok()
}
