//! What a run used, summed over its invocations' recorded usage (each as
//! its CLI reported it): what `go`'s summary and `history` show, and what
//! the run's budget is checked against.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::{Ctx, Store, StoreError, Writer};

/// A run's usage so far. Counts only what the CLIs reported: an invocation
/// whose CLI says nothing (a plain command, Aider) adds nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when no invocation reported a cost (Codex and Gemini report
    /// tokens only).
    pub cost_usd: Option<f64>,
    pub turns: u64,
    /// How many invocations reported usage, and how many of them a cost.
    pub invocations: u32,
    pub priced: u32,
}

impl RunUsage {
    /// Tokens in and out together (what `budget.max_tokens` bounds).
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The run's usage columns (`runs.usage_*`, since store v12), in the order
/// [`TALLY`] yields them.
const COLUMNS: &str = "usage_invocations, usage_priced, usage_input_tokens, \
     usage_output_tokens, usage_cost_usd, usage_turns";

/// The sum of the usage of the invocations of run `runs.id`, as [`COLUMNS`]:
/// what the columns hold, for a run whose invocations were written before
/// them (migration, fork). The same arithmetic as [`Writer::add_usage`].
const TALLY: &str = "SELECT count(usage), count(json_extract(usage, '$.cost_usd')), \
     coalesce(sum(CAST(json_extract(usage, '$.input_tokens') AS INTEGER)), 0), \
     coalesce(sum(CAST(json_extract(usage, '$.output_tokens') AS INTEGER)), 0), \
     total(json_extract(usage, '$.cost_usd')), \
     coalesce(sum(CAST(json_extract(usage, '$.turns') AS INTEGER)), 0) \
     FROM invocations WHERE run_id = runs.id";

impl Writer<'_> {
    /// Adds one invocation's recorded usage (its JSON as stored) to its
    /// run's totals, in the invocation's transaction: the totals are always
    /// the sum of the run's invocations, and reading them is one row.
    pub(super) fn add_usage(&self, run_id: &str, usage: &str) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "UPDATE runs SET usage_invocations = usage_invocations + 1, \
                 usage_priced = usage_priced + (json_extract(?2, '$.cost_usd') IS NOT NULL), \
                 usage_input_tokens = usage_input_tokens \
                   + coalesce(CAST(json_extract(?2, '$.input_tokens') AS INTEGER), 0), \
                 usage_output_tokens = usage_output_tokens \
                   + coalesce(CAST(json_extract(?2, '$.output_tokens') AS INTEGER), 0), \
                 usage_cost_usd = usage_cost_usd \
                   + coalesce(json_extract(?2, '$.cost_usd'), 0), \
                 usage_turns = usage_turns \
                   + coalesce(CAST(json_extract(?2, '$.turns') AS INTEGER), 0) \
                 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![run_id, usage]))
            .ctx(self.path, "adding an invocation's usage to its run")?;
        Ok(())
    }

    /// Sets the usage totals of run `run_id` (every run when `None`) to the
    /// sum of its invocations'.
    pub(super) fn retally_usage(&self, run_id: Option<&str>) -> Result<(), StoreError> {
        self.tx
            .execute(
                &format!("UPDATE runs SET ({COLUMNS}) = ({TALLY}) WHERE ?1 IS NULL OR id = ?1"),
                [run_id],
            )
            .ctx(self.path, "summing runs' usage")?;
        Ok(())
    }
}

impl Store {
    /// The sum of every recorded invocation's usage in run `run_id` (the
    /// attempts its states retried included: they were paid for too): its
    /// run's totals, one row.
    pub fn run_usage(&self, run_id: &str) -> Result<RunUsage, StoreError> {
        self.conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"))
            .and_then(|mut s| s.query_row(params![run_id], usage_from_row).optional())
            .ctx(self, "reading a run's usage")
            .map(Option::unwrap_or_default)
    }
}

/// A run's usage from a row of [`COLUMNS`] (or of [`TALLY`]).
fn usage_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunUsage> {
    let whole = |n: i64| u64::try_from(n).unwrap_or(0);
    let priced: u32 = row.get(1)?;
    Ok(RunUsage {
        invocations: row.get(0)?,
        priced,
        input_tokens: whole(row.get(2)?),
        output_tokens: whole(row.get(3)?),
        cost_usd: (priced > 0).then_some(row.get::<_, f64>(4)?),
        turns: whole(row.get(5)?),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::NewInvocation;
    use super::super::tests::{new_invocation, new_run, step};
    use super::*;

    /// The run's usage summed over its invocations, as the columns' first
    /// filling does: what the totals must equal.
    fn summed(store: &Store, run_id: &str) -> RunUsage {
        let sql = TALLY.replace("runs.id", "?1");
        store
            .conn
            .query_row(&sql, [run_id], usage_from_row)
            .unwrap()
    }

    #[test]
    fn sums_what_the_invocations_reported() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(super::super::DB_FILE);
        let mut store = Store::open(&db).unwrap();
        let run = store.create_run(&new_run()).unwrap();
        assert_eq!(store.run_usage(&run.id).unwrap(), RunUsage::default());
        let usages = [
            Some(
                json!({"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.25, "turns": 3, "model": "m"}),
            ),
            None,
            Some(json!({"input_tokens": 50, "output_tokens": 5})),
        ];
        let mut tallied = Vec::new();
        let mut at = "plan".to_owned();
        for (i, usage) in usages.into_iter().enumerate() {
            let to = format!("s{i}");
            let mut s = step(&at, "e", &to);
            s.invocation = Some(NewInvocation {
                usage,
                ..new_invocation()
            });
            store.record_step(&run.id, &s).unwrap();
            // The totals kept by each step agree with the sum at each point.
            tallied.push(store.run_usage(&run.id).unwrap());
            assert_eq!(tallied[i], summed(&store, &run.id));
            at = to;
        }
        assert_eq!(tallied[0].cost_usd, Some(0.25));
        assert_eq!(tallied[1], tallied[0]);
        let u = store.run_usage(&run.id).unwrap();
        assert_eq!(
            u,
            RunUsage {
                input_tokens: 150,
                output_tokens: 15,
                cost_usd: Some(0.25),
                turns: 3,
                invocations: 2,
                priced: 1,
            }
        );
        assert_eq!(u.tokens(), 165);
        // An abandoned attempt was paid for too.
        let abandoned = NewInvocation {
            usage: Some(json!({"input_tokens": 1, "cost_usd": 0.5})),
            ..new_invocation()
        };
        store.record_abandoned(&run.id, &abandoned).unwrap();
        let u = store.run_usage(&run.id).unwrap();
        assert_eq!((u.input_tokens, u.cost_usd, u.priced), (151, Some(0.75), 2));
        assert_eq!(u, summed(&store, &run.id));
        // Another run's usage is its own; a fork's is what it copied.
        let other = store.create_run(&new_run()).unwrap();
        assert_eq!(store.run_usage(&other.id).unwrap().invocations, 0);
        let fork = store.fork_run(&run.id, 1, &new_run(), None).unwrap();
        assert_eq!(store.run_usage(&fork.id).unwrap(), tallied[0]);
        // A store from before the totals gets them summed when it opens.
        store
            .conn
            .execute_batch(
                "ALTER TABLE runs DROP COLUMN usage_invocations; \
                 ALTER TABLE runs DROP COLUMN usage_priced; \
                 ALTER TABLE runs DROP COLUMN usage_input_tokens; \
                 ALTER TABLE runs DROP COLUMN usage_output_tokens; \
                 ALTER TABLE runs DROP COLUMN usage_cost_usd; \
                 ALTER TABLE runs DROP COLUMN usage_turns; PRAGMA user_version = 11;",
            )
            .unwrap();
        drop(store);
        let store = Store::open(&db).unwrap();
        assert_eq!(store.run_usage(&run.id).unwrap(), u);
        assert_eq!(store.run_usage(&fork.id).unwrap(), tallied[0]);
    }
}
