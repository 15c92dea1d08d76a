//! `modix completions SHELL` and `modix man`: what package managers and
//! dotfiles install, generated from the same clap definition as `--help`.

use std::io::Write;

use crate::error::{Error, Exit};

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for: bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> Result<Exit, Error> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "modix", &mut out);
    write_stdout(&out)
}

pub fn man(cmd: clap::Command) -> Result<Exit, Error> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| Error::io("cannot render the manual page", e))?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<Exit, Error> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(Exit::Ok),
        // `modix man | head` closes the pipe early: not modix's failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Exit::Ok),
        Err(e) => Err(Error::io("cannot write to stdout", e)),
    }
}
