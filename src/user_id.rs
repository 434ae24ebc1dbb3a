//! What a user id may be, in one place, below both the configuration and the HTTP
//! layer: [`problem`] is the whole rule (not empty, at most [`MAX_USER_LEN`]
//! characters, no refused character, not `.` or `..`). `api::validate::validate_user_id`
//! (every route that takes a user id: `POST /v1/jobs`, `/v1/users/{id}`, the `user`
//! filters, what-if's user keys, Ray's `metadata["fairshare.user"]`) and the
//! `auth.tokens[].user` check of the configuration both ask it, and `api::user_id`
//! builds the OpenAPI document's pattern from [`is_refused`], so that the document
//! refuses exactly what the service does.
//!
//! Refused: whitespace (Unicode `White_Space`), control characters (`Cc`), every
//! format character (`Cf`: zero-width characters, bidirectional controls, the soft
//! hyphen, the byte order mark, tag characters, …), every default-ignorable code point
//! (Unicode's `Default_Ignorable_Code_Point`: the variation selectors U+180B–U+180F,
//! U+FE00–U+FE0F and U+E0100–U+E01EF, the combining grapheme joiner, Hangul fillers,
//! …) and U+FFFD, the replacement character. All of them either show nothing or change
//! how a neighbour looks, so two ids that look the same on screen could otherwise be
//! different users.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Longest accepted user id, in characters.
pub const MAX_USER_LEN: usize = 128;

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

/// Why a user id is refused, if it is: the reason the configuration gives for
/// `auth.tokens[].user`, and the API's 422 reason (`api::validate::validate_user_id`).
pub fn problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("must not be empty".into());
    }
    if id.chars().count() > MAX_USER_LEN {
        return Some(format!("must be at most {MAX_USER_LEN} characters"));
    }
    // Whitespace, control and invisible characters, and U+FFFD (what bytes that are
    // not UTF-8 decode to).
    if let Some(c) = first_refused(id) {
        return Some(refused_reason(c));
    }
    // `/v1/users/../pause` is normalised away by browsers and HTTP clients: such a user
    // could never be addressed in a path.
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
}
