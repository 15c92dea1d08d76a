//! Finding the project: like git, walk up from the working directory to the
//! nearest folder that holds `.modix/`; `--project DIR` skips the walk.

use std::path::{Path, PathBuf};

/// Name of the per-project configuration folder.
pub const MODIX_DIR: &str = ".modix";

/// Where a project lives: its root and its `.modix/` folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPaths {
    pub root: PathBuf,
    pub modix_dir: PathBuf,
}

impl ProjectPaths {
    pub fn at(root: &Path) -> Self {
        ProjectPaths {
            root: root.to_path_buf(),
            modix_dir: root.join(MODIX_DIR),
        }
    }

    /// A file inside `.modix/`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.modix_dir.join(name)
    }

    /// The run database.
    pub fn db(&self) -> PathBuf {
        self.modix_dir.join(crate::store::DB_FILE)
    }

    /// The folder holding one run's files (context package, schemas, workspace copy).
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.modix_dir.join("runs").join(run_id)
    }

    /// How a file inside `.modix/` is named in messages: `.modix/<name>`.
    pub fn shown(&self, name: &str) -> String {
        shown(name)
    }

    /// How to show a path inside the project to the user: relative to the root
    /// when it is inside, as given otherwise.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// How a file inside `.modix/` is named in messages: `.modix/<name>`.
pub fn shown(name: &str) -> String {
    format!("{MODIX_DIR}/{name}")
}

/// The project for `explicit` (from `--project`), or the nearest one above `start`.
/// `None` when there is none.
pub fn find_project(explicit: Option<&Path>, start: &Path) -> Option<ProjectPaths> {
    if let Some(dir) = explicit {
        let root = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            start.join(dir)
        };
        return root
            .join(MODIX_DIR)
            .is_dir()
            .then(|| ProjectPaths::at(&root));
    }
    start
        .ancestors()
        .find(|dir| dir.join(MODIX_DIR).is_dir())
        .map(ProjectPaths::at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_up_to_the_nearest_project() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".modix")).unwrap();
        let deep = tmp.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(
            find_project(None, &deep).unwrap().root,
            tmp.path().to_path_buf()
        );
        assert!(find_project(Some(Path::new("a")), tmp.path()).is_none());
    }
}
