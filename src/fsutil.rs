//! Small file-system helpers: files written atomically (derived files,
//! config, `state.json`), small files read in few system calls (`/proc`,
//! the workspace's `.git` link), and a path's stat remembered to tell that
//! it has not changed since ([`Seen`]).

use std::io::Write;
use std::path::Path;

/// A small file's text, read in as few system calls as a file allows: open,
/// one read into a 4 KiB buffer (more only for a longer file), the read
/// that finds its end, close. `std::fs::read_to_string` first stats the file
/// for its size, which `/proc` files report as 0, and then reads them 32,
/// 32, 64, 128… bytes at a time: nine calls for `/proc/<pid>/stat`, read
/// at every agent step, where this makes four. Invalid UTF-8 is an error,
/// and so is a file longer than `max` bytes (read no further: an agent can
/// put anything where such a file is expected).
pub fn read_small(path: &Path, max: usize) -> std::io::Result<String> {
    String::from_utf8(read_small_bytes(path, max)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// [`read_small`] without the UTF-8 check.
pub fn read_small_bytes(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // Non-blocking: a FIFO put where a file is expected (an agent's `.git`)
    // opens at once and reads as empty, instead of waiting for a writer
    // forever; a regular file or `/proc` reads as without the flag.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    // Read on the stack first: a 4 KiB heap buffer is a "large" request to
    // glibc's malloc, which then consolidates its free lists — at every step.
    let mut first = [0u8; 4096];
    let cap = first.len().min(max + 1);
    let len = fill(&mut file, &mut first[..cap])?;
    let mut buf = first[..len].to_vec();
    if len == cap {
        // Full: the file may go on (or be exactly `cap` long).
        loop {
            if buf.len() > max {
                let why = format!("{} is longer than {max} bytes", path.display());
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
            }
            let at = buf.len();
            let want = (at * 2).min(max + 1);
            buf.resize(want, 0);
            let n = fill(&mut file, &mut buf[at..])?;
            buf.truncate(at + n);
            if at + n < want {
                break; // the file ended before the buffer filled
            }
        }
    }
    Ok(buf)
}

/// Reads into `buf` until it is full or the file ends; how many bytes.
/// A loop of plain reads: `File::read_to_end` stats and seeks the file first
/// to size its buffer.
fn fill(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}

/// Replaces `path` with `bytes` atomically (a temp file in the same folder,
/// then a rename): readers see the old or the new file, never half of one.
/// Not flushed to disk: for derived files that SQLite's record can rebuild.
pub fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write(path, bytes, false)
}

/// [`write_replace`], and flushed to disk before the rename, so a power loss
/// never leaves an empty file: for files the user owns (config).
pub fn write_durable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write(path, bytes, true)
}

/// Replaces `path`'s content atomically for readers, as [`write_replace`]
/// does, without making (and later freeing) a file per write: the bytes go
/// into `spare` — a file of the caller's own, on the same file system — and
/// the two names are then exchanged (`renameat2(RENAME_EXCHANGE)`), so that
/// `spare` holds the previous content until the next write reuses it. A new
/// file costs the file system an inode allocated and one freed; rewriting
/// `state.json` after every step that way was a tenth of modix's own CPU
/// per step. Where names cannot be exchanged, [`write_replace`].
pub fn write_swap(path: &Path, spare: &Path, bytes: &[u8]) -> std::io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        // Private, as the temp file of `write_replace` is.
        let write_spare = || {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(spare)?;
            file.write_all(bytes)?;
            file.set_len(bytes.len() as u64)
        };
        if let Err(e) = write_spare() {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
            std::fs::create_dir_all(spare.parent().unwrap_or_else(|| Path::new(".")))?;
            write_spare()?;
        }
        match renameat2(
            AT_FDCWD,
            spare,
            AT_FDCWD,
            path,
            RenameFlags::RENAME_EXCHANGE,
        ) {
            Ok(()) => return Ok(()),
            // No `path` yet: the spare becomes it (the next write makes a
            // new spare, once).
            Err(Errno::ENOENT) => return std::fs::rename(spare, path),
            // Not supported here (an old kernel, some file systems).
            Err(_) => {}
        }
    }
    let _ = spare;
    write_replace(path, bytes)
}

fn write(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if sync {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// What a path's `lstat` said, remembered to tell without reading it again
/// that nothing was made in, removed from or written to it since: any such
/// change sets its ctime to the kernel's clock, which no process can set
/// back (`utimes` sets the ctime to now too). Remembered only once that
/// time is older than the filesystem's timestamp tick ([`Seen::settled`]):
/// a change in the same tick could leave every field as it was, as git's
/// "racy" index entries can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// A window wider than any Linux filesystem's timestamp tick (the kernel's
/// coarse clock, at most 10 ms): a change within it of a time taken may
/// carry that very time ("racy", as git says).
pub const RACY_FINE: std::time::Duration = std::time::Duration::from_millis(50);
/// For filesystems that store whole seconds (FAT: 2 s).
pub const RACY_COARSE: std::time::Duration = std::time::Duration::from_secs(2);

impl Seen {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Seen {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// This stat, if it is safe to remember as of `checked` (a time taken
    /// before the path was read): its last change lies a whole tick before
    /// then, so any change after the read gets a later ctime.
    pub fn settled(self, checked: std::time::SystemTime) -> Option<Self> {
        let whole_seconds = self.mtime.1 == 0 && self.ctime.1 == 0;
        let tick = if whole_seconds {
            RACY_COARSE
        } else {
            RACY_FINE
        };
        let at = |(s, ns): (i64, i64)| {
            std::time::UNIX_EPOCH
                + std::time::Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32)
        };
        let latest = at(self.mtime).max(at(self.ctime));
        (latest + tick < checked).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat is remembered only once its last change is a tick old, and
    /// tells a change of ctime alone (the mtime put back) from no change.
    #[test]
    fn a_fifo_reads_as_empty_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("fifo");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(read_small(&p, 100).unwrap(), "");
    }

    #[test]
    fn a_stat_is_remembered_once_settled_and_tells_a_ctime_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "a").unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let seen = Seen::of(&meta);
        let now = std::time::SystemTime::now();
        assert_eq!(seen.settled(now), None, "a stat of this moment");
        let later = now + std::time::Duration::from_secs(3);
        assert_eq!(seen.settled(later), Some(seen));
        // Past the coarse clock's tick (at most 10 ms), which a kernel
        // without fine-grained ctimes stamps both changes with.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(meta.modified().unwrap()).unwrap();
        let again = Seen::of(&std::fs::symlink_metadata(&path).unwrap());
        assert_ne!(again, seen, "the ctime moved");
    }

    #[test]
    fn read_small_reads_proc_files_and_files_up_to_its_limit() {
        let stat = read_small(Path::new("/proc/self/stat"), 4096).unwrap();
        assert!(stat.starts_with(&format!("{} (", std::process::id())));
        let dir = tempfile::tempdir().unwrap();
        let long: String = (0..3000).map(|i| format!("{i} ")).collect();
        let p = dir.path().join("long");
        std::fs::write(&p, &long).unwrap();
        assert!(long.len() > 8192);
        assert_eq!(read_small(&p, long.len()).unwrap(), long);
        let err = read_small(&p, long.len() - 1).unwrap_err();
        assert!(err.to_string().contains("is longer than"), "{err}");
        assert!(read_small(&p, 100).is_err());
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_small(&p, 4096).is_err(), "not UTF-8");
    }

    #[test]
    fn read_small_reads_every_length_around_its_buffers_edges() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for len in [0, 1, 4095, 4096, 4097, 8191, 8192, 8193, 20_000] {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            std::fs::write(&p, &text).unwrap();
            for max in [len, len + 1, 4096, 8192, 1 << 20] {
                let got = read_small(&p, max);
                if len <= max {
                    assert_eq!(got.unwrap(), text, "len {len}, max {max}");
                } else {
                    assert!(got.is_err(), "len {len}, max {max}");
                }
            }
            if len > 0 {
                assert!(read_small(&p, len - 1).is_err(), "len {len}");
            }
        }
    }

    #[test]
    fn write_swap_replaces_the_content_and_keeps_the_old_one_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (path, spare) = (dir.path().join("state.json"), dir.path().join("run/spare"));
        write_swap(&path, &spare, b"first, and long").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first, and long");
        write_swap(&path, &spare, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        write_swap(&path, &spare, b"third").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert_eq!(std::fs::read(&spare).unwrap(), b"second");
        // Two writers with spares of their own never tear each other's file.
        let other = dir.path().join("run/other");
        write_swap(&path, &other, b"from the other run").unwrap();
        write_swap(&path, &spare, b"fourth").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"fourth");
    }
}
