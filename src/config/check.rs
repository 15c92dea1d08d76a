//! Checks beyond the schemas: versions that must parse, presets that must
//! resolve, and names that must point at something (with "did you mean").

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::confine::{self, PathProblem};
use super::discover::shown;
use super::source::{self, SourceFile};
use super::types::*;
use super::{Entries, FORMAT_VERSION, ProjectPaths, presets};
use crate::diagnostics::{Diagnostic, Diagnostics, unknown_name_help};
use crate::schema;

/// An error pointing at `pointer` in `file`.
fn at(file: &SourceFile, code: &str, pointer: &str, message: String) -> Diagnostic {
    file.point(
        Diagnostic::error(code, &file.display, message).with_pointer(pointer),
        pointer,
        false,
    )
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

/// The shells without errors, presets applied.
pub fn shells(file: &Entries<ShellEntry>, diags: &mut Diagnostics) -> BTreeMap<String, Shell> {
    let src = &file.src;
    let mut out = BTreeMap::new();
    for (name, entry) in &file.typed {
        // Typed without its broken fields: checking it further would
        // report what is missing only because of those.
        if file.broken.contains_key(name) {
            continue;
        }
        let before = diags.error_count();
        let ptr = format!("/shells/{}", schema::escape_pointer(name));
        check_entry_fields(src, &ptr, entry, diags);
        if diags.error_count() > before {
            continue;
        }
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
        check_tested(src, &ptr, entry, &shell, diags);
        if let Some(probe) = &shell.version {
            match crate::pattern::check(&probe.regex) {
                Ok(groups) if groups >= 2 => {}
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
                "use only {prompt} {model} {system_prompt} {workdir} {output_schema} {endpoint} {role} {permission_mode} {json_schema} {max_turns} {max_budget_usd} {allowed_tools} {prompt_file}; write {{ and }} for literal braces",
            ));
        } else {
            check_prompt_mode(src, &ptr, entry, &shell, diags);
        }
        if diags.error_count() == before {
            out.insert(name.clone(), shell);
        }
    }
    out
}

/// The fields a shell entry spells out that the schema cannot judge: every
/// regex compiles, every JSON pointer starts with `/`, every failure class
/// is known, and every failure rule can match something.
fn check_entry_fields(src: &SourceFile, ptr: &str, entry: &ShellEntry, diags: &mut Diagnostics) {
    for (i, rule) in entry.failures.iter().flatten().enumerate() {
        check_rule(src, &format!("{ptr}/failures/{i}"), rule, diags);
    }
    for (field, list) in [("noise", &entry.noise), ("keepalive", &entry.keepalive)] {
        for (i, re) in list.iter().flatten().enumerate() {
            check_regex(src, &format!("{ptr}/{field}/{i}"), re, diags);
        }
    }
    for (i, p) in entry.reason.iter().flatten().enumerate() {
        check_pointer(src, &format!("{ptr}/reason/{i}"), p, diags);
    }
    if let Some(u) = &entry.usage {
        let fields = [
            ("input_tokens", &u.input_tokens),
            ("output_tokens", &u.output_tokens),
            ("cost_usd", &u.cost_usd),
            ("turns", &u.turns),
            ("model", &u.model),
            ("session_id", &u.session_id),
        ];
        for (field, p) in fields {
            if let Some(p) = p {
                check_pointer(src, &format!("{ptr}/usage/{field}"), p, diags);
            }
        }
    }
    if let Some(o) = &entry.output {
        for (field, p) in [
            ("result_pointer", &o.result_pointer),
            ("error_pointer", &o.error_pointer),
        ] {
            if let Some(p) = p {
                check_pointer(src, &format!("{ptr}/output/{field}"), p, diags);
            }
        }
        for key in o.select.keys() {
            let at_key = format!("{ptr}/output/select/{}", schema::escape_pointer(key));
            check_pointer(src, &at_key, key, diags);
        }
    }
}

/// One failure rule: a known class, a pattern that compiles, a pointer
/// that is one, and something to match (a rule with neither a pattern nor
/// an exit code would claim every failure).
fn check_rule(src: &SourceFile, ptr: &str, rule: &FailureRuleEntry, diags: &mut Diagnostics) {
    use strum::VariantNames;
    let classes = crate::fsm::FailureClass::VARIANTS;
    if !classes.contains(&rule.class.as_str()) {
        diags.push(
            at(
                src,
                "config::failure-class",
                &format!("{ptr}/class"),
                format!("unknown failure class `{}`", rule.class),
            )
            .with_help(unknown_name_help(
                &rule.class,
                "failure-class name",
                classes.iter().copied(),
            )),
        );
    }
    if let Some(re) = &rule.pattern {
        check_regex(src, &format!("{ptr}/pattern"), re, diags);
    }
    if let Some(p) = &rule.pointer {
        check_pointer(src, &format!("{ptr}/pointer"), p, diags);
    }
    let problem = match (&rule.pattern, &rule.pointer, rule.exit_code, rule.stop) {
        (None, _, None, _) => Some((
            "a rule needs `pattern` or `exit_code`: this one would match every failure",
            "add the `pattern` the CLI's failure line matches, or the `exit_code` it ends with",
        )),
        (None, Some(_), _, _) => Some((
            "`pointer` without `pattern` matches nothing",
            "add the `pattern` the value at `pointer` must match",
        )),
        (None, _, _, true) => Some((
            "`stop` needs a `pattern`: it acts on a line as it appears, before any exit code",
            "add the `pattern` of the line that should stop the CLI",
        )),
        _ => None,
    };
    if let Some((message, help)) = problem {
        diags.push(at(src, "config::failure-rule", ptr, message.into()).with_help(help));
    }
}

/// A regex of a shell's rules, compiled as the run compiles it.
fn check_regex(src: &SourceFile, ptr: &str, re: &str, diags: &mut Diagnostics) {
    if let Err(e) = crate::pattern::check(re) {
        diags.push(
            at(src, "config::regex", ptr, format!("invalid regex: {e}"))
                .with_help("fix the regular expression (Rust regex syntax; escape `\\` in JSON)"),
        );
    }
}

/// A JSON pointer: empty (the whole document) or starting with `/`.
fn check_pointer(src: &SourceFile, ptr: &str, pointer: &str, diags: &mut Diagnostics) {
    if !(pointer.is_empty() || pointer.starts_with('/')) {
        diags.push(
            at(
                src,
                "config::pointer",
                ptr,
                format!("`{pointer}` is not a JSON pointer: it must start with `/`"),
            )
            .with_help(format!("write \"/{pointer}\"")),
        );
    }
}

/// `tested` must be a semver range, like `requires`.
fn check_tested(
    src: &SourceFile,
    ptr: &str,
    entry: &ShellEntry,
    shell: &Shell,
    diags: &mut Diagnostics,
) {
    let Some(range) = &shell.tested else { return };
    if let Err(e) = semver::VersionReq::parse(range) {
        let p = match entry.tested {
            Some(_) => format!("{ptr}/tested"),
            None => ptr.to_owned(),
        };
        diags.push(
            at(
                src,
                "config::semver",
                &p,
                format!("`{range}` is not a semver range: {e}"),
            )
            .with_help("write a range such as \">=2.0.0, <2.2.0\""),
        );
    }
}

/// The prompt must reach the CLI the way `prompt` says: `{prompt}` only as
/// an argument (elsewhere it has no value and every run would fail), and a
/// prompt file is useless unless `{prompt_file}` tells the CLI where it is.
fn check_prompt_mode(
    src: &SourceFile,
    ptr: &str,
    entry: &ShellEntry,
    shell: &Shell,
    diags: &mut Diagnostics,
) {
    let used = crate::shell::placeholders_in(&shell.args).unwrap_or_default();
    let uses = |name: &str| used.iter().any(|u| u == name);
    let p = match (&entry.prompt, &entry.args) {
        (Some(_), _) => format!("{ptr}/prompt"),
        (None, Some(_)) => format!("{ptr}/args"),
        (None, None) => ptr.to_owned(),
    };
    if uses("prompt") && shell.prompt != PromptMode::Argument {
        diags.push(
            at(src, "config::prompt", &p, "`{prompt}` is used in `args`, but `prompt` is not \"argument\": it would have no value".into())
                .with_help("set `\"prompt\": \"argument\"`, or remove `{prompt}` from `args`"),
        );
    }
    if shell.prompt == PromptMode::File && !uses("prompt_file") {
        let mut d = at(src, "config::prompt", &p, "`prompt` is \"file\", but `args` never pass `{prompt_file}`: the CLI would not see the prompt".into())
            .with_help("add the CLI's message-file flag with `{prompt_file}` to `args`");
        d.severity = crate::diagnostics::Severity::Warning;
        diags.push(d);
    }
}

/// The brains without errors, each knowing its name.
pub fn brains(file: &Entries<Brain>, diags: &mut Diagnostics) -> BTreeMap<String, Brain> {
    let mut out = BTreeMap::new();
    for (name, brain) in &file.typed {
        if let Some(ep) = &brain.endpoint
            && !(ep.starts_with("http://") || ep.starts_with("https://"))
        {
            diags.push(
                at(
                    &file.src,
                    "config::endpoint",
                    &format!("/brains/{}/endpoint", schema::escape_pointer(name)),
                    format!("endpoint `{ep}` is not an http(s) URL"),
                )
                .with_help("write the full URL, e.g. \"https://api.example.com\""),
            );
            continue;
        }
        if !file.broken.contains_key(name) {
            let mut brain = brain.clone();
            brain.name.clone_from(name);
            out.insert(name.clone(), brain);
        }
    }
    out
}

/// The shells (or brains) agents may name: the usable ones, and every name
/// in the file, so that naming a broken one is not reported a second time.
pub struct Named<'a, T> {
    pub usable: &'a BTreeMap<String, T>,
    /// `None` when the file could not be read at all.
    pub names: Option<&'a BTreeSet<String>>,
}

impl<'a, T> Named<'a, T> {
    pub fn of<E>(file: Option<&'a Entries<E>>, usable: &'a BTreeMap<String, T>) -> Self {
        Named {
            usable,
            names: file.map(|f| &f.names),
        }
    }
}

/// What agents may refer to.
pub struct Known<'a> {
    pub paths: &'a ProjectPaths,
    pub shells: Named<'a, Shell>,
    pub brains: Named<'a, Brain>,
    pub fsm_ids: &'a [&'a str],
    pub settings: &'a Settings,
    /// The output schemas a manifest's `output_schema` may name.
    pub outputs: &'a schema::Schemas,
}

/// The agents of `agents.json` after their checks.
#[derive(Default)]
pub struct CheckedAgents {
    /// Without errors, resolved.
    pub ok: BTreeMap<String, Agent>,
    /// Every prompt template named, as written → its checked text: what a
    /// run renders (read once, here, through the confinement).
    pub templates: BTreeMap<String, String>,
    /// With errors (reported): id → role when it could be read.
    pub broken: BTreeMap<String, Option<String>>,
    /// Every agent that could be read, broken or not: id → lifecycle FSM.
    pub lifecycles: BTreeMap<String, String>,
}

/// Every agent that could be typed is checked (references, manifest,
/// templates) even when another part of the file is broken.
pub fn agents(file: &Entries<AgentEntry>, known: &Known, diags: &mut Diagnostics) -> CheckedAgents {
    let src = &file.src;
    let mut out = CheckedAgents {
        broken: file.broken.clone(),
        ..CheckedAgents::default()
    };
    let mut templates = Templates::default();
    for (id, entry) in &file.typed {
        let ptr = format!("/agents/{}", schema::escape_pointer(id));
        let before = diags.error_count();
        let dropped = file.dropped.get(id);
        let binding = binding(src, &ptr, entry, dropped, known, diags);
        let manifest = match &entry.manifest {
            None => Some(Manifest::default()),
            Some(ManifestRef::Inline(m)) => {
                let place = Place {
                    file: src,
                    pointer: format!("{ptr}/manifest"),
                };
                check_manifest(&place, known, m, &mut templates, diags);
                Some(m.clone())
            }
            Some(ManifestRef::Path(p)) => {
                let at = format!("{ptr}/manifest");
                load_manifest(src, &at, known, p, &mut templates, diags)
            }
        };
        // A broken agent's manifest may lack fields that have errors: its
        // fit would be judged on defaults.
        if let (Some(Binding::Shell { shell, brain }), Some(m), false) =
            (&binding, &manifest, file.broken.contains_key(id))
        {
            check_shell_fit(src, &ptr, id, shell, brain, m, diags);
        }
        let fsm = lifecycle_name(src, &ptr, id, entry, known.fsm_ids, diags);
        out.lifecycles.insert(id.clone(), fsm.clone());
        match (binding, manifest) {
            (Some(binding), Some(manifest))
                if diags.error_count() == before && !out.broken.contains_key(id) =>
            {
                let role = entry.role.clone();
                let agent = Agent {
                    id: id.clone(),
                    role,
                    binding,
                    fsm,
                    manifest,
                };
                out.ok.insert(id.clone(), agent);
            }
            _ => {
                out.broken.insert(id.clone(), Some(entry.role.clone()));
            }
        }
    }
    out.templates = templates.texts;
    out
}

/// A command as written, or the shell and brain the agent names (or the
/// settings' defaults), looked up. `dropped`: the entry's fields left out
/// for errors of their own — a broken `command` does not make it a shell
/// agent, nor a broken `shell` one without a shell.
fn binding(
    src: &SourceFile,
    ptr: &str,
    entry: &AgentEntry,
    dropped: Option<&BTreeSet<String>>,
    known: &Known,
    diags: &mut Diagnostics,
) -> Option<Binding> {
    let dropped = |field: &str| dropped.is_some_and(|d| d.contains(field));
    if let Some(argv) = &entry.command {
        if entry.shell.is_some() || entry.brain.is_some() {
            diags.push(at(src, "config::agent", ptr, "this agent has both `command` and `shell`/`brain`".into())
                .with_help("a command agent runs its argv as-is: remove `shell` and `brain`, or remove `command`"));
        }
        if let Some(d) = empty_program(src, &format!("{ptr}/command"), argv) {
            diags.push(d);
        }
        return Some(Binding::Command { argv: argv.clone() });
    }
    if dropped("command") {
        return None;
    }
    let settings = known.settings;
    let (shell, brain) = (entry.shell.as_ref(), entry.brain.as_ref());
    let shell = match dropped("shell") {
        true => None,
        false => resolve_ref(
            src,
            ptr,
            "shell",
            shell,
            settings.default_shell.as_ref(),
            &known.shells,
            diags,
        ),
    };
    let brain = match dropped("brain") {
        true => None,
        false => resolve_ref(
            src,
            ptr,
            "brain",
            brain,
            settings.default_brain.as_ref(),
            &known.brains,
            diags,
        ),
    };
    Some(Binding::Shell {
        shell: Box::new(shell?.clone()),
        brain: Box::new(brain?.clone()),
    })
}

/// An argument vector (at `pointer`) whose program name is empty or blank:
/// the schema only asks for one item, and running it would fail with
/// "command `` not found".
pub fn empty_program<S: AsRef<str>>(
    file: &SourceFile,
    pointer: &str,
    argv: &[S],
) -> Option<Diagnostic> {
    let program = argv.first()?.as_ref();
    if !program.trim().is_empty() {
        return None;
    }
    let what = match program.is_empty() {
        true => "empty",
        false => "only whitespace",
    };
    let at_program = format!("{pointer}/0");
    Some(
        at(file, "config::command", &at_program, format!("the program name (the command's first item) is {what}"))
            .with_help("write the program to run as the first item and its arguments after it, e.g. [\"python3\", \"-m\", \"pytest\"]"),
    )
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
    known: &Named<'a, T>,
    diags: &mut Diagnostics,
) -> Option<&'a T> {
    let Some(name) = named.or(default) else {
        diags.push(at(src, "config::missing-reference", agent_ptr, format!("agent has no `{kind}` and no default {kind} is set"))
            .with_help(format!("add `\"{kind}\": \"…\"` to the agent, set `default_{kind}` in ~/.modix/settings.json, or give the agent a `command`")));
        return None;
    };
    if let Some(found) = known.usable.get(name) {
        return Some(found);
    }
    // A broken entry (or an unreadable file) was reported where it is.
    let names = known.names.filter(|n| !n.contains(name))?;
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
            names.iter().map(String::as_str),
        )),
    );
    None
}

/// Where a manifest's fields are written: its file, and the pointer of the
/// manifest in it (empty for a manifest file of its own).
struct Place<'a> {
    file: &'a SourceFile,
    pointer: String,
}

/// A problem with a file named at `pointer` of `file`.
fn path_problem(file: &SourceFile, pointer: &str, what: &str, p: &PathProblem) -> Diagnostic {
    at(file, p.code(), pointer, p.message(what)).with_help(p.help())
}

/// A manifest file, confined to `.modix/`, read and checked.
fn load_manifest(
    src: &SourceFile,
    ptr: &str,
    known: &Known,
    rel: &str,
    templates: &mut Templates,
    diags: &mut Diagnostics,
) -> Option<Manifest> {
    let what = format!("manifest file `{}`", shown(rel));
    let resolved = match confine::resolve(&known.paths.modix_dir, rel) {
        Ok(r) => r,
        Err(p) => {
            let d = path_problem(src, ptr, &what, &p);
            let d = match p {
                PathProblem::Missing => d.with_help("create it, fix the path (relative to .modix/), or inline the manifest as an object"),
                _ => d,
            };
            diags.push(d);
            return None;
        }
    };
    let file = source::read(&resolved.path, &resolved.shown(), diags)?;
    let manifest = source::parse::<Manifest>(&file, "manifest", diags)?;
    let place = Place {
        file: &file,
        pointer: String::new(),
    };
    check_manifest(&place, known, &manifest, templates, diags);
    Some(manifest)
}

fn check_manifest(
    place: &Place,
    known: &Known,
    m: &Manifest,
    templates: &mut Templates,
    diags: &mut Diagnostics,
) {
    for (field, value) in [("prompt", &m.prompt), ("system_prompt", &m.system_prompt)] {
        if let Some(rel) = value {
            let pointer = format!("{}/{field}", place.pointer);
            check_template(
                place.file,
                &pointer,
                field,
                known.paths,
                rel,
                templates,
                diags,
            );
        }
    }
    // A project schema with errors is known (its file reports them).
    if let Some(id) = &m.output_schema
        && !known.outputs.knows(id)
    {
        diags.push(
            at(
                place.file,
                "config::unknown-reference",
                &format!("{}/output_schema", place.pointer),
                format!("unknown output schema `{id}`"),
            )
            .with_help(unknown_name_help(
                id,
                "output schema",
                known.outputs.output_ids(),
            )),
        );
    }
}

/// The prompt templates read so far: by real path (each file is read and
/// checked once), and by the name each agent wrote.
#[derive(Default)]
pub(super) struct Templates {
    seen: BTreeMap<PathBuf, String>,
    pub texts: BTreeMap<String, String>,
}

/// A prompt template named at `pointer`: confined, read, and compiled the
/// way the run will render it (each file once, however many agents use it).
fn check_template(
    file: &SourceFile,
    pointer: &str,
    field: &str,
    paths: &ProjectPaths,
    rel: &str,
    templates: &mut Templates,
    diags: &mut Diagnostics,
) {
    let what = format!("{field} template `{}`", shown(rel));
    let resolved = match confine::resolve(&paths.modix_dir, rel) {
        Ok(r) => r,
        Err(p) => return diags.push(path_problem(file, pointer, &what, &p)),
    };
    if let Some(text) = templates.seen.get(&resolved.path) {
        let text = text.clone();
        templates.texts.insert(rel.to_owned(), text);
        return;
    }
    let display = resolved.shown();
    let text = match confine::read_text(&resolved.path, crate::template::MAX_BYTES) {
        Ok(t) => t,
        Err(p @ PathProblem::NotUtf8(line, column)) => {
            let d = Diagnostic::error(p.code(), &display, p.message(&what)).with_help(p.help());
            return diags.push(d.with_line_column(line, column));
        }
        Err(p) => return diags.push(path_problem(file, pointer, &what, &p)),
    };
    diags.add_source(display.clone(), text.as_str());
    templates.seen.insert(resolved.path.clone(), text.clone());
    templates.texts.insert(rel.to_owned(), text.clone());
    for p in crate::template::check(&display, &text) {
        let mut d = Diagnostic::error(p.code, &display, p.message).with_help(p.help);
        if let Some(span) = p.span {
            d = d.with_span(&text, span);
        }
        diags.push(d);
    }
}
