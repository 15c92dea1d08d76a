//! Turning a shell's argument template (`["-p", "{prompt}", "--model",
//! "{model}"]`) into the argv of one agent invocation.
//!
//! Values are never split or re-parsed: a prompt full of spaces, quotes,
//! `$(...)` and newlines becomes exactly one argv element, because the process
//! is spawned directly, never through a shell. Optional inputs (system prompt,
//! output schema, endpoint, permission mode) can be left out: an argument that is exactly such
//! a placeholder disappears, together with the flag right before it.

use thiserror::Error;

/// Every placeholder a template may use.
pub const KNOWN_PLACEHOLDERS: &[&str] = &[
    "prompt",
    "model",
    "system_prompt",
    "workdir",
    "output_schema",
    "output_schema_strict",
    "endpoint",
    "role",
    "permission_mode",
    "json_schema",
    "max_turns",
    "max_budget_usd",
    "allowed_tools",
    "prompt_file",
];

/// Placeholders that may have no value: a whole-argument use of one of these
/// is dropped (with its flag) instead of being an error.
const OPTIONAL_PLACEHOLDERS: &[&str] = &[
    "system_prompt",
    "output_schema",
    "output_schema_strict",
    "endpoint",
    "permission_mode",
    "json_schema",
    "max_turns",
    "max_budget_usd",
    "allowed_tools",
];

/// Values for one invocation; `None` means "not available here".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placeholders {
    pub prompt: Option<String>,
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    pub workdir: Option<String>,
    pub output_schema: Option<String>,
    /// A file with the output schema in the strict form structured-output
    /// APIs take (every property required, optional ones nullable).
    pub output_schema_strict: Option<String>,
    pub endpoint: Option<String>,
    pub role: Option<String>,
    /// The shell's mode for what the agent may do (e.g. Claude's
    /// `acceptEdits` or `plan`), from the manifest's `permissions`.
    pub permission_mode: Option<String>,
    /// The output schema itself, strict, as compact JSON (for CLIs that
    /// take it inline).
    pub json_schema: Option<String>,
    /// The brain's `params.max_turns`.
    pub max_turns: Option<String>,
    /// `runtimes.json` `budget.invocation_max_cost_usd`.
    pub max_budget_usd: Option<String>,
    /// The project's own commands (test, build, lint) as tool permissions,
    /// so an agent may run its tests (Claude: `Bash(cargo test:*)`).
    pub allowed_tools: Option<String>,
    /// The path of the file holding the prompt (`"prompt": "file"`).
    pub prompt_file: Option<String>,
}

impl Placeholders {
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "prompt" => self.prompt.as_deref(),
            "model" => self.model.as_deref(),
            "system_prompt" => self.system_prompt.as_deref(),
            "workdir" => self.workdir.as_deref(),
            "output_schema" => self.output_schema.as_deref(),
            "output_schema_strict" => self.output_schema_strict.as_deref(),
            "endpoint" => self.endpoint.as_deref(),
            "role" => self.role.as_deref(),
            "permission_mode" => self.permission_mode.as_deref(),
            "json_schema" => self.json_schema.as_deref(),
            "max_turns" => self.max_turns.as_deref(),
            "max_budget_usd" => self.max_budget_usd.as_deref(),
            "allowed_tools" => self.allowed_tools.as_deref(),
            "prompt_file" => self.prompt_file.as_deref(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArgTemplateError {
    #[error(
        "unknown placeholder `{{{name}}}` in argument `{arg}`; known placeholders: {}",
        known_list()
    )]
    Unknown { name: String, arg: String },
    #[error("unclosed `{{` in argument `{arg}`; write `{{{{` for a literal `{{`")]
    Unclosed { arg: String },
    #[error("stray `}}` in argument `{arg}`; write `}}}}` for a literal `}}`")]
    StrayClose { arg: String },
    #[error("placeholder `{{{name}}}` in argument `{arg}` has no value for this invocation")]
    Missing { name: String, arg: String },
}

fn known_list() -> String {
    KNOWN_PLACEHOLDERS
        .iter()
        .map(|p| format!("{{{p}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    Text(String),
    Placeholder(&'a str),
}

/// Split one template argument into text and placeholders, checking syntax
/// and names.
fn parse(arg: &str) -> Result<Vec<Piece<'_>>, ArgTemplateError> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        text.push_str(&rest[..i]);
        let brace = rest.as_bytes()[i];
        let after = &rest[i + 1..];
        if after.as_bytes().first() == Some(&brace) {
            // `{{` or `}}`: a literal brace.
            text.push(brace as char);
            rest = &after[1..];
            continue;
        }
        if brace == b'}' {
            return Err(ArgTemplateError::StrayClose {
                arg: arg.to_owned(),
            });
        }
        let Some(end) = after.find('}') else {
            return Err(ArgTemplateError::Unclosed {
                arg: arg.to_owned(),
            });
        };
        let name = &after[..end];
        if !KNOWN_PLACEHOLDERS.contains(&name) {
            return Err(ArgTemplateError::Unknown {
                name: name.to_owned(),
                arg: arg.to_owned(),
            });
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Placeholder(name));
        rest = &after[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// Render `template` with `values` into argv elements.
pub fn render_args(
    template: &[String],
    values: &Placeholders,
) -> Result<Vec<String>, ArgTemplateError> {
    let mut out: Vec<String> = Vec::with_capacity(template.len());
    // Index into `template` of the last pushed element, if it was a plain flag
    // (no placeholders, starts with `-`): the one an optional value may take
    // down with it.
    let mut last_flag: Option<usize> = None;
    for (i, arg) in template.iter().enumerate() {
        let pieces = parse(arg)?;
        // An argument that needs an optional value this invocation lacks
        // goes, with its flag (`--max-turns {max_turns}`, `-c key={endpoint}`).
        let lacks_optional = pieces.iter().any(|p| {
            matches!(p, Piece::Placeholder(name)
                if values.get(name).is_none() && OPTIONAL_PLACEHOLDERS.contains(name))
        });
        if lacks_optional {
            if last_flag.is_some_and(|f| f + 1 == i) {
                out.pop();
            }
            last_flag = None;
            continue;
        }
        let mut rendered = String::new();
        let mut plain = true;
        for piece in &pieces {
            match piece {
                Piece::Text(t) => rendered.push_str(t),
                Piece::Placeholder(name) => {
                    plain = false;
                    let value = values.get(name).ok_or_else(|| ArgTemplateError::Missing {
                        name: (*name).to_owned(),
                        arg: arg.clone(),
                    })?;
                    rendered.push_str(value);
                }
            }
        }
        last_flag = (plain && rendered.starts_with('-')).then_some(i);
        out.push(rendered);
    }
    Ok(out)
}

/// The distinct placeholders `template` uses, in order of first use; fails on
/// the first syntax error or unknown name. For checking config before any run.
pub fn placeholders_in(template: &[String]) -> Result<Vec<String>, ArgTemplateError> {
    let mut names: Vec<String> = Vec::new();
    for arg in template {
        for piece in parse(arg)? {
            if let Piece::Placeholder(name) = piece
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_owned());
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn full() -> Placeholders {
        Placeholders {
            prompt: Some("fix it; rm -rf / $(whoami) \"q\" 'x'\nline2".into()),
            model: Some("opus".into()),
            system_prompt: Some("be careful".into()),
            workdir: Some("/tmp/my dir".into()),
            output_schema: Some("{\"type\":\"object\"}".into()),
            endpoint: Some("http://localhost:8080".into()),
            role: Some("planner".into()),
            permission_mode: Some("plan".into()),
            ..Default::default()
        }
    }

    #[test]
    fn whole_arg_placeholder_is_one_element_verbatim() {
        let v = full();
        let got = render_args(&t(&["-p", "{prompt}", "--model", "{model}"]), &v).unwrap();
        assert_eq!(
            got,
            vec![
                "-p".to_string(),
                v.prompt.clone().unwrap(),
                "--model".into(),
                "opus".into()
            ]
        );
    }

    #[test]
    fn embedded_placeholders_and_escapes() {
        let got = render_args(
            &t(&[
                "--model={model}",
                "{{literal}}",
                "cd {workdir} as {role}",
                "a}}b{{c",
            ]),
            &full(),
        )
        .unwrap();
        assert_eq!(
            got,
            t(&[
                "--model=opus",
                "{literal}",
                "cd /tmp/my dir as planner",
                "a}b{c"
            ])
        );
    }

    #[test]
    fn values_with_braces_are_not_reparsed() {
        let v = Placeholders {
            prompt: Some("{model} {{ }".into()),
            model: Some("m".into()),
            ..Default::default()
        };
        assert_eq!(
            render_args(&t(&["{prompt}"]), &v).unwrap(),
            t(&["{model} {{ }"])
        );
    }

    #[test]
    fn missing_optional_drops_arg_and_its_flag() {
        let v = Placeholders {
            prompt: Some("hi".into()),
            ..Default::default()
        };
        let template = t(&[
            "--append-system-prompt",
            "{system_prompt}",
            "-p",
            "{prompt}",
            "{output_schema}",
            "--endpoint",
            "{endpoint}",
        ]);
        assert_eq!(render_args(&template, &v).unwrap(), t(&["-p", "hi"]));
    }

    #[test]
    fn missing_optional_keeps_non_flag_predecessor() {
        let v = Placeholders {
            prompt: Some("hi".into()),
            ..Default::default()
        };
        // The predecessor is itself a rendered placeholder, not a flag.
        let got = render_args(&t(&["{prompt}", "{system_prompt}", "x"]), &v).unwrap();
        assert_eq!(got, t(&["hi", "x"]));
    }

    #[test]
    fn present_optional_is_rendered() {
        let got = render_args(&t(&["--append-system-prompt", "{system_prompt}"]), &full()).unwrap();
        assert_eq!(got, t(&["--append-system-prompt", "be careful"]));
    }

    #[test]
    fn missing_required_is_an_error() {
        let err = render_args(&t(&["--model", "{model}"]), &Placeholders::default()).unwrap_err();
        assert_eq!(
            err,
            ArgTemplateError::Missing {
                name: "model".into(),
                arg: "{model}".into()
            }
        );
    }

    #[test]
    fn an_argument_that_needs_a_missing_optional_goes_with_its_flag() {
        let v = Placeholders {
            model: Some("m".into()),
            ..Default::default()
        };
        let template = t(&[
            "-c",
            "openai_base_url={endpoint}",
            "--sys={system_prompt}",
            "-m",
            "{model}",
        ]);
        assert_eq!(render_args(&template, &v).unwrap(), t(&["-m", "m"]));
    }

    #[test]
    fn unknown_placeholder_names_the_known_ones() {
        let err = render_args(&t(&["{promt}"]), &full()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`{promt}`"), "{msg}");
        assert!(msg.contains("{prompt}, {model}"), "{msg}");
    }

    #[test]
    fn syntax_errors() {
        assert!(matches!(
            render_args(&t(&["{prompt"]), &full()),
            Err(ArgTemplateError::Unclosed { .. })
        ));
        assert!(matches!(
            render_args(&t(&["a}b"]), &full()),
            Err(ArgTemplateError::StrayClose { .. })
        ));
        assert!(matches!(
            render_args(&t(&["{}"]), &full()),
            Err(ArgTemplateError::Unknown { .. })
        ));
    }

    #[test]
    fn empty_args_survive() {
        assert_eq!(render_args(&t(&["", "x"]), &full()).unwrap(), t(&["", "x"]));
    }

    #[test]
    fn placeholders_in_lists_distinct_names_in_order() {
        let got = placeholders_in(&t(&["-p", "{prompt}", "{model}:{prompt}", "{{x}}"])).unwrap();
        assert_eq!(got, t(&["prompt", "model"]));
        assert!(placeholders_in(&t(&["{nope}"])).is_err());
    }
}
