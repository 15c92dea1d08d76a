//! The worst case of a checked machine: the most transitions any run can take,
//! the most times a run can enter each agent state (= agent invocations, or
//! up to 1 + its retries each) and each human gate, and — weighted by
//! what a state costs — the most invocations and the longest wall time.
//!
//! Exact: a longest path over configurations (state × bounded-transition
//! counters), which form a DAG once the termination check passed. Counters of
//! transitions the run can no longer reach are reset to zero so that finished
//! loops do not multiply the space. Past [`CONFIG_LIMIT`] configurations it
//! falls back to an upper bound and says so.

use foldhash::{HashMap, HashMapExt as _};

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use super::machine::{Edge, State, StateId, Transition};

/// Above this many configurations the exact search gives way to an upper bound.
pub const CONFIG_LIMIT: usize = 200_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorstCase {
    /// Most transitions (redirects included) a run can take before it ends.
    pub transitions: u64,
    /// `false` when the figures are upper bounds rather than exact maxima.
    pub exact: bool,
    /// Per agent state, the most times a run can enter it.
    pub visits: Vec<(StateId, u64)>,
    /// Most agent invocations one run can make, every retry included (each
    /// visit of an agent state costs up to 1 + its largest `max_attempts`).
    pub invocations: u64,
    /// Per human gate, the most times a run can stop there.
    pub gates: Vec<(StateId, u64)>,
}

/// The longest a run can take ([`super::Machine::worst_wall_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WallTime {
    pub total: std::time::Duration,
    /// `false` when it is an upper bound rather than the exact maximum.
    pub exact: bool,
    /// The machine has human gates, whose waits are not counted.
    pub human_waits: bool,
}

/// What a weighted longest path is computed over, kept with the machine so
/// the wall time can be asked for with the timeouts known at run time.
#[derive(Debug)]
pub(crate) enum Paths {
    /// The DAG of configurations: each one's state, its successors, and a
    /// topological order (sources first).
    Exact {
        state: Vec<u32>,
        succ: Vec<Vec<u32>>,
        order: Vec<usize>,
    },
    /// Too many configurations: at most `stretches` paths through the
    /// acyclic graph of unbounded transitions and redirects (`next`, in
    /// topological `order`; `None` if it had a cycle, which the checks rule out).
    Bound {
        stretches: u64,
        next: Vec<Vec<usize>>,
        order: Option<Vec<usize>>,
    },
}

impl Paths {
    /// The largest total `cost` (per state entered, the initial state
    /// included) of any run; and whether that is exact.
    pub fn longest(&self, cost: &[u64]) -> (u64, bool) {
        let w = |s: usize| cost.get(s).copied().unwrap_or(0);
        match self {
            Paths::Exact { state, succ, order } => {
                let mut dist = vec![0u64; state.len()];
                for &v in order.iter().rev() {
                    let best = succ[v].iter().map(|&s| dist[s as usize]).max();
                    dist[v] = w(state[v] as usize).saturating_add(best.unwrap_or(0));
                }
                (dist.first().copied().unwrap_or(0), true)
            }
            Paths::Bound {
                stretches,
                next,
                order,
            } => {
                let Some(order) = order else {
                    return (u64::MAX, false);
                };
                let mut d = vec![0u64; next.len()];
                for &n in order.iter().rev() {
                    let best = next[n].iter().map(|&s| d[s]).max();
                    d[n] = w(n).saturating_add(best.unwrap_or(0));
                }
                let longest = d.into_iter().max().unwrap_or(0);
                (stretches.saturating_mul(longest), false)
            }
        }
    }
}

pub(crate) struct Input<'a> {
    pub states: &'a [State],
    pub transitions: &'a [Transition],
    pub outgoing: &'a [Vec<usize>],
    pub graph: &'a DiGraph<StateId, Edge>,
    pub initial: StateId,
    pub slots: usize,
}

pub(crate) fn compute(m: &Input) -> (WorstCase, Paths) {
    let (mut worst, paths) = exact(m).unwrap_or_else(|| upper_bound(m));
    let attempts: Vec<u64> = m
        .states
        .iter()
        .map(|s| s.agent().map_or(0, |a| a.attempts_per_visit()))
        .collect();
    worst.invocations = paths.longest(&attempts).0;
    (worst, paths)
}

/// A state and the non-zero counters of the bounded transitions still
/// reachable from it, as (slot, count) sorted by slot. Sparse, because a run
/// is usually inside one loop at a time: a dense vector of every slot would make
/// hashing and copying a configuration cost as much as the machine is large.
type Config = (u32, Box<[(u32, u32)]>);

/// One breadth-first search over configurations, then one longest-path pass
/// over their DAG; kept together because both share the index.
fn exact(m: &Input) -> Option<(WorstCase, Paths)> {
    let (relevant, groups) = relevant_slots(m);
    let start: Config = (m.initial.0, Box::new([]));
    let mut index: HashMap<Config, u32> = HashMap::new();
    let mut configs: Vec<Config> = vec![start.clone()];
    let mut succ: Vec<Vec<u32>> = Vec::new();
    index.insert(start, 0);
    let mut next = 0;
    let mut counters: Vec<(u32, u32)> = Vec::new();
    while next < configs.len() {
        let state = configs[next].0;
        let mut out = Vec::new();
        for &ti in &m.outgoing[state as usize] {
            let t = &m.transitions[ti];
            counters.clear();
            counters.extend_from_slice(&configs[next].1);
            let to = match (t.slot, t.max, t.exhausted) {
                (Some(slot), Some(max), Some(ex)) => {
                    let slot = slot as u32;
                    let i = match counters.binary_search_by_key(&slot, |&(s, _)| s) {
                        Ok(i) => i,
                        Err(i) => {
                            counters.insert(i, (slot, 0));
                            i
                        }
                    };
                    if counters[i].1 < max {
                        counters[i].1 += 1;
                        t.to
                    } else {
                        ex
                    }
                }
                _ => t.to,
            };
            // Forget the counters the run can no longer reach.
            let rel = &relevant[to.index()];
            let key: Config = (
                to.0,
                counters
                    .iter()
                    .filter(|&&(s, n)| n > 0 && rel[s as usize / 64] & (1 << (s % 64)) != 0)
                    .copied()
                    .collect(),
            );
            let id = match index.get(&key) {
                Some(&id) => id,
                None => {
                    if configs.len() >= CONFIG_LIMIT {
                        return None;
                    }
                    let id = configs.len() as u32;
                    index.insert(key.clone(), id);
                    configs.push(key);
                    id
                }
            };
            out.push(id);
        }
        succ.push(out);
        next += 1;
    }
    let order = topo_order(&succ)?;
    // Longest path to an end, computed sinks first.
    let mut dist = vec![0u64; configs.len()];
    for &v in order.iter().rev() {
        dist[v] = succ[v]
            .iter()
            .map(|&s| dist[s as usize] + 1)
            .max()
            .unwrap_or(0);
    }
    let state: Vec<u32> = configs.iter().map(|c| c.0).collect();
    let (visits, gates) = visits(m, &state, &succ, &order, &groups);
    let worst = WorstCase {
        transitions: dist[0],
        exact: true,
        visits,
        invocations: 0,
        gates,
    };
    Some((worst, Paths::Exact { state, succ, order }))
}

/// Per agent state and per human gate, the most times a run enters it,
/// over the configuration DAG (`state` of each configuration, `succ`,
/// topological `order`).
#[allow(clippy::type_complexity)]
fn visits(
    m: &Input,
    state: &[u32],
    succ: &[Vec<u32>],
    order: &[usize],
    groups: &Groups,
) -> (Vec<(StateId, u64)>, Vec<(StateId, u64)>) {
    // A run cannot come back into a strongly connected group of states once it
    // left it, so a state's visits all happen in one stay there: the DP only
    // needs the configurations of that group, and a state in no cycle is entered once.
    let mut by_group: Vec<Vec<usize>> = vec![Vec::new(); groups.count];
    for &v in order.iter().rev() {
        by_group[groups.of[state[v] as usize]].push(v);
    }
    let (mut visits, mut gates) = (Vec::new(), Vec::new());
    let mut dv = vec![0u64; state.len()];
    for (sid, st) in m.states.iter().enumerate() {
        let list = match () {
            _ if st.agent().is_some() => &mut visits,
            _ if st.is_human() => &mut gates,
            _ => continue,
        };
        let group = groups.of[sid];
        if !groups.cyclic[group] {
            list.push((StateId(sid as u32), 1));
            continue;
        }
        let mut best = 0;
        for &v in &by_group[group] {
            let here = u64::from(state[v] as usize == sid);
            let inside = succ[v]
                .iter()
                .filter(|&&s| groups.of[state[s as usize] as usize] == group)
                .map(|&s| dv[s as usize])
                .max()
                .unwrap_or(0);
            dv[v] = here + inside;
            best = best.max(dv[v]);
        }
        list.push((StateId(sid as u32), best));
    }
    (visits, gates)
}

/// Kahn's algorithm; `None` on a cycle (which the checks rule out).
fn topo_order(succ: &[Vec<u32>]) -> Option<Vec<usize>> {
    let mut indeg = vec![0u32; succ.len()];
    for out in succ {
        for &s in out {
            indeg[s as usize] += 1;
        }
    }
    let mut stack: Vec<usize> = (0..succ.len()).filter(|&v| indeg[v] == 0).collect();
    let mut order = Vec::with_capacity(succ.len());
    while let Some(v) = stack.pop() {
        order.push(v);
        for &s in &succ[v] {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                stack.push(s as usize);
            }
        }
    }
    (order.len() == succ.len()).then_some(order)
}

/// Strongly connected groups of states (over all edges, redirects included).
struct Groups {
    count: usize,
    /// Group of each state.
    of: Vec<usize>,
    /// Whether a run can enter the group more than once per state (has a cycle).
    cyclic: Vec<bool>,
}

/// Per state, a bitset of the bounded transitions still reachable from it; and the groups.
fn relevant_slots(m: &Input) -> (Vec<Vec<u64>>, Groups) {
    let words = m.slots.div_ceil(64).max(1);
    let mut per_state = vec![vec![0u64; words]; m.states.len()];
    let mut groups = Groups {
        count: 0,
        of: vec![0; m.states.len()],
        cyclic: Vec::new(),
    };
    // SCCs come sinks first, so successors are done before their predecessors.
    for scc in tarjan_scc(m.graph) {
        let cyclic = scc.len() > 1 || m.graph.find_edge(scc[0], scc[0]).is_some();
        for &n in &scc {
            groups.of[n.index()] = groups.count;
        }
        groups.cyclic.push(cyclic);
        groups.count += 1;
        let mut bits = vec![0u64; words];
        for &n in &scc {
            for &ti in &m.outgoing[n.index()] {
                if let Some(slot) = m.transitions[ti].slot {
                    bits[slot / 64] |= 1 << (slot % 64);
                }
            }
            for succ in m.graph.neighbors(n) {
                if groups.of[succ.index()] != groups.count - 1 {
                    for (b, s) in bits.iter_mut().zip(&per_state[succ.index()]) {
                        *b |= s;
                    }
                }
            }
        }
        for &n in &scc {
            per_state[n.index()].clone_from(&bits);
        }
    }
    (per_state, groups)
}

/// Between two bounded firings a run follows the acyclic graph of unbounded
/// transitions and redirects, so it has at most (Σmax + 1) such stretches.
fn upper_bound(m: &Input) -> (WorstCase, Paths) {
    let sum_max: u64 = m
        .transitions
        .iter()
        .filter(|t| t.slot.is_some())
        .map(|t| u64::from(t.max.unwrap_or(0)))
        .sum();
    let mut gu: DiGraph<(), ()> = DiGraph::with_capacity(m.states.len(), m.transitions.len());
    for _ in m.states {
        gu.add_node(());
    }
    for t in m.transitions {
        let to = match (t.slot, t.exhausted) {
            (Some(_), Some(ex)) => ex,
            _ => t.to,
        };
        gu.add_edge(
            NodeIndex::new(t.from.index()),
            NodeIndex::new(to.index()),
            (),
        );
    }
    let order: Option<Vec<usize>> = toposort(&gu, None)
        .ok()
        .map(|o| o.into_iter().map(NodeIndex::index).collect());
    let longest = match &order {
        Some(order) => {
            let mut d = vec![0u64; m.states.len()];
            for &n in order.iter().rev() {
                d[n] = gu
                    .neighbors(NodeIndex::new(n))
                    .map(|s| d[s.index()] + 1)
                    .max()
                    .unwrap_or(0);
            }
            d.into_iter().max().unwrap_or(0)
        }
        None => u64::MAX,
    };
    let stretches = sum_max.saturating_add(1);
    let each = |keep: fn(&State) -> bool| -> Vec<(StateId, u64)> {
        m.states
            .iter()
            .enumerate()
            .filter(|(_, s)| keep(s))
            .map(|(i, _)| (StateId(i as u32), stretches))
            .collect()
    };
    let worst = WorstCase {
        transitions: stretches.saturating_mul(longest).saturating_add(sum_max),
        exact: false,
        visits: each(|s| s.agent().is_some()),
        invocations: 0,
        gates: each(State::is_human),
    };
    let next = (0..m.states.len())
        .map(|n| gu.neighbors(NodeIndex::new(n)).map(|s| s.index()).collect())
        .collect();
    let paths = Paths::Bound {
        stretches,
        next,
        order,
    };
    (worst, paths)
}

#[cfg(test)]
mod tests {
    use super::Paths;

    #[test]
    fn weighted_paths_exact_and_bounded() {
        // 0 → 1 → 3, 0 → 2 → 3: the costlier branch, the start counted.
        let exact = Paths::Exact {
            state: vec![0, 1, 2, 3],
            succ: vec![vec![1, 2], vec![3], vec![3], vec![]],
            order: vec![0, 1, 2, 3],
        };
        assert_eq!(exact.longest(&[1, 5, 7, 2]), (10, true));
        // Three stretches through the acyclic graph 0 → 1 → 2, each at most 6.
        let bound = Paths::Bound {
            stretches: 3,
            next: vec![vec![1], vec![2], vec![]],
            order: Some(vec![0, 1, 2]),
        };
        assert_eq!(bound.longest(&[1, 2, 3]), (18, false));
        let cyclic = Paths::Bound {
            stretches: 1,
            next: vec![vec![0]],
            order: None,
        };
        assert_eq!(cyclic.longest(&[1]), (u64::MAX, false));
    }
}
