//! Where a run stands in its workflow's loops, for people: on each visit of
//! a state, the bounded transition that brought the run round it and how
//! often it has fired against the `max` the user wrote — `loop 1 of 3` —
//! apart from the worst case the bounds allow (`at most 6` visits, which
//! counts every loop through the state). `go`'s progress and `history RUN`
//! both read it from the run's transitions replayed through the workflow.

use std::sync::Arc;

use serde::Serialize;

use crate::fsm::{Machine, Position};

/// A loop the run is in: `event`'s transition has fired `count` times of
/// the `max` its workflow allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopCount {
    pub event: String,
    pub count: u32,
    pub max: u32,
}

/// A run's position in its workflow, advanced transition by transition.
pub struct Loops {
    machine: Arc<Machine>,
    pos: Position,
    /// Bounded transitions that have fired, by index, the latest last.
    fired: Vec<usize>,
    /// `reach[a][b]`: state `b` can be reached from `a` (or is `a`).
    reach: Vec<Vec<bool>>,
    /// The record stopped fitting the workflow: nothing more can be said.
    lost: bool,
}

impl Loops {
    /// At the workflow's start.
    pub fn new(machine: Arc<Machine>) -> Self {
        let n = machine.states().count();
        let mut next = vec![Vec::new(); n];
        for t in machine.transitions() {
            next[t.from.index()].push(t.to.index());
        }
        let reach = (0..n)
            .map(|start| {
                let mut seen = vec![false; n];
                let mut stack = vec![start];
                while let Some(s) = stack.pop() {
                    if !std::mem::replace(&mut seen[s], true) {
                        stack.extend(&next[s]);
                    }
                }
                seen
            })
            .collect();
        Loops {
            pos: machine.start(),
            machine,
            fired: Vec::new(),
            reach,
            lost: false,
        }
    }

    /// The name of the state the run is in (`None` once lost).
    pub fn state(&self) -> Option<&str> {
        (!self.lost).then(|| self.machine.state(self.pos.state()).name.as_str())
    }

    /// The loop the run is in at its current state: the bounded transition
    /// fired most recently whose loop passes through the state (from its
    /// target the state can be reached, and from the state its source).
    pub fn current(&self) -> Option<LoopCount> {
        if self.lost {
            return None;
        }
        let here = self.pos.state().index();
        self.fired.iter().rev().find_map(|&i| {
            let t = &self.machine.transitions()[i];
            let on_loop = self.reach[t.to.index()][here] && self.reach[here][t.from.index()];
            Some(LoopCount {
                event: t.event.clone(),
                count: *self.pos.counters.get(t.slot?)?,
                max: t.max?,
            })
            .filter(|_| on_loop)
        })
    }

    /// The loop of the run's current visit, if the run is in `state`.
    pub fn at(&self, state: &str) -> Option<LoopCount> {
        (self.state() == Some(state))
            .then(|| self.current())
            .flatten()
    }

    /// The run took `event` to `to`; a record that does not fit the
    /// workflow leaves the loops unknown from here on.
    pub fn advance(&mut self, event: &str, to: &str) {
        if self.lost {
            return;
        }
        // A redrive takes a failed run back with every loop afresh.
        if event == crate::fsm::REDRIVE
            && let Some(pos) = self
                .machine
                .state_id(to)
                .and_then(|id| self.machine.redrive(&self.pos, id))
        {
            self.pos = pos;
            self.fired.clear();
            return;
        }
        match self.machine.fire(&self.pos, event) {
            Ok(f) if self.machine.state(f.to).name == to => {
                if f.max.is_some() && !f.redirected {
                    self.fired.retain(|&i| i != f.transition);
                    self.fired.push(f.transition);
                }
                self.pos = f.position;
            }
            _ => self.lost = true,
        }
    }
}

/// `attempt 2 · loop 1 of 3 · at most 6`: the visit, the loop it is in
/// against the user's bound, and the worst case (when above 1).
pub fn attempt(attempt: u32, looping: Option<&LoopCount>, worst: Option<u64>) -> String {
    let mut s = format!("attempt {attempt}");
    if let Some(l) = looping {
        s.push_str(&format!(" · loop {} of {}", l.count, l.max));
    }
    if let Some(w) = worst.filter(|w| *w > 1) {
        s.push_str(&format!(" · at most {w}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsm::{Catalog, CompileOptions};

    fn shipped(id: &str) -> Arc<Machine> {
        let (catalog, _) = Catalog::load(None, &CompileOptions::default());
        Arc::clone(catalog.get(id).expect("shipped workflow"))
    }

    #[test]
    fn a_visit_counts_the_loop_that_brought_the_run_round() {
        let mut l = Loops::new(shipped("plan_execute_test"));
        l.advance("epic_received", "PLANNING");
        assert_eq!(l.current(), None);
        l.advance("task_spec_valid", "EXECUTING");
        assert_eq!(l.at("EXECUTING"), None, "the first visit is in no loop");
        l.advance("execution_done", "TESTING");
        l.advance("tests_fail", "EXECUTING");
        let tests = |count| LoopCount {
            event: "tests_fail".into(),
            count,
            max: 3,
        };
        assert_eq!(l.at("EXECUTING"), Some(tests(1)));
        assert_eq!(l.at("TESTING"), None, "not where the run is");
        l.advance("execution_rejected", "EXECUTING");
        let rejected = LoopCount {
            event: "execution_rejected".into(),
            count: 1,
            max: 2,
        };
        assert_eq!(l.current(), Some(rejected));
        l.advance("execution_done", "TESTING");
        l.advance("tests_fail", "EXECUTING");
        assert_eq!(l.current(), Some(tests(2)));
        l.advance("execution_done", "NOWHERE");
        assert_eq!(l.current(), None, "a record that does not fit says nothing");
    }

    #[test]
    fn attempts_read_as_people_say_them() {
        let l = LoopCount {
            event: "tests_fail".into(),
            count: 1,
            max: 3,
        };
        assert_eq!(
            attempt(2, Some(&l), Some(6)),
            "attempt 2 · loop 1 of 3 · at most 6"
        );
        assert_eq!(attempt(1, None, Some(6)), "attempt 1 · at most 6");
        assert_eq!(attempt(1, None, Some(1)), "attempt 1");
    }
}
