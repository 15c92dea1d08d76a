//! The user's global and system git config, as the run found them. Agents
//! run with the user's `HOME`: `git config --global filter.x.clean CMD`
//! (or a line in `~/.gitconfig`, `~/.config/git/config`, a file they
//! include, `/etc/gitconfig` when modix runs as root) with `* filter=x` in
//! a tracked `.gitattributes` would make modix's own `git add -A` run CMD —
//! outside the agent's process group, timeout and limits, in every mode.
//! No `-c` can take away a filter an agent names.
//!
//! So when a run starts (before any agent ran) modix takes both as git
//! reads them in the project ([`Pinned::take`]): flattened with their
//! includes (conditional ones as they evaluate there), the `include.*`
//! keys themselves dropped, written back as two config files in
//! `<state>/gitconfig/`, and read back by git to check they say the same.
//! Every git modix runs for the run then reads those
//! (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`: environment only, no process
//! per step): the user's drivers (LFS), credential helper, `safe.directory`
//! and excludes work as they did at the start, and what an agent adds to
//! the live files never reaches modix's git. A resume takes the record's
//! copy, not the live files: an agent of the run may have written them
//! before it was interrupted (it names what changed since).
//!
//! The copy is as reachable as the run's state folder: the workspace holds
//! its bytes in memory and puts back a changed file before modix runs git
//! ([`Pinned::restore`], with the guard); a later process loads it only
//! while it matches the digest the workspace record keeps
//! ([`WorkspaceError::Tampered`] otherwise). Git older than 2.32 cannot be
//! pointed at a config file: the run then reads the live files, and says so.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{Result, WorkspaceError};
use super::git::{Git, GitVersion};

/// The first git that reads `GIT_CONFIG_GLOBAL` and `GIT_CONFIG_SYSTEM`.
pub(crate) const PIN_GIT: GitVersion = GitVersion::new(2, 32, 0);
/// The copy's folder in the run's state.
const DIR: &str = "gitconfig";
/// The scopes kept, in the order of the files.
const SCOPES: [&str; 2] = ["global", "system"];

/// One setting as `git config --list -z` gives it: the key (section and
/// name lower-cased, a subsection as written) and its value (`None`: a
/// key with no `=`, which is `true`, unlike an empty value).
type Entry = (Vec<u8>, Option<Vec<u8>>);

/// The run's copy of the global and system config: each file's path in the
/// state folder and its bytes.
#[derive(Clone, Debug)]
pub(crate) struct Pinned {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Pinned {
    /// Takes the global and system config as git reads them in `cwd` now,
    /// writes the copy into `state_dir`; `None` (and nothing written) when
    /// the installed git cannot be pointed at it.
    pub(crate) fn take(git: &Git, cwd: &Path, state_dir: &Path) -> Result<Option<Pinned>> {
        if git.version()? < PIN_GIT {
            return Ok(None);
        }
        let dir = state_dir.join(DIR);
        std::fs::create_dir_all(&dir).map_err(|e| WorkspaceError::io("create", &dir, e))?;
        let scopes = listing(git, cwd)?;
        let mut files = Vec::new();
        for (scope, entries) in SCOPES.iter().zip(&scopes) {
            let path = dir.join(scope);
            let bytes = render(entries);
            std::fs::write(&path, &bytes).map_err(|e| WorkspaceError::io("write", &path, e))?;
            check_written(git, &path, entries)?;
            files.push((path, bytes));
        }
        Ok(Some(Pinned { files }))
    }

    /// The copy [`take`](Self::take) wrote, if it still has `digest`.
    pub(crate) fn load(state_dir: &Path, digest: &str) -> Result<Pinned> {
        let dir = state_dir.join(DIR);
        let mut files = Vec::new();
        for scope in SCOPES {
            let path = dir.join(scope);
            let bytes = crate::fsutil::read_small_bytes(&path, 16 << 20)
                .map_err(|_| WorkspaceError::Tampered { path: dir.clone() })?;
            files.push((path, bytes));
        }
        let pinned = Pinned { files };
        if pinned.digest() != digest {
            return Err(WorkspaceError::Tampered { path: dir });
        }
        Ok(pinned)
    }

    /// A SHA-256 over both files' bytes.
    pub(crate) fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (_, bytes) in &self.files {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        super::lock::hex(&h.finalize())
    }

    /// `git` reading this copy as its global and system config.
    pub(crate) fn driver(&self, git: &Git) -> Git {
        let mut git = git.clone();
        for ((path, _), var) in self
            .files
            .iter()
            .zip(["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"])
        {
            git = git.with_env(var, path);
        }
        git
    }

    /// The copy's files, for the settle's stat snapshot: a change to one
    /// sends the settle to git, which puts it back first.
    pub(crate) fn watched(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }

    /// Puts back a file of the copy that is not as taken; the names of
    /// those put back.
    pub(crate) fn restore(&self) -> Result<Vec<String>> {
        let mut put_back = Vec::new();
        for (path, bytes) in &self.files {
            if holds(path, bytes) {
                continue;
            }
            super::guard::remove(path)?;
            std::fs::write(path, bytes).map_err(|e| WorkspaceError::io("write", path, e))?;
            put_back.push(path.display().to_string());
        }
        Ok(put_back)
    }

    /// What differs between this copy and the global and system config as
    /// git reads them in `cwd` now: `global filter.x.clean set`, one per
    /// key.
    pub(crate) fn differences(&self, git: &Git, cwd: &Path) -> Result<Vec<String>> {
        let now = listing(git, cwd)?;
        let mut out = Vec::new();
        for ((scope, (path, _)), live) in SCOPES.iter().zip(&self.files).zip(&now) {
            let kept = read_back(git, path)?;
            out.extend(changed_keys(&kept, live).map(|k| format!("{scope} {k}")));
        }
        Ok(out)
    }
}

/// The git a resumed run's workspace uses, before it runs any there: one
/// reading the record's copy (refused when changed), or for a record
/// without one, a copy taken now and put in the record. With a note naming
/// what changed in the live files since the run took them: the resume does
/// not take those (an agent of the run may have made them before it was
/// interrupted; a change of the person's applies from their next run).
pub fn run_git(git: &Git, record: &mut super::WorkspaceRecord) -> Result<(Git, Vec<String>)> {
    let cwd = if record.project_dir.is_dir() {
        record.project_dir.clone()
    } else {
        record.state_dir.clone()
    };
    let Some(digest) = &record.git_config else {
        return Ok(match Pinned::take(git, &cwd, &record.state_dir)? {
            Some(p) => {
                record.git_config = Some(p.digest());
                (p.driver(git), Vec::new())
            }
            None => (git.clone(), vec![unpinned_note(git.version()?)]),
        });
    };
    let pinned = Pinned::load(&record.state_dir, digest)?;
    let changed = pinned.differences(git, &cwd)?;
    let notes = (!changed.is_empty()).then(|| {
        format!(
            "your global git config changed since the run started ({}); the run's git goes on reading it as the run found it (a new run takes the change)",
            super::error::list(&changed)
        )
    });
    Ok((pinned.driver(git), notes.into_iter().collect()))
}

/// The note a step's record carries when a file of the copy was put back.
pub(crate) fn note(put_back: &[String]) -> Option<String> {
    (!put_back.is_empty()).then(|| {
        format!(
            "modix's copy of your global git config was changed ({}); put back before modix ran git, so nothing planted there ran",
            put_back.join(", ")
        )
    })
}

/// The note for a run whose git is older than [`PIN_GIT`].
pub(crate) fn unpinned_note(found: GitVersion) -> String {
    format!(
        "git {found} cannot be given a copy of your global git config (that needs git {PIN_GIT}): modix's git reads it as it is, and a setting an agent adds there would apply to it too"
    )
}

/// Whether `path` is a regular file holding `bytes` (read only when its
/// size is theirs: a FIFO is never opened, a huge file never read).
fn holds(path: &Path, bytes: &[u8]) -> bool {
    path.symlink_metadata()
        .is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::read(path).is_ok_and(|b| b == bytes)
}

/// The global and system entries git reads in `cwd`, in its order (later
/// wins), includes followed and their keys left out.
fn listing(git: &Git, cwd: &Path) -> Result<[Vec<Entry>; 2]> {
    let out = git
        .cmd(cwd)
        .args(["config", "--list", "--show-scope", "--includes", "-z"])
        .run()?;
    let mut scopes: [Vec<Entry>; 2] = Default::default();
    let mut records = split_z(&out);
    while let (Some(scope), Some(entry)) = (records.next(), records.next()) {
        let Some(i) = SCOPES.iter().position(|s| s.as_bytes() == scope) else {
            continue;
        };
        let entry = entry_of(entry);
        if !is_include(&entry.0) {
            scopes[i].push(entry);
        }
    }
    Ok(scopes)
}

/// A config file's entries as git reads it, its includes not followed.
fn read_back(git: &Git, path: &Path) -> Result<Vec<Entry>> {
    let out = git
        .cmd(path.parent().unwrap_or(path))
        .args(["config", "--no-includes", "--list", "-z", "--file"])
        .arg(path)
        .run()?;
    Ok(split_z(&out).map(entry_of).collect())
}

/// Refuses a copy git does not read back as `entries` (a setting modix
/// cannot write): the run would record with other settings than the user's.
fn check_written(git: &Git, path: &Path, entries: &[Entry]) -> Result<()> {
    let back = read_back(git, path)?;
    if back == entries {
        return Ok(());
    }
    let first = changed_keys(entries, &back).next().unwrap_or_default();
    Err(WorkspaceError::Unsupported {
        what: format!("modix cannot copy your git config faithfully ({first})"),
        advice: "A run's git reads a copy of your global and system config taken at its start; please report the setting.".into(),
    })
}

/// `-z` records; a trailing NUL ends the last one.
fn split_z(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    body.split(|b| *b == 0).filter(move |_| !bytes.is_empty())
}

fn entry_of(record: &[u8]) -> Entry {
    match record.iter().position(|b| *b == b'\n') {
        Some(i) => (record[..i].to_vec(), Some(record[i + 1..].to_vec())),
        None => (record.to_vec(), None),
    }
}

/// `include.path`, `includeif.<condition>.path`: in the copy they would
/// read the live files again (what they include is in the listing).
fn is_include(key: &[u8]) -> bool {
    let section = key.split(|b| *b == b'.').next().unwrap_or_default();
    section == b"include" || section == b"includeif"
}

/// The keys set, changed or removed from `old` to `new`, named.
fn changed_keys<'a>(old: &'a [Entry], new: &'a [Entry]) -> impl Iterator<Item = String> + 'a {
    let values = |entries: &'a [Entry], key: &[u8]| -> Vec<&'a Option<Vec<u8>>> {
        entries
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    };
    let mut keys: Vec<&Vec<u8>> = new.iter().chain(old).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter().filter_map(move |k| {
        let (was, now) = (values(old, k), values(new, k));
        let name = String::from_utf8_lossy(k);
        match (was.is_empty(), now.is_empty()) {
            _ if was == now => None,
            (true, _) => Some(format!("{name} set")),
            (_, true) => Some(format!("{name} removed")),
            _ => Some(format!("{name} changed")),
        }
    })
}

/// A config file saying `entries`, one section header each: a subsection
/// and every value quoted, so whitespace, `#`, `;`, quotes, backslashes
/// and line breaks read back as they were.
fn render(entries: &[Entry]) -> Vec<u8> {
    let mut out = b"# modix: your global or system git config as the run found it\n".to_vec();
    for (key, value) in entries {
        let first = key.iter().position(|b| *b == b'.').unwrap_or(0);
        let last = key.iter().rposition(|b| *b == b'.').unwrap_or(0);
        out.push(b'[');
        out.extend_from_slice(&key[..first]);
        if last > first {
            out.extend_from_slice(b" \"");
            for &b in &key[first + 1..last] {
                if matches!(b, b'"' | b'\\') {
                    out.push(b'\\');
                }
                out.push(b);
            }
            out.push(b'"');
        }
        out.extend_from_slice(b"]\n\t");
        out.extend_from_slice(&key[last + 1..]);
        if let Some(value) = value {
            out.extend_from_slice(b" = \"");
            out.extend_from_slice(&quoted(value));
            out.push(b'"');
        }
        out.push(b'\n');
    }
    out
}

/// A value's bytes as they go between double quotes.
fn quoted(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A git whose global config is `home/.gitconfig` and with no system one.
    fn setup() -> (tempfile::TempDir, Git, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let global = tmp.path().join(".gitconfig");
        std::fs::write(&global, "").unwrap();
        let git = Git::new()
            .with_env("GIT_CONFIG_GLOBAL", &global)
            .with_env("GIT_CONFIG_SYSTEM", "/dev/null");
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        (tmp, git, global)
    }

    fn pin(git: &Git, cwd: &Path, state: &Path) -> Pinned {
        Pinned::take(git, cwd, state).unwrap().expect("git >= 2.32")
    }

    /// Every value of `key`, one a line, untrimmed.
    fn get(git: &Git, cwd: &Path, key: &str) -> String {
        let out = git.cmd(cwd).args(["config", "--get-all", key]).run();
        let text = String::from_utf8(out.unwrap()).unwrap();
        text.strip_suffix('\n').unwrap_or(&text).to_owned()
    }

    #[test]
    fn the_copy_says_what_the_files_said_includes_and_all() {
        let (tmp, git, global) = setup();
        let inc = tmp.path().join("inc.cfg");
        std::fs::write(&inc, "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n").unwrap();
        std::fs::write(
            &global,
            format!(
                "[include]\n\tpath = {}\n[core]\n\tflag\n\tempty =\n[a]\n\tquote = \" Ann \\\"A\\\" O'Neil # x ; y\\\\\"\n\
                 [sec \"Sub.Dot \\\"q\\\" \\\\\"]\n\tval = \"a\\tb\\nc\"\n\tval = second\n",
                inc.display()
            ),
        )
        .unwrap();
        let state = tmp.path().join("state");
        let p = pin(&git, tmp.path(), &state);
        let pinned = p.driver(&git);
        // What the live files say, the copy says; and then the live files
        // no longer matter.
        let before = read_back(&git, &global).unwrap();
        std::fs::write(&global, "[filter \"x\"]\n\tclean = evil\n").unwrap();
        std::fs::write(&inc, "").unwrap();
        assert_eq!(
            get(&pinned, tmp.path(), "filter.lfs.clean"),
            "git-lfs clean -- %f"
        );
        assert_eq!(
            get(&pinned, tmp.path(), "a.quote"),
            " Ann \"A\" O'Neil # x ; y\\"
        );
        assert_eq!(
            get(&pinned, tmp.path(), "sec.Sub.Dot \"q\" \\.val"),
            "a\tb\nc\nsecond"
        );
        assert_eq!(get(&pinned, tmp.path(), "core.flag"), "");
        let bools = pinned
            .cmd(tmp.path())
            .args(["config", "--type=bool", "--get-all", "core.flag"])
            .run_text()
            .unwrap();
        assert_eq!(bools, "true");
        let (code, _) = pinned
            .cmd(tmp.path())
            .args(["config", "--get", "filter.x.clean"])
            .run_codes(&[0, 1])
            .unwrap();
        assert_eq!(code, 1, "the live file's new filter reached the pinned git");
        let kept = read_back(&git, &state.join("gitconfig/global")).unwrap();
        assert!(kept.iter().all(|(k, _)| !is_include(k)), "{kept:?}");
        assert_eq!(kept.len(), before.len(), "{kept:?}");
        // The live file's change is named, for a resume.
        let diff = p.differences(&git, tmp.path()).unwrap();
        assert!(
            diff.contains(&"global filter.x.clean set".to_owned()),
            "{diff:?}"
        );
        assert!(
            diff.contains(&"global a.quote removed".to_owned()),
            "{diff:?}"
        );
    }

    #[test]
    fn a_changed_copy_is_put_back_and_a_later_process_refuses_it() {
        let (tmp, git, global) = setup();
        std::fs::write(&global, "[user]\n\tname = Ann\n").unwrap();
        let state = tmp.path().join("state");
        let p = pin(&git, tmp.path(), &state);
        let digest = p.digest();
        assert_eq!(Pinned::load(&state, &digest).unwrap().digest(), digest);
        assert!(p.restore().unwrap().is_empty());
        let copy = state.join("gitconfig/global");
        std::fs::write(&copy, "[filter \"x\"]\n\tclean = evil\n").unwrap();
        let err = Pinned::load(&state, &digest).unwrap_err();
        assert!(matches!(err, WorkspaceError::Tampered { .. }), "{err:?}");
        assert_eq!(p.restore().unwrap(), [copy.display().to_string()]);
        assert_eq!(Pinned::load(&state, &digest).unwrap().digest(), digest);
        std::fs::remove_file(&copy).unwrap();
        nix::unistd::mkfifo(&copy, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(p.restore().unwrap().len(), 1);
        assert!(note(&[copy.display().to_string()]).is_some());
    }
}
