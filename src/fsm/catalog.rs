//! Every machine visible to a project: the built-ins embedded in the binary,
//! overridden by the project's `.modix/fsm/*.toml` files with the same id.
//!
//! Loading checks every file; a file with errors is reported and left out, and
//! if its id can be read it still shadows the built-in of that id (running the
//! default silently instead of the user's broken workflow would surprise).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{CompileOptions, Machine, Source, compile_with_id};
use crate::config::source;
use crate::diagnostics::{Diagnostic, Diagnostics};

/// One FSM file, loaded or not.
#[derive(Debug)]
pub struct Entry {
    /// The file's `id`, when it could be read.
    pub id: Option<String>,
    pub source: Source,
    /// How diagnostics name the file.
    pub display: String,
    /// `None` when the file has errors.
    pub machine: Option<Arc<Machine>>,
    pub diagnostics: Diagnostics,
}

impl Entry {
    pub fn is_builtin(&self) -> bool {
        matches!(self.source, Source::Builtin(_))
    }
}

#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    /// id → index of the entry that defines it (project beats built-in).
    by_id: BTreeMap<String, usize>,
}

/// How a built-in file is named in diagnostics.
pub fn builtin_display(file_name: &str) -> String {
    format!("built-in:fsm/{file_name}")
}

impl Catalog {
    /// Loads and checks the built-ins and every `*.toml` in `project_fsm_dir`.
    pub fn load(project_fsm_dir: Option<&Path>, opts: &CompileOptions) -> (Catalog, Diagnostics) {
        let mut cat = Catalog::default();
        let mut builtins: Vec<_> = super::super::embedded::FSMS
            .files()
            .filter(|f| f.path().extension().is_some_and(|e| e == "toml"))
            .collect();
        builtins.sort_by_key(|f| f.path());
        for f in builtins {
            let name = f.path().display().to_string();
            let text = String::from_utf8_lossy(f.contents());
            cat.add(&text, builtin_display(&name), Source::Builtin(name), opts);
        }
        let mut diags = Diagnostics::new();
        // A folder that is missing means no project FSMs; anything else at
        // that path (a file, a broken symlink) is reported by `load_dir`.
        if let Some(dir) = project_fsm_dir.filter(|d| std::fs::symlink_metadata(d).is_ok()) {
            cat.load_dir(dir, opts, &mut diags);
        }
        for e in &cat.entries {
            diags.append(e.diagnostics.clone());
        }
        (cat, diags)
    }

    fn load_dir(&mut self, dir: &Path, opts: &CompileOptions, diags: &mut Diagnostics) {
        let shown = display_dir(dir);
        let files = match list_toml(dir) {
            Ok(files) => files,
            Err(e) => {
                diags.push(
                    Diagnostic::error(
                        "fsm::unreadable",
                        &shown,
                        format!("cannot list FSM files: {e}"),
                    )
                    .with_help("make it a readable folder of `*.toml` files, or remove it"),
                );
                return;
            }
        };
        let mut project_ids: BTreeMap<String, String> = BTreeMap::new();
        for path in files {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let display = format!("{shown}/{name}");
            // A file that is a symlink out of the project is not read at
            // all: its contents would show in a syntax error's snippet.
            if let Some(d) = dir.parent().and_then(|modix_dir| {
                crate::config::confine::symlinked_out(
                    modix_dir,
                    &format!("fsm/{name}"),
                    &display,
                    &format!("FSM file `{display}`"),
                )
            }) {
                self.push_unreadable(path, display, d);
                continue;
            }
            let text = match source::read_text(&path) {
                Ok(t) => t,
                Err(e) => {
                    let d = e.diagnostic("fsm", &display);
                    self.push_unreadable(path, display, d);
                    continue;
                }
            };
            let index = self.add(&text, display.clone(), Source::File(path), opts);
            let entry = &mut self.entries[index];
            let Some(id) = entry.id.clone() else { continue };
            if let Some(first) = project_ids.get(&id) {
                let mut d = Diagnostic::error(
                    "fsm::duplicate-id",
                    &display,
                    format!("id `{id}` is already defined by {first}"),
                )
                .with_help("give one of the two files another id, or delete one");
                if let Some(m) = &entry.machine {
                    d = d.with_span(m.text(), m.id_span());
                }
                entry.diagnostics.push(d);
                entry.machine = None;
                // The first file keeps the id.
                if let Some(prev) = self.entries.iter().position(|e| e.display == *first) {
                    self.by_id.insert(id, prev);
                }
            } else {
                project_ids.insert(id, display);
            }
        }
        self.stems_stand_for_ids(&project_ids);
    }

    /// A project file whose id could not be read (unreadable, or broken
    /// before its `id`) stands for the id its name says, unless another
    /// project file defines that id: `fsm/review.toml` broken must not let
    /// `fsm show review` show the built-in `review` as if nothing were
    /// wrong, when it is that file that `go` would refuse.
    fn stems_stand_for_ids(&mut self, project_ids: &BTreeMap<String, String>) {
        for (index, e) in self.entries.iter().enumerate() {
            let (None, Source::File(path)) = (&e.id, &e.source) else {
                continue;
            };
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if !project_ids.contains_key(stem) {
                self.by_id.insert(stem.to_owned(), index);
            }
        }
    }

    /// An FSM file that could not be read: reported, and loaded as nothing.
    fn push_unreadable(&mut self, path: PathBuf, display: String, d: Diagnostic) {
        let mut diagnostics = Diagnostics::new();
        diagnostics.push(d);
        self.entries.push(Entry {
            id: None,
            source: Source::File(path),
            display,
            machine: None,
            diagnostics,
        });
    }

    fn add(&mut self, text: &str, display: String, source: Source, opts: &CompileOptions) -> usize {
        let (machine, diagnostics, id) = compile_with_id(text, &display, source.clone(), opts);
        let index = self.entries.len();
        if let Some(id) = &id {
            self.by_id.insert(id.clone(), index);
        }
        self.entries.push(Entry {
            id,
            source,
            display,
            machine: machine.map(Arc::new),
            diagnostics,
        });
        index
    }

    /// The machine with this id, if it loaded without errors.
    pub fn get(&self, id: &str) -> Option<&Arc<Machine>> {
        self.entry(id).and_then(|e| e.machine.as_ref())
    }

    /// The file that defines `id` (project beats built-in), loaded or not.
    pub fn entry(&self, id: &str) -> Option<&Entry> {
        self.by_id.get(id).and_then(|&i| self.entries.get(i))
    }

    /// Every loaded machine, sorted by id.
    pub fn machines(&self) -> impl Iterator<Item = &Arc<Machine>> {
        self.by_id
            .values()
            .filter_map(|&i| self.entries.get(i).and_then(|e| e.machine.as_ref()))
    }

    /// Every file looked at, built-ins first, including broken and overridden ones.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Every visible id, sorted (including ids whose file has errors).
    pub fn ids(&self) -> impl Iterator<Item = &str> + Clone {
        self.by_id.keys().map(String::as_str)
    }

    /// Whether entry `index` is the one its id resolves to (not overridden).
    pub fn is_effective(&self, index: usize) -> bool {
        self.entries
            .get(index)
            .and_then(|e| e.id.as_ref())
            .is_some_and(|id| self.by_id.get(id) == Some(&index))
    }
}

/// Every `*.toml` entry of `dir`, sorted, whatever its type: a folder, a
/// broken symlink or an unreadable file named `*.toml` is reported when read,
/// not skipped.
fn list_toml(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `.modix/fsm` for a project folder; the path as given otherwise.
fn display_dir(dir: &Path) -> String {
    let parent_is_modix = dir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == crate::config::discover::MODIX_DIR);
    match (parent_is_modix, dir.file_name()) {
        (true, Some(name)) => format!(
            "{}/{}",
            crate::config::discover::MODIX_DIR,
            name.to_string_lossy()
        ),
        _ => dir.display().to_string(),
    }
}
