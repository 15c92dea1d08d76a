//! `modix validate`: every config and FSM file checked, every problem reported.

use super::Ctx;
use super::output::error_json;
use crate::error::{Error, Exit};
use crate::orchestrator::SCHEMA_VERSION;
use crate::text;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Print the findings as JSON (with an `error` object when there are errors).
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &ValidateArgs) -> Result<Exit, Error> {
    let paths = ctx.paths()?;
    let (loaded, diags) = crate::project::load(&paths, &ctx.settings, &ctx.settings_diags);
    let ok = !diags.has_errors();
    let out = &ctx.out;
    if args.json {
        let mut v = diags.to_json();
        v["ok"] = ok.into();
        v["project"] = paths.root.display().to_string().into();
        v["schema_version"] = SCHEMA_VERSION.into();
        if !ok {
            // The findings, plus the error object every `--json` command prints on failure.
            let e = Error::Config {
                diagnostics: Box::new(diags.clone()),
                doing: "nothing can run until they are fixed",
            };
            v["error"] = error_json(&e)["error"].take();
        }
        out.json(&v);
    } else {
        out.diagnostics(&diags);
        match (&loaded, ok) {
            (Some(p), true) => out.line(format!(
                "ok: {} is valid ({}, {}, {}, {}){}",
                paths.display(&paths.modix_dir),
                text::plural(p.config.shells.len(), "shell"),
                text::plural(p.config.brains.len(), "brain"),
                text::plural(p.config.agents.len(), "agent"),
                text::plural(p.catalog_len(), "workflow"),
                match diags.warning_count() {
                    0 => String::new(),
                    n => format!(", {}", text::plural(n, "warning")),
                }
            )),
            _ => out.error(
                format!(
                    "{}, {} in {}",
                    text::plural(diags.error_count(), "error"),
                    text::plural(diags.warning_count(), "warning"),
                    paths.display(&paths.modix_dir)
                ),
                Some("fix the errors above, then run `modix validate` again"),
            ),
        }
    }
    Ok(if ok { Exit::Ok } else { Exit::Usage })
}
