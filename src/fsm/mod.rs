//! Workflow state machines: the TOML format ([`spec`]), the static checks that
//! prove every run ends ([`check`], [`graph_checks`]), the compiled immutable
//! [`Machine`] and its pure `fire` step ([`machine`]), the worst-case run
//! length ([`bounds`]), diagrams ([`render`]) and the set of visible machines
//! ([`Catalog`]). No I/O beyond reading FSM files; the orchestrator drives runs.

#[doc(hidden)]
pub mod bench_support;
mod bounds;
mod catalog;
mod check;
mod emit;
mod failure;
mod gates;
mod graph_checks;
mod lifecycle;
mod machine;
mod recovery;
pub mod render;
mod spec;

#[cfg(test)]
mod language_tests;
#[cfg(test)]
mod proptests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::diagnostics::Diagnostics;

pub use catalog::Catalog;
pub use emit::{AgentState, Outcome};
pub use failure::FailureClass;
pub use lifecycle::{Lifecycle, Role};
pub use machine::{Ending, FireError, Fired, Machine, Position, Source, StateId, StateKind};

// The language's run-time vocabulary (retry, catch, gates, worst case),
// for the orchestrator to call; not all of it is wired yet.
#[allow(unused_imports)]
pub use bounds::{WallTime, WorstCase};
#[allow(unused_imports)]
pub use failure::{CATCH_PREFIX, PERMANENT};
#[allow(unused_imports)]
pub use machine::{State, Transition};
#[allow(unused_imports)]
pub use recovery::{CatchRule, Jitter, MAX_DELAY_SECS, MAX_RETRY_ATTEMPTS, RetryRule};

/// The longest timeout a state may set: a year, as the config files'
/// durations (`duration_secs` in `schemas/common.schema.json`). Bounded so
/// that no sum of a workflow's worst case can overflow.
pub const MAX_TIMEOUT_SECS: u64 = 31_536_000;

/// The event the orchestrator raises when an agent state's invocation made
/// no progress (an executor that changed nothing, the same test failure
/// again). No emit rule produces it; a state that does not handle it never
/// sees it.
pub const NO_PROGRESS: &str = "no_progress";

/// The event a redrive is recorded with: a run that ended in a failure
/// terminal continued from a state it visited (`modix resume --from`). It
/// leaves a terminal state, where no transition of a workflow can.
pub const REDRIVE: &str = "redrive";

/// Events the engine raises itself, not an emit rule: a transition on one
/// from an agent state is not dead (`fsm::dead-transition`).
pub const ENGINE_EVENTS: [&str; 1] = [NO_PROGRESS];

/// The per-invocation timeout the worst-case wall time assumes for an agent
/// state that sets no `timeout_secs`, when no project config says otherwise
/// (`runtimes.json`'s `timeouts.default_secs` ships with the same value).
pub const DEFAULT_TIMEOUT_SECS: u64 = 900;

/// Settings that shape compilation but do not live in the FSM file.
#[derive(Debug, Clone, Copy)]
pub struct CompileOptions<'a> {
    /// `max` for a transition that names `exhausted` but no `max` (the project's loop bound).
    pub default_max: u32,
    /// The output schemas states may name, with the project's own.
    pub schemas: &'a crate::schema::Schemas,
}

impl Default for CompileOptions<'_> {
    fn default() -> Self {
        CompileOptions {
            default_max: 3,
            schemas: crate::schema::Schemas::shipped(),
        }
    }
}

/// Parses and checks FSM text; `Some` only when there are no errors.
/// The machine's source is `Source::File(display_name)`.
pub fn compile_str(
    text: &str,
    display_name: &str,
    opts: &CompileOptions,
) -> (Option<Machine>, Diagnostics) {
    compile(
        text,
        display_name,
        Source::File(PathBuf::from(display_name)),
        opts,
    )
}

/// Reads, parses and checks one FSM file; diagnostics name it `display_name`.
pub fn compile_file(
    path: &Path,
    display_name: &str,
    opts: &CompileOptions,
) -> (Option<Machine>, Diagnostics) {
    match crate::config::source::read_text(path) {
        Ok(text) => compile(&text, display_name, Source::File(path.to_path_buf()), opts),
        Err(e) => {
            let mut diags = Diagnostics::new();
            diags.push(e.diagnostic("fsm", display_name));
            (None, diags)
        }
    }
}

/// [`compile_str`] with an explicit source.
pub fn compile(
    text: &str,
    display_name: &str,
    source: Source,
    opts: &CompileOptions,
) -> (Option<Machine>, Diagnostics) {
    let (machine, diags, _) = compile_with_id(text, display_name, source, opts);
    (machine, diags)
}

/// Also returns the file's `id` when it could be read, even if checks failed,
/// so a broken project file still shadows the built-in with the same id.
pub(crate) fn compile_with_id(
    text: &str,
    display_name: &str,
    source: Source,
    opts: &CompileOptions,
) -> (Option<Machine>, Diagnostics, Option<String>) {
    let mut diags = Diagnostics::new();
    // One copy of the text, shared by the diagnostics and the machine.
    let shared: Arc<str> = Arc::from(text);
    diags.add_source(display_name, Arc::clone(&shared));
    let raw = spec::parse(text, display_name);
    let raw = match &raw {
        Ok(doc) => spec::raw(doc, text, display_name),
        Err(d) => Err(d.clone()),
    };
    let raw = match raw {
        Ok(raw) => raw,
        Err(d) => {
            diags.push(*d);
            return (None, diags, None);
        }
    };
    let id = raw.id.as_ref().map(|i| (*i.get_ref()).to_owned());
    let mut cx = check::Ctx {
        text,
        shared,
        file: display_name,
        diags: &mut diags,
        lines: std::cell::OnceCell::new(),
    };
    let machine = check::compile(raw, &mut cx, source, opts);
    diags.sort();
    (machine, diags, id)
}
