//! The command line: argument parsing, settings and logging set-up, and
//! dispatch to one module per command. Commands return an [`Exit`] or an
//! [`Error`]; errors are rendered here, in one place ([`Output::report`]),
//! as text or — for commands given `--json` — as a JSON object.

mod doctor;
mod fsm;
mod go;
mod history;
mod init;
mod output;
mod validate;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};

use crate::config::{ColorChoice, LogLevel, ProjectPaths, Settings, settings};
use crate::diagnostics::Diagnostics;
use crate::error::{Error, Exit};
use crate::project::Project;

pub use output::Output;

#[derive(Debug, Parser)]
#[command(
    name = "modix",
    version,
    about = "Drive AI coding CLIs through declarative plan → execute → test state machines",
    propagate_version = true
)]
pub struct Cli {
    /// Project directory (default: the nearest parent with a `.modix/` folder).
    #[arg(long, global = true, env = "MODIX_PROJECT", value_name = "DIR")]
    pub project: Option<PathBuf>,

    /// More log output (-v info, -vv debug, -vvv trace); with `go`, stream agent output.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// When to use colors: auto, always, never.
    #[arg(long, global = true, env = "MODIX_COLOR", value_parser = enum_parser::<ColorChoice>())]
    pub color: Option<ColorChoice>,

    #[command(subcommand)]
    pub command: Command,
}

/// A clap parser for an enum whose string forms strum derives, so the CLI
/// and the config files share one spelling of each value.
fn enum_parser<T>() -> impl clap::builder::TypedValueParser<Value = T>
where
    T: FromStr + strum::VariantNames + Clone + Send + Sync + 'static,
{
    clap::builder::PossibleValuesParser::new(T::VARIANTS)
        .try_map(|s| s.parse::<T>().map_err(|_| format!("unknown value `{s}`")))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create `.modix/` in the current directory with a working starter configuration.
    Init(init::InitArgs),
    /// Check every config and FSM file; report all problems at once.
    Validate(validate::ValidateArgs),
    /// Check that the agent CLIs, keys and bindings the workflow needs are ready.
    Doctor(doctor::DoctorArgs),
    /// List, show, check and draw workflow state machines.
    #[command(subcommand)]
    Fsm(fsm::FsmCommand),
    /// Run the workflow on an epic.
    Go(go::GoArgs),
    /// Continue an interrupted run from its last recorded state.
    Resume(go::ResumeArgs),
    /// Show recorded runs, or one run's transitions.
    History(history::HistoryArgs),
}

impl Command {
    /// Whether the command was asked for JSON (errors then come as JSON too).
    fn json(&self) -> bool {
        match self {
            Command::Init(_) => false,
            Command::Validate(a) => a.json,
            Command::Doctor(a) => a.json,
            Command::Fsm(c) => c.json(),
            Command::Go(a) => a.json,
            Command::Resume(a) => a.json,
            Command::History(a) => a.json,
        }
    }
}

/// What every command gets: the parsed command line, how to speak, and the
/// global settings, layered once at start-up.
pub struct Ctx {
    pub cli: Cli,
    pub out: Output,
    pub settings: Settings,
    /// Problems in the settings file, reported by commands that load a project.
    pub settings_diags: Diagnostics,
}

/// Entry point used by `main.rs`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return code.into();
        }
    };
    let (settings, settings_diags) = settings::load();
    let color = color_enabled(cli.color.or(settings.color));
    init_logging(&cli, &settings, color);
    let out = Output::new(color, cli.command.json());
    let ctx = Ctx {
        cli,
        out,
        settings,
        settings_diags,
    };
    let result = match &ctx.cli.command {
        Command::Init(args) => init::run(&ctx, args),
        Command::Validate(args) => validate::run(&ctx, args),
        Command::Doctor(args) => doctor::run(&ctx, args),
        Command::Fsm(cmd) => fsm::run(&ctx, cmd),
        Command::Go(args) => go::run(&ctx, args),
        Command::Resume(args) => go::resume(&ctx, args),
        Command::History(args) => history::run(&ctx, args),
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            ctx.out.report(&e);
            e.exit_code().into()
        }
    }
}

fn color_enabled(choice: Option<ColorChoice>) -> bool {
    match choice.unwrap_or_default() {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
        }
    }
}

/// Log level: `-q`/`-v` flags beat `MODIX_LOG`, which beats the settings file
/// (both already layered into `settings`).
fn init_logging(cli: &Cli, settings: &Settings, color: bool) {
    let from_flags = if cli.quiet {
        Some(LogLevel::Error)
    } else {
        match cli.verbose {
            0 => None,
            1 => Some(LogLevel::Info),
            2 => Some(LogLevel::Debug),
            _ => Some(LogLevel::Trace),
        }
    };
    let level: &'static str = from_flags
        .or(settings.log_level)
        .unwrap_or(LogLevel::Warn)
        .into();
    let filter = tracing_subscriber::EnvFilter::new(format!("modix={level}"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(color)
        .with_target(false)
        .without_time()
        .try_init();
}

impl Ctx {
    /// Where `--project DIR` points, or the current directory: where `init` writes.
    pub fn target_dir(&self) -> Result<PathBuf, Error> {
        let cwd = current_dir()?;
        Ok(match &self.cli.project {
            Some(p) => cwd.join(p),
            None => cwd,
        })
    }

    /// The project the command works on, or an error saying how to get one.
    pub fn paths(&self) -> Result<ProjectPaths, Error> {
        let cwd = current_dir()?;
        crate::config::find_project(self.cli.project.as_deref(), &cwd).ok_or_else(|| {
            let place = match &self.cli.project {
                Some(p) => format!("no .modix/ folder in {}", p.display()),
                None => format!(
                    "no .modix/ folder in {} or any parent directory",
                    cwd.display()
                ),
            };
            Error::usage(
                format!("not a modix project: {place}"),
                "run `modix init` in the project's root, or pass --project DIR",
            )
        })
    }

    /// The project loaded and resolved. Warnings are shown; errors become
    /// [`Error::Config`] saying why `doing` cannot go on.
    pub fn project(&self, doing: &'static str) -> Result<Project, Error> {
        let paths = self.paths()?;
        let (project, diags) = crate::project::load(&paths, &self.settings, &self.settings_diags);
        match project {
            Some(p) => {
                if !diags.is_empty() && !self.out.json {
                    self.out.diagnostics(&diags);
                }
                Ok(p)
            }
            None => Err(Error::Config {
                diagnostics: Box::new(diags),
                doing,
            }),
        }
    }
}

fn current_dir() -> Result<PathBuf, Error> {
    std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))
}
