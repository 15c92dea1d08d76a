//! `modix doctor`'s findings: which agent CLIs are installed and at what
//! version, which API keys are set (never their values), whether every
//! agent the workflow needs can run — for a plain command (a test runner),
//! by running a cheap probe of it, as the agent would run, so that "pytest
//! is not installed" is found here rather than reported by the run as
//! failing tests — and which environment variables each agent receives.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::config::{Agent, Binding, Config, Shell};
use crate::orchestrator::Engine;
use crate::project::Project;
use crate::shell::{CaptureLimits, EndReason, ProcessSpec, find_binary, last_lines, run_process};

#[derive(Debug, Clone, Serialize)]
pub struct ShellCheck {
    pub name: String,
    pub binary: String,
    pub path: Option<PathBuf>,
    pub version_raw: Option<String>,
    pub version: Option<String>,
    pub requires: Option<String>,
    pub requirement_met: Option<bool>,
    pub ok: bool,
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrainCheck {
    pub name: String,
    pub provider: String,
    pub model: String,
    pub api_key_env: Option<String>,
    /// `None` when the brain needs no key.
    pub key_present: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentCheck {
    pub id: String,
    pub role: String,
    pub binding: String,
    pub used_by_workflow: bool,
    pub ready: bool,
    pub problems: Vec<String>,
    /// The probe run for a command agent, when one is known or declared.
    pub probe: Option<ProbeCheck>,
    /// The environment variables the agent will receive (names only).
    pub env: Vec<EnvName>,
    /// Allow-listed variables that are not set here, so not passed.
    pub env_unset: Vec<String>,
}

/// A cheap command run in place of a command agent, to see that it can run
/// at all (`python3 -m pytest --version` for `python3 -m pytest`).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeCheck {
    pub argv: Vec<String>,
    /// Where the probe comes from: `built-in` or `projects.json commands.probes.NAME`.
    pub from: String,
    pub ok: bool,
    /// The probe's own error line when it failed.
    pub error: Option<String>,
}

/// One variable an agent receives, and why.
#[derive(Debug, Clone, Serialize)]
pub struct EnvName {
    pub name: String,
    /// `env.allow` (runtimes.json), `shell` (shells.json `env`), `brain key`,
    /// `endpoint`, or `modix` (the MODIX_* contract).
    pub from: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workflow: String,
    pub shells: Vec<ShellCheck>,
    pub brains: Vec<BrainCheck>,
    pub agents: Vec<AgentCheck>,
    /// Every agent the default workflow uses is ready.
    pub ready: bool,
}

/// Runs every check. Spawns each shell's version probe and each command
/// agent's probe (bounded in time), all at once on the engine's runtime.
pub fn diagnose(engine: &Engine, project: &Project) -> Report {
    let config = &project.config;
    let planned: Vec<(String, Vec<String>, String)> = config
        .agents
        .values()
        .filter_map(|a| probe_for(config, a).map(|(argv, from)| (a.id.clone(), argv, from)))
        .collect();
    let (shells, probes) = engine.block_on(async {
        // Each probe is its own process with its own timeout.
        let mut shell_set = tokio::task::JoinSet::new();
        for (i, shell) in config.shells.values().enumerate() {
            let (root, shell) = (config.paths.root.clone(), shell.clone());
            shell_set.spawn(async move { (i, check_shell(&root, &shell).await) });
        }
        let mut probe_set = tokio::task::JoinSet::new();
        for (id, argv, from) in planned {
            let (root, env) = (config.paths.root.clone(), allowed_env(config));
            probe_set.spawn(async move {
                let result = run_probe(&root, &argv, env).await;
                (
                    id,
                    ProbeCheck {
                        argv,
                        from,
                        ok: result.is_ok(),
                        error: result.err(),
                    },
                )
            });
        }
        let mut shells = Vec::new();
        while let Some(Ok(done)) = shell_set.join_next().await {
            shells.push(done);
        }
        shells.sort_by_key(|(i, _)| *i);
        let mut probes = BTreeMap::new();
        while let Some(Ok((id, probe))) = probe_set.join_next().await {
            probes.insert(id, probe);
        }
        (
            shells
                .into_iter()
                .map(|(_, c)| c)
                .collect::<Vec<ShellCheck>>(),
            probes,
        )
    });
    let brains: Vec<BrainCheck> = config
        .brains
        .iter()
        .map(|(name, b)| BrainCheck {
            name: name.clone(),
            provider: b.provider.clone(),
            model: b.model.clone(),
            api_key_env: b.api_key_env.clone(),
            key_present: b.api_key_env.as_ref().map(|v| env_set(v)),
        })
        .collect();
    let used = workflow_agents(project);
    let shell_by_name: BTreeMap<&str, &ShellCheck> =
        shells.iter().map(|s| (s.name.as_str(), s)).collect();
    let agents: Vec<AgentCheck> = config
        .agents
        .values()
        .map(|a| {
            let mut check = check_agent(config, a, &shell_by_name, used.contains(&a.id));
            if let Some(probe) = probes.get(&a.id) {
                if let Some(error) = &probe.error {
                    check
                        .problems
                        .push(format!("`{}` failed: {error}", probe.argv.join(" ")));
                    check.ready = false;
                }
                check.probe = Some(probe.clone());
            }
            check
        })
        .collect();
    let ready = agents
        .iter()
        .filter(|a| a.used_by_workflow)
        .all(|a| a.ready);
    Report {
        workflow: config.project.workflow.clone(),
        shells,
        brains,
        agents,
        ready,
    }
}

fn check_agent(
    config: &Config,
    a: &Agent,
    shells: &BTreeMap<&str, &ShellCheck>,
    used_by_workflow: bool,
) -> AgentCheck {
    let mut problems = Vec::new();
    match &a.binding {
        Binding::Shell { shell, brain } => {
            match shells.get(shell.name.as_str()) {
                Some(s) if s.ok => {}
                Some(s) => problems.push(format!(
                    "shell `{}`: {}",
                    shell.name,
                    s.problem.as_deref().unwrap_or("not ready")
                )),
                None => problems.push(format!("shell `{}` is not defined", shell.name)),
            }
            if let Some(var) = &brain.api_key_env
                && !env_set(var)
            {
                problems.push(format!("brain `{}`: ${var} is not set", brain.name));
            }
        }
        Binding::Command { argv } => {
            let program = argv.first().map(String::as_str).unwrap_or_default();
            if find_binary(&config.paths.root, program).is_none() {
                problems.push(format!("command `{program}` not found"));
            }
        }
    }
    let (env, env_unset) = env_names(config, a);
    AgentCheck {
        id: a.id.clone(),
        role: a.role.clone(),
        binding: a.binding.describe(),
        used_by_workflow,
        ready: problems.is_empty(),
        problems,
        probe: None,
        env,
        env_unset,
    }
}

/// The MODIX_* variables every agent receives. Mirrors
/// `orchestrator::agent::base_env`, which builds them with their values.
const MODIX_CONTRACT: [&str; 8] = [
    "MODIX_RUN_ID",
    "MODIX_STATE",
    "MODIX_AGENT",
    "MODIX_ROLE",
    "MODIX_ATTEMPT",
    "MODIX_WORKDIR",
    "MODIX_CONTEXT",
    "MODIX_OUTPUT_SCHEMA",
];

/// The names of the variables `a` will receive, as
/// `orchestrator::agent::prepare` passes them: the allow-listed ones that
/// are set, a shell's own `env` and its brain's key when set, the endpoint
/// variable, and the MODIX_* contract. Also the allow-listed names not set.
fn env_names(config: &Config, a: &Agent) -> (Vec<EnvName>, Vec<String>) {
    let mut names = Vec::new();
    let mut unset = Vec::new();
    let mut add = |name: &str, from: &'static str| {
        if !names.iter().any(|n: &EnvName| n.name == name) {
            names.push(EnvName {
                name: name.to_owned(),
                from,
            });
        }
    };
    for name in &config.runtimes.env.allow {
        if std::env::var_os(name).is_some() {
            add(name, "env.allow");
        } else {
            unset.push(name.clone());
        }
    }
    if let Binding::Shell { shell, brain } = &a.binding {
        for name in shell.env.iter().filter(|n| std::env::var_os(n).is_some()) {
            add(name, "shell");
        }
        if let Some(key) = brain
            .api_key_env
            .as_deref()
            .filter(|k| std::env::var_os(k).is_some())
        {
            add(key, "brain key");
        }
        if let (Some(name), Some(_)) = (&shell.endpoint_env, &brain.endpoint) {
            add(name, "endpoint");
        }
    }
    for name in MODIX_CONTRACT {
        add(name, "modix");
    }
    (names, unset)
}

/// The allow-listed part of this environment: what a command agent (and so
/// its probe) runs with.
fn allowed_env(config: &Config) -> Vec<(OsString, OsString)> {
    config
        .runtimes
        .env
        .allow
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.into(), v)))
        .collect()
}

/// The probe for a command agent: the one the project declares for the
/// command it runs (`commands.probes.NAME` for the argv of `commands.NAME`),
/// else a built-in one for the program it runs.
fn probe_for(config: &Config, a: &Agent) -> Option<(Vec<String>, String)> {
    let Binding::Command { argv } = &a.binding else {
        return None;
    };
    // A program that is not there is reported as such; nothing to probe.
    find_binary(&config.paths.root, argv.first()?)?;
    let c = &config.project.commands;
    let named = [("build", &c.build), ("test", &c.test), ("lint", &c.lint)];
    for (name, command) in named {
        if command.as_ref() == Some(argv)
            && let Some(probe) = c.probes.get(name).filter(|p| !p.is_empty())
        {
            return Some((
                probe.clone(),
                format!("projects.json commands.probes.{name}"),
            ));
        }
    }
    known_probe(argv).map(|p| (p, "built-in".to_owned()))
}

/// A cheap command that fails the way `argv` would if its tool is missing:
/// `--version` of most runners, `python3 -m pytest --version` for pytest,
/// `python3 -c "import MODULE"` for other Python modules.
pub fn known_probe(argv: &[String]) -> Option<Vec<String>> {
    let program = argv.first()?;
    let base = Path::new(program).file_name()?.to_str()?;
    let with = |args: &[&str]| {
        Some(
            std::iter::once(program.clone())
                .chain(args.iter().map(|a| (*a).to_owned()))
                .collect(),
        )
    };
    if base.starts_with("python") {
        let Some(module) = argv.get(1).filter(|a| *a == "-m").and_then(|_| argv.get(2)) else {
            return with(&["--version"]);
        };
        return match module.as_str() {
            // `python3 -m unittest --version` is a usage error; its help is as cheap.
            "unittest" => with(&["-m", "unittest", "--help"]),
            "pytest" | "tox" | "nox" | "mypy" | "ruff" | "black" | "flake8" | "pylint" => {
                with(&["-m", module, "--version"])
            }
            m if m
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') =>
            {
                with(&["-c", &format!("import {m}")])
            }
            _ => None,
        };
    }
    match base {
        "go" => with(&["version"]),
        // Whether the Gemfile's gems are installed: what `bundle exec` needs.
        "bundle" => with(&["check"]),
        // Wrappers (gradlew, mvnw) may download a whole toolchain: no probe.
        "cargo" | "npm" | "npx" | "yarn" | "pnpm" | "node" | "deno" | "bun" | "make" | "gmake"
        | "mvn" | "gradle" | "dotnet" | "mix" | "rake" | "rspec" | "composer" | "phpunit"
        | "pytest" | "tox" | "nox" | "ruby" | "php" | "swift" | "ctest" | "just" => {
            with(&["--version"])
        }
        _ => None,
    }
}

/// How long a probe may take: some start a JVM.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `argv` in the project root with `env`; `Err` holds its error line.
async fn run_probe(
    root: &Path,
    argv: &[String],
    env: Vec<(OsString, OsString)>,
) -> Result<(), String> {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let Some(path) = find_binary(root, program) else {
        return Err(format!("`{program}` not found"));
    };
    let spec = ProcessSpec {
        program: path,
        args: argv[1..].iter().map(Into::into).collect(),
        cwd: root.to_path_buf(),
        env,
        stdin: None,
        timeout: PROBE_TIMEOUT,
        idle_timeout: None,
        kill_grace: Duration::from_millis(500),
        capture: CaptureLimits {
            head_bytes: 4 * 1024,
            tail_bytes: 16 * 1024,
        },
        echo: None,
        on_spawn: None,
        watch: None,
    };
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let out = run_process(spec, cancel).await.map_err(|e| e.to_string())?;
    match out.end {
        EndReason::Exited if out.exit_code == Some(0) => Ok(()),
        EndReason::Exited => {
            // The tool's own words: its last line on stderr, else on stdout.
            let line = last_lines(&out.stderr.text(), 1)
                .into_iter()
                .chain(last_lines(&out.stdout.text(), 1))
                .next()
                .map(|l| l.trim().to_owned());
            Err(line.unwrap_or_else(|| match (out.exit_code, out.signal) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => "ended abnormally".to_owned(),
            }))
        }
        _ => Err(format!(
            "did not finish within {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Ids of the agents the project's default workflow invokes.
fn workflow_agents(project: &Project) -> Vec<String> {
    let Ok(workflow) = project.workflow(None) else {
        return Vec::new();
    };
    workflow
        .machine
        .states()
        .filter_map(|(id, _)| workflow.agent(id).map(|a| a.id.clone()))
        .collect()
}

async fn check_shell(root: &std::path::Path, shell: &Shell) -> ShellCheck {
    let mut check = ShellCheck {
        name: shell.name.clone(),
        binary: shell.binary.clone(),
        path: find_binary(root, &shell.binary),
        version_raw: None,
        version: None,
        requires: shell.requires.clone(),
        requirement_met: None,
        ok: false,
        problem: None,
    };
    let Some(path) = check.path.clone() else {
        check.problem = Some(format!("`{}` not found on PATH", shell.binary));
        return check;
    };
    let Some(probe) = &shell.version else {
        check.ok = true;
        return check;
    };
    let probed =
        crate::shell::probe_version(&path, &probe.args, &probe.regex, Duration::from_secs(10))
            .await;
    match probed {
        Ok((raw, version)) => {
            check.version_raw = Some(raw);
            check.version = Some(version.to_string());
            match shell.requires.as_deref().map(semver::VersionReq::parse) {
                Some(Ok(req)) => {
                    let met = req.matches(&version);
                    check.requirement_met = Some(met);
                    if !met {
                        check.problem = Some(format!(
                            "version {version} does not satisfy `{req}`: install a matching version or change `requires`"
                        ));
                    }
                }
                Some(Err(e)) => check.problem = Some(format!("bad requirement: {e}")),
                None => {}
            }
        }
        Err(e) => check.problem = Some(e),
    }
    check.ok = check.problem.is_none();
    check
}
