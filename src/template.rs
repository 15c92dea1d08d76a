//! Prompt templates (minijinja syntax): one environment for checking and
//! rendering, so what `modix validate` accepts is what `modix go` renders.
//!
//! [`check`] runs when the project loads, on every agent's `prompt` and
//! `system_prompt`: the template must compile; every variable it reads must
//! be a field of the context package (`project.name`, `brain.model`, … —
//! strict for names: a misspelled one would otherwise render as nothing);
//! every filter and test it uses must exist (minijinja only finds out while
//! rendering); and it may not include, import or extend other files, which
//! the renderer has no loader for. [`render`] is what the orchestrator calls.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde::Serialize;

use crate::diagnostics::{closest, unknown_name_help};

mod only;

/// The largest prompt template modix reads.
pub const MAX_BYTES: u64 = 1 << 20;

/// Most operators one tag may chain (`|`, `.`, `[`, `(`, `-`, `not`, …).
/// minijinja parses, compiles and drops an expression by recursion, one
/// level per operator, and does not bound most of them: a 20 KB chain of
/// `-` overflowed the stack and aborted modix. A prompt's tags use a few
/// each; this many fit a 2 MiB stack even unoptimised (a test compiles
/// and renders them on one; the main thread has 8 MiB).
pub const MAX_OPERATORS: usize = 256;

/// Instructions one rendering may run: loops within loops otherwise render
/// for as long as their ranges multiply to (minijinja bounds each range,
/// not the product). Far above any prompt's needs (a few thousand; a
/// `shared` history of 10,000 messages shown in a loop, a few hundred
/// thousand), about a second of rendering at most.
const FUEL: u64 = 30_000_000;

/// The most a rendered prompt may hold: a loop over a long value repeats
/// it into memory as fast as it can write.
pub const MAX_RENDERED: usize = 32 << 20;

/// The most memory rendering one template may hold: far above any prompt's
/// (its text is at most [`MAX_RENDERED`]), far below what ends a machine.
const MAX_HELD: usize = 512 << 20;

/// Nested macro calls at most (minijinja's default is 500): each is a
/// level of the engine's recursion on the rendering thread's stack.
const RECURSION: usize = 100;

/// The environment every prompt is checked and rendered in. Names are
/// checked statically against the context package ([`check`]); below them
/// the free-form fields (`task_spec`, `previous_result`, `brain.params`)
/// may legitimately lack a key, or be null on a first step, so lookups
/// through them render as nothing instead of failing the run.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION);
    env.add_filter("tojson", tojson);
    env.add_filter("indent", indent);
    env.add_filter("slice", slice);
    env
}

/// The largest width, indent or count a filter may be given: the built-in
/// `indent`, `tojson` and `slice` allocate that much per line or item
/// before anything could stop them (`indent(100000000)` of 100 lines asked
/// for 10 GB and aborted modix).
const MAX_FILTER_SIZE: usize = 1024;

/// `size` as a filter's argument, or an error naming it.
fn within(filter: &str, what: &str, size: Option<usize>) -> Result<(), minijinja::Error> {
    match size {
        Some(n) if n > MAX_FILTER_SIZE => Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}: a {what} of {n} is more than {MAX_FILTER_SIZE}"),
        )),
        _ => Ok(()),
    }
}

/// The built-in `indent`, its width bounded ([`MAX_FILTER_SIZE`]).
fn indent(
    value: minijinja::value::StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: minijinja::value::Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    let asked = match width {
        Some(w) => Some(w),
        None => kwargs.peek::<Option<usize>>("width")?,
    };
    within("indent", "width", asked)?;
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

/// The built-in `slice`, its count bounded ([`MAX_FILTER_SIZE`]).
fn slice(
    state: &minijinja::State,
    value: minijinja::Value,
    count: usize,
    fill_with: Option<minijinja::Value>,
) -> Result<minijinja::Value, minijinja::Error> {
    within("slice", "count", Some(count))?;
    minijinja::filters::slice(state, value, count, fill_with)
}

/// A tag that chains more than [`MAX_OPERATORS`] operators: refused before
/// minijinja sees the template (see there). `code`: each tag's text
/// without its string literals.
fn too_deep(tags: &[Tag], code: &[String]) -> Option<Problem> {
    const WORDS: [&str; 7] = ["not", "and", "or", "is", "in", "if", "else"];
    for (tag, code) in tags.iter().zip(code) {
        let symbols = code
            .bytes()
            .filter(|b| b"|.[(-+*/%~<>=!".contains(b))
            .count();
        let words = code
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| WORDS.contains(w))
            .count();
        if symbols + words > MAX_OPERATORS {
            return Some(Problem {
                code: "template::too-deep",
                message: format!(
                    "this tag chains {} operators; a tag may chain at most {MAX_OPERATORS}",
                    symbols + words
                ),
                help: "split the expression over several `{% set %}` tags, or move the work out of the template".into(),
                span: Some(tag.inner.clone()),
            });
        }
    }
    None
}

/// The tags of `source`, and each one's text with its string literals
/// blanked (same offsets).
fn tags_and_code(source: &str) -> (Vec<Tag>, Vec<String>) {
    let tags = tags(source);
    let code = tags
        .iter()
        .map(|t| without_strings(t.text(source)))
        .collect();
    (tags, code)
}

/// Renders `template` into at most [`MAX_RENDERED`] bytes.
fn render_capped(
    template: &minijinja::Template<'_, '_>,
    ctx: impl Into<minijinja::Value>,
) -> Result<String, minijinja::Error> {
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + b.len() > MAX_RENDERED {
                return Err(std::io::Error::other("too large"));
            }
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::with_capacity(template.source().len() * 2));
    let say = || {
        crate::error::report_fatal(&crate::error::Error::Aborted {
            code: "template",
            message: format!(
                "prompt template `{}` took more than {} MiB of memory while rendering and \
                 modix stopped: a value built without bound (a string doubled in a loop, a \
                 list repeated)",
                template.name(),
                MAX_HELD >> 20
            ),
            help: "fix the template; a run it stopped continues with `modix resume`".into(),
        });
    };
    let rendered = crate::alloc::within(MAX_HELD, &say, || {
        template.render_captured_to(ctx, &mut out)
    });
    match rendered {
        Ok(_) => Ok(String::from_utf8(out.0)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "rendering ran past {FUEL} steps and was stopped; a loop within a loop over large ranges?"
            ),
        )),
        Err(e) if e.kind() == ErrorKind::WriteFailure => Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "the rendered prompt grows past {} MiB; a prompt that large is a loop gone wrong",
                MAX_RENDERED >> 20
            ),
        )),
        Err(e) => Err(e),
    }
}

/// The built-in `tojson`, with the last text it wrote kept for the same
/// value: the plan, made into template values once ([`reused`]), is the
/// same object at every step of a run, and writing it out again was half
/// of rendering a prompt that shows it (docs/performance.md, twenty-seventh
/// round). Template values cannot change, and the value is kept with its
/// text, so its object is not freed and another made at its address.
fn tojson(
    value: &minijinja::Value,
    indent: Option<minijinja::Value>,
    args: minijinja::value::Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    type Map = std::collections::BTreeMap<minijinja::Value, minijinja::Value>;
    type Last = Option<(minijinja::Value, Option<minijinja::Value>, minijinja::Value)>;
    thread_local! {
        static LAST: std::cell::RefCell<Last> = const { std::cell::RefCell::new(None) };
    }
    // Only a map the serde conversion made is known by its object.
    let object = |v: &minijinja::Value| v.downcast_object_ref::<Map>().map(std::ptr::from_ref);
    let plain = args.args().next().is_none();
    let key = object(value).filter(|_| plain);
    if let Some(key) = key {
        let kept = LAST.with_borrow(|last| {
            last.as_ref()
                .filter(|(v, i, _)| object(v) == Some(key) && *i == indent)
                .map(|(_, _, text)| text.clone())
        });
        if let Some(text) = kept {
            return Ok(text);
        }
    }
    let width = match &indent {
        Some(i) => i.as_usize(),
        None => args.peek::<Option<usize>>("indent").ok().flatten(),
    };
    within("tojson", "indent", width)?;
    let text = minijinja::filters::tojson(value, indent.clone(), args)?;
    if key.is_some() {
        LAST.set(Some((value.clone(), indent, text.clone())));
    }
    Ok(text)
}

/// Renders a template; `name` is how errors name it. Each template is
/// compiled once per thread and kept: an agent's prompt is rendered at every
/// step of a run, and compiling it took a quarter of the rendering. Of a
/// struct or map `ctx`, the template gets the top-level fields it names
/// ([`only`]); `debug()`, which shows the whole context, gets all of it.
pub fn render(name: &str, source: &str, ctx: &impl Serialize) -> Result<String, minijinja::Error> {
    /// More templates than a project has; past it the cache starts over.
    const KEPT: usize = 64;
    /// The compiled templates, and what each reads (`None`: all of it).
    type Kept = (
        Environment<'static>,
        HashMap<String, Option<HashSet<String>>>,
    );
    thread_local! {
        static COMPILED: std::cell::RefCell<Kept> =
            std::cell::RefCell::new((environment(), HashMap::new()));
    }
    COMPILED.with_borrow_mut(|(env, reads)| {
        // Kept under its name with its source: the same name with another
        // source (a test, another project) is compiled anew.
        let fresh = env.get_template(name).is_ok_and(|t| t.source() == source);
        if !fresh {
            if reads.len() >= KEPT {
                *env = environment();
                reads.clear();
            }
            let (tags, code) = tags_and_code(source);
            if let Some(p) = too_deep(&tags, &code) {
                return Err(minijinja::Error::new(ErrorKind::SyntaxError, p.message));
            }
            env.add_template_owned(name.to_owned(), source.to_owned())?;
            let names = env.get_template(name)?.undeclared_variables(false);
            reads.insert(
                name.to_owned(),
                (!source.contains("debug")).then_some(names),
            );
        }
        let template = env.get_template(name)?;
        let part = reads
            .get(name)
            .and_then(Option::as_ref)
            .and_then(|names| only::only(ctx, names));
        match part {
            Some(part) => render_capped(&template, part),
            None => render_capped(&template, minijinja::value::Serde(ctx)),
        }
    })
}

/// Serialises a JSON value that stays the same from one step to the next
/// (the task spec): as itself, except into template values, where the
/// conversion made at the last step is reused while the value equals the
/// one it was made from. Converting a plan of a few KB into template
/// values took half of a prompt's rendering at every step; comparing it
/// takes a tenth of that.
pub fn reused<S: serde::Serializer>(
    value: &Option<&serde_json::Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    type Last = Option<(serde_json::Value, minijinja::Value)>;
    thread_local! {
        static LAST: std::cell::RefCell<Last> = const { std::cell::RefCell::new(None) };
    }
    let Some(value) = value.filter(|_| minijinja::value::serializing_for_value()) else {
        return value.serialize(s);
    };
    let kept = LAST.with_borrow(|last| {
        last.as_ref()
            .filter(|(json, _)| json == value)
            .map(|(_, converted)| converted.clone())
    });
    let converted = kept.unwrap_or_else(|| {
        let converted = minijinja::Value::from(minijinja::value::Serde(value));
        LAST.set(Some((value.clone(), converted.clone())));
        converted
    });
    // Passed through as it is: the template engine's own values serialise
    // into it by reference.
    converted.serialize(s)
}

/// One problem in a template, with the byte range it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub code: &'static str,
    pub message: String,
    pub help: String,
    pub span: Option<Range<usize>>,
}

/// Every problem of the template `source` (named `name` in messages).
pub fn check(name: &str, source: &str) -> Vec<Problem> {
    let (tags, code) = tags_and_code(source);
    if let Some(p) = too_deep(&tags, &code) {
        return vec![p];
    }
    let env = environment();
    let template = match env.template_from_named_str(name, source) {
        Ok(t) => t,
        Err(e) => return vec![syntax_problem(&e)],
    };
    let mut problems = includes(source, &tags);
    problems.extend(unknown_callables(&env, &tags, &code));
    let globals: Vec<String> = env.globals().map(|(k, _)| k.to_owned()).collect();
    let mut names: Vec<String> = template.undeclared_variables(true).into_iter().collect();
    names.sort();
    let unknown: Vec<&String> = names.iter().filter(|n| !name_ok(n, &globals)).collect();
    for name in unknown.iter().take(MAX_NAMES) {
        let Err((message, help)) = check_name(name, &globals) else {
            continue;
        };
        problems.push(Problem {
            code: "template::unknown-variable",
            message,
            help,
            span: find_in_tags(&tags, &code, name),
        });
    }
    if unknown.len() > MAX_NAMES {
        problems.push(Problem {
            code: "template::unknown-variable",
            message: format!("{} more unknown variables", unknown.len() - MAX_NAMES),
            help: "fix the ones listed, then check again".into(),
            span: None,
        });
    }
    problems.sort_by_key(|p| p.span.as_ref().map_or(usize::MAX, |s| s.start));
    problems
}

/// Unknown variables listed per template; the rest are counted (placing
/// each one means a search through the template).
const MAX_NAMES: usize = 20;

fn syntax_problem(e: &minijinja::Error) -> Problem {
    Problem {
        code: "template::syntax",
        message: match e.detail() {
            Some(d) => format!("syntax error: {d}"),
            None => e.to_string(),
        },
        help: "fix the template here; minijinja (Jinja2) syntax: {{ value }}, {% if … %}…{% endif %}, {# comment #}".into(),
        span: e.range(),
    }
}

/// The shape of the context package a template sees (the fields of
/// `orchestrator::context::ContextPackage`, kept in step by a test there).
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Text, a number or null: nothing below it.
    Scalar,
    /// A list: indexed, not looked into by name.
    List,
    /// Free-form JSON (agent output, brain params): not checked below.
    Free,
    Fields(&'static [(&'static str, Shape)]),
}

const COMMANDS: &[(&str, Shape)] = &[
    ("build", Shape::List),
    ("test", Shape::List),
    ("lint", Shape::List),
];

const PROJECT: &[(&str, Shape)] = &[
    ("name", Shape::Scalar),
    ("description", Shape::Scalar),
    ("stack", Shape::List),
    ("conventions", Shape::List),
    ("commands", Shape::Fields(COMMANDS)),
];

const BRAIN: &[(&str, Shape)] = &[
    ("name", Shape::Scalar),
    ("provider", Shape::Scalar),
    ("model", Shape::Scalar),
    ("endpoint", Shape::Scalar),
    ("params", Shape::Free),
];

const CONTEXT: &[(&str, Shape)] = &[
    ("epic", Shape::Scalar),
    ("run_id", Shape::Scalar),
    ("workflow", Shape::Scalar),
    ("state", Shape::Scalar),
    ("agent", Shape::Scalar),
    ("role", Shape::Scalar),
    ("attempt", Shape::Scalar),
    ("bound", Shape::Scalar),
    ("workdir", Shape::Scalar),
    ("output_schema", Shape::Scalar),
    ("output_schema_path", Shape::Scalar),
    ("output_shape", Shape::Scalar),
    ("project", Shape::Fields(PROJECT)),
    ("brain", Shape::Fields(BRAIN)),
    ("task_spec", Shape::Free),
    ("previous_result", Shape::Free),
    ("feedback", Shape::Scalar),
    ("outputs", Shape::Free),
    ("came_from", Shape::Free),
    ("next_task", Shape::Scalar),
    ("notes", Shape::List),
    ("pending", Shape::List),
    ("context_mode", Shape::Scalar),
    ("history", Shape::List),
];

/// Names minijinja provides inside some blocks (`caller` in a macro called
/// with `{% call %}`), beside the environment's globals.
const BUILTIN_NAMES: &[&str] = &["caller", "loop", "self"];

/// Every field of the context package a template may name, as dotted
/// paths (`project`, `project.name`, …).
#[cfg(test)]
pub fn context_fields() -> Vec<String> {
    fn walk(prefix: &str, fields: &[(&str, Shape)], out: &mut Vec<String>) {
        for (name, shape) in fields {
            let path = format!("{prefix}{name}");
            out.push(path.clone());
            if let Shape::Fields(inner) = shape {
                walk(&format!("{path}."), inner, out);
            }
        }
    }
    let mut out = Vec::new();
    walk("", CONTEXT, &mut out);
    out.sort();
    out
}

/// Whether a dotted name the template reads is a field of the context (or a
/// global); [`check_name`] says why not, at the cost of a message.
fn name_ok(dotted: &str, globals: &[String]) -> bool {
    let mut parts = dotted.split('.');
    let first = parts.next().unwrap_or_default();
    if globals.iter().any(|g| g == first) || BUILTIN_NAMES.contains(&first) {
        return true;
    }
    let mut fields = CONTEXT;
    let mut last = Shape::Fields(CONTEXT);
    for part in std::iter::once(first).chain(parts) {
        let Shape::Fields(_) = last else {
            return matches!(last, Shape::Free | Shape::List);
        };
        let Some((_, shape)) = fields.iter().find(|(n, _)| *n == part) else {
            return false;
        };
        if let Shape::Fields(inner) = shape {
            fields = inner;
        }
        last = *shape;
    }
    true
}

/// A dotted name the template reads (`project.nmae`), against the shape:
/// the message and the fix when it names nothing.
fn check_name(dotted: &str, globals: &[String]) -> Result<(), (String, String)> {
    let mut parts = dotted.split('.');
    let first = parts.next().unwrap_or_default();
    if globals.iter().any(|g| g == first) || BUILTIN_NAMES.contains(&first) {
        return Ok(());
    }
    let mut fields = CONTEXT;
    let mut at = String::new();
    for part in std::iter::once(first).chain(parts) {
        let Some((_, shape)) = fields.iter().find(|(n, _)| *n == part) else {
            return Err(unknown_field(&at, part, fields));
        };
        at = if at.is_empty() {
            part.to_owned()
        } else {
            format!("{at}.{part}")
        };
        match shape {
            Shape::Fields(inner) => fields = inner,
            Shape::Free | Shape::List => return Ok(()),
            Shape::Scalar if at == dotted => return Ok(()),
            Shape::Scalar => {
                return Err((
                    format!("`{at}` is a plain value; `{dotted}` names nothing"),
                    format!(
                        "use `{{{{ {at} }}}}` itself (see docs/agents.md for the context package)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn unknown_field(at: &str, part: &str, fields: &[(&str, Shape)]) -> (String, String) {
    let names = fields.iter().map(|(n, _)| *n);
    if at.is_empty() {
        return (
            format!(
                "unknown variable `{part}`: the context package has no such field, so it would render as nothing"
            ),
            unknown_name_help(part, "variable", names),
        );
    }
    let known: Vec<String> = fields.iter().map(|(n, _)| format!("`{at}.{n}`")).collect();
    let help = match closest(part, names) {
        Some(near) => format!("did you mean `{at}.{near}`? (known: {})", known.join(", ")),
        None => format!("use one of: {}", known.join(", ")),
    };
    (
        format!("`{at}` has no field `{part}`, so `{at}.{part}` would render as nothing"),
        help,
    )
}

/// The inside of one `{{ … }}` or `{% … %}` tag.
#[derive(Debug, Clone)]
struct Tag {
    block: bool,
    inner: Range<usize>,
}

impl Tag {
    fn text<'a>(&self, source: &'a str) -> &'a str {
        source.get(self.inner.clone()).unwrap_or_default()
    }

    /// The statement keyword of a block tag (`if`, `include`, …).
    fn keyword<'a>(&self, source: &'a str) -> &'a str {
        let t = self
            .text(source)
            .trim_start_matches(['-', '+', '~'])
            .trim_start();
        let end = t
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(t.len());
        &t[..end]
    }
}

/// The tags of a template (any text: it runs before minijinja parses it,
/// [`too_deep`]), skipping comments and raw blocks;
/// quotes are honoured, so `{{ "}}" }}` is one tag.
fn tags(source: &str) -> Vec<Tag> {
    let b = source.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = source.get(i..).and_then(|s| s.find('{')) {
        let at = i + off;
        let block = match b.get(at + 1) {
            Some(b'#') => {
                i = find_from(source, at + 2, "#}").map_or(b.len(), |e| e + 2);
                continue;
            }
            Some(b'{') => false,
            Some(b'%') => true,
            _ => {
                i = at + 1;
                continue;
            }
        };
        let close: &[u8] = if block { b"%}" } else { b"}}" };
        let end = tag_end(b, at + 2, close);
        let tag = Tag {
            block,
            inner: at + 2..end,
        };
        i = (end + 2).min(b.len());
        if block && tag.keyword(source) == "raw" {
            i = raw_end(source, i);
        }
        out.push(tag);
    }
    out
}

/// Where the closing delimiter of a tag starting at `start` is.
fn tag_end(b: &[u8], start: usize, close: &[u8]) -> usize {
    let mut j = start;
    let mut quote = None;
    while j + 1 < b.len() {
        let c = b[j];
        match quote {
            Some(_) if c == b'\\' => j += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'"' || c == b'\'' => quote = Some(c),
            None if c == close[0] && b[j + 1] == close[1] => return j,
            None => {}
        }
        j += 1;
    }
    b.len()
}

fn find_from(source: &str, from: usize, needle: &str) -> Option<usize> {
    source.get(from..)?.find(needle).map(|i| from + i)
}

/// Just past the `{% endraw %}` that closes a raw block.
fn raw_end(source: &str, from: usize) -> usize {
    let mut i = from;
    while let Some(open) = find_from(source, i, "{%") {
        let end = tag_end(source.as_bytes(), open + 2, b"%}");
        let tag = Tag {
            block: true,
            inner: open + 2..end,
        };
        if tag.keyword(source) == "endraw" {
            return (end + 2).min(source.len());
        }
        i = open + 2;
    }
    source.len()
}

/// `include`, `import`, `from … import` and `extends` need a loader, which
/// the renderer does not have: each would fail the run when reached.
fn includes(source: &str, tags: &[Tag]) -> Vec<Problem> {
    tags.iter()
        .filter(|t| t.block)
        .filter(|t| matches!(t.keyword(source), "include" | "import" | "from" | "extends"))
        .map(|t| Problem {
            code: "template::include",
            message: format!(
                "`{}` is not supported in prompt templates: modix renders each template on its own, so the run would fail here",
                t.keyword(source)
            ),
            help: "paste the other file's text here (a prompt template is one self-contained file)".into(),
            span: Some(t.inner.clone()),
        })
        .collect()
}

/// The text of a tag with its string literals blanked out (same byte
/// offsets), so `{{ "a|b" }}` does not look like a filter.
fn without_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote = None;
    let mut escaped = false;
    for c in text.chars() {
        let blank = match quote {
            Some(q) => {
                if !escaped && c == q {
                    quote = None;
                }
                escaped = !escaped && c == '\\';
                true
            }
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                true
            }
            None => false,
        };
        if blank {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    out
}

/// Filters and tests the template uses that the environment does not have,
/// each reported where it is first used. `code`: each tag's text without
/// its string literals.
fn unknown_callables(env: &Environment, tags: &[Tag], code: &[String]) -> Vec<Problem> {
    use regex_automata::meta::Regex;
    static FILTER: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    static TEST: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    static BLOCK: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let ident = "([A-Za-z_][A-Za-z0-9_]*)";
    let lean = |re: String| crate::pattern::lean(&re).unwrap_or_else(|_| unreachable!());
    let filter = FILTER.get_or_init(|| lean(format!(r"\|\s*{ident}")));
    let test = TEST.get_or_init(|| lean(format!(r"\bis\s+(?:not\s+)?{ident}")));
    let block = BLOCK.get_or_init(|| lean(format!(r"^[-+~]?\s*filter\s+{ident}")));
    // The name each finds: its first group's place in `text`.
    let names = |re: &Regex, text: &str| -> Vec<Range<usize>> {
        re.captures_iter(text)
            .filter_map(|c| c.get_group(1))
            .map(|span| span.range())
            .collect()
    };
    let mut out = Vec::new();
    let mut judged = std::collections::HashSet::new();
    for (tag, text) in tags.iter().zip(code) {
        let mut found: Vec<(Kind, Range<usize>)> = Vec::new();
        found.extend(names(filter, text).into_iter().map(|r| (Kind::Filter, r)));
        found.extend(names(test, text).into_iter().map(|r| (Kind::Test, r)));
        if tag.block {
            found.extend(names(block, text).into_iter().map(|r| (Kind::Filter, r)));
        }
        for (kind, range) in found {
            let name = &text[range.clone()];
            if judged.insert((kind as u8, name.to_owned())) && !kind.exists(env, name) {
                let start = tag.inner.start + range.start;
                out.push(kind.problem(env, name, start..start + range.len()));
            }
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Kind {
    Filter,
    Test,
}

impl Kind {
    /// Asks the environment itself, so its own filters and tests (and any
    /// added later) count.
    fn exists(self, env: &Environment, name: &str) -> bool {
        let (probe, unknown) = match self {
            Kind::Filter => (format!("{{{{ none | {name} }}}}"), ErrorKind::UnknownFilter),
            Kind::Test => (format!("{{{{ none is {name} }}}}"), ErrorKind::UnknownTest),
        };
        !matches!(env.render_str(&probe, ()), Err(e) if e.kind() == unknown)
    }

    fn problem(self, env: &Environment, name: &str, span: Range<usize>) -> Problem {
        let (word, code, candidates): (&str, &str, &[&str]) = match self {
            Kind::Filter => ("filter", "template::unknown-filter", COMMON_FILTERS),
            Kind::Test => ("test", "template::unknown-test", COMMON_TESTS),
        };
        let known: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| self.exists(env, c))
            .collect();
        let help = match closest(name, known.iter().copied()) {
            Some(near) => format!("did you mean `{near}`?"),
            None => unknown_name_help(name, word, known),
        };
        Problem {
            code,
            message: format!("unknown {word} `{name}`: rendering would fail here"),
            help,
            span: Some(span),
        }
    }
}

/// Candidates for "did you mean" (only those the environment has are offered).
const COMMON_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "count",
    "default",
    "dictsort",
    "escape",
    "first",
    "float",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
];

const COMMON_TESTS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

/// The first place inside a tag where `name` (dotted) is written, for
/// pointing at it; `None` when it is written another way (`a["b"]`).
fn find_in_tags(tags: &[Tag], code: &[String], name: &str) -> Option<Range<usize>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (tag, text) in tags.iter().zip(code) {
        let mut from = 0;
        while let Some(i) = text.get(from..).and_then(|t| t.find(name)) {
            let start = from + i;
            let end = start + name.len();
            let before = text[..start].chars().next_back();
            let after = text[end..].chars().next();
            if !before.is_some_and(|c| is_ident(c) || c == '.') && !after.is_some_and(is_ident) {
                let at = tag.inner.start + start;
                return Some(at..at + name.len());
            }
            from = end;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tojson` gives the text it wrote last again for the same object, and
    /// writes anew for another value (an equal one too) or another indent.
    #[test]
    fn tojson_writes_an_object_once_while_it_stays_the_same() {
        use minijinja::value::{Kwargs, Value as V};
        let no_args = || Kwargs::from_iter(std::iter::empty::<(&str, V)>());
        let text = |v: &V, indent: Option<V>| super::tojson(v, indent, no_args()).unwrap();
        let ptr = |t: &V| t.as_str().unwrap().as_ptr();
        let value = |j: serde_json::Value| V::from(minijinja::value::Serde(j));
        let plan = value(serde_json::json!({"title": "t", "tasks": [1, 2]}));
        let first = text(&plan, None);
        assert_eq!(first.as_str(), Some(r#"{"tasks": [1, 2], "title": "t"}"#));
        assert_eq!(ptr(&text(&plan.clone(), None)), ptr(&first));
        let pretty = text(&plan, Some(V::from(2)));
        assert_eq!(pretty.as_str().unwrap().lines().count(), 7);
        let equal = value(serde_json::json!({"title": "t", "tasks": [1, 2]}));
        let again = text(&equal, None);
        assert_eq!(again.as_str(), first.as_str());
        assert_ne!(ptr(&again), ptr(&first));
        let other = value(serde_json::json!({"title": "u"}));
        assert_eq!(text(&other, None).as_str(), Some(r#"{"title": "u"}"#));
    }

    #[test]
    fn a_kept_template_is_used_only_for_the_same_source() {
        let ctx = serde_json::json!({"epic": "e"});
        assert_eq!(render("p.md", "one {{ epic }}", &ctx).unwrap(), "one e");
        assert_eq!(render("p.md", "one {{ epic }}", &ctx).unwrap(), "one e");
        assert_eq!(render("p.md", "two {{ epic }}", &ctx).unwrap(), "two e");
        assert!(render("p.md", "{{ broken", &ctx).is_err());
        assert_eq!(render("p.md", "two {{ epic }}", &ctx).unwrap(), "two e");
        // Past the limit the cache starts over, and still renders.
        for i in 0..200 {
            let name = format!("t{i}.md");
            assert_eq!(render(&name, "{{ epic }}!", &ctx).unwrap(), "e!");
        }
        assert_eq!(render("p.md", "two {{ epic }}", &ctx).unwrap(), "two e");
    }

    #[test]
    fn a_template_renders_the_same_with_only_what_it_reads() {
        let ctx = serde_json::json!({
            "epic": "e", "role": "r", "attempt": 2,
            "project": {"name": "p", "stack": ["rust", "go"]},
            "task_spec": {"title": "t", "steps": [1, 2]},
            "outputs": {"PLAN": {"output": {"a": 1}}, "WORK": {"output": null}},
            "feedback": "fix it", "notes": [{"note": "n"}],
        });
        let templates = [
            "{{ epic }} {{ project.name }} {{ project.stack | join(', ') }}",
            "{{ task_spec | tojson }}{% if feedback %}[{{ feedback }}]{% endif %}",
            "{% for name, o in outputs | items %}{{ name }}={{ o.output }};{% endfor %}",
            "{% macro m(x) %}{{ x }}/{{ role }}{% endmacro %}{{ m(attempt) }}",
            "{% set shown = notes %}{% for n in shown %}{{ n.note }}{% endfor %}{{ loop }}",
            "{% if missing is defined %}x{% else %}y{% endif %}{{ previous_result.a }}",
            "{{ 'fix it' in debug() }}",
        ];
        for (i, source) in templates.iter().enumerate() {
            let name = format!("same{i}.md");
            let whole = environment()
                .template_from_str(source)
                .unwrap()
                .render(minijinja::value::Serde(&ctx))
                .unwrap();
            assert_eq!(render(&name, source, &ctx).unwrap(), whole, "{source}");
        }
    }

    fn codes(source: &str) -> Vec<&'static str> {
        check("t.md", source).into_iter().map(|p| p.code).collect()
    }

    /// A tag at the limit, of every operator minijinja recurses on, is
    /// compiled, rendered and dropped (or refused by minijinja's own
    /// bound, for nested brackets) on a thread of a 2 MiB stack, a quarter
    /// of the main thread's, even unoptimised; one more is refused before
    /// minijinja parses it.
    #[test]
    fn deep_tags_stop_at_the_limit_and_the_limit_fits_the_stack() {
        let n = MAX_OPERATORS;
        let at_limit = [
            format!("{{{{ {}1 }}}}", "-".repeat(n)),
            format!("{{{{ epic{} }}}}", "|lower".repeat(n)),
            format!("{{{{ {}true }}}}", "not ".repeat(n)),
            format!("{{{{ 1{} }}}}", " + 1".repeat(n)),
            format!("{{{{ task_spec{} }}}}", ".x".repeat(n)),
            format!("{{% if {}true %}}x{{% endif %}}", "not ".repeat(n - 1)),
            format!("{{{{ {}1{} }}}}", "(".repeat(n / 2), ")".repeat(n / 2)),
            format!("{{{{ {}1{} }}}}", "[".repeat(n), "]".repeat(n)),
        ];
        let rendered = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                at_limit
                    .iter()
                    .map(|t| {
                        let (tags, code) = tags_and_code(t);
                        assert!(too_deep(&tags, &code).is_none(), "{t}");
                        let problems = check("t.md", t);
                        let ok = render("deep.md", t, &serde_json::json!({"epic": "E"})).is_ok();
                        (problems.is_empty(), ok)
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap()
            .join()
            .expect("no overflow at the limit");
        // Brackets nest past minijinja's own bound first: refused by it.
        assert_eq!(&rendered[6..], [(false, false), (false, false)]);
        assert!(
            rendered[..6].iter().all(|r| *r == (true, true)),
            "{rendered:?}"
        );
        for over in [
            format!("{{{{ {}1 }}}}", "-".repeat(n + 1)),
            format!("{{{{ epic{} }}}}", "|e".repeat(40_000)),
            format!("x {{% set a = {}1 %}} y", "not ".repeat(n + 1)),
        ] {
            assert_eq!(codes(&over), ["template::too-deep"], "{over}");
            let e = render("over.md", &over, &serde_json::json!({"epic": "E"})).unwrap_err();
            assert!(e.to_string().contains("at most 256"), "{e}");
        }
        // Operators inside strings are text, not operators.
        let quoted = format!("{{{{ \"{}\" }}}}", "-|".repeat(1000));
        let (tags, code) = tags_and_code(&quoted);
        assert!(too_deep(&tags, &code).is_none());
    }

    #[test]
    fn filters_that_allocate_by_their_argument_are_bounded() {
        let ctx = serde_json::json!({"epic": "a\nb\nc"});
        for t in [
            "{{ epic | indent(100000000) }}",
            "{{ epic | indent(width=100000000) }}",
            "{{ [1, 2] | slice(100000000) | list }}",
            "{{ epic | tojson(indent=100000000) }}",
            "{{ {'a': 1} | tojson(100000000) }}",
        ] {
            let e = render("big.md", t, &ctx).unwrap_err();
            assert!(e.to_string().contains("is more than 1024"), "{t}: {e}");
        }
        for (t, want) in [
            ("{{ epic | indent(2) }}", "a\n  b\n  c"),
            ("{{ epic | indent(width=1, first=true) }}", " a\n b\n c"),
            ("{{ [1, 2, 3] | slice(2) | list }}", "[[1, 2], [3]]"),
            ("{{ {'a': 1} | tojson(indent=1) }}", "{\n \"a\": 1\n}"),
        ] {
            assert_eq!(render("ok.md", t, &ctx).unwrap(), want, "{t}");
        }
    }

    #[test]
    fn rendering_is_bounded_in_steps_and_in_size() {
        let ctx = serde_json::json!({"epic": "E".repeat(1 << 20)});
        let endless =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let t0 = std::time::Instant::now();
        let e = render("loops.md", endless, &ctx).unwrap_err();
        assert!(e.to_string().contains("ran past 30000000 steps"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(30));
        let huge = "{% for i in range(100000) %}{{ epic }}{% endfor %}";
        let e = render("huge.md", huge, &ctx).unwrap_err();
        assert!(e.to_string().contains("grows past 32 MiB"), "{e}");
        // Under both bounds, it renders.
        let fine = "{% for i in range(31) %}{{ epic }}{% endfor %}";
        assert_eq!(render("fine.md", fine, &ctx).unwrap().len(), 31 << 20);
    }

    #[test]
    fn good_templates_pass() {
        let ok = "{{ epic }} {{ project.name }}{% for c in project.conventions %}{{ c }}{{ loop.index }}{% endfor %}\
                  {% if brain %}{{ brain.model }} {{ brain.params.temperature }}{% endif %}{{ task_spec.tasks[0].id }}\
                  {{ task_spec | tojson }}{% set x = 1 %}{{ x }}{{ range(3) | join(\",\") }}\
                  {% macro m(a) %}{{ a }}{% endmacro %}{{ m(1) }}{% if feedback is none %}{% endif %}\
                  {# {{ epik }} #}{% raw %}{{ epik }}{% endraw %}{{ \"a|b\" }}";
        assert_eq!(check("t.md", ok), vec![]);
    }

    #[test]
    fn problems_are_found_and_placed() {
        assert_eq!(codes("{{ epic }"), ["template::syntax"]);
        assert_eq!(codes("a\n{# x"), ["template::syntax"]);
        assert_eq!(codes("{% if epic %}y"), ["template::syntax"]);
        let src = "{{ epik }} {{ project.nmae }} {{ epic | upperr }} {% if x is evn %}{% endif %} {% include 'a.md' %}";
        let problems = check("t.md", src);
        let got: Vec<(&str, &str)> = problems
            .iter()
            .map(|p| (p.code, &src[p.span.clone().unwrap()]))
            .collect();
        assert_eq!(
            got,
            [
                ("template::unknown-variable", "epik"),
                ("template::unknown-variable", "project.nmae"),
                ("template::unknown-filter", "upperr"),
                ("template::unknown-variable", "x"),
                ("template::unknown-test", "evn"),
                ("template::include", " include 'a.md' "),
            ]
        );
        assert!(
            problems[0].help.contains("did you mean `epic`?"),
            "{problems:?}"
        );
        assert!(problems[1].help.contains("did you mean `project.name`?"));
        assert!(problems[2].help.contains("did you mean `upper`?"));
        assert_eq!(codes("{{ epic.x }}"), ["template::unknown-variable"]);
        assert_eq!(
            codes("{% filter nope %}a{% endfilter %}"),
            ["template::unknown-filter"]
        );
    }

    #[test]
    fn the_quick_name_check_agrees_with_the_explained_one() {
        let globals = vec!["range".to_owned()];
        for name in [
            "epic",
            "epic.x",
            "epik",
            "project",
            "project.name",
            "project.nmae",
            "project.commands.test",
            "project.commands.tset",
            "project.name.x",
            "brain.params.t",
            "task_spec.a.b",
            "history.x",
            "range",
            "caller",
            "loop.index",
        ] {
            assert_eq!(
                name_ok(name, &globals),
                check_name(name, &globals).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn scanning_never_panics_on_odd_text() {
        for s in [
            "{",
            "{{",
            "{%",
            "{#",
            "é{{ \"é",
            "{{ 'a\\",
            "{% raw %}{{",
            "}}{{ x }}é",
        ] {
            let _ = check("t.md", s);
            let _ = tags(s);
        }
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn checking_any_text_never_panics(s in "\\PC{0,200}") {
            let _ = super::check("t.md", &s);
        }

        #[test]
        fn checking_template_like_text_never_panics(s in "[{}%#\"'\\ a-z|.()\né-]{0,120}") {
            let _ = super::check("t.md", &s);
        }
    }
}

#[cfg(test)]
mod bounded {
    use super::*;

    /// A template at the size limit full of mistakes gives a bounded report.
    #[test]
    fn a_large_broken_template_gives_a_bounded_report() {
        let mut src = String::new();
        let mut i = 0;
        while src.len() < MAX_BYTES as usize - 64 {
            src.push_str(&format!(
                "{{{{ v{i} | f{} }}}} {{{{ epic | upper }}}}\n",
                i % 50
            ));
            i += 1;
        }
        let problems = check("big.md", &src);
        let vars = problems
            .iter()
            .filter(|p| p.code == "template::unknown-variable")
            .count();
        let filters = problems
            .iter()
            .filter(|p| p.code == "template::unknown-filter")
            .count();
        assert_eq!(vars, MAX_NAMES + 1, "listed, plus a count of the rest");
        assert_eq!(filters, 50, "each unknown filter once");
    }
}
