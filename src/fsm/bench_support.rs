//! Generated machines for benchmarks and tests (not part of the stable API).

use std::fmt::Write as _;

/// A valid machine of `n` states (n ≥ 4): an input state, a chain of agent
/// states, DONE and FAILED. Every 10th agent state may loop 5 states back, at
/// most twice, so the checks and the worst case have real work to do.
pub fn chain_machine(n: usize) -> String {
    let agents = n.saturating_sub(3).max(1);
    let mut t = String::from(
        "id = \"chain\"\nversion = \"1.0.0\"\ndescription = \"generated\"\ninitial = \"S0\"\n\n\
         [states.S0]\nkind = \"input\"\nevent = \"start\"\n",
    );
    let next = |i: usize| {
        if i == agents {
            "DONE".to_owned()
        } else {
            format!("S{}", i + 1)
        }
    };
    for i in 1..=agents {
        // Only the looping states can ask for a retry.
        let (ok_when, retry) = if i % 10 == 0 {
            (
                ", when = \"ok == true\"",
                "\n  { on = \"output\", event = \"retry\" },",
            )
        } else {
            ("", "")
        };
        let _ = write!(
            t,
            "\n[states.S{i}]\nkind = \"agent\"\nagent = \"worker\"\noutput = \"any\"\nemit = [\n  \
             {{ on = \"output\"{ok_when}, event = \"ok\" }},{retry}\n  \
             {{ on = \"invalid_output\", event = \"err\" }},\n  \
             {{ on = \"process_error\", event = \"err\" }},\n  \
             {{ on = \"timeout\", event = \"err\" }},\n]\n"
        );
    }
    t.push_str("\n[states.DONE]\nkind = \"terminal\"\noutcome = \"success\"\n");
    t.push_str("\n[states.FAILED]\nkind = \"terminal\"\noutcome = \"failure\"\n");
    let _ = write!(
        t,
        "\n[[transitions]]\nfrom = \"S0\"\nevent = \"start\"\nto = \"S1\"\n"
    );
    for i in 1..=agents {
        let _ = write!(
            t,
            "\n[[transitions]]\nfrom = \"S{i}\"\nevent = \"ok\"\nto = \"{}\"\n\n\
             [[transitions]]\nfrom = \"S{i}\"\nevent = \"err\"\nto = \"FAILED\"\n",
            next(i)
        );
        if i % 10 != 0 {
            continue;
        }
        let back = i.saturating_sub(5).max(1);
        let _ = write!(
            t,
            "\n[[transitions]]\nfrom = \"S{i}\"\nevent = \"retry\"\nto = \"S{back}\"\nmax = 2\nexhausted = \"FAILED\"\n"
        );
    }
    t
}

/// The parse step alone (TOML text to the raw file), for the benchmarks.
pub fn parse_only(text: &str) -> bool {
    let doc = super::spec::parse(text, "bench.toml");
    doc.is_ok_and(|doc| super::spec::raw(&doc, text, "bench.toml").is_ok())
}
