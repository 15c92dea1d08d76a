//! Regexes compiled for what each use needs. `regex::Regex::new` builds
//! every engine a search might want, and for a small pattern that includes
//! a full DFA and a one-pass DFA: 100–200 µs a pattern, which made compiling
//! a handful of them a tenth of `modix validate` (docs/performance.md,
//! twenty-third round). A config's patterns are only checked here, and
//! modix's own searches here run over a few short texts.

use regex_automata::{PatternID, meta, nfa::thompson};

/// Whether `re` compiles as a run compiles it (`regex::Regex::new`), and if
/// so its number of groups, the whole match's included. A pattern is
/// refused by its syntax or by the size of an automaton (`regex`'s limit);
/// both are known once `regex`'s parser has compiled the two automata it
/// builds every engine from, so the engines themselves, which cannot refuse
/// it, are left out. A refused pattern is compiled again by `regex` for its
/// own words of the error.
pub(crate) fn check(re: &str) -> Result<usize, regex::Error> {
    // `regex::RegexBuilder`'s default limit, on each of the two: the forward
    // automaton and the reverse one its lazy DFA needs, which is larger for
    // a Unicode class.
    let config = thompson::Config::new().nfa_size_limit(Some(10 * (1 << 20)));
    let compile = |config| thompson::NFA::compiler().configure(config).build(re).ok();
    let reverse = config
        .clone()
        .which_captures(thompson::WhichCaptures::None)
        .reverse(true);
    match compile(config).filter(|_| compile(reverse).is_some()) {
        Some(nfa) => Ok(nfa.group_info().group_len(PatternID::ZERO)),
        None => regex::Regex::new(re).map(|r| r.captures_len()),
    }
}

/// `re`, one of modix's own patterns, for searches of short texts (a
/// template's tags): with `regex`'s backtracker and PikeVM, which need
/// nothing built up front beyond the pattern's automaton, and without its
/// DFAs (full, one-pass and lazy, the last with a reverse automaton to
/// compile), which pay off only on long texts.
pub(crate) fn lean(re: &str) -> Result<meta::Regex, Box<meta::BuildError>> {
    let config = meta::Config::new().dfa(false).onepass(false).hybrid(false);
    meta::Regex::builder()
        .configure(config)
        .build(re)
        .map_err(Box::new)
}

#[cfg(test)]
mod tests {
    use super::check;

    /// The check accepts and refuses exactly what the run's `regex` does,
    /// with its groups and its words for the error.
    #[test]
    fn a_regex_is_judged_as_the_run_compiles_it() {
        let huge = "\\w{1000}{1000}";
        // On either side of `regex`'s limit: `\w{210}` is refused for its
        // reverse automaton alone (the forward one passes up to `\w{508}`).
        let patterns = [
            r"\w{209}",
            r"\w{210}",
            r"(?:\w\s){208}",
            r"(\d+\.\d+\.\d+)",
            r"(?i)rate.?limit|\b429\b",
            r"^(?P<major>\d+)\.(\d+)(?:\.(\d+))?$",
            r"\bis\s+(?:not\s+)?([A-Za-z_][A-Za-z0-9_]*)",
            "",
            "(",
            "a{2,1}",
            r"\p{NoSuchClass}",
            r"(?<name",
            "x{99999999999}",
            huge,
        ];
        for re in patterns {
            let run = regex::Regex::new(re);
            let check = check(re);
            match (&run, &check) {
                (Ok(r), Ok(groups)) => assert_eq!(r.captures_len(), *groups, "{re}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{re}"),
                _ => panic!("{re}: the run's regex {run:?}, the check {check:?}"),
            }
        }
        assert!(check(huge).is_err(), "past the size limit");
        assert!(check(r"\w{209}").is_ok() && check(r"\w{210}").is_err());
    }
}
