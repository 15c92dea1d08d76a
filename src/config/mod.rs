//! Loading and checking `.modix/`: the config files, their JSON Schemas, the
//! references between them, and the layering of settings. [`read`] and
//! [`check`] report every problem at once; a [`Config`] exists only when there
//! were no errors.
//!
//! Files that map names to entries (`shells.json`, `brains.json`,
//! `agents.json`) are read entry by entry (`entries`): a broken entry is
//! reported and left out, while the others are still checked and referred
//! to, so one mistake does not hide the rest.

mod check;
pub mod confine;
pub mod discover;
mod entries;
pub mod globs;
pub mod presets;
mod screen;
pub mod settings;
pub mod source;
pub mod types;

use std::collections::BTreeMap;

use serde_json::Value;

pub use discover::{MODIX_DIR, ProjectPaths, find_project};
pub use types::*;

use crate::diagnostics::Diagnostics;
pub use entries::Entries;
use entries::{bad_fields, check_schema_at, entries, typed_at, typed_file};

/// The config format this binary reads and writes.
pub const FORMAT_VERSION: semver::Version = semver::Version::new(1, 0, 0);

/// A project's whole configuration, checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub paths: ProjectPaths,
    pub shells: BTreeMap<String, Shell>,
    pub brains: BTreeMap<String, Brain>,
    pub agents: BTreeMap<String, Agent>,
    pub runtimes: Runtimes,
    pub project: Project,
    pub settings: Settings,
    /// Every prompt template an agent names, as written → its checked text.
    pub templates: BTreeMap<String, String>,
}

/// Which agent a workflow state's `agent` (an id, else a role) names.
pub enum AgentLookup<'a> {
    Found(&'a Agent),
    /// An agent with errors (reported already): nothing more to say.
    Broken,
    /// No such agent, or an ambiguous role: what is wrong.
    Problem(String),
}

/// The agents a workflow can name: the checked ones, and the names and
/// roles of the broken ones (so a reference to one is not reported again).
pub struct AgentIndex<'a> {
    pub agents: &'a BTreeMap<String, Agent>,
    pub broken: &'a BTreeMap<String, Option<String>>,
    /// Whether agents.json was read at all (else nothing can be judged).
    pub known: bool,
}

impl AgentIndex<'_> {
    /// An agent id first, else the one agent with that role.
    pub fn lookup(&self, id_or_role: &str) -> AgentLookup<'_> {
        if let Some(a) = self.agents.get(id_or_role) {
            return AgentLookup::Found(a);
        }
        if self.broken.contains_key(id_or_role) || !self.known {
            return AgentLookup::Broken;
        }
        let by_role: Vec<&str> = self
            .agents
            .values()
            .filter(|a| a.role == id_or_role)
            .map(|a| a.id.as_str())
            .chain(
                self.broken
                    .iter()
                    .filter(|(_, r)| r.as_deref() == Some(id_or_role))
                    .map(|(id, _)| id.as_str()),
            )
            .collect();
        match by_role.as_slice() {
            [one] => self
                .agents
                .get(*one)
                .map_or(AgentLookup::Broken, AgentLookup::Found),
            [] => AgentLookup::Problem(format!("no agent has id or role `{id_or_role}`")),
            many => AgentLookup::Problem(format!(
                "role `{id_or_role}` is taken by several agents ({}); name one by id in the FSM",
                many.join(", ")
            )),
        }
    }
}

/// The config files as read and schema-checked, before references between
/// them are checked: phase 1 of loading a project. `runtimes` is needed
/// before the FSMs compile (their default loop bound), and the reference
/// checks of phase 2 ([`check`]) need the compiled FSMs' ids.
pub struct Files {
    /// The config format, checked (`None` when unreadable or unsupported).
    format: Option<semver::Version>,
    shells: Option<Entries<ShellEntry>>,
    brains: Option<Entries<Brain>>,
    agents: Option<Entries<AgentEntry>>,
    pub runtimes: Option<Runtimes>,
    project: Option<Project>,
}

/// Reads and schema-checks `runtimes.json` alone, for commands that need only
/// the loop bound (`modix fsm …`).
pub fn read_runtimes(paths: &ProjectPaths, diags: &mut Diagnostics) -> Option<Runtimes> {
    parsed(paths, "runtimes.json", "runtimes", diags)
}

/// Reads and schema-checks every config file of the project, reporting
/// every problem; a file with errors is `None` in the result (a file of
/// entries keeps its good entries).
pub fn read(paths: &ProjectPaths, diags: &mut Diagnostics) -> Files {
    let format = read_json(paths, "version.json", "version", diags)
        .and_then(|(f, v)| Some((typed_file::<VersionFile>(&f, v, "version", diags)?, f)))
        .and_then(|(v, f)| check::format_version(&v, &f, diags));
    let shells = read_json(paths, "shells.json", "shells", diags)
        .and_then(|(src, v)| entries(src, v, "shells", diags));
    let brains = read_json(paths, "brains.json", "brains", diags)
        .and_then(|(src, v)| entries(src, v, "brains", diags));
    let agents = read_agents(paths, diags);
    let runtimes = parsed(paths, "runtimes.json", "runtimes", diags);
    let project = read_json(paths, "projects.json", "projects", diags).and_then(|(f, v)| {
        globs::check_project(&f, &v, diags);
        check_project_commands(&f, &v, diags);
        check_worktrees(paths, &f, &v, diags);
        entries::typed_file(&f, v, "projects", diags)
    });
    check_state_file(paths, diags);
    Files {
        format,
        shells,
        brains,
        agents,
        runtimes,
        project,
    }
}

/// `state.json`: run state, not config — modix's own pointer for humans and
/// scripts, written after every step and usually git-ignored (SQLite is the
/// truth, and nothing reads this file back). Checked when present, but a
/// damaged one (a truncated write, a hand edit) is only a warning: modix's
/// own cache must not stop a run, and the next step rewrites it. One that
/// cannot be read as a file of `.modix/` (a symlink out of it) stays an
/// error, as for every other file there.
fn check_state_file(paths: &ProjectPaths, diags: &mut Diagnostics) {
    if std::fs::symlink_metadata(paths.file("state.json")).is_err() {
        return;
    }
    let mut found = Diagnostics::new();
    if let Some(f) = read_own(paths, "state.json", diags)
        && let Some(v) = source::parse_json(&f, &mut found)
    {
        source::check_schema(&f, "state", &v, &mut found);
    }
    let help = "modix writes this file itself and never reads it back: delete it, and the next run's first step writes it again";
    for d in found.items_mut() {
        d.severity = crate::diagnostics::Severity::Warning;
        d.help = Some(help.to_owned());
    }
    diags.append(found);
}

/// `projects.json` `worktrees`, where runs' workspaces go: refused when
/// it is a file (or under one), or inside the project or the git
/// repository holding it — the checks `go` makes before a run, made here
/// without git (the repository is the nearest folder above with `.git`).
fn check_worktrees(
    paths: &ProjectPaths,
    file: &source::SourceFile,
    value: &Value,
    diags: &mut Diagnostics,
) {
    use crate::workspace::RootProblem;
    let Some(setting) = value.get("worktrees").and_then(Value::as_str) else {
        return;
    };
    let Ok(project) = paths.root.canonicalize() else {
        return;
    };
    let home = settings::home_dir().unwrap_or_default();
    let root = crate::workspace::root_setting(setting, &project, &home);
    let repo = project.ancestors().find(|d| d.join(".git").exists());
    let trees: Vec<&std::path::Path> = [Some(project.as_path()), repo]
        .into_iter()
        .flatten()
        .collect();
    let message = match crate::workspace::root_problem(&root, &trees) {
        None => return,
        Some(RootProblem::NotAFolder(f)) if f == root => {
            format!("`worktrees` is `{setting}`, a file, not a folder: workspaces cannot go there")
        }
        Some(RootProblem::NotAFolder(f)) => format!(
            "`worktrees` is `{setting}`, under {}, which is a file, not a folder: workspaces cannot go there",
            f.display()
        ),
        Some(RootProblem::Inside(tree)) => format!(
            "`worktrees` is `{setting}` ({}), inside {} ({}): a run's workspace must be outside the tree it is made from",
            root.display(),
            tree.display(),
            if tree == project {
                "the project"
            } else {
                "the project's git repository"
            }
        ),
    };
    let d = crate::diagnostics::Diagnostic::error("config::worktrees", &file.display, message)
        .with_pointer("/worktrees")
        .with_help(
            "set it to a folder outside the project and its repository (`~/…` is your home folder, a relative path is under the project), or remove it: workspaces then go under ~/.modix/worktrees",
        );
    diags.push(file.point(d, "/worktrees", false));
}

/// Reports each command of `projects.json` whose program name is empty.
fn check_project_commands(file: &source::SourceFile, value: &Value, diags: &mut Diagnostics) {
    for group in ["/commands", "/commands/probes"] {
        for name in ["build", "test", "lint"] {
            let pointer = format!("{group}/{name}");
            // A program of another type is the schema's to report.
            let Some(program) = value
                .pointer(&format!("{pointer}/0"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            if let Some(d) = check::empty_program(file, &pointer, &[program]) {
                diags.push(d);
            }
        }
    }
}

/// One file of `.modix/` read as text — unless it resolves (through a
/// symlink) to a place outside `.modix/`: then it is not read at all, as
/// the FSM files and the files config names are not ([`confine`]), since a
/// syntax error would quote the other file's first lines.
fn read_own(
    paths: &ProjectPaths,
    name: &str,
    diags: &mut Diagnostics,
) -> Option<source::SourceFile> {
    let shown = paths.shown(name);
    if let Some(d) = confine::symlinked_out(&paths.modix_dir, name, &shown, &format!("`{shown}`")) {
        diags.push(d);
        return None;
    }
    source::read(&paths.file(name), &shown, diags)
}

/// One file of `.modix/` read as JSON, with secrets where a variable name
/// belongs reported and masked before anything quotes them.
fn read_json(
    paths: &ProjectPaths,
    name: &str,
    schema: &str,
    diags: &mut Diagnostics,
) -> Option<(source::SourceFile, Value)> {
    let file = read_own(paths, name, diags)?;
    let mut value = source::parse_json(&file, diags)?;
    screen::screen(&file, schema, &mut value, diags);
    Some((file, value))
}

/// One file of `.modix/`, read, schema-checked and typed.
fn parsed<T: serde::de::DeserializeOwned>(
    paths: &ProjectPaths,
    name: &str,
    schema: &str,
    diags: &mut Diagnostics,
) -> Option<T> {
    let (file, value) = read_json(paths, name, schema, diags)?;
    typed_file(&file, value, schema, diags)
}

/// `agents.json`. An inline manifest is taken out and checked against the
/// manifest schema on its own: the type decides which branch it is (a
/// string is a path, an object the manifest itself), so a mistake inside
/// is reported as itself, with its pointer, not as "matches no variant".
fn read_agents(paths: &ProjectPaths, diags: &mut Diagnostics) -> Option<Entries<AgentEntry>> {
    let (src, mut value) = read_json(paths, "agents.json", "agents", diags)?;
    let mut inline = Vec::new();
    for (id, agent) in value
        .get_mut("agents")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flatten()
    {
        if let Some(m) = agent.get_mut("manifest").filter(|m| m.is_object()) {
            inline.push((
                id.clone(),
                std::mem::replace(m, Value::Object(Default::default())),
            ));
        }
    }
    let mut agents = entries::<AgentEntry>(src, value, "agents", diags)?;
    for (id, mut manifest) in inline {
        let pointer = format!("/agents/{}/manifest", crate::schema::escape_pointer(&id));
        let before = diags.items().len();
        let valid = check_schema_at(&agents.src, "manifest", &manifest, &pointer, diags);
        // Without its broken fields, the rest (prompt paths, templates)
        // is still checked; the agent is never used.
        let bad: Vec<String> = diags.items()[before..]
            .iter()
            .filter_map(|d| d.pointer.clone())
            .collect();
        if let (Some(fields), Some(obj)) = (bad_fields(&bad, &pointer), manifest.as_object_mut()) {
            obj.retain(|k, _| !fields.contains(k));
        }
        let typed = if valid {
            typed_at::<Manifest>(&agents.src, manifest, &pointer, "manifest", diags)
        } else {
            serde_json::from_value(manifest).ok()
        };
        let Some(entry) = agents.typed.get_mut(&id) else {
            continue;
        };
        entry.manifest = typed.clone().map(ManifestRef::Inline);
        if !valid || typed.is_none() {
            agents.broken.insert(id, Some(entry.role.clone()));
        }
    }
    Some(agents)
}

/// The config after phase 2, as far as it could be checked: the shells,
/// brains and agents without errors, what is known of the broken ones, and
/// whether everything was clean (then [`Checked::into_config`] gives the
/// [`Config`]). Later checks (workflows, roles) run on it either way.
pub struct Checked {
    pub paths: ProjectPaths,
    pub settings: Settings,
    pub shells: BTreeMap<String, Shell>,
    pub brains: BTreeMap<String, Brain>,
    pub agents: BTreeMap<String, Agent>,
    /// Agents with errors: id → role when it could be read.
    pub broken_agents: BTreeMap<String, Option<String>>,
    /// Every agent that could be read: id → the lifecycle FSM it names.
    pub lifecycles: BTreeMap<String, String>,
    /// Whether `agents.json` could be read at all.
    pub agents_known: bool,
    pub runtimes: Option<Runtimes>,
    pub project: Option<Project>,
    templates: BTreeMap<String, String>,
    /// No file is missing and no config file (settings included) has an error.
    clean: bool,
}

impl Checked {
    pub fn agent_index(&self) -> AgentIndex<'_> {
        AgentIndex {
            agents: &self.agents,
            broken: &self.broken_agents,
            known: self.agents_known,
        }
    }

    pub fn into_config(self) -> Option<Config> {
        if !self.clean {
            return None;
        }
        Some(Config {
            paths: self.paths,
            shells: self.shells,
            brains: self.brains,
            agents: self.agents,
            runtimes: self.runtimes?,
            project: self.project?,
            settings: self.settings,
            templates: self.templates,
        })
    }
}

/// Phase 2: checks the references between the files (agents name shells,
/// brains and lifecycle FSMs — `fsm_ids` — and output schemas —
/// `outputs`, the project's own included), the files agents name (manifests,
/// prompt templates) and settles every agent's binding. `diags` must hold
/// only the config's problems so far (settings included): any error there
/// means there is no [`Config`].
pub fn check(
    paths: &ProjectPaths,
    files: Files,
    settings: &Settings,
    fsm_ids: &[&str],
    outputs: &crate::schema::Schemas,
    diags: &mut Diagnostics,
) -> Checked {
    let shells = files.shells.as_ref().map(|e| check::shells(e, diags));
    let brains = files.brains.as_ref().map(|e| check::brains(e, diags));
    let (no_shells, no_brains) = (BTreeMap::new(), BTreeMap::new());
    let known = check::Known {
        paths,
        shells: check::Named::of(files.shells.as_ref(), shells.as_ref().unwrap_or(&no_shells)),
        brains: check::Named::of(files.brains.as_ref(), brains.as_ref().unwrap_or(&no_brains)),
        fsm_ids,
        settings,
        outputs,
    };
    let agents = match &files.agents {
        Some(file) => check::agents(file, &known, diags),
        None => check::CheckedAgents::default(),
    };
    let clean = !diags.has_errors() && files.format.is_some();
    Checked {
        paths: paths.clone(),
        settings: settings.clone(),
        shells: shells.unwrap_or_default(),
        brains: brains.unwrap_or_default(),
        agents: agents.ok,
        broken_agents: agents.broken,
        lifecycles: agents.lifecycles,
        agents_known: files.agents.is_some(),
        runtimes: files.runtimes,
        project: files.project,
        templates: agents.templates,
        clean: clean && files.shells.is_some() && files.brains.is_some() && files.agents.is_some(),
    }
}
