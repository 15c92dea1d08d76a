//! `modix validate`: every config and FSM file checked, every problem reported.

use super::{Cli, Output, project_paths};
use crate::exit;
use crate::project::load_checked;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cli: &Cli, args: &ValidateArgs, out: &Output) -> u8 {
    let paths = match project_paths(cli, out) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let (loaded, diags) = load_checked(&paths);
    let ok = !diags.has_errors();
    if args.json {
        let mut v = diags.to_json();
        v["ok"] = ok.into();
        v["project"] = paths.root.display().to_string().into();
        out.json(&v);
    } else {
        out.diagnostics(&diags);
        match (&loaded, ok) {
            (Some(p), true) => out.line(format!(
                "ok: {} is valid ({} shells, {} brains, {} agents, {} workflows){}",
                paths.display(&paths.modix_dir),
                p.config.shells.len(),
                p.config.brains.len(),
                p.config.agents.len(),
                p.catalog_len(),
                match diags.warning_count() {
                    0 => String::new(),
                    n => format!(", {n} warning(s)"),
                }
            )),
            _ => out.error(
                format!(
                    "{} error(s), {} warning(s) in {}",
                    diags.error_count(),
                    diags.warning_count(),
                    paths.display(&paths.modix_dir)
                ),
                Some("fix the errors above, then run `modix validate` again"),
            ),
        }
    }
    if ok { exit::OK } else { exit::USAGE }
}
