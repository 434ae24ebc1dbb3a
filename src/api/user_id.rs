//! The OpenAPI document's pattern of a user id, built from the rule of
//! [`crate::user_id`] so that the document refuses exactly what the service does.

use std::sync::LazyLock;

use crate::user_id::is_refused;

/// The JSON Schema pattern of a user id: not `.` or `..`, and none of the characters
/// [`is_refused`] refuses, as a character class of every such range. Code points of
/// the Basic Multilingual Plane are written `\uXXXX` (ECMA-262 and Python alike);
/// beyond it the characters stand as themselves, which every regex engine with code
/// point semantics reads as one character (ECMA-262 with the `u` flag, Python, Rust).
pub fn pattern() -> &'static str {
    static PATTERN: LazyLock<String> =
        LazyLock::new(|| format!(r"^(?!\.\.?$)[^{}]+$", refused_class(|_| true)));
    &PATTERN
}

/// The JSON Schema pattern of a user's `display_name`: none of the characters
/// [`is_refused`] refuses but the plain space (U+0020), which may not come first or
/// last, as the API checks it.
pub fn display_name_pattern() -> &'static str {
    static PATTERN: LazyLock<String> = LazyLock::new(|| {
        let class = refused_class(|c| c != ' ');
        format!(r"^[^{class}\u0020]([^{class}]*[^{class}\u0020])?$")
    });
    &PATTERN
}

/// The refused characters that `keep` keeps, as the inside of a character class.
fn refused_class(keep: impl Fn(char) -> bool) -> String {
    let mut class = String::new();
    for (lo, hi) in refused_ranges(keep) {
        class.push_str(&escape(lo));
        if hi != lo {
            class.push('-');
            class.push_str(&escape(hi));
        }
    }
    class
}

/// Every refused character that `keep` keeps, as inclusive ranges in order.
fn refused_ranges(keep: impl Fn(char) -> bool) -> Vec<(char, char)> {
    let mut ranges: Vec<(char, char)> = Vec::new();
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        if !is_refused(c) || !keep(c) {
            continue;
        }
        match ranges.last_mut() {
            // Surrogates are no chars: U+D7FF and U+E000 do not join across them.
            Some((_, hi)) if u32::from(*hi) + 1 == u32::from(c) => *hi = c,
            _ => ranges.push((c, c)),
        }
    }
    ranges
}

fn escape(c: char) -> String {
    match u32::from(c) {
        n if n <= 0xFFFF => format!("\\u{n:04x}"),
        _ => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The OpenAPI pattern accepts exactly the one-character ids the rule accepts, for
    /// every code point (compiled with a regex engine of code point semantics; the
    /// `.`/`..` look-ahead, which it lacks, is left out here and checked below).
    #[test]
    fn the_pattern_refuses_exactly_what_the_rule_refuses() {
        let p = pattern();
        let class = p
            .strip_prefix(r"^(?!\.\.?$)")
            .expect("the look-ahead first");
        let re = regex::Regex::new(&format!("^{class}")).expect("the pattern compiles");
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let mut buf = [0; 4];
            assert_eq!(
                re.is_match(c.encode_utf8(&mut buf)),
                !is_refused(c),
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert!(re.is_match("alice") && !re.is_match("a\u{FE0F}b") && !re.is_match(""));
        assert!(
            p.contains(r"\ufe00-\ufe0f") && p.contains(r"\u180b-\u180f"),
            "{p}"
        );
        // A display name: the same, but a plain space is fine.
        let d = regex::Regex::new(display_name_pattern()).expect("compiles");
        assert!(d.is_match("Ada Lovelace (IBM)") && d.is_match("A"));
        assert!(!d.is_match(" ") && !d.is_match(" Ada") && !d.is_match("Ada "));
        assert!(!d.is_match("Ada \u{202e}MBI") && !d.is_match("a\tb") && !d.is_match(""));
    }
}
