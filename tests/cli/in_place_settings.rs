//! In place, the repository modix's own git runs in is the user's, and an
//! agent can change its settings: a clean filter in `.git/config` named by
//! `info/attributes`, a `.gitattributes` or an include, an fsmonitor, a
//! hook. None of it may ever run under modix's git (outside the agent's
//! bounds): the step is refused, naming what changed, which is put back as
//! the run found it; the run goes on, and resumes.

use std::path::{Path, PathBuf};

use crate::scenarios::{self, git, modix, repo};
use crate::util::{GoResult, Sandbox, output_text};

const FIX: &str = r#"    sed 's|return sum(values) / (len(values) + 1)|return sum(values) / len(values)|' calc.py > calc.py.new && mv calc.py.new calc.py"#;
const DONE: &str = r#"    echo '{"outcome":"success","summary":"fixed","files_changed":["calc.py"],"error":null}'"#;

/// The example project in git, working in place, and a script that
/// touches `ran` (whoever runs it) and passes its input through.
fn in_place() -> (Sandbox, PathBuf, PathBuf) {
    let sb = repo();
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "in_place".into()
    });
    let (ran, script) = scenarios::planted_script(&sb);
    (sb, ran, script)
}

/// What of the user's repository can make git run a program: the config,
/// `info/` and the hooks folder, each file with its bytes.
fn settings(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let gd = root.join(".git");
    let mut paths = vec![gd.join("config")];
    for dir in ["hooks", "info"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(gd.join(dir))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        names.sort();
        paths.extend(names);
    }
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

fn reasons(r: &GoResult) -> String {
    r.transitions
        .iter()
        .map(|t| t["reason"].as_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every way an agent can plant a program in the user's repository's
/// settings, on its first attempt (the second only fixes): nothing planted
/// runs, the first step is refused naming the file and the change, the
/// settings are as before the run, and the run ends in DONE.
#[test]
fn an_agents_git_settings_in_place_never_run_under_modixs_git() {
    let cases: [(&str, &str); 5] = [
        (
            "git config filter.ev.clean \"$PLANTED\"; echo '*.py filter=ev' > .git/info/attributes",
            ".git/config (filter.ev.clean set), .git/info/attributes (made)",
        ),
        (
            // The attributes are content; the driver is the agent's.
            "git config filter.ev.clean \"$PLANTED\"; echo '*.py filter=ev' > .gitattributes",
            ".git/config (filter.ev.clean set)",
        ),
        (
            "printf '[filter \"ev\"]\\n\\tclean = %s\\n' \"$PLANTED\" > .git/ev.cfg; git config include.path ev.cfg; echo '*.py filter=ev' > .git/info/attributes",
            ".git/config (include.path set), .git/info/attributes (made)",
        ),
        (
            "git config core.fsmonitor \"$PLANTED\"",
            ".git/config (core.fsmonitor set)",
        ),
        (
            "for h in pre-commit post-index-change reference-transaction; do cp \"$PLANTED\" .git/hooks/$h; done",
            ".git/hooks/post-index-change (made), .git/hooks/pre-commit (made), .git/hooks/reference-transaction (made)",
        ),
    ];
    for (plant, named) in cases {
        let (sb, ran, script) = in_place();
        scenarios::agent(
            &sb,
            &format!(
                "    PLANTED={script}\n    if [ \"$MODIX_ATTEMPT\" = 1 ]; then {plant}; fi\n{FIX}\n{DONE}",
                script = script.display()
            ),
        );
        scenarios::passing_tester(&sb);
        git(&sb.root(), &["commit", "-q", "-am", "in place"]);
        let before = settings(&sb.root());
        let r = sb.go_json("Fix mean()");
        let text = reasons(&r);
        assert!(
            !ran.exists(),
            "{plant}: modix's git ran what the agent planted"
        );
        assert_eq!(r.code, Some(0), "{plant}: {text}\n{}", r.stderr);
        assert!(
            text.contains(&format!(
                "rejected: changed your repository's git settings, which can make git run a program: {named}; they were put back as the run found them"
            )),
            "{plant}: {text}"
        );
        assert_eq!(settings(&sb.root()), before, "{plant}");
        assert!(!sb.root().join(".gitattributes").exists(), "{plant}");
        assert!(sb.read("calc.py").contains("/ len(values)"), "{plant}");
        // The person's own git commands run nothing of it either.
        git(&sb.root(), &["commit", "-q", "-am", "the fix"]);
        assert!(!ran.exists(), "{plant}: the user's git ran it");
    }
}

/// An agent that planted a filter and was killed with modix mid-step: the
/// resume runs no git in the repository while the settings differ from the
/// run's (modix cannot tell the agent's change from the person's), says
/// what changed, and with `--reset` puts them back and goes on.
#[test]
fn a_resume_after_a_crash_runs_nothing_an_interrupted_agent_planted() {
    let (sb, ran, script) = in_place();
    let marker = sb.dir.path().join("executing");
    let executor = format!(
        "    if [ ! -e {m} ]; then git config filter.ev.clean {script}; echo '*.py filter=ev' > .git/info/attributes; echo half > half.py; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
        m = marker.display(),
        script = script.display()
    );
    scenarios::agent(&sb, &executor);
    scenarios::passing_tester(&sb);
    git(&sb.root(), &["commit", "-q", "-am", "in place"]);
    let before = settings(&sb.root());
    let run = scenarios::killed_once(&sb, &["go", "--json", "crash mid-step"], &marker);
    let out = modix(&sb, &["resume", &run]);
    assert!(!ran.exists(), "a refused resume ran the planted filter");
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("your repository's git settings changed since the run stopped (.git/config (filter.ev.clean set), .git/info/attributes (made))")
            && err.contains("`modix resume --reset` puts them back"),
        "{err}"
    );
    // Nothing was put back unasked.
    assert_ne!(settings(&sb.root()), before);
    let out = modix(&sb, &["resume", "--reset", "--json", &run]);
    let r = GoResult::parse(&out);
    assert!(!ran.exists(), "the resume ran the planted filter");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        output_text(&out).contains("your repository's git settings were put back as the run found them: .git/config (filter.ev.clean set)"),
        "{}",
        output_text(&out)
    );
    assert_eq!(settings(&sb.root()), before);
    assert!(!sb.root().join("half.py").exists());
    assert!(sb.read("calc.py").contains("/ len(values)"));
}

/// In place in a folder without git, modix's git dir is its own (in the
/// run's state folder), and an agent that finds it and plants a filter
/// there has it put back before modix runs git there, as in a worktree.
#[test]
fn in_place_without_git_modixs_own_git_dir_is_guarded() {
    let sb = Sandbox::example();
    sb.edit_json(".modix/projects.json", |v| {
        v["workspace"] = "in_place".into()
    });
    let ran = sb.dir.path().join("planted-command-ran");
    let executor = format!(
        r#"    if [ "$MODIX_ATTEMPT" = 1 ]; then
      for gd in "$HOME"/worktrees/*/*.state/git; do
        git --git-dir="$gd" config filter.ev.clean 'sh -c "touch {ran}; cat"'
        mkdir -p "$gd/info" && echo '*.py filter=ev' > "$gd/info/attributes"
      done
    fi
{FIX}
{DONE}"#,
        ran = ran.display()
    );
    scenarios::agent(&sb, &executor);
    scenarios::passing_tester(&sb);
    let r = sb.go_json("Fix mean()");
    assert!(!ran.exists(), "modix's git ran what the agent planted");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let notes = sb.invocation(&r.run_id(), 2)["changes"]["notes"].to_string();
    assert!(
        notes.contains("config (changed)") && notes.contains("info/attributes (changed)"),
        "{notes}"
    );
    assert!(sb.read("calc.py").contains("/ len(values)"));
}
