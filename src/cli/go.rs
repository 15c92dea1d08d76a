//! (being built)
use super::{Cli, Output};

#[derive(Debug, clap::Args)]
pub struct GoArgs {}
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {}

pub fn run(_cli: &Cli, _args: &GoArgs, out: &Output) -> u8 {
    out.error("not built yet", None);
    crate::exit::USAGE
}

pub fn resume(_cli: &Cli, _args: &ResumeArgs, out: &Output) -> u8 {
    out.error("not built yet", None);
    crate::exit::USAGE
}
