//! The files of one run under `.modix/runs/<run>/`.

use std::path::PathBuf;

use super::*;

/// The file of a run's folder naming the tree an interrupted agent left in
/// place (see [`RunFiles::left_in_place`]).
pub(super) const LEFT_IN_PLACE: &str = "left-in-place";

/// The files of one run under `.modix/runs/<run>/`: the schemas its agents
/// answer to (written once, when the run starts) and the context package
/// the agent about to start reads.
pub(super) struct RunFiles {
    /// `.modix/runs/<run>/`.
    pub(super) dir: PathBuf,
}

impl RunFiles {
    pub(super) fn create(
        project: &Project,
        run_id: &str,
        workflow: &Workflow,
    ) -> Result<Self, RunError> {
        let dir = project.config.paths.run_dir(run_id);
        let files = RunFiles { dir };
        let schemas = files.dir.join("schemas");
        std::fs::create_dir_all(&schemas)
            .map_err(|e| RunError::io(format!("cannot create {}", schemas.display()), e))?;
        let write = |path: PathBuf, text: &str| {
            write_replace(&path, text.as_bytes())
                .map_err(|e| RunError::io(format!("cannot write {}", path.display()), e))
        };
        for (_, state) in workflow.machine.states() {
            let Some(a) = state.agent() else { continue };
            let text = project
                .schemas
                .text(&a.output)
                .map_err(|e| RunError::Internal(e.to_string()))?;
            write(files.schema(&a.output), text)?;
            // The form strict structured-output APIs take (Codex's
            // --output-schema): every property required, optional ones nullable.
            if let Some(strict) = project.schemas.strict(&a.output) {
                let text = serde_json::to_string_pretty(&strict).unwrap_or_default() + "\n";
                write(files.strict_schema(&a.output), &text)?;
            }
        }
        Ok(files)
    }

    /// The in-flight note of an invocation now on record (best effort: a
    /// stale note is recognised by its seq anyway).
    pub(super) fn forget_in_flight(&self) {
        let _ = std::fs::remove_file(inflight::InFlight::path(&self.dir));
    }

    /// In place, the tree the agent of an interrupted step left
    /// ([`super::work::Work::note_left_in_place`]).
    pub(super) fn left_in_place(&self) -> PathBuf {
        self.dir.join(LEFT_IN_PLACE)
    }

    pub(super) fn schema(&self, id: &str) -> PathBuf {
        self.dir.join("schemas").join(format!("{id}.schema.json"))
    }

    pub(super) fn strict_schema(&self, id: &str) -> PathBuf {
        self.dir
            .join("schemas")
            .join(format!("{id}.strict.schema.json"))
    }

    pub(super) fn context(&self) -> PathBuf {
        self.dir.join("context.json")
    }

    /// One file per run, rewritten in place: only the agent about to start
    /// reads it, and each invocation's context is also kept in the store.
    pub(super) fn write_context(&self, text: &str) -> Result<(), RunError> {
        let path = self.context();
        invoke::overwrite(&path, text.as_bytes())
            .map_err(|e| RunError::io(format!("cannot write {}", path.display()), e))
    }
}
