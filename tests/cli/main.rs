//! Integration tests: every test drives the real `modix` binary in a temp dir.
//! One test binary (as ripgrep, just and nextest do) so it links once.

mod doctor;
mod fsm;
mod go;
mod init;
mod mock_anthropic;
mod presets;
mod real_clis;
mod snapshots;
mod util;
mod validate;
mod validate_gate;
