//! Text from agents and epics reaches the terminal escaped: an agent's
//! reason or output, or an epic, cannot clear the screen, retitle the
//! window, ring the bell or overwrite what was printed — in `go`'s
//! progress, `-v`'s echo, every `history` form and error messages. `--json`
//! keeps the raw text (JSON-escaped).

use crate::scenarios;
use crate::util::{Sandbox, output_text};

/// Clear the screen, retitle the window (OSC 0 … BEL), a carriage return
/// and backspaces that would overwrite text, a C1 CSI, a bidi override.
const HOSTILE: &str =
    "\x1b[2J\x1b]0;pwned\x07 over\rwrite back\x08\x08 \u{9b}31m red \u{202e}desrever";

/// How `HOSTILE` reads once escaped.
const SHOWN: &str = "␛[2J␛]0;pwned␇ over␍write back␈␈ \\u{9b}31m red \\u{202e}desrever";

/// Fails if `text` holds a character that a terminal would obey (a CR
/// ending a line, CRLF, moves nothing).
fn assert_inert(what: &str, text: &str) {
    let bad: Vec<char> = text
        .replace("\r\n", "\n")
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c)
        })
        .collect();
    assert!(bad.is_empty(), "{what} printed {bad:?}:\n{text:?}");
}

/// The example, with an executor whose summary, stdout and stderr carry
/// `HOSTILE`, and a tester that passes.
fn hostile_agent() -> Sandbox {
    let sb = Sandbox::example();
    // The summary is JSON, so its controls are JSON escapes; stdout and
    // stderr get them raw, as a CLI would print them.
    let json = serde_json::json!({
        "outcome": "success",
        "summary": HOSTILE,
        "files_changed": ["calc.py"],
        "error": null
    })
    .to_string()
    .replace('\'', r"'\''");
    scenarios::agent(
        &sb,
        &format!(
            "    echo '# changed' >> calc.py\n    printf '\\033[2J\\033]0;stderr-title\\007 progress\\r50%%\\010\\n' >&2\n    printf 'noise \\033[31mred\\033[0m\\r\\n'\n    printf '%s\\n' '{json}'"
        ),
    );
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["command"] = serde_json::json!(["true"])
    });
    sb
}

fn run_ok(sb: &Sandbox, args: &[&str]) -> (String, String) {
    let out = sb.modix().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn an_agents_escape_sequences_are_shown_not_obeyed() {
    let sb = hostile_agent();
    let (stdout, stderr) = run_ok(&sb, &["-v", "go", HOSTILE]);
    assert_inert("go's summary", &stdout);
    assert_inert("go's progress and -v echo", &stderr);
    assert!(stderr.contains(SHOWN), "the reason, escaped: {stderr}");
    assert!(
        stderr.contains("[executor] ␛[2J␛]0;stderr-title␇ progress␍50%␈"),
        "the echoed stderr line, escaped: {stderr}"
    );

    let run = sb.runs()[0]["run_id"].as_str().unwrap().to_owned();
    let (list, _) = run_ok(&sb, &["history"]);
    assert_inert("history", &list);
    assert!(list.contains("␛[2J␛]0;pwned␇"), "the epic, escaped: {list}");
    let (one, _) = run_ok(&sb, &["history", &run]);
    assert_inert("history RUN", &one);
    assert!(one.contains(&format!("Epic: {SHOWN}")), "{one}");
    assert!(one.contains(SHOWN), "the reason, escaped: {one}");
    let (timeline, _) = run_ok(&sb, &["history", &run, "--timeline"]);
    assert_inert("history RUN --timeline", &timeline);
    let (inv, _) = run_ok(&sb, &["history", &run, "--invocation", "2"]);
    assert_inert("history RUN --invocation 2", &inv);
    assert!(
        inv.contains("noise ␛[31mred␛[0m\r\n"),
        "stdout, escaped: {inv:?}"
    );
    assert!(inv.contains("␛]0;stderr-title␇"), "stderr, escaped: {inv}");
}

#[test]
fn json_keeps_the_raw_text() {
    let sb = hostile_agent();
    let r = sb.go_json(HOSTILE);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.transitions
            .iter()
            .any(|t| t["reason"].as_str().unwrap().contains(HOSTILE)),
        "{:?}",
        r.transitions
    );
    let run = r.run_id();
    let (one, _) = run_ok(&sb, &["history", &run, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["run"]["epic"], HOSTILE);
    let inv = sb.invocation(&run, 2);
    assert!(
        inv["stderr"]
            .as_str()
            .unwrap()
            .contains("\x1b]0;stderr-title\x07")
    );
}

#[test]
fn error_messages_escape_what_the_user_typed() {
    let sb = Sandbox::example();
    let out = sb
        .modix()
        .args(["go", "--workflow", "\x1b]0;pwned\x07nope", "epic"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_inert("the error", &text);
    assert!(text.contains("␛]0;pwned␇nope"), "{text}");
}
