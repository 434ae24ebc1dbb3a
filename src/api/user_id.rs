//! The characters a user id may not hold, in one place: `api::submit::validate_user_id`
//! (every route that takes a user id: `POST /v1/jobs`, `/v1/users/{id}`, the `user`
//! filters, what-if's user keys, Ray's `metadata["fairshare.user"]`), the
//! `auth.tokens[].user` check of the configuration, and the OpenAPI document's pattern,
//! which is built from the same rule so that it refuses exactly what the service does.
//!
//! Refused: whitespace (Unicode `White_Space`), control characters (`Cc`), every
//! format character (`Cf`: zero-width characters, bidirectional controls, the soft
//! hyphen, the byte order mark, tag characters, …), every default-ignorable code point
//! (Unicode's `Default_Ignorable_Code_Point`: the variation selectors U+180B–U+180F,
//! U+FE00–U+FE0F and U+E0100–U+E01EF, the combining grapheme joiner, Hangul fillers,
//! …) and U+FFFD, the replacement character. All of them either show nothing or change
//! how a neighbour looks, so two ids that look the same on screen could otherwise be
//! different users.

use std::sync::LazyLock;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Unicode's `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt), as inclusive
/// ranges (unassigned code points in them included: they are reserved for the same use).
const DEFAULT_IGNORABLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` shows nothing (or changes how a neighbour looks): a format character
/// or a default-ignorable code point.
pub fn is_invisible(c: char) -> bool {
    c.general_category() == GeneralCategory::Format
        || DEFAULT_IGNORABLE
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Whether a user id may not hold `c`.
pub fn is_refused(c: char) -> bool {
    c.is_whitespace() || c.is_control() || c == char::REPLACEMENT_CHARACTER || is_invisible(c)
}

/// The first character of `id` a user id may not hold.
pub fn first_refused(id: &str) -> Option<char> {
    id.chars().find(|&c| is_refused(c))
}

/// Why a user id is refused, if it is, for `auth.tokens[].user` (the API's own checks
/// are `api::submit::validate_user_id`, with the same rule).
pub fn problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("must not be empty".into());
    }
    if id.chars().count() > super::submit::MAX_USER_LEN {
        return Some(format!(
            "must be at most {} characters",
            super::submit::MAX_USER_LEN
        ));
    }
    if let Some(c) = first_refused(id) {
        return Some(refused_reason(c));
    }
    if id == "." || id == ".." {
        return Some("must not be `.` or `..` (they cannot be used in a URL path)".into());
    }
    None
}

/// The 422 reason for a refused character `c`.
pub fn refused_reason(c: char) -> String {
    if c == char::REPLACEMENT_CHARACTER {
        // What a path or query with bytes that are not UTF-8 decodes to: never make a
        // user of an id the client did not send.
        return "must be UTF-8 (U+FFFD, the replacement character, is refused)".into();
    }
    format!(
        "must not contain whitespace, control or invisible characters (zero-width, format, \
         variation selectors, default-ignorable); it has U+{:04X}",
        u32::from(c)
    )
}

/// The JSON Schema pattern of a user id: not `.` or `..`, and none of the characters
/// [`is_refused`] refuses, as a character class of every such range. Code points of
/// the Basic Multilingual Plane are written `\uXXXX` (ECMA-262 and Python alike);
/// beyond it the characters stand as themselves, which every regex engine with code
/// point semantics reads as one character (ECMA-262 with the `u` flag, Python, Rust).
pub fn pattern() -> &'static str {
    static PATTERN: LazyLock<String> = LazyLock::new(|| {
        let mut class = String::new();
        for (lo, hi) in refused_ranges() {
            class.push_str(&escape(lo));
            if hi != lo {
                class.push('-');
                class.push_str(&escape(hi));
            }
        }
        format!(r"^(?!\.\.?$)[^{class}]+$")
    });
    &PATTERN
}

/// Every refused character, as inclusive ranges in order.
fn refused_ranges() -> Vec<(char, char)> {
    let mut ranges: Vec<(char, char)> = Vec::new();
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        if !is_refused(c) {
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

    /// The characters a fresh tester found passing (a variation selector, the
    /// Mongolian vowel separator) and the rest of each family: refused, by rule and
    /// by pattern.
    #[test]
    fn invisible_characters_are_refused() {
        for c in [
            '\u{FE0F}',  // variation selector 16 (emoji presentation)
            '\u{FE00}',  // variation selector 1
            '\u{E0100}', // variation selector 17
            '\u{E01EF}', // variation selector 256
            '\u{180E}',  // Mongolian vowel separator (Cf)
            '\u{180B}',  // Mongolian free variation selector 1
            '\u{200B}',  // zero-width space
            '\u{200D}',  // zero-width joiner
            '\u{2060}',  // word joiner
            '\u{2066}',  // left-to-right isolate
            '\u{202E}',  // right-to-left override
            '\u{FEFF}',  // byte order mark
            '\u{00AD}',  // soft hyphen
            '\u{061C}',  // Arabic letter mark
            '\u{0600}',  // Arabic number sign (Cf)
            '\u{FFF9}',  // interlinear annotation anchor (Cf)
            '\u{E0001}', // language tag
            '\u{E0041}', // tag latin capital letter A
            '\u{1D173}', // musical symbol begin beam
            '\u{034F}',  // combining grapheme joiner
            '\u{3164}',  // Hangul filler
            '\u{FFFD}',  // replacement character
            '\u{0085}',  // next line (control, whitespace)
            '\u{3000}',  // ideographic space
        ] {
            assert!(is_refused(c), "U+{:04X} is accepted", u32::from(c));
            assert!(
                problem(&format!("a{c}b")).is_some(),
                "U+{:04X}",
                u32::from(c)
            );
        }
        for ok in [
            "alice", "a.b", "José", "用户", "a-b_c@d", "😀", "...", "a\u{301}",
        ] {
            assert_eq!(problem(ok), None, "{ok:?}");
        }
    }

    /// Every format character (Cf) is refused, whatever the Unicode version adds.
    #[test]
    fn every_format_character_is_refused() {
        let format: Vec<char> = (0..=u32::from(char::MAX))
            .filter_map(char::from_u32)
            .filter(|c| c.general_category() == GeneralCategory::Format)
            .collect();
        assert!(format.len() > 150, "{} format characters", format.len());
        for c in format {
            assert!(is_refused(c), "U+{:04X}", u32::from(c));
        }
    }

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
    }
}
