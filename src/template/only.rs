//! The part of a context a template reads, made into template values.
//!
//! A template names a few of the context package's fields (`epic`,
//! `task_spec`, …) and the package holds much more: every earlier output,
//! the previous answer, the feedback. Turning all of it into minijinja
//! values took most of a prompt's rendering, at every step. [`only`] turns
//! the top-level fields the template names, as its own analysis finds them
//! (`undeclared_variables`), and leaves the rest out; the template cannot
//! tell, as nothing it reads is missing.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use minijinja::Value;
use serde::Serialize;
use serde::ser::{self, Impossible};

/// `ctx`'s top-level fields named in `keep`, as one template value; `None`
/// when `ctx` is not a struct or a map (the caller then takes all of it).
pub(super) fn only(ctx: &impl Serialize, keep: &HashSet<String>) -> Option<Value> {
    ctx.serialize(Top { keep }).ok()
}

/// A serializer for the top level only: a struct or a map, whose entries
/// it keeps or drops by name.
struct Top<'k> {
    keep: &'k HashSet<String>,
}

/// The entries kept so far.
struct Fields<'k> {
    keep: &'k HashSet<String>,
    kept: BTreeMap<String, Value>,
    /// A map's key, waiting for its value (`None`: the entry is dropped).
    key: Option<String>,
}

impl Fields<'_> {
    fn field(&mut self, name: &str, value: &(impl Serialize + ?Sized)) {
        if self.keep.contains(name) {
            self.kept
                .insert(name.to_owned(), Value::from(minijinja::value::Serde(value)));
        }
    }

    fn done(self) -> Value {
        Value::from(self.kept)
    }
}

/// Anything but a struct or a map at the top: the caller falls back.
#[derive(Debug)]
struct NotFields;

impl fmt::Display for NotFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a struct or a map")
    }
}

impl std::error::Error for NotFields {}

impl ser::Error for NotFields {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotFields
    }
}

impl ser::SerializeStruct for Fields<'_> {
    type Ok = Value;
    type Error = NotFields;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NotFields> {
        self.field(key, value);
        Ok(())
    }

    fn end(self) -> Result<Value, NotFields> {
        Ok(self.done())
    }
}

impl ser::SerializeMap for Fields<'_> {
    type Ok = Value;
    type Error = NotFields;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), NotFields> {
        // Keys are names (a struct flattened into a map gives `&str`s).
        self.key = Value::from(minijinja::value::Serde(key))
            .as_str()
            .map(str::to_owned);
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NotFields> {
        if let Some(key) = self.key.take() {
            self.field(&key, value);
        }
        Ok(())
    }

    fn end(self) -> Result<Value, NotFields> {
        Ok(self.done())
    }
}

/// Every serializer method but `serialize_struct` and `serialize_map`
/// refuses.
macro_rules! refuse {
    ($($name:ident($($t:ty),*)),* $(,)?) => {
        $(fn $name(self, $(_: $t),*) -> Result<Value, NotFields> { Err(NotFields) })*
    };
}

impl<'k> ser::Serializer for Top<'k> {
    type Ok = Value;
    type Error = NotFields;
    type SerializeSeq = Impossible<Value, NotFields>;
    type SerializeTuple = Impossible<Value, NotFields>;
    type SerializeTupleStruct = Impossible<Value, NotFields>;
    type SerializeTupleVariant = Impossible<Value, NotFields>;
    type SerializeMap = Fields<'k>;
    type SerializeStruct = Fields<'k>;
    type SerializeStructVariant = Impossible<Value, NotFields>;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'k>, NotFields> {
        Ok(self.fields())
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Fields<'k>, NotFields> {
        Ok(self.fields())
    }

    refuse!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Value, NotFields> {
        Err(NotFields)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<Value, NotFields> {
        Err(NotFields)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Value, NotFields> {
        Err(NotFields)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotFields> {
        Err(NotFields)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotFields> {
        Err(NotFields)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotFields> {
        Err(NotFields)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotFields> {
        Err(NotFields)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotFields> {
        Err(NotFields)
    }
}

impl<'k> Top<'k> {
    fn fields(self) -> Fields<'k> {
        Fields {
            keep: self.keep,
            kept: BTreeMap::new(),
            key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[derive(Serialize)]
    struct Inner {
        a: u32,
        big: Vec<u32>,
    }

    #[derive(Serialize)]
    struct Outer<'a> {
        #[serde(flatten)]
        inner: &'a Inner,
        extra: &'a str,
    }

    #[test]
    fn only_the_named_fields_of_a_struct_or_a_map_are_kept() {
        let inner = Inner {
            a: 1,
            big: vec![1, 2, 3],
        };
        let v = only(&inner, &keep(&["a", "absent"])).unwrap();
        assert_eq!(v.to_string(), "{'a': 1}");
        let outer = Outer {
            inner: &inner,
            extra: "x",
        };
        let v = only(&outer, &keep(&["big", "extra"])).unwrap();
        assert_eq!(v.to_string(), "{'big': [1, 2, 3], 'extra': 'x'}");
        let map = serde_json::json!({"a": {"b": 2}, "c": 3});
        let v = only(&map, &keep(&["a"])).unwrap();
        assert_eq!(v.to_string(), "{'a': {'b': 2}}");
    }

    #[test]
    fn anything_else_is_left_to_the_caller() {
        assert!(only(&3, &keep(&["a"])).is_none());
        assert!(only(&vec![1], &keep(&["a"])).is_none());
        assert!(only(&Some(serde_json::json!({"a": 1})), &keep(&["a"])).is_none());
    }
}
