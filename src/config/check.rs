//! Checks beyond the schemas: versions that must parse, presets that must
//! resolve, and names that must point at something (with "did you mean").

use std::collections::BTreeMap;

use super::discover::shown;
use super::source::{self, SourceFile};
use super::types::*;
use super::{FORMAT_VERSION, ProjectPaths, presets};
use crate::diagnostics::{Diagnostic, Diagnostics, unknown_name_help};
use crate::schema;

/// An error pointing at `pointer` in `file`.
fn at(file: &SourceFile, code: &str, pointer: &str, message: String) -> Diagnostic {
    let mut d = Diagnostic::error(code, &file.display, message).with_pointer(pointer);
    if let Some(span) = source::locate(&file.text, pointer, false) {
        d = d.with_span(&file.text, span);
    }
    d
}

pub fn format_version(
    v: &VersionFile,
    file: &SourceFile,
    diags: &mut Diagnostics,
) -> Option<semver::Version> {
    let version = match semver::Version::parse(&v.format) {
        Ok(version) => version,
        Err(e) => {
            diags.push(
                at(
                    file,
                    "config::version",
                    "/format",
                    format!("`{}` is not a semver version: {e}", v.format),
                )
                .with_help(format!("write a version such as \"{FORMAT_VERSION}\"")),
            );
            return None;
        }
    };
    if version.major != FORMAT_VERSION.major {
        diags.push(
            at(
                file,
                "config::version",
                "/format",
                format!(
                    "config format {version} is not supported: this modix reads format {}.x",
                    FORMAT_VERSION.major
                ),
            )
            .with_help(if version.major > FORMAT_VERSION.major {
                "install a newer modix (`cargo install --path .` from a newer checkout) to read this project"
            } else {
                "re-create the config with `modix init --force` (back up your changes first) and port them"
            }),
        );
        return None;
    }
    if version > FORMAT_VERSION {
        let mut d = at(
            file,
            "config::version",
            "/format",
            format!("config format {version} is newer than this modix ({FORMAT_VERSION}); newer settings may be ignored"),
        )
        .with_help("upgrade modix to use every setting of this project");
        d.severity = crate::diagnostics::Severity::Warning;
        diags.push(d);
    }
    Some(version)
}

pub fn shells(
    file: &ShellsFile,
    src: &SourceFile,
    diags: &mut Diagnostics,
) -> BTreeMap<String, Shell> {
    let mut out = BTreeMap::new();
    for (name, entry) in &file.shells {
        let ptr = format!("/shells/{}", schema::escape_pointer(name));
        let shell = match presets::resolve(name, entry) {
            Ok(s) => s,
            Err(msg) => {
                diags.push(at(src, "config::shell", &ptr, format!("shell `{name}`: {msg}")).with_help(
                    format!("add `\"preset\": \"claude\"` (one of {}) or spell out `binary` and `args`", presets::PRESET_NAMES.join(", ")),
                ));
                continue;
            }
        };
        if let Some(req) = &shell.requires
            && let Err(e) = semver::VersionReq::parse(req)
        {
            let p = if entry.requires.is_some() {
                format!("{ptr}/requires")
            } else {
                ptr.clone()
            };
            diags.push(
                at(
                    src,
                    "config::semver",
                    &p,
                    format!("`{req}` is not a semver requirement: {e}"),
                )
                .with_help("write a range such as \">=1.2.0\" or \"^2\""),
            );
        }
        if let Some(probe) = &shell.version {
            match regex::Regex::new(&probe.regex) {
                Ok(re) if re.captures_len() >= 2 => {}
                Ok(_) => diags.push(
                    at(src, "config::regex", &format!("{ptr}/version/regex"), "the version regex has no capture group".into())
                        .with_help("wrap the version part in parentheses, e.g. \"(\\\\d+\\\\.\\\\d+\\\\.\\\\d+)\""),
                ),
                Err(e) => diags.push(
                    at(src, "config::regex", &format!("{ptr}/version/regex"), format!("invalid regex: {e}"))
                        .with_help("fix the regular expression"),
                ),
            }
        }
        if let Err(e) = crate::shell::placeholders_in(&shell.args) {
            let p = if entry.args.is_some() {
                format!("{ptr}/args")
            } else {
                ptr.clone()
            };
            diags.push(at(src, "config::placeholder", &p, e.to_string()).with_help(
                "use only {prompt} {model} {system_prompt} {workdir} {output_schema} {endpoint} {role} {permission_mode}; write {{ and }} for literal braces",
            ));
        }
        out.insert(name.clone(), shell);
    }
    out
}

pub fn brains(
    file: BrainsFile,
    src: Option<&SourceFile>,
    diags: &mut Diagnostics,
) -> BTreeMap<String, Brain> {
    if let Some(src) = src {
        for (name, brain) in &file.brains {
            if let Some(ep) = &brain.endpoint
                && !(ep.starts_with("http://") || ep.starts_with("https://"))
            {
                diags.push(
                    at(
                        src,
                        "config::endpoint",
                        &format!("/brains/{}/endpoint", schema::escape_pointer(name)),
                        format!("endpoint `{ep}` is not an http(s) URL"),
                    )
                    .with_help("write the full URL, e.g. \"https://api.example.com\""),
                );
            }
        }
    }
    file.brains
        .into_iter()
        .map(|(name, mut brain)| {
            brain.name.clone_from(&name);
            (name, brain)
        })
        .collect()
}

/// What agents may refer to.
pub struct Known<'a> {
    pub paths: &'a ProjectPaths,
    pub shells: &'a BTreeMap<String, Shell>,
    pub brains: &'a BTreeMap<String, Brain>,
    pub fsm_ids: &'a [&'a str],
    pub settings: &'a Settings,
}

pub fn agents(
    file: &AgentsFile,
    src: &SourceFile,
    known: Known,
    diags: &mut Diagnostics,
) -> BTreeMap<String, Agent> {
    let mut out = BTreeMap::new();
    for (id, entry) in &file.agents {
        let ptr = format!("/agents/{}", schema::escape_pointer(id));
        let before = diags.error_count();
        let binding = binding(src, &ptr, entry, &known, diags);
        let manifest = match &entry.manifest {
            None => Manifest::default(),
            Some(ManifestRef::Inline(m)) => m.clone(),
            Some(ManifestRef::Path(p)) => {
                let at = format!("{ptr}/manifest");
                load_manifest(src, &at, known.paths, p, diags).unwrap_or_default()
            }
        };
        check_manifest(src, &ptr, known.paths, &manifest, &entry.manifest, diags);
        if let Some(Binding::Shell { shell, brain }) = &binding {
            check_shell_fit(src, &ptr, id, shell, brain, &manifest, diags);
        }
        let fsm = lifecycle_name(src, &ptr, id, entry, known.fsm_ids, diags);
        if let (Some(binding), true) = (binding, diags.error_count() == before) {
            let agent = Agent {
                id: id.clone(),
                role: entry.role.clone(),
                binding,
                fsm,
                manifest,
            };
            out.insert(id.clone(), agent);
        }
    }
    out
}

/// A command as written, or the shell and brain the agent names (or the
/// settings' defaults), looked up.
fn binding(
    src: &SourceFile,
    ptr: &str,
    entry: &AgentEntry,
    known: &Known,
    diags: &mut Diagnostics,
) -> Option<Binding> {
    if let Some(argv) = &entry.command {
        if entry.shell.is_some() || entry.brain.is_some() {
            diags.push(at(src, "config::agent", ptr, "this agent has both `command` and `shell`/`brain`".into())
                .with_help("a command agent runs its argv as-is: remove `shell` and `brain`, or remove `command`"));
        }
        return Some(Binding::Command { argv: argv.clone() });
    }
    let settings = known.settings;
    let (shell, brain) = (entry.shell.as_ref(), entry.brain.as_ref());
    let shell = resolve_ref(
        src,
        ptr,
        "shell",
        shell,
        settings.default_shell.as_ref(),
        known.shells,
        diags,
    );
    let brain = resolve_ref(
        src,
        ptr,
        "brain",
        brain,
        settings.default_brain.as_ref(),
        known.brains,
        diags,
    );
    Some(Binding::Shell {
        shell: Box::new(shell?.clone()),
        brain: Box::new(brain?.clone()),
    })
}

/// Whether the shell can do what the manifest asks: keep a read-only agent
/// read-only (a warning when nothing can), and provide every capability it
/// requires.
fn check_shell_fit(
    src: &SourceFile,
    ptr: &str,
    id: &str,
    s: &Shell,
    b: &Brain,
    manifest: &Manifest,
    diags: &mut Diagnostics,
) {
    let (shell, brain) = (&s.name, &b.name);
    if !manifest.permissions.write_files && s.permission_modes.is_none() {
        let mut d = at(
            src,
            "config::permissions",
            ptr,
            format!(
                "agent `{id}` may not write files, but shell `{shell}` has no read-only mode: nothing stops it"
            ),
        )
        .with_help("give the shell `permission_modes` and use `{permission_mode}` in its args, or bind the agent to a shell that has them");
        d.severity = crate::diagnostics::Severity::Warning;
        diags.push(d);
    }
    let missing: Vec<String> = manifest
        .requires
        .iter()
        .filter(|c| !s.capabilities.contains(c) && !b.capabilities.contains(c))
        .map(|c| format!("`{c}`"))
        .collect();
    if !missing.is_empty() {
        diags.push(at(src, "config::capability", ptr, format!(
                "agent `{id}` requires {} but shell `{shell}` and brain `{brain}` do not provide it",
                missing.join(", ")
            )).with_help("bind a shell or brain that lists the capability, or drop it from the manifest's `requires`"));
    }
}

/// The lifecycle FSM the agent runs under (default `execution_fsm_v1`),
/// which must exist; its shape and role are checked once the FSMs are known.
fn lifecycle_name(
    src: &SourceFile,
    ptr: &str,
    id: &str,
    entry: &AgentEntry,
    fsm_ids: &[&str],
    diags: &mut Diagnostics,
) -> String {
    let fsm = entry
        .fsm
        .clone()
        .unwrap_or_else(|| "execution_fsm_v1".to_owned());
    if !fsm_ids.contains(&fsm.as_str()) {
        let p = match entry.fsm {
            Some(_) => format!("{ptr}/fsm"),
            None => ptr.to_owned(),
        };
        diags.push(
            at(
                src,
                "config::unknown-reference",
                &p,
                format!("agent `{id}` names unknown lifecycle FSM `{fsm}`"),
            )
            .with_help(unknown_name_help(&fsm, "FSM", fsm_ids.iter().copied())),
        );
    }
    fsm
}

/// The shell or brain an agent names (or the settings' default), looked up.
fn resolve_ref<'a, T>(
    src: &SourceFile,
    agent_ptr: &str,
    kind: &str,
    named: Option<&String>,
    default: Option<&String>,
    known: &'a BTreeMap<String, T>,
    diags: &mut Diagnostics,
) -> Option<&'a T> {
    let Some(name) = named.or(default) else {
        diags.push(at(src, "config::missing-reference", agent_ptr, format!("agent has no `{kind}` and no default {kind} is set"))
            .with_help(format!("add `\"{kind}\": \"…\"` to the agent, set `default_{kind}` in ~/.modix/settings.json, or give the agent a `command`")));
        return None;
    };
    if let Some(found) = known.get(name) {
        return Some(found);
    }
    let (pointer, origin) = if named.is_some() {
        (format!("{agent_ptr}/{kind}"), String::new())
    } else {
        (
            agent_ptr.to_owned(),
            format!(" (the default {kind} from settings)"),
        )
    };
    diags.push(
        at(
            src,
            "config::unknown-reference",
            &pointer,
            format!("unknown {kind} `{name}`{origin}"),
        )
        .with_help(unknown_name_help(
            name,
            kind,
            known.keys().map(String::as_str),
        )),
    );
    None
}

fn load_manifest(
    src: &SourceFile,
    ptr: &str,
    paths: &ProjectPaths,
    rel: &str,
    diags: &mut Diagnostics,
) -> Option<Manifest> {
    let path = paths.modix_dir.join(rel);
    if !path.is_file() {
        diags.push(at(src, "config::missing-file", ptr, format!("manifest file `{}` does not exist", shown(rel)))
            .with_help("create it, fix the path (relative to .modix/), or inline the manifest as an object"));
        return None;
    }
    let display = shown(rel);
    let file = source::read(&path, &display, diags)?;
    source::parse::<Manifest>(&file, "manifest", diags)
}

fn check_manifest(
    src: &SourceFile,
    agent_ptr: &str,
    paths: &ProjectPaths,
    m: &Manifest,
    how: &Option<ManifestRef>,
    diags: &mut Diagnostics,
) {
    let inline = matches!(how, Some(ManifestRef::Inline(_)));
    let field_ptr = |f: &str| {
        if inline {
            format!("{agent_ptr}/manifest/{f}")
        } else {
            format!("{agent_ptr}/manifest")
        }
    };
    for (field, value) in [("prompt", &m.prompt), ("system_prompt", &m.system_prompt)] {
        if let Some(rel) = value
            && !paths.modix_dir.join(rel).is_file()
        {
            diags.push(
                at(
                    src,
                    "config::missing-file",
                    &field_ptr(field),
                    format!("{field} template `{}` does not exist", shown(rel)),
                )
                .with_help("create the template or fix the path (relative to .modix/)"),
            );
        }
    }
    if let Some(id) = &m.output_schema
        && id != "any"
        && schema::text(id).is_err()
    {
        let outputs = ["task_spec", "execution_result", "test_result", "any"];
        diags.push(
            at(
                src,
                "config::unknown-reference",
                &field_ptr("output_schema"),
                format!("unknown output schema `{id}`"),
            )
            .with_help(unknown_name_help(id, "output schema", outputs)),
        );
    }
}
