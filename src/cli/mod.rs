//! The command line: argument parsing, settings and logging set-up, and
//! dispatch to one module per command. Commands return an [`Exit`] or an
//! [`Error`]; errors are rendered here, in one place ([`Output::report`]),
//! as text or — for commands given `--json` — as a JSON object.

mod control;
mod doctor;
mod dry_run;
mod fsm;
mod gate;
mod go;
mod history;
mod init;
mod loops;
mod meta;
mod output;
mod runs;
mod status_view;
mod validate;
mod work;

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
    propagate_version = true,
    after_help = examples(&[
        ("modix init", "scaffold .modix/ in this project"),
        ("modix doctor", "is every agent the workflow needs ready?"),
        ("modix go \"Add a --verbose flag\"", "run the workflow on an epic"),
        ("modix history last", "what the newest run did"),
    ]),
)]
pub struct Cli {
    /// Project directory (default: the nearest parent with a `.modix/` folder).
    #[arg(long, global = true, env = "MODIX_PROJECT", value_name = "DIR")]
    pub project: Option<PathBuf>,

    /// More output: -v info logs (and, with `go`, the agents' own output), -vv debug, -vvv trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr: no progress, no warnings. What the command was
    /// asked for (a table, `go`'s one-line summary) still goes to stdout.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// When to use colours: auto (a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, env = "MODIX_COLOR", value_name = "WHEN", value_parser = enum_parser::<ColorChoice>())]
    pub color: Option<ColorChoice>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// An "Examples:" section for `--help`: each command with what it does.
fn examples(items: &[(&str, &str)]) -> String {
    let wide = items.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let mut s = String::from("Examples:");
    for (cmd, what) in items {
        s.push_str(&format!("\n  {cmd:<wide$}  # {what}"));
    }
    s
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
    #[command(after_help = examples(&[
        ("modix init", "bind agents to the agent CLI found on PATH"),
        ("modix init --shell codex", "bind them to Codex CLI"),
        ("modix init --force --shell bot", "rebind to a shell defined in .modix/shells.json"),
    ]))]
    Init(init::InitArgs),
    /// Check every config and FSM file; report all problems at once.
    #[command(after_help = examples(&[
        ("modix validate", "every problem, with file, line and a fix"),
        ("modix validate --json | jq .diagnostics", "the same for tools"),
    ]))]
    Validate(validate::ValidateArgs),
    /// Check that the agent CLIs, keys and commands the workflow needs are ready.
    #[command(after_help = examples(&[
        ("modix doctor", "shells, keys, agents: ready or not, and why"),
        ("modix doctor -v", "also the environment variables each agent receives"),
        ("modix doctor --json", "the findings for tools"),
    ]))]
    Doctor(doctor::DoctorArgs),
    /// List, show, check and draw workflow state machines.
    #[command(subcommand, after_help = examples(&[
        ("modix fsm list", "the workflows here"),
        ("modix fsm show plan_execute_test", "one of them in full"),
        ("modix fsm graph --run last", "the newest run's path through its workflow"),
    ]))]
    Fsm(fsm::FsmCommand),
    /// Run the workflow on an epic.
    #[command(after_help = examples(&[
        ("modix go \"Add a --verbose flag\"", "plan, execute, test"),
        ("modix go --workflow plan_test \"Check only\"", "another workflow"),
        ("modix -q go \"Fix the build\"", "only errors and the summary line"),
        ("modix go --json \"Fix it\" | jq -c .type", "one JSON event per line"),
        ("modix go --dry-run \"Fix it\"", "what would run, without running anything"),
        ("modix go --epic-file epic.md", "a long epic from a file (`-`: stdin)"),
        ("modix go --model executor=opus --env BOT_DELAY \"Fix it\"", "this run only"),
    ]))]
    Go(go::GoArgs),
    /// Continue an interrupted run from its last recorded state.
    #[command(after_help = examples(&[
        ("modix resume", "the newest interrupted run"),
        ("modix resume 01JD8Q3A", "a run by id prefix"),
        ("modix resume last~1", "the run before the newest"),
    ]))]
    Resume(go::ResumeArgs),
    /// What a run is doing now (or every live run): state, agent, gate, last steps.
    #[command(after_help = examples(&[
        ("modix status", "every run that is running or waiting for you"),
        ("modix status last --watch", "follow the newest run until it ends"),
        ("modix status 9qahxcaw --json", "one run, for tools"),
    ]))]
    Status(control::StatusArgs),
    /// Approve the gate a run waits at (its first event), and continue the run.
    #[command(after_help = examples(&[
        ("modix approve last", "go on with the plan"),
        ("modix approve 9qahxcaw --note \"keep the old API too\"", "with a word for the next agents"),
        ("modix approve last --later", "record the answer; `modix resume` goes on"),
    ]))]
    Approve(control::ApproveArgs),
    /// Reject the gate a run waits at (its second event), with a note saying why.
    #[command(after_help = examples(&[
        ("modix reject last --note \"split the migration out\"", "send it back with the reason"),
    ]))]
    Reject(control::RejectArgs),
    /// Answer a gate with any of its events.
    #[command(after_help = examples(&[
        ("modix answer last needs_design --note \"talk to the team first\"", "a gate with more than two ways on"),
    ]))]
    Answer(control::AnswerArgs),
    /// Stop a running run at its next step boundary (or now); it stays resumable.
    #[command(after_help = examples(&[
        ("modix stop last", "after the current step"),
        ("modix stop last --now", "stop the running agent too"),
    ]))]
    Stop(control::StopArgs),
    /// Start a new run from a step of another (its record up to there, its
    /// workspace at that step's commit).
    #[command(after_help = examples(&[
        ("modix fork last --at 3", "branch off after step 3"),
        ("modix fork 9qahxcaw --at 5 --note \"try the other approach\"", "with a word for the next agent"),
    ]))]
    Fork(control::ForkArgs),
    /// Queue messages for a run's next agent, or list them.
    #[command(subcommand, after_help = examples(&[
        ("modix pending add last \"also handle an empty list\"", "for the next judge, planner or executor"),
        ("modix pending list last", "queued and delivered"),
    ]))]
    Pending(control::PendingCommand),
    /// Show recorded runs, or one run's steps.
    #[command(after_help = examples(&[
        ("modix history", "runs, newest first"),
        ("modix history --status failed --since 1d", "failures of the last day"),
        ("modix history last", "the newest run, step by step"),
        ("modix history last~1 --timeline", "how long each step of the run before took"),
        ("modix history last --invocation 2", "one agent invocation in full"),
        ("modix history | awk -F'\\t' '{print $1}'", "piped: tab-separated, full ids"),
    ]))]
    History(history::HistoryArgs),
    /// Show what a run changed, through git's own diff.
    #[command(after_help = examples(&[
        ("modix diff last", "the newest run's changes against where it started"),
        ("modix diff 9qahxcaw --stat", "which files, how much (by the short id of modix/9qahxcaw)"),
        ("modix diff last --step 3", "what step 3 alone changed"),
    ]))]
    Diff(work::DiffArgs),
    /// Bring a run's result into your current branch (or, for a copy, your folder).
    #[command(after_help = examples(&[
        ("modix apply last", "one commit with the run's changes on your branch"),
        ("modix apply 9qahxcaw --merge", "a merge commit keeping the run's steps"),
    ]))]
    Apply(work::ApplyArgs),
    /// Remove the workspaces of finished runs.
    #[command(after_help = examples(&[
        ("modix prune", "every finished run's worktree or copy"),
        ("modix prune --older-than 1w --branches", "week-old ones, branches too"),
    ]))]
    Prune(work::PruneArgs),
    /// Print a shell completion script to stdout.
    #[command(after_help = examples(&[
        ("modix completions bash > ~/.local/share/bash-completion/completions/modix", "bash"),
        ("modix completions zsh > \"${fpath[1]}/_modix\"", "zsh"),
        ("modix completions fish > ~/.config/fish/completions/modix.fish", "fish"),
    ]))]
    Completions(meta::CompletionsArgs),
    /// Print modix's manual page (roff) to stdout.
    #[command(after_help = examples(&[
        ("modix man | man -l -", "read it"),
        ("modix man > ~/.local/share/man/man1/modix.1", "install it"),
    ]))]
    Man,
}

impl Command {
    /// Whether the command was asked for JSON (errors then come as JSON too).
    fn json(&self) -> bool {
        match self {
            Command::Init(_) | Command::Completions(_) | Command::Man => false,
            Command::Validate(a) => a.json,
            Command::Doctor(a) => a.json,
            Command::Fsm(c) => c.json(),
            Command::Go(a) => a.json,
            Command::Resume(a) => a.json,
            Command::History(a) => a.json,
            Command::Diff(_) | Command::Stop(_) => false,
            Command::Status(a) => a.json,
            Command::Approve(a) => a.json,
            Command::Reject(a) => a.json,
            Command::Answer(a) => a.json,
            Command::Pending(c) => c.json(),
            Command::Fork(a) => a.json,
            Command::Apply(a) => a.json,
            Command::Prune(a) => a.json,
        }
    }

    /// Whether the command's engine takes Ctrl-C and SIGTERM (the signals
    /// `main` held), to stop what it runs in order: a run is recorded as
    /// stopped, doctor's checks are killed. The others let the signals
    /// have their default effect at once.
    fn takes_stops(&self) -> bool {
        match self {
            Command::Go(_)
            | Command::Resume(_)
            | Command::Approve(_)
            | Command::Reject(_)
            | Command::Answer(_)
            | Command::Fork(_)
            | Command::Doctor(_) => true,
            Command::Init(_)
            | Command::Validate(_)
            | Command::Fsm(_)
            | Command::History(_)
            | Command::Status(_)
            | Command::Stop(_)
            | Command::Pending(_)
            | Command::Diff(_)
            | Command::Apply(_)
            | Command::Prune(_)
            | Command::Completions(_)
            | Command::Man => false,
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
    // Before any agent starts: what its descendants leave behind is ours.
    crate::shell::adopt_orphans();
    let (settings, settings_diags) = settings::load();
    let cli = match parse(&settings) {
        Ok(cli) => cli,
        Err(code) => return code.into(),
    };
    if !cli.command.as_ref().is_some_and(Command::takes_stops) {
        crate::stops::release();
    }
    let Some(command) = &cli.command else {
        // Bare `modix`: the help, as cargo and gh print it, and success.
        let _ = clap_command(&settings).print_help();
        return Exit::Ok.into();
    };
    let color = cli.color.or(settings.color);
    let out = Output::new(command.json(), cli.quiet, color);
    crate::error::on_fatal(move |e| out.report(e));
    init_logging(&cli, &settings, out.color_err);
    let ctx = Ctx {
        cli,
        out,
        settings,
        settings_diags,
    };
    let Some(command) = &ctx.cli.command else {
        return Exit::Ok.into();
    };
    let result = match command {
        Command::Init(args) => init::run(&ctx, args),
        Command::Validate(args) => validate::run(&ctx, args),
        Command::Doctor(args) => doctor::run(&ctx, args),
        Command::Fsm(cmd) => fsm::run(&ctx, cmd),
        Command::Go(args) => go::run(&ctx, args),
        Command::Resume(args) => go::resume(&ctx, args),
        Command::History(args) => history::run(&ctx, args),
        Command::Status(args) => control::status(&ctx, args),
        Command::Approve(args) => control::approve(&ctx, args),
        Command::Reject(args) => control::reject(&ctx, args),
        Command::Answer(args) => control::answer(&ctx, args),
        Command::Stop(args) => control::stop(&ctx, args),
        Command::Pending(cmd) => control::pending(&ctx, cmd),
        Command::Fork(args) => control::fork(&ctx, args),
        Command::Diff(args) => work::diff(&ctx, args),
        Command::Apply(args) => work::apply(&ctx, args),
        Command::Prune(args) => work::prune(&ctx, args),
        Command::Completions(args) => meta::completions(args, clap_command(&ctx.settings)),
        Command::Man => meta::man(clap_command(&ctx.settings)),
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            ctx.out.report(&e);
            e.exit_code().into()
        }
    }
}

/// The clap command, coloured as `--color`/`MODIX_COLOR`/settings say (clap
/// parses `--color` itself, so the command line is peeked at first).
fn clap_command(settings: &Settings) -> clap::Command {
    use clap::CommandFactory as _;
    let choice = peek_color().or(settings.color);
    let color = match choice.unwrap_or_default() {
        ColorChoice::Always => clap::ColorChoice::Always,
        ColorChoice::Never => clap::ColorChoice::Never,
        ColorChoice::Auto => clap::ColorChoice::Auto,
    };
    Cli::command().color(color)
}

/// `--color WHEN` or `--color=WHEN` from the command line, else `MODIX_COLOR`.
fn peek_color() -> Option<ColorChoice> {
    // `args_os`: an argument that is not UTF-8 is clap's usage error to
    // report, not a panic here.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let from_args = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--color=")
            .map(str::to_owned)
            .or_else(|| (a == "--color").then(|| args.get(i + 1).cloned()).flatten())
    });
    from_args
        .or_else(|| std::env::var("MODIX_COLOR").ok())
        .and_then(|v| v.parse().ok())
}

/// Parses the command line. A usage error is printed by clap — or, when the
/// command line asks for `--json`, as the JSON error object every `--json`
/// command prints — and becomes exit code 2; `--help`/`--version` exit 0.
fn parse(settings: &Settings) -> Result<Cli, Exit> {
    use clap::FromArgMatches as _;
    let matches = clap_command(settings).try_get_matches();
    let err = match matches.and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    if !err.use_stderr() {
        let _ = err.print();
        return Err(Exit::Ok);
    }
    if std::env::args_os().any(|a| a == "--json") {
        let (message, tips) = clap_error_parts(&err);
        let help = match tips {
            Some(tips) => format!("{tips}; `modix help` lists the commands and their options"),
            None => "`modix help` lists the commands and their options".to_owned(),
        };
        Output::new(true, false, None).report(&Error::usage(message, help));
    } else {
        let _ = err.print();
    }
    Err(Exit::Usage)
}

/// clap's error as one line and its tips: the text without its `error:`
/// prefix, usage block and `--help` hint, with what continues it (the
/// missing `<RUN>`, `[possible values: …]`) joined on, and its `tip:`
/// lines (`a similar argument exists: '--limit'`) apart, for the help.
fn clap_error_parts(err: &clap::Error) -> (String, Option<String>) {
    let text = err.render().to_string();
    let (mut said, mut tips) = (Vec::new(), Vec::new());
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        match line.strip_prefix("tip: ") {
            Some(tip) => tips.push(tip),
            None if !line.is_empty() => said.push(line.trim_start_matches("error: ")),
            None => {}
        }
    }
    let tips = (!tips.is_empty()).then(|| tips.join("; "));
    (said.join(" "), tips)
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
        .with_writer(|| output::LogWriter)
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
                Some(p) => match std::fs::metadata(cwd.join(p)) {
                    Ok(m) if !m.is_dir() => {
                        return Error::usage(
                            format!("--project {} is a file, not a folder", p.display()),
                            "pass the project's folder (the one holding .modix/)",
                        );
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Error::usage(
                            format!("--project {}: no such folder", p.display()),
                            "pass the project's folder (the one holding .modix/)",
                        );
                    }
                    _ => format!("no .modix/ folder in {}", p.display()),
                },
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
        self.project_for(doing, crate::project::Purpose::Check)
    }

    /// [`Ctx::project`] for a purpose: a run treats problems in workflow
    /// files it does not use as warnings.
    pub fn project_for(
        &self,
        doing: &'static str,
        purpose: crate::project::Purpose,
    ) -> Result<Project, Error> {
        let paths = self.paths()?;
        let (project, diags) =
            crate::project::load_for(&paths, &self.settings, &self.settings_diags, purpose);
        match project {
            Some(p) => {
                // One line each: the command goes on, and `validate` shows them in full.
                if !self.out.json {
                    self.out.diagnostics_brief(&diags);
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
