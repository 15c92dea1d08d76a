//! The JSON Schemas embedded from `schemas/`: one registry, built once, that
//! resolves every `$ref` locally (never over the network), and a cache of
//! compiled validators by schema id (`shells`, `task_spec`, …).
//!
//! The output schemas a project can name — the shipped ones and its own
//! `.modix/schemas/<id>.schema.json` — are a [`Schemas`] value the project
//! holds: loaded and checked with the project, passed to whatever needs
//! them (the FSM checks, the manifest checks, the run), never global.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use jsonschema::{Registry, Validator, error::ValidationErrorKind};
use serde_json::Value;

use crate::embedded::SCHEMAS;

mod outputs;

#[allow(unused_imports)] // SHIPPED_OUTPUTS: for the orchestrator and tests.
pub use outputs::{ANY, SHIPPED_OUTPUTS, Schemas};

/// Base URI of every embedded schema's `$id`.
pub const BASE_URI: &str = "https://modix.dev/schemas/";

/// Something went wrong with the schemas themselves (a bug, not user input).
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("no schema with id `{id}`; known: {known}")]
    Unknown { id: String, known: String },
    #[error("embedded schema `{id}` is broken: {reason}")]
    Broken { id: String, reason: String },
}

/// One way an instance breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// JSON pointer of the offending value ("" for the root).
    pub pointer: String,
    /// For unknown keys: the key, so a report can point at it and suggest a name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_key: Option<String>,
    /// For unknown keys: the keys allowed at that place.
    #[serde(skip)]
    pub allowed_keys: Vec<String>,
    pub message: String,
}

struct Embedded {
    registry: Registry<'static>,
    texts: HashMap<String, &'static str>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

fn schemas() -> &'static Result<Embedded, SchemaError> {
    static SCHEMAS_CELL: OnceLock<Result<Embedded, SchemaError>> = OnceLock::new();
    SCHEMAS_CELL.get_or_init(load)
}

fn load() -> Result<Embedded, SchemaError> {
    let mut texts = HashMap::new();
    let mut resources = Vec::new();
    for file in SCHEMAS.files() {
        let name = file.path().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".schema.json") else {
            continue;
        };
        let text = file
            .contents_utf8()
            .ok_or_else(|| broken(id, "not UTF-8"))?;
        let value: Value = serde_json::from_str(text).map_err(|e| broken(id, e))?;
        texts.insert(id.to_owned(), text);
        resources.push((format!("{BASE_URI}{name}"), value));
    }
    let registry = Registry::new()
        .extend(resources)
        .and_then(|b| b.prepare())
        .map_err(|e| broken("registry", e))?;
    Ok(Embedded {
        registry,
        texts,
        validators: Mutex::new(HashMap::new()),
    })
}

fn broken(id: &str, reason: impl ToString) -> SchemaError {
    SchemaError::Broken {
        id: id.to_owned(),
        reason: reason.to_string(),
    }
}

fn loaded() -> Result<&'static Embedded, SchemaError> {
    schemas().as_ref().map_err(|e| match e {
        SchemaError::Unknown { id, known } => SchemaError::Unknown {
            id: id.clone(),
            known: known.clone(),
        },
        SchemaError::Broken { id, reason } => broken(id, reason),
    })
}

/// Ids of every embedded schema, sorted.
pub fn ids() -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = SCHEMAS
        .files()
        .filter_map(|f| f.path().to_str()?.strip_suffix(".schema.json"))
        .collect();
    ids.sort_unstable();
    ids
}

/// The schema's text, e.g. to hand an agent the schema its output must satisfy.
pub fn text(id: &str) -> Result<&'static str, SchemaError> {
    let s = loaded()?;
    s.texts.get(id).copied().ok_or_else(|| unknown(id))
}

fn unknown(id: &str) -> SchemaError {
    SchemaError::Unknown {
        id: id.to_owned(),
        known: ids().join(", "),
    }
}

/// The compiled validator for `id`, built once per process.
pub fn validator(id: &str) -> Result<Arc<Validator>, SchemaError> {
    let s = loaded()?;
    if !s.texts.contains_key(id) {
        return Err(unknown(id));
    }
    let mut cache = s.validators.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = cache.get(id) {
        return Ok(Arc::clone(v));
    }
    let root = serde_json::json!({ "$ref": format!("{BASE_URI}{id}.schema.json") });
    let v = jsonschema::options()
        .with_registry(&s.registry)
        .build(&root)
        .map_err(|e| broken(id, e))?;
    let v = Arc::new(v);
    cache.insert(id.to_owned(), Arc::clone(&v));
    Ok(v)
}

/// Every way `instance` breaks schema `id` (empty when valid).
pub fn validate(id: &str, instance: &Value) -> Result<Vec<Violation>, SchemaError> {
    let validator = validator(id)?;
    Ok(violations(&validator, instance, || schema_root(id)))
}

/// Every way `instance` breaks `validator`; `root` gives the schema
/// document, read only to list the keys allowed where an unknown one is.
fn violations(
    validator: &Validator,
    instance: &Value,
    root: impl Fn() -> Option<Value>,
) -> Vec<Violation> {
    if validator.is_valid(instance) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for err in validator.iter_errors(instance) {
        let pointer = err.instance_path().as_str().to_owned();
        match err.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let allowed = allowed_keys(err.schema_path().as_str(), root());
                for key in unexpected {
                    out.push(Violation {
                        pointer: format!("{pointer}/{}", escape_pointer(key)),
                        unknown_key: Some(key.clone()),
                        allowed_keys: allowed.clone(),
                        message: format!("unknown key `{key}`"),
                    });
                }
            }
            _ => out.push(Violation {
                pointer,
                unknown_key: None,
                allowed_keys: Vec::new(),
                message: err.to_string(),
            }),
        }
    }
    out.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    out.dedup();
    out
}

fn schema_root(id: &str) -> Option<Value> {
    text(id).ok().and_then(|t| serde_json::from_str(t).ok())
}

/// The `properties` names next to the `additionalProperties: false` that failed,
/// found by walking the schema path (through local `$ref`s into `$defs`).
fn allowed_keys(schema_path: &str, root: Option<Value>) -> Vec<String> {
    let Some(root) = root else { return Vec::new() };
    // The schema path starts with the `$ref` we wrapped the schema in.
    let mut node = &root;
    let mut segments: Vec<&str> = schema_path.split('/').skip(1).collect();
    if segments.first() == Some(&"$ref") {
        segments.remove(0);
    }
    let owned_roots = load_all_roots();
    for seg in segments {
        if seg == "additionalProperties" {
            break;
        }
        if seg == "$ref" {
            let Some(target) = node.get("$ref").and_then(Value::as_str) else {
                return Vec::new();
            };
            node = match resolve_ref(target, &root, owned_roots) {
                Some(n) => n,
                None => return Vec::new(),
            };
            continue;
        }
        let key = unescape_pointer(seg);
        node = match node {
            Value::Object(map) => match map.get(&key) {
                Some(n) => n,
                None => return Vec::new(),
            },
            Value::Array(items) => match key.parse::<usize>().ok().and_then(|i| items.get(i)) {
                Some(n) => n,
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        };
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|m| m.keys().filter(|k| *k != "$schema").cloned().collect())
        .unwrap_or_default()
}

fn load_all_roots() -> &'static HashMap<String, Value> {
    static ROOTS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        ids()
            .into_iter()
            .filter_map(|id| Some((id.to_owned(), serde_json::from_str(text(id).ok()?).ok()?)))
            .collect()
    })
}

fn resolve_ref<'a>(
    target: &str,
    root: &'a Value,
    roots: &'a HashMap<String, Value>,
) -> Option<&'a Value> {
    let (doc, fragment) = target.split_once('#').unwrap_or((target, ""));
    let base = if doc.is_empty() {
        root
    } else {
        let id = doc.strip_prefix(BASE_URI)?.strip_suffix(".schema.json")?;
        roots.get(id)?
    };
    base.pointer(fragment)
}

/// Keywords strict structured output (OpenAI's `strict: true`, which Codex's
/// `--output-schema` turns on) refuses: dropped from the wire schema.
/// Nothing is lost: modix validates the answer against the full schema.
const NOT_STRICT: [&str; 15] = [
    "$schema",
    "$id",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "propertyNames",
];

/// Schema `id` in the form strict structured output accepts: every object
/// closed (`additionalProperties: false`) with every property required,
/// the optional ones nullable (the model answers `null` for what it would
/// leave out; [`drop_optional_nulls`] undoes that before validation), a
/// `type` beside every `enum`, and no `$schema` (Claude Code's
/// `--json-schema` silently drops its StructuredOutput tool for a
/// draft 2020-12 `$schema`).
pub fn strict(schema: &Value) -> Value {
    let mut v = schema.clone();
    make_strict(&mut v);
    v
}

fn make_strict(node: &mut Value) {
    let Value::Object(map) = node else { return };
    for k in NOT_STRICT {
        map.remove(k);
    }
    if !map.contains_key("type")
        && let Some(Value::Array(values)) = map.get("enum")
    {
        let ty = enum_type(values);
        map.insert("type".into(), ty);
    }
    if map.contains_key("properties") {
        close_object(map);
    }
    for key in ["items", "not"] {
        if let Some(child) = map.get_mut(key) {
            make_strict(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(make_strict);
        }
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(make_strict);
        }
    }
}

/// Every property required, the ones that were not made nullable, and
/// nothing else allowed.
fn close_object(map: &mut serde_json::Map<String, Value>) {
    let required = required_of(map);
    let Some(Value::Object(props)) = map.get_mut("properties") else {
        return;
    };
    for (name, prop) in props.iter_mut() {
        if !required.contains(name) {
            make_nullable(prop);
        }
    }
    let all: Vec<Value> = props.keys().map(|k| Value::String(k.clone())).collect();
    map.insert("required".into(), Value::Array(all));
    map.insert("additionalProperties".into(), Value::Bool(false));
}

fn required_of(map: &serde_json::Map<String, Value>) -> Vec<String> {
    map.get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON type(s) of an `enum`'s values, for the `type` strict mode wants.
fn enum_type(values: &[Value]) -> Value {
    let mut types: Vec<&str> = Vec::new();
    for v in values {
        let t = match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        if !types.contains(&t) {
            types.push(t);
        }
    }
    match types.as_slice() {
        [one] => Value::String((*one).to_owned()),
        many => many
            .iter()
            .map(|t| Value::String((*t).to_owned()))
            .collect(),
    }
}

/// Lets `null` through a property schema: in its `type`, its `enum`, or as
/// one more `anyOf` branch.
fn make_nullable(prop: &mut Value) {
    let Value::Object(map) = prop else { return };
    if let Some(Value::Array(values)) = map.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    let null = Value::String("null".into());
    match map.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = Value::String(std::mem::take(t));
            map.insert("type".into(), Value::Array(vec![t, null]));
        }
        Some(Value::Array(types)) if !types.contains(&null) => types.push(null),
        Some(_) => {}
        None => {
            if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
                branches.push(serde_json::json!({"type": "null"}));
            }
        }
    }
}

/// Removes the `null`s a strict-mode model gave for optional properties
/// its schema does not let be `null` (see [`strict`]), so the answer is
/// judged against `schema` as if they had been left out.
pub fn drop_optional_nulls(schema: &Value, value: &mut Value) {
    drop_nulls(schema, value);
}

fn drop_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required = schema.as_object().map(required_of).unwrap_or_default();
            fields.retain(|k, v| {
                !(v.is_null()
                    && !required.contains(k)
                    && props.get(k).is_some_and(|p| !allows_null(p)))
            });
            for (k, v) in fields.iter_mut() {
                if let Some(p) = props.get(k) {
                    drop_nulls(p, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|v| drop_nulls(item_schema, v));
            }
        }
        _ => {}
    }
}

fn allows_null(schema: &Value) -> bool {
    let null = Value::String("null".into());
    match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.contains(&null),
        _ => schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.contains(&Value::Null)),
    }
}

/// Escapes a key for use in a JSON pointer (RFC 6901).
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The key one JSON pointer segment names (the inverse of [`escape_pointer`]).
pub fn unescape_pointer(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_embedded_schema_compiles() {
        for id in ids() {
            validator(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        }
    }

    #[test]
    fn unknown_keys_point_at_the_key_and_list_allowed_ones() {
        let v = validate(
            "brains",
            &json!({"brains": {"b": {"provider": "x", "model": "m", "modle": 1}}}),
        )
        .unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pointer, "/brains/b/modle");
        assert!(v[0].allowed_keys.contains(&"model".to_owned()), "{v:?}");
    }

    /// Every object closed and fully required, optional fields nullable,
    /// every enum typed, nothing strict mode refuses — at every depth.
    fn assert_strict(node: &Value, at: &str) {
        let Value::Object(map) = node else { return };
        for k in NOT_STRICT {
            assert!(!map.contains_key(k), "{at}: {k}");
        }
        if map.contains_key("enum") {
            assert!(map.contains_key("type"), "{at}: enum without type");
        }
        if let Some(Value::Object(props)) = map.get("properties") {
            assert_eq!(map["additionalProperties"], false, "{at}");
            let required: Vec<&str> = map["required"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            for (k, p) in props {
                assert!(required.contains(&k.as_str()), "{at}/{k} not required");
                assert_strict(p, &format!("{at}/{k}"));
            }
        }
        if let Some(items) = map.get("items") {
            assert_strict(items, &format!("{at}[]"));
        }
    }

    fn shipped(id: &str) -> Value {
        serde_json::from_str(text(id).unwrap()).unwrap()
    }

    #[test]
    fn strict_schemas_are_strict_everywhere() {
        for id in ["task_spec", "execution_result", "test_result"] {
            assert_strict(&strict(&shipped(id)), id);
        }
        let task = strict(&shipped("task_spec"));
        assert_eq!(task["properties"]["complexity"]["type"], "string");
        let item = &task["properties"]["tasks"]["items"]["properties"];
        // Optional before: nullable now; required ones stay as they were.
        assert_eq!(item["description"]["type"], json!(["string", "null"]));
        assert_eq!(item["id"]["type"], "string");
        let result = strict(&shipped("execution_result"));
        assert_eq!(
            result["properties"]["error"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            result["properties"]["files_changed"]["type"],
            json!(["array", "null"])
        );
        assert_eq!(
            result["properties"]["outcome"]["enum"],
            json!(["success", "failure"])
        );
    }

    #[test]
    fn nulls_of_optional_fields_are_dropped_before_validation() {
        // What a strict-mode model answers: every field, `null` for the optional ones.
        let mut spec = json!({"title": "t", "summary": "s", "complexity": "low", "tasks": [
            {"id": "T1", "title": "x", "description": null, "files": ["a.py"], "acceptance": ["ok"]}]});
        assert!(!validate("task_spec", &spec).unwrap().is_empty());
        drop_optional_nulls(&shipped("task_spec"), &mut spec);
        assert!(validate("task_spec", &spec).unwrap().is_empty(), "{spec}");
        assert!(spec["tasks"][0].get("description").is_none());

        // A null the schema allows stays; a null of a required field is left for validation to refuse.
        let mut result =
            json!({"outcome": "success", "summary": "s", "files_changed": null, "error": null});
        drop_optional_nulls(&shipped("execution_result"), &mut result);
        assert_eq!(
            result,
            json!({"outcome": "success", "summary": "s", "error": null})
        );
        let mut bad = json!({"passed": null, "summary": "s", "failures": null});
        drop_optional_nulls(&shipped("test_result"), &mut bad);
        assert_eq!(bad, json!({"passed": null, "summary": "s"}));
        assert!(!validate("test_result", &bad).unwrap().is_empty());
    }

    #[test]
    fn outputs_validate() {
        assert!(
            validate("test_result", &json!({"passed": true, "summary": "ok"}))
                .unwrap()
                .is_empty()
        );
        assert!(
            !validate("test_result", &json!({"passed": "yes", "summary": "ok"}))
                .unwrap()
                .is_empty()
        );
    }
}
