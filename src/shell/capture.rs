//! Bounded capture of one output stream: the first `head_bytes` and the last
//! `tail_bytes`, plus a count of everything that went by.
//!
//! Agents can print megabytes (full diffs, test logs, JSON event streams). We
//! keep the start (where the command line and early errors are) and the end
//! (where the result and the final error are) and drop the middle, so memory
//! stays at `head_bytes + tail_bytes` no matter how much the process prints.

use std::collections::VecDeque;

/// How much of one stream to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Bytes kept from the start of the stream.
    pub head_bytes: usize,
    /// Bytes kept from the end of the stream.
    pub tail_bytes: usize,
}

impl Default for CaptureLimits {
    /// 256 KiB of head and 256 KiB of tail: enough for a whole JSON result and
    /// a useful error log, small enough to keep many runs in memory.
    fn default() -> Self {
        Self {
            head_bytes: 256 * 1024,
            tail_bytes: 256 * 1024,
        }
    }
}

/// What was kept of a stream, ready to show or store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The bytes as the process wrote them (stored faithfully, even when
    /// they are not text). When the stream was longer than head + tail this
    /// is `head + "\n…[N bytes omitted]…\n" + tail`.
    pub bytes: Vec<u8>,
    /// Every byte the stream produced, kept or not.
    pub total_bytes: u64,
    /// Bytes dropped from the middle (0 when nothing was dropped).
    pub omitted_bytes: u64,
}

impl Captured {
    /// Whether the middle of the stream was dropped.
    pub fn is_truncated(&self) -> bool {
        self.omitted_bytes > 0
    }

    /// The bytes as text, with invalid UTF-8 replaced (for parsing and
    /// messages; the record keeps the bytes themselves).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        // Valid UTF-8, as an agent's output nearly always is, is checked
        // by the standard library's fast path (a word at a time over
        // ASCII); the lossy decoder walks it in chunks, several times
        // slower, and is only needed for what that check refuses.
        match std::str::from_utf8(&self.bytes) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&self.bytes),
        }
    }
}

/// How far the cut of a truncated stream moves to avoid splitting a word:
/// a secret (an API key is one word) cut in half would leave its first
/// characters in the record, where no redactor can recognise them.
const WORD_MARGIN: usize = 1024;

/// Whether a byte can be part of a secret-like word (keys, tokens).
fn in_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b'+' | b'=' | b'~')
}

/// The last `n` non-blank lines of `text` (all of them if it has fewer), for
/// messages that should show how a process ended without flooding.
pub fn last_lines(text: &str, n: usize) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .collect();
    lines.reverse();
    lines
}

/// Accumulates a stream within [`CaptureLimits`].
#[derive(Debug)]
pub struct CaptureBuffer {
    limits: CaptureLimits,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl CaptureBuffer {
    pub fn new(limits: CaptureLimits) -> Self {
        Self {
            limits,
            // Grow on demand: most runs print far less than the limits.
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Add a chunk of the stream.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let head_room = self.limits.head_bytes.saturating_sub(self.head.len());
        if head_room > 0 {
            let take = head_room.min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        let cap = self.limits.tail_bytes;
        if chunk.is_empty() || cap == 0 {
            return;
        }
        if chunk.len() >= cap {
            // The chunk alone fills the tail: keep only its end.
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - cap..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(cap);
        self.tail.drain(..overflow);
        self.tail.extend(chunk);
    }

    /// Bytes currently held (never more than head + tail).
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub fn finish(self) -> Captured {
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        let kept = (self.head.len() + tail.len()) as u64;
        let dropped = self.total - kept;
        if dropped == 0 {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return Captured {
                bytes: all,
                total_bytes: self.total,
                omitted_bytes: 0,
            };
        }
        // The cut points can fall inside a multi-byte character or a word;
        // trim the partial pieces rather than keep half of either.
        let head = trim_partial_end(&self.head);
        let head = &head[..word_end(head)];
        let tail = &tail[partial_start_len(&tail)..];
        let tail = &tail[word_start(tail)..];
        let omitted = self.total - (head.len() + tail.len()) as u64;
        let mut bytes = Vec::with_capacity(head.len() + tail.len() + 40);
        bytes.extend_from_slice(head);
        bytes.extend_from_slice(format!("\n…[{omitted} bytes omitted]…\n").as_bytes());
        bytes.extend_from_slice(tail);
        Captured {
            bytes,
            total_bytes: self.total,
            omitted_bytes: omitted,
        }
    }
}

/// Where `head` ends without its last word, when that word may have been cut
/// (it runs to the end); a word longer than [`WORD_MARGIN`] is kept.
pub(super) fn word_end(head: &[u8]) -> usize {
    let start = head.len().saturating_sub(WORD_MARGIN);
    match head[start..].iter().rposition(|&b| !in_word(b)) {
        Some(i) => start + i + 1,
        None if start == 0 => 0,
        None => head.len(),
    }
}

/// Where `tail` starts after its first word, which may have been cut.
fn word_start(tail: &[u8]) -> usize {
    let end = tail.len().min(WORD_MARGIN);
    match tail[..end].iter().position(|&b| !in_word(b)) {
        Some(i) => i,
        None if end == tail.len() => tail.len(),
        None => 0,
    }
}

/// `bytes` without an incomplete UTF-8 sequence at its end.
fn trim_partial_end(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        // `error_len() == None` means "ran out of input mid-character".
        Err(e) if e.error_len().is_none() => &bytes[..e.valid_up_to()],
        _ => bytes,
    }
}

/// How many leading UTF-8 continuation bytes `bytes` starts with (at most 3).
fn partial_start_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(head: usize, tail: usize) -> CaptureLimits {
        CaptureLimits {
            head_bytes: head,
            tail_bytes: tail,
        }
    }

    #[test]
    fn short_stream_is_kept_whole() {
        let mut c = CaptureBuffer::new(limits(10, 10));
        c.push(b"hello ");
        c.push(b"world");
        let got = c.finish();
        assert_eq!(got.text(), "hello world");
        assert_eq!(got.total_bytes, 11);
        assert!(!got.is_truncated());
    }

    #[test]
    fn exactly_head_plus_tail_is_not_truncated() {
        let mut c = CaptureBuffer::new(limits(3, 3));
        c.push(b"abcdef");
        let got = c.finish();
        assert_eq!(got.text(), "abcdef");
        assert_eq!(got.omitted_bytes, 0);
    }

    #[test]
    fn long_stream_keeps_head_and_tail() {
        let mut c = CaptureBuffer::new(limits(5, 5));
        for chunk in [&b"0123 "[..], b"45", b"6789", b"abcdefgh", b" XYZ"] {
            c.push(chunk);
        }
        assert!(c.held_bytes() <= 10);
        let got = c.finish();
        assert_eq!(got.total_bytes, 23);
        assert_eq!(got.omitted_bytes, 14);
        assert_eq!(got.text(), "0123 \n…[14 bytes omitted]…\n XYZ");
        assert!(got.is_truncated());
    }

    #[test]
    fn many_small_pushes_stay_bounded() {
        let mut c = CaptureBuffer::new(limits(100, 100));
        for i in 0..100_000u32 {
            c.push(format!("{i}\n").as_bytes());
            assert!(c.held_bytes() <= 200);
        }
        let got = c.finish();
        let text = got.text();
        assert!(text.starts_with("0\n1\n2\n"));
        assert!(text.ends_with("99998\n99999\n"));
        assert_eq!(last_lines(&text, 2), ["99998", "99999"]);
    }

    #[test]
    fn zero_limits_keep_nothing_but_count() {
        let mut c = CaptureBuffer::new(limits(0, 0));
        c.push(b"abc");
        let got = c.finish();
        assert_eq!(got.total_bytes, 3);
        assert_eq!(got.omitted_bytes, 3);
        assert_eq!(got.text(), "\n…[3 bytes omitted]…\n");
    }

    #[test]
    fn cuts_inside_characters_are_trimmed() {
        // "é" is two bytes; cut the head after the first and the tail before the second.
        let mut c = CaptureBuffer::new(limits(3, 3));
        c.push("a é-----é b".as_bytes());
        let got = c.finish();
        assert_eq!(got.text(), "a \n…[9 bytes omitted]…\n b");
        assert!(!got.text().contains('\u{FFFD}'));
    }

    #[test]
    fn a_cut_never_keeps_part_of_a_word() {
        // A key straddling either cut: none of its characters are kept, so
        // no prefix of it reaches the record.
        let key = "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut c = CaptureBuffer::new(limits(20, 20));
        c.push(format!("head {key} middle {key} end").as_bytes());
        let got = c.finish();
        let text = got.text();
        assert_eq!(text, "head \n…[106 bytes omitted]…\n end");
        assert!(!text.contains("sk-"), "{text}");
    }

    #[test]
    fn non_text_bytes_are_kept_as_written() {
        let mut c = CaptureBuffer::new(limits(10, 10));
        c.push(b"a\0b\xff");
        assert_eq!(c.finish().bytes, b"a\0b\xff");
    }

    #[test]
    fn last_lines_skips_blank_lines_and_handles_short_text() {
        let text = "one\n\ntwo\n  \n";
        assert_eq!(last_lines(text, 5), ["one", "two"]);
        assert_eq!(last_lines(text, 1), ["two"]);
        assert!(last_lines(text, 0).is_empty());
    }
}
