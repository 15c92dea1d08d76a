//! modix drives AI coding CLIs (or any command) through declarative finite-state
//! machines: plan → execute → test, configured in `.modix/`, recorded in SQLite.
//!
//! Module map: [`config`] loads and checks `.modix/`; [`fsm`] compiles workflow
//! TOML into a checked machine; [`shell`] runs untrusted agent processes;
//! [`store`] is the SQLite record of runs; [`orchestrator`] walks a workflow;
//! [`cli`] is the command line on top.

pub mod cli;
pub mod config;
pub mod diagnostics;
pub mod doctor;
pub mod embedded;
pub mod exit;
pub mod fsm;
pub mod fsutil;
pub mod orchestrator;
pub mod project;
pub mod scaffold;
pub mod schema;
pub mod shell;
pub mod store;
mod workspace;
