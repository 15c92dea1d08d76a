//! Small text helpers shared by everything that shows text to people: one
//! home for cutting, wrapping, flattening and counting, and for how times
//! and durations read, so every table and message does it the same way.

use std::borrow::Cow;

/// `s` cut to at most `max` characters, with `…` marking the cut.
pub fn truncate(s: &str, max: usize) -> Cow<'_, str> {
    // No more bytes than that is no more characters; `max` bytes of ASCII
    // are `max` characters (checked a word at a time, where counting them
    // walks each): a step's reason is cut here at every step.
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    if s.as_bytes()[..max].is_ascii() {
        return Cow::Owned(format!("{}…", &s[..max]));
    }
    match s.char_indices().nth(max) {
        Some((i, _)) => Cow::Owned(format!("{}…", &s[..i])),
        None => Cow::Borrowed(s),
    }
}

/// `s` on one line with no tabs: what a tab-separated row can hold.
pub fn flat(s: &str) -> String {
    s.replace(['\n', '\r', '\t'], " ")
}

/// `s` on one line (see [`flat`]), cut to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    truncate(&flat(s), max).into_owned()
}

/// `s` safe to print on a terminal. Anything that came from an agent or a
/// user (reasons, epics, names, captured output) passes through this before
/// it reaches a terminal, so it cannot move the cursor, clear the screen,
/// retitle the window or hide what follows: C0 controls become their
/// visible symbols (ESC `␛`, CR `␍`, BS `␈`, BEL `␇`, NUL `␀`), DEL `␡`,
/// and C1 controls and bidirectional overrides `\u{9b}`, `\u{202e}`.
/// Newlines and tabs stay, and so does a CR right before a newline (a
/// CRLF line end moves nothing). `--json` keeps the raw text instead.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_on_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => out.push(c),
            c if !unsafe_on_terminal(c) => out.push(c),
            '\0'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('?')),
            '\u{7f}' => out.push('\u{2421}'),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// [`escape_controls`], except that colour sequences (`ESC [ digits ; … m`,
/// which only set colours and attributes) are kept: for text a colouring
/// tool wrote (`git diff --color`). Every other escape — a cursor move, a
/// screen clear, a title or clipboard write — is made visible.
pub fn escape_controls_but_colour(s: &str) -> Cow<'_, str> {
    if !s.contains('\u{1b}') {
        return escape_controls(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut rest = s;
    while let Some(at) = rest.find('\u{1b}') {
        out.push_str(&escape_controls(&rest[..at]));
        let after = &rest[at + 1..];
        let params = after.strip_prefix('[').map(|p| {
            p.len()
                - p.trim_start_matches(|c: char| c.is_ascii_digit() || c == ';')
                    .len()
        });
        match params {
            Some(n) if after[1 + n..].starts_with('m') => {
                out.push_str(&rest[at..at + 1 + 1 + n + 1]);
                rest = &after[1 + n + 1..];
            }
            _ => {
                out.push('\u{241b}');
                rest = after;
            }
        }
    }
    out.push_str(&escape_controls(rest));
    Cow::Owned(out)
}

/// What [`escape_controls`] escapes.
fn unsafe_on_terminal(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional embeddings, overrides and isolates: they reorder
        // what follows on screen ("Trojan source").
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `1 task`, `2 tasks`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Columns `s` takes on a terminal (wide characters count twice).
pub fn width(s: &str) -> usize {
    console::measure_text_width(s)
}

/// `s` cut to at most `cols` terminal columns, `…` marking the cut.
pub fn fit(s: &str, cols: usize) -> Cow<'_, str> {
    if width(s) <= cols {
        return Cow::Borrowed(s);
    }
    console::truncate_str(s, cols, "…")
}

/// `s` wrapped at spaces into lines of at most `cols` columns; a word longer
/// than a line is broken where it must be.
pub fn wrap(s: &str, cols: usize) -> Vec<String> {
    let cols = cols.max(1);
    let mut lines = Vec::new();
    for paragraph in s.lines() {
        let mut line = String::new();
        for word in paragraph.split(' ') {
            let sep = usize::from(!line.is_empty());
            if width(&line) + sep + width(word) <= cols {
                if sep == 1 {
                    line.push(' ');
                }
                line.push_str(word);
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            let mut rest = word;
            while width(rest) > cols {
                let cut = split_at_cols(rest, cols);
                lines.push(rest[..cut].to_owned());
                rest = &rest[cut..];
            }
            line.push_str(rest);
        }
        lines.push(line);
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// Byte index where the first `cols` columns of `s` end (at least one char).
fn split_at_cols(s: &str, cols: usize) -> usize {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let w = width(c.encode_utf8(&mut [0; 4]));
        if used + w > cols && i > 0 {
            return i;
        }
        used += w;
    }
    s.len()
}

/// A duration for people: `0.4s`, `12.3s`, `3m 05s`, `1h 02m`.
pub fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m {:02}s", secs / 60, secs % 60),
        _ => format!("{}h {:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// An upper bound in seconds for people: as [`duration`] under a year, then
/// in whole years rounded up (so "at most" it stays true) — a bound of
/// billions of loops is years of wall time, and its milliseconds would
/// overflow. A sum that saturated at `u64::MAX` is "more than" it can say.
pub fn long_duration(secs: u64) -> String {
    const YEAR: u64 = 365 * 86_400;
    match secs {
        s if s < YEAR => duration(s * 1000),
        u64::MAX => format!("more than {}", plural((u64::MAX / YEAR) as usize, "year")),
        s => plural(s.div_ceil(YEAR) as usize, "year"),
    }
}

/// How long ago `then` was, seen from `now`: `just now`, `12s ago`,
/// `3m ago`, `2h ago`, `5d ago`; beyond four weeks, the local date.
pub fn ago(then: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second());
    match secs {
        ..5 => "just now".to_owned(),
        5..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        86_400..2_419_200 => format!("{}d ago", secs / 86_400),
        _ => local(then, "%Y-%m-%d"),
    }
}

/// A stored RFC 3339 time in the local time zone, as `strftime` `pattern`
/// says (`%Z` is the zone's abbreviation); the stored text if it does not parse.
pub fn local_time(stored: &str, pattern: &str) -> String {
    match stored.parse::<jiff::Timestamp>() {
        Ok(ts) => local(ts, pattern),
        Err(_) => stored.to_owned(),
    }
}

fn local(ts: jiff::Timestamp, pattern: &str) -> String {
    ts.to_zoned(jiff::tz::TimeZone::system())
        .strftime(pattern)
        .to_string()
}

/// An age such as `45s`, `30m`, `2h`, `1d` or `1w`, in seconds.
pub fn parse_age(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not an age such as 30m, 2h, 1d or 1w"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "`{s}`: the unit must be s, m, h, d or w (as in 30m, 2h, 1d, 1w)"
            ));
        }
    };
    Ok(n.saturating_mul(scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_durations_are_in_years_without_overflow() {
        assert_eq!(long_duration(7200), "2h 00m");
        assert_eq!(long_duration(2 * 31_536_000), "2 years");
        assert_eq!(long_duration(2 * 31_536_000 + 1), "3 years");
        assert_eq!(long_duration(u64::MAX), "more than 584942417355 years");
    }

    #[test]
    fn cuts_on_characters_not_bytes() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 2), "hi");
        assert_eq!(truncate("hello", 2), "he…");
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo", 4), "héll…");
        assert_eq!(truncate("hé", 1), "h…");
        assert_eq!(truncate("ab✓✓✓", 3), "ab✓…");
        assert_eq!(flat("a\nb\tc"), "a b c");
        assert_eq!(plural(1, "task"), "1 task");
        assert_eq!(plural(0, "task"), "0 tasks");
    }

    proptest::proptest! {
        /// The same cut as counting characters from the start, whatever
        /// the text.
        #[test]
        fn truncate_counts_characters(s in "\\PC{0,40}", max in 0usize..48) {
            let counted = match s.char_indices().nth(max) {
                Some((i, _)) => format!("{}…", &s[..i]),
                None => s.clone(),
            };
            proptest::prop_assert_eq!(truncate(&s, max).into_owned(), counted);
        }
    }

    #[test]
    fn colours_stay_and_every_other_escape_is_shown() {
        assert_eq!(
            escape_controls_but_colour("\u{1b}[31mred\u{1b}[0m"),
            "\u{1b}[31mred\u{1b}[0m"
        );
        assert_eq!(
            escape_controls_but_colour("\u{1b}[1;32m+x\u{1b}[m"),
            "\u{1b}[1;32m+x\u{1b}[m"
        );
        assert_eq!(escape_controls_but_colour("a\u{1b}]0;t\u{7}b"), "a␛]0;t␇b");
        assert_eq!(escape_controls_but_colour("\u{1b}[2J\u{1b}[H"), "␛[2J␛[H");
        assert_eq!(escape_controls_but_colour("end\u{1b}"), "end␛");
        assert_eq!(escape_controls_but_colour("\u{1b}[31"), "␛[31");
        assert_eq!(
            escape_controls_but_colour("\u{9b}31m plain\r\n"),
            "\\u{9b}31m plain\r\n"
        );
        assert_eq!(escape_controls_but_colour("plain\n"), "plain\n");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(escape_controls("plain\ttext\nline"), "plain\ttext\nline");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(escape_controls("\x1b[2J\x1b]0;owned\x07"), "␛[2J␛]0;owned␇");
        assert_eq!(escape_controls("100%\rdone\x08!\0"), "100%␍done␈!␀");
        assert_eq!(escape_controls("crlf\r\nend\r"), "crlf\r\nend␍");
        assert_eq!(escape_controls("\u{9b}2J \u{7f}"), "\\u{9b}2J ␡");
        assert_eq!(escape_controls("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape_controls("héllo ✓ 日本"), "héllo ✓ 日本");
    }

    #[test]
    fn fits_and_wraps_by_columns() {
        assert_eq!(fit("hello world", 6), "hello…");
        assert_eq!(fit("hi", 6), "hi");
        assert_eq!(wrap("one two three", 7), ["one two", "three"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
        assert!(
            wrap("a redirected to FAILED", 10)
                .iter()
                .all(|l| width(l) <= 10)
        );
    }

    #[test]
    fn durations_and_ages_read_as_people_say_them() {
        assert_eq!(duration(420), "0.4s");
        assert_eq!(duration(185_000), "3m 05s");
        assert_eq!(duration(3_720_000), "1h 02m");
        let now: jiff::Timestamp = "2025-01-05T12:00:00Z".parse().unwrap();
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(ago(at("2025-01-05T11:57:00Z"), now), "3m ago");
        assert_eq!(ago(at("2025-01-05T11:59:58Z"), now), "just now");
        assert_eq!(ago(at("2025-01-03T12:00:00Z"), now), "2d ago");
        assert_eq!(parse_age("30m"), Ok(1800));
        assert_eq!(parse_age("1w"), Ok(604_800));
        assert!(parse_age("3 days").is_err());
        assert!(parse_age("h").is_err());
    }
}
