//! In place, modix's own git runs in the user's repository, and the agents
//! can change its settings as they change the files: `git config
//! filter.x.clean CMD` with `* filter=x` in `info/attributes` (or an
//! `include.path` naming a file that does), would make modix's `git add -A`
//! run CMD — outside the agent's process group, timeout and limits. modix
//! passes `-c` overrides for what it knows by name (hooks, fsmonitor, see
//! `git.rs`), but a filter the agent names, an attributes file or an
//! include cannot be overridden from the command line.
//!
//! So the run's start (and each resume) keeps what of the repository can
//! make git run a program: its config files and every file they include
//! (whatever the condition), `config.worktree`, `info/attributes`, the hooks
//! folder, and the config and attributes of the submodules' repositories
//! (under `modules/`). Before modix runs git there after an agent step,
//! [`Settings::put_back`] finds what differs, puts it back and names it; the
//! step is then refused for it, like any other rejection (see
//! `orchestrator::work`). The repository is the user's: modix never keeps a
//! setting an agent made there, and never undoes one of the person's
//! unasked — a difference found at a resume is refused
//! ([`WorkspaceError::SettingsChanged`]) until `--reset` says to put it back.
//!
//! A driver a tracked `.gitattributes` names is content, judged with the
//! step; git runs it only when a config defines it, and the repository's
//! config is held to what was kept. The user's global and system config are
//! outside the repository: a run's git reads them as the run found them
//! (see `pinned`).
//!
//! What was kept is in `<state>/settings.json`, whose digest the workspace
//! record holds: a copy that no longer matches is refused ([`Tampered`]).
//!
//! [`Tampered`]: WorkspaceError::Tampered

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{Result, WorkspaceError};
use super::git::{Git, lossy, nul_split};

/// git follows includes at most this deep; so does the snapshot.
const MAX_INCLUDE_DEPTH: usize = 10;
/// Entries of the hooks folder (and of `modules/`) looked at, at most.
const MAX_ENTRIES: usize = 2_000;
/// What the snapshot may hold in all: a repository whose hooks folder holds
/// more is refused at the start (no hooks folder is near this).
const MAX_BYTES: usize = 16 << 20;
/// The copy beside the run's state.
const FILE: &str = "settings.json";

/// What of a repository's settings can make git run a program, as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Settings {
    /// The repository's top folder: names are shown relative to it.
    root: PathBuf,
    /// Folders kept whole (the hooks folder): what an agent adds there is
    /// removed.
    folders: Vec<PathBuf>,
    entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    path: PathBuf,
    /// A git config file: a change is named by the keys it changed.
    #[serde(default)]
    config: bool,
    kept: Kept,
}

/// One path as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
enum Kept {
    Absent,
    /// A regular file: its bytes in hex, and whether it was executable.
    File {
        hex: String,
        executable: bool,
    },
    Link {
        target: PathBuf,
    },
    Folder,
    /// A FIFO, socket or device: compared by type only, never made again.
    Other,
}

impl Settings {
    /// Keeps the settings of the repository whose git dirs are `git_dir`
    /// (the checkout's) and `common_dir` (shared), with work tree `root`.
    pub(crate) fn take(git: &Git, root: &Path, git_dir: &Path, common_dir: &Path) -> Result<Self> {
        let mut configs = vec![common_dir.join("config"), git_dir.join("config.worktree")];
        if git_dir != common_dir {
            configs.push(common_dir.join("config.worktree"));
        }
        let mut others = vec![common_dir.join("info/attributes")];
        for module in module_dirs(&common_dir.join("modules")) {
            configs.push(module.join("config"));
            others.push(module.join("info/attributes"));
        }
        let mut s = Settings {
            root: root.to_path_buf(),
            folders: vec![common_dir.join("hooks")],
            entries: Vec::new(),
        };
        for path in with_includes(git, root, configs)? {
            s.keep(path, true)?;
        }
        for path in others {
            s.keep(path, false)?;
        }
        for folder in s.folders.clone() {
            s.keep(folder.clone(), false)?;
            for path in walk(&folder) {
                s.keep(path, false)?;
            }
        }
        s.entries.sort_by(|a, b| a.path.cmp(&b.path));
        s.entries.dedup_by(|a, b| a.path == b.path);
        if s.entries.iter().map(Entry::size).sum::<usize>() > MAX_BYTES {
            return Err(WorkspaceError::Unsupported {
                what: format!(
                    "the repository's hooks folder ({}) holds more than {} MiB",
                    s.folders[0].display(),
                    MAX_BYTES >> 20
                ),
                advice: "In place, modix keeps a copy of what can make git run a program, to put back what an agent changes there; use workspace: worktree.".into(),
            });
        }
        Ok(s)
    }

    fn keep(&mut self, path: PathBuf, config: bool) -> Result<()> {
        let kept = observe(&path)?;
        self.entries.push(Entry { path, config, kept });
        Ok(())
    }

    /// Writes the copy a later process loads; its digest, for the record.
    pub(crate) fn save(&self, state_dir: &Path) -> Result<String> {
        let bytes = serde_json::to_vec(self).expect("settings serialize");
        let path = state_dir.join(FILE);
        crate::fsutil::write_replace(&path, &bytes)
            .map_err(|e| WorkspaceError::io("write", &path, e))?;
        Ok(digest(&bytes))
    }

    /// The copy [`save`](Self::save) wrote, if it still has `digest`.
    pub(crate) fn load(state_dir: &Path, digest_: &str) -> Result<Self> {
        let path = state_dir.join(FILE);
        let bytes = std::fs::read(&path).map_err(|e| WorkspaceError::io("read", &path, e))?;
        if digest(&bytes) != digest_ {
            return Err(WorkspaceError::Tampered { path });
        }
        serde_json::from_slice(&bytes).map_err(|_| WorkspaceError::Tampered { path })
    }

    /// Every path kept, for the settle's stat snapshot: a change to one of
    /// them sends the settle to git, which checks them first.
    pub(crate) fn watched(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|e| e.path.as_path())
    }

    /// Puts back whatever differs from what was kept, and removes what an
    /// agent added to a kept folder; what changed, one line per path
    /// (`.git/config (filter.ev.clean set)`). Empty when all is as kept.
    pub(crate) fn put_back(&self, git: &Git) -> Result<Vec<String>> {
        let changes = self.changes();
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let named = self.named(git, &changes);
        for (path, was) in &changes {
            super::guard::remove(path)?;
            if let Some(e) = was {
                e.make_again()?;
            }
        }
        Ok(named)
    }

    /// What [`put_back`](Self::put_back) would put back, named, without
    /// touching anything.
    pub(crate) fn differences(&self, git: &Git) -> Vec<String> {
        self.named(git, &self.changes())
    }

    fn named(&self, git: &Git, changes: &[(PathBuf, Option<&Entry>)]) -> Vec<String> {
        changes
            .iter()
            .map(|(path, was)| {
                let there = path.symlink_metadata().is_ok();
                let now = was.and_then(|e| e.config.then(|| read_config_text(path)).flatten());
                let what = describe(git, *was, there, now);
                format!("{} ({what})", self.shown(path))
            })
            .collect()
    }

    /// The kept paths that differ, and the paths made in a kept folder
    /// (`None`: nothing was kept there), in the order to put them back.
    fn changes(&self) -> Vec<(PathBuf, Option<&Entry>)> {
        let mut out: Vec<(PathBuf, Option<&Entry>)> = Vec::new();
        for folder in &self.folders {
            for path in walk(folder) {
                if self
                    .entries
                    .binary_search_by(|e| e.path.cmp(&path))
                    .is_err()
                    && !out.iter().any(|(p, _)| path.starts_with(p))
                {
                    out.push((path, None));
                }
            }
        }
        out.extend(
            self.entries
                .iter()
                .filter(|e| !e.holds())
                .map(|e| (e.path.clone(), Some(e))),
        );
        out
    }

    /// `path` relative to the repository's top folder when it is inside
    /// (`.git/../extra.cfg`, as an include names it, is `extra.cfg`).
    fn shown(&self, path: &Path) -> String {
        let real = path
            .parent()
            .and_then(|d| Some(d.canonicalize().ok()?.join(path.file_name()?)));
        let path = real.as_deref().unwrap_or(path);
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

impl Entry {
    fn size(&self) -> usize {
        match &self.kept {
            Kept::File { hex, .. } => hex.len() / 2,
            _ => 0,
        }
    }

    /// Whether the path is still as kept (a file's bytes read only when its
    /// size is the kept one: a FIFO is never opened, a huge file never read).
    fn holds(&self) -> bool {
        let meta = self.path.symlink_metadata();
        match (&self.kept, meta) {
            (Kept::Absent, m) => m.is_err(),
            (_, Err(_)) => false,
            (Kept::File { hex, executable }, Ok(m)) => {
                m.is_file()
                    && m.len() as usize == hex.len() / 2
                    && is_executable(&m) == *executable
                    && std::fs::read(&self.path).is_ok_and(|b| super::lock::hex(&b) == *hex)
            }
            (Kept::Link { target }, Ok(m)) => {
                m.file_type().is_symlink()
                    && std::fs::read_link(&self.path).is_ok_and(|t| t == *target)
            }
            (Kept::Folder, Ok(m)) => m.is_dir(),
            (Kept::Other, Ok(m)) => !m.is_file() && !m.is_dir() && !m.file_type().is_symlink(),
        }
    }

    /// Makes the path again as kept (it was removed first).
    fn make_again(&self) -> Result<()> {
        let path = &self.path;
        if let (Some(parent), false) = (path.parent(), matches!(self.kept, Kept::Absent)) {
            std::fs::create_dir_all(parent).map_err(|e| WorkspaceError::io("create", parent, e))?;
        }
        match &self.kept {
            Kept::Absent | Kept::Other => Ok(()),
            Kept::Folder => {
                std::fs::create_dir(path).map_err(|e| WorkspaceError::io("create", path, e))
            }
            Kept::Link { target } => std::os::unix::fs::symlink(target, path)
                .map_err(|e| WorkspaceError::io("write", path, e)),
            Kept::File { hex, executable } => {
                std::fs::write(path, from_hex(hex))
                    .map_err(|e| WorkspaceError::io("write", path, e))?;
                let mode = if *executable { 0o755 } else { 0o644 };
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| WorkspaceError::io("write", path, e))
            }
        }
    }
}

/// What changed of a path (`there`: something was at it): made, removed,
/// changed — for a config file, the keys (`filter.ev.clean set`), read by
/// git from its bytes (`now`, taken before the path was put back).
fn describe(git: &Git, was: Option<&Entry>, there: bool, now: Option<Vec<u8>>) -> String {
    let Some(e) = was else {
        return "made".into();
    };
    let kept = match &e.kept {
        Kept::Absent => None,
        Kept::File { hex, .. } => Some(from_hex(hex)),
        _ => Some(Vec::new()),
    };
    let keys = now.as_ref().and_then(|now| {
        let old = config_pairs(git, kept.as_deref().unwrap_or_default())?;
        let new = config_pairs(git, now)?;
        let mut changed: Vec<String> = Vec::new();
        for (k, v) in &new {
            match old.iter().find(|(o, _)| o == k) {
                None => changed.push(format!("{k} set")),
                Some((_, ov)) if ov != v => changed.push(format!("{k} changed")),
                Some(_) => {}
            }
        }
        for (k, _) in old.iter().filter(|(k, _)| !new.iter().any(|(n, _)| n == k)) {
            changed.push(format!("{k} removed"));
        }
        (!changed.is_empty()).then(|| super::error::list(&changed))
    });
    match (&e.kept, there, keys) {
        (_, _, Some(keys)) => keys,
        (Kept::Absent, _, None) => "made".into(),
        (_, false, None) => "removed".into(),
        _ => "changed".into(),
    }
}

/// A config file's text as it is now, when it is a regular file small
/// enough to describe.
fn read_config_text(path: &Path) -> Option<Vec<u8>> {
    let meta = path.symlink_metadata().ok()?;
    (meta.is_file() && meta.len() <= 1 << 20)
        .then(|| std::fs::read(path).ok())
        .flatten()
}

/// A config text's keys with their values (each key once, its values
/// joined), as git reads it; `None` when git cannot.
fn config_pairs(git: &Git, text: &[u8]) -> Option<Vec<(String, Vec<String>)>> {
    let out = git
        .cmd(&std::env::temp_dir())
        .args(["config", "--file", "-", "--no-includes", "-z", "--list"])
        .input(text.to_vec())
        .run()
        .ok()?;
    let mut pairs: Vec<(String, Vec<String>)> = Vec::new();
    for rec in nul_split(&out) {
        let rec = lossy(rec);
        let (k, v) = rec.split_once('\n').unwrap_or((&rec, ""));
        match pairs.iter_mut().find(|(key, _)| key == k) {
            Some((_, vs)) => vs.push(v.to_owned()),
            None => pairs.push((k.to_owned(), vec![v.to_owned()])),
        }
    }
    Some(pairs)
}

/// `configs` and every file they include (`include.path`, `includeIf.*.path`,
/// whatever the condition: an agent can make a condition true), as git
/// resolves them: `~` expanded, a relative path from the including file's
/// folder.
fn with_includes(git: &Git, root: &Path, configs: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut all: Vec<PathBuf> = Vec::new();
    let mut level = configs;
    for _ in 0..=MAX_INCLUDE_DEPTH {
        let mut next = Vec::new();
        for file in level {
            if all.contains(&file) {
                continue;
            }
            if file.is_file() {
                next.extend(includes_of(git, root, &file)?);
            }
            all.push(file);
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(all)
}

fn includes_of(git: &Git, root: &Path, file: &Path) -> Result<Vec<PathBuf>> {
    let (code, out) = git
        .cmd(root)
        .args(["config", "--no-includes", "--path", "-z", "--file"])
        .arg(file)
        .args(["--get-regexp", "^include(if\\..*)?\\.path$"])
        .run_codes(&[0, 1])?;
    if code != 0 {
        return Ok(Vec::new());
    }
    let dir = file.parent().unwrap_or(root);
    Ok(nul_split(&out)
        .filter_map(|rec| {
            let rec = lossy(rec);
            let (_, value) = rec.split_once('\n')?;
            (!value.is_empty()).then(|| dir.join(value))
        })
        .collect())
}

/// The submodules' repositories under `modules/` (each a folder with a
/// `config`), nested ones included; never their objects, refs or logs.
fn module_dirs(modules: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![modules.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return found;
            }
            let path = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if path.join("config").is_file() && path.join("HEAD").is_file() {
                found.push(path.clone());
                dirs.push(path.join("modules"));
            } else {
                dirs.push(path);
            }
        }
    }
    found
}

/// Every path under `folder` (not following links), sorted, at most
/// [`MAX_ENTRIES`].
fn walk(folder: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![folder.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if out.len() >= MAX_ENTRIES {
                break;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// A path as it is now.
fn observe(path: &Path) -> Result<Kept> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(Kept::Absent);
    };
    let t = meta.file_type();
    Ok(if t.is_symlink() {
        let target = std::fs::read_link(path).map_err(|e| WorkspaceError::io("read", path, e))?;
        Kept::Link { target }
    } else if t.is_dir() {
        Kept::Folder
    } else if t.is_file() {
        let bytes = std::fs::read(path).map_err(|e| WorkspaceError::io("read", path, e))?;
        Kept::File {
            hex: super::lock::hex(&bytes),
            executable: is_executable(&meta),
        }
    } else {
        Kept::Other
    })
}

fn is_executable(meta: &std::fs::Metadata) -> bool {
    meta.permissions().mode() & 0o111 != 0
}

fn digest(bytes: &[u8]) -> String {
    super::lock::hex(&Sha256::digest(bytes))
}

fn from_hex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git() -> Git {
        Git::new()
            .with_env("GIT_CONFIG_GLOBAL", "/dev/null")
            .with_env("GIT_CONFIG_NOSYSTEM", "1")
    }

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        git().cmd(&root).args(["init", "-q"]).run().unwrap();
        (tmp, root)
    }

    fn take(root: &Path) -> Settings {
        let gd = root.join(".git");
        Settings::take(&git(), root, &gd, &gd).unwrap()
    }

    #[test]
    fn what_an_agent_changed_is_named_and_put_back() {
        let (_tmp, root) = repo();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/hooks/pre-push.sample"), "#!/bin/sh\n").unwrap();
        let config = std::fs::read(root.join(".git/config")).unwrap();
        let s = take(&root);
        assert!(s.put_back(&git()).unwrap().is_empty());

        let g = git();
        g.cmd(&root)
            .args(["config", "filter.ev.clean", "evil"])
            .run()
            .unwrap();
        std::fs::write(root.join(".git/info/attributes"), "* filter=ev\n").unwrap();
        std::fs::write(root.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join(".git/hooks/pre-push.sample"), "changed").unwrap();
        let put = s.put_back(&g).unwrap();
        assert_eq!(
            put,
            [
                ".git/hooks/pre-commit (made)",
                ".git/config (filter.ev.clean set)",
                ".git/hooks/pre-push.sample (changed)",
                ".git/info/attributes (made)",
            ]
        );
        assert_eq!(std::fs::read(root.join(".git/config")).unwrap(), config);
        assert!(!root.join(".git/info/attributes").exists());
        assert!(!root.join(".git/hooks/pre-commit").exists());
        assert_eq!(
            std::fs::read_to_string(root.join(".git/hooks/pre-push.sample")).unwrap(),
            "#!/bin/sh\n"
        );
        assert!(s.put_back(&g).unwrap().is_empty());
    }

    #[test]
    fn included_files_are_kept_whatever_their_condition() {
        let (_tmp, root) = repo();
        let g = git();
        g.cmd(&root)
            .args(["config", "includeIf.onbranch:never.path", "../extra.cfg"])
            .run()
            .unwrap();
        let s = take(&root);
        // Not there at the start: made by the agent, it is removed.
        std::fs::write(root.join("extra.cfg"), "[core]\n\tfsmonitor = evil\n").unwrap();
        assert_eq!(s.put_back(&g).unwrap(), ["extra.cfg (core.fsmonitor set)"]);
        assert!(!root.join("extra.cfg").exists());
    }

    #[test]
    fn the_copy_is_refused_once_changed() {
        let (_tmp, root) = repo();
        let state = tempfile::tempdir().unwrap();
        let s = take(&root);
        let d = s.save(state.path()).unwrap();
        assert_eq!(Settings::load(state.path(), &d).unwrap(), s);
        std::fs::write(state.path().join(FILE), "{}").unwrap();
        let err = Settings::load(state.path(), &d).unwrap_err();
        assert!(matches!(err, WorkspaceError::Tampered { .. }), "{err:?}");
    }
}
