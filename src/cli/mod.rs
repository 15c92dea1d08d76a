//! The command line: argument parsing, logging set-up, and dispatch to one
//! module per command. Commands return an exit code; errors that reach here are
//! rendered once, in one place.

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

use clap::{Parser, Subcommand, ValueEnum};

use crate::exit;

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

    /// When to use colors.
    #[arg(long, global = true, value_enum, env = "MODIX_COLOR")]
    pub color: Option<ColorChoice>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
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

/// Entry point used by `main.rs`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let out = Output::new(color_enabled(cli.color));
    init_logging(&cli);
    let code = match &cli.command {
        Command::Init(args) => init::run(&cli, args, &out),
        Command::Validate(args) => validate::run(&cli, args, &out),
        Command::Doctor(args) => doctor::run(&cli, args, &out),
        Command::Fsm(cmd) => fsm::run(&cli, cmd, &out),
        Command::Go(args) => go::run(&cli, args, &out),
        Command::Resume(args) => go::resume(&cli, args, &out),
        Command::History(args) => history::run(&cli, args, &out),
    };
    ExitCode::from(code)
}

/// Colors: `--color`/`MODIX_COLOR` beat the settings file's `color`.
fn color_enabled(choice: Option<ColorChoice>) -> bool {
    let from_settings = || match crate::config::settings::color().as_deref() {
        Some("always") => Some(ColorChoice::Always),
        Some("never") => Some(ColorChoice::Never),
        _ => None,
    };
    match choice.or_else(from_settings).unwrap_or(ColorChoice::Auto) {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
        }
    }
}

/// Log level: `-q`/`-v` flags beat `MODIX_LOG`, which beats the global settings file.
fn init_logging(cli: &Cli) {
    let from_flags = if cli.quiet {
        Some("error")
    } else {
        match cli.verbose {
            0 => None,
            1 => Some("info"),
            2 => Some("debug"),
            _ => Some("trace"),
        }
    };
    let level = from_flags
        .map(str::to_owned)
        .or_else(|| std::env::var("MODIX_LOG").ok())
        .or_else(crate::config::settings_log_level)
        .unwrap_or_else(|| "warn".to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(format!("modix={level}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("modix=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}

/// The project the command works on, or an error saying how to get one.
fn project_paths(cli: &Cli, out: &Output) -> Result<crate::config::ProjectPaths, u8> {
    let cwd = std::env::current_dir().map_err(|e| {
        out.error(format!("cannot read the current directory: {e}"), None);
        exit::USAGE
    })?;
    crate::config::find_project(cli.project.as_deref(), &cwd).ok_or_else(|| {
        let place = match &cli.project {
            Some(p) => format!("no .modix/ folder in {}", p.display()),
            None => format!(
                "no .modix/ folder in {} or any parent directory",
                cwd.display()
            ),
        };
        out.error(
            format!("not a modix project: {place}"),
            Some("run `modix init` in the project's root, or pass --project DIR"),
        );
        exit::USAGE
    })
}

/// The project loaded and cross-checked. Warnings are shown; on errors they
/// are shown with why `doing` cannot go on, and the exit code is returned.
fn load_project(cli: &Cli, out: &Output, doing: &str) -> Result<crate::project::LoadedProject, u8> {
    let paths = project_paths(cli, out)?;
    let (project, diags) = crate::project::load_checked(&paths);
    if !diags.is_empty() {
        out.diagnostics(&diags);
    }
    project.ok_or_else(|| {
        out.error(
            format!("the configuration has errors, so {doing}"),
            Some("run `modix validate` and fix what it reports"),
        );
        exit::USAGE
    })
}
