//! `modix doctor`'s findings: which agent CLIs are installed and at what
//! version (and whether that is a version the presets' flags were checked
//! against), whether each can authenticate — the brain's key, or the CLI's
//! own login (`claude auth status`, `codex login status`, Gemini's chosen
//! auth) —, whether every agent the workflow needs can run — for a plain
//! command (a test runner), by running a cheap probe of it, as the agent
//! would run, so that "pytest is not installed" is found here rather than
//! reported by the run as failing tests —, and which environment variables
//! each agent receives. With `--deep`, every flag a shell passes is looked
//! up in the CLI's own `--help`. [`readiness`] is the same check for the
//! agents of one workflow, before `go` creates a run.

mod cache;
mod env;
mod flags;
mod login;
mod probe;
mod run;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use env::EnvName;
pub use flags::FlagsCheck;
pub use login::Login;

use crate::config::presets::{PRESET_NAMES, preset};
use crate::config::{Agent, Binding, Config, Shell};
use crate::orchestrator::Engine;
use crate::project::{Project, Workflow};
use crate::shell::find_binary;

#[derive(Debug, Clone, Serialize)]
pub struct ShellCheck {
    pub name: String,
    pub binary: String,
    pub path: Option<PathBuf>,
    pub version_raw: Option<String>,
    pub version: Option<String>,
    pub requires: Option<String>,
    pub requirement_met: Option<bool>,
    /// The versions the shell's flags were checked against.
    pub tested: Option<String>,
    pub in_tested_range: Option<bool>,
    /// Worth knowing, not blocking (e.g. a version outside `tested`).
    pub warnings: Vec<String>,
    /// The CLI's own login, when an agent on it has no key to use.
    pub login: Option<Login>,
    /// `--deep`: its flags against its own `--help`.
    pub flags: Option<FlagsCheck>,
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
    /// How a shell agent's CLI authenticates: the brain's key, or its own.
    pub auth: Option<Login>,
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

/// An agent CLI modix knows by name, found on PATH (configured or not).
#[derive(Debug, Clone, Serialize)]
pub struct CliFound {
    pub name: String,
    pub path: PathBuf,
    pub version: Option<String>,
    /// The shells of this project that run it.
    pub shells: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workflow: String,
    /// Every agent CLI modix has a preset for that is on PATH.
    pub clis: Vec<CliFound>,
    pub shells: Vec<ShellCheck>,
    pub brains: Vec<BrainCheck>,
    pub agents: Vec<AgentCheck>,
    /// Where runs will work, and whether git can give them a workspace.
    pub workspace: WorkspaceCheck,
    /// Every agent the default workflow uses is ready, and git is there.
    pub ready: bool,
}

/// What a run's workspace needs: git (every mode tracks changes with it) at
/// a version new enough, and the mode the project's runs will get.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceCheck {
    pub mode: crate::workspace::Mode,
    /// Whether the mode was chosen because `projects.json` names none.
    pub automatic: bool,
    pub git_version: Option<String>,
    pub problem: Option<String>,
}

/// git's version for the report, and whatever would stop `go` from making
/// the run's workspace — found by the same checks `go` makes.
fn workspace_check(project: &Project) -> WorkspaceCheck {
    use crate::workspace::{Git, MIN_GIT};
    let git_version = Git::new()
        .require(MIN_GIT, "modix workspaces")
        .ok()
        .map(|v| v.to_string());
    let (mode, problem) = crate::orchestrator::check_workspace(project);
    WorkspaceCheck {
        mode,
        automatic: project.config.project.workspace.is_none(),
        git_version,
        problem,
    }
}

/// How long a CLI may take to print its version (Gemini: ~3 s).
const VERSION_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs every check. The version probes, logins, `--help`s (with `deep`)
/// and command probes all run at once on the engine's runtime, each
/// bounded in time; `None` if Ctrl-C or SIGTERM stopped them.
pub fn diagnose(engine: &Engine, project: &Project, deep: bool) -> Option<Report> {
    let config = &project.config;
    let all: Vec<&Agent> = config.agents.values().collect();
    let found = engine.until_stopped(run_checks(config, &all, deep, true))?;
    let used = workflow_agents(project);
    let agents: Vec<AgentCheck> = all
        .iter()
        .map(|a| check_agent(config, a, &found, used.contains(&a.id)))
        .collect();
    let workspace = workspace_check(project);
    let ready = agents
        .iter()
        .filter(|a| a.used_by_workflow)
        .all(|a| a.ready)
        && workspace.problem.is_none();
    Some(Report {
        workflow: config.project.workflow.clone(),
        clis: found.clis,
        shells: found.shells.into_values().collect(),
        brains: brains(config),
        agents,
        workspace,
        ready,
    })
}

/// Whether the agents `workflow` invokes can run: each one's CLI found at
/// a version its shell accepts, a key or the CLI's own login for it, and
/// each command agent's probe passing — what `go` must know before it
/// creates a run. `Err` holds one line per problem (`agent `planner`: …`).
/// Bounded in time: everything runs at once, the slowest check (a probe)
/// within 20 s, and cut short by Ctrl-C or SIGTERM (then `Ok`); CLI
/// versions come from a cache under the modix home.
/// `MODIX_SKIP_READINESS=1` skips it (a login modix cannot see, tests of
/// the CLIs' own failures).
pub fn readiness(
    engine: &Engine,
    project: &Project,
    workflow: &Workflow,
) -> Result<(), Vec<String>> {
    if std::env::var_os("MODIX_SKIP_READINESS").is_some_and(|v| v == "1") {
        return Ok(());
    }
    let config = &project.config;
    let mut agents: Vec<&Agent> = Vec::new();
    for (id, _) in workflow.machine.states() {
        if let Some(a) = workflow.agent(id)
            && !agents.iter().any(|x| x.id == a.id)
        {
            agents.push(a);
        }
    }
    // A stop cut the checks short, so there is nothing to report: the
    // caller listens to the same engine and stops too.
    let Some(found) = engine.until_stopped(run_checks(config, &agents, false, false)) else {
        return Ok(());
    };
    let lines: Vec<String> = agents
        .iter()
        .map(|a| check_agent(config, a, &found, true))
        .flat_map(|c| {
            let id = c.id.clone();
            c.problems
                .into_iter()
                .map(move |p| format!("agent `{id}`: {p}"))
        })
        .collect();
    if lines.is_empty() { Ok(()) } else { Err(lines) }
}

/// What the concurrent checks found.
struct Found {
    shells: BTreeMap<String, ShellCheck>,
    probes: BTreeMap<String, ProbeCheck>,
    clis: Vec<CliFound>,
}

/// The shells of `agents` (with a login check where no key covers them),
/// their command probes, and with `list_clis` every known CLI on PATH.
async fn run_checks(config: &Config, agents: &[&Agent], deep: bool, list_clis: bool) -> Found {
    let root = config.paths.root.clone();
    let mut shells = tokio::task::JoinSet::new();
    for shell in shells_to_check(config, agents, list_clis) {
        let login_env = login_env(config, agents, &shell);
        let flags_env = env::allowed(config);
        let root = root.clone();
        shells.spawn(async move {
            check_shell(&root, &shell, login_env, deep.then_some(flags_env)).await
        });
    }
    let mut probes = tokio::task::JoinSet::new();
    for a in agents {
        if let Some((argv, from)) = probe::probe_for(config, a) {
            let (root, env, id) = (root.clone(), env::allowed(config), a.id.clone());
            probes.spawn(async move {
                let result = probe::run_probe(&root, &argv, env).await;
                let ok = result.is_ok();
                (
                    id,
                    ProbeCheck {
                        argv,
                        from,
                        ok,
                        error: result.err(),
                    },
                )
            });
        }
    }
    let clis = if list_clis {
        known_clis(config).await
    } else {
        Vec::new()
    };
    let mut found = Found {
        shells: BTreeMap::new(),
        probes: BTreeMap::new(),
        clis,
    };
    while let Some(Ok(check)) = shells.join_next().await {
        found.shells.insert(check.name.clone(), check);
    }
    while let Some(Ok((id, probe))) = probes.join_next().await {
        found.probes.insert(id, probe);
    }
    found
}

/// Every shell of the project (for `doctor`), or only those `agents` use.
fn shells_to_check(config: &Config, agents: &[&Agent], all: bool) -> Vec<Shell> {
    config
        .shells
        .values()
        .filter(|s| {
            all || agents
                .iter()
                .any(|a| a.binding.shell().is_some_and(|x| x.name == s.name))
        })
        .cloned()
        .collect()
}

/// The environment to ask `shell`'s CLI for its login with: that of the
/// first agent on it whose key and environment do not already authenticate
/// it. `None` when no agent needs the login (or the CLI has no login).
fn login_env(
    config: &Config,
    agents: &[&Agent],
    shell: &Shell,
) -> Option<Vec<(OsString, OsString)>> {
    let ways = login::ways(shell.preset.as_deref()?)?;
    agents.iter().find_map(|a| {
        let Binding::Shell { shell: s, brain } = &a.binding else {
            return None;
        };
        if s.name != shell.name || brain.api_key_env.as_deref().is_some_and(env_set) {
            return None;
        }
        let env = env::of_shell(config, s, brain);
        login::by_env(&ways, &env).is_none().then_some(env)
    })
}

/// Every agent CLI modix has a preset for, found on PATH, with its version.
async fn known_clis(config: &Config) -> Vec<CliFound> {
    let mut set = tokio::task::JoinSet::new();
    for (i, name) in PRESET_NAMES.iter().enumerate() {
        let Some(path) = find_binary(&config.paths.root, name) else {
            continue;
        };
        let shells: Vec<String> = config
            .shells
            .values()
            .filter(|s| find_binary(&config.paths.root, &s.binary).as_ref() == Some(&path))
            .map(|s| s.name.clone())
            .collect();
        let probe = preset(name).and_then(|p| p.version);
        set.spawn(async move {
            let version = match probe {
                Some(p) => version_of(&path, &p.args, &p.regex)
                    .await
                    .ok()
                    .map(|(_, v)| v.to_string()),
                None => None,
            };
            (
                i,
                CliFound {
                    name: (*name).to_owned(),
                    path,
                    version,
                    shells,
                },
            )
        });
    }
    let mut clis = Vec::new();
    while let Some(Ok(found)) = set.join_next().await {
        clis.push(found);
    }
    clis.sort_by_key(|(i, _)| *i);
    clis.into_iter().map(|(_, c)| c).collect()
}

/// The version `binary` prints, from the cache when the binary is unchanged.
async fn version_of(
    binary: &Path,
    args: &[String],
    regex: &str,
) -> Result<(String, semver::Version), String> {
    if let Some(hit) = cache::get(binary, args) {
        return Ok(hit);
    }
    let (raw, v) = crate::shell::probe_version(binary, args, regex, VERSION_TIMEOUT).await?;
    cache::put(binary, args, &raw, &v);
    Ok((raw, v))
}

fn brains(config: &Config) -> Vec<BrainCheck> {
    config
        .brains
        .iter()
        .map(|(name, b)| BrainCheck {
            name: name.clone(),
            provider: b.provider.clone(),
            model: b.model.clone(),
            api_key_env: b.api_key_env.clone(),
            key_present: b.api_key_env.as_ref().map(|v| env_set(v)),
        })
        .collect()
}

/// An agent's readiness from what the checks found: its shell's, its
/// key or login, or its command and probe.
fn check_agent(config: &Config, a: &Agent, found: &Found, used_by_workflow: bool) -> AgentCheck {
    let mut problems = Vec::new();
    let mut auth = None;
    match &a.binding {
        Binding::Shell { shell, brain } => {
            match found.shells.get(&shell.name) {
                Some(s) if s.ok => {}
                Some(s) => problems.push(format!(
                    "shell `{}`: {}",
                    shell.name,
                    s.problem.as_deref().unwrap_or("not ready")
                )),
                None => problems.push(format!("shell `{}` is not defined", shell.name)),
            }
            let login = found.shells.get(&shell.name).and_then(|s| s.login.as_ref());
            auth = authenticate(config, shell, brain, login);
            if let Some(a) = auth.as_ref().filter(|a| !a.ok) {
                problems.push(a.how.clone());
            }
        }
        Binding::Command { argv } => {
            let program = argv.first().map(String::as_str).unwrap_or_default();
            if find_binary(&config.paths.root, program).is_none() {
                problems.push(format!("command `{program}` not found"));
            }
        }
    }
    let probe = found.probes.get(&a.id).cloned();
    if let Some(error) = probe
        .as_ref()
        .and_then(|p| p.error.as_ref().map(|e| (p, e)))
    {
        problems.push(format!("`{}` failed: {}", error.0.argv.join(" "), error.1));
    }
    let (env, env_unset) = env::names(config, a);
    AgentCheck {
        id: a.id.clone(),
        role: a.role.clone(),
        binding: a.binding.describe(),
        used_by_workflow,
        ready: problems.is_empty(),
        problems,
        auth,
        probe,
        env,
        env_unset,
    }
}

/// How a shell agent's CLI authenticates: the brain's key when it is set,
/// else a key, token or provider switch of the CLI's own in what the agent
/// receives, else the login the CLI stored (`login`, asked for when no
/// variable covered it). A shell modix knows no login for needs its
/// brain's key, if the brain names one.
fn authenticate(
    config: &Config,
    shell: &Shell,
    brain: &crate::config::Brain,
    login: Option<&Login>,
) -> Option<Login> {
    let key = brain.api_key_env.as_deref();
    if let Some(k) = key.filter(|k| env_set(k)) {
        return Some(Login {
            ok: true,
            how: format!("${k} is set"),
        });
    }
    let missing = key.map(|k| format!("brain `{}`: ${k} is not set", brain.name));
    let Some(ways) = shell.preset.as_deref().and_then(login::ways) else {
        return missing.map(|how| Login { ok: false, how });
    };
    if let Some(by_env) = login::by_env(&ways, &env::of_shell(config, shell, brain)) {
        return Some(by_env);
    }
    if let Some(l) = login.filter(|l| l.ok) {
        return Some(l.clone());
    }
    let missing = missing.unwrap_or_else(|| format!("brain `{}` names no key", brain.name));
    let seen = login.map_or_else(String::new, |l| format!(" ({})", l.how));
    Some(Login {
        ok: false,
        how: format!(
            "{missing} and `{}` is not logged in{seen}: set the key, or {}",
            shell.binary, ways.fix
        ),
    })
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

/// A shell's CLI: found, its version against `requires` (and `tested`),
/// with `login_env` its stored login, with `flags_env` its flags.
async fn check_shell(
    root: &Path,
    shell: &Shell,
    login_env: Option<Vec<(OsString, OsString)>>,
    flags_env: Option<Vec<(OsString, OsString)>>,
) -> ShellCheck {
    let mut check = ShellCheck {
        name: shell.name.clone(),
        binary: shell.binary.clone(),
        path: find_binary(root, &shell.binary),
        version_raw: None,
        version: None,
        requires: shell.requires.clone(),
        requirement_met: None,
        tested: shell.tested.clone(),
        in_tested_range: None,
        warnings: Vec::new(),
        login: None,
        flags: None,
        ok: false,
        problem: None,
    };
    let Some(path) = check.path.clone() else {
        check.problem = Some(format!("`{}` not found on PATH", shell.binary));
        return check;
    };
    if let Some(probe) = &shell.version {
        match version_of(&path, &probe.args, &probe.regex).await {
            Ok((raw, version)) => judge_version(&mut check, shell, raw, &version),
            Err(e) => check.problem = Some(e),
        }
    }
    if let Some(env) = login_env
        && let Some(ways) = shell.preset.as_deref().and_then(login::ways)
    {
        check.login = Some(login::by_cli(&ways, &path, root, env).await);
    }
    if let Some(env) = flags_env {
        let flags = flags::check(shell, &path, root, env).await;
        judge_flags(&mut check, &flags);
        check.flags = Some(flags);
    }
    check.ok = check.problem.is_none();
    check
}

/// The version against `requires` (a problem) and `tested` (a warning).
fn judge_version(check: &mut ShellCheck, shell: &Shell, raw: String, version: &semver::Version) {
    check.version_raw = Some(raw);
    check.version = Some(version.to_string());
    match shell.requires.as_deref().map(semver::VersionReq::parse) {
        Some(Ok(req)) => {
            let met = req.matches(version);
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
    if let Some(Ok(tested)) = shell.tested.as_deref().map(semver::VersionReq::parse) {
        let inside = tested.matches(version);
        check.in_tested_range = Some(inside);
        if !inside {
            check.warnings.push(format!(
                "version {version} is outside `{tested}`, the versions its flags were checked against: run `modix doctor --deep` to check them against its --help"
            ));
        }
    }
}

/// Flags the CLI does not know make every run fail: a problem. A help that
/// could not be read, or a hidden flag, is only worth a warning.
fn judge_flags(check: &mut ShellCheck, flags: &FlagsCheck) {
    if let Some(e) = &flags.error {
        check
            .warnings
            .push(format!("`{}` failed ({e}): flags not checked", flags.help));
    }
    if !flags.unknown.is_empty() && check.problem.is_none() {
        check.problem = Some(format!(
            "`{}` does not list {}: this version does not take them (change the shell's `args`, or install a version in `{}`)",
            flags.help,
            flags.unknown.join(", "),
            check.tested.as_deref().unwrap_or("its tested range")
        ));
    }
    if !flags.hidden.is_empty() {
        check.warnings.push(format!(
            "{} not in `{}`, but known to be accepted",
            flags.hidden.join(", "),
            flags.help
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ProjectPaths, Settings};
    use crate::diagnostics::Diagnostics;

    /// The example project in a temp dir, its shell without a version probe
    /// (nothing is cached under the real modix home) and `edit` applied to
    /// its agents.json.
    fn example(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, Project) {
        let dir = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bugfix");
        let copy = |rel: &str| {
            let to = dir.path().join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(src.join(rel), to).unwrap();
        };
        for rel in [
            "calc.py",
            "test_calc.py",
            "agents/scripted-agent",
            ".modix/version.json",
            ".modix/brains.json",
            ".modix/projects.json",
            ".modix/runtimes.json",
            ".modix/prompts/planner.md",
            ".modix/prompts/executor.md",
        ] {
            copy(rel);
        }
        let json = |rel: &str, edit: &mut dyn FnMut(&mut serde_json::Value)| {
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(src.join(rel)).unwrap()).unwrap();
            edit(&mut v);
            std::fs::write(dir.path().join(rel), v.to_string()).unwrap();
        };
        json(".modix/shells.json", &mut |v| {
            v["shells"]["scripted"]
                .as_object_mut()
                .unwrap()
                .remove("version");
            v["shells"]["missing"] =
                serde_json::json!({"preset": "claude", "binary": "modix-test-no-such-cli"});
        });
        let mut edit = Some(edit);
        json(".modix/agents.json", &mut |v| (edit.take().unwrap())(v));
        let paths = ProjectPaths::at(dir.path());
        let (project, diags) =
            crate::project::load(&paths, &Settings::default(), &Diagnostics::new());
        let project = project.unwrap_or_else(|| panic!("{diags:?}"));
        (dir, project)
    }

    #[test]
    fn readiness_names_each_agent_that_cannot_run() {
        let engine = Engine::new().unwrap();
        let (_dir, project) = example(|_| {});
        let workflow = project.workflow(None).unwrap();
        assert_eq!(readiness(&engine, &project, &workflow), Ok(()));

        let (_dir, project) = example(|v| {
            v["agents"]["tester"]["command"] = serde_json::json!(["modix-test-no-such-runner"]);
            v["agents"]["planner"]["shell"] = "missing".into();
            v["agents"]["planner"]["manifest"]
                .as_object_mut()
                .unwrap()
                .remove("requires");
        });
        let workflow = project.workflow(None).unwrap();
        let lines = readiness(&engine, &project, &workflow).unwrap_err();
        assert!(
            lines.contains(
                &"agent `tester`: command `modix-test-no-such-runner` not found".to_owned()
            ),
            "{lines:?}"
        );
        assert!(
            lines.contains(
                &"agent `planner`: shell `missing`: `modix-test-no-such-cli` not found on PATH"
                    .to_owned()
            ),
            "{lines:?}"
        );
    }
}
