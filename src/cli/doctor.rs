//! (being built)
use super::{Cli, Output};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

pub fn run(_cli: &Cli, _args: &DoctorArgs, out: &Output) -> u8 {
    out.error("not built yet", None);
    crate::exit::USAGE
}
