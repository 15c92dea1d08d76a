//! The checks that look at the machine as a graph: reachability (every state
//! reachable, every state can still end), completeness (every event an agent
//! state can emit is handled, every transition can be taken) and termination
//! (every cycle is bounded).
//!
//! They run even when some transitions could not be built (an unknown state
//! name): [`Partial`] says what those might have done, and each check gives
//! them the benefit of the doubt, so one pass reports every independent
//! problem without follow-on noise.

use std::collections::{HashMap, HashSet, VecDeque};

use petgraph::Direction;
use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, EdgeRef, Reversed};

use super::check::{Ctx, emit_event_span};
use strum::VariantArray as _;

use super::emit::Outcome;
use super::failure::PERMANENT;
use super::machine::{Edge, State, StateId, StateKind, Transition};
use super::spec::RawFile;

pub(crate) struct Graph<'a> {
    pub states: &'a [State],
    pub transitions: &'a [Transition],
    pub outgoing: &'a [Vec<usize>],
    pub graph: &'a DiGraph<StateId, Edge>,
    /// The file as written, for the span of an unhandled emitted event.
    pub raw: &'a RawFile<'a>,
    /// By state: read only in part (unknown kind, dropped emit rule), so
    /// what it emits is not judged.
    pub incomplete: &'a [bool],
    pub partial: &'a Partial,
}

/// A transition that could not be built (an unknown state name, or a
/// second transition on the same event).
#[derive(Debug)]
pub(crate) struct Dropped {
    /// The source and the target; for an unknown name, the state it most
    /// resembles (what the user most likely meant), `None` when nothing does.
    pub from: Option<StateId>,
    pub to: Option<StateId>,
    pub event: String,
}

/// What the transitions that could not be built might have done.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    pub dropped: Vec<Dropped>,
    /// Transitions written with a bound that is broken (and reported):
    /// meant to be bounded, so they do not make a cycle unbounded.
    pub bound_unknown: Vec<usize>,
}

impl Partial {
    /// What the dropped transitions might handle: (source, event), with no
    /// source for one from an unknown state (any state, then).
    fn handled(&self) -> HashSet<(Option<StateId>, &str)> {
        self.dropped
            .iter()
            .map(|d| (d.from, d.event.as_str()))
            .collect()
    }
}

/// Every state reachable from `roots` in `graph`.
fn flood<G>(graph: G, n: usize, roots: impl IntoIterator<Item = usize>) -> Vec<bool>
where
    G: petgraph::visit::IntoNeighbors<NodeId = NodeIndex>
        + petgraph::visit::Visitable<NodeId = NodeIndex>,
{
    let mut seen = vec![false; n];
    for root in roots {
        if seen[root] {
            continue;
        }
        let mut bfs = Bfs::new(graph, NodeIndex::new(root));
        while let Some(x) = bfs.next(graph) {
            seen[x.index()] = true;
        }
    }
    seen
}

/// Unreachable states (needs a known initial state) and states from which
/// no terminal can be reached. A dropped transition's known target counts
/// as reachable, and its known source as able to end.
pub(crate) fn reachability(g: &Graph, initial: Option<StateId>, cx: &mut Ctx) {
    let n = g.states.len();
    let dropped = &g.partial.dropped;
    // A dropped transition to who knows where might reach any state.
    let anywhere = dropped.iter().any(|d| d.to.is_none());
    let reached = initial.filter(|_| !anywhere).map(|init| {
        let extra = dropped.iter().filter_map(|d| d.to.map(StateId::index));
        flood(g.graph, n, std::iter::once(init.index()).chain(extra))
    });
    let terminals = (0..n).filter(|&i| g.states[i].is_terminal());
    let extra = dropped.iter().filter_map(|d| d.from.map(StateId::index));
    let can_end = flood(Reversed(g.graph), n, terminals.chain(extra));
    // A dropped transition from who knows where might let any state end.
    let from_anywhere = dropped.iter().any(|d| d.from.is_none());
    let initial_name = initial.map_or("", |i| g.states[i.index()].name.as_str());
    for (i, s) in g.states.iter().enumerate() {
        if reached.as_ref().is_some_and(|r| !r[i]) {
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
        if !s.is_terminal() && !can_end[i] && !from_anywhere {
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
    let dropped = g.partial.handled();
    for (i, s) in g.states.iter().enumerate() {
        let handled = |event: &str| {
            g.outgoing[i]
                .iter()
                .any(|&t| g.transitions[t].event == event)
                || dropped.contains(&(Some(StateId(i as u32)), event))
                || dropped.contains(&(None, event))
        };
        let events: Vec<&str> = match &s.kind {
            StateKind::Input { event } if !event.is_empty() => vec![event.as_str()],
            StateKind::Agent(a) => a.events(),
            StateKind::Human { events, .. } => events.iter().map(String::as_str).collect(),
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
        let Some(agent) = s.agent().filter(|_| !g.incomplete[i]) else {
            continue;
        };
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

/// A transition no rule of its state can raise never fires: a warning, as
/// it is most likely a misspelled event (the run still ends). An agent
/// state also raises the engine's own events ([`super::ENGINE_EVENTS`])
/// and its catch events; a gate raises its `events`.
pub(crate) fn dead_transitions(g: &Graph, cx: &mut Ctx) {
    // By state, the events its rules raise (`None`: not judged).
    let raised_by: Vec<Option<Vec<&str>>> = g
        .states
        .iter()
        .zip(g.incomplete)
        .map(|(s, &incomplete)| match &s.kind {
            _ if incomplete => None,
            StateKind::Agent(a) => Some(a.events()),
            StateKind::Input { event } => Some(vec![event.as_str()]),
            StateKind::Human { events, .. } => Some(events.iter().map(String::as_str).collect()),
            StateKind::Terminal { .. } => None,
        })
        .collect();
    // Also raised, but not offered as "did you mean": nobody writes them.
    let sets: Vec<Option<HashSet<&str>>> = g
        .states
        .iter()
        .zip(&raised_by)
        .map(|(s, r)| {
            let mut set: HashSet<&str> = r.as_ref()?.iter().copied().collect();
            if let Some(a) = s.agent() {
                // One by one: `insert` shortens the 'static names to the set's lifetime.
                for e in super::ENGINE_EVENTS.into_iter().chain(a.catch_events()) {
                    set.insert(e);
                }
            }
            Some(set)
        })
        .collect();
    for t in g.transitions {
        let from = t.from.index();
        let (Some(raised), Some(set)) = (&raised_by[from], &sets[from]) else {
            continue;
        };
        if set.contains(t.event.as_str()) {
            continue;
        }
        let s = &g.states[from];
        let quoted: Vec<String> = raised.iter().map(|e| format!("`{e}`")).collect();
        let help = match crate::diagnostics::closest(&t.event, raised.iter().copied()) {
            Some(near) => format!(
                "did you mean `{near}`? (state `{}` raises {})",
                s.name,
                quoted.join(", ")
            ),
            None if raised.is_empty() => format!(
                "state `{}` raises no event; add an emit rule for it or delete the transition",
                s.name
            ),
            None => format!(
                "state `{}` raises only {}; fix the event or delete the transition",
                s.name,
                quoted.join(", ")
            ),
        };
        cx.warning(
            "fsm::dead-transition",
            t.span.clone(),
            format!(
                "transition {} —{}→ {} can never fire: no rule of state `{}` raises `{}`",
                s.name,
                t.event,
                g.states[t.to.index()].name,
                s.name,
                t.event
            ),
            help,
        );
    }
}

/// A workflow's agent state without a `catch` for every permanent failure
/// class ([`FailureClass::permanent`]): such a failure would reach the
/// emit rules as a plain `process_error`, and often a loop that repeats
/// it. A warning per state, naming the classes; lifecycles (whose `self`
/// state follows one invocation) are not judged.
pub(crate) fn uncaught_permanent(g: &Graph, cx: &mut Ctx) {
    let lifecycle = g.states.iter().any(|s| {
        s.agent()
            .is_some_and(|a| a.agent == super::lifecycle::SELF_AGENT)
    });
    if lifecycle {
        return;
    }
    let failure = g.states.iter().find(|s| {
        matches!(
            s.kind,
            StateKind::Terminal {
                outcome: super::Ending::Failure
            }
        )
    });
    let next = failure.map_or("<FAILURE STATE>", |s| s.name.as_str());
    for (i, s) in g.states.iter().enumerate() {
        let Some(a) = s.agent().filter(|_| !g.incomplete[i]) else {
            continue;
        };
        let missing: Vec<&str> = PERMANENT
            .iter()
            .filter(|c| a.caught(**c).is_none())
            .map(|c| c.as_str())
            .collect();
        if missing.is_empty() {
            continue;
        }
        let quoted: Vec<String> = missing.iter().map(|c| format!("\"{c}\"")).collect();
        cx.warning(
            "fsm::uncaught-permanent",
            s.span.clone(),
            format!(
                "agent state `{}` has no catch for {}: retrying cannot fix these, and its emit rules would treat them as any process error",
                s.name,
                missing.join(", ")
            ),
            format!(
                "add `catch = [{{ on = [{}], next = \"{next}\" }}]` (or route them to a state where a person can step in)",
                quoted.join(", ")
            ),
        );
    }
}

/// The graph of unbounded transitions plus redirects (`from → exhausted`) must be
/// acyclic: then every loop a run can go round uses up a bound. Every
/// transition of a strongly connected part lies on some reported cycle, so
/// two independent loops (a self-loop and a loop through another state)
/// are both reported.
pub(crate) fn termination(g: &Graph, cx: &mut Ctx) {
    let mut gu: DiGraph<(), usize> = DiGraph::new();
    for _ in g.states {
        gu.add_node(());
    }
    for (i, t) in g.transitions.iter().enumerate() {
        if g.partial.bound_unknown.contains(&i) {
            continue;
        }
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
    // Edges inside each part, in file order (one pass over the edges); each
    // cycle reported covers some, and every uncovered one gets its own.
    let mut part = vec![usize::MAX; g.states.len()];
    for (i, scc) in sccs.iter().enumerate() {
        scc.iter().for_each(|n| part[n.index()] = i);
    }
    let mut inside: Vec<Vec<(usize, NodeIndex, NodeIndex)>> = vec![Vec::new(); sccs.len()];
    for e in gu.edge_references() {
        let p = part[e.source().index()];
        if p == part[e.target().index()] {
            inside[p].push((*e.weight(), e.source(), e.target()));
        }
    }
    let (mut reported, mut more) = (0, 0);
    for (scc, mut inside) in sccs.into_iter().zip(inside) {
        if inside.is_empty() {
            continue;
        }
        let members: HashSet<NodeIndex> = scc.into_iter().collect();
        inside.sort();
        let mut covered: HashSet<usize> = HashSet::new();
        for (t, from, to) in inside {
            if covered.contains(&t) {
                continue;
            }
            if reported == MAX_CYCLES {
                more += 1;
                continue;
            }
            let mut cycle = vec![t];
            cycle.extend(path_between(&gu, to, from, &members));
            covered.extend(cycle.iter().copied());
            report_cycle(g, cycle, cx);
            reported += 1;
        }
    }
    if more > 0 {
        let span = g.transitions.first().map_or(0..0, |t| t.span.clone());
        cx.error(
            "fsm::unbounded-cycle",
            span,
            format!("{more} more transitions lie on unbounded cycles (only the first {MAX_CYCLES} cycles are listed)"),
            "bound the cycles listed above, then check again".into(),
        );
    }
}

/// Past this many unbounded cycles in one file, the rest are counted:
/// finding each costs a search, and a list that long helps nobody.
const MAX_CYCLES: usize = 20;

/// One unbounded cycle, named from its earliest state in file order.
fn report_cycle(g: &Graph, mut cycle: Vec<usize>, cx: &mut Ctx) {
    let first = (0..cycle.len())
        .min_by_key(|&i| g.transitions[cycle[i]].from)
        .unwrap_or(0);
    cycle.rotate_left(first);
    let Some(&head) = cycle.first() else { return };
    let head = &g.transitions[head];
    let mut names: Vec<&str> = cycle
        .iter()
        .map(|&e| g.states[g.transitions[e].from.index()].name.as_str())
        .collect();
    names.push(&g.states[head.from.index()].name);
    let redirect = cycle.iter().any(|&e| g.transitions[e].exhausted.is_some());
    let caught = cycle.iter().any(|&e| g.transitions[e].caught().is_some());
    let help = if caught {
        "a `catch` leads back into the loop: send it out of the cycle (e.g. to a failure state), or bound another transition of the cycle"
    } else if redirect {
        "an `exhausted` target leads back into the loop: point it out of the cycle (e.g. to a failure state), or bound another transition of the cycle"
    } else {
        "add `max = N` and `exhausted = \"<STATE>\"` to one transition of the cycle"
    };
    cx.error(
        "fsm::unbounded-cycle",
        head.span.clone(),
        format!(
            "cycle {} has no bounded transition, so a run could loop forever",
            names.join(" → ")
        ),
        help.into(),
    );
}

/// Transition indexes of a shortest path from `start` to `goal` inside
/// `members` (empty when they are the same state).
fn path_between(
    gu: &DiGraph<(), usize>,
    start: NodeIndex,
    goal: NodeIndex,
    members: &HashSet<NodeIndex>,
) -> Vec<usize> {
    let mut parent: HashMap<NodeIndex, (NodeIndex, usize)> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        if n == goal {
            let mut path = Vec::new();
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
        for e in gu.edges_directed(n, Direction::Outgoing) {
            let next = e.target();
            if members.contains(&next)
                && next != start
                && let std::collections::hash_map::Entry::Vacant(v) = parent.entry(next)
            {
                v.insert((n, *e.weight()));
                queue.push_back(next);
            }
        }
    }
    Vec::new()
}
