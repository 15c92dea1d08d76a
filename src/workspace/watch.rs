//! The scan plan's paths under an inotify watch: when the kernel reports
//! nothing since the last snapshot, the fast path skips its stats altogether
//! (one `read` that finds the queue empty, where a stat of every file cost
//! ~0.4 µs each). Any report at all only sends the fast path on to the stat
//! comparison, which stays the judge of what changed.
//!
//! What makes "no report" a proof that nothing git would record changed:
//!
//! - every file of the plan is watched as an inode, not only through its
//!   folder, so a write through a hard link or another mount of the same
//!   filesystem is reported too; every folder (and the nearest existing
//!   folder of a path that does not exist yet, such as a ref git may write)
//!   reports names made, removed or renamed in it;
//! - a write through a shared `mmap` makes no report of its own, but the
//!   mapping needs the file opened for writing, and the kernel reports its
//!   opening and, once the last descriptor and mapping are gone, its closing.
//!   A file opened and not closed again is taken as changing (its writer may
//!   still be writing) until it is closed: the stats decide meanwhile.
//!   Every process an agent started has exited before a settle, so the
//!   closings of its files are queued by then;
//! - a full queue (`IN_Q_OVERFLOW`) loses reports, so the watch gives up for
//!   the rest of the run and every settle stats;
//! - only local filesystems whose changes all pass through this kernel are
//!   trusted (ext2/3/4, XFS, Btrfs, tmpfs): on a network filesystem, FUSE or
//!   an overlay, a change can arrive without passing through the watched
//!   inode, and every settle stats as before.
//!
//! What it cannot see: a writable mapping made before the watch was set,
//! by a process still alive (nothing modix started: its agents are gone by
//! then), writing later.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify, WatchDescriptor};

/// At most this many watches per plan, and at most a quarter of the user's
/// limit (`max_user_watches`, shared with every editor and tool watching
/// files): a bigger tree is statted as before.
const MAX_WATCHES: usize = 65_536;

/// A watch over a plan's paths.
#[derive(Debug)]
pub(crate) struct Watch {
    inotify: Inotify,
    /// Opens less closes reported for each watched file.
    open: HashMap<WatchDescriptor, i64>,
    /// Something was reported since the last verified snapshot.
    dirty: bool,
}

impl Watch {
    /// A watch over `files` and `dirs`; `None` when the kernel refuses one or
    /// a path is on a filesystem whose changes it may not see.
    pub(crate) fn new(files: &[PathBuf], dirs: &[PathBuf]) -> Option<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mut watch = Watch {
            inotify,
            open: HashMap::new(),
            dirty: false,
        };
        watch.add(files, dirs).then_some(watch)
    }

    /// Watches `files` and `dirs` (again: a path whose inode changed gets
    /// its new one). False when one could not be watched, or the tree has
    /// grown past what one plan may take.
    pub(crate) fn add(&mut self, files: &[PathBuf], dirs: &[PathBuf]) -> bool {
        if files.len() + 2 * dirs.len() > budget() {
            return false;
        }
        let mut folders: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        for f in files {
            match self.inotify.add_watch(f.as_path(), file_mask()) {
                Ok(wd) => {
                    self.open.entry(wd).or_insert(0);
                }
                // Not there (yet): its folder reports its making.
                Err(Errno::ENOENT | Errno::ENOTDIR) => {}
                Err(_) => return false,
            }
            if let Some(parent) = f.parent() {
                folders.push(parent);
            }
        }
        folders.sort_unstable();
        folders.dedup();
        let mut devices = Vec::new();
        for d in folders {
            let Some((d, dev)) = existing_ancestor(d) else {
                return false;
            };
            if !devices.contains(&dev) {
                if !trusted_filesystem(d) {
                    return false;
                }
                devices.push(dev);
            }
            if self.inotify.add_watch(d, dir_mask()).is_err() {
                return false;
            }
        }
        true
    }

    /// Reads what was reported. False when the watch can no longer be
    /// trusted (reports were lost, or the queue cannot be read).
    pub(crate) fn drain(&mut self) -> bool {
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return true,
                Err(Errno::EINTR) => continue,
                Err(_) => return false,
            };
            for e in events {
                if e.mask.contains(F::IN_Q_OVERFLOW) {
                    return false;
                }
                self.note(e.wd, e.mask);
            }
        }
    }

    fn note(&mut self, wd: WatchDescriptor, mask: F) {
        // A folder's own watch reports no openings (see `dir_mask`): those
        // come from a file's watch, once each.
        if let Some(n) = self.open.get_mut(&wd) {
            if mask.contains(F::IN_OPEN) {
                *n += 1;
            }
            if mask.intersects(F::IN_CLOSE) {
                *n -= 1;
            }
        }
        // Its watch gone with the inode: the removal was reported already.
        if mask.contains(F::IN_IGNORED) {
            self.open.remove(&wd);
        }
        let quiet = F::IN_OPEN | F::IN_CLOSE_NOWRITE | F::IN_IGNORED | F::IN_ISDIR;
        if !(mask - quiet).is_empty() {
            self.dirty = true;
        }
    }

    /// Whether nothing was reported since the last [`Watch::verified`], and
    /// no watched file is open now.
    pub(crate) fn quiet(&self) -> bool {
        !self.dirty && self.open.values().all(|&n| n <= 0)
    }

    /// The tree was found as the snapshot says (after a [`Watch::drain`]):
    /// only what is reported from now on can change that.
    pub(crate) fn verified(&mut self) {
        self.dirty = false;
    }
}

/// A file: anything that changes its content or its stat, and its openings
/// and closings (see the module's doc).
fn file_mask() -> F {
    F::IN_MODIFY
        | F::IN_ATTRIB
        | F::IN_OPEN
        | F::IN_CLOSE_WRITE
        | F::IN_CLOSE_NOWRITE
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF
        | F::IN_DONT_FOLLOW
}

/// A folder: names made, removed or renamed in it, the folder itself, and
/// writes to any file in it (also to files not watched as inodes, such as
/// a new one's).
fn dir_mask() -> F {
    F::IN_CREATE
        | F::IN_DELETE
        | F::IN_MOVED_FROM
        | F::IN_MOVED_TO
        | F::IN_MODIFY
        | F::IN_ATTRIB
        | F::IN_CLOSE_WRITE
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF
        | F::IN_DONT_FOLLOW
}

/// `dir`, or its nearest folder that exists (where `dir` would be made),
/// and its device.
fn existing_ancestor(dir: &Path) -> Option<(&Path, u64)> {
    dir.ancestors().find_map(|d| {
        let st = nix::sys::stat::lstat(d).ok()?;
        (st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR).then_some((d, st.st_dev))
    })
}

/// Whether every change to a file of this filesystem passes through this
/// kernel's inodes, where inotify sees it.
fn trusted_filesystem(dir: &Path) -> bool {
    use nix::sys::statfs::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    let Ok(fs) = nix::sys::statfs::statfs(dir) else {
        return false;
    };
    let kind = fs.filesystem_type();
    // EXT4_SUPER_MAGIC is ext2's and ext3's too.
    [
        EXT4_SUPER_MAGIC,
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        TMPFS_MAGIC,
    ]
    .contains(&kind)
}

/// How many watches one plan may take.
fn budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let limit =
            crate::fsutil::read_small(Path::new("/proc/sys/fs/inotify/max_user_watches"), 64)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(8192);
        (limit / 4).min(MAX_WATCHES)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;

    /// A tree of two files in `src/` and one at the top, watched, with
    /// whatever setting it up reported read away.
    fn watched() -> Option<(tempfile::TempDir, Watch, Vec<PathBuf>)> {
        let tmp = trusted_tmp()?;
        let root = tmp.path().join("tree");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let files: Vec<PathBuf> = ["src/a.py", "src/b.py", "README"]
            .iter()
            .map(|f| root.join(f))
            .collect();
        for f in &files {
            std::fs::write(f, "print(1)\n").unwrap();
        }
        let dirs = vec![root.clone(), root.join("src")];
        let mut w = Watch::new(&files, &dirs).expect("ext4 or tmpfs is trusted");
        assert!(w.drain());
        w.verified();
        assert!(w.quiet());
        Some((tmp, w, files))
    }

    /// A temp dir on a filesystem the watch trusts; none (said on stderr)
    /// where the tests' temp dir is elsewhere (an overlay in a container).
    pub(crate) fn trusted_tmp() -> Option<tempfile::TempDir> {
        let tmp = tempfile::tempdir().unwrap();
        if trusted_filesystem(tmp.path()) {
            return Some(tmp);
        }
        eprintln!(
            "SKIPPED: {} is not on a filesystem the watch trusts",
            tmp.path().display()
        );
        None
    }

    /// Reads reports until no watched file is open. A process another
    /// test spawns holds a copy of this one's descriptors until its `exec`,
    /// and a file's close is reported when the last copy goes: after a
    /// test's own close, that report may come a moment later.
    fn settle(w: &mut Watch) {
        let waited = std::time::Instant::now();
        loop {
            assert!(w.drain(), "no report was lost");
            if w.open.values().all(|&n| n <= 0) {
                return;
            }
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(5),
                "a watched file stays open"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn reported(w: &mut Watch) -> bool {
        assert!(w.drain(), "no report was lost");
        !w.quiet()
    }

    /// Sets a file's mtime back, as an agent hiding an edit would.
    fn set_mtime(path: &Path, like: &std::fs::Metadata) {
        let t = std::fs::FileTimes::new().set_modified(like.modified().unwrap());
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_times(t)
            .unwrap();
    }

    #[test]
    fn reading_files_and_listing_folders_is_quiet() {
        let Some((_tmp, mut w, files)) = watched() else {
            return;
        };
        for f in &files {
            let _ = std::fs::read(f).unwrap();
            let _ = std::fs::metadata(f).unwrap();
        }
        let _ = std::fs::read_dir(files[0].parent().unwrap())
            .unwrap()
            .count();
        // Held open as the scan holds files (O_PATH), and let go.
        let held = nix::fcntl::open(
            &files[0],
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let _ = nix::sys::stat::fstat(&held).unwrap();
        drop(held);
        // A program run from the tree: its file opened to execute, then closed.
        std::fs::set_permissions(&files[2], std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(reported(&mut w), "a mode change is a change");
        w.verified();
        std::fs::write(&files[2], "#!/bin/sh\nexit 0\n").unwrap();
        settle(&mut w);
        assert!(reported(&mut w));
        w.verified();
        assert!(
            std::process::Command::new(&files[2])
                .status()
                .unwrap()
                .success()
        );
        assert!(
            !reported(&mut w),
            "reads, stats, listings and runs change nothing"
        );
    }

    #[test]
    fn an_edit_with_its_size_and_mtime_put_back_is_reported() {
        let Some((_tmp, mut w, files)) = watched() else {
            return;
        };
        let before = std::fs::metadata(&files[0]).unwrap();
        std::fs::write(&files[0], "print(2)\n").unwrap();
        set_mtime(&files[0], &before);
        assert!(reported(&mut w));
    }

    #[test]
    fn an_edit_through_a_hard_link_outside_the_tree_is_reported() {
        let Some((tmp, mut w, files)) = watched() else {
            return;
        };
        let outside = tmp.path().join("elsewhere");
        std::fs::hard_link(&files[1], &outside).unwrap();
        // The link itself changed the inode (its link count).
        assert!(reported(&mut w));
        w.verified();
        let before = std::fs::metadata(&files[1]).unwrap();
        std::fs::write(&outside, "print(3)\n").unwrap();
        set_mtime(&outside, &before);
        assert!(reported(&mut w), "written by its other name");
        assert_eq!(std::fs::read(&files[1]).unwrap(), b"print(3)\n");
    }

    #[test]
    fn a_write_through_a_shared_mapping_is_reported_by_its_opening() {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
        let Some((_tmp, mut w, files)) = watched() else {
            return;
        };
        let before = std::fs::metadata(&files[0]).unwrap();
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&files[0])
            .unwrap();
        let len = std::num::NonZeroUsize::new(before.len() as usize).unwrap();
        // SAFETY: a fresh shared mapping of a file this test owns, written
        // within its length and unmapped before the file is read again.
        unsafe {
            let p = mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &file,
                0,
            )
            .unwrap();
            drop(file);
            // The descriptor is closed, the mapping still open: the file is
            // still taken as changing.
            assert!(reported(&mut w), "open for writing");
            p.cast::<u8>().add(6).as_ptr().write(b'7');
            munmap(p, len.get()).unwrap();
        }
        set_mtime(&files[0], &before);
        assert!(reported(&mut w), "closed after writing");
        assert_eq!(std::fs::read(&files[0]).unwrap(), b"print(7)\n");
    }

    #[test]
    fn a_file_left_open_for_writing_stays_reported_until_closed() {
        let Some((_tmp, mut w, files)) = watched() else {
            return;
        };
        let mut f = std::fs::File::options()
            .append(true)
            .open(&files[2])
            .unwrap();
        assert!(reported(&mut w));
        w.verified();
        assert!(reported(&mut w), "still open: its writer may still write");
        f.write_all(b"# more\n").unwrap();
        drop(f);
        settle(&mut w);
        assert!(reported(&mut w));
        w.verified();
        assert!(!reported(&mut w), "closed, and nothing since");
    }

    #[test]
    fn names_made_removed_or_renamed_are_reported() {
        let Some((tmp, mut w, files)) = watched() else {
            return;
        };
        let src = files[0].parent().unwrap().to_path_buf();
        let cases: Vec<Box<dyn Fn()>> = vec![
            Box::new(|| std::fs::write(src.join("new.py"), "x").unwrap()),
            Box::new(|| std::fs::create_dir(src.join("pkg")).unwrap()),
            Box::new(|| std::fs::remove_file(src.join("new.py")).unwrap()),
            // A sibling renamed over a file, the same content and mtime.
            Box::new(|| std::fs::rename(&files[1], &files[0]).unwrap()),
            // The folder moved out, a copy put in its place.
            Box::new(|| {
                std::fs::rename(&src, tmp.path().join("moved")).unwrap();
                std::fs::create_dir(&src).unwrap();
                std::fs::write(src.join("a.py"), "print(1)\n").unwrap();
            }),
        ];
        for (i, change) in cases.iter().enumerate() {
            change();
            assert!(reported(&mut w), "case {i}");
            w.verified();
        }
    }

    #[test]
    fn a_ref_not_written_yet_is_watched_through_its_nearest_folder() {
        let Some(tmp) = trusted_tmp() else { return };
        let missing = tmp.path().join("refs/heads/modix/run");
        let mut w = Watch::new(std::slice::from_ref(&missing), &[]).unwrap();
        std::fs::create_dir_all(missing.parent().unwrap()).unwrap();
        assert!(reported(&mut w));
    }

    #[test]
    fn lost_reports_give_the_watch_up() {
        let Some((_tmp, mut w, files)) = watched() else {
            return;
        };
        // Two files in turns, so that no report merges with the one before.
        let mut a = std::fs::File::options()
            .append(true)
            .open(&files[0])
            .unwrap();
        let mut b = std::fs::File::options()
            .append(true)
            .open(&files[1])
            .unwrap();
        for _ in 0..20_000 {
            a.write_all(b"a").unwrap();
            b.write_all(b"b").unwrap();
        }
        assert!(!w.drain(), "the queue overflowed");
    }

    #[test]
    fn a_filesystem_that_may_change_behind_the_kernel_is_not_watched() {
        let proc_dir = PathBuf::from("/proc/self");
        assert!(Watch::new(&[], std::slice::from_ref(&proc_dir)).is_none());
        let Some(tmp) = trusted_tmp() else { return };
        assert!(Watch::new(&[], &[tmp.path().to_path_buf()]).is_some());
    }
}
