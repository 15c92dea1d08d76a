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
