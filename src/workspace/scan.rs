//! The fast path of change tracking: an in-process stat snapshot of the
//! workspace, compared with the one taken after the last settle. Equal
//! snapshots mean nothing changed, and no git process is started.
//!
//! What is statted (lstat: size, mtime, ctime, inode, mode), in a fixed list
//! rebuilt whenever git ran:
//! - every tracked file (`git ls-files` on the run's private index: after
//!   `add -A` that is every file git would record, tracked-but-ignored ones
//!   included), so an edit shows in the file's own stat;
//! - every directory the `ignore` crate's walker does not skip (by the
//!   rules git reads: each `.gitignore` as git reads it — never through a
//!   symlink, see [`rule_file`] — then `info/exclude` and the run's excludes
//!   file; plus the tracking-ignore list), so a file created, removed or
//!   renamed shows in its folder's mtime — the same idea as git's untracked
//!   cache;
//! - git's own HEAD/index/ref files of the workspace and the exclude files, so
//!   an agent's own `git commit` or a changed ignore rule is noticed.
//!
//! Nothing git would record can change unseen: a rule file modix leaves
//! unread (too big, not UTF-8) only makes it watch *more* folders than git
//! needs (costing only a needless git run). Paths modified in the same clock tick as the snapshot
//! ("racy", as git calls them) are also hashed — a file's content, a folder's
//! entry names — so a later same-tick write is still seen.
//!
//! Walking a tree costs microseconds per file (the walker matches every entry
//! against the ignore rules), so the walk runs only after git did, never on
//! the fast path. On the fast path of a plan with no watch (below), a file
//! whose folder is as it was is statted through the inode held open since
//! the last full scan ([`Held`]) rather than by its path: the same answer
//! for a third of the cost.
//!
//! Before any of that, the plan's paths are under an inotify watch
//! ([`Watch`]): when the kernel reported nothing since the snapshot, the
//! snapshot still describes the tree and nothing is statted at all. A
//! watched plan holds no file open: it stats only after a write was
//! reported, which nearly always sends the settle on to git anyway, and
//! every process modix starts would pay for each held file (see
//! `held_max`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::collections::{HashMap, HashSet};

use ignore::WalkBuilder;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use sha2::{Digest, Sha256};

use super::error::{Result, WorkspaceError};
use super::watch::Watch;
use crate::fsutil::{RACY_COARSE, RACY_FINE};

/// Change noise that test runners and tools write into trees whose
/// `.gitignore` may not list it: never recorded, never a reason to run git.
/// Gitignore syntax, relative to the workspace's top folder.
pub const DEFAULT_TRACKING_IGNORE: &[&str] = &[
    "__pycache__/",
    "*.py[co]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".coverage",
    ".DS_Store",
];

/// Racy files larger than this are not hashed; the snapshot is then "unsure"
/// and the next settle asks git.
const RACY_HASH_LIMIT: u64 = 1 << 20;

/// What one path looked like (lstat: symlinks are not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    size: u64,
    mtime: i64,
    mtime_ns: i64,
    ctime: i64,
    ctime_ns: i64,
    dev: u64,
    ino: u64,
    mode: u32,
}

impl Stat {
    fn from_raw(st: &nix::sys::stat::FileStat) -> Self {
        Stat {
            dev: st.st_dev,
            size: st.st_size as u64,
            mtime: st.st_mtime,
            mtime_ns: st.st_mtime_nsec,
            ctime: st.st_ctime,
            ctime_ns: st.st_ctime_nsec,
            ino: st.st_ino,
            mode: st.st_mode,
        }
    }

    fn latest(&self) -> Duration {
        let t = |s: i64, ns: i64| Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32);
        t(self.mtime, self.mtime_ns).max(t(self.ctime, self.ctime_ns))
    }

    fn is_symlink(&self) -> bool {
        self.mode & 0o170000 == 0o120000
    }
}

/// A stat snapshot, slot-aligned with the plan that took it.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    generation: u64,
    /// When it was taken, and the timestamp tick assumed: paths changed
    /// within `window` before `taken` are racy.
    taken: Duration,
    window: Duration,
    files: Vec<Option<Stat>>,
    /// Content hashes of racy files.
    hashes: Vec<Option<[u8; 32]>>,
    dirs: Vec<Option<Stat>>,
    /// A racy file was too big to hash: equality proves nothing.
    unsure: bool,
}

impl Snapshot {
    fn horizon(&self) -> Duration {
        self.taken.saturating_sub(self.window)
    }
}

/// The paths a snapshot stats, rebuilt after every git-backed settle.
#[derive(Debug)]
pub(crate) struct ScanPlan {
    root: PathBuf,
    scope: PathBuf,
    noise: Override,
    /// git's files and the exclude files; kept across refreshes.
    fingerprints: Vec<PathBuf>,
    /// `info/exclude` and modix's excludes file, lowest precedence last.
    excludes: Vec<PathBuf>,
    /// The files (git's, the exclude files, the tracked ones), then the
    /// folders, ready to stat; see [`ScanPlan::files`], [`ScanPlan::dirs`].
    list: StatList,
    /// How many of `list`'s paths are files.
    n_files: usize,
    /// Each file's folder among the watched ones (an index into
    /// [`ScanPlan::dirs`]), when it is one.
    file_dir: Vec<Option<u32>>,
    /// Each file as the inode it was at the last full scan, held open when
    /// its folder is watched (see [`Held`]).
    held: Vec<Option<Held>>,
    /// Each watched folder's expected entries: its tracked files and watched
    /// subfolders.
    expected: Vec<HashSet<Vec<u8>>>,
    /// Which other names count in a folder listing, as git decides: each
    /// watched folder's `.gitignore`, then the exclude files.
    gitignores: HashMap<PathBuf, Gitignore>,
    global: Vec<Gitignore>,
    generation: u64,
    /// The paths under an inotify watch, when the kernel gives one that can
    /// be trusted (see [`Watch`]).
    watch: Option<Watch>,
    /// False once a watch was refused or gave up: the plan stats from then on.
    watching: bool,
    /// Special files removed where git reads its rules (see
    /// [`special_git_files`]), not yet told.
    removed: Vec<PathBuf>,
}

/// How a tree was found unchanged.
#[derive(Debug)]
pub(crate) enum Unchanged {
    /// Nothing was reported since the snapshot compared with, which still
    /// describes the tree.
    AsBefore,
    /// Statted: the snapshot of now, to compare with next time.
    Since(Snapshot),
}

impl ScanPlan {
    /// `scope` is a path relative to `root` (empty: all of it);
    /// `fingerprints` are statted as files; `excludes` are exclude files
    /// (gitignore syntax, relative to `root`), highest precedence first.
    pub fn new(
        root: &Path,
        scope: &Path,
        ignore: &[String],
        fingerprints: Vec<PathBuf>,
        excludes: Vec<PathBuf>,
    ) -> Result<Self> {
        Ok(ScanPlan {
            root: root.to_path_buf(),
            scope: scope.to_path_buf(),
            noise: noise_matcher(root, ignore)?,
            fingerprints,
            excludes,
            list: StatList::default(),
            n_files: 0,
            file_dir: Vec::new(),
            held: Vec::new(),
            expected: Vec::new(),
            gitignores: HashMap::new(),
            global: Vec::new(),
            generation: 0,
            watch: None,
            watching: true,
            removed: Vec::new(),
        })
    }

    /// Stats at every settle, with no watch (the tests of the stats).
    #[cfg(test)]
    pub fn without_watch(mut self) -> Self {
        self.watching = false;
        self.watch = None;
        self
    }

    /// Watches the plan's paths, as they are now. A path whose inode
    /// changed since it was last watched gets the new one watched too.
    fn rewatch(&mut self) {
        let (files, dirs) = self.list.paths.split_at(self.n_files);
        self.watch = match self.watch.take() {
            Some(mut w) => w.add(files, dirs).then_some(w),
            None if self.watching => Watch::new(files, dirs),
            None => None,
        };
        self.watching = self.watch.is_some();
    }

    /// Reads what the watch reported; false when there is no watch (any
    /// more). Reports were lost: the plan stats from now on.
    fn drain(&mut self) -> bool {
        let Some(w) = &mut self.watch else {
            return false;
        };
        if w.drain() {
            return true;
        }
        self.watch = None;
        self.watching = false;
        false
    }

    /// Rebuilds the lists: the fingerprints and `tracked` files (absolute),
    /// and the folders the walker does not skip.
    pub fn refresh(&mut self, tracked: &[PathBuf]) -> Result<()> {
        let mut files = self.fingerprints.clone();
        files.extend_from_slice(tracked);
        self.global = self
            .excludes
            .iter()
            .filter_map(|f| matcher(&self.root, std::slice::from_ref(f)))
            .collect();
        // Walked first: a failed walk leaves the plan's lists as they were.
        let mut walked = self.walk_dirs()?;
        if !walked.poisoned.is_empty() {
            self.removed.extend(remove_special(&walked.poisoned)?);
            walked = self.walk_dirs()?;
        }
        let Walked { dirs, rules, .. } = walked;
        // The files still listed keep what they held (a full scan checks it
        // is still their inode before it is trusted).
        let held = std::mem::take(&mut self.held);
        let mut old: HashMap<PathBuf, Held> = self
            .files()
            .iter()
            .zip(held)
            .filter_map(|(p, h)| Some((p.clone(), h?)))
            .collect();
        self.held = files.iter().map(|p| old.remove(p)).collect();
        self.n_files = files.len();
        files.extend(dirs);
        self.list = StatList::new(files);
        let slot: HashMap<&Path, usize> = self
            .dirs()
            .iter()
            .enumerate()
            .map(|(i, d)| (d.as_path(), i))
            .collect();
        let file_dir = self
            .files()
            .iter()
            .map(|p| Some(*slot.get(p.parent()?)? as u32))
            .collect();
        let mut expected = vec![HashSet::new(); self.dirs().len()];
        for p in tracked.iter().chain(self.dirs()) {
            if let (Some(parent), Some(name)) = (p.parent(), p.file_name())
                && let Some(&i) = slot.get(parent)
            {
                expected[i].insert(name.as_encoded_bytes().to_vec());
            }
        }
        self.expected = expected;
        self.file_dir = file_dir;
        self.gitignores = rules;
        self.generation += 1;
        self.rewatch();
        Ok(())
    }

    /// How many paths a scan stats.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.list.paths.len()
    }

    /// The files a scan stats.
    fn files(&self) -> &[PathBuf] {
        &self.list.paths[..self.n_files]
    }

    /// The folders a scan stats.
    fn dirs(&self) -> &[PathBuf] {
        &self.list.paths[self.n_files..]
    }

    /// The non-ignored folders in scope, the scope's own folder included,
    /// with the rules of each folder walked (see [`rule_file`]); and the
    /// special files (see [`special_git_files`]) found where git reads its
    /// rules: their folders are not walked into (the walker would wait on
    /// them), and [`ScanPlan::refresh`] removes them and walks again.
    ///
    /// The walker reads no rule file itself: it would follow a symlinked
    /// `.gitignore` and read it whole, as git does not (a rule there would
    /// hide from the watch a folder git records, and a link to a big file
    /// would cost minutes and gigabytes). Which folders are skipped is
    /// decided here, by the rules git reads, in git's precedence.
    fn walk_dirs(&self) -> Result<Walked> {
        let root = self.root.clone();
        let scope = self.scope.clone();
        let global = self.global.clone();
        let poisoned = std::sync::Arc::new(std::sync::Mutex::new(special_git_files(&self.root)));
        let found = poisoned.clone();
        let rules = std::sync::Arc::new(std::sync::Mutex::new(HashMap::new()));
        if let Some(g) = rule_file(&self.root) {
            lock(&rules).insert(self.root.clone(), g);
        }
        let read = rules.clone();
        let mut walk = WalkBuilder::new(&self.root);
        walk.standard_filters(false)
            .hidden(false)
            .parents(false)
            .ignore(false)
            .git_ignore(false)
            .git_exclude(false)
            .git_global(false)
            .follow_links(false)
            .overrides(self.noise.clone())
            .filter_entry(move |e| {
                if e.file_name() == ".git" || !e.file_type().is_some_and(|t| t.is_dir()) {
                    return false;
                }
                let rel = e.path().strip_prefix(&root).unwrap_or(e.path());
                // Ancestors of the scope are walked through, nothing else.
                if !(rel.starts_with(&scope) || scope.starts_with(rel)) {
                    return false;
                }
                // Its parent was walked (and its rules read) before it.
                if e.depth() > 0
                    && let Some(parent) = e.path().parent()
                    && ignored_by(&lock(&read), &global, &root, parent, e.path(), true)
                {
                    return false;
                }
                let special = special_git_files(e.path());
                let safe = special.is_empty();
                lock(&found).extend(special);
                if safe && let Some(g) = rule_file(e.path()) {
                    lock(&read).insert(e.path().to_path_buf(), g);
                }
                safe
            });
        let mut dirs = Vec::new();
        let root_safe = lock(&poisoned).is_empty();
        if root_safe {
            for item in walk.build() {
                let e = item.map_err(|e| {
                    WorkspaceError::io("walk", &self.root, std::io::Error::other(e.to_string()))
                })?;
                let rel = e.path().strip_prefix(&self.root).unwrap_or(e.path());
                if rel.starts_with(&self.scope) {
                    dirs.push(e.into_path());
                }
            }
        }
        let poisoned = lock(&poisoned).clone();
        let rules = std::mem::take(&mut *lock(&rules));
        Ok(Walked {
            dirs,
            poisoned,
            rules,
        })
    }

    /// The special files found where git reads its rules, before git runs,
    /// so that a settle that removes them first never has git wait on one:
    /// in the root, in the folders the plan knows whose stat moved since
    /// `before` (one `lstat` a folder, two more for one that moved), and in
    /// the folders made under those (walked by name, up to
    /// [`NEW_DIRS_MAX`] folders).
    pub fn special_since(&self, before: Option<&Snapshot>) -> Vec<PathBuf> {
        let mut found = special_git_files(&self.root);
        let known: HashSet<&Path> = self.dirs().iter().map(PathBuf::as_path).collect();
        let mut budget = NEW_DIRS_MAX;
        for (i, d) in self.dirs().iter().enumerate() {
            // A name made, removed or replaced in a folder moves its stat:
            // a folder whose stat did not move needs no more look.
            let moved = before
                .and_then(|b| b.dirs.get(i))
                .is_none_or(|then| lstat(d) != *then);
            if moved {
                found.extend(special_git_files(d));
                new_dirs_special(d, &known, &mut budget, &mut found);
            }
        }
        found
    }

    /// The special files removed since this was last asked, for a note.
    pub fn take_removed(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.removed)
    }

    /// Stats every path of the plan, folders first (see [`Held`]), and,
    /// with no watch, holds each file of a watched folder as the inode it
    /// now is.
    pub fn scan(&mut self) -> Snapshot {
        // What was reported so far is older than these stats.
        if self.drain()
            && let Some(w) = &mut self.watch
        {
            w.verified();
        }
        let taken = now();
        let mut statter = Statter::new(&self.list);
        let nf = self.n_files;
        let dirs = statter.lstat_all(nf..self.list.paths.len());
        let files = statter.lstat_all(0..nf);
        // Only a plan with no watch holds files (see the module's doc).
        let mut room = if self.watch.is_some() { 0 } else { held_max() };
        for (i, stat) in files.iter().enumerate() {
            let held = match (self.held[i].take(), stat) {
                (Some(h), Some(s)) if room > 0 && h.is(s) && self.file_dir[i].is_some() => Some(h),
                (_, Some(s)) if self.file_dir[i].is_some() && room > 0 => statter.hold(i, s),
                _ => None,
            };
            room = room.saturating_sub(usize::from(held.is_some()));
            self.held[i] = held;
        }
        // Whole-second timestamps everywhere: a coarse filesystem.
        let coarse = files
            .iter()
            .chain(&dirs)
            .flatten()
            .all(|s| s.mtime_ns == 0 && s.ctime_ns == 0);
        let window = if coarse { RACY_COARSE } else { RACY_FINE };
        let horizon = taken.saturating_sub(window);
        let mut unsure = false;
        let hashes = files
            .iter()
            .zip(self.files())
            .map(|(stat, path)| {
                let stat = stat.as_ref().filter(|s| s.latest() >= horizon)?;
                let h = (stat.size <= RACY_HASH_LIMIT)
                    .then(|| hash_file(path, stat))
                    .flatten();
                unsure |= h.is_none();
                h
            })
            .collect();
        Snapshot {
            generation: self.generation,
            taken,
            window,
            files,
            hashes,
            dirs,
            unsure,
        }
    }

    /// Whether the tree is unchanged since `before` (taken with this plan):
    /// as the watch reports, or as its stats show. `None`: something (maybe)
    /// changed, ask git.
    pub fn unchanged_since(&mut self, before: &Snapshot) -> Option<Unchanged> {
        if before.unsure || before.generation != self.generation {
            return None;
        }
        if self.drain() && self.watch.as_ref().is_some_and(Watch::quiet) {
            return Some(Unchanged::AsBefore);
        }
        let now = self.statted_since(before)?;
        if let Some(w) = &mut self.watch {
            w.verified();
        }
        Some(Unchanged::Since(now))
    }

    /// The stat comparison of [`ScanPlan::unchanged_since`].
    fn statted_since(&self, before: &Snapshot) -> Option<Snapshot> {
        let taken = now();
        let racy = before.horizon();
        let mut statter = Statter::new(&self.list);
        // Folders first (see `Held`): those as they were, not racy, are the
        // ones whose files' held inodes are still what their names lead to.
        let mut dirs = Vec::with_capacity(self.dirs().len());
        let mut settled = Vec::with_capacity(self.dirs().len());
        for i in 0..self.dirs().len() {
            let stat = statter.lstat(self.n_files + i);
            let then = before.dirs[i];
            let moved = stat != then || then.is_some_and(|s| s.latest() >= racy);
            // Entries came or went (or might have, in the same tick): a change
            // only if a name that counts did.
            if moved && !self.as_expected(i) {
                return None;
            }
            settled.push(!moved && then.is_some());
            dirs.push(stat);
        }
        let mut files = Vec::with_capacity(self.n_files);
        for (i, path) in self.files().iter().enumerate() {
            let stat = match self.trusted(i, &settled) {
                Some(held) => held.stat(),
                None => statter.lstat(i),
            };
            if stat != before.files[i] {
                return None;
            }
            // Same stat as a racy file: only the content can tell.
            if let (Some(h), Some(st)) = (before.hashes[i], stat.as_ref())
                && hash_file(path, st) != Some(h)
            {
                return None;
            }
            files.push(stat);
        }
        // Verified as of `taken`: from now on only paths changed within the
        // window before `taken` are racy, and their hashes are still right.
        let horizon = taken.saturating_sub(before.window);
        let hashes = files
            .iter()
            .zip(&before.hashes)
            .map(|(st, h)| st.filter(|s| s.latest() >= horizon).and(*h))
            .collect();
        Some(Snapshot {
            generation: self.generation,
            taken,
            window: before.window,
            files,
            hashes,
            dirs,
            unsure: false,
        })
    }

    /// File `i`'s held inode, when its folder is `settled` (as it was, not
    /// racy) and so its name still leads there.
    fn trusted(&self, i: usize, settled: &[bool]) -> Option<&Held> {
        let dir = self.file_dir[i]?;
        settled[dir as usize].then_some(())?;
        self.held[i].as_ref()
    }

    /// Whether watched folder `i` holds exactly its expected entries, plus
    /// only names git would not record (ignored, or not a file, folder or
    /// symlink).
    fn as_expected(&self, i: usize) -> bool {
        let dir = &self.dirs()[i];
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        let mut seen = 0;
        for e in entries {
            let Ok(e) = e else { return false };
            let name = e.file_name();
            if self.expected[i].contains(name.as_encoded_bytes()) {
                seen += 1;
                continue;
            }
            let Ok(ft) = e.file_type() else { return false };
            // A FIFO where git reads its rules is no file git records, but
            // git would wait on it: the settle must go on to remove it.
            if GIT_READS.iter().any(|n| name == *n) {
                return false;
            }
            let recordable = ft.is_file() || ft.is_dir() || ft.is_symlink();
            if name != ".git" && recordable && !self.ignored(dir, &e.path(), ft.is_dir()) {
                return false;
            }
        }
        seen == self.expected[i].len()
    }

    /// Whether git ignores `path` in the watched folder `dir`.
    fn ignored(&self, dir: &Path, path: &Path, is_dir: bool) -> bool {
        ignored_by(
            &self.gitignores,
            &self.global,
            &self.root,
            dir,
            path,
            is_dir,
        )
    }
}

/// What [`ScanPlan::walk_dirs`] found.
struct Walked {
    dirs: Vec<PathBuf>,
    poisoned: Vec<PathBuf>,
    /// The rules of each folder walked that has a `.gitignore` git reads.
    rules: HashMap<PathBuf, Gitignore>,
}

/// The lock's value, even when a panicking holder poisoned it.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// git's precedence: the nearest `.gitignore` (of `dir` or a folder above
/// it, up to `root`) with a matching pattern decides, then `info/exclude`,
/// then the excludes file. (`dir` is not ignored itself.)
fn ignored_by(
    rules: &HashMap<PathBuf, Gitignore>,
    global: &[Gitignore],
    root: &Path,
    dir: &Path,
    path: &Path,
    is_dir: bool,
) -> bool {
    let chain = dir
        .ancestors()
        .take_while(|d| d.starts_with(root))
        .filter_map(|d| rules.get(d))
        .chain(global);
    for gi in chain {
        let m = gi.matched(path, is_dir);
        if !m.is_none() {
            return m.is_ignore();
        }
    }
    false
}

/// The largest `.gitignore` modix reads. git reads up to 100 MiB; a real
/// one is a few KiB, and compiling a huge one costs modix far more than
/// git (a 300 MB one took minutes and gigabytes). Leaving one unread only
/// makes the watch see more than git records: at worst a needless git run.
const RULES_MAX: u64 = 1 << 20;

/// The rules of `dir`'s `.gitignore` as git reads them: a regular file,
/// never followed through a symlink (git 2.32 and later does not follow
/// one either), opened without waiting (a FIFO swapped in meanwhile), at
/// most [`RULES_MAX`] bytes of UTF-8. `None` when there is none, or none
/// modix reads: then nothing is ignored by it, which is safe.
fn rule_file(dir: &Path) -> Option<Gitignore> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(".gitignore");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > RULES_MAX {
        return None;
    }
    let mut text = String::new();
    file.take(RULES_MAX + 1).read_to_string(&mut text).ok()?;
    if text.len() as u64 > RULES_MAX {
        return None;
    }
    let mut b = GitignoreBuilder::new(dir);
    for (i, line) in text.lines().enumerate() {
        // As git, a byte-order mark opening the file is not a pattern.
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        b.add_line(Some(path.clone()), line).ok()?;
    }
    b.build().ok()
}

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn lstat(p: &Path) -> Option<Stat> {
    nix::sys::stat::lstat(p).ok().map(|st| Stat::from_raw(&st))
}

/// A plan's paths made ready to stat, once per refresh: each by its
/// folder (a slot) and its name there, or by its full path when no other
/// path of the list is in its folder (a git ref, an exclude file: one
/// system call, where opening the folder, statting in it and closing it
/// again takes three). Splitting and comparing the paths at every scan
/// cost a tenth of the scan.
#[derive(Clone, Debug, Default)]
struct StatList {
    folders: Vec<PathBuf>,
    paths: Vec<PathBuf>,
    lookups: Vec<Lookup>,
}

#[derive(Clone, Debug)]
enum Lookup {
    /// By name in folder slot `.0`.
    InFolder(u32, std::ffi::CString),
    ByPath,
}

impl StatList {
    fn new(paths: Vec<PathBuf>) -> Self {
        let split = |p: &PathBuf| Some((p.parent()?.to_path_buf(), p.file_name()?.to_owned()));
        let mut count: HashMap<PathBuf, usize> = HashMap::new();
        for (parent, _) in paths.iter().filter_map(split) {
            *count.entry(parent).or_default() += 1;
        }
        let mut folders = Vec::new();
        let mut slot: HashMap<PathBuf, u32> = HashMap::new();
        let lookups = paths
            .iter()
            .map(|p| {
                let Some((parent, name)) = split(p) else {
                    return Lookup::ByPath;
                };
                let Ok(name) = std::ffi::CString::new(name.into_encoded_bytes()) else {
                    return Lookup::ByPath;
                };
                if count[&parent] < 2 {
                    return Lookup::ByPath;
                }
                let next = folders.len() as u32;
                let i = *slot.entry(parent.clone()).or_insert_with(|| {
                    folders.push(parent);
                    next
                });
                Lookup::InFolder(i, name)
            })
            .collect();
        StatList {
            folders,
            paths,
            lookups,
        }
    }
}

/// Lstats a [`StatList`]'s paths by name in their folder, keeping the last
/// few folders open (the plan's files and folders come back to the same
/// folders in turns: `a/x`, `a/b/y`, `a/z`): a stat by full path walks every
/// component from `/` again, which costs more than the stat itself in a deep
/// tree of a few hundred files. The same answers as [`lstat`]: the folder's
/// path is resolved as `lstat` resolves it, and the last component is not
/// followed. A Statter lives for one scan only (a folder replaced after it
/// was opened must be seen by the next), and holds at most
/// [`Statter::OPEN`] folders open, whatever the tree's size.
struct Statter<'a> {
    list: &'a StatList,
    /// Open folders by slot (`None`: could not be opened), most recently
    /// used first.
    open: Vec<(u32, Option<std::os::fd::OwnedFd>)>,
}

impl<'a> Statter<'a> {
    const OPEN: usize = 8;

    fn new(list: &'a StatList) -> Self {
        Statter {
            list,
            open: Vec::with_capacity(Self::OPEN),
        }
    }

    /// The lstat of every path of the list in `range`, in order.
    fn lstat_all(&mut self, range: std::ops::Range<usize>) -> Vec<Option<Stat>> {
        range.map(|i| self.lstat(i)).collect()
    }

    /// The list's path `i` held open, when it is still the inode `stat`
    /// (taken a moment ago) describes.
    fn hold(&mut self, i: usize, stat: &Stat) -> Option<Held> {
        use nix::fcntl::OFlag;
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mode = nix::sys::stat::Mode::empty();
        let fd = match &self.list.lookups[i] {
            Lookup::InFolder(slot, name) => match self.folder(*slot) {
                Some(dir) => nix::fcntl::openat(dir, name.as_c_str(), flags, mode),
                None => nix::fcntl::open(&self.list.paths[i], flags, mode),
            },
            Lookup::ByPath => nix::fcntl::open(&self.list.paths[i], flags, mode),
        }
        .ok()?;
        let held = Held {
            fd,
            dev: stat.dev,
            ino: stat.ino,
        };
        (held.stat().as_ref() == Some(stat)).then_some(held)
    }

    /// The lstat of the list's path `i`.
    fn lstat(&mut self, i: usize) -> Option<Stat> {
        let Lookup::InFolder(slot, name) = &self.list.lookups[i] else {
            return lstat(&self.list.paths[i]);
        };
        let Some(dir) = self.folder(*slot) else {
            // The folder cannot be opened: ask by path (which fails alike).
            return lstat(&self.list.paths[i]);
        };
        use nix::fcntl::AtFlags;
        let st =
            nix::sys::stat::fstatat(dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        Some(Stat::from_raw(&st))
    }

    /// Folder `slot`, opened now unless it is among the last few opened.
    fn folder(&mut self, slot: u32) -> Option<&std::os::fd::OwnedFd> {
        match self.open.iter().position(|(s, _)| *s == slot) {
            Some(0) => {}
            Some(k) => self.open[..=k].rotate_right(1),
            None => {
                // O_PATH: like a stat by path, it needs no read permission
                // on the folder, only search permission on the way to it.
                use nix::fcntl::OFlag;
                let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                let folder = &self.list.folders[slot as usize];
                let fd = nix::fcntl::open(folder, flags, nix::sys::stat::Mode::empty()).ok();
                self.open.truncate(Self::OPEN - 1);
                self.open.insert(0, (slot, fd));
            }
        }
        self.open.first().and_then(|(_, fd)| fd.as_ref())
    }
}

/// A file held open (`O_PATH`: nothing of it is read, no permission on it
/// is needed) as the inode its path led to when the plan's last full scan
/// statted it, so that a fast scan can `fstat` it instead of walking its
/// path again (a third of the cost).
///
/// Sound while its folder has the stat it had (by path, not racy) in the
/// snapshot compared with: a name made, removed or renamed in a folder
/// changes the folder's mtime and ctime, and a folder replaced has another
/// inode, so its names still lead where they did then — and the held inode
/// is that one when its own stat (`dev` and `ino` included) is the
/// snapshot's. Every scan stats the folders before the files, so a name
/// changed between the two shows in its folder at the next scan. A folder
/// that moved, or changed within the racy window, has its files statted by
/// path.
#[derive(Debug)]
struct Held {
    fd: std::os::fd::OwnedFd,
    dev: u64,
    ino: u64,
}

impl Held {
    /// Whether it is the inode `stat` describes (no inode number is reused
    /// while it is held open).
    fn is(&self, stat: &Stat) -> bool {
        self.dev == stat.dev && self.ino == stat.ino
    }

    fn stat(&self) -> Option<Stat> {
        nix::sys::stat::fstat(&self.fd)
            .ok()
            .map(|st| Stat::from_raw(&st))
    }
}

/// How many files a plan with no watch holds open at most: a quarter of
/// what the process may open, and at most 512. Every process modix starts
/// (an agent, git) has the open-file table copied at its fork and the held
/// files closed at its exec, ~0.05–0.1 µs each: 300 held files were ~20 µs
/// of every agent's start (docs/performance.md, sixteenth round), 1024 add
/// 50–100 µs, 8192 ~500 µs to every git command of a settle; a fast scan
/// that stats saves ~300 µs with them. A bigger tree has the rest statted
/// by path.
fn held_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        use nix::sys::resource::{Resource, getrlimit};
        let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
        usize::try_from((soft / 4).min(512)).unwrap_or(0)
    })
}

/// A gitignore matcher for `files`, patterns relative to `dir`; `None` if
/// none of them could be read (then nothing is filtered: safe).
fn matcher(dir: &Path, files: &[PathBuf]) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new(dir);
    for f in files {
        if b.add(f).is_some() {
            return None;
        }
    }
    b.build().ok()
}

/// A file's content (a symlink's target) as a hash.
fn hash_file(path: &Path, stat: &Stat) -> Option<[u8; 32]> {
    let bytes = if stat.is_symlink() {
        std::fs::read_link(path)
            .ok()?
            .into_os_string()
            .into_encoded_bytes()
    } else {
        std::fs::read(path).ok()?
    };
    Some(Sha256::digest(&bytes).into())
}

/// The names in a folder that git opens and reads as it walks it.
const GIT_READS: [&str; 2] = [".gitignore", ".gitattributes"];

/// The files in `dir` named as git's rules (`.gitignore`, `.gitattributes`)
/// that are not regular files, even through a symlink: a FIFO there makes
/// git — and the walker, which reads `.gitignore` too — wait forever for a
/// writer; a socket or device is no rule either. git records none of them.
pub(crate) fn special_git_files(dir: &Path) -> Vec<PathBuf> {
    GIT_READS
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| match p.symlink_metadata() {
            Ok(m) if m.is_file() => false,
            Ok(m) if m.is_symlink() => std::fs::metadata(p).is_ok_and(|t| !t.is_file()),
            Ok(_) => true,
            Err(_) => false,
        })
        .collect()
}

/// How many folders made in one step [`ScanPlan::special_since`] looks
/// into: a step that made more (an install) is past what it guards against.
const NEW_DIRS_MAX: usize = 2_000;

/// The special files where git reads its rules in the folders under `dir`
/// that are not `known` (made since the plan was built), by name.
fn new_dirs_special(
    dir: &Path,
    known: &HashSet<&Path>,
    budget: &mut usize,
    found: &mut Vec<PathBuf>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if *budget == 0 {
            return;
        }
        let path = e.path();
        if e.file_name() == ".git"
            || !e.file_type().is_ok_and(|t| t.is_dir())
            || known.contains(path.as_path())
        {
            continue;
        }
        *budget -= 1;
        found.extend(special_git_files(&path));
        new_dirs_special(&path, known, budget, found);
    }
}

/// Removes what [`special_git_files`] found (a symlink, not its target).
pub(crate) fn remove_special(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for p in paths {
        let gone = match p.symlink_metadata() {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
            Ok(_) => std::fs::remove_file(p),
            Err(_) => continue,
        };
        gone.map_err(|e| WorkspaceError::io("remove", p, e))?;
        removed.push(p.clone());
    }
    Ok(removed)
}

/// The tracking-ignore list as `ignore` overrides (`!glob` = skip), matched
/// like gitignore patterns relative to `root`.
pub(crate) fn noise_matcher(root: &Path, ignore: &[String]) -> Result<Override> {
    let mut b = OverrideBuilder::new(root);
    for g in ignore {
        check_pattern(g)?;
        b.add(&format!("!{g}"))
            .map_err(|e| WorkspaceError::BadPattern {
                pattern: g.clone(),
                reason: e.to_string(),
            })?;
    }
    b.build().map_err(|e| WorkspaceError::BadPattern {
        pattern: ignore.join(" "),
        reason: e.to_string(),
    })
}

/// Patterns are "ignore this" globs: a negation or a line break would mean
/// something else in the excludes file git reads.
fn check_pattern(g: &str) -> Result<()> {
    let bad = if g.trim().is_empty() {
        Some("it is empty")
    } else if g.starts_with('!') {
        Some("negations are not supported; list only what to ignore")
    } else if g.contains('\n') || g.contains('\r') {
        Some("it contains a line break")
    } else {
        None
    };
    match bad {
        Some(reason) => Err(WorkspaceError::BadPattern {
            pattern: g.to_owned(),
            reason: reason.into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statting_by_name_in_a_folder_answers_as_lstat_does() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/f.txt"), "one").unwrap();
        std::fs::write(root.join("a/b/g.txt"), "two").unwrap();
        std::os::unix::fs::symlink("f.txt", root.join("a/link")).unwrap();
        std::os::unix::fs::symlink("a", root.join("via")).unwrap();
        let paths = [
            "a/f.txt",
            "a/link",
            "a/b",
            "a/b/g.txt",
            "a/gone",
            "a/f.txt",
            "via/f.txt",
            "via",
            "nowhere/x",
            "a/f.txt/x",
        ];
        // Each path by name in its folder (`a/`, `via/`: two paths each),
        // or by its full path (alone in its folder).
        let list = StatList::new(paths.iter().map(|rel| root.join(rel)).collect());
        assert!(matches!(list.lookups[0], Lookup::InFolder(..)));
        assert!(matches!(list.lookups[8], Lookup::ByPath));
        let check = |list: &StatList| {
            let mut statter = Statter::new(list);
            for (i, p) in list.paths.iter().enumerate() {
                assert_eq!(statter.lstat(i), lstat(p), "{}", p.display());
            }
        };
        check(&list);
        // A folder that can be searched but not read (stat by path works).
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(root.join("x")).unwrap();
        std::fs::write(root.join("x/h.txt"), "three").unwrap();
        std::fs::write(root.join("x/i.txt"), "four").unwrap();
        std::fs::set_permissions(root.join("x"), std::fs::Permissions::from_mode(0o311)).unwrap();
        let unreadable = StatList::new(vec![root.join("x/h.txt"), root.join("x/i.txt")]);
        assert!(matches!(unreadable.lookups[0], Lookup::InFolder(..)));
        check(&unreadable);
        assert!(Statter::new(&unreadable).lstat(0).is_some());
        std::fs::set_permissions(root.join("x"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // The link is not followed; a folder swapped for a link is seen.
        let links = StatList::new(vec![root.join("a/link"), root.join("a/b")]);
        assert!(Statter::new(&links).lstat(0).unwrap().is_symlink());
        std::fs::rename(root.join("a/b"), root.join("a/c")).unwrap();
        std::os::unix::fs::symlink("c", root.join("a/b")).unwrap();
        assert!(Statter::new(&links).lstat(1).unwrap().is_symlink());
        check(&list);
        // A wide tree, its folders visited in turns: the same answers, and
        // never more than a few folders held open.
        let mut wide = Vec::new();
        for round in 0..2 {
            for d in 0..20 {
                let p = root.join(format!("wide/d{d}/f{round}"));
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, "x").unwrap();
                wide.extend([p.clone(), root.join("wide/top"), p.parent().unwrap().into()]);
            }
        }
        let wide = StatList::new(wide);
        let mut statter = Statter::new(&wide);
        for (i, p) in wide.paths.iter().enumerate() {
            assert_eq!(statter.lstat(i), lstat(p), "{}", p.display());
            assert!(statter.open.len() <= Statter::OPEN);
        }
    }

    /// A plan over `root` whose "tracked" files are `tracked`, with the
    /// default tracking-ignore list in its excludes file (as a workspace has).
    fn plan(root: &Path, tracked: &[&str]) -> ScanPlan {
        let ignore: Vec<String> = DEFAULT_TRACKING_IGNORE
            .iter()
            .map(|s| s.to_string())
            .collect();
        let excludes = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(excludes.path(), ignore.join("\n")).unwrap();
        let mut p = ScanPlan::new(
            root,
            Path::new(""),
            &ignore,
            Vec::new(),
            vec![excludes.path().to_path_buf()],
        )
        .unwrap();
        let tracked: Vec<PathBuf> = tracked.iter().map(|t| root.join(t)).collect();
        p.refresh(&tracked).unwrap();
        p
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn sees_edits_adds_and_removals_but_not_noise_or_ignored_output() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".gitignore", "build/\n*.log\ndist/\n");
        write(root, "a.py", "x = 1\n");
        write(root, "build/x", "");
        write(root, "pkg/m.py", "");
        let mut p = plan(root, &[".gitignore", "a.py", "pkg/m.py"]);
        // Watched: three files, the root and pkg/ (build/ is ignored).
        assert_eq!(p.len(), 5);
        let s0 = p.scan();
        let s0 = p.statted_since(&s0).expect("nothing changed");

        // Noise and ignored output, in watched folders or not, are invisible.
        write(root, "build/out.o", "o");
        write(root, "pkg/__pycache__/m.cpython-312.pyc", "c");
        write(root, "stray.pyc", "c");
        write(root, ".pytest_cache/v/lastfailed", "{}");
        write(root, "debug.log", "l");
        write(root, "dist/app.log", "l");
        let s1 = p.statted_since(&s0).expect("noise is not a change");
        // A new folder that is not ignored is (even while empty: a file may
        // come into it later, and it is not watched yet).
        std::fs::create_dir(root.join("dist2")).unwrap();
        assert!(p.statted_since(&s1).is_none());
        std::fs::remove_dir(root.join("dist2")).unwrap();

        write(root, "a.py", "x = 2\n");
        assert!(p.statted_since(&s1).is_none(), "an edit");
        let s2 = p.scan();
        write(root, "pkg/new.txt", "n");
        assert!(
            p.statted_since(&s2).is_none(),
            "a new file in a watched folder"
        );
        // Gone again: back to what was recorded, which is no change.
        std::fs::remove_file(root.join("pkg/new.txt")).unwrap();
        let s3 = p.statted_since(&s2).expect("as recorded");
        std::fs::rename(root.join("pkg/m.py"), root.join("pkg/n.py")).unwrap();
        assert!(p.statted_since(&s3).is_none(), "a rename");
        std::fs::remove_file(root.join("pkg/n.py")).unwrap();
        assert!(p.statted_since(&s3).is_none(), "a removal");
    }

    #[test]
    fn racy_files_are_judged_by_their_content() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "a.txt", "x = 1\n");
        let mut p = plan(root, &["a.txt"]);
        let before = p.scan();
        assert!(before.hashes[0].is_some(), "just written: racy");
        // A filesystem whose clock did not tick between the writes: the stat
        // data is identical, only the content differs.
        let same_stat = |p: &mut ScanPlan| {
            let mut b = before.clone();
            b.files = p.scan().files;
            b
        };
        write(root, "a.txt", "x = 2\n");
        let same = same_stat(&mut p);
        assert!(p.statted_since(&same).is_none());
        write(root, "a.txt", "x = 1\n");
        let same = same_stat(&mut p);
        assert!(p.statted_since(&same).is_some());
    }

    #[test]
    fn racy_folders_are_judged_by_their_names() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mut p = plan(root, &[]);
        let before = p.scan();
        // The folder's stat did not change (same tick), its entries did.
        write(root, "b.txt", "b");
        let mut same = before.clone();
        same.dirs = p.scan().dirs;
        assert!(p.statted_since(&same).is_none());
    }

    #[test]
    fn a_verified_snapshot_forgets_hashes_once_paths_are_old() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "a.txt", "a");
        let mut p = plan(root, &["a.txt"]);
        let s = p.scan();
        assert!(s.hashes[0].is_some());
        std::thread::sleep(RACY_FINE * 2);
        let s = p.statted_since(&s).unwrap();
        assert!(
            s.hashes[0].is_none(),
            "no longer racy: no hashing on later checks"
        );
    }

    #[test]
    fn scope_limits_the_folders_watched() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("app/src")).unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        let mut p = ScanPlan::new(root, Path::new("app"), &[], Vec::new(), Vec::new()).unwrap();
        p.refresh(&[]).unwrap();
        assert_eq!(p.dirs(), [root.join("app"), root.join("app/src")]);
        let s0 = p.scan();
        write(root, "other/x", "");
        write(root, "top.txt", "");
        assert!(p.statted_since(&s0).is_some());
    }

    /// Files made in `tree/` and aged past the racy window, and a plan
    /// over them with no watch: a snapshot of it holds every file of a
    /// watched folder open. (Beside `tree/`, room for what an agent moves
    /// out of it.)
    fn aged(tracked: &[(&str, &str)]) -> (tempfile::TempDir, ScanPlan, Snapshot) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tree");
        for (rel, text) in tracked {
            write(&root, rel, text);
        }
        std::thread::sleep(RACY_FINE * 2);
        let rels: Vec<&str> = tracked.iter().map(|(rel, _)| *rel).collect();
        let mut p = plan(&root, &rels).without_watch();
        let s = p.scan();
        assert!(s.hashes.iter().all(Option::is_none), "nothing racy");
        (tmp, p, s)
    }

    /// Sets `rel`'s mtime to what `like`'s is.
    fn same_mtime(root: &Path, rel: &str, like: &str) {
        let then = std::fs::metadata(root.join(like))
            .unwrap()
            .modified()
            .unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(root.join(rel))
            .unwrap();
        f.set_modified(then).unwrap();
    }

    #[test]
    fn held_files_are_trusted_only_in_folders_as_they_were() {
        let files = [("top.txt", "t"), ("pkg/a.txt", "aa"), ("pkg/b.txt", "bb")];
        let (tmp, p, s0) = aged(&files);
        let root = &tmp.path().join("tree");
        assert_eq!(p.held.iter().flatten().count(), 3);
        // Nothing changed: each file is asked by its held inode.
        let settled = vec![true; p.dirs().len()];
        assert!((0..3).all(|i| p.trusted(i, &settled).is_some()));
        let s1 = p.statted_since(&s0).expect("nothing changed");
        assert!(s1.hashes.iter().all(Option::is_none));

        // Each of these is seen, whatever the agent did to hide it.
        type Hide = fn(&Path);
        let cases: [(&str, Hide); 6] = [
            ("an edit of the same size, its mtime put back", |r| {
                let then = std::fs::metadata(r.join("pkg/a.txt")).unwrap();
                std::fs::write(r.join("pkg/a.txt"), "AA").unwrap();
                let f = std::fs::File::options()
                    .write(true)
                    .open(r.join("pkg/a.txt"));
                f.unwrap().set_modified(then.modified().unwrap()).unwrap();
            }),
            ("a sibling renamed over it, same content and mtime", |r| {
                std::fs::write(r.join("pkg/tmp"), "aa").unwrap();
                same_mtime(r, "pkg/tmp", "pkg/a.txt");
                std::fs::rename(r.join("pkg/tmp"), r.join("pkg/a.txt")).unwrap();
            }),
            // The held inodes are untouched: only the folder's stat by path
            // tells their names lead elsewhere now.
            (
                "its folder moved out, a copy with other content in its place",
                |r| {
                    std::fs::rename(r.join("pkg"), r.join("../old")).unwrap();
                    write(r, "pkg/a.txt", "AA");
                    write(r, "pkg/b.txt", "bb");
                    same_mtime(r, "pkg/a.txt", "../old/a.txt");
                    same_mtime(r, "pkg/b.txt", "../old/b.txt");
                },
            ),
            ("an edit through a hard link outside the tree", |r| {
                let out = r.join("../link");
                std::fs::hard_link(r.join("top.txt"), &out).unwrap();
                std::fs::write(&out, "T").unwrap();
                std::fs::remove_file(&out).unwrap();
            }),
            ("a removal", |r| {
                std::fs::remove_file(r.join("pkg/b.txt")).unwrap()
            }),
            ("a file swapped for a link to one like it", |r| {
                std::fs::rename(r.join("pkg/a.txt"), r.join("a.txt")).unwrap();
                std::os::unix::fs::symlink("../a.txt", r.join("pkg/a.txt")).unwrap();
            }),
        ];
        for (what, hide) in cases {
            let (tmp, p, s0) = aged(&files);
            hide(&tmp.path().join("tree"));
            assert!(p.statted_since(&s0).is_none(), "{what}");
        }

        // A folder changed just before the snapshot (racy) is not trusted
        // even when its stat is the same: a change in the same clock tick
        // leaves it so. Such a change is made here by hand: the folder moved
        // out and a copy put in its place, the snapshot's folder stats then
        // set to what they are now.
        let (tmp2, mut p2, _) = aged(&files);
        let r = &tmp2.path().join("tree");
        write(r, "pkg/scratch", "s");
        std::fs::remove_file(r.join("pkg/scratch")).unwrap();
        let before = p2.scan();
        std::fs::rename(r.join("pkg"), r.join("../old")).unwrap();
        write(r, "pkg/a.txt", "AA");
        write(r, "pkg/b.txt", "bb");
        same_mtime(r, "pkg/a.txt", "../old/a.txt");
        same_mtime(r, "pkg/b.txt", "../old/b.txt");
        let mut same_tick = before.clone();
        same_tick.dirs = Statter::new(&p2.list).lstat_all(p2.n_files..p2.list.paths.len());
        assert!(p2.statted_since(&same_tick).is_none());

        // A folder that moved (an entry came and went) has its files statted
        // by path, and the tree is still unchanged.
        write(root, "pkg/scratch", "s");
        std::fs::remove_file(root.join("pkg/scratch")).unwrap();
        let s2 = p.statted_since(&s1).expect("back as it was");
        let pkg = p.dirs().iter().position(|d| d.ends_with("pkg")).unwrap();
        assert_ne!(s2.dirs[pkg], s1.dirs[pkg]);
    }

    #[test]
    fn a_tree_bigger_than_what_is_held_has_the_rest_statted_by_path() {
        let n = held_max() + 40;
        let names: Vec<String> = (0..n).map(|i| format!("d/f{i:04}")).collect();
        let files: Vec<(&str, &str)> = names.iter().map(|f| (f.as_str(), "x")).collect();
        let (tmp, p, s0) = aged(&files);
        assert_eq!(p.held.iter().flatten().count(), held_max());
        assert!(p.held[n - 1].is_none());
        let s1 = p.statted_since(&s0).expect("nothing changed");
        write(&tmp.path().join("tree"), &names[n - 1], "y");
        assert!(p.statted_since(&s1).is_none(), "an edit past the held ones");
    }

    #[test]
    fn a_full_scan_keeps_what_it_held_of_files_that_stayed() {
        use std::os::fd::AsRawFd;
        let files = [("a.txt", "a"), ("b.txt", "b"), ("ignored/kept.txt", "k")];
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, ".gitignore", "ignored/\n");
        for (rel, text) in files {
            write(root, rel, text);
        }
        let rels: Vec<&str> = files.iter().map(|(rel, _)| *rel).collect();
        let mut p = plan(root, &rels).without_watch();
        p.scan();
        // A tracked file in a folder that is not watched is statted by path.
        assert!(p.held[2].is_none());
        let fds: Vec<_> = p
            .held
            .iter()
            .map(|h| h.as_ref().map(|h| h.fd.as_raw_fd()))
            .collect();
        // `b.txt` is now another inode; `a.txt` is the same one.
        std::fs::remove_file(root.join("b.txt")).unwrap();
        write(root, "b.txt", "b2");
        p.refresh(&rels.iter().map(|r| root.join(r)).collect::<Vec<_>>())
            .unwrap();
        let s = p.scan();
        assert_eq!(p.held[0].as_ref().map(|h| h.fd.as_raw_fd()), fds[0]);
        let b = p.held[1].as_ref().expect("held again");
        assert_eq!(Some(b.ino), s.files[1].map(|st| st.ino));
        assert_eq!(b.stat(), s.files[1]);
    }

    /// `a.txt` and `sub/b.txt` under a watched plan, where the watch can
    /// be trusted (else the test skips).
    fn watched_pair() -> Option<(tempfile::TempDir, ScanPlan)> {
        let tmp = super::super::watch::tests::trusted_tmp()?;
        write(tmp.path(), "a.txt", "a");
        write(tmp.path(), "sub/b.txt", "b");
        let p = plan(tmp.path(), &["a.txt", "sub/b.txt"]);
        Some((tmp, p))
    }

    #[test]
    fn a_quiet_watch_answers_without_statting() {
        let Some((tmp, mut p)) = watched_pair() else {
            return;
        };
        let root = tmp.path();
        let s0 = p.scan();
        // The full scan itself is no change.
        assert!(matches!(p.unchanged_since(&s0), Some(Unchanged::AsBefore)));
        // Noise is reported; the stats find no change that counts, and the
        // watch answers again from then on.
        write(root, "sub/__pycache__/b.pyc", "noise");
        let Some(Unchanged::Since(s1)) = p.unchanged_since(&s0) else {
            panic!("statted");
        };
        assert!(matches!(p.unchanged_since(&s1), Some(Unchanged::AsBefore)));
        write(root, "sub/b.txt", "B");
        assert!(p.unchanged_since(&s1).is_none());
        assert!(
            p.unchanged_since(&s1).is_none(),
            "still changed, asked again"
        );
        // Without a watch, every answer is statted.
        let mut q = plan(root, &["a.txt", "sub/b.txt"]).without_watch();
        let t0 = q.scan();
        assert!(matches!(q.unchanged_since(&t0), Some(Unchanged::Since(_))));
    }

    #[test]
    fn a_watched_plan_holds_nothing_and_its_stats_still_see_every_edit() {
        let Some((tmp, mut p)) = watched_pair() else {
            return;
        };
        let root = tmp.path();
        assert!(p.watch.is_some(), "watched");
        let s0 = p.scan();
        assert_eq!(p.held.iter().flatten().count(), 0, "held under a watch");
        // A write is reported, and the stats (by path) find it.
        write(root, "sub/b.txt", "B");
        assert!(p.unchanged_since(&s0).is_none());
        // Once the watch is gone, the next full scan holds the files.
        let mut q = p.without_watch();
        q.refresh(&[root.join("a.txt"), root.join("sub/b.txt")])
            .unwrap();
        q.scan();
        assert_eq!(q.held.iter().flatten().count(), 2);
    }

    #[test]
    fn a_snapshot_from_an_older_plan_proves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut p = plan(tmp.path(), &[]);
        let s = p.scan();
        p.refresh(&[]).unwrap();
        assert!(p.unchanged_since(&s).is_none());
    }

    #[test]
    fn special_files_where_git_reads_its_rules_are_found_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let fifo = nix::sys::stat::Mode::S_IRWXU;
        nix::unistd::mkfifo(&d.join("target-fifo"), fifo).unwrap();
        std::fs::write(d.join("real"), "*.o\n").unwrap();
        nix::unistd::mkfifo(&d.join(".gitignore"), fifo).unwrap();
        std::os::unix::fs::symlink(d.join("target-fifo"), d.join(".gitattributes")).unwrap();
        assert_eq!(
            special_git_files(d),
            [d.join(".gitignore"), d.join(".gitattributes")]
        );
        let removed = remove_special(&special_git_files(d)).unwrap();
        assert_eq!(removed.len(), 2);
        assert!(d.join("target-fifo").exists(), "the link's target is left");
        std::os::unix::fs::symlink(d.join("real"), d.join(".gitignore")).unwrap();
        std::fs::write(d.join(".gitattributes"), "* text\n").unwrap();
        assert!(special_git_files(d).is_empty());
    }

    /// A `.gitignore` is read as git reads one: never through a symlink,
    /// never one too big to be a real one; what is left unread ignores
    /// nothing (the watch then sees more, never less, than git records).
    #[test]
    fn rule_files_are_read_as_git_reads_them() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let ignores =
            |d: &Path| rule_file(d).is_some_and(|g| g.matched(d.join("x.o"), false).is_ignore());
        std::fs::write(d.join(".gitignore"), "\u{feff}*.o\n").unwrap();
        assert!(ignores(d));
        std::fs::write(d.join("real"), "*.o\n").unwrap();
        std::fs::remove_file(d.join(".gitignore")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join(".gitignore")).unwrap();
        assert!(!ignores(d), "a symlinked .gitignore is not followed");
        std::fs::remove_file(d.join(".gitignore")).unwrap();
        let mut big = "*.o\n".to_owned();
        big.push_str(&"a".repeat(RULES_MAX as usize));
        std::fs::write(d.join(".gitignore"), big).unwrap();
        assert!(!ignores(d), "one over the limit is not read");
    }

    #[test]
    fn rejects_negated_patterns() {
        let tmp = tempfile::tempdir().unwrap();
        let err = ScanPlan::new(
            tmp.path(),
            Path::new(""),
            &["!keep".into()],
            Vec::new(),
            Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("negations"), "{err}");
    }
}
