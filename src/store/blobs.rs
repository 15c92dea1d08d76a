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

use rusqlite::{OptionalExtension, Row, params};
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
        let text = self.json_value(value)?;
        self.put(text.as_bytes()).map(Some)
    }

    fn put(&self, content: &[u8]) -> Result<i64, StoreError> {
        let hash = hex(&Sha256::digest(content));
        let found: Option<i64> = self
            .tx
            .prepare_cached("SELECT id FROM blobs WHERE hash = ?1")
            .and_then(|mut s| s.query_row([&hash], |r| r.get(0)).optional())
            .ctx(self.path, "looking up stored text")?;
        if let Some(id) = found {
            return Ok(id);
        }
        let (text, bytes) = match std::str::from_utf8(content) {
            Ok(t) if !t.contains('\0') => (Some(t), None),
            _ => (None, Some(content)),
        };
        self.tx
            .prepare_cached("INSERT INTO blobs (hash, size, text, bytes) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![hash, content.len() as i64, text, bytes]))
            .ctx(self.path, "storing text")?;
        Ok(self.tx.last_insert_rowid())
    }
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
