//! What a run used, summed over its invocations' recorded usage (each as
//! its CLI reported it): what `go`'s summary and `history` show, and what
//! the run's budget is checked against.

use rusqlite::params;
use serde::Serialize;

use super::{Ctx, Store, StoreError};

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

impl RunUsage {
    fn add(&mut self, more: &RunUsage) {
        self.input_tokens = self.input_tokens.saturating_add(more.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(more.output_tokens);
        self.turns = self.turns.saturating_add(more.turns);
        self.invocations += more.invocations;
        self.priced += more.priced;
        self.cost_usd = match (self.cost_usd, more.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// A run's usage kept current by reading only the invocations recorded
/// since the last read, so checking a budget before every attempt does not
/// cost more the longer the run gets.
#[derive(Debug)]
pub struct UsageTally {
    run_id: String,
    /// Invocations up to this `n` are counted.
    counted: u32,
    total: RunUsage,
}

impl Store {
    /// The sum of every recorded invocation's usage in run `run_id` (the
    /// attempts its states retried included: they were paid for too).
    pub fn run_usage(&self, run_id: &str) -> Result<RunUsage, StoreError> {
        self.usage_after(run_id, 0).map(|(usage, _)| usage)
    }

    /// A tally of run `run_id`'s usage, nothing counted yet.
    pub fn usage_tally(&self, run_id: &str) -> UsageTally {
        UsageTally {
            run_id: run_id.to_owned(),
            counted: 0,
            total: RunUsage::default(),
        }
    }

    /// The run's usage so far: the tally with the invocations recorded
    /// since it was last brought up to date added.
    pub fn tally_usage(&self, tally: &mut UsageTally) -> Result<RunUsage, StoreError> {
        let (more, last) = self.usage_after(&tally.run_id, tally.counted)?;
        tally.total.add(&more);
        tally.counted = tally.counted.max(last);
        Ok(tally.total.clone())
    }

    /// The usage of the run's invocations after number `after` (a range of
    /// its primary key), and the last invocation number seen.
    fn usage_after(&self, run_id: &str, after: u32) -> Result<(RunUsage, u32), StoreError> {
        let sql = "SELECT count(usage), count(json_extract(usage, '$.cost_usd')), \
             coalesce(sum(json_extract(usage, '$.input_tokens')), 0), \
             coalesce(sum(json_extract(usage, '$.output_tokens')), 0), \
             total(json_extract(usage, '$.cost_usd')), \
             coalesce(sum(json_extract(usage, '$.turns')), 0), coalesce(max(n), 0) \
             FROM invocations WHERE run_id = ?1 AND n > ?2";
        let whole = |n: i64| u64::try_from(n).unwrap_or(0);
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.query_row(params![run_id, after], |row| {
                    let priced: u32 = row.get(1)?;
                    let usage = RunUsage {
                        invocations: row.get(0)?,
                        priced,
                        input_tokens: whole(row.get(2)?),
                        output_tokens: whole(row.get(3)?),
                        cost_usd: (priced > 0).then_some(row.get::<_, f64>(4)?),
                        turns: whole(row.get(5)?),
                    };
                    Ok((usage, row.get(6)?))
                })
            })
            .ctx(self, "summing a run's usage")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::NewInvocation;
    use super::super::tests::{new_invocation, new_run, step};
    use super::*;

    #[test]
    fn sums_what_the_invocations_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join(super::super::DB_FILE)).unwrap();
        let run = store.create_run(&new_run()).unwrap();
        assert_eq!(store.run_usage(&run.id).unwrap(), RunUsage::default());
        let usages = [
            Some(
                json!({"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.25, "turns": 3, "model": "m"}),
            ),
            None,
            Some(json!({"input_tokens": 50, "output_tokens": 5})),
        ];
        let mut tally = store.usage_tally(&run.id);
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
            tallied.push(store.tally_usage(&mut tally).unwrap());
            at = to;
        }
        // The tally, brought up to date after each step, agrees with the
        // sum at each point.
        assert_eq!(tallied[0].cost_usd, Some(0.25));
        assert_eq!(tallied[1], tallied[0]);
        assert_eq!(tallied[2], store.run_usage(&run.id).unwrap());
        assert_eq!(store.tally_usage(&mut tally).unwrap(), tallied[2]);
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
        // Another run's usage is its own.
        let other = store.create_run(&new_run()).unwrap();
        assert_eq!(store.run_usage(&other.id).unwrap().invocations, 0);
    }
}
