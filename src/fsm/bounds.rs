//! The worst case of a checked machine: the most transitions any run can take,
//! and the most times a run can enter each agent state (= agent invocations).
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
}

pub(crate) struct Input<'a> {
    pub states: &'a [State],
    pub transitions: &'a [Transition],
    pub outgoing: &'a [Vec<usize>],
    pub graph: &'a DiGraph<StateId, Edge>,
    pub initial: StateId,
    pub slots: usize,
}

pub(crate) fn compute(m: &Input) -> WorstCase {
    exact(m).unwrap_or_else(|| upper_bound(m))
}

/// A state and the non-zero counters of the bounded transitions still
/// reachable from it, as (slot, count) sorted by slot. Sparse, because a run
/// is usually inside one loop at a time: a dense vector of every slot would make
/// hashing and copying a configuration cost as much as the machine is large.
type Config = (u32, Box<[(u32, u32)]>);

/// One breadth-first search over configurations, then one longest-path pass
/// over their DAG; kept together because both share the index.
fn exact(m: &Input) -> Option<WorstCase> {
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
    // A run cannot come back into a strongly connected group of states once it
    // left it, so a state's visits all happen in one stay there: the DP only
    // needs the configurations of that group, and a state in no cycle is entered once.
    let mut by_group: Vec<Vec<usize>> = vec![Vec::new(); groups.count];
    for &v in order.iter().rev() {
        by_group[groups.of[configs[v].0 as usize]].push(v);
    }
    let mut visits = Vec::new();
    let mut dv = vec![0u64; configs.len()];
    for (sid, st) in m.states.iter().enumerate() {
        if st.agent().is_none() {
            continue;
        }
        let group = groups.of[sid];
        if !groups.cyclic[group] {
            visits.push((StateId(sid as u32), 1));
            continue;
        }
        let mut best = 0;
        for &v in &by_group[group] {
            let here = u64::from(configs[v].0 as usize == sid);
            let inside = succ[v]
                .iter()
                .filter(|&&s| groups.of[configs[s as usize].0 as usize] == group)
                .map(|&s| dv[s as usize])
                .max()
                .unwrap_or(0);
            dv[v] = here + inside;
            best = best.max(dv[v]);
        }
        visits.push((StateId(sid as u32), best));
    }
    Some(WorstCase {
        transitions: dist[0],
        exact: true,
        visits,
    })
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
fn upper_bound(m: &Input) -> WorstCase {
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
    let longest = match toposort(&gu, None) {
        Ok(order) => {
            let mut d = vec![0u64; m.states.len()];
            for n in order.iter().rev() {
                d[n.index()] = gu
                    .neighbors(*n)
                    .map(|s| d[s.index()] + 1)
                    .max()
                    .unwrap_or(0);
            }
            d.into_iter().max().unwrap_or(0)
        }
        Err(_) => u64::MAX,
    };
    let stretches = sum_max.saturating_add(1);
    let visits = m
        .states
        .iter()
        .enumerate()
        .filter(|(_, s)| s.agent().is_some())
        .map(|(i, _)| (StateId(i as u32), stretches))
        .collect();
    WorstCase {
        transitions: stretches.saturating_mul(longest).saturating_add(sum_max),
        exact: false,
        visits,
    }
}
