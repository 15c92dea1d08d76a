//! Integration tests: every test drives the real `modix` binary in a temp dir.
//! One test binary (as ripgrep, just and nextest do) so it links once.

mod apply;
mod budgets;
mod conventions;
mod doctor;
mod doctor_login;
mod dry_run;
mod escaping;
mod failures;
mod fsm;
mod fsm_language;
mod go;
mod graph;
mod history;
mod humans;
mod init;
mod init_stacks;
mod mock_anthropic;
mod overrides;
mod presets;
mod readiness;
mod real_clis;
mod real_modix;
mod record;
mod recovery;
mod scenarios;
mod shell_fields;
mod snapshots;
mod term;
mod terminal;
mod util;
mod validate;
mod validate_gate;
mod validate_limits;
mod workspace_start;
mod workspaces;
