//! Output on a terminal and in a pipe: tables that fit (or tab-separated
//! rows), colour only where asked, `-q`, `-v` and Ctrl-C leaving no live
//! line behind, one-line config warnings during `go`.

use crate::scenarios;
use crate::term::{Screen, on_terminal, too_wide};
use crate::util::{Sandbox, output_text};

const LONG_EPIC: &str = "Make mean() in calc.py round to two places, keep the empty-list error, and document both in the module docstring";

/// Snapshot filters for a terminal: run ids (whole or short), times and durations.
fn settings(sb: &Sandbox) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    s.add_filter(
        &regex::escape(&sb.dir.path().display().to_string()),
        "[SANDBOX]",
    );
    s.add_filter(r"\b01[0-9A-HJKMNP-TV-Z]{6,24}\b", "[RUN_ID]");
    s.add_filter(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", "[DATETIME]");
    s.add_filter(r"\b\d{2}:\d{2}:\d{2}\b", "[TIME]");
    s.add_filter(r"\b\d+\.\d+s\b", "[DUR]");
    s.add_filter(r"just now|\b\d+[smhd] ago", "[AGO]");
    s.add_filter(r"\b[0-9a-f]{10,40}\b", "[COMMIT]");
    // Widths follow the filtered text: pin the content, not the padding.
    s.add_filter(r"─+", "─");
    s.add_filter(r"═+", "═");
    s.add_filter(r" {2,}([┆│])", " $1");
    s
}

#[test]
fn tables_fit_the_terminal_and_pipes_get_tab_separated_rows() {
    let sb = Sandbox::example();
    let run = sb.go_json(LONG_EPIC).run_id();
    for cols in [60, 100] {
        let Some((code, text)) = on_terminal(&sb, &["history"], cols, &[]) else {
            return;
        };
        assert_eq!(code, Some(0), "{text}");
        assert!(
            too_wide(&text, cols).is_empty(),
            "wider than {cols}:\n{text}"
        );
        // The epic is the widest column: it is cut, with a mark.
        assert!(text.contains("Make mean()") && text.contains('…'), "{text}");
        assert!(!text.contains(LONG_EPIC), "{text}");
        // Short ids and relative times on a terminal.
        assert!(text.contains(&run[..8]) && !text.contains(&run), "{text}");
    }
    let Some((_, wide)) = on_terminal(&sb, &["history"], 100, &[]) else {
        return;
    };
    let ago = regex::Regex::new(r"just now|\b\d+[smh] ago").unwrap();
    assert!(ago.is_match(&wide), "{wide}");

    // Piped: one tab-separated row per run, whole values, for awk.
    let out = sb.modix().arg("history").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 8, "{text}");
    assert_eq!(fields[0], run);
    assert!(fields[1].parse::<jiff::Timestamp>().is_ok(), "{text}");
    assert_eq!(fields[2], LONG_EPIC);
    assert!(!text.contains('│') && !text.contains('…'), "{text}");
}

#[test]
fn human_history_on_a_terminal() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    let Some((_, list)) = on_terminal(&sb, &["history"], 100, &[]) else {
        return;
    };
    let Some((_, one)) = on_terminal(&sb, &["history", "last"], 100, &[]) else {
        return;
    };
    settings(&sb).bind(|| {
        insta::assert_snapshot!("terminal_history", list);
        insta::assert_snapshot!("terminal_history_run", one);
    });
}

/// The reason column of a `history RUN` table, each row's lines joined.
fn reasons(table: &str) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for line in table.lines().filter(|l| l.starts_with('│')) {
        let cells: Vec<&str> = line.trim_matches('│').split('┆').collect();
        let (first, reason) = (cells[0].trim(), cells[cells.len() - 1].trim());
        match rows.last_mut() {
            Some(r) if first.is_empty() => {
                r.push(' ');
                r.push_str(reason);
            }
            _ => rows.push(reason.to_owned()),
        }
    }
    rows
}

#[test]
fn the_reason_wraps_to_the_terminal_instead_of_being_cut() {
    let sb = Sandbox::example();
    scenarios::failed_run(&sb, "never passes");
    let Some((code, text)) = on_terminal(&sb, &["history", "last"], 80, &[]) else {
        return;
    };
    assert_eq!(code, Some(0), "{text}");
    assert!(too_wide(&text, 80).is_empty(), "{text}");
    let last = reasons(&text).pop().unwrap_or_default();
    assert!(
        last.ends_with("its bound — redirected to FAILED"),
        "{last:?} in\n{text}"
    );
}

/// Whether `text` has colour (any SGR escape).
fn coloured(text: &str) -> bool {
    regex::Regex::new(r"\x1b\[[0-9;]*m").unwrap().is_match(text)
}

#[test]
fn colour_only_on_a_terminal_or_when_asked() {
    let sb = Sandbox::example();
    sb.go_json("Fix mean()");
    // A terminal without NO_COLOR: succeeded is green.
    let Some((_, text)) = on_terminal(&sb, &["history"], 100, &[("NO_COLOR", "")]) else {
        return;
    };
    assert!(coloured(&text), "{text:?}");
    // NO_COLOR, or --color never, or MODIX_COLOR=never: none at all.
    for (args, envs) in [
        (vec!["history"], vec![]),
        (vec!["--color", "never", "history"], vec![("NO_COLOR", "")]),
        (
            vec!["history", "last"],
            vec![("NO_COLOR", ""), ("MODIX_COLOR", "never")],
        ),
    ] {
        let (_, text) = on_terminal(&sb, &args, 100, &envs).unwrap();
        assert!(!coloured(&text), "{args:?} {envs:?}: {text:?}");
    }
    // Piped: no colour on either stream, even without NO_COLOR…
    let out = sb
        .modix()
        .env_remove("NO_COLOR")
        .args(["go", "again"])
        .output()
        .unwrap();
    assert!(!coloured(&output_text(&out)), "{}", output_text(&out));
    // …unless asked for: the summary line, diagnostics and help.
    let out = sb
        .modix()
        .args(["--color", "always", "history", "last"])
        .output()
        .unwrap();
    assert!(coloured(&String::from_utf8_lossy(&out.stdout)));
    sb.write(".modix/runtimes.json", "{ \"loops\": 3 }\n");
    let out = sb
        .modix()
        .args(["--color=always", "validate"])
        .output()
        .unwrap();
    assert!(coloured(&String::from_utf8_lossy(&out.stderr)));
    let out = sb.modix().args(["validate"]).output().unwrap();
    assert!(!coloured(&String::from_utf8_lossy(&out.stderr)));
    let out = sb
        .modix()
        .args(["--color", "always", "--help"])
        .output()
        .unwrap();
    assert!(coloured(&String::from_utf8_lossy(&out.stdout)));
    let out = sb.modix().args(["--help"]).output().unwrap();
    assert!(!coloured(&String::from_utf8_lossy(&out.stdout)));
}

#[test]
fn quiet_go_prints_only_its_summary_line() {
    let sb = Sandbox::example();
    let out = sb
        .modix()
        .args(["-q", "go", "Fix mean()"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "stderr must be empty"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    // The summary: how the run ended, and what it changed where.
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("succeeded: reached DONE"), "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("Changes: 1 file (+1 −1) in "),
        "{stdout}"
    );
    // On a terminal too: no live line, no transitions.
    let Some((code, text)) = on_terminal(&sb, &["-q", "go", "again"], 100, &[]) else {
        return;
    };
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.lines().count(), 2, "{text:?}");
    assert!(!text.contains("\u{1b}[2K"), "{text:?}");
    // Errors still show.
    let out = sb.modix().args(["-q", "go", " "]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: the epic is empty"));
}

#[test]
fn verbose_on_a_terminal_streams_lines_without_a_live_line() {
    let sb = Sandbox::example();
    scenarios::agent(
        &sb,
        &format!("    echo 'working on it' >&2\n{}", scenarios::EXECUTOR_OK),
    );
    let Some((code, text)) = on_terminal(&sb, &["-v", "go", "Fix mean()"], 100, &[]) else {
        return;
    };
    assert_eq!(code, Some(1), "the tests keep failing: {text}");
    assert!(text.contains("[executor] working on it"), "{text}");
    // No line redrawn in place, so none can be left half-drawn.
    assert!(!text.contains("\u{1b}[2K"), "{text:?}");
    assert!(
        text.contains("  … EXECUTING: executor (attempt 1 · at most 6)"),
        "{text}"
    );
}

#[test]
fn ctrl_c_leaves_no_live_line_on_the_screen() {
    let sb = Sandbox::example();
    let marker = sb.dir.path().join("executing");
    scenarios::slow_first_executor(&sb, &marker);
    let Some(screen) = Screen::start(&sb, &["go", "Fix mean()"], 80, 30) else {
        return;
    };
    screen.wait_for_file(&marker);
    screen.wait_for("EXECUTING: executor (attempt 1 · at most 6)");
    screen.keys("C-c");
    let text = screen.wait_for("[exit 130]");
    assert!(text.contains("interrupted in EXECUTING"), "{text}");
    assert!(
        !text.contains("EXECUTING: executor (attempt"),
        "a live line was left behind:\n{text}"
    );
    assert!(!text.contains("^C"), "{text}");
}

#[test]
fn config_warnings_during_go_are_one_line_each() {
    let sb = Sandbox::example();
    // The planner may not write files, but this shell cannot be told so.
    sb.edit_json(".modix/shells.json", |v| {
        let s = &mut v["shells"]["scripted"];
        s.as_object_mut().unwrap().remove("permission_modes");
        s["args"] = serde_json::json!(["--model", "{model}"]);
    });
    let out = sb.modix().args(["go", "Fix mean()"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains(
            "agent `planner` may not write files, but shell `scripted` has no read-only mode"
        ) && regex::Regex::new(r"\(\.modix/agents\.json:\d+\)$")
            .unwrap()
            .is_match(warnings[0]),
        "{}",
        warnings[0]
    );
    assert!(!stderr.contains('╭'), "no source boxes during go: {stderr}");
    // `validate` keeps the full report, with the source.
    let out = sb.modix().arg("validate").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains('╭'));
    // And -q drops them (only errors), for `validate` too.
    let out = sb.modix().args(["-q", "go", "again"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    let out = sb.modix().args(["-q", "validate"]).output().unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}
