//! modix drives AI coding CLIs (or any command) through declarative finite-state
//! machines: plan → execute → test, configured in `.modix/`, recorded in SQLite.
//!
//! Module map, in the order a run flows through them (docs/architecture.md
//! draws it):
//! - [`config`] reads `.modix/` (files, schemas, settings layering, presets);
//! - [`fsm`] compiles workflow TOML into checked machines and their roles;
//! - [`project`] resolves config and machines into what a run needs;
//! - [`orchestrator`] walks a workflow: runs agents via [`shell`], records
//!   every step in [`store`], and emits events;
//! - [`cli`] is the command line on top; [`error`] is what commands end with.
//!
//! Supporting modules: [`diagnostics`] (problems with file, place and fix),
//! [`schema`] (the embedded JSON Schemas), [`doctor`] (readiness checks),
//! [`scaffold`] (what `init` writes), [`template`] (prompt templates,
//! checked and rendered), [`stops`] (Ctrl-C and SIGTERM before a command
//! takes them), [`embedded`], [`fsutil`], [`text`].
//!
//! Everything is crate-private; the binary calls [`cli::main`], and the
//! benchmarks use the hidden [`bench`] hooks.

// `println!`/`eprintln!` panic when their stream's reader has gone
// (`modix … | head`, `2>&1 | head`): output goes through `cli::output`,
// which lets a closed pipe end the output, never the command or its run.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub(crate) mod alloc;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod diagnostics;
pub(crate) mod doctor;
pub(crate) mod embedded;
pub(crate) mod error;
pub(crate) mod fsm;
pub(crate) mod fsutil;
pub(crate) mod orchestrator;
pub(crate) mod pattern;
pub(crate) mod project;
pub(crate) mod scaffold;
pub(crate) mod schema;
pub(crate) mod shell;
pub(crate) mod stops;
pub(crate) mod store;
pub(crate) mod template;
pub(crate) mod text;
pub(crate) mod workspace;

/// The command line, for `main.rs`.
pub fn main() -> std::process::ExitCode {
    // First of all: a Ctrl-C from here on is never lost.
    stops::hold();
    alloc::tune();
    cli::main()
}

/// Hooks for the benchmarks in `benches/` (not a stable API).
#[doc(hidden)]
pub mod bench {
    use std::path::Path;

    pub use crate::fsm::bench_support::{chain_machine, parse_only};
    pub use crate::shell::{CaptureLimits, ProcessSpec, run_process};

    /// What an agent inherits of this process's environment under the
    /// default `runtimes.json` (the engine's own reading of it).
    pub fn inherited_env() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        crate::orchestrator::agent::inherited(&crate::config::Runtimes::default())
    }

    /// Creates a store at `path` (its folder must exist) with modix's
    /// schema, for a floor that writes modix's rows with plain SQLite.
    pub fn create_store(path: &Path) {
        crate::store::Store::open(path).expect("create the store");
    }

    /// Load + compile + check (worst case included); whether it compiled.
    pub fn compile(text: &str) -> bool {
        let opts = crate::fsm::CompileOptions::default();
        crate::fsm::compile_str(text, "bench.toml", &opts)
            .0
            .is_some()
    }

    /// A step of the compiled machine: fires `event` from its start.
    pub fn fire_from_start(text: &str, event: &str) -> impl Fn() -> bool {
        let opts = crate::fsm::CompileOptions::default();
        let machine = crate::fsm::compile_str(text, "bench.toml", &opts)
            .0
            .expect("machine compiles");
        let (start, event) = (machine.start(), event.to_owned());
        move || machine.fire(std::hint::black_box(&start), &event).is_ok()
    }

    /// A project loaded as `modix go` loads it, ready to run workflows.
    pub struct Project {
        engine: crate::orchestrator::Engine,
        project: crate::project::Project,
    }

    impl Project {
        /// Panics with the diagnostics when the project is not valid.
        pub fn load(root: &Path) -> Project {
            // What `main` does first, so the benchmarks measure it.
            crate::alloc::tune();
            let paths = crate::config::ProjectPaths::at(root);
            let settings = crate::config::Settings::default();
            let no_diags = crate::diagnostics::Diagnostics::new();
            let (project, diags) = crate::project::load(&paths, &settings, &no_diags);
            let project = project
                .unwrap_or_else(|| panic!("bench project invalid:\n{}", diags.render_human(false)));
            let engine = crate::orchestrator::Engine::new().expect("runtime");
            Project { engine, project }
        }

        /// Runs `workflow` on `epic` to its end, as `modix go` does (without
        /// a terminal view); returns the number of transitions.
        pub fn run(&self, workflow: &str, epic: &str) -> u32 {
            let workflow = self.project.workflow(Some(workflow)).expect("workflow");
            let opts = crate::orchestrator::RunOptions::default();
            let sink = &mut crate::orchestrator::Silent;
            crate::orchestrator::start(&self.engine, &self.project, workflow, epic, &opts, sink)
                .expect("run")
                .transitions
        }
    }
}
