//! Diagrams of a machine: Mermaid (flowchart) and Graphviz dot.
//!
//! Bounded edges carry their bound (`tests_fail (max 3)`), the redirect taken
//! once the bound is used up is dashed (`tests_fail (after 3)`), the
//! transitions of a state's `catch` rules are one dotted edge per target
//! (`catch: auth, not_found`), human gates are hexagons, and terminal
//! states are styled by outcome. A run's path, when given, is drawn over
//! it: the states it visited and the edges it took (thick and blue), each
//! edge taken more than once labelled with how often (`×2`).

use std::fmt::Write as _;

use super::machine::{Ending, Machine, StateId, StateKind, Transition};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    /// Where a bounded transition goes once its bound is used up.
    Redirect,
    /// The synthesised transitions of `catch` rules.
    Catch,
}

/// One arrow of a diagram: a transition, its redirect, or every catch
/// transition between two states (one arrow, so a state catching four
/// classes does not draw four).
struct Arrow<'m> {
    from: StateId,
    to: StateId,
    label: String,
    style: Style,
    events: Vec<&'m str>,
}

impl Arrow<'_> {
    /// How often the run took this arrow.
    fn taken(&self, m: &Machine, path: &RunPath) -> usize {
        let (from, to) = (&m.state(self.from).name, &m.state(self.to).name);
        self.events.iter().map(|e| path.count(from, e, to)).sum()
    }
}

fn arrows(m: &Machine) -> Vec<Arrow<'_>> {
    let mut out: Vec<Arrow> = Vec::new();
    for t in m.transitions() {
        if let Some(class) = t.caught() {
            let same = |a: &&mut Arrow| a.style == Style::Catch && a.from == t.from && a.to == t.to;
            match out.iter_mut().find(|a| same(a)) {
                Some(a) => {
                    a.label.push_str(&format!(", {class}"));
                    a.events.push(&t.event);
                }
                None => out.push(Arrow {
                    from: t.from,
                    to: t.to,
                    label: format!("catch: {class}"),
                    style: Style::Catch,
                    events: vec![&t.event],
                }),
            }
            continue;
        }
        out.push(Arrow {
            from: t.from,
            to: t.to,
            label: label(t),
            style: Style::Plain,
            events: vec![&t.event],
        });
        if let Some(ex) = t.exhausted {
            out.push(Arrow {
                from: t.from,
                to: ex,
                label: redirect_label(t),
                style: Style::Redirect,
                events: vec![&t.event],
            });
        }
    }
    out
}

pub fn mermaid(m: &Machine, path: &RunPath) -> String {
    let esc = |s: &str| s.replace('"', "#quot;");
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
            StateKind::Human { .. } => format!("{{{{\"{name}<br/>human\"}}}}"),
        };
        let _ = writeln!(out, "    s{}{node}", id.index());
    }
    for a in arrows(m) {
        let taken = a.taken(m, path);
        let arrow = match a.style {
            Style::Plain => "-->",
            Style::Redirect | Style::Catch => "-.->",
        };
        let _ = writeln!(
            out,
            "    s{} {arrow}|\"{}\"| s{}",
            a.from.index(),
            esc(&counted(a.label, taken)),
            a.to.index()
        );
        if taken > 0 {
            taken_links.push(link);
        }
        link += 1;
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
            StateKind::Human { .. } => {
                format!("shape=hexagon, label=\"{}\\nhuman\"", escape(&s.name))
            }
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
    for a in arrows(m) {
        let taken = a.taken(m, path);
        let style = match a.style {
            Style::Plain => "",
            Style::Redirect => ", style=dashed",
            // A taken catch is drawn in the path's colour like any edge.
            Style::Catch if taken > 0 => ", style=dotted",
            Style::Catch => ", style=dotted, color=\"#c62828\", fontcolor=\"#c62828\"",
        };
        let _ = writeln!(
            out,
            "    {} -> {} [label={}{style}{}];",
            quote(name(a.from)),
            quote(name(a.to)),
            quote(&counted(a.label, taken)),
            taken_attrs(taken)
        );
    }
    out.push_str("}\n");
    out
}
