//! Path patterns of `projects.json` (`protected`, `scope.always`, `ignore`)
//! and of a TaskSpec's `files`: gitignore-like globs relative to the
//! project folder, compiled once with one set of rules, and checked when
//! the project loads so a broken one is reported with its place.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::source::SourceFile;
use crate::diagnostics::{Diagnostic, Diagnostics};

/// Patterns where `*` stays within one folder, `**` crosses folders, and a
/// folder's name (or `dir/`) covers everything under it.
#[derive(Debug, Clone)]
pub struct PathPatterns(GlobSet);

impl PathPatterns {
    /// `lenient`: a pattern that does not parse matches itself literally
    /// (for text from an agent, which must not stop the run).
    pub fn new<'a>(
        patterns: impl IntoIterator<Item = &'a str>,
        lenient: bool,
    ) -> Result<PathPatterns, globset::Error> {
        let mut set = GlobSetBuilder::new();
        for raw in patterns {
            let p = raw.trim().trim_start_matches("./").trim_end_matches('/');
            if p.is_empty() {
                continue;
            }
            for form in [p.to_owned(), format!("{p}/**")] {
                let glob = match GlobBuilder::new(&form).literal_separator(true).build() {
                    Ok(g) => g,
                    Err(_) if lenient => GlobBuilder::new(&globset::escape(&form))
                        .literal_separator(true)
                        .build()?,
                    Err(e) => return Err(e),
                };
                set.add(glob);
            }
        }
        Ok(PathPatterns(set.build()?))
    }

    pub fn matches(&self, path: &str) -> bool {
        self.0.is_match(path)
    }
}

/// Reports every pattern of `projects.json` that does not compile.
pub fn check_project(file: &SourceFile, value: &Value, diags: &mut Diagnostics) {
    for (pointer, list) in [
        ("/protected", value.get("protected")),
        ("/scope/always", value.pointer("/scope/always")),
        ("/ignore", value.get("ignore")),
    ] {
        let Some(items) = list.and_then(Value::as_array) else {
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            let Some(p) = item.as_str() else { continue };
            if let Err(e) = PathPatterns::new([p], false) {
                let at = format!("{pointer}/{i}");
                let d = Diagnostic::error(
                    "config::glob",
                    &file.display,
                    format!("`{p}` is not a valid path pattern: {}", e.kind()),
                )
                .with_pointer(&at)
                .with_help(
                    "use gitignore-style globs: `*` within a folder, `**` across folders, \
                     `dir/` for a whole folder; escape a literal `[` as `[[]`",
                );
                diags.push(file.point(d, &at, false));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_follow_gitignore_like_rules() {
        let p = PathPatterns::new(["calc.py", "src/", "lib", "docs/*.md"], false).unwrap();
        assert!(p.matches("calc.py"));
        assert!(!p.matches("sub/calc.py"));
        assert!(p.matches("src/a/b.rs"));
        assert!(p.matches("lib/x.py"));
        assert!(p.matches("docs/a.md"));
        assert!(!p.matches("docs/deep/a.md"));
        assert!(!p.matches("calc.pyc"));
        assert!(PathPatterns::new(["a[.py"], false).is_err());
        assert!(PathPatterns::new(["a[.py"], true).unwrap().matches("a[.py"));
    }
}
