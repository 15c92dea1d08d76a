//! What every command that takes a RUN shares: `last`, `last~N` and id
//! prefixes resolved to a run; the status people should see (a run whose
//! process is gone is not running); short ids and times for tables.

use std::collections::HashMap;

use super::output::{Output, Tone};
use crate::error::Error;
use crate::store::{Run, RunStatus, Store, StoreError};
use crate::text;

/// Tables show at least this many characters of a run id (like git's short hashes).
const SHORT_ID: usize = 8;

/// `last` → 0, `last~` → 1, `last~N` → N: how many runs back from the newest.
fn newest_offset(reference: &str) -> Option<usize> {
    match reference.trim().strip_prefix("last")? {
        "" => Some(0),
        "~" => Some(1),
        rest => rest.strip_prefix('~')?.parse().ok(),
    }
}

/// The run `reference` names: `last`, `last~N`, or an id prefix.
pub fn resolve(store: &Store, reference: &str) -> Result<Run, Error> {
    let run = resolve_ref(store, reference)?;
    crate::error::about_run(&run.id);
    Ok(run)
}

fn resolve_ref(store: &Store, reference: &str) -> Result<Run, Error> {
    let Some(back) = newest_offset(reference) else {
        return Ok(store.run(reference)?);
    };
    let mut newest = store.runs(back.saturating_add(1))?;
    if newest.len() > back {
        return Ok(newest.swap_remove(back).run);
    }
    Err(match newest.len() {
        0 => StoreError::UnknownRun {
            prefix: reference.to_owned(),
        }
        .into(),
        n => Error::usage(
            format!(
                "there is no run `{reference}`: only {} recorded",
                text::plural(n, "run")
            ),
            format!("`last~{}` is the oldest", n - 1),
        ),
    })
}

/// The project's run database opened read-only, and run `reference` in it
/// (an unknown run when there is no database yet).
pub fn find(paths: &crate::config::ProjectPaths, reference: &str) -> Result<(Store, Run), Error> {
    find_with(paths, reference, Store::open_read_only)
}

/// [`find`] with the database open for writing (`stop`, `pending add`):
/// a project without runs is told so, and gets no empty database.
pub fn find_writable(
    paths: &crate::config::ProjectPaths,
    reference: &str,
) -> Result<(Store, Run), Error> {
    find_with(paths, reference, Store::open)
}

fn find_with(
    paths: &crate::config::ProjectPaths,
    reference: &str,
    open: impl FnOnce(&std::path::Path) -> Result<Store, StoreError>,
) -> Result<(Store, Run), Error> {
    let db = paths.db();
    if !db.exists() {
        return Err(StoreError::UnknownRun {
            prefix: reference.to_owned(),
        }
        .into());
    }
    let store = open(&db)?;
    let run = resolve(&store, reference)?;
    Ok((store, run))
}

/// A run's status as people should see it.
pub struct Status {
    /// The word the store uses, corrected: `interrupted` for a run whose owner is gone.
    pub status: RunStatus,
    /// `interrupted (owner gone)`, `succeeded`, …
    pub label: String,
    pub tone: Tone,
    pub owner_gone: bool,
}

pub fn status(run: &Run) -> Status {
    let owner_gone = run.owner_gone();
    let status = if owner_gone {
        RunStatus::Interrupted
    } else {
        run.status
    };
    let label = if owner_gone {
        "interrupted (owner gone)".to_owned()
    } else {
        status.as_str().to_owned()
    };
    Status {
        status,
        label,
        tone: status_tone(status),
        owner_gone,
    }
}

pub fn status_tone(status: RunStatus) -> Tone {
    match status {
        RunStatus::Succeeded => Tone::Good,
        RunStatus::Failed => Tone::Bad,
        RunStatus::Interrupted | RunStatus::Stopped | RunStatus::Waiting => Tone::Warn,
        RunStatus::Running => Tone::Plain,
    }
}

/// A run as `--json` shows it: the stored record, with the status corrected
/// as [`status`] does (`owner_gone` says when it was).
pub fn run_json(run: &Run) -> serde_json::Value {
    let mut v = serde_json::to_value(run).unwrap_or_default();
    let s = status(run);
    if s.owner_gone {
        v["status"] = s.status.as_str().into();
        v["status_reason"] = owner_gone_reason(run).into();
    }
    v["owner_gone"] = s.owner_gone.into();
    v
}

/// How long the run took (or has taken so far, while a live process
/// drives it) in ms. A run whose process died ends at its last sign of
/// life: its last update or heartbeat, whichever is later.
pub fn duration(run: &Run) -> Option<u64> {
    if run.status == RunStatus::Running && !run.owner_gone() {
        let now = format!("{:.3}", jiff::Timestamp::now());
        return crate::store::millis_between(&run.created_at, &now);
    }
    let last = run
        .heartbeat_at
        .as_ref()
        .filter(|h| **h > run.updated_at)
        .unwrap_or(&run.updated_at);
    crate::store::millis_between(&run.created_at, run.ended_at.as_ref().unwrap_or(last))
}

pub fn owner_gone_reason(run: &Run) -> String {
    match run.owner_pid {
        Some(pid) => format!("owner gone: process {pid} is no longer running"),
        None => "owner gone: no process claimed the run".to_owned(),
    }
}

/// The shortest prefix of each run id shown, at least [`SHORT_ID`] long,
/// that no other run shares (so what a table shows can be typed back).
pub struct ShortIds(HashMap<String, usize>);

impl ShortIds {
    /// For the ids a table shows: each needs only its neighbours in id
    /// order (the ids sharing the longest prefix with it), two seeks in the
    /// primary key, not every id of the store.
    pub fn load<'a>(
        store: &Store,
        shown: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, Error> {
        let mut map = HashMap::new();
        for id in shown {
            let (before, after) = store.run_id_neighbours(id)?;
            let len = short_len(id, [before.as_deref(), after.as_deref()]);
            map.insert(id.to_owned(), len);
        }
        Ok(ShortIds(map))
    }

    pub fn of<'a>(&self, id: &'a str) -> &'a str {
        let len = self.0.get(id).copied().unwrap_or(SHORT_ID).min(id.len());
        &id[..len]
    }
}

/// The length of `id`'s shortest unambiguous prefix, at least [`SHORT_ID`],
/// given its neighbours in sorted order (no other id shares more of it).
fn short_len(id: &str, neighbours: [Option<&str>; 2]) -> usize {
    let common = |other: &str| {
        id.bytes()
            .zip(other.bytes())
            .take_while(|(x, y)| x == y)
            .count()
    };
    let shared = neighbours.into_iter().flatten().map(common).max();
    (shared.unwrap_or(0) + 1).max(SHORT_ID).min(id.len())
}

/// A run's id in a table: short on a terminal, whole when piped.
pub fn id_cell(out: &Output, ids: &ShortIds, id: &str) -> String {
    if out.tty {
        ids.of(id).to_owned()
    } else {
        id.to_owned()
    }
}

/// A stored time in a table: how long ago on a terminal, RFC 3339 UTC (as
/// stored) when piped.
pub fn when_cell(out: &Output, stored: &str) -> String {
    match (out.tty, stored.parse::<jiff::Timestamp>()) {
        (true, Ok(ts)) => text::ago(ts, jiff::Timestamp::now()),
        _ => stored.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_and_its_ancestors() {
        assert_eq!(newest_offset("last"), Some(0));
        assert_eq!(newest_offset("last~"), Some(1));
        assert_eq!(newest_offset("last~3"), Some(3));
        assert_eq!(newest_offset("last~x"), None);
        assert_eq!(newest_offset("01ABC"), None);
    }

    #[test]
    fn short_ids_grow_until_unique() {
        let (a11, a12, b00) = ("01AAAAAAAA11", "01AAAAAAAA12", "01BBBBBBBB00");
        assert_eq!(short_len(a11, [None, Some(a12)]), a11.len());
        assert_eq!(short_len(a12, [Some(a11), Some(b00)]), a12.len());
        assert_eq!(short_len(b00, [Some(a12), None]), SHORT_ID);
        assert_eq!(short_len("01AB", [None, None]), 4);
    }
}
