//! Owns running untrusted agent processes and reading what they print.
//!
//! An agent (Claude Code, Codex, Gemini, Aider, or any command) is treated as
//! untrusted: it is spawned directly from a rendered argv ([`argv`]), with a
//! complete environment we choose, in its own process group that is killed
//! as a whole on timeout or cancellation ([`process`]). Its output is kept
//! within fixed memory ([`capture`]), scrubbed of secrets before anyone sees
//! it ([`redact`]), and searched for the structured JSON answer ([`extract`]).

pub mod argv;
pub mod capture;
pub mod extract;
pub mod process;
pub mod redact;
mod version;

pub use argv::{ArgTemplateError, KNOWN_PLACEHOLDERS, Placeholders, placeholders_in, render_args};
pub use capture::{CaptureBuffer, CaptureLimits, Captured};
pub use extract::{ExtractError, OutputFormat, extract_json};
pub use process::{
    EchoFn, EndReason, PIPE_DRAIN, ProcessOutcome, ProcessSpec, SpawnError, Stream, run_process,
};
pub use redact::{MIN_SECRET_LEN, Redactor};
pub use version::{normalize as normalize_version, probe_version};
