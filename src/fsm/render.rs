//! Diagrams of a machine: Mermaid (flowchart) and Graphviz dot.
//!
//! Bounded edges carry their bound (`tests_fail (max 3)`), the redirect taken
//! once the bound is used up is dashed (`tests_fail (after 3)`), and terminal
//! states are styled by outcome.

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

pub fn render(m: &Machine, format: Format) -> String {
    match format {
        Format::Mermaid => mermaid(m),
        Format::Dot => dot(m),
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

pub fn mermaid(m: &Machine) -> String {
    let esc = |s: &str| s.replace('"', "#quot;");
    let mut out = String::from("flowchart LR\n");
    let _ = writeln!(out, "    start_((\"start\")) --> s{}", m.initial().index());
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
        let _ = writeln!(out, "    s{from} -->|\"{}\"| s{to}", esc(&label(t)));
        if let Some(ex) = t.exhausted {
            let _ = writeln!(
                out,
                "    s{from} -.->|\"{}\"| s{}",
                esc(&redirect_label(t)),
                ex.index()
            );
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
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}

pub fn dot(m: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", quote(m.id()));
    out.push_str("    rankdir=LR;\n");
    out.push_str("    node [shape=box, style=rounded, fontname=\"Helvetica\"];\n");
    out.push_str("    edge [fontname=\"Helvetica\", fontsize=10];\n");
    out.push_str("    __start [shape=point, label=\"\"];\n");
    let _ = writeln!(out, "    __start -> {};", quote(&m.state(m.initial()).name));
    for (_, s) in m.states() {
        let attrs = match &s.kind {
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
        let _ = writeln!(out, "    {} [{attrs}];", quote(&s.name));
    }
    for t in m.transitions() {
        let from = quote(&m.state(t.from).name);
        let _ = writeln!(
            out,
            "    {from} -> {} [label={}];",
            quote(&m.state(t.to).name),
            quote(&label(t))
        );
        if let Some(ex) = t.exhausted {
            let _ = writeln!(
                out,
                "    {from} -> {} [label={}, style=dashed];",
                quote(&m.state(ex).name),
                quote(&redirect_label(t))
            );
        }
    }
    out.push_str("}\n");
    out
}
