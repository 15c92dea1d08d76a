//! Runs: creating one, finding one by id prefix, listing them newest first,
//! changing their status, and claiming one for execution so two processes
//! never drive the same run.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use super::{Ctx, RunStatus, Store, StoreError, millis_between, now, to_i64};
use crate::shell::process_start_ticks;

/// At most this many ids are listed in [`StoreError::Ambiguous`].
pub const MAX_CANDIDATES: usize = 10;

/// What the caller knows when a run starts.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub epic: String,
    pub workflow_id: String,
    pub workflow_version: String,
    /// Hash of the workflow definition, to notice it changed before a resume.
    pub workflow_hash: String,
    pub initial_state: String,
    pub workdir: String,
    /// The id to use (from [`Store::new_run_id`], so a workspace named after
    /// it can exist before the run does); `None`: a fresh one.
    pub id: Option<String>,
    /// How to find the run's workspace again (see `workspace::WorkspaceRecord`).
    pub workspace: Option<Value>,
    /// What `go` changed for this run (`project::Overrides`), for `resume`.
    pub overrides: Option<Value>,
}

/// One row of `runs`. Serialised with the field names every `--json`
/// output shares (`run_id`, `state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    #[serde(rename = "run_id")]
    pub id: String,
    pub epic: String,
    pub workflow_id: String,
    pub workflow_version: String,
    pub workflow_hash: String,
    pub status: RunStatus,
    /// Why the status was last set by hand (e.g. "interrupted by Ctrl-C").
    pub status_reason: Option<String>,
    #[serde(rename = "state")]
    pub current_state: String,
    pub workdir: String,
    pub created_at: String,
    pub updated_at: String,
    pub ended_at: Option<String>,
    /// Process that claimed the run for execution, if it has not released it.
    pub owner_pid: Option<u32>,
    pub heartbeat_at: Option<String>,
    /// How to find the run's workspace again, as last recorded with a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Value>,
    /// The run and step it was forked from (`run_id`, `seq`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<Value>,
    /// What `go` changed for the run on its command line (`brains`,
    /// `models`: agent and name; `env`: variable names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Value>,
}

impl Run {
    /// The run says it is running, but no live process drives it: its
    /// owner was killed (or never claimed it). It resumes like an
    /// interrupted run.
    pub fn owner_gone(&self) -> bool {
        self.status == RunStatus::Running && !self.owner_pid.is_some_and(process_alive)
    }
}

/// A run as listed by [`Store::runs`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    #[serde(flatten)]
    pub run: Run,
    pub transitions: u32,
    pub invocations: u32,
    /// Creation to end (or to the last update while unfinished).
    pub duration_ms: Option<u64>,
}

const RUN_COLUMNS: &str = "id, epic, workflow_id, workflow_version, workflow_hash, status, \
     status_reason, current_state, workdir, created_at, updated_at, ended_at, owner_pid, \
     heartbeat_at, workspace, forked_from, overrides";

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        epic: row.get(1)?,
        workflow_id: row.get(2)?,
        workflow_version: row.get(3)?,
        workflow_hash: row.get(4)?,
        status: row.get(5)?,
        status_reason: row.get(6)?,
        current_state: row.get(7)?,
        workdir: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        ended_at: row.get(11)?,
        owner_pid: row.get(12)?,
        heartbeat_at: row.get(13)?,
        workspace: json_opt(row, 14)?,
        forked_from: json_opt(row, 15)?,
        overrides: json_opt(row, 16)?,
    })
}

/// An optional JSON column.
fn json_opt(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Value>> {
    match row.get::<_, Option<String>>(i)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        }),
    }
}

/// Whether process `pid` exists. `kill(pid, 0)` sends nothing; EPERM means
/// it exists but belongs to someone else. Pid 0 and pids beyond `i32` would
/// address process groups or nothing, so they count as dead.
///
/// After a crash the pid may be reused by an unrelated process: callers that
/// recorded the process's start time use [`owner_alive`] instead.
pub(crate) fn process_alive(pid: u32) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    match i32::try_from(pid) {
        Ok(raw) if raw > 0 => matches!(kill(Pid::from_raw(raw), None), Ok(()) | Err(Errno::EPERM)),
        _ => false,
    }
}

/// Refuses to change run `seen.id` unless it is as the caller saw it: no
/// live process but `me` holds it ([`StoreError::Busy`]), and its status
/// and state have not moved since ([`StoreError::Changed`]).
fn as_seen(
    tx: &rusqlite::Connection,
    path: &std::path::Path,
    seen: &Run,
    me: Option<u32>,
) -> Result<(), StoreError> {
    type Row = (RunStatus, String, String, Option<u32>, Option<i64>);
    let row: Option<Row> = tx
        .query_row(
            "SELECT status, current_state, updated_at, owner_pid, owner_started \
             FROM runs WHERE id = ?1",
            [&seen.id],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )
        .optional()
        .ctx(path, "reading a run's owner")?;
    let Some((status, state, updated_at, owner, owner_started)) = row else {
        return Err(StoreError::NotFound {
            path: path.to_path_buf(),
            what: format!("run {}", seen.id),
        });
    };
    if let Some(pid) = owner
        && Some(pid) != me
        && owner_alive(pid, owner_started.and_then(|t| u64::try_from(t).ok()))
    {
        return Err(StoreError::Busy {
            path: path.to_path_buf(),
            run_id: seen.id.clone(),
            pid,
        });
    }
    let now = (status, state.as_str(), updated_at.as_str());
    if now
        != (
            seen.status,
            seen.current_state.as_str(),
            seen.updated_at.as_str(),
        )
    {
        return Err(StoreError::Changed {
            run_id: seen.id.clone(),
            now: format!("{status} in {state}"),
        });
    }
    Ok(())
}

/// Sets a run's status in `w` (see [`Store::set_status`]).
fn update_status(
    w: &super::Writer<'_>,
    run_id: &str,
    status: RunStatus,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let changed =
        w.tx.execute(
            "UPDATE runs SET status = ?2, status_reason = ?3, updated_at = ?4, \
             ended_at = CASE WHEN ?5 THEN ?4 END, \
             owner_pid = CASE WHEN ?2 = 'running' THEN owner_pid END, \
             owner_started = CASE WHEN ?2 = 'running' THEN owner_started END, \
             heartbeat_at = CASE WHEN ?2 = 'running' THEN heartbeat_at END \
             WHERE id = ?1",
            params![
                run_id,
                status,
                reason.map(|r| w.text(r)),
                now(),
                status.is_terminal()
            ],
        )
        .ctx(w.path, "setting a run's status")?;
    if changed == 0 {
        return Err(StoreError::NotFound {
            path: w.path.to_path_buf(),
            what: format!("run {run_id}"),
        });
    }
    Ok(())
}

/// Whether the process that claimed a run is still the one running as
/// `pid`: alive, and (when its start time was recorded) started then.
pub(crate) fn owner_alive(pid: u32, started: Option<u64>) -> bool {
    process_alive(pid)
        && match (started, process_start_ticks(pid)) {
            (Some(then), Some(now)) => then == now,
            _ => true,
        }
}

impl Store {
    /// A new run id: a ULID, so ids sort by creation time.
    pub fn new_run_id() -> String {
        ulid::Ulid::from_datetime(std::time::SystemTime::now()).to_string()
    }

    /// Create a run in `initial_state` with status Running.
    pub fn create_run(&mut self, run: &NewRun) -> Result<Run, StoreError> {
        let w = self.write_tx()?;
        let (tx, path) = (&w.tx, w.path);
        // One clock read, so the id's time part and created_at agree.
        let ts = jiff::Timestamp::now();
        let at = format!("{ts:.3}");
        let id = match &run.id {
            Some(id) => id.clone(),
            None => ulid::Ulid::from_datetime(ts.into()).to_string(),
        };
        // Modix's own paths and commit ids: stored as they are (redacting
        // a path that happened to contain a secret would lose the workspace).
        let workspace = run.workspace.as_ref().map(Value::to_string);
        let overrides = run.overrides.as_ref().map(|o| w.json(o)).transpose()?;
        tx.execute(
            "INSERT INTO runs (id, epic, workflow_id, workflow_version, workflow_hash, status, \
             current_state, workdir, created_at, updated_at, workspace, overrides) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11)",
            params![
                id,
                w.text(&run.epic),
                run.workflow_id,
                run.workflow_version,
                run.workflow_hash,
                RunStatus::Running,
                run.initial_state,
                run.workdir,
                at,
                workspace,
                overrides,
            ],
        )
        .ctx(path, "creating a run")?;
        let created = tx
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
                [&id],
                run_from_row,
            )
            .ctx(path, "reading the new run")?;
        w.commit("committing the new run")?;
        Ok(created)
    }

    /// The run whose id is `id_or_prefix` or starts with it (case-insensitive),
    /// like git's abbreviated commit ids — or, failing that, ends with it (at
    /// least 4 characters): the short id of the run's branch `modix/<short>`.
    pub fn run(&self, id_or_prefix: &str) -> Result<Run, StoreError> {
        let prefix = id_or_prefix.trim().to_ascii_uppercase();
        // ULIDs are Crockford base32; anything else cannot match, and
        // refusing it here keeps GLOB metacharacters out of the pattern.
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(self.unknown_run(id_or_prefix));
        }
        let mut found = self.runs_with_prefix(&prefix)?;
        if found.is_empty() && prefix.len() >= 4 {
            // The short id in branch names (`modix/<short>`) is the id's end.
            found = self.runs_with_suffix(&prefix)?;
        }
        match found.len() {
            0 => Err(self.unknown_run(id_or_prefix)),
            1 => Ok(found.remove(0)),
            _ => {
                // An exact id wins even if it is also a prefix of another
                // (cannot happen with fixed-length ULIDs, but cheap to honour).
                if let Some(i) = found.iter().position(|r| r.id == prefix) {
                    return Ok(found.remove(i));
                }
                let mut candidates: Vec<String> = found.into_iter().map(|r| r.id).collect();
                candidates.truncate(MAX_CANDIDATES);
                Err(StoreError::Ambiguous {
                    path: self.path.clone(),
                    prefix: id_or_prefix.to_owned(),
                    candidates,
                })
            }
        }
    }

    /// Runs whose id starts with `prefix` (ASCII alphanumerics), newest
    /// first: one more than are shown, to know whether there are more. A
    /// range of the primary key, `prefix <= id < next`, where `next` is
    /// `prefix` with its last byte raised by one: exactly the ids that start
    /// with it, found by a seek (a `GLOB ?1 || '*'` reads every id, and
    /// SQLite's LIKE/GLOB optimisation is off under the planner stability
    /// guarantee; see `Store::keep_plans`).
    fn runs_with_prefix(&self, prefix: &str) -> Result<Vec<Run>, StoreError> {
        let mut next = prefix.as_bytes().to_vec();
        if let Some(last) = next.last_mut() {
            *last += 1;
        }
        let next = String::from_utf8(next).unwrap_or_default();
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE id >= ?1 AND id < ?2 \
                 ORDER BY id DESC LIMIT ?3"
            ))
            .ctx(self, "looking up a run")?;
        stmt.query_map(
            params![prefix, next, MAX_CANDIDATES as i64 + 1],
            run_from_row,
        )
        .and_then(|rows| rows.collect())
        .ctx(self, "looking up a run")
    }

    /// Runs whose id ends with `suffix`, newest first, as many as
    /// [`Store::runs_with_prefix`] returns. Every id is read, but from the
    /// primary key's index alone (ids only, a few MB for 100,000 runs),
    /// and only the matches' rows after it.
    fn runs_with_suffix(&self, suffix: &str) -> Result<Vec<Run>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE id IN \
                 (SELECT id FROM runs WHERE id GLOB '*' || ?1 ORDER BY id DESC LIMIT ?2) \
                 ORDER BY id DESC"
            ))
            .ctx(self, "looking up a run")?;
        stmt.query_map(params![suffix, MAX_CANDIDATES as i64 + 1], run_from_row)
            .and_then(|rows| rows.collect())
            .ctx(self, "looking up a run")
    }

    /// The `limit` newest runs, newest first.
    pub fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_matching(&[], None, Some(limit))
    }

    /// The newest runs first: only those in one of `statuses` (any when
    /// empty), created at or after `since` (RFC 3339, as stored), at most
    /// `limit` of them (all when `None`).
    pub fn runs_matching(
        &self,
        statuses: &[RunStatus],
        since: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<RunSummary>, StoreError> {
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        // How many steps and invocations: the last `seq` and `n`, one seek
        // in each primary key, since both run 1, 2, 3, … without gaps (a
        // forked run copies a prefix of both); `count(*)` read every row of
        // the index, a second for a run of 10 M steps.
        // Statuses are a closed set of identifiers, so they can be inlined.
        let status_clause = if statuses.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = statuses
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            format!("AND status IN ({})", list.join(", "))
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {RUN_COLUMNS}, \
                 (SELECT coalesce(max(seq), 0) FROM transitions t WHERE t.run_id = runs.id), \
                 (SELECT coalesce(max(n), 0) FROM invocations i WHERE i.run_id = runs.id) \
                 FROM runs WHERE (?1 IS NULL OR created_at >= ?1) {status_clause} \
                 ORDER BY id DESC LIMIT ?2"
            ))
            .ctx(self, "listing runs")?;
        stmt.query_map(params![since, limit], |row| {
            let run = run_from_row(row)?;
            let duration_ms = millis_between(
                &run.created_at,
                run.ended_at.as_ref().unwrap_or(&run.updated_at),
            );
            Ok(RunSummary {
                transitions: row.get(17)?,
                invocations: row.get(18)?,
                duration_ms,
                run,
            })
        })
        .and_then(|rows| rows.collect())
        .ctx(self, "listing runs")
    }

    /// How many runs are recorded.
    pub fn run_count(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM runs", [], |row| row.get(0))
            .ctx(self, "counting runs")
    }

    /// The ids just before and just after `id` in id order (whether or not
    /// `id` is recorded): all a shortest unambiguous prefix needs to know.
    pub fn run_id_neighbours(
        &self,
        id: &str,
    ) -> Result<(Option<String>, Option<String>), StoreError> {
        let one = |sql: &str| -> Result<Option<String>, StoreError> {
            self.conn
                .prepare_cached(sql)
                .and_then(|mut s| s.query_row([id], |row| row.get(0)).optional())
                .ctx(self, "reading neighbouring run ids")
        };
        Ok((
            one("SELECT id FROM runs WHERE id < ?1 ORDER BY id DESC LIMIT 1")?,
            one("SELECT id FROM runs WHERE id > ?1 ORDER BY id LIMIT 1")?,
        ))
    }

    /// Set a run's status by hand, e.g. Interrupted on Ctrl-C. Leaving
    /// Running releases the run's claim; a terminal status sets `ended_at`.
    pub fn set_status(
        &mut self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        update_status(&w, run_id, status, reason)?;
        w.commit("committing a run's status")
    }

    /// [`Store::set_status`] for a run no process holds (a person's
    /// `modix stop` of a run waiting at a gate), as the caller saw it:
    /// refused as [`Store::claim_run`] refuses, so a run someone has just
    /// begun to answer is never marked stopped (and let go) under them.
    pub fn set_status_as_seen(
        &mut self,
        seen: &Run,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        as_seen(&w.tx, w.path, seen, None)?;
        update_status(&w, &seen.id, status, reason)?;
        w.commit("committing a run's status")
    }

    /// Record where the run's agents work and how to find its workspace
    /// again (after a resume reopened it).
    pub fn set_workspace(
        &mut self,
        run_id: &str,
        workdir: &str,
        workspace: &Value,
    ) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        let (tx, path) = (&w.tx, w.path);
        let changed = tx
            .execute(
                "UPDATE runs SET workdir = ?2, workspace = ?3 WHERE id = ?1",
                params![run_id, workdir, workspace.to_string()],
            )
            .ctx(path, "setting a run's workdir")?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                path: path.to_path_buf(),
                what: format!("run {run_id}"),
            });
        }
        w.commit("committing a run's workdir")
    }

    /// Mark `owner_pid` as the process executing the run, which the caller
    /// checked as `seen` (answering its gate, resuming it). One write
    /// transaction compares and claims, so of two people answering the same
    /// gate (or resuming the same run) at once exactly one goes on:
    /// - [`StoreError::Busy`] while another live process holds the run,
    ///   whatever its status — a claim comes before the run says it is
    ///   running again, and taking it then would leave the run driven by a
    ///   process the record does not name (shown as "owner gone", its agent
    ///   stopped as a leftover);
    /// - [`StoreError::Changed`] when its status or state moved since the
    ///   caller looked (someone else answered, resumed or stopped it and is
    ///   done): what was checked no longer holds.
    ///
    /// A dead owner (killed with -9, say) is taken over.
    pub fn claim_run(&mut self, seen: &Run, owner_pid: u32) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        let (tx, path) = (&w.tx, w.path);
        let run_id = seen.id.as_str();
        as_seen(tx, path, seen, Some(owner_pid))?;
        let started = process_start_ticks(owner_pid).map(to_i64);
        tx.execute(
            "UPDATE runs SET owner_pid = ?2, owner_started = ?3, heartbeat_at = ?4 WHERE id = ?1",
            params![run_id, owner_pid, started, now()],
        )
        .ctx(path, "claiming a run")?;
        w.commit("committing a run claim")
    }

    /// Give up the claim taken by [`Store::claim_run`]; a no-op if
    /// `owner_pid` does not hold it (someone took over a run we lost).
    pub fn release_run(&mut self, run_id: &str, owner_pid: u32) -> Result<(), StoreError> {
        let w = self.write_tx()?;
        let (tx, path) = (&w.tx, w.path);
        tx.execute(
            "UPDATE runs SET owner_pid = NULL, owner_started = NULL, heartbeat_at = NULL \
             WHERE id = ?1 AND owner_pid = ?2",
            params![run_id, owner_pid],
        )
        .ctx(path, "releasing a run")?;
        w.commit("committing a run release")
    }
}
