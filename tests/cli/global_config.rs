//! Agents run with the user's `HOME`, so they can write the user's global
//! git config: a clean filter there, named by a tracked `.gitattributes`,
//! would run under modix's own `git add -A` — outside the agent's bounds —
//! in every workspace mode. A run's git reads the global and system config
//! as the run found them (a copy in its state folder), so nothing planted
//! there runs; the user's own settings from before the run still apply.

use std::path::{Path, PathBuf};

use crate::scenarios::{self, git, modix, repo};
use crate::util::{GoResult, Sandbox, output_text};

const FIX: &str = r#"    sed 's|return sum(values) / (len(values) + 1)|return sum(values) / len(values)|' calc.py > calc.py.new && mv calc.py.new calc.py"#;
const DONE: &str = r#"    echo '{"outcome":"success","summary":"fixed","files_changed":["calc.py"],"error":null}'"#;

/// The example project in git, in `mode`, with the user's global config
/// (an identity) in the sandbox's home, and a script that touches
/// `planted-command-ran` (whoever runs it) and passes its input through.
fn project(mode: &str) -> (Sandbox, PathBuf, PathBuf) {
    let sb = repo();
    sb.edit_json(".modix/projects.json", |v| v["workspace"] = mode.into());
    std::fs::write(
        home(&sb).join(".gitconfig"),
        "[user]\n\tname = Pat Person\n\temail = pat@example.com\n",
    )
    .unwrap();
    let (ran, script) = scenarios::planted_script(&sb);
    (sb, ran, script)
}

fn home(sb: &Sandbox) -> PathBuf {
    sb.dir.path().join("home")
}

/// `modix ARGS` with no `XDG_CONFIG_HOME` of the host's: git's global
/// config is the sandbox home's alone.
fn run(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    sb.modix()
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .env_remove("GIT_CONFIG_SYSTEM")
        .args(args)
        .output()
        .unwrap()
}

/// An executor that plants `plant` on its first attempt (with `PLANTED`
/// the script's path) and fixes the bug.
fn planting_agent(sb: &Sandbox, script: &Path, plant: &str) {
    scenarios::agent(
        sb,
        &format!(
            "    PLANTED={script}\n    if [ \"$MODIX_ATTEMPT\" = 1 ]; then {plant}; echo '*.py filter=ev' > .gitattributes; fi\n{FIX}\n{DONE}",
            script = script.display()
        ),
    );
    scenarios::passing_tester(sb);
    git(&sb.root(), &["commit", "-q", "-am", "agents"]);
}

/// Every way an agent can reach the user's global config, in worktree,
/// in place and copy: nothing it planted runs under modix's git, and the
/// run ends in DONE.
#[test]
fn a_filter_an_agent_plants_in_the_global_config_never_runs_under_modixs_git() {
    let cases = [
        (
            "worktree",
            "git config --global filter.ev.clean \"$PLANTED\"",
        ),
        (
            "in_place",
            "git config --global filter.ev.clean \"$PLANTED\"",
        ),
        ("copy", "git config --global filter.ev.clean \"$PLANTED\""),
        (
            "worktree",
            "mkdir -p \"$HOME/.config/git\"; printf '[filter \"ev\"]\\n\\tclean = %s\\n' \"$PLANTED\" > \"$HOME/.config/git/config\"",
        ),
        (
            "in_place",
            "printf '[filter \"ev\"]\\n\\tclean = %s\\n' \"$PLANTED\" > \"$HOME/ev.cfg\"; git config --global include.path ev.cfg",
        ),
    ];
    for (mode, plant) in cases {
        let (sb, ran, script) = project(mode);
        planting_agent(&sb, &script, plant);
        let r = GoResult::parse(&run(&sb, &["go", "--json", "Fix mean()"]));
        assert!(!ran.exists(), "{mode}, {plant}: modix's git ran it");
        assert_eq!(r.code, Some(0), "{mode}, {plant}: {}", r.stderr);
        assert_eq!(r.summary["state"], "DONE", "{mode}, {plant}");
        // It was planted: the user's own git (outside modix) would run it.
        let cfg = std::process::Command::new("git")
            .args(["config", "--get", "filter.ev.clean"])
            .env("HOME", home(&sb))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("GIT_CONFIG_GLOBAL")
            .output()
            .unwrap();
        assert!(cfg.status.success(), "{mode}, {plant}: nothing was planted");
    }
}

/// An agent that finds the run's copy of the global config (in the run's
/// state folder) and plants its filter there: the copy is put back before
/// modix runs git, and the step's record says so.
#[test]
fn an_agent_changing_the_runs_copy_of_the_global_config_is_put_back() {
    let (sb, ran, script) = project("worktree");
    planting_agent(
        &sb,
        &script,
        "for f in \"$HOME\"/worktrees/*/*.state/gitconfig/global; do printf '[filter \"ev\"]\\n\\tclean = %s\\n' \"$PLANTED\" >> \"$f\"; done",
    );
    let r = GoResult::parse(&run(&sb, &["go", "--json", "Fix mean()"]));
    assert!(!ran.exists(), "modix's git ran what the agent planted");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let notes = sb.invocation(&r.run_id(), 2)["changes"]["notes"].to_string();
    assert!(
        notes.contains("modix's copy of your global git config was changed")
            && notes.contains("gitconfig/global"),
        "{notes}"
    );
}

/// The user's own filter and identity, set in the global config before
/// the run, apply as they did: the filter cleans what the run records, and
/// `apply` commits as the user.
#[test]
fn the_users_global_filter_and_identity_from_before_the_run_apply() {
    let (sb, _, _) = project("worktree");
    std::fs::write(
        home(&sb).join(".gitconfig"),
        "[user]\n\tname = Pat Person\n\temail = pat@example.com\n[filter \"mine\"]\n\tclean = \"sed s/^#.agent.wrote.this$/#.the.users.filter.cleaned.this/\"\n\tsmudge = cat\n",
    )
    .unwrap();
    sb.write(".gitattributes", "calc.py filter=mine\n");
    scenarios::agent(
        &sb,
        &format!("{FIX}\n    echo '#.agent.wrote.this' >> calc.py\n{DONE}"),
    );
    scenarios::passing_tester(&sb);
    git(&sb.root(), &["add", "-A"]);
    git(&sb.root(), &["commit", "-q", "-m", "agents"]);
    let r = GoResult::parse(&run(&sb, &["go", "--json", "Fix mean()"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let branch = format!(
        "modix/{}",
        r.summary["changes"]["short_id"].as_str().unwrap()
    );
    let recorded = git(&sb.root(), &["show", &format!("{branch}:calc.py")]);
    assert!(
        recorded.contains("#.the.users.filter.cleaned.this"),
        "{recorded}"
    );
    let out = run(&sb, &["apply", "last"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let author = git(&sb.root(), &["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(author.trim(), "Pat Person <pat@example.com>");
}

/// An agent that plants a global filter and is killed with modix mid-step:
/// the resume reads the run's copy (not what the agent left), names what
/// changed, and nothing planted runs.
#[test]
fn a_resume_reads_the_global_config_as_the_run_found_it() {
    let (sb, ran, script) = project("worktree");
    let marker = sb.dir.path().join("executing");
    scenarios::agent(
        &sb,
        &format!(
            "    if [ ! -e {m} ]; then git config --global filter.ev.clean {script}; echo '*.py filter=ev' > .gitattributes; touch {m}; sleep 30; fi\n{FIX}\n{DONE}",
            m = marker.display(),
            script = script.display()
        ),
    );
    scenarios::passing_tester(&sb);
    git(&sb.root(), &["commit", "-q", "-am", "agents"]);
    let run_id = scenarios::killed_once(&sb, &["go", "--json", "crash mid-step"], &marker);
    let out = modix(&sb, &["resume", "--json", &run_id]);
    let r = GoResult::parse(&out);
    assert!(!ran.exists(), "the resume ran the planted filter");
    assert_eq!(r.code, Some(0), "{}", output_text(&out));
    assert!(
        output_text(&out).contains(
            "your global git config changed since the run started (global filter.ev.clean set)"
        ),
        "{}",
        output_text(&out)
    );
}
