//! The exact JSON an agent must end with, stated in its prompt: an
//! annotated example made from its output schema. Every field holds a
//! value of its type (`"..."`, `0`, `true`, an enum's first value) and a
//! `//` comment says what else it may hold; with the comments taken off it
//! is an answer the schema accepts (tested for every shipped schema). Below
//! it: what may be left out, and how to say the task failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::schema::Schemas;

/// Nesting deeper than this is shown as `{}` (and stops `$ref` cycles).
const MAX_DEPTH: usize = 8;

/// The statement of output schema `id`'s shape, for the prompt: a ```jsonc
/// block, then the rules around it. Made once per schema text in a process
/// (every invocation of a state states the same shape).
pub fn output_shape(schemas: &Schemas, id: &str) -> Arc<str> {
    static MADE: OnceLock<Mutex<HashMap<String, Arc<str>>>> = OnceLock::new();
    let text = schemas.text(id).unwrap_or("{}");
    let made = MADE.get_or_init(Default::default);
    if let Some(shape) = made.lock().unwrap_or_else(|p| p.into_inner()).get(text) {
        return Arc::clone(shape);
    }
    let shape: Arc<str> = make(schemas, id).into();
    made.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(text.to_owned(), Arc::clone(&shape));
    shape
}

fn make(schemas: &Schemas, id: &str) -> String {
    let Some(schema) = schemas.value(id) else {
        return format!("Any JSON object.\n{GIVE_UP}");
    };
    let example = Builder { root: &schema }.node(&schema, 0);
    let mut lines = Vec::new();
    render(&example, 0, String::new(), "", &mut lines);
    let mut block = String::from("```jsonc\n");
    // The whole answer's notes (its description: what the fields mean
    // together) head the block.
    for note in &lines[0].1 {
        block.push_str(&format!("// {note}\n"));
    }
    lines[0].1.clear();
    let width = lines
        .iter()
        .filter(|(_, notes)| !notes.is_empty())
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (line, notes) in &lines {
        block.push_str(line);
        if !notes.is_empty() {
            block.push_str(&" ".repeat(width - line.chars().count() + 2));
            block.push_str("// ");
            block.push_str(&notes.join("; "));
        }
        block.push('\n');
    }
    block.push_str("```\n");
    block.push_str(
        "Leave out the // comments. A field marked optional may be left out or be null.\n",
    );
    block.push_str(&failure_rule(&schema));
    block
}

const GIVE_UP: &str =
    "If you cannot do the task, answer {\"error\": \"<why, in one line>\"} instead.\n";

/// How an answer of this schema says the task failed: its own way when it
/// has one (a field that can be `"failure"`, with an `error` field to say
/// why), else `{"error": "…"}`, which modix records as the agent's
/// failure (class `agent_error`).
fn failure_rule(schema: &Value) -> String {
    let props = schema.get("properties").and_then(Value::as_object);
    let failing = props.and_then(|p| {
        p.iter().find(|(_, s)| {
            s.get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().any(|v| v == "failure"))
        })
    });
    match failing {
        Some((name, _)) => {
            let why = if props.is_some_and(|p| p.contains_key("error")) {
                " and say why in \"error\""
            } else {
                ""
            };
            format!("If you cannot do the task, answer with \"{name}\": \"failure\"{why}.\n")
        }
        None => GIVE_UP.to_owned(),
    }
}

/// An example value with what its comment says.
struct Node {
    form: Form,
    notes: Vec<String>,
}

enum Form {
    /// A value on one line, as JSON text.
    Leaf(String),
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
}

impl Node {
    fn leaf(text: impl Into<String>, notes: Vec<String>) -> Node {
        Node {
            form: Form::Leaf(text.into()),
            notes,
        }
    }

    /// The example as JSON (what an agent following it would answer).
    fn value(&self) -> Value {
        match &self.form {
            Form::Leaf(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            Form::Object(fields) => {
                Value::Object(fields.iter().map(|(k, n)| (k.clone(), n.value())).collect())
            }
            Form::Array(items) => Value::Array(items.iter().map(Node::value).collect()),
        }
    }
}

struct Builder<'r> {
    root: &'r Value,
}

impl Builder<'_> {
    fn node(&self, schema: &Value, depth: usize) -> Node {
        let schema = self.resolve(schema);
        let notes = describe(schema);
        if depth >= MAX_DEPTH {
            return Node::leaf("{}", notes);
        }
        if let Some(v) = scalar(schema) {
            return Node::leaf(v, notes);
        }
        match type_of(schema) {
            Some("array") => self.array(schema, notes, depth),
            Some("object") => match schema.get("properties").and_then(Value::as_object) {
                Some(p) if !p.is_empty() => {
                    // A conditional (`if`/`then`/`else`) applies the branch
                    // the example itself takes.
                    let base = self.object(schema, p, notes.clone(), depth);
                    match branch(schema, &base.value()) {
                        Some(merged) => {
                            let p = merged.get("properties").and_then(Value::as_object);
                            let p = p.unwrap_or(&Map::new()).clone();
                            self.object(&merged, &p, notes, depth)
                        }
                        None => base,
                    }
                }
                _ => Node::leaf("{}", notes),
            },
            _ => Node::leaf("null", notes),
        }
    }

    fn object(
        &self,
        schema: &Value,
        props: &Map<String, Value>,
        notes: Vec<String>,
        depth: usize,
    ) -> Node {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // The required fields in the schema's order, then the rest.
        let mut names: Vec<&str> = Vec::new();
        for n in required.iter().copied().filter(|n| props.contains_key(*n)) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let mut rest: Vec<&str> = props
            .keys()
            .map(String::as_str)
            .filter(|n| !required.contains(n))
            .collect();
        rest.sort_unstable();
        names.extend(rest);
        let fields = names
            .into_iter()
            .map(|name| {
                let mut field = self.node(&props[name], depth + 1);
                if !required.contains(&name) {
                    field.notes.insert(0, "optional".to_owned());
                }
                (name.to_owned(), field)
            })
            .collect();
        Node {
            form: Form::Object(fields),
            notes,
        }
    }

    fn array(&self, schema: &Value, mut notes: Vec<String>, depth: usize) -> Node {
        let n = schema
            .get("minItems")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .clamp(1, 3) as usize;
        let items = match schema.get("items") {
            _ if schema.get("maxItems").and_then(Value::as_u64) == Some(0) => Vec::new(),
            None => {
                notes.push("items: any JSON value".to_owned());
                Vec::new()
            }
            Some(item) => (0..n).map(|_| self.node(item, depth + 1)).collect(),
        };
        Node {
            form: Form::Array(items),
            notes,
        }
    }

    /// What `schema` stands for: the target of a local `$ref`
    /// (`#/$defs/x`), the first alternative of `anyOf`/`oneOf`/`allOf` that
    /// is not just `null`; else itself.
    fn resolve<'s>(&self, schema: &'s Value) -> &'s Value
    where
        Self: 's,
    {
        let root: &'s Value = self.root;
        let mut s = schema;
        for _ in 0..MAX_DEPTH {
            if let Some(r) = s.get("$ref").and_then(Value::as_str) {
                match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                    Some(target) => {
                        s = target;
                        continue;
                    }
                    None => return s,
                }
            }
            let alternative = ["anyOf", "oneOf", "allOf"].iter().find_map(|k| {
                s.get(*k)
                    .and_then(Value::as_array)?
                    .iter()
                    .find(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            });
            match alternative {
                Some(a) => s = a,
                None => return s,
            }
        }
        s
    }
}

/// `schema` with the branch of its `if` that `example` takes merged in
/// (its `properties`' keywords over the base's, its `required` added);
/// `None` when it has no conditional.
fn branch(schema: &Value, example: &Value) -> Option<Value> {
    let cond = schema.get("if")?;
    let holds = jsonschema::validator_for(cond)
        .ok()
        .is_some_and(|v| v.is_valid(example));
    let taken = schema.get(if holds { "then" } else { "else" })?;
    let mut merged = schema.clone();
    let m = merged.as_object_mut()?;
    for key in ["if", "then", "else"] {
        m.remove(key);
    }
    if let Some(extra) = taken.get("properties").and_then(Value::as_object) {
        let props = m
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()?;
        for (name, more) in extra {
            let field = props
                .entry(name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let (Some(field), Some(more)) = (field.as_object_mut(), more.as_object()) {
                field.extend(more.clone());
            }
        }
    }
    if let Some(extra) = taken.get("required").and_then(Value::as_array) {
        let required = m
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()?;
        required.extend(extra.iter().cloned());
    }
    Some(merged)
}

/// Writes `node` as lines (with their notes), after `lead` (`"name": ` or
/// nothing), at `indent`, followed by `comma`.
fn render(
    node: &Node,
    indent: usize,
    lead: String,
    comma: &str,
    out: &mut Vec<(String, Vec<String>)>,
) {
    let pad = "  ".repeat(indent);
    let mut notes = node.notes.clone();
    match &node.form {
        Form::Leaf(v) => out.push((format!("{pad}{lead}{v}{comma}"), notes)),
        Form::Array(items) if items.iter().all(|i| matches!(i.form, Form::Leaf(_))) => {
            let values: Vec<&str> = items
                .iter()
                .filter_map(|i| match &i.form {
                    Form::Leaf(v) => Some(v.as_str()),
                    _ => None,
                })
                .collect();
            if let Some(first) = items.first() {
                notes.extend(first.notes.iter().map(|n| format!("each: {n}")));
            }
            out.push((format!("{pad}{lead}[{}]{comma}", values.join(", ")), notes));
        }
        Form::Array(items) => {
            out.push((format!("{pad}{lead}["), notes));
            for (i, item) in items.iter().enumerate() {
                let sep = if i + 1 < items.len() { "," } else { "" };
                render(item, indent + 1, String::new(), sep, out);
            }
            out.push((format!("{pad}]{comma}"), Vec::new()));
        }
        Form::Object(fields) => {
            out.push((format!("{pad}{lead}{{"), notes));
            for (i, (name, field)) in fields.iter().enumerate() {
                let sep = if i + 1 < fields.len() { "," } else { "" };
                let lead = format!("{}: ", Value::from(name.as_str()));
                render(field, indent + 1, lead, sep, out);
            }
            out.push((format!("{pad}}}{comma}"), Vec::new()));
        }
    }
}

/// The first type a schema allows other than `null` (or `null` alone).
fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t),
        Some(Value::Array(ts)) => {
            let all: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            all.iter()
                .copied()
                .find(|t| *t != "null")
                .or(all.last().copied())
        }
        _ if schema.get("properties").is_some() => Some("object"),
        _ if schema.get("items").is_some() => Some("array"),
        _ => None,
    }
}

/// A one-line example of a schema that has one: its `const`, its enum's
/// first value, `"..."`, a number, `true`, `null`; `None` for objects,
/// arrays and schemas that say nothing of their type.
fn scalar(schema: &Value) -> Option<String> {
    if let Some(c) = schema.get("const") {
        return Some(c.to_string());
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return Some(first.to_string());
    }
    let n = |k: &str| schema.get(k).and_then(Value::as_f64);
    match type_of(schema)? {
        "string" => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let max = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            let len = 3u64.max(min).min(max).min(64) as usize;
            Some(format!("\"{}\"", ".".repeat(len)))
        }
        "integer" | "number" => {
            let low = n("minimum").or(n("exclusiveMinimum").map(|x| x + 1.0));
            let high = n("maximum").or(n("exclusiveMaximum").map(|x| x - 1.0));
            let x = match (low, high) {
                (Some(l), _) => l.ceil(),
                (None, Some(h)) if h < 0.0 => h.floor(),
                _ => 0.0,
            };
            Some(format!("{}", x as i64))
        }
        "boolean" => Some("true".to_owned()),
        "null" => Some("null".to_owned()),
        _ => None,
    }
}

/// What a schema's comment says of it: its description, the values it may
/// take, what it must be.
fn describe(schema: &Value) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let line = d.lines().next().unwrap_or_default().trim();
        let line = line.strip_suffix('.').unwrap_or(line);
        if !line.is_empty() {
            notes.push(crate::text::truncate(line, 300).into_owned());
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && values.len() > 1
    {
        let all: Vec<String> = values.iter().map(Value::to_string).collect();
        notes.push(format!("one of {}", all.join(", ")));
    }
    if let Some(Value::Array(ts)) = schema.get("type")
        && ts.len() > 1
    {
        let first = type_of(schema).unwrap_or_default();
        let others: Vec<&str> = ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != first)
            .collect();
        notes.push(format!("or {}", others.join(" or ")));
    }
    let num = |k: &str| schema.get(k).and_then(Value::as_u64);
    match num("minLength") {
        Some(1) => notes.push("non-empty".to_owned()),
        Some(n) if n > 1 => notes.push(format!("at least {n} characters")),
        _ => {}
    }
    if let Some(n) = num("minItems").filter(|n| *n > 0) {
        notes.push(format!(
            "at least {}",
            crate::text::plural(n as usize, "item")
        ));
    }
    if num("maxItems") == Some(0) {
        notes.push("empty".to_owned());
    }
    for (k, word) in [("minimum", "at least"), ("maximum", "at most")] {
        if let Some(x) = schema.get(k).filter(|v| v.is_number()) {
            notes.push(format!("{word} {x}"));
        }
    }
    if let Some(f) = schema.get("format").and_then(Value::as_str) {
        notes.push(format!("format {f}"));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        notes.push(format!("matching {p}"));
    }
    if type_of(schema) == Some("object")
        && schema.get("properties").is_none()
        && let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object())
    {
        let of = type_of(values).unwrap_or("any JSON value");
        notes.push(format!("names to {of} values"));
    }
    if ["const", "enum", "$ref", "anyOf", "oneOf", "allOf"]
        .iter()
        .all(|k| schema.get(*k).is_none())
        && type_of(schema).is_none()
    {
        notes.push("any JSON value".to_owned());
    }
    notes
}

/// The example of `schema` as JSON (for tests and tools).
#[cfg(test)]
fn example(schema: &Value) -> Value {
    Builder { root: schema }.node(schema, 0).value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example with its comments taken off, as an agent would answer.
    fn uncommented(shape: &str) -> Value {
        let block = shape
            .split("```jsonc\n")
            .nth(1)
            .and_then(|b| b.split("\n```").next())
            .unwrap();
        let json: String = block
            .lines()
            .filter(|l| !l.starts_with("//"))
            .map(|l| l.split("  // ").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}:\n{json}"))
    }

    /// Every shipped output schema's stated shape is an answer it accepts.
    #[test]
    fn every_shipped_shape_is_a_valid_answer() {
        let schemas = Schemas::shipped();
        for id in crate::schema::SHIPPED_OUTPUTS {
            let shape = output_shape(schemas, id);
            let answer = uncommented(&shape);
            let errors = schemas.validate(id, &answer).unwrap();
            assert!(errors.is_empty(), "{id}: {errors:?}\n{shape}");
            assert_eq!(answer, example(&schemas.value(id).unwrap()), "{id}");
        }
    }

    #[test]
    fn the_plan_reads_as_its_schema_says() {
        let shape = output_shape(Schemas::shipped(), "task_spec");
        let expected = r#"```jsonc
{
  "title": "...",             // non-empty
  "summary": "...",           // non-empty
  "tasks": [                  // at least 1 item
    {
      "id": "...",            // non-empty
      "title": "...",         // non-empty
      "files": ["..."],       // Files this task may touch; each: non-empty
      "acceptance": ["..."],  // Acceptance checklist; at least 1 item; each: non-empty
      "description": "..."    // optional
    }
  ],
  "complexity": "low"         // one of "low", "medium", "high"
}
```
Leave out the // comments. A field marked optional may be left out or be null.
If you cannot do the task, answer {"error": "<why, in one line>"} instead.
"#;
        assert_eq!(&*shape, expected);
    }

    #[test]
    fn a_result_says_failure_its_own_way() {
        let shape = output_shape(Schemas::shipped(), "execution_result");
        assert!(
            shape.ends_with(
                "If you cannot do the task, answer with \"outcome\": \"failure\" and say why in \"error\".\n"
            ),
            "{shape}"
        );
        assert!(shape.contains("// optional; or null"), "{shape}");
        assert!(output_shape(Schemas::shipped(), "any").starts_with("Any JSON object."));
    }

    /// A conditional's branch applies to the example it holds for: an
    /// approval has no blockers; `continue` needs its next task.
    #[test]
    fn conditionals_follow_the_example() {
        let review = output_shape(Schemas::shipped(), "review_result");
        assert!(review.contains("\"blockers\": [],"), "{review}");
        assert!(
            review.starts_with("```jsonc\n// An approval has no blockers"),
            "{review}"
        );
        let judge = output_shape(Schemas::shipped(), "judge_decision");
        assert!(
            !judge.contains("\"next_task\": \"...\"  // optional"),
            "{judge}"
        );
    }

    /// `$ref`s, alternatives, numbers and nested arrays of objects.
    #[test]
    fn refs_and_alternatives_resolve() {
        let schema = serde_json::json!({
            "type": "object",
            "required": ["steps", "score"],
            "properties": {
                "steps": { "type": "array", "minItems": 2, "items": { "$ref": "#/$defs/step" } },
                "score": { "type": "integer", "minimum": 1, "maximum": 5 },
                "note": { "anyOf": [{ "type": "null" }, { "type": "string" }] },
                "extra": {}
            },
            "$defs": { "step": { "type": "object", "required": ["ok"], "properties": { "ok": { "type": "boolean" } } } }
        });
        assert_eq!(
            example(&schema),
            serde_json::json!({"steps": [{"ok": true}, {"ok": true}], "score": 1, "extra": null, "note": "..."})
        );
        let mut lines = Vec::new();
        let node = Builder { root: &schema }.node(&schema, 0);
        render(&node, 0, String::new(), "", &mut lines);
        let text: Vec<String> = lines
            .iter()
            .map(|(l, n)| format!("{l} {}", n.join("; ")).trim_end().to_owned())
            .collect();
        assert_eq!(
            text,
            [
                "{",
                "  \"steps\": [ at least 2 items",
                "    {",
                "      \"ok\": true",
                "    },",
                "    {",
                "      \"ok\": true",
                "    }",
                "  ],",
                "  \"score\": 1, at least 1; at most 5",
                "  \"extra\": null, optional; any JSON value",
                "  \"note\": \"...\" optional",
                "}",
            ]
        );
    }
}
