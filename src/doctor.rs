//! `modix doctor`'s findings: which agent CLIs are installed and at what
//! version, which API keys are set (never their values), and whether every
//! agent the workflow needs can run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Agent, Binding, Config, Shell};
use crate::orchestrator::Engine;
use crate::project::Project;
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

/// Runs every check. Spawns each shell's version probe (bounded in time),
/// all at once on the engine's runtime.
pub fn diagnose(engine: &Engine, project: &Project) -> Report {
    let config = &project.config;
    let shells: Vec<ShellCheck> = engine.block_on(async {
        // Probes run concurrently: each is its own process with its own timeout.
        let mut set = tokio::task::JoinSet::new();
        for (i, shell) in config.shells.values().enumerate() {
            let (root, shell) = (config.paths.root.clone(), shell.clone());
            set.spawn(async move { (i, check_shell(&root, &shell).await) });
        }
        let mut out = Vec::new();
        while let Some(Ok(done)) = set.join_next().await {
            out.push(done);
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, c)| c).collect()
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
        .map(|a| check_agent(config, a, &shell_by_name, used.contains(&a.id)))
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
    AgentCheck {
        id: a.id.clone(),
        role: a.role.clone(),
        binding: a.binding.describe(),
        used_by_workflow,
        ready: problems.is_empty(),
        problems,
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
