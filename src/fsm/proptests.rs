//! Property tests: any machine that passes the checks ends within its printed
//! worst case whatever events arrive, and no input panics the loader or checker.

use std::fmt::Write as _;

use proptest::prelude::*;

use super::{Catalog, CompileOptions, FireError, compile_str};

/// One generated transition: from, event number, target, optional (max, exhausted).
type GenEdge = (usize, usize, usize, Option<(u32, usize)>);

/// A TOML machine over states S0..Sn plus DONE and FAIL; targets are indexes
/// into that list (n = DONE, n+1 = FAIL). Unbounded edges mostly go forward
/// so a good share of machines pass the check.
fn machine_toml(n: usize, edges: &[GenEdge]) -> String {
    let name = |i: usize| match i {
        i if i < n => format!("S{i}"),
        i if i == n => "DONE".to_owned(),
        _ => "FAIL".to_owned(),
    };
    let mut t = String::from("id = \"gen\"\nversion = \"0.1.0\"\ninitial = \"S0\"\n");
    for i in 0..n {
        let mut events: Vec<usize> = edges.iter().filter(|e| e.0 == i).map(|e| e.1).collect();
        events.dedup();
        let _ = write!(
            t,
            "\n[states.S{i}]\nkind = \"agent\"\nagent = \"a\"\noutput = \"any\"\nemit = ["
        );
        for ev in events {
            let _ = write!(
                t,
                "{{ on = \"output\", when = \"k == {ev}\", event = \"e{ev}\" }}, "
            );
        }
        t.push_str("]\n");
    }
    t.push_str("\n[states.DONE]\nkind = \"terminal\"\noutcome = \"success\"\n");
    t.push_str("\n[states.FAIL]\nkind = \"terminal\"\noutcome = \"failure\"\n");
    for (from, ev, to, bound) in edges {
        let _ = write!(
            t,
            "\n[[transitions]]\nfrom = \"{}\"\nevent = \"e{ev}\"\nto = \"{}\"\n",
            name(*from),
            name(*to)
        );
        if let Some((max, ex)) = bound {
            let _ = writeln!(t, "max = {max}\nexhausted = \"{}\"", name(*ex));
        }
    }
    t
}

fn gen_machine() -> impl Strategy<Value = String> {
    (1usize..7).prop_flat_map(|n| {
        let edge = (
            0..n,
            0usize..4,
            0..n + 2,
            prop::option::of((1u32..4, 0..n + 2)),
            any::<bool>(),
        )
            .prop_map(move |(from, ev, to, bound, wild)| {
                // Unbounded edges go forward (or anywhere when `wild`).
                let to = if bound.is_none() && !wild && to <= from {
                    n
                } else {
                    to
                };
                let bound = bound.map(|(m, ex)| (m, if ex <= from { n + 1 } else { ex }));
                (from, ev, to, bound)
            });
        // A chain S0 → S1 → … → DONE keeps most states reachable.
        let chain: Vec<GenEdge> = (0..n).map(|i| (i, 9, i + 1, None)).collect();
        prop::collection::vec(edge, 0..12).prop_map(move |mut edges| {
            edges.extend(chain.iter().copied());
            machine_toml(n, &edges)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn checked_machines_end_within_their_worst_case(
        text in gen_machine(),
        choices in prop::collection::vec(any::<prop::sample::Index>(), 64),
        noise in prop::collection::vec(0usize..12, 64),
    ) {
        let (machine, _) = compile_str(&text, "gen.toml", &CompileOptions::default());
        let Some(m) = machine else { return Ok(()) };
        let bound = m.worst_case().transitions;
        // Walk choosing among the enabled events: must end within the bound.
        let mut pos = m.start();
        let mut steps = 0u64;
        let mut i = 0;
        while !pos.is_terminal(&m) {
            let out: Vec<&str> = m.transitions().iter()
                .filter(|t| t.from == pos.state()).map(|t| t.event.as_str()).collect();
            prop_assert!(!out.is_empty(), "stuck in a non-terminal state");
            let ev = choices[i % choices.len()].get(&out);
            i += 1;
            pos = m.fire(&pos, ev).expect("enabled event fires").position;
            steps += 1;
            prop_assert!(steps <= bound, "{steps} steps > worst case {bound}\n{text}");
        }
        let ended = matches!(m.fire(&pos, "e0"), Err(FireError::Terminal { .. }));
        prop_assert!(ended);
        // Arbitrary events (some unknown): errors, never panics, still bounded.
        let mut pos = m.start();
        let mut fired = 0u64;
        for k in &noise {
            match m.fire(&pos, &format!("e{k}")) {
                Ok(f) => { pos = f.position; fired += 1; }
                Err(FireError::Terminal { .. }) => break,
                Err(FireError::NoTransition { .. }) => {}
            }
        }
        prop_assert!(fired <= bound);
    }

    #[test]
    fn random_text_never_panics(text in ".{0,400}") {
        let _ = compile_str(&text, "fuzz.toml", &CompileOptions::default());
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = compile_str(&text, "fuzz.toml", &CompileOptions::default());
    }

    #[test]
    fn mangled_shipped_machine_never_panics(cut in 0usize..2000, insert in "[\\[\\]=\"a-z0-9 \n.{},]{0,12}") {
        let base = include_str!("../../fsm/plan_execute_test.toml");
        let mut at = cut.min(base.len());
        while !base.is_char_boundary(at) { at -= 1; }
        let text = format!("{}{insert}{}", &base[..at], &base[at..]);
        let _ = compile_str(&text, "fuzz.toml", &CompileOptions::default());
    }
}

#[test]
fn shipped_machines_load_clean() {
    let (cat, diags) = Catalog::load(None, &CompileOptions::default());
    assert!(diags.is_empty(), "{:?}", diags.items());
    let m = cat.get("plan_execute_test").expect("shipped");
    assert_eq!(m.worst_case().transitions, 12);
    assert!(m.worst_case().exact);
    let visits = |n: &str| m.bound_for_visits(m.state_id(n).expect("state"));
    assert_eq!(visits("PLANNING"), Some(1));
    assert_eq!(visits("EXECUTING"), Some(6));
    assert_eq!(visits("TESTING"), Some(4));
    assert_eq!(visits("DONE"), None);
    assert_eq!(
        cat.get("execution_fsm_v1")
            .expect("shipped")
            .worst_case()
            .transitions,
        2
    );
}

#[test]
fn bounded_transition_redirects_when_used_up() {
    let (cat, _) = Catalog::load(None, &CompileOptions::default());
    let m = cat.get("plan_execute_test").expect("shipped");
    let mut pos = m.start();
    for ev in ["epic_received", "task_spec_valid"] {
        pos = m.fire(&pos, ev).expect("fires").position;
    }
    for n in 1..=2 {
        let f = m.fire(&pos, "execution_rejected").expect("fires");
        assert!(!f.redirected);
        assert_eq!((f.count, f.max), (n, Some(2)));
        pos = f.position;
    }
    let f = m.fire(&pos, "execution_rejected").expect("fires");
    assert!(f.redirected);
    assert_eq!(m.state(f.to).name, "FAILED");
    assert!(f.position.is_terminal(m));
    assert_eq!(
        m.fire(&pos, "nope"),
        Err(FireError::NoTransition {
            state: "EXECUTING".into(),
            event: "nope".into()
        })
    );
}

#[test]
fn large_generated_machine_is_exact_and_fast_enough() {
    let text = super::bench_support::chain_machine(1000);
    let (m, d) = compile_str(&text, "big.toml", &CompileOptions::default());
    assert!(!d.has_errors(), "{:?}", d.items().first());
    let m = m.expect("compiles");
    assert!(m.worst_case().exact);
    // start, 997 agent states and DONE, plus 2 × (retry + 5 steps back) per loop.
    assert_eq!(m.worst_case().transitions, 998 + 99 * 12);
    let s10 = m.state_id("S10").expect("state");
    assert_eq!(m.bound_for_visits(s10), Some(3));
}
