//! The values a package quotes from the run's record, written into its text
//! once per run each.
//!
//! A loop hands its agents the same plan, the same outputs and the last
//! answer again step after step: values the run stored as blobs. Writing
//! them into the package's JSON — every string escaped and checked for
//! secrets — was most of making a package's text (docs/performance.md,
//! twenty-seventh round). A blob's content never changes once stored, so a
//! value's text is made the first time the run writes it and reused after:
//! checked clean once by the run's redactor and written as it is, indented
//! to where it goes ([`CleanText`]). A value with something to redact is
//! never kept; it is written and redacted the package's way every time.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeStruct};
use serde_json::Value;

use super::super::inputs::{CameFrom, Output};
use crate::shell::{CleanText, Redactor};

/// A run's texts of stored values, by blob, with the redactor that checked
/// them (clones share them).
#[derive(Debug, Clone)]
pub(in crate::orchestrator) struct StoredTexts(Rc<Inner>);

#[derive(Debug)]
struct Inner {
    redactor: Redactor,
    /// `None`: the value has something to redact.
    by_blob: RefCell<HashMap<i64, Option<Rc<CleanText>>>>,
}

/// Enough for the values a long run keeps quoting; past it, start over.
const KEPT_MAX: usize = 512;

thread_local! {
    /// The texts a package's text is being written with ([`StoredTexts::writing`]).
    static WRITING: RefCell<Option<StoredTexts>> = const { RefCell::new(None) };
}

impl StoredTexts {
    pub(in crate::orchestrator) fn new(redactor: Redactor) -> Self {
        StoredTexts(Rc::new(Inner {
            redactor,
            by_blob: RefCell::default(),
        }))
    }

    pub(in crate::orchestrator) fn redactor(&self) -> &Redactor {
        &self.0.redactor
    }

    /// Runs `write` (a package's text being made with this redactor) with
    /// every [`Stored`] value written from these texts; elsewhere (the
    /// template engine's values, a redacted copy) a stored value is itself.
    pub(super) fn writing<R>(&self, write: impl FnOnce() -> R) -> R {
        struct Done(Option<StoredTexts>);
        impl Drop for Done {
            fn drop(&mut self) {
                WRITING.set(self.0.take());
            }
        }
        let _done = Done(WRITING.replace(Some(self.clone())));
        write()
    }

    /// Blob `blob`'s text, made from `value` (its content) the first time;
    /// `None` when it has something to redact.
    pub(in crate::orchestrator) fn text(&self, blob: i64, value: &Value) -> Option<Rc<CleanText>> {
        if let Some(known) = self.0.by_blob.borrow().get(&blob) {
            return known.clone();
        }
        let made = self.0.redactor.clean_text(value).map(Rc::new);
        let mut kept = self.0.by_blob.borrow_mut();
        if kept.len() >= KEPT_MAX {
            kept.clear();
        }
        kept.insert(blob, made.clone());
        made
    }
}

/// A value the run stored, as a package quotes it: `blob` is where (`None`:
/// not stored as one).
#[derive(Debug, Clone, Copy)]
pub(in crate::orchestrator) struct Stored<'a> {
    pub value: &'a Value,
    pub blob: Option<i64>,
}

impl Serialize for Stored<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let texts = WRITING.with_borrow(Clone::clone);
        match texts
            .zip(self.blob)
            .and_then(|(t, blob)| t.text(blob, self.value))
        {
            Some(text) => text.serialize(s),
            None => self.value.serialize(s),
        }
    }
}

/// The latest outputs as a package writes them (`schema`, `seq`, `output`),
/// each output a [`Stored`] value.
#[derive(Debug, Clone, Copy)]
pub(in crate::orchestrator) struct Outputs<'a>(pub &'a BTreeMap<String, Output>);

impl Serialize for Outputs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (state, out) in self.0 {
            map.serialize_entry(state, &OutputView(out))?;
        }
        map.end()
    }
}

struct OutputView<'a>(&'a Output);

impl Serialize for OutputView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let o = self.0;
        let mut st = s.serialize_struct("Output", 3)?;
        st.serialize_field("schema", &o.schema)?;
        st.serialize_field("seq", &o.seq)?;
        let output = Stored {
            value: &o.output,
            blob: Some(o.blob),
        };
        st.serialize_field("output", &output)?;
        st.end()
    }
}

/// The step that brought the run here as a package writes it (`seq`,
/// `state`, `event`, `reason`, `output`), its output a [`Stored`] value.
#[derive(Debug, Clone, Copy)]
pub(in crate::orchestrator) struct CameFromView<'a>(pub &'a CameFrom);

impl Serialize for CameFromView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut st = s.serialize_struct("CameFrom", 5)?;
        st.serialize_field("seq", &c.seq)?;
        st.serialize_field("state", &c.state)?;
        st.serialize_field("event", &c.event)?;
        st.serialize_field("reason", &c.reason)?;
        let output = c.output.as_ref().map(|value| Stored {
            value,
            blob: c.output_blob,
        });
        st.serialize_field("output", &output)?;
        st.end()
    }
}
