//! Why an invocation failed, decided from the CLI's own signals: its exit
//! code, its stream's events and its known messages, matched by the shell's
//! failure rules (`shells.json` `failures`, then the preset's), and the
//! CLI's own one-line reason, from whichever stream carries it. The same
//! rules watch the output as it arrives: keep-alive lines do not count as
//! progress, and a line that says the CLI went into its own retry loop stops
//! it (modix owns retries).

use std::sync::Arc;

use regex::{Regex, RegexSet};
use serde_json::Value;

use crate::config::{FailureRule, Shell, StreamChoice};
use crate::fsm::FailureClass;
use crate::shell::{LineKind, LineWatch, ProcessOutcome, Stream, last_lines};
use crate::text::one_line;

/// The longest reason kept, in characters.
const REASON_MAX: usize = 300;

/// A shell's failure rules, compiled once per run.
pub(super) struct Rules {
    rules: Vec<(FailureRule, Option<Regex>)>,
    keepalive: RegexSet,
    noise: RegexSet,
    reason: Vec<String>,
}

impl Rules {
    /// The rules of `shell`; a pattern that does not compile (which
    /// `validate` reports) matches nothing.
    pub fn of(shell: &Shell) -> Rules {
        let set =
            |patterns: &[String]| RegexSet::new(patterns).unwrap_or_else(|_| RegexSet::empty());
        Rules {
            rules: shell
                .failures
                .iter()
                .map(|r| {
                    (
                        r.clone(),
                        r.pattern.as_deref().and_then(|p| Regex::new(p).ok()),
                    )
                })
                .collect(),
            keepalive: set(&shell.keepalive),
            noise: set(&shell.noise),
            reason: shell.reason.clone(),
        }
    }

    /// What each line of the running agent's output means.
    pub fn watch(self: &Arc<Self>) -> LineWatch {
        let rules = Arc::clone(self);
        Arc::new(move |stream, line| {
            if rules
                .rules
                .iter()
                .any(|(r, re)| r.stop && line_matches(r, re.as_ref(), stream, line))
            {
                LineKind::Stop
            } else if rules.keepalive.is_match(line) {
                LineKind::KeepAlive
            } else {
                LineKind::Activity
            }
        })
    }

    /// The class of a failed invocation by the rules, and the line that said so.
    pub fn classify(&self, out: &ProcessOutcome) -> Option<(FailureClass, String)> {
        let (stdout, stderr) = (out.stdout.text(), out.stderr.text());
        for (rule, re) in &self.rules {
            if rule.exit_code.is_some_and(|c| out.exit_code != Some(c)) {
                continue;
            }
            if rule.pattern.is_none() {
                // An exit-code rule: the reason comes from the streams.
                return Some((rule.class, self.reason(out)));
            }
            let lines = [(Stream::Stdout, &stdout), (Stream::Stderr, &stderr)];
            for (stream, text) in lines {
                // Newest first: the last word of a CLI is its verdict.
                if let Some(line) = text
                    .lines()
                    .rev()
                    .find(|l| line_matches(rule, re.as_ref(), stream, l))
                {
                    return Some((rule.class, self.reason_for(line, out)));
                }
            }
        }
        None
    }

    /// The CLI's own reason: its JSON reason field where it has one, else
    /// its last line worth reading, stderr first.
    pub fn reason(&self, out: &ProcessOutcome) -> String {
        let stdout = out.stdout.text();
        let from_json = stdout
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find_map(|v| self.json_reason(&v));
        if let Some(reason) = from_json {
            return reason;
        }
        // A JSON error printed over several lines (Gemini's `-o json` on
        // stderr): its reason, not its closing brace.
        for text in [out.stderr.text(), stdout.clone()] {
            if let Some(reason) = trailing_document(&text).and_then(|v| self.json_reason(&v)) {
                return reason;
            }
        }
        for text in [out.stderr.text(), stdout] {
            let lines = last_lines(&text, 20);
            if let Some(line) = lines.iter().rev().find(|l| !self.noise.is_match(l)) {
                return self.reason_of(line);
            }
        }
        String::new()
    }

    fn json_reason(&self, v: &Value) -> Option<String> {
        self.reason.iter().find_map(|p| match v.pointer(p)? {
            // An API's error body passed on as the message's text (Codex's
            // `{"error":{"message":…}}` in a string): the body's reason.
            Value::String(s) if s.trim_start().starts_with('{') => {
                match serde_json::from_str::<Value>(s) {
                    Ok(body) => self
                        .json_reason(&body)
                        .or_else(|| Some(one_line(s.trim(), REASON_MAX))),
                    Err(_) => Some(one_line(s.trim(), REASON_MAX)),
                }
            }
            Value::String(s) if !s.trim().is_empty() => Some(one_line(s.trim(), REASON_MAX)),
            _ => None,
        })
    }

    /// The reason a matching line gives: the line itself, or for a JSON
    /// event, its reason field — else the CLI's reason overall (the event
    /// that named the class need not be the one that says why).
    fn reason_for(&self, line: &str, out: &ProcessOutcome) -> String {
        match serde_json::from_str::<Value>(line.trim()) {
            Ok(v) => self.json_reason(&v).unwrap_or_else(|| self.reason(out)),
            Err(_) => one_line(line.trim(), REASON_MAX),
        }
    }

    /// A line as a reason: its JSON reason field when it is a JSON line.
    fn reason_of(&self, line: &str) -> String {
        serde_json::from_str::<Value>(line.trim())
            .ok()
            .and_then(|v| self.json_reason(&v))
            .unwrap_or_else(|| one_line(line.trim(), REASON_MAX))
    }
}

/// The JSON object `text` ends with when it spans several lines: tried
/// from each of its last lines that open one at the margin, newest first
/// (a bounded number: a CLI's error document is short).
fn trailing_document(text: &str) -> Option<Value> {
    let trimmed = text.trim_end();
    if !trimmed.ends_with('}') {
        return None;
    }
    trimmed
        .rmatch_indices("\n{")
        .map(|(i, _)| i + 1)
        .chain(trimmed.starts_with('{').then_some(0))
        .take(8)
        .find_map(|start| serde_json::from_str::<Value>(&trimmed[start..]).ok())
        .filter(Value::is_object)
}

fn line_matches(rule: &FailureRule, re: Option<&Regex>, stream: Stream, line: &str) -> bool {
    let on_stream = match rule.stream {
        StreamChoice::Any => true,
        StreamChoice::Stdout => stream == Stream::Stdout,
        StreamChoice::Stderr => stream == Stream::Stderr,
    };
    let Some(re) = re else { return false };
    if !on_stream {
        return false;
    }
    match &rule.pointer {
        None => re.is_match(line),
        Some(p) => {
            let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
                return false;
            };
            match v.pointer(p) {
                Some(Value::String(s)) => re.is_match(s),
                Some(Value::Number(n)) => re.is_match(&n.to_string()),
                _ => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::presets::preset;
    use crate::shell::{Captured, EndReason};

    fn outcome(code: i32, stdout: &str, stderr: &str) -> ProcessOutcome {
        let captured = |s: &str| Captured {
            bytes: s.as_bytes().to_vec(),
            total_bytes: s.len() as u64,
            omitted_bytes: 0,
        };
        ProcessOutcome {
            exit_code: Some(code),
            signal: None,
            end: EndReason::Exited,
            stdout: captured(stdout),
            stderr: captured(stderr),
            duration: std::time::Duration::from_secs(1),
            pid: 1,
        }
    }

    fn fixture(path: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(root.join("tests/fixtures/agent-clis").join(path))
            .unwrap_or_default()
    }

    #[test]
    fn real_failures_are_classified_with_their_own_reason() {
        let claude = Rules::of(&preset("claude").unwrap());
        let out = outcome(1, &fixture("claude-nokey/stdout.txt"), "");
        let (class, reason) = claude.classify(&out).expect("a class");
        assert_eq!(class, FailureClass::Auth);
        assert_eq!(reason, "Not logged in · Please run /login");

        let gemini = Rules::of(&preset("gemini").unwrap());
        let out = outcome(41, "", &fixture("gemini-nokey-stream/stderr.txt"));
        let (class, reason) = gemini.classify(&out).expect("a class");
        assert_eq!(class, FailureClass::Auth);
        assert!(reason.starts_with("Please set an Auth method"), "{reason}");

        let codex = Rules::of(&preset("codex").unwrap());
        let out = outcome(1, &fixture("mock-codex-429/stdout.txt"), "");
        assert_eq!(codex.classify(&out).unwrap().0, FailureClass::RateLimited);

        // Gemini's `-o json` prints its error as a document over several
        // lines on stderr: the reason is its message, not its last line.
        let out = outcome(41, "", &fixture("gemini-nokey-json/stderr.txt"));
        let (class, reason) = gemini.classify(&out).expect("a class");
        assert_eq!(class, FailureClass::Auth);
        assert!(reason.starts_with("Please set an Auth method"), "{reason}");

        // Codex passes an API's error body on as its message's text: the
        // body's own message is the reason.
        let out = outcome(1, &fixture("mock-codex-400-other/stdout.txt"), "");
        assert_eq!(codex.reason(&out), "Invalid value for 'input'.");
    }

    #[test]
    fn a_status_code_is_a_whole_number_not_part_of_a_port() {
        let gemini = Rules::of(&preset("gemini").unwrap());
        for port in ["45031", "14290", "50300"] {
            let stderr = format!(
                "Attempt 1 failed. Retrying with backoff... Error: exception TypeError: \
                 fetch failed sending request to http://127.0.0.1:{port}/v1beta/models"
            );
            let (class, _) = gemini.classify(&outcome(1, "", &stderr)).expect("a class");
            assert_eq!(class, FailureClass::Network, "port {port}");
        }
        for (text, class) in [
            (
                "[API Error: got status: 503 Service Unavailable]",
                FailureClass::Overloaded,
            ),
            (
                "got status: 429 Too Many Requests",
                FailureClass::RateLimited,
            ),
        ] {
            assert_eq!(
                gemini.classify(&outcome(1, "", text)).unwrap().0,
                class,
                "{text}"
            );
        }
        let codex = Rules::of(&preset("codex").unwrap());
        let text = "unexpected status 5031: pid 5031";
        assert_ne!(
            codex.classify(&outcome(1, text, "")).map(|c| c.0),
            Some(FailureClass::Overloaded)
        );
    }

    #[test]
    fn the_watch_stops_retry_loops_and_ignores_keep_alives() {
        let codex = Arc::new(Rules::of(&preset("codex").unwrap()));
        let watch = codex.watch();
        let waiting = r#"{"type":"error","message":"Reconnecting... waiting for network (Connection failed)"}"#;
        assert_eq!(watch(Stream::Stdout, waiting), LineKind::Stop);
        let retry = r#"{"type":"error","message":"Reconnecting... 2/5 (stream error)"}"#;
        assert_eq!(watch(Stream::Stdout, retry), LineKind::KeepAlive);
        assert_eq!(
            watch(Stream::Stdout, "{\"type\":\"turn.started\"}"),
            LineKind::Activity
        );
    }
}
