//! Diagrams of a machine: Mermaid (flowchart) and Graphviz dot.
//!
//! Bounded edges carry their bound (`tests_fail (max 3)`), the redirect taken
//! once the bound is used up is dashed (`tests_fail (after 3)`), and terminal
//! states are styled by outcome. A run's path, when given, is drawn over
//! it: the states it visited and the edges it took (thick and blue), each
//! edge taken more than once labelled with how often (`×2`).

use std::fmt::Write as _;

use super::machine::{Ending, Machine, StateKind, Transition};

/// A diagram language (`--format` of `modix fsm graph`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::VariantNames, strum::Display,
)]
#[strum(serialize_all = "lowercase")]
pub enum Format {
    Mermaid,
    Dot,
}

/// The transitions a run took, as recorded: `(from, event, to)` state names.
#[derive(Debug, Clone, Default)]
pub struct RunPath {
    pub steps: Vec<(String, String, String)>,
}

impl RunPath {
    /// How often the run took `from —event→ to`.
    fn count(&self, from: &str, event: &str, to: &str) -> usize {
        self.steps
            .iter()
            .filter(|(f, e, t)| f == from && e == event && t == to)
            .count()
    }

    fn visited(&self, state: &str) -> bool {
        self.steps.iter().any(|(f, _, t)| f == state || t == state)
    }
}

/// The machine drawn with `path` highlighted (nothing is, for an empty path).
pub fn render(m: &Machine, format: Format, path: &RunPath) -> String {
    match format {
        Format::Mermaid => mermaid(m, path),
        Format::Dot => dot(m, path),
    }
}

/// The colour a run's path is drawn in.
const PATH_COLOR: &str = "#1565c0";

/// `label`, with `×n` when a run took the edge more than once.
fn counted(label: String, taken: usize) -> String {
    if taken > 1 {
        format!("{label} ×{taken}")
    } else {
        label
    }
}

fn label(t: &Transition) -> String {
    match t.max {
        Some(max) => format!("{} (max {max})", t.event),
        None => t.event.clone(),
    }
}

fn redirect_label(t: &Transition) -> String {
    format!("{} (after {})", t.event, t.max.unwrap_or(0))
}

pub fn mermaid(m: &Machine, path: &RunPath) -> String {
    let esc = |s: &str| s.replace('"', "#quot;");
    let name = |id: super::machine::StateId| m.state(id).name.as_str();
    let mut out = String::from("flowchart LR\n");
    let _ = writeln!(out, "    start_((\"start\")) --> s{}", m.initial().index());
    // Mermaid styles links by their index in order of appearance.
    let mut taken_links: Vec<usize> = Vec::new();
    if !path.steps.is_empty() {
        taken_links.push(0);
    }
    let mut link = 1;
    for (id, s) in m.states() {
        let name = esc(&s.name);
        let node = match &s.kind {
            StateKind::Terminal { .. } => format!("((\"{name}\"))"),
            StateKind::Input { .. } => format!("[/\"{name}\"/]"),
            StateKind::Agent(a) => format!("[\"{name}<br/>{}\"]", esc(&a.agent)),
        };
        let _ = writeln!(out, "    s{}{node}", id.index());
    }
    for t in m.transitions() {
        let (from, to) = (t.from.index(), t.to.index());
        let taken = path.count(name(t.from), &t.event, name(t.to));
        let _ = writeln!(
            out,
            "    s{from} -->|\"{}\"| s{to}",
            esc(&counted(label(t), taken))
        );
        if taken > 0 {
            taken_links.push(link);
        }
        link += 1;
        if let Some(ex) = t.exhausted {
            let taken = path.count(name(t.from), &t.event, name(ex));
            let _ = writeln!(
                out,
                "    s{from} -.->|\"{}\"| s{}",
                esc(&counted(redirect_label(t), taken)),
                ex.index()
            );
            if taken > 0 {
                taken_links.push(link);
            }
            link += 1;
        }
    }
    out.push_str("    classDef success fill:#d4edda,stroke:#2e7d32,stroke-width:2px\n");
    out.push_str("    classDef failure fill:#f8d7da,stroke:#c62828,stroke-width:2px\n");
    for (id, s) in m.states() {
        if let StateKind::Terminal { outcome } = s.kind {
            let class = match outcome {
                Ending::Success => "success",
                Ending::Failure => "failure",
            };
            let _ = writeln!(out, "    class s{} {class}", id.index());
        }
    }
    if !path.steps.is_empty() {
        let visited: Vec<String> = m
            .states()
            .filter(|(_, s)| path.visited(&s.name))
            .map(|(id, _)| format!("s{}", id.index()))
            .collect();
        let _ = writeln!(
            out,
            "    classDef visited stroke:{PATH_COLOR},stroke-width:4px"
        );
        let _ = writeln!(out, "    class {} visited", visited.join(","));
        let links: Vec<String> = taken_links.iter().map(usize::to_string).collect();
        let _ = writeln!(
            out,
            "    linkStyle {} stroke:{PATH_COLOR},stroke-width:3px",
            links.join(",")
        );
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}

pub fn dot(m: &Machine, path: &RunPath) -> String {
    let name = |id: super::machine::StateId| m.state(id).name.as_str();
    // Attributes of an edge the run took (none for one it did not).
    let taken_attrs = |n: usize| {
        if n > 0 {
            format!(", color=\"{PATH_COLOR}\", fontcolor=\"{PATH_COLOR}\", penwidth=2.5")
        } else {
            String::new()
        }
    };
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", quote(m.id()));
    out.push_str("    rankdir=LR;\n");
    out.push_str("    node [shape=box, style=rounded, fontname=\"Helvetica\"];\n");
    out.push_str("    edge [fontname=\"Helvetica\", fontsize=10];\n");
    out.push_str("    __start [shape=point, label=\"\"];\n");
    let start_attrs = if path.steps.is_empty() {
        String::new()
    } else {
        format!(" [color=\"{PATH_COLOR}\", penwidth=2.5]")
    };
    let _ = writeln!(
        out,
        "    __start -> {}{start_attrs};",
        quote(&m.state(m.initial()).name)
    );
    for (_, s) in m.states() {
        let mut attrs = match &s.kind {
            StateKind::Terminal {
                outcome: Ending::Success,
            } => "shape=doublecircle, style=filled, fillcolor=\"#d4edda\", color=\"#2e7d32\""
                .to_owned(),
            StateKind::Terminal {
                outcome: Ending::Failure,
            } => "shape=doublecircle, style=filled, fillcolor=\"#f8d7da\", color=\"#c62828\""
                .to_owned(),
            StateKind::Input { .. } => "shape=parallelogram".to_owned(),
            // `\n` is dot's own line break inside a label.
            StateKind::Agent(a) => format!("label=\"{}\\n{}\"", escape(&s.name), escape(&a.agent)),
        };
        if path.visited(&s.name) {
            // A terminal keeps its outcome's colour; the thick border says "visited".
            if !matches!(s.kind, StateKind::Terminal { .. }) {
                let _ = write!(attrs, ", color=\"{PATH_COLOR}\"");
            }
            attrs.push_str(", penwidth=3");
        }
        let _ = writeln!(out, "    {} [{attrs}];", quote(&s.name));
    }
    for t in m.transitions() {
        let from = quote(name(t.from));
        let taken = path.count(name(t.from), &t.event, name(t.to));
        let _ = writeln!(
            out,
            "    {from} -> {} [label={}{}];",
            quote(name(t.to)),
            quote(&counted(label(t), taken)),
            taken_attrs(taken)
        );
        if let Some(ex) = t.exhausted {
            let taken = path.count(name(t.from), &t.event, name(ex));
            let _ = writeln!(
                out,
                "    {from} -> {} [label={}, style=dashed{}];",
                quote(name(ex)),
                quote(&counted(redirect_label(t), taken)),
                taken_attrs(taken)
            );
        }
    }
    out.push_str("}\n");
    out
}
