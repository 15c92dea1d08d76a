//! Integration tests: every test drives the real `modix` binary in a temp dir.
//! One test binary (as ripgrep, just and nextest do) so it links once.

mod doctor;
mod fsm;
mod go;
mod init;
mod presets;
mod util;
mod validate;
mod validate_limits;
