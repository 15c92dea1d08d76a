//! `retry` and `catch` of an agent state, as in Amazon States Language: what
//! the run does when an invocation fails with a [`FailureClass`].
//!
//! A retry runs the same invocation again after a wait (backoff, cap,
//! jitter) and never spends the workflow's loop bounds. A catch sends the
//! run to another state: `check` turns each caught class into a real
//! transition (event `catch:<class>`), so `Machine::fire` stays the only
//! step and the graph checks, the termination proof and the worst case see
//! it. The orchestrator asks, in this order: retry, then catch, then the
//! state's emit rules.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use serde::Serialize;
use strum::VariantArray as _;
use toml::Spanned;

use super::check::Ctx;
use super::failure::FailureClass;
use super::graph_checks::{Dropped, Partial};
use super::machine::{State, StateId, Transition};
use super::spec::{RawCatch, RawRetry, Text};
use crate::diagnostics::unknown_name_help;

/// Most retries one rule may allow. A retry re-runs a whole agent
/// invocation (minutes, money); more than this is a loop in disguise, which
/// belongs in the workflow, bounded, where the worst case shows it.
pub const MAX_RETRY_ATTEMPTS: u32 = 10;

/// Longest single wait between two attempts, whatever the rule says
/// (`interval_secs`, `max_delay_secs` are checked against it too).
pub const MAX_DELAY_SECS: u64 = 86_400;

/// Largest `backoff_rate`: with 10 attempts, 10× per attempt already
/// reaches any cap.
const MAX_BACKOFF_RATE: f64 = 10.0;

/// How a retry's wait is randomised, so many runs failing together do not
/// retry together (`jitter = "full"` in TOML).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Jitter {
    /// Wait exactly the backoff delay.
    #[default]
    None,
    /// Wait a random time between 0 and the delay.
    Full,
    /// Wait half the delay plus a random time up to the other half.
    Equal,
}

/// `{ on = [...], max_attempts = 4, interval_secs = 5, backoff_rate = 2.0,
/// max_delay_secs = 120, jitter = "full" }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryRule {
    pub on: Vec<FailureClass>,
    /// Most retries (after the first attempt) this rule allows in one visit.
    pub max_attempts: u32,
    /// The wait before the first retry (default 1).
    pub interval_secs: u64,
    /// Each further retry waits this many times longer (default 2.0, ≥ 1).
    pub backoff_rate: f64,
    /// No wait is longer than this (default: [`MAX_DELAY_SECS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay_secs: Option<u64>,
    pub jitter: Jitter,
}

impl RetryRule {
    /// The wait before retry number `retry` (0 = the first) before jitter:
    /// `interval × backoff_rate^retry`, capped at `max_delay_secs`.
    pub fn base_delay(&self, retry: u32) -> Duration {
        let cap = self
            .max_delay_secs
            .unwrap_or(MAX_DELAY_SECS)
            .min(MAX_DELAY_SECS) as f64;
        let exponent = i32::try_from(retry).unwrap_or(i32::MAX);
        let secs = (self.interval_secs as f64) * self.backoff_rate.powi(exponent);
        // `min` also turns an overflow to infinity back into the cap.
        Duration::from_secs_f64(secs.min(cap).max(0.0))
    }

    /// The wait before retry number `retry`, jittered with `fraction`, a
    /// random number in [0, 1] the caller draws (so this stays testable).
    pub fn delay(&self, retry: u32, fraction: f64) -> Duration {
        let base = self.base_delay(retry);
        let f = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        match self.jitter {
            Jitter::None => base,
            Jitter::Full => base.mul_f64(f),
            Jitter::Equal => base / 2 + (base / 2).mul_f64(f),
        }
    }
}

/// `{ on = [...], next = "STATE" }`: a failure of one of these classes
/// (once its retries, if any, are used up) sends the run to `next`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatchRule {
    pub on: Vec<FailureClass>,
    pub next: String,
    /// The entry in the file (the synthesised transitions point here).
    #[serde(skip)]
    pub(crate) span: Range<usize>,
    #[serde(skip)]
    pub(crate) next_span: Range<usize>,
}

/// The longest one visit can wait between its attempts: the `retried`
/// counter is shared by every class, so retry `k` can be any rule that
/// still allows a `k`-th retry; the sum of the longest of those waits.
pub(crate) fn worst_wait(rules: &[RetryRule]) -> Duration {
    let most = rules.iter().map(|r| r.max_attempts).max().unwrap_or(0);
    (0..most)
        .map(|k| {
            rules
                .iter()
                .filter(|r| r.max_attempts > k)
                .map(|r| r.base_delay(k))
                .max()
                .unwrap_or_default()
        })
        .sum()
}

/// Which rule of a state already lists a class (`retry` and `catch` are
/// judged separately: a class may be retried, then caught).
type Seen = HashMap<FailureClass, Range<usize>>;

/// The failure classes of one rule's `on`; unknown names and classes an
/// earlier rule of the same list already has are reported.
fn classes(
    on: &Spanned<Vec<Text>>,
    list: &str,
    seen: &mut Seen,
    cx: &mut Ctx,
) -> Vec<FailureClass> {
    if on.get_ref().is_empty() {
        cx.error(
            "fsm::invalid-field",
            on.span(),
            format!("this {list} rule lists no failure class"),
            format!(
                "name the classes it handles, e.g. on = [\"rate_limited\"]; known: {}",
                FailureClass::VARIANTS
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    let mut out = Vec::new();
    for name in on.get_ref() {
        let Ok(class) = name.get_ref().parse::<FailureClass>() else {
            let names = FailureClass::VARIANTS.iter().map(|c| c.as_str());
            cx.error(
                "fsm::unknown-class",
                name.span(),
                format!("unknown failure class `{}`", name.get_ref()),
                unknown_name_help(name.get_ref(), "failure class name", names),
            );
            continue;
        };
        if let Some(first) = seen.get(&class) {
            let (line, _) = crate::diagnostics::line_column(cx.text, first.start);
            cx.error(
                "fsm::duplicate-class",
                name.span(),
                format!("class `{class}` is already handled by the {list} rule on line {line}"),
                format!(
                    "a class belongs to one {list} rule: the first would always win; remove it here"
                ),
            );
            continue;
        }
        seen.insert(class, name.span());
        out.push(class);
    }
    out
}

/// The state's `retry` rules, checked; a rule with an error is left out.
pub(crate) fn retry_rules(
    raw: Option<&Spanned<Vec<Spanned<RawRetry>>>>,
    state: &str,
    cx: &mut Ctx,
) -> Vec<RetryRule> {
    let mut seen = Seen::new();
    let mut out = Vec::new();
    for rule in raw.map(Spanned::get_ref).into_iter().flatten() {
        let span = rule.span();
        let r = rule.get_ref();
        let before = cx.diags.error_count();
        let on = classes(&r.on, "retry", &mut seen, cx);
        let max_attempts = attempts(r, span, state, cx);
        let interval_secs = secs(r.interval_secs.as_ref(), "interval_secs", cx).unwrap_or(1);
        let max_delay_secs = secs(r.max_delay_secs.as_ref(), "max_delay_secs", cx);
        if let (Some(cap), Some(raw_cap)) = (max_delay_secs, &r.max_delay_secs)
            && cap < interval_secs
        {
            cx.error(
                "fsm::invalid-field",
                raw_cap.span(),
                format!("max_delay_secs = {cap} is shorter than interval_secs = {interval_secs}"),
                "the cap bounds the growing waits: make it at least interval_secs".into(),
            );
        }
        let backoff_rate = rate(r.backoff_rate.as_ref(), cx);
        let jitter = jitter(r.jitter.as_ref(), cx);
        if cx.diags.error_count() == before {
            out.push(RetryRule {
                on,
                max_attempts,
                interval_secs,
                backoff_rate,
                max_delay_secs,
                jitter,
            });
        }
    }
    out
}

/// `max_attempts`: required, 1 to [`MAX_RETRY_ATTEMPTS`].
fn attempts(r: &RawRetry, span: Range<usize>, state: &str, cx: &mut Ctx) -> u32 {
    let Some(m) = &r.max_attempts else {
        cx.error(
            "fsm::unbounded-retry",
            span,
            format!("a retry rule of state `{state}` has no `max_attempts`"),
            format!(
                "add `max_attempts = N` (1 to {MAX_RETRY_ATTEMPTS}): how many times the invocation may be retried"
            ),
        );
        return 0;
    };
    match u32::try_from(*m.get_ref()) {
        Ok(n @ 1..=MAX_RETRY_ATTEMPTS) => n,
        _ if *m.get_ref() > i64::from(MAX_RETRY_ATTEMPTS) => {
            cx.error(
                "fsm::unbounded-retry",
                m.span(),
                format!(
                    "max_attempts = {} is more than {MAX_RETRY_ATTEMPTS} retries",
                    m.get_ref()
                ),
                format!(
                    "use at most {MAX_RETRY_ATTEMPTS}; to repeat work more often, loop in the workflow with a bounded transition"
                ),
            );
            0
        }
        _ => {
            cx.error(
                "fsm::invalid-field",
                m.span(),
                format!("max_attempts = {} is not a positive number", m.get_ref()),
                format!("use 1 to {MAX_RETRY_ATTEMPTS}, or remove the rule to not retry"),
            );
            0
        }
    }
}

/// A whole number of seconds, 1 to [`MAX_DELAY_SECS`].
fn secs(v: Option<&Spanned<i64>>, key: &str, cx: &mut Ctx) -> Option<u64> {
    let v = v?;
    match u64::try_from(*v.get_ref()) {
        Ok(n @ 1..=MAX_DELAY_SECS) => Some(n),
        _ => {
            cx.error(
                "fsm::invalid-field",
                v.span(),
                format!("{key} = {} is out of range", v.get_ref()),
                format!("give {key} in whole seconds, 1 to {MAX_DELAY_SECS} (one day)"),
            );
            None
        }
    }
}

fn rate(v: Option<&Spanned<f64>>, cx: &mut Ctx) -> f64 {
    let Some(v) = v else { return 2.0 };
    let r = *v.get_ref();
    if (1.0..=MAX_BACKOFF_RATE).contains(&r) {
        return r;
    }
    cx.error(
        "fsm::invalid-field",
        v.span(),
        format!("backoff_rate = {r} is out of range"),
        format!(
            "use 1.0 (the same wait every time) to {MAX_BACKOFF_RATE}; each retry waits backoff_rate times longer than the last"
        ),
    );
    2.0
}

fn jitter(v: Option<&Text>, cx: &mut Ctx) -> Jitter {
    let Some(v) = v else {
        return Jitter::None;
    };
    match v.get_ref().parse() {
        Ok(j) => j,
        Err(_) => {
            let names = <Jitter as strum::VariantNames>::VARIANTS.iter().copied();
            cx.error(
                "fsm::invalid-field",
                v.span(),
                format!("unknown jitter `{}`", v.get_ref()),
                unknown_name_help(v.get_ref(), "jitter", names),
            );
            Jitter::None
        }
    }
}

/// The state's `catch` rules with their classes checked; `next` is
/// resolved with the other state names in `check`.
pub(crate) fn catch_rules(
    raw: Option<&Spanned<Vec<Spanned<RawCatch>>>>,
    cx: &mut Ctx,
) -> Vec<CatchRule> {
    let mut seen = Seen::new();
    let mut out = Vec::new();
    for rule in raw.map(Spanned::get_ref).into_iter().flatten() {
        let r = rule.get_ref();
        let on = classes(&r.on, "catch", &mut seen, cx);
        out.push(CatchRule {
            on,
            next: r.next.get_ref().to_string(),
            span: rule.span(),
            next_span: r.next.span(),
        });
    }
    out
}

/// One transition per caught class, `state —catch:<class>→ next`, after
/// the file's own. An unknown `next` is reported, and what the catch might
/// have done (the state its name most resembles) is given the benefit of
/// the doubt, as for any transition to an unknown state.
pub(crate) fn catch_transitions(
    states: &[State],
    lookup: &foldhash::HashMap<&str, StateId>,
    names: &[&str],
    out: &mut Vec<Transition>,
    partial: &mut Partial,
    cx: &mut Ctx,
) {
    for (i, s) in states.iter().enumerate() {
        let from = StateId(i as u32);
        for rule in s.agent().map(|a| a.catch.as_slice()).unwrap_or_default() {
            let to = lookup.get(rule.next.as_str()).copied();
            if to.is_none() {
                cx.error(
                    "fsm::unknown-state",
                    rule.next_span.clone(),
                    format!(
                        "a catch of state `{}` goes to unknown state `{}`",
                        s.name, rule.next
                    ),
                    unknown_name_help(&rule.next, "state", names.iter().copied()),
                );
            }
            for class in &rule.on {
                let event = class.catch_event().to_owned();
                let Some(to) = to else {
                    let meant = crate::diagnostics::closest(&rule.next, names.iter().copied());
                    let to = meant.and_then(|n| lookup.get(n).copied());
                    partial.dropped.push(Dropped {
                        from: Some(from),
                        to,
                        event,
                    });
                    continue;
                };
                out.push(Transition {
                    from,
                    event,
                    to,
                    max: None,
                    exhausted: None,
                    span: rule.span.clone(),
                    slot: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        max_attempts: u32,
        interval: u64,
        rate: f64,
        cap: Option<u64>,
        jitter: Jitter,
    ) -> RetryRule {
        RetryRule {
            on: vec![FailureClass::RateLimited],
            max_attempts,
            interval_secs: interval,
            backoff_rate: rate,
            max_delay_secs: cap,
            jitter,
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let r = rule(4, 5, 2.0, Some(12), Jitter::None);
        let waits: Vec<u64> = (0..4).map(|k| r.delay(k, 0.7).as_secs()).collect();
        assert_eq!(waits, [5, 10, 12, 12]);
        // No cap: only the one-day ceiling.
        let r = rule(10, 3600, 10.0, None, Jitter::None);
        assert_eq!(r.base_delay(9).as_secs(), MAX_DELAY_SECS);
        assert_eq!(r.base_delay(u32::MAX).as_secs(), MAX_DELAY_SECS);
    }

    #[test]
    fn jitter_takes_the_callers_fraction() {
        let full = rule(3, 8, 1.0, None, Jitter::Full);
        assert_eq!(full.delay(0, 0.0), Duration::ZERO);
        assert_eq!(full.delay(0, 0.25), Duration::from_secs(2));
        assert_eq!(full.delay(0, 1.0), Duration::from_secs(8));
        // Out-of-range fractions are clamped, NaN counts as 0.
        assert_eq!(full.delay(0, 7.0), Duration::from_secs(8));
        assert_eq!(full.delay(0, f64::NAN), Duration::ZERO);
        let equal = rule(3, 8, 1.0, None, Jitter::Equal);
        assert_eq!(equal.delay(0, 0.0), Duration::from_secs(4));
        assert_eq!(equal.delay(0, 0.5), Duration::from_secs(6));
        assert_eq!(equal.delay(0, 1.0), Duration::from_secs(8));
    }

    #[test]
    fn worst_wait_takes_the_longest_rule_per_retry() {
        let a = rule(4, 5, 2.0, Some(120), Jitter::Full);
        assert_eq!(
            worst_wait(std::slice::from_ref(&a)),
            Duration::from_secs(5 + 10 + 20 + 40)
        );
        // Retry k may be of any class whose rule still allows it.
        let b = rule(2, 30, 1.0, None, Jitter::None);
        assert_eq!(worst_wait(&[a, b]), Duration::from_secs(30 + 30 + 20 + 40));
        assert_eq!(worst_wait(&[]), Duration::ZERO);
    }
}
