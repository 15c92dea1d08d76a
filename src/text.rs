//! Small text helpers shared by everything that shows text to people: one
//! home for cutting, flattening and counting, so every table and message
//! does it the same way.

use std::borrow::Cow;

/// `s` cut to at most `max` characters, with `…` marking the cut.
pub fn truncate(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        Some((i, _)) => Cow::Owned(format!("{}…", &s[..i])),
        None => Cow::Borrowed(s),
    }
}

/// `s` on one line (newlines become spaces), cut to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    truncate(&s.replace(['\n', '\r'], " "), max).into_owned()
}

/// `1 task`, `2 tasks`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_characters_not_bytes() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 2), "hi");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(plural(1, "task"), "1 task");
        assert_eq!(plural(0, "task"), "0 tasks");
    }
}
