//! (being built)
use super::{Cli, Output};

#[derive(Debug, clap::Subcommand)]
pub enum FsmCommand {
    /// List every visible machine.
    List,
}

pub fn run(_cli: &Cli, _cmd: &FsmCommand, out: &Output) -> u8 {
    out.error("not built yet", None);
    crate::exit::USAGE
}
