//! Integration tests: every test drives the real `modix` binary in a temp dir.
//! One test binary (ripgrep/just/nextest style) so it links once.

mod fsm;
mod util;
