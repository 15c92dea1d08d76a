//! `modix fsm graph --run RUN`: the workflow with the path a run took, and
//! `--format svg` through Graphviz.

use crate::util::{Sandbox, output_text};

fn graph(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb
        .modix()
        .args(["fsm", "graph"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_path_a_run_took_is_highlighted() {
    let sb = Sandbox::example();
    // INIT → PLANNING → EXECUTING → TESTING → EXECUTING → TESTING → DONE.
    let run = sb.go_json("Fix mean()").run_id();

    let dot = graph(
        &sb,
        &["plan_execute_test", "--run", &run[..8], "--format", "dot"],
    );
    let taken = "color=\"#1565c0\", fontcolor=\"#1565c0\", penwidth=2.5";
    assert!(
        dot.contains(&format!(
            "\"EXECUTING\" -> \"TESTING\" [label=\"execution_done ×2\", {taken}];"
        )),
        "{dot}"
    );
    assert!(
        dot.contains(&format!(
            "\"TESTING\" -> \"DONE\" [label=\"tests_pass\", {taken}];"
        )),
        "{dot}"
    );
    // Edges and states it did not take stay as they were.
    assert!(
        dot.contains("\"TESTING\" -> \"FAILED\" [label=\"tests_fail (after 3)\", style=dashed];"),
        "{dot}"
    );
    assert!(dot.contains("\"DONE\" [shape=doublecircle, style=filled, fillcolor=\"#d4edda\", color=\"#2e7d32\", penwidth=3];"), "{dot}");
    assert!(!dot.contains("\"FAILED\" [shape=doublecircle, style=filled, fillcolor=\"#f8d7da\", color=\"#c62828\", penwidth"), "{dot}");

    // Mermaid: `--run` alone is the newest run, and the id is the run's workflow.
    let mermaid = graph(&sb, &["--run"]);
    assert!(mermaid.starts_with("flowchart LR"), "{mermaid}");
    assert!(
        mermaid.contains("s2 -->|\"execution_done ×2\"| s3"),
        "{mermaid}"
    );
    assert!(
        mermaid.contains("class s0,s1,s2,s3,s4 visited"),
        "{mermaid}"
    );
    let link_style = mermaid
        .lines()
        .find(|l| l.trim_start().starts_with("linkStyle"))
        .unwrap_or_else(|| panic!("no linkStyle: {mermaid}"));
    // start, INIT→PLANNING, PLANNING→EXECUTING, EXECUTING→TESTING, TESTING→EXECUTING, TESTING→DONE.
    let links: Vec<&str> = link_style
        .split_whitespace()
        .nth(1)
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(links.len(), 6, "{link_style}");
    // Without --run, nothing is highlighted.
    let plain = graph(&sb, &["plan_execute_test"]);
    assert!(
        !plain.contains("visited") && !plain.contains("linkStyle"),
        "{plain}"
    );

    // A run of another workflow is refused, saying which.
    let out = sb
        .modix()
        .args(["fsm", "graph", "execution_fsm_v1", "--run", "last"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        output_text(&out).contains("the run used workflow `plan_execute_test`"),
        "{}",
        output_text(&out)
    );
    let out = sb
        .modix()
        .args(["fsm", "graph", "--run", "ZZZZ"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn svg_needs_graphviz_and_says_so() {
    let sb = Sandbox::new();
    // A PATH without Graphviz.
    let out = sb
        .modix()
        .env("PATH", sb.bin())
        .args(["fsm", "graph", "plan_execute_test", "--format", "svg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = output_text(&out);
    assert!(
        text.contains("--format svg needs Graphviz's `dot`, which is not on PATH")
            && text.contains("install Graphviz"),
        "{text}"
    );
    if which::which("dot").is_err() {
        eprintln!("note: Graphviz `dot` not on PATH; skipped drawing the SVG");
        return;
    }
    let svg = graph(&sb, &["plan_execute_test", "--format", "svg"]);
    assert!(svg.contains("<svg") && svg.contains("TESTING"), "{svg}");
}
