//! Answering a gate in place: when `go` (or `resume`, `approve`, …) runs on
//! a terminal and the run stops at a human gate, the question is asked right
//! there — approve, reject with a note, another of the gate's events, or
//! leave it for later — instead of only printing how to answer.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc;
use std::time::Duration;

use super::Ctx;
use crate::error::Error;
use crate::fsm::StateKind;
use crate::orchestrator::{Answer, Engine};
use crate::project::Project;

/// The gate a run waits at.
pub(super) struct Waiting {
    pub run_id: String,
    pub workflow: String,
    pub state: String,
    pub question: String,
}

/// Whether a person can be asked here: both ends of the conversation are a
/// terminal, and the output is for people.
pub(super) fn interactive(ctx: &Ctx, json: bool) -> bool {
    !json && !ctx.out.quiet && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks the gate's question on the terminal; `None`: answer later (also on
/// Ctrl-C or end of input).
pub(super) fn ask(
    engine: &Engine,
    project: &Project,
    w: &Waiting,
) -> Result<Option<Answer>, Error> {
    let workflow = project.workflow(Some(&w.workflow))?;
    let machine = &workflow.machine;
    let Some(StateKind::Human { events, .. }) =
        machine.state_id(&w.state).map(|id| &machine.state(id).kind)
    else {
        return Ok(None);
    };
    let lines = stdin_lines();
    let say = |text: &str| {
        let mut err = std::io::stderr();
        let _ = write!(err, "{text}");
        let _ = err.flush();
    };
    let choices: Vec<String> = events
        .iter()
        .enumerate()
        .map(|(i, e)| match i {
            0 => format!("[a] {e}"),
            1 => format!("[r] {e}"),
            _ => e.clone(),
        })
        .collect();
    say(&format!(
        "\n{} ({}; [q] answer later): ",
        w.question,
        choices.join(", ")
    ));
    let event = loop {
        let Some(line) = read_line(engine, &lines) else {
            say("\n");
            return Ok(None);
        };
        let line = line.trim();
        let picked = match line {
            "a" | "approve" => events.first(),
            "r" | "reject" => events.get(1),
            "q" | "quit" | "" => {
                say(&format!(
                    "Left waiting: `modix approve {}` (or reject, answer) goes on.\n",
                    w.run_id
                ));
                return Ok(None);
            }
            other => events.iter().find(|e| *e == other),
        };
        match picked {
            Some(e) => break e.clone(),
            None => say(&format!("Type one of: {}, or q: ", choices.join(", "))),
        }
    };
    // A rejection (the second event) needs a word saying why.
    let required = events.get(1) == Some(&event);
    say(if required {
        "Note (why; it reaches the next agents): "
    } else {
        "Note for the next agents (Enter for none): "
    });
    let mut note = read_line(engine, &lines).map(|l| l.trim().to_owned());
    while required && note.as_deref().is_some_and(str::is_empty) {
        say("A note is needed here: ");
        note = read_line(engine, &lines).map(|l| l.trim().to_owned());
    }
    let Some(note) = note else {
        return Ok(None);
    };
    Ok(Some(Answer {
        event,
        note: (!note.is_empty()).then_some(note),
        by: super::control::who(),
    }))
}

/// Lines of stdin, read on a thread of their own so that Ctrl-C (which the
/// engine catches) can end the wait. One reader for the process: a second
/// gate must not lose a line to the first one's reader.
fn stdin_lines() -> std::sync::MutexGuard<'static, mpsc::Receiver<String>> {
    static LINES: std::sync::OnceLock<std::sync::Mutex<mpsc::Receiver<String>>> =
        std::sync::OnceLock::new();
    LINES
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            std::sync::Mutex::new(rx)
        })
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The next line; `None` on end of input or Ctrl-C.
fn read_line(engine: &Engine, lines: &mpsc::Receiver<String>) -> Option<String> {
    loop {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => return Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) if engine.interrupted() => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}
