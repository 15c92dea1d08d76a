//! The checks that look at the machine as a graph: reachability (every state
//! reachable, every state can still end), completeness (every event an agent
//! state can emit is handled) and termination (every cycle is bounded).

use std::collections::{HashMap, HashSet, VecDeque};

use petgraph::Direction;
use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, Reversed};

use super::check::{Ctx, emit_event_span};
use strum::VariantArray as _;

use super::emit::Outcome;
use super::machine::{Edge, State, StateId, StateKind, Transition};
use super::spec::RawFile;

pub(crate) struct Graph<'a> {
    pub states: &'a [State],
    pub transitions: &'a [Transition],
    pub outgoing: &'a [Vec<usize>],
    pub graph: &'a DiGraph<StateId, Edge>,
    /// The file as written, for the span of an unhandled emitted event.
    pub raw: &'a RawFile<'a>,
}

pub(crate) fn reachability(g: &Graph, initial: StateId, cx: &mut Ctx) {
    let mut reached = vec![false; g.states.len()];
    let mut bfs = Bfs::new(g.graph, NodeIndex::new(initial.index()));
    while let Some(n) = bfs.next(g.graph) {
        reached[n.index()] = true;
    }
    let mut can_end = vec![false; g.states.len()];
    let reversed = Reversed(g.graph);
    for (i, s) in g.states.iter().enumerate() {
        if s.is_terminal() && !can_end[i] {
            let mut bfs = Bfs::new(reversed, NodeIndex::new(i));
            while let Some(n) = bfs.next(reversed) {
                can_end[n.index()] = true;
            }
        }
    }
    let initial_name = &g.states[initial.index()].name;
    for (i, s) in g.states.iter().enumerate() {
        if !reached[i] {
            cx.error(
                "fsm::unreachable",
                s.span.clone(),
                format!(
                    "state `{}` cannot be reached from the initial state `{initial_name}`",
                    s.name
                ),
                format!(
                    "add a transition into `{}` from a reachable state, or delete the state",
                    s.name
                ),
            );
        }
        if !s.is_terminal() && !can_end[i] {
            cx.error(
                "fsm::no-terminal",
                s.span.clone(),
                format!("no terminal state can be reached from state `{}`", s.name),
                format!(
                    "add a transition from `{}` (or from a state it leads to) towards a terminal state",
                    s.name
                ),
            );
        }
    }
}

pub(crate) fn completeness(g: &Graph, cx: &mut Ctx) {
    let workflow = !g.states.iter().any(|s| {
        s.agent()
            .is_some_and(|a| a.agent == super::lifecycle::SELF_AGENT)
    });
    for (i, s) in g.states.iter().enumerate() {
        let handled = |event: &str| {
            g.outgoing[i]
                .iter()
                .any(|&t| g.transitions[t].event == event)
        };
        let events: Vec<&str> = match &s.kind {
            StateKind::Input { event } if !event.is_empty() => vec![event.as_str()],
            StateKind::Agent(a) => a.events(),
            _ => Vec::new(),
        };
        for ev in events {
            if !handled(ev) {
                let span = emit_event_span(g.raw, i, ev).unwrap_or_else(|| s.span.clone());
                cx.error(
                    "fsm::unhandled-event",
                    span,
                    format!("state `{}` can emit event `{ev}` but no transition handles it", s.name),
                    format!(
                        "add a [[transitions]] entry with from = \"{}\", event = \"{ev}\", or emit another event",
                        s.name
                    ),
                );
            }
        }
        let Some(agent) = s.agent() else { continue };
        let missing: Vec<&str> = Outcome::VARIANTS
            .iter()
            .copied()
            .filter(|k| !agent.emit.iter().any(|r| r.on == *k && r.when.is_none()))
            .map(Outcome::as_str)
            .collect();
        if missing.is_empty() {
            continue;
        }
        let msg = format!(
            "agent state `{}` has no unconditional emit rule for: {}; such an outcome would leave the run without an event",
            s.name,
            missing.join(", ")
        );
        let help =
            "add `{ on = \"<kind>\", event = \"...\" }` (without `when`) for each listed kind"
                .into();
        // A workflow must have an event for every outcome, or a run could
        // stop mid-way on a configuration problem; a lifecycle that finds no
        // event just ends the invocation as failed.
        if workflow {
            cx.error("fsm::uncovered-outcome", s.span.clone(), msg, help);
        } else {
            cx.warning("fsm::uncovered-outcome", s.span.clone(), msg, help);
        }
    }
}

/// The graph of unbounded transitions plus redirects (`from → exhausted`) must be
/// acyclic: then every loop a run can go round uses up a bound.
pub(crate) fn termination(g: &Graph, cx: &mut Ctx) {
    let mut gu: DiGraph<(), usize> = DiGraph::new();
    for _ in g.states {
        gu.add_node(());
    }
    for (i, t) in g.transitions.iter().enumerate() {
        let to = match (t.max, t.exhausted) {
            (Some(_), Some(ex)) => ex,
            _ => t.to,
        };
        gu.add_edge(
            NodeIndex::new(t.from.index()),
            NodeIndex::new(to.index()),
            i,
        );
    }
    let mut sccs = tarjan_scc(&gu);
    // Report in file order, not in the algorithm's order.
    sccs.iter_mut().for_each(|c| c.sort());
    sccs.sort();
    for scc in sccs {
        let start = scc[0];
        let self_loop = gu.find_edge(start, start);
        if scc.len() == 1 && self_loop.is_none() {
            continue;
        }
        let members: HashSet<NodeIndex> = scc.iter().copied().collect();
        let path = cycle_through(&gu, start, &members);
        let mut names: Vec<&str> = path
            .iter()
            .map(|&e| g.states[g.transitions[e].from.index()].name.as_str())
            .collect();
        names.push(&g.states[start.index()].name);
        let Some(first) = path.first().map(|&e| &g.transitions[e]) else {
            continue;
        };
        let redirect = path.iter().any(|&e| g.transitions[e].exhausted.is_some());
        let help = if redirect {
            "an `exhausted` target leads back into the loop: point it out of the cycle (e.g. to a failure state), or bound another transition of the cycle"
        } else {
            "add `max = N` and `exhausted = \"<STATE>\"` to one transition of the cycle"
        };
        cx.error(
            "fsm::unbounded-cycle",
            first.span.clone(),
            format!(
                "cycle {} has no bounded transition, so a run could loop forever",
                names.join(" → ")
            ),
            help.into(),
        );
    }
}

/// Transition indexes of a shortest cycle from `start` back to itself inside `members`.
fn cycle_through(
    gu: &DiGraph<(), usize>,
    start: NodeIndex,
    members: &HashSet<NodeIndex>,
) -> Vec<usize> {
    let mut parent: HashMap<NodeIndex, (NodeIndex, usize)> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for e in gu.edges_directed(n, Direction::Outgoing) {
            use petgraph::visit::EdgeRef;
            let next = e.target();
            if !members.contains(&next) {
                continue;
            }
            if next == start {
                let mut path = vec![*e.weight()];
                let mut cur = n;
                while cur != start {
                    let Some(&(p, t)) = parent.get(&cur) else {
                        break;
                    };
                    path.push(t);
                    cur = p;
                }
                path.reverse();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = parent.entry(next) {
                v.insert((n, *e.weight()));
                queue.push_back(next);
            }
        }
    }
    Vec::new()
}
