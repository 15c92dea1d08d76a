//! The environment an agent receives, as `orchestrator::agent::prepare`
//! builds it: the allow-listed variables that are set, a shell's own `env`,
//! its brain's key (also under the shell's `key_env`), the endpoint, what
//! the shell sets (`set_env`), and the MODIX_* contract. Doctor's checks
//! (logins, probes, `--help`) run with it, and `doctor -v` lists its names.

use std::ffi::OsString;

use serde::Serialize;

use crate::config::{Agent, Binding, Brain, Config, Shell};

/// One variable an agent receives, and why.
#[derive(Debug, Clone, Serialize)]
pub struct EnvName {
    pub name: String,
    /// `env.allow` (runtimes.json), `shell` (shells.json `env`), `brain key`,
    /// `endpoint`, `set by the shell` (`set_env`), or `modix` (MODIX_*).
    pub from: &'static str,
}

/// The MODIX_* variables every agent receives. Mirrors
/// `orchestrator::agent::base_env`, which builds them with their values.
const MODIX_CONTRACT: [&str; 9] = [
    "MODIX_RUN_ID",
    "MODIX_DRIVER",
    "MODIX_STATE",
    "MODIX_AGENT",
    "MODIX_ROLE",
    "MODIX_ATTEMPT",
    "MODIX_WORKDIR",
    "MODIX_CONTEXT",
    "MODIX_OUTPUT_SCHEMA",
];

fn var(name: &str) -> Option<(OsString, OsString)> {
    std::env::var_os(name).map(|v| (OsString::from(name), v))
}

/// The allow-listed part of this environment: what a command agent (and so
/// its probe) runs with.
pub fn allowed(config: &Config) -> Vec<(OsString, OsString)> {
    config
        .runtimes
        .env
        .allow
        .iter()
        .filter_map(|k| var(k))
        .collect()
}

/// What a shell agent on `shell` and `brain` runs with (without MODIX_*):
/// the order of `orchestrator::agent::shell_env`, later entries winning.
pub fn of_shell(config: &Config, shell: &Shell, brain: &Brain) -> Vec<(OsString, OsString)> {
    let mut env = allowed(config);
    env.extend(shell.env.iter().filter_map(|n| var(n)));
    if let Some(key) = brain.api_key_env.as_deref().and_then(var) {
        if let Some(alias) = &shell.key_env {
            env.push((alias.into(), key.1.clone()));
        }
        env.push(key);
    }
    if let (Some(name), Some(ep)) = (&shell.endpoint_env, &brain.endpoint) {
        env.push((name.into(), ep.into()));
    }
    env.extend(shell.set_env.iter().map(|(k, v)| (k.into(), v.into())));
    // Later entries win, as they do for a spawned process.
    let mut seen = std::collections::BTreeSet::new();
    let mut out: Vec<_> = env
        .into_iter()
        .rev()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect();
    out.reverse();
    out
}

/// The names of the variables `a` will receive, with where each comes
/// from, and the allow-listed names that are not set.
pub fn names(config: &Config, a: &Agent) -> (Vec<EnvName>, Vec<String>) {
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
            if let Some(alias) = &shell.key_env {
                add(alias, "brain key");
            }
        }
        if let (Some(name), Some(_)) = (&shell.endpoint_env, &brain.endpoint) {
            add(name, "endpoint");
        }
        for name in shell.set_env.keys() {
            add(name, "set by the shell");
        }
    }
    for name in MODIX_CONTRACT {
        add(name, "modix");
    }
    (names, unset)
}
