//! Large texts stored once: prompts, context packages, agent output, parsed
//! answers and message payloads live in `blobs`, addressed by the SHA-256 of
//! their (redacted) content and referenced by id from the rows that need
//! them, so the same text written by several steps — or several times in one
//! step — takes its space once.
//!
//! Content that is UTF-8 text without NUL bytes is kept as TEXT; anything
//! else (NUL bytes, invalid UTF-8 from an agent) as a BLOB of the exact
//! bytes, so nothing is altered on the way in and any SQLite tool can read
//! the row.

use rusqlite::{Row, params};
use sha2::{Digest, Sha256};

use super::{Ctx, StoreError, Writer};

impl Writer<'_> {
    /// Stores `content` (redacted first) once and returns its id; `None` for
    /// empty content, which needs no row.
    pub(super) fn blob(&self, content: &[u8]) -> Result<Option<i64>, StoreError> {
        if content.is_empty() {
            return Ok(None);
        }
        let redacted = self.redactor.redact_bytes(content);
        self.put(&redacted).map(Some)
    }

    /// [`Writer::blob`] for a JSON value, serialised after redacting its strings.
    pub(super) fn blob_json(&self, value: &serde_json::Value) -> Result<Option<i64>, StoreError> {
        self.stored_json(value).map(|s| Some(s.id))
    }

    /// Stores a JSON value (its strings redacted first) once: its blob id
    /// and the value as stored, for a caller that stores it again.
    pub(super) fn stored_json<'v>(
        &self,
        value: &'v serde_json::Value,
    ) -> Result<StoredJson<'v>, StoreError> {
        let value = self.redactor.redact_json(value);
        let id = self.put(self.encode(&value)?.as_bytes())?;
        Ok(StoredJson { id, value })
    }

    /// Stores an agent's stdout (redacted first, as [`Writer::blob`] does)
    /// and its answer (as [`Writer::stored_json`] does): one blob for both
    /// when the stdout as stored is the answer's JSON document, as a plain
    /// command's nearly always is, so the answer's text is not written
    /// twice (a blob row, its hash's index entry and ~a page of log less
    /// per step, docs/performance.md, sixteenth round). Either way the
    /// answer's blob reads back as the same value.
    pub(super) fn stored_output<'v>(
        &self,
        stdout: &[u8],
        answer: Option<&'v serde_json::Value>,
    ) -> Result<(Option<i64>, Option<StoredJson<'v>>), StoreError> {
        let text = self.redactor.redact_bytes(stdout);
        let out = match text.is_empty() {
            true => None,
            false => Some(self.put(&text)?),
        };
        let Some(answer) = answer else {
            return Ok((out, None));
        };
        let value = self.redactor.redact_json(answer);
        let id = match out {
            Some(id) if is_document(&text, &value) => id,
            _ => self.put(self.encode(&value)?.as_bytes())?,
        };
        Ok((out, Some(StoredJson { id, value })))
    }

    /// Stores `content` as it is (already redacted, or holding no secret)
    /// once and returns its id.
    pub(super) fn put(&self, content: &[u8]) -> Result<i64, StoreError> {
        self.put_digested(Sha256::digest(content).into(), content)
    }

    /// [`Writer::put`] for a text hashed already.
    pub(super) fn put_text(&self, text: &Text) -> Result<i64, StoreError> {
        self.put_digested(text.digest, &text.content)
    }

    fn put_digested(&self, digest: Hash, content: &[u8]) -> Result<i64, StoreError> {
        if let Some(id) = self.blob_ids.get(&digest) {
            return Ok(id);
        }
        let hash = hex(&digest);
        let (text, bytes) = match std::str::from_utf8(content) {
            Ok(t) if !t.contains('\0') => (Some(t), None),
            _ => (None, Some(content)),
        };
        // Inserted at once, as a new text nearly always is (one known is
        // mostly found above); only a text already stored is looked up.
        // Its id is the row id the insert made, not a `RETURNING id`:
        // SQLite runs RETURNING as a trigger writing into a table of its
        // own, with a statement journal, which made the step's first
        // insert ~13 µs slower and each later one ~6 µs
        // (docs/performance.md, eighteenth round).
        let inserted: Option<i64> = self
            .tx
            .prepare_cached(
                "INSERT INTO blobs (hash, size, text, bytes) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (hash) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![hash, content.len() as i64, text, bytes]))
            .map(|rows| (rows == 1).then(|| self.tx.last_insert_rowid()))
            .ctx(self.path, "storing text")?;
        let id = match inserted {
            Some(id) => id,
            None => self
                .tx
                .prepare_cached("SELECT id FROM blobs WHERE hash = ?1")
                .and_then(|mut s| s.query_row([&hash], |r| r.get(0)))
                .ctx(self.path, "looking up stored text")?,
        };
        self.new_blob_ids.borrow_mut().push((digest, id));
        Ok(id)
    }
}

/// A JSON value as stored: its blob and its redacted value.
pub(super) struct StoredJson<'v> {
    pub(super) id: i64,
    pub(super) value: std::borrow::Cow<'v, serde_json::Value>,
}

/// A SHA-256 digest.
pub(super) type Hash = [u8; 32];

/// Content as [`Writer::put`] stores it (redacted already), hashed ahead of
/// the transaction that stores it.
#[derive(Debug, Clone)]
pub(super) struct Text {
    digest: Hash,
    content: Vec<u8>,
}

impl Text {
    pub(super) fn new(content: Vec<u8>) -> Text {
        Text {
            digest: Sha256::digest(&content).into(),
            content,
        }
    }
}

/// The ids of blobs known to be committed, by hash: a step's texts that
/// repeat (the same output, the package's stable part, a payload equal to
/// the parsed answer) are found without a lookup. Sound because a blob's
/// row never changes or goes once committed (nothing deletes from `blobs`,
/// and VACUUM keeps an INTEGER PRIMARY KEY), whoever wrote it; entries of a
/// transaction that did not commit are never learnt.
#[derive(Debug, Default)]
pub(super) struct Known(std::collections::HashMap<Hash, i64>);

/// Enough for every text a long run repeats; past it, start over.
const KNOWN_MAX: usize = 4096;

impl Known {
    fn get(&self, hash: &Hash) -> Option<i64> {
        self.0.get(hash).copied()
    }

    pub(super) fn learn(&mut self, found: Vec<(Hash, i64)>) {
        if self.0.len() + found.len() > KNOWN_MAX {
            self.0.clear();
        }
        self.0.extend(found);
    }
}

/// The longest stdout [`is_document`] parses: a CLI's envelope or event
/// stream (never the answer as it is) can be far longer, and is only
/// parsed to find out.
const DOCUMENT_MAX: usize = 1 << 16;

/// Whether `text` is one JSON document (an object or an array, whitespace
/// around it) whose value is `value`: a reader then gets `value` from it.
fn is_document(text: &[u8], value: &serde_json::Value) -> bool {
    let starts = text.iter().find(|b| !b.is_ascii_whitespace());
    text.len() <= DOCUMENT_MAX
        && matches!(starts, Some(b'{' | b'['))
        && serde_json::from_slice::<serde_json::Value>(text).is_ok_and(|doc| doc == *value)
}

fn hex(digest: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(digest.len() * 2);
    for b in digest {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The content of the blob whose `text` and `bytes` columns are at `idx` and
/// `idx + 1` of a row (LEFT JOINed; both NULL when there is no blob): text
/// as stored, bytes decoded with invalid UTF-8 replaced.
pub(super) fn read(row: &Row<'_>, idx: usize) -> rusqlite::Result<String> {
    if let Some(text) = row.get::<_, Option<String>>(idx)? {
        return Ok(text);
    }
    Ok(row
        .get::<_, Option<Vec<u8>>>(idx + 1)?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default())
}

/// [`read`] for a blob holding JSON; `None` when there is no blob.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<T>> {
    let Some(text) = row.get::<_, Option<String>>(idx)? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// `LEFT JOIN blobs <alias> ON <alias>.id = <column>`, and the two columns
/// [`read`] takes, for a query over a row that references a blob.
pub(super) fn join(alias: &str, column: &str) -> (String, String) {
    (
        format!(" LEFT JOIN blobs {alias} ON {alias}.id = {column}"),
        format!("{alias}.text, {alias}.bytes"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn hashes_are_lowercase_hex_of_the_sha256() {
        use sha2::{Digest, Sha256};
        assert_eq!(
            super::hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(super::hex(&[0x00, 0x0f, 0xf0, 0xff]), "000ff0ff");
    }
}
