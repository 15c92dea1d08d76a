//! `modix init`: scaffold `.modix/` (and the global settings file when there
//! is none), and say what was bound to what, and why.

use super::{Ctx, Output};
use crate::error::{Error, Exit};
use crate::scaffold::{self, Binding, FileAction};

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Rewrite files that already exist (the global settings file, and the
    /// shells and brains files that define a `--shell` of the project's own,
    /// are kept even then).
    #[arg(long)]
    pub force: bool,
    /// Bind the planner and executor to this agent CLI: a preset (claude,
    /// codex, gemini, aider) or a shell defined in the project's existing
    /// .modix/shells.json. Default: the first preset found on PATH.
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
    // Before anything is written: `.modix/` without the settings file it
    // goes with would be half an init.
    if let Some((message, help)) = crate::config::settings::home_problem() {
        return Err(Error::usage(message, help));
    }
    let binding = scaffold::choose_binding(
        &root,
        args.shell.as_deref(),
        ctx.settings.default_shell.as_deref(),
        ctx.settings.default_brain.as_deref(),
    )
    .map_err(|e| {
        let name = match &e {
            scaffold::UnknownShell::Unknown(name) => name,
            scaffold::UnknownShell::Unreadable(why) => {
                return Error::usage(
                    why.clone(),
                    "fix or remove the file (`modix validate` says what is wrong), then run `modix init` again",
                );
            }
        };
        let mut known: Vec<String> = crate::config::presets::PRESET_NAMES
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        for own in scaffold::existing_shells(&root) {
            if !known.contains(&own) {
                known.push(own);
            }
        }
        Error::usage(
            e.to_string(),
            format!(
                "{} (another one: define it in .modix/shells.json first)",
                crate::diagnostics::unknown_name_help(
                    name,
                    "shell",
                    known.iter().map(String::as_str)
                )
            ),
        )
    })?;
    let workspace = scaffold::choose_workspace(&root);
    let files = scaffold::render(&root, &binding, &workspace);
    // A shell of the project's own lives in these: rewriting them would lose it.
    let keep: &[&str] = if binding.custom {
        &["shells.json", "brains.json"]
    } else {
        &[]
    };
    let done = scaffold::write(&root, &files, args.force, keep)?;
    for (path, action) in &done {
        out.line(format!("  {} {path}", verb(*action)));
    }
    if let Some((path, action)) = scaffold::ensure_settings()? {
        out.line(format!(
            "  {} {} (global settings)",
            verb(action),
            path.display()
        ));
    }
    if done.iter().all(|(_, a)| *a == FileAction::Kept) {
        out.line(format!(
            "Nothing to do: all {} files exist in {}. Use --force to rewrite them.",
            done.len(),
            root.join(crate::config::MODIX_DIR).display()
        ));
        return Ok(Exit::Ok);
    }
    say_binding(&binding, out);
    say_tester(&binding, out);
    if let Some(note) = &workspace.note {
        out.line(note);
    }
    if let Some(w) = &workspace.warning {
        out.warn(format!(
            "`modix go` cannot make a run's workspace here yet: {w}"
        ));
    }
    out.line("Commit .modix/ (its .gitignore keeps the run records out).");
    out.line("Next: `modix validate` checks the config, `modix doctor` checks what is ready.");
    Ok(Exit::Ok)
}

fn verb(action: FileAction) -> &'static str {
    match action {
        FileAction::Created => "created",
        FileAction::Kept => "kept   ",
        FileAction::Rewritten => "rewrote",
    }
}

/// What the planner and executor were bound to; a warning (stderr) when the
/// CLI they need is not there.
fn say_binding(binding: &Binding, out: &Output) {
    let roles = if binding.tests.chosen.is_some() {
        "planner and executor"
    } else {
        "planner, executor and tester"
    };
    match &binding.found_at {
        Some(path) => out.line(format!(
            "Bound the {roles} to `{}` (found at {}) with brain `{}`.",
            binding.shell,
            path.display(),
            binding.brain
        )),
        None if binding.detected.is_empty() && !binding.custom => out.warn(format!(
            "no agent CLI found on PATH (looked for claude, codex, gemini, aider), so the {roles} are bound to `{}` anyway: `modix go` fails until it is installed. Install one, or bind another with `modix init --force --shell NAME` (a preset, or a shell you define in .modix/shells.json).",
            binding.shell
        )),
        None => out.warn(format!(
            "the {roles} are bound to `{}` as asked, but it is not on PATH{}.",
            binding.shell,
            if binding.detected.is_empty() {
                String::new()
            } else {
                format!(
                    " (found: {})",
                    binding
                        .detected
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )),
    }
}

/// What the tester runs, and which file said so.
fn say_tester(binding: &Binding, out: &Output) {
    for w in &binding.tests.warnings {
        out.warn(w);
    }
    match &binding.tests.chosen {
        Some(test) => out.line(format!(
            "Bound the tester to `{}` ({}); it is also `commands.test` in .modix/projects.json.",
            test.argv.join(" "),
            test.because
        )),
        None => out.line(format!(
            "No test command recognised (looked for {}): the tester is the agent, judging by itself. To run a real suite, give the tester a \"command\" in .modix/agents.json.",
            scaffold::STACKS
        )),
    }
    if !binding.tests.others.is_empty() {
        let others: Vec<String> = binding
            .tests
            .others
            .iter()
            .map(|t| format!("`{}` ({})", t.argv.join(" "), t.because))
            .collect();
        out.line(format!(
            "Also recognised: {}. To use one instead, set it as the tester's \"command\" in .modix/agents.json and `commands.test` in .modix/projects.json.",
            others.join(", ")
        ));
    }
}
