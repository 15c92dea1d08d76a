//! Hostile and odd input: huge lines and files, very long names, duplicate
//! keys, look-alike characters, bad encodings and paths that are not files.
//! Every case ends with a clear error and exit 2: never a panic, never a hang,
//! never more of a file than the offending line.

use std::path::Path;

use crate::scenarios::finished_within;
use crate::util::{Sandbox, output_text};

/// Longest line the human output may have: a snippet is cut to 100
/// characters and a message to 2,000.
const MAX_LINE: usize = 2_500;

/// Runs `modix ARGS`, expects exit 2 and no panic, and returns what it printed.
fn fails(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.modix().args(args).output().unwrap();
    let text = output_text(&out);
    let head: String = text.chars().take(3_000).collect();
    assert_eq!(out.status.code(), Some(2), "{head}");
    assert!(!text.contains("panicked"), "{head}");
    text
}

/// `validate` in both forms: the human text (every line bounded) and the JSON.
fn validate(sb: &Sandbox) -> (String, serde_json::Value) {
    let text = fails(sb, &["validate"]);
    assert_lines_bounded(&text);
    let json = fails(sb, &["validate", "--json"]);
    (text, serde_json::from_str(&json).expect("json"))
}

fn assert_lines_bounded(text: &str) {
    for line in text.lines() {
        let n = line.chars().count();
        assert!(n <= MAX_LINE, "a line of {n} characters");
    }
}

fn assert_has(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(
            text.contains(n),
            "missing {n:?} in:\n{}",
            text.chars().take(5_000).collect::<String>()
        );
    }
}

/// The diagnostics of a `--json` answer with this code.
fn with_code<'a>(v: &'a serde_json::Value, code: &str) -> Vec<&'a serde_json::Value> {
    v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == code)
        .collect()
}

/// `file:line:column` of the only diagnostic with `code`.
fn place(v: &serde_json::Value, code: &str) -> String {
    let found = with_code(v, code);
    assert_eq!(found.len(), 1, "{v:#}");
    let d = found[0];
    format!(
        "{}:{}:{}",
        d["file"].as_str().unwrap(),
        d["line"],
        d["column"]
    )
}

/// A workflow with states `names` (the last is terminal) chained by `go`
/// events, plus `extra` TOML at the end.
fn workflow(id: &str, names: &[String], extra: &str) -> String {
    let mut s = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\ninitial = \"{}\"\n",
        names[0]
    );
    for (i, name) in names.iter().enumerate() {
        if i + 1 == names.len() {
            s += &format!("[states.{name}]\nkind = \"terminal\"\noutcome = \"success\"\n");
        } else {
            s += &format!("[states.{name}]\nkind = \"input\"\nevent = \"go\"\n");
        }
    }
    for pair in names.windows(2) {
        s += &format!(
            "[[transitions]]\nfrom = \"{}\"\nevent = \"go\"\nto = \"{}\"\n",
            pair[0], pair[1]
        );
    }
    s + extra
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

// 1. Columns past 65,535 and what a snippet shows.

#[test]
fn a_minified_file_with_an_error_far_along_its_only_line() {
    let sb = Sandbox::initialized();
    let agents: serde_json::Value = serde_json::from_str(&sb.read(".modix/agents.json")).unwrap();
    let minified = serde_json::to_string(&agents).unwrap();
    let broken = format!(
        "{},{}}}",
        &minified[..minified.len() - 1],
        " ".repeat(70_000)
    );
    sb.write(".modix/agents.json", &broken);
    let (text, json) = validate(&sb);
    let at = place(&json, "config::syntax");
    assert!(at.starts_with(".modix/agents.json:1:7"), "{at}");
    assert_has(&text, &[&at, "trailing comma", "…"]);
}

#[test]
fn a_long_toml_line_and_a_long_unterminated_string() {
    let sb = Sandbox::initialized();
    let description = "y".repeat(100_000);
    sb.write(
        ".modix/fsm/long.toml",
        &format!("id = \"long\"\nversion = \"1.0.0\"\ndescription = \"{description}\" oops\n"),
    );
    sb.write(
        ".modix/shells.json",
        &format!("{{\"shells\": {{\"a\": \"{}", "x".repeat(3_000_000)),
    );
    let (text, json) = validate(&sb);
    let toml_at = place(&json, "fsm::syntax");
    let json_at = place(&json, "config::syntax");
    assert_eq!(toml_at, ".modix/fsm/long.toml:3:100018");
    assert_eq!(json_at, ".modix/shells.json:1:3000018");
    assert_has(&text, &[&toml_at, &json_at, "EOF while parsing a string"]);
    let check = fails(&sb, &["fsm", "check", ".modix/fsm/long.toml"]);
    assert_lines_bounded(&check);
    assert_has(&check, &[&toml_at]);
}

#[test]
fn a_snippet_shows_the_offending_line_and_nothing_around_it() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/brains.json",
        "{\n  \"brains\": {\n    \"a\": { \"provider\": \"anthropic\", \"model\": \"ABOVE-1\",\n      \"api_key_evn\": \"X\",\n      \"params\": { \"note\": \"BELOW-1\" } },\n    \"b\": [\n      \"INSIDE-1\",\n      \"INSIDE-2\"\n    ]\n  }\n}\n",
    );
    let (text, json) = validate(&sb);
    assert_has(
        &text,
        &[
            ".modix/brains.json:4:7",
            "api_key_evn",
            "an array of 2 items",
        ],
    );
    let all = format!("{text}{json}");
    for secret in ["ABOVE-1", "BELOW-1", "INSIDE-1", "INSIDE-2"] {
        assert!(!all.contains(secret), "{secret} shown in:\n{all}");
    }
}

// 2. Very long names, and long lists of names.

#[test]
fn a_very_long_state_name_gets_an_answer_not_a_hang() {
    let sb = Sandbox::initialized();
    let long = "A".repeat(200_000);
    let near = format!("{}B", &long[1..]);
    let states = vec![long, "DONE".to_owned()];
    let extra = format!("[[transitions]]\nfrom = \"DONE\"\nevent = \"again\"\nto = \"{near}\"\n");
    sb.write(".modix/fsm/long.toml", &workflow("long", &states, &extra));
    let (text, json) = validate(&sb);
    assert_eq!(with_code(&json, "fsm::unknown-state").len(), 1, "{json:#}");
    assert_has(
        &text,
        &[
            "fsm::unknown-state",
            "more characters; `--json` has them all",
        ],
    );
    assert_lines_bounded(&fails(&sb, &["fsm", "check"]));
    assert_lines_bounded(&fails(&sb, &["go", "--workflow", "long", "an epic"]));
    // A run that does not use the file goes on, warning in one bounded line.
    let out = sb.modix().args(["go", "an epic"]).output().unwrap();
    let text = output_text(&out);
    assert!(
        text.contains("in a file this run does not use: "),
        "{}",
        &text[..text.len().min(2_000)]
    );
    assert_lines_bounded(&text);
}

#[test]
fn an_unknown_name_among_ten_thousand_lists_twenty() {
    let sb = Sandbox::initialized();
    let states = names("S", 10_000);
    let extra = "[[transitions]]\nfrom = \"S0\"\nevent = \"oops\"\nto = \"NOWHERE\"\n";
    sb.write(".modix/fsm/big.toml", &workflow("big", &states, extra));
    let (text, json) = validate(&sb);
    let help = with_code(&json, "fsm::unknown-state")[0]["help"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(help.ends_with("`S19` and 9980 more"), "{help}");
    assert!(help.len() < 500, "{help}");
    assert_has(&text, &["and 9980 more"]);
}

#[test]
fn a_long_unknown_workflow_name_for_go() {
    let sb = Sandbox::initialized();
    // One argument may be at most 128 KiB on Linux.
    let name = "w".repeat(100_000);
    let out = sb
        .modix()
        .args(["go", "--workflow", &name, "an epic"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(!out.status.success() && !text.contains("panicked"));
    assert_has(
        &text,
        &["unknown workflow", "use one of the known workflows"],
    );
}

// 3. Large files.

/// A sparse file of `len` bytes: large on paper, nothing written.
fn sparse(path: &Path, len: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

#[test]
fn a_file_over_the_cap_is_refused_with_its_size_and_the_cap() {
    let sb = Sandbox::initialized();
    sparse(&sb.root().join(".modix/brains.json"), 50 << 20);
    sparse(&sb.root().join(".modix/fsm/huge.toml"), (4 << 20) + 1);
    let (text, json) = validate(&sb);
    assert_eq!(
        with_code(&json, "config::too-large")[0]["file"],
        ".modix/brains.json"
    );
    assert_has(
        &text,
        &[
            ".modix/brains.json: error[config::too-large]: file is 52428800 bytes; modix reads files of at most 4194304 bytes (4 MiB)",
            ".modix/fsm/huge.toml: error[fsm::too-large]: file is 4194305 bytes",
        ],
    );
}

#[test]
fn hundreds_of_errors_in_one_file_are_all_reported() {
    let sb = Sandbox::initialized();
    let states = names("S", 500);
    let extra: String = (0..500)
        .map(|i| format!("[[transitions]]\nfrom = \"S{i}\"\nevent = \"x\"\nto = \"X{i}\"\n"))
        .collect();
    let file = workflow("big", &states, &extra);
    sb.write(".modix/fsm/big.toml", &file);
    let (text, json) = validate(&sb);
    assert_eq!(with_code(&json, "fsm::unknown-state").len(), 500);
    let line = file.lines().position(|l| l == "to = \"X499\"").unwrap() + 1;
    let last = format!(".modix/fsm/big.toml:{line}:6");
    assert_has(&text, &[&last, "transition to unknown state `X499`"]);
}

/// Each diagnostic used to parse its whole file again to find its line: a
/// file of thousands of broken agents took minutes (5,000: about two).
#[test]
fn thousands_of_agents_naming_unknown_shells_are_reported_promptly() {
    let sb = Sandbox::initialized();
    let n = 5_000;
    sb.edit_json(".modix/agents.json", |v| {
        for i in 0..n {
            v["agents"][format!("a{i}")] = serde_json::json!({
                "role": "x", "shell": format!("s{i}"), "brain": "anthropic",
                "manifest": {"output_schema": "any"}
            });
        }
    });
    // Into a file: a pipe nobody reads while waiting would fill and block modix.
    let report = sb.dir.path().join("report.json");
    let child = sb
        .command(&["validate", "--json"])
        .stdout(std::fs::File::create(&report).unwrap())
        .spawn()
        .unwrap();
    // A hang guard, not a timing test: the fixed code takes well under a second.
    let out = finished_within(
        child,
        "validate of 5,000 broken agents did not finish within 60 s",
    );
    assert_eq!(out.status.code(), Some(2));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).expect("json");
    let unknown = with_code(&json, "config::unknown-reference");
    assert_eq!(unknown.len(), n, "{:#}", unknown[0]);
    let last = unknown
        .iter()
        .find(|d| d["pointer"] == "/agents/a4999/shell")
        .expect("the last agent's shell");
    assert_eq!(last["message"], "unknown shell `s4999`");
    assert!(last["line"].as_u64().unwrap() > 1, "{last:#}");
}

// 4. Duplicate keys.

#[test]
fn a_brain_defined_twice_names_both_places() {
    let sb = Sandbox::initialized();
    sb.write(
        ".modix/brains.json",
        "{\n  \"brains\": {\n    \"fast\": { \"provider\": \"anthropic\", \"model\": \"haiku\" },\n    \"fast\": { \"provider\": \"openai\", \"model\": \"gpt-5\" }\n  }\n}\n",
    );
    let (text, json) = validate(&sb);
    assert_eq!(
        place(&json, "config::duplicate-key"),
        ".modix/brains.json:4:5"
    );
    let d = with_code(&json, "config::duplicate-key")[0];
    assert_eq!(d["pointer"], "/brains/fast");
    assert_has(
        &text,
        &["key `fast` is defined twice in this object: at 3:5 and again at 4:5"],
    );
}

#[test]
fn two_top_level_agents_keys() {
    let sb = Sandbox::initialized();
    let agents = sb.read(".modix/agents.json");
    let body = agents
        .trim()
        .strip_prefix('{')
        .unwrap()
        .strip_suffix('}')
        .unwrap();
    sb.write(
        ".modix/agents.json",
        &format!("{{{body},\n  \"agents\": {{}}\n}}\n"),
    );
    let (text, json) = validate(&sb);
    let found = with_code(&json, "config::duplicate-key");
    assert_eq!(found.len(), 1, "{json:#}");
    assert_eq!(found[0]["pointer"], "/agents");
    assert_has(
        &text,
        &["key `agents` is defined twice in this object: at 2:3 and again at"],
    );
}

// 5. Look-alike characters.

#[test]
fn a_greek_letter_in_a_state_name_is_pointed_out() {
    let sb = Sandbox::initialized();
    let states = vec!["START".to_owned(), "DONE".to_owned()];
    let extra = "[[transitions]]\nfrom = \"START\"\nevent = \"back\"\nto = \"D\u{39f}NE\"\n";
    sb.write(".modix/fsm/w.toml", &workflow("w", &states, extra));
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &[
            "`D\u{39f}NE` has a non-ASCII character `\u{39f}` (U+039F, looks like `O`) at position 2; did you mean `DONE`?",
        ],
    );
}

#[test]
fn a_cyrillic_letter_in_names_is_pointed_out_everywhere() {
    let sb = Sandbox::initialized();
    let show = fails(&sb, &["fsm", "show", "executi\u{43e}n_fsm_v1"]);
    assert_has(
        &show,
        &["(U+043E, looks like `o`) at position 8; did you mean `execution_fsm_v1`?"],
    );
    // A reference checked against the known names…
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["tester"]["fsm"] = "executi\u{43e}n_fsm_v1".into();
    });
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &["(U+043E, looks like `o`) at position 8; did you mean `execution_fsm_v1`?"],
    );
    // …and a name the schema's ASCII pattern refuses.
    sb.edit_json(".modix/agents.json", |v| {
        v["agents"]["planner"]["shell"] = "cl\u{430}ude".into();
    });
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &[
            "`cl\u{430}ude` has a non-ASCII character `\u{430}` (U+0430, looks like `a`) at position 3: write `claude`",
        ],
    );
}

// 6. Encodings.

fn write_bytes(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn latin1_and_binary_files_name_the_first_bad_byte() {
    let sb = Sandbox::initialized();
    let modix = sb.root().join(".modix");
    write_bytes(
        &modix.join("shells.json"),
        b"{\n  \"shells\": { \"caf\xe9\": {} }\n}\n",
    );
    write_bytes(&modix.join("fsm/bin.toml"), b"id = \"x\"\n\x00\x01\xff\xfe");
    write_bytes(
        &sb.dir.path().join("home/settings.json"),
        b"\xff\xfe{\x00}\x00",
    );
    let (text, json) = validate(&sb);
    assert_eq!(with_code(&json, "config::not-utf8").len(), 2, "{json:#}");
    assert_has(
        &text,
        &[
            ".modix/shells.json:2:19: error[config::not-utf8]: byte offset 20 (0xE9) is not UTF-8",
            ".modix/fsm/bin.toml:2:3: error[fsm::not-utf8]: byte offset 11 (0xFF) is not UTF-8",
            "settings.json:1:1: error[config::not-utf8]: byte offset 0 (0xFF) is not UTF-8",
            "save the file as UTF-8 (it is UTF-16)",
        ],
    );
}

/// A UTF-8 byte-order mark (as Windows editors save) is not content: a
/// config file, an FSM file and a prompt template that start with one are
/// read as without it, and places in them are where an editor shows them.
#[test]
fn a_byte_order_mark_is_ignored_in_every_file_read_as_text() {
    let sb = Sandbox::initialized();
    let modix = sb.root().join(".modix");
    let with_bom = |rel: &str, text: &str| {
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend_from_slice(text.as_bytes());
        write_bytes(&modix.join(rel), &bytes);
    };
    for rel in ["projects.json", "prompts/planner.md"] {
        with_bom(rel, &sb.read(&format!(".modix/{rel}")));
    }
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fsm/plan_execute_test.toml"),
    )
    .unwrap();
    with_bom("fsm/plan_execute_test.toml", &shipped);
    let out = sb.modix().arg("validate").output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    // A mistake on the first line is placed as the editor shows it.
    with_bom("brains.json", "{ \"brains\": 3 }\n");
    let (_, json) = validate(&sb);
    assert_eq!(place(&json, "config::schema"), ".modix/brains.json:1:13");
}

// 7. Paths that are not readable files.

#[test]
fn a_settings_file_that_is_a_directory() {
    let sb = Sandbox::initialized();
    // `init` wrote the settings file; put a folder in its place.
    let settings = sb.dir.path().join("home/settings.json");
    let _ = std::fs::remove_file(&settings);
    std::fs::create_dir_all(&settings).unwrap();
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &["settings.json: error[config::unreadable]: cannot read: is a directory"],
    );
}

#[test]
fn fsm_entries_that_are_not_files_are_each_reported() {
    let sb = Sandbox::initialized();
    let fsm = sb.root().join(".modix/fsm");
    std::os::unix::fs::symlink("nowhere.toml", fsm.join("dangling.toml")).unwrap();
    std::os::unix::fs::symlink("loop.toml", fsm.join("loop.toml")).unwrap();
    std::fs::create_dir(fsm.join("folder.toml")).unwrap();
    let fifo = fsm.join("pipe.toml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // A FIFO would block a reader forever: it must be reported, not opened.
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &[
            ".modix/fsm/dangling.toml: error[fsm::unreadable]: cannot read: is a dangling symlink to `nowhere.toml`: No such file or directory",
            ".modix/fsm/loop.toml: error[fsm::unreadable]: cannot read: is a symlink loop: Too many levels of symbolic links",
            ".modix/fsm/folder.toml: error[fsm::unreadable]: cannot read: is a directory",
            ".modix/fsm/pipe.toml: error[fsm::unreadable]: cannot read: is a named pipe (FIFO)",
        ],
    );
}

#[test]
fn an_fsm_folder_that_is_a_file() {
    let sb = Sandbox::initialized();
    std::fs::remove_dir_all(sb.root().join(".modix/fsm")).unwrap();
    sb.write(".modix/fsm", "not a folder");
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &[".modix/fsm: error[fsm::unreadable]: cannot list FSM files: Not a directory"],
    );
}

#[test]
fn an_unreadable_config_file() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::initialized();
    let path = sb.root().join(".modix/shells.json");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::File::open(&path).is_ok() {
        eprintln!("skipped: running as root, so a mode-000 file is still readable");
        return;
    }
    let (text, _) = validate(&sb);
    assert_has(
        &text,
        &[".modix/shells.json: error[config::unreadable]: cannot read: Permission denied"],
    );
}
