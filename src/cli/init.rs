//! `modix init`: scaffold `.modix/` and say what was bound to what.

use super::Ctx;
use crate::error::{Error, Exit};
use crate::scaffold::{self, FileAction};

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Rewrite files that already exist.
    #[arg(long)]
    pub force: bool,
    /// Bind the agents to this agent CLI (claude, codex, gemini, aider) instead of the first found on PATH.
    #[arg(long, value_name = "NAME")]
    pub shell: Option<String>,
}

pub fn run(ctx: &Ctx, args: &InitArgs) -> Result<Exit, Error> {
    let out = &ctx.out;
    let root = ctx.target_dir()?;
    if !root.is_dir() {
        return Err(Error::usage(
            format!("{} is not a directory", root.display()),
            "create it first, or pass an existing --project DIR",
        ));
    }
    let binding = scaffold::choose_binding(
        &root,
        args.shell.as_deref(),
        ctx.settings.default_shell.as_deref(),
    )
    .map_err(|e| {
        Error::usage(
            e.to_string(),
            "use one of: claude, codex, gemini, aider (add others to .modix/shells.json afterwards)",
        )
    })?;
    let files = scaffold::render(&root, &binding);
    let done = scaffold::write(&root, &files, args.force)?;
    for (path, action) in &done {
        let verb = match action {
            FileAction::Created => "created",
            FileAction::Kept => "kept   ",
            FileAction::Rewritten => "rewrote",
        };
        out.line(format!("  {verb} {path}"));
    }
    if done.iter().all(|(_, a)| *a == FileAction::Kept) {
        out.line(format!(
            "Nothing to do: all {} files exist in {}. Use --force to rewrite them.",
            done.len(),
            root.join(crate::config::MODIX_DIR).display()
        ));
        return Ok(Exit::Ok);
    }
    match &binding.found_at {
        Some(path) => out.line(format!(
            "Agents bound to `{}` (found at {}) with brain `{}`.",
            binding.shell,
            path.display(),
            binding.brain
        )),
        None if binding.detected.is_empty() => out.line(format!(
            "No agent CLI found on PATH (looked for claude, codex, gemini, aider); agents are bound to `{}`. Install it, or rebind with `modix init --force --shell NAME`.",
            binding.shell
        )),
        None => out.line(format!(
            "Agents bound to `{}` as asked, but it is not on PATH (found: {}).",
            binding.shell,
            binding.detected.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
    if let Some(argv) = &binding.test_command {
        out.line(format!(
            "Tester runs the project's tests: `{}`.",
            argv.join(" ")
        ));
    }
    out.line("Next: `modix validate` checks the config, `modix doctor` checks what is ready.");
    Ok(Exit::Ok)
}
