//! What an agent CLI's `--version` said, remembered under the modix home
//! (`cache/versions.json`) by the binary's path, real path, modification
//! time and size: `go` checks readiness before every run, and Gemini takes ~3 s to
//! print its version. A reinstalled or upgraded binary has another mtime or
//! size, so its entry is simply not found again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Entries kept at most; the oldest half goes when there are more (a
/// machine that installs CLI after CLI must not grow the file forever).
const MAX_ENTRIES: usize = 64;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CacheFile {
    #[serde(default)]
    versions: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// The text the version regex matched.
    raw: String,
    /// It as semver.
    version: String,
    /// When it was stored (seconds since the epoch), to drop the oldest.
    stored: u64,
}

fn file() -> Option<PathBuf> {
    crate::config::settings::home_dir().map(|h| h.join("cache").join("versions.json"))
}

/// `path | real path | mtime ns | size | probe args`, and the folder it is
/// asked from when the path is a link to a program of another name: what
/// identifies one answer. Version managers (Volta, mise, asdf) link every
/// CLI to one program that looks at the name it is called by, and at the
/// folder it runs in (a project's pinned version): keyed by the real path
/// alone, `gemini`'s version was read for `claude`.
fn key(binary: &Path, args: &[String]) -> Option<String> {
    let real = std::fs::canonicalize(binary).ok()?;
    let multi_call = real.file_name() != binary.file_name();
    let place = if multi_call {
        std::env::current_dir().ok()?.display().to_string()
    } else {
        String::new()
    };
    let meta = std::fs::metadata(&real).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!(
        "{}|{}|{mtime}|{}|{}|{place}",
        binary.display(),
        real.display(),
        meta.len(),
        args.join(" ")
    ))
}

fn read(path: &Path) -> CacheFile {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The version stored for this binary as it is now (raw, semver), if any.
pub fn get(binary: &Path, args: &[String]) -> Option<(String, semver::Version)> {
    let (path, key) = (file()?, key(binary, args)?);
    let entry = read(&path).versions.remove(&key)?;
    Some((entry.raw, semver::Version::parse(&entry.version).ok()?))
}

/// Remembers `raw` for this binary as it is now. A cache that cannot be
/// written only costs the next run its probe: errors are ignored.
pub fn put(binary: &Path, args: &[String], raw: &str, version: &semver::Version) {
    let (Some(path), Some(key)) = (file(), key(binary, args)) else {
        return;
    };
    let mut cache = read(&path);
    let stored = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    cache.versions.insert(
        key,
        Entry {
            raw: raw.to_owned(),
            version: version.to_string(),
            stored,
        },
    );
    if cache.versions.len() > MAX_ENTRIES {
        let mut ages: Vec<u64> = cache.versions.values().map(|e| e.stored).collect();
        ages.sort_unstable();
        let cut = ages[ages.len() / 2];
        cache.versions.retain(|_, e| e.stored > cut);
    }
    if let Ok(bytes) = serde_json::to_vec_pretty(&cache) {
        let _ = crate::fsutil::write_replace(&path, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_binary_is_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("cli");
        std::fs::write(&bin, "v1").unwrap();
        let args = vec!["--version".to_owned()];
        let first = key(&bin, &args).unwrap();
        assert_eq!(key(&bin, &args).unwrap(), first);
        std::fs::write(&bin, "version 2").unwrap();
        assert_ne!(key(&bin, &args).unwrap(), first, "size differs");
        assert_ne!(key(&bin, &["-V".to_owned()]).unwrap(), first);
        assert!(key(&dir.path().join("missing"), &args).is_none());
    }

    #[test]
    fn names_linked_to_one_program_are_keys_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let shim = dir.path().join("shim");
        std::fs::write(&shim, "multi-call").unwrap();
        for name in ["claude", "gemini"] {
            std::os::unix::fs::symlink(&shim, dir.path().join(name)).unwrap();
        }
        let args = vec!["--version".to_owned()];
        let claude = key(&dir.path().join("claude"), &args).unwrap();
        assert_ne!(key(&dir.path().join("gemini"), &args).unwrap(), claude);
        // Asked from a folder: a manager may pin another version there.
        assert!(claude.ends_with(&std::env::current_dir().unwrap().display().to_string()));
    }
}
