//! What a run may spend, and what it did: each invocation's usage read
//! from its CLI's output, the run's budget (`runtimes.json` `budget`)
//! checked before every attempt and — for its deadline — while an agent
//! runs, and the worst case a workflow can cost, known before a run starts
//! (the pre-flight ceiling `go` and `fsm show` print).
//!
//! A spent budget is a failure of class `budget_exceeded` of the invocation
//! that would have run (it is recorded, never started) or that ran past the
//! deadline (it is stopped): its state's `catch` rule routes it (the shipped
//! workflow's catch sends it to FAILED). Without such a catch the state's
//! `process_error` emit rule applies, as to any permanent failure, and each
//! agent state the run reaches after that fails the same way without
//! running, until the workflow's bounds take the run to a terminal state.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::agent::{Failure, Verdict};
use super::invoke::Call;
use super::{RunError, RunInfo};
use crate::config::{Agent, Binding, Budget, Runtimes};
use crate::fsm::{AgentState, FailureClass};
use crate::project::{Project, Workflow};
use crate::shell::ProcessSpec;
use crate::store::{RunUsage, Store};

/// What an invocation's CLI reported it used (`None`: nothing, or not a
/// CLI), as recorded with the invocation.
pub(super) fn usage(call: &Call<'_>, stdout: &[u8]) -> Option<Value> {
    let shell = call.agent.binding.shell()?;
    let usage = crate::shell::parse_usage(&String::from_utf8_lossy(stdout), &shell.usage)?;
    serde_json::to_value(usage).ok()
}

/// The run's usage so far, for its report (`None` if the store cannot say).
pub(super) fn reported(store: &Store, run_id: &str) -> Option<RunUsage> {
    store
        .run_usage(run_id)
        .inspect_err(|e| tracing::warn!("cannot sum the run's usage: {e}"))
        .ok()
}

/// Why the run may not start another attempt — a budget it has spent —
/// or `None`. Cost and tokens are what the CLIs reported so far, asked of
/// `used` only when the budget bounds them.
pub(super) fn spent(
    info: &RunInfo<'_>,
    used: impl FnOnce() -> Result<RunUsage, crate::store::StoreError>,
) -> Result<Option<String>, RunError> {
    let budget = &info.project.config.runtimes.budget;
    if let (Some(max), Some(elapsed)) = (budget.max_run_secs, run_elapsed(&info.run.created_at))
        && elapsed >= Duration::from_secs(max)
    {
        return Ok(Some(format!(
            "the run's time is up: it started {} ago; budget.max_run_secs is {max} s",
            crate::text::duration(millis(elapsed))
        )));
    }
    if budget.max_cost_usd.is_none() && budget.max_tokens.is_none() {
        return Ok(None);
    }
    let used = used()?;
    if let (Some(max), Some(cost)) = (budget.max_cost_usd, used.cost_usd)
        && cost >= max
    {
        return Ok(Some(format!(
            "the run has spent {} (as its CLIs reported); budget.max_cost_usd is {}",
            usd(cost),
            usd(max)
        )));
    }
    if let Some(max) = budget.max_tokens
        && used.tokens() >= max
    {
        return Ok(Some(format!(
            "the run has used {} tokens (in and out, as its CLIs reported); budget.max_tokens is {max}",
            used.tokens()
        )));
    }
    Ok(None)
}

/// How long ago the run started (`None` if its start does not parse).
fn run_elapsed(created_at: &str) -> Option<Duration> {
    let start: jiff::Timestamp = created_at.parse().ok()?;
    let ms = jiff::Timestamp::now()
        .as_millisecond()
        .saturating_sub(start.as_millisecond());
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The run's deadline as it applies to one agent process: its wall-clock
/// limit is cut to the time the run has left, and a process stopped by that
/// cut failed with `budget_exceeded`, not `timeout`.
pub(super) struct Deadline {
    /// `budget.max_run_secs`, when the process's limit was cut to it.
    cut: Option<u64>,
}

impl Deadline {
    /// Cuts `spec`'s wall-clock limit to what the run has left.
    pub fn apply(info: &RunInfo<'_>, spec: &mut ProcessSpec) -> Deadline {
        let budget = &info.project.config.runtimes.budget;
        let left = budget.max_run_secs.and_then(|max| {
            let elapsed = run_elapsed(&info.run.created_at)?;
            Some((max, Duration::from_secs(max).saturating_sub(elapsed)))
        });
        match left {
            Some((max, left)) if left < spec.timeout => {
                spec.timeout = left;
                Deadline { cut: Some(max) }
            }
            _ => Deadline { cut: None },
        }
    }

    /// The verdict, with a timeout the deadline caused said as such.
    pub fn judge(&self, verdict: Verdict) -> Verdict {
        match (self.cut, &verdict) {
            (Some(max), Verdict::Failed(f)) if f.class == FailureClass::Timeout => {
                Verdict::Failed(Failure::new(
                    FailureClass::BudgetExceeded,
                    format!(
                        "stopped at the run's deadline (budget.max_run_secs is {max} s; {})",
                        f.reason
                    ),
                ))
            }
            _ => verdict,
        }
    }
}

/// `$0.0123`, `$0.05`, `$1.50`: cents, and below a dollar up to four decimals.
pub fn usd(x: f64) -> String {
    if x.abs() >= 1.0 {
        return format!("${x:.2}");
    }
    let mut s = format!("{x:.4}");
    while s.ends_with('0') && s.len() > s.find('.').map_or(0, |d| d + 3) {
        s.pop();
    }
    format!("${s}")
}

/// The most a run of a workflow can take, from its static bounds and the
/// project's real limits: before it starts (`go`) and on demand (`fsm show`).
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Most agent invocations, every retry included.
    pub invocations: u64,
    /// `false` when the figures are upper bounds rather than exact maxima.
    pub exact: bool,
    /// Longest wall time, human waits excluded: each invocation at its
    /// timeout plus the kill grace, and the longest retry waits.
    pub wall_secs: u64,
    /// The machine has human gates, whose waits are not counted.
    pub human_waits: bool,
    /// `budget.max_run_secs` (plus the kill grace), when it ends a run sooner.
    pub deadline_secs: Option<u64>,
    /// Most it can cost, where every agent that can cost has a
    /// per-invocation cap (`budget.invocation_max_cost_usd`, passed to
    /// shells that take `{max_budget_usd}`); plain commands cost nothing.
    pub cost_usd: Option<f64>,
    /// The agents whose invocations no cap bounds (why `cost_usd` is `None`).
    pub uncapped: Vec<String>,
}

/// The ceiling of `workflow` in `project`.
pub fn ceiling(project: &Project, workflow: &Workflow) -> Ceiling {
    let runtimes = &project.config.runtimes;
    let machine = &workflow.machine;
    let grace = Duration::from_secs(runtimes.timeouts.kill_grace_secs);
    let wall = machine.worst_wall_time(|state, spec| match workflow.agent(state) {
        Some(agent) => {
            worst_timeout(runtimes, agent, spec, &machine.state(state).name).saturating_add(grace)
        }
        None => Duration::ZERO,
    });
    let budget = &runtimes.budget;
    let mut cost = 0.0;
    let mut largest_cap = 0.0_f64;
    let mut uncapped: Vec<String> = Vec::new();
    for (id, _) in machine.states() {
        let (Some(agent), Some(n)) = (workflow.agent(id), machine.worst_invocations(id)) else {
            continue;
        };
        match cap(budget, agent) {
            Some(c) => {
                cost += c * n as f64;
                largest_cap = largest_cap.max(c);
            }
            None if !uncapped.contains(&agent.id) => uncapped.push(agent.id.clone()),
            None => {}
        }
    }
    // The run stops at its first attempt after spending max_cost_usd: at
    // most one invocation's cap past it.
    if let Some(max) = budget.max_cost_usd {
        cost = cost.min(max + largest_cap);
    }
    let wall_secs = wall.total.as_secs();
    let deadline_secs = budget
        .max_run_secs
        .map(|s| s.saturating_add(grace.as_secs()))
        .filter(|&s| s < wall_secs);
    let worst = machine.worst_case();
    Ceiling {
        invocations: worst.invocations,
        exact: worst.exact && wall.exact,
        wall_secs,
        human_waits: wall.human_waits,
        deadline_secs,
        cost_usd: uncapped.is_empty().then_some(cost),
        uncapped,
    }
}

/// The longest one invocation of `agent` in `state` may run: its timeout
/// as the run will choose it (`agent::timeout_for`), whatever complexity
/// the plan turns out to have.
fn worst_timeout(runtimes: &Runtimes, agent: &Agent, spec: &AgentState, name: &str) -> Duration {
    [None, Some("low"), Some("medium"), Some("high")]
        .into_iter()
        .map(|c| {
            let plan = c.map(|c| serde_json::json!({ "complexity": c }));
            super::agent::timeout_for(runtimes, agent, spec, name, plan.as_ref())
        })
        .max()
        .unwrap_or_default()
}

/// What one invocation of `agent` can cost at most: nothing for a plain
/// command, the per-invocation cap for a shell that is handed it, else
/// unbounded (`None`).
fn cap(budget: &Budget, agent: &Agent) -> Option<f64> {
    match &agent.binding {
        Binding::Command { .. } => Some(0.0),
        Binding::Shell { shell, .. } => {
            let takes_cap = crate::shell::placeholders_in(&shell.args)
                .is_ok_and(|names| names.iter().any(|n| n == "max_budget_usd"));
            budget.invocation_max_cost_usd.filter(|_| takes_cap)
        }
    }
}

impl Ceiling {
    /// `at most 55 invocations (retries included), at most 13h 58m of wall
    /// time, at most $5.50` — or why the cost is not bounded.
    pub fn text(&self) -> String {
        let how = if self.exact { "" } else { " (upper bound)" };
        let wall = match self.wall_secs {
            // Saturated: "more than …" already.
            u64::MAX => crate::text::long_duration(u64::MAX),
            secs => format!("at most {}", crate::text::long_duration(secs)),
        };
        let mut s = format!(
            "at most {} (retries included), {wall} of wall time",
            crate::text::plural(self.invocations as usize, "invocation")
        );
        if self.human_waits {
            s.push_str(" plus human waits");
        }
        if let Some(d) = self.deadline_secs {
            s.push_str(&format!(
                " (budget.max_run_secs stops it by {})",
                crate::text::long_duration(d)
            ));
        }
        match self.cost_usd {
            Some(c) => s.push_str(&format!(", at most {}", usd(c))),
            None => s.push_str(&format!(
                ", cost not bounded (no per-invocation cap for {})",
                self.uncapped.join(", ")
            )),
        }
        s.push_str(how);
        s
    }

    /// What would bring the worst case under a limit it is above.
    pub fn remedy(&self) -> &'static str {
        if self.cost_usd.is_some() {
            "raise --max-cost (or runtimes.json budget.refuse_above_usd), lower \
             budget.invocation_max_cost_usd or the workflow's bounds; --force-cost starts anyway"
        } else {
            "set runtimes.json budget.invocation_max_cost_usd (passed to shells that take \
             {max_budget_usd}, as the claude preset does) and bind those agents to such shells; \
             --force-cost starts anyway"
        }
    }

    /// Why a run must not start under `limit` (the user's `--max-cost` or
    /// `budget.refuse_above_usd`), or `None` when the ceiling is within it.
    pub fn refusal(&self, limit: f64) -> Option<String> {
        match self.cost_usd {
            Some(c) if c <= limit => None,
            Some(c) => Some(format!(
                "the worst case costs {}, more than the {} allowed",
                usd(c),
                usd(limit)
            )),
            None => Some(format!(
                "the worst case's cost has no bound (no per-invocation cost cap for {}), so it may pass the {} allowed",
                self.uncapped.join(", "),
                usd(limit)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_read_well() {
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(0.0123), "$0.0123");
        assert_eq!(usd(0.05), "$0.05");
        assert_eq!(usd(1.5), "$1.50");
        assert_eq!(usd(12.345), "$12.35");
    }

    #[test]
    fn refusal_says_why() {
        let c = Ceiling {
            invocations: 3,
            exact: true,
            wall_secs: 90,
            human_waits: false,
            deadline_secs: None,
            cost_usd: Some(3.0),
            uncapped: Vec::new(),
        };
        assert_eq!(c.refusal(3.0), None);
        assert_eq!(
            c.refusal(2.0).unwrap(),
            "the worst case costs $3.00, more than the $2.00 allowed"
        );
        assert_eq!(
            c.text(),
            "at most 3 invocations (retries included), at most 1m 30s of wall time, at most $3.00"
        );
        let open = Ceiling {
            cost_usd: None,
            uncapped: vec!["planner".into()],
            ..c
        };
        assert!(
            open.refusal(100.0)
                .unwrap()
                .contains("no per-invocation cost cap for planner"),
            "{:?}",
            open.refusal(100.0)
        );
    }
}
