//! Files a config file names by path (a manifest file, a prompt template):
//! confined to the project's `.modix/` folder and checked to be a readable
//! regular file before anything reads them.
//!
//! A path is resolved the way the operating system will open it — symlinks
//! followed — and must stay inside `.modix/` (itself resolved): an absolute
//! path, a `..` that climbs out, or a symlink inside `.modix/` that points
//! elsewhere is refused without reading the file, so neither a prompt nor an
//! error message can carry another file's contents. A directory, a FIFO (whose
//! read would block), a symlink loop or a permission problem is named as such.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use crate::diagnostics::line_column;

/// Why a named file cannot be used.
#[derive(Debug)]
pub enum PathProblem {
    Empty,
    Absolute,
    /// `..` climbs out of `.modix/`.
    Climbs,
    /// Resolved (through symlinks) to a place outside `.modix/`.
    Outside(PathBuf),
    Missing,
    SymlinkLoop,
    /// A part of the path is a file, not a folder.
    NotADirectory,
    /// A directory, FIFO, socket or device: what it is.
    NotAFile(&'static str),
    Unreadable(std::io::Error),
    TooLarge(u64),
    /// Not UTF-8 text: where the first bad byte is (1-based line, column).
    NotUtf8(usize, usize),
}

impl PathProblem {
    pub fn code(&self) -> &'static str {
        match self {
            PathProblem::Absolute | PathProblem::Climbs | PathProblem::Outside(_) => {
                "config::outside-project"
            }
            PathProblem::Empty | PathProblem::Missing => "config::missing-file",
            PathProblem::SymlinkLoop => "config::symlink-loop",
            PathProblem::NotADirectory | PathProblem::NotAFile(_) => "config::not-a-file",
            PathProblem::Unreadable(_) => "config::unreadable",
            PathProblem::TooLarge(_) => "config::too-large",
            PathProblem::NotUtf8(..) => "config::not-utf8",
        }
    }

    /// What is wrong with `what` (e.g. "prompt template `.modix/x.md`").
    pub fn message(&self, what: &str) -> String {
        match self {
            PathProblem::Empty => format!("{what}: the path is empty"),
            PathProblem::Absolute => format!(
                "{what} is an absolute path; paths are relative to .modix/ and stay inside it"
            ),
            PathProblem::Climbs => {
                format!("{what} leaves the project's .modix/ folder (`..`); it was not read")
            }
            PathProblem::Outside(to) => format!(
                "{what} resolves to {}, outside the project's .modix/ folder (through a symlink); it was not read",
                to.display()
            ),
            PathProblem::Missing => format!("{what} does not exist"),
            PathProblem::SymlinkLoop => {
                format!("{what} is a symlink loop (it never resolves to a file)")
            }
            PathProblem::NotADirectory => {
                format!("{what}: a part of the path is a file, not a folder")
            }
            PathProblem::NotAFile(kind) => format!("{what} is {kind}, not a file"),
            PathProblem::Unreadable(e) => format!("{what} cannot be read: {e}"),
            PathProblem::TooLarge(max) => format!("{what} is larger than {max} bytes"),
            PathProblem::NotUtf8(line, col) => {
                format!(
                    "{what} is not UTF-8 text: the first invalid byte is at line {line}, column {col}"
                )
            }
        }
    }

    pub fn help(&self) -> &'static str {
        match self {
            PathProblem::Empty | PathProblem::Missing => {
                "create the file, or fix the path (relative to .modix/)"
            }
            PathProblem::Absolute | PathProblem::Climbs => {
                "put the file inside .modix/ (e.g. .modix/prompts/) and name it relative to .modix/"
            }
            PathProblem::Outside(_) => {
                "replace the symlink with a copy of the file: a project's files stay inside its .modix/ folder"
            }
            PathProblem::SymlinkLoop => {
                "point the symlink at a real file, or replace it with the file"
            }
            PathProblem::NotADirectory | PathProblem::NotAFile(_) => {
                "name a regular file (relative to .modix/)"
            }
            PathProblem::Unreadable(_) => {
                "make the file readable by the user running modix (chmod u+r)"
            }
            PathProblem::TooLarge(_) => {
                "keep prompt templates short; move long material into the project's files"
            }
            PathProblem::NotUtf8(..) => "save the file as UTF-8 text",
        }
    }
}

/// A file modix reads from its own place in `.modix/` (`rel`: a config
/// file, an FSM file) that resolves, through a symlink, outside it: the
/// error saying it was not read — a syntax error would quote its text.
/// `None` when it stays inside, or cannot be resolved (its reader says why).
pub fn symlinked_out(
    modix_dir: &Path,
    rel: &str,
    display: &str,
    what: &str,
) -> Option<crate::diagnostics::Diagnostic> {
    match resolve(modix_dir, rel) {
        Err(p @ PathProblem::Outside(_)) => Some(
            crate::diagnostics::Diagnostic::error(p.code(), display, p.message(what))
                .with_help(p.help()),
        ),
        _ => None,
    }
}

/// A file named in a config file, resolved inside `.modix/`.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The real path, symlinks followed.
    pub path: PathBuf,
    /// The same, relative to the (resolved) `.modix/` folder.
    pub inside: PathBuf,
}

impl Resolved {
    /// How messages name it: `.modix/<inside>`.
    pub fn shown(&self) -> String {
        super::discover::shown(&self.inside.display().to_string())
    }
}

/// Resolves `rel` (as written in a config file, relative to `modix_dir`)
/// to a regular file inside `modix_dir`, symlinks followed.
pub fn resolve(modix_dir: &Path, rel: &str) -> Result<Resolved, PathProblem> {
    if rel.trim().is_empty() {
        return Err(PathProblem::Empty);
    }
    let written = Path::new(rel);
    if written.is_absolute() {
        return Err(PathProblem::Absolute);
    }
    // Refused before touching the file system: nothing outside is looked at.
    let mut depth = 0usize;
    for c in written.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir if depth == 0 => return Err(PathProblem::Climbs),
            Component::ParentDir => depth -= 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(PathProblem::Absolute),
        }
    }
    let real = std::fs::canonicalize(modix_dir.join(written)).map_err(os_problem)?;
    let root = std::fs::canonicalize(modix_dir).unwrap_or_else(|_| modix_dir.to_path_buf());
    let Ok(inside) = real.strip_prefix(&root).map(Path::to_path_buf) else {
        return Err(PathProblem::Outside(real));
    };
    let meta = std::fs::metadata(&real).map_err(os_problem)?;
    match kind_of(&meta.file_type()) {
        None => Ok(Resolved { path: real, inside }),
        Some(kind) => Err(PathProblem::NotAFile(kind)),
    }
}

/// What a non-regular file is, for messages; `None` for a regular file.
pub(crate) fn kind_of(t: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

fn os_problem(e: std::io::Error) -> PathProblem {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw) {
        _ if e.kind() == std::io::ErrorKind::NotFound => PathProblem::Missing,
        Some(Errno::ELOOP) => PathProblem::SymlinkLoop,
        Some(Errno::ENOTDIR) => PathProblem::NotADirectory,
        _ => PathProblem::Unreadable(e),
    }
}

/// Reads a file [`resolve`] accepted as UTF-8 text of at most `max` bytes.
pub fn read_text(path: &Path, max: u64) -> Result<String, PathProblem> {
    let file = std::fs::File::open(path).map_err(os_problem)?;
    // Checked again on the open file: it may have been swapped since.
    let meta = file.metadata().map_err(os_problem)?;
    if let Some(kind) = kind_of(&meta.file_type()) {
        return Err(PathProblem::NotAFile(kind));
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(os_problem)?;
    if bytes.len() as u64 > max {
        return Err(PathProblem::TooLarge(max));
    }
    String::from_utf8(bytes)
        .map(super::source::without_bom)
        .map_err(|e| {
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            let prefix = String::from_utf8_lossy(&bytes[..valid]);
            let (line, col) = line_column(&prefix, valid);
            PathProblem::NotUtf8(line, col)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_modix() {
        let tmp = tempfile::tempdir().unwrap();
        let modix = tmp.path().join(".modix");
        std::fs::create_dir_all(modix.join("prompts")).unwrap();
        std::fs::write(modix.join("prompts/a.md"), "a").unwrap();
        std::fs::write(tmp.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink("../../secret", modix.join("prompts/link.md")).unwrap();
        std::os::unix::fs::symlink("loop.md", modix.join("loop.md")).unwrap();
        assert!(resolve(&modix, "prompts/a.md").is_ok());
        assert!(resolve(&modix, "./prompts/../prompts/a.md").is_ok());
        let code = |rel: &str| resolve(&modix, rel).err().map(|p| p.code());
        assert_eq!(code("../secret"), Some("config::outside-project"));
        assert_eq!(code("/etc/passwd"), Some("config::outside-project"));
        assert_eq!(
            code("prompts/../../secret"),
            Some("config::outside-project")
        );
        assert_eq!(code("prompts/link.md"), Some("config::outside-project"));
        assert_eq!(code("loop.md"), Some("config::symlink-loop"));
        assert_eq!(code("prompts"), Some("config::not-a-file"));
        assert_eq!(code("prompts/a.md/x"), Some("config::not-a-file"));
        assert_eq!(code("nope.md"), Some("config::missing-file"));
        assert_eq!(code(""), Some("config::missing-file"));
    }

    #[test]
    fn reads_utf8_within_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("t");
        std::fs::write(&p, b"ok\nab\xffc").unwrap();
        assert!(matches!(
            read_text(&p, 100),
            Err(PathProblem::NotUtf8(2, 3))
        ));
        std::fs::write(&p, "0123456789").unwrap();
        assert!(matches!(read_text(&p, 5), Err(PathProblem::TooLarge(5))));
        assert_eq!(read_text(&p, 10).unwrap(), "0123456789");
    }
}
