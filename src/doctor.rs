//! `modix doctor`'s findings: which agent CLIs are installed and at what
//! version, which API keys are set (never their values), and whether every
//! agent the workflow needs can run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::config::{Binding, Config, Shell};
use crate::fsm::StateKind;
use crate::project::LoadedProject;

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

/// Runs every check. Spawns each shell's version probe (bounded in time).
pub fn diagnose(project: &LoadedProject) -> Report {
    let config = &project.config;
    let shells: Vec<ShellCheck> = config
        .shells
        .values()
        .map(|s| check_shell(config, s))
        .collect();
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
    let brain_by_name: BTreeMap<&str, &BrainCheck> =
        brains.iter().map(|b| (b.name.as_str(), b)).collect();
    let agents: Vec<AgentCheck> = config
        .agents
        .values()
        .map(|a| {
            let mut problems = Vec::new();
            let binding = match &a.binding {
                Binding::Shell { shell, brain } => {
                    match shell_by_name.get(shell.as_str()) {
                        Some(s) if s.ok => {}
                        Some(s) => problems.push(format!(
                            "shell `{shell}`: {}",
                            s.problem.as_deref().unwrap_or("not ready")
                        )),
                        None => problems.push(format!("shell `{shell}` is not defined")),
                    }
                    if let Some(b) = brain_by_name.get(brain.as_str())
                        && b.key_present == Some(false)
                    {
                        problems.push(format!(
                            "brain `{brain}`: ${} is not set",
                            b.api_key_env.as_deref().unwrap_or_default()
                        ));
                    }
                    format!("{shell} + {brain}")
                }
                Binding::Command { argv } => {
                    let program = argv.first().map(String::as_str).unwrap_or_default();
                    if find_binary(&config.paths.root, program).is_none() {
                        problems.push(format!("command `{program}` not found"));
                    }
                    format!("command: {}", argv.join(" "))
                }
            };
            if project.catalog.get(&a.fsm).is_none() {
                problems.push(format!("lifecycle FSM `{}` not found", a.fsm));
            }
            AgentCheck {
                id: a.id.clone(),
                role: a.role.clone(),
                binding,
                used_by_workflow: used.contains(&a.id),
                ready: problems.is_empty(),
                problems,
            }
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

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Ids of the agents the project's default workflow invokes.
fn workflow_agents(project: &LoadedProject) -> Vec<String> {
    let Ok(machine) = project.workflow(None) else {
        return Vec::new();
    };
    machine
        .states()
        .filter_map(|(_, s)| match &s.kind {
            StateKind::Agent(a) => project
                .config
                .agent_for(&a.agent)
                .ok()
                .map(|a| a.id.clone()),
            _ => None,
        })
        .collect()
}

/// A program name looked up on PATH, or a path relative to the project root.
pub fn find_binary(root: &Path, program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = root.join(program);
        return p.is_file().then_some(p);
    }
    which::which(program).ok()
}

fn check_shell(config: &Config, shell: &Shell) -> ShellCheck {
    let mut check = ShellCheck {
        name: shell.name.clone(),
        binary: shell.binary.clone(),
        path: find_binary(&config.paths.root, &shell.binary),
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
    match crate::shell::probe_version(&path, &probe.args, &probe.regex, Duration::from_secs(10)) {
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
