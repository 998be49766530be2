//! Player names: drawn in other players' terminals, so only visible,
//! printable text of a bounded width.
//!
//! What is allowed is decided by Unicode character classes, from the
//! Unicode tables of `icu_properties`, not by a hand-written list: a name
//! may not hold control or format characters (General_Category Cc, Cf),
//! private-use, surrogate or unassigned code points, line or paragraph
//! separators (Zl, Zp), nor any Default_Ignorable_Code_Point (zero-width,
//! variation selectors, Hangul fillers, tags…). It may not be only
//! combining marks and blanks, nor start with a combining mark (which would
//! fuse with whatever is drawn before it). Its width on a terminal, as
//! `unicode-width` measures it, is at most [`MAX_NAME_COLUMNS`].
//!
//! [`owner_key`] is what makes two names the same name for ownership:
//! names a person could mistake for each other (case, NFKC compatibility
//! forms, confusable characters such as Cyrillic `А` for Latin `A`) have
//! one key, so a name, once claimed, cannot be taken by a look-alike.
//!
//! [`for_display`] applies the same classes to a name that was never
//! checked here (from a server of another version, or a database edited by
//! hand), so a client draws nothing the rules would refuse.

use icu_properties::props::{DefaultIgnorableCodePoint, GeneralCategory, GeneralCategoryGroup};
use icu_properties::{CodePointMapData, CodePointSetData};
use unicode_normalization::UnicodeNormalization;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Longest name, in characters (bounds the bytes a name takes: a few
/// columns cannot hide a pile of combining marks).
pub const MAX_NAME_CHARS: usize = 16;

/// Widest name, in terminal columns (a CJK character takes two).
pub const MAX_NAME_COLUMNS: usize = 16;

/// Drawn instead of a character a name may not hold.
pub const REPLACEMENT: char = '\u{FFFD}';

/// Why a name was refused; the message tells the player what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(String);

/// Why a character may not appear in a name, if it may not.
fn refused_class(c: char) -> Option<&'static str> {
    let class = CodePointMapData::<GeneralCategory>::new().get(c);
    let refused = [
        (GeneralCategoryGroup::Control, "a control character"),
        (GeneralCategoryGroup::Format, "a format character"),
        (GeneralCategoryGroup::PrivateUse, "a private-use character"),
        (GeneralCategoryGroup::Surrogate, "a surrogate"),
        (GeneralCategoryGroup::Unassigned, "an unassigned code point"),
        (GeneralCategoryGroup::LineSeparator, "a line separator"),
        (
            GeneralCategoryGroup::ParagraphSeparator,
            "a paragraph separator",
        ),
    ];
    if let Some((_, why)) = refused.iter().find(|(group, _)| group.contains(class)) {
        return Some(why);
    }
    if CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c) {
        return Some("an invisible (default-ignorable) character");
    }
    None
}

fn is_mark(c: char) -> bool {
    GeneralCategoryGroup::Mark.contains(CodePointMapData::<GeneralCategory>::new().get(c))
}

fn is_blank_or_mark(c: char) -> bool {
    c.is_whitespace()
        || is_mark(c)
        || CodePointMapData::<GeneralCategory>::new().get(c) == GeneralCategory::SpaceSeparator
}

/// Checks a player name: 1-16 characters, at most 16 columns wide, only
/// visible characters, not only blanks or combining marks.
pub fn check(name: &str) -> Result<&str, NameError> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(NameError(format!(
            "name must be 1-{MAX_NAME_CHARS} characters, got {chars}"
        )));
    }
    if let Some((c, why)) = name
        .chars()
        .find_map(|c| refused_class(c).map(|why| (c, why)))
    {
        return Err(NameError(format!(
            "name contains {why} (U+{:04X}); use visible, printable characters only",
            c as u32
        )));
    }
    if name.chars().all(is_blank_or_mark) {
        return Err(NameError(
            "name must not be only spaces or combining marks".into(),
        ));
    }
    if name.chars().next().is_some_and(is_mark) {
        return Err(NameError(
            "name must not start with a combining mark; start with a letter or symbol".into(),
        ));
    }
    let columns = name.width();
    if columns > MAX_NAME_COLUMNS {
        return Err(NameError(format!(
            "name must be at most {MAX_NAME_COLUMNS} columns wide, got {columns} \
             (wide characters such as CJK count twice)"
        )));
    }
    Ok(name)
}

/// `name` made safe to draw: every character a name may not hold becomes
/// [`REPLACEMENT`] (so does a leading combining mark), and the result is
/// cut to [`MAX_NAME_CHARS`] characters and [`MAX_NAME_COLUMNS`] columns.
/// A name [`check`] accepts comes back unchanged.
pub fn for_display(name: &str) -> String {
    let mut shown = String::new();
    let mut columns = 0;
    for (i, c) in name.chars().take(MAX_NAME_CHARS).enumerate() {
        let c = if refused_class(c).is_some() || (i == 0 && is_mark(c)) {
            REPLACEMENT
        } else {
            c
        };
        let width = c.width().unwrap_or(0);
        if columns + width > MAX_NAME_COLUMNS {
            break;
        }
        columns += width;
        shown.push(c);
    }
    shown
}

/// The key under which a name is owned: the UTS 39 confusable skeleton
/// (from `unicode-security`) of the NFKC form, lower-cased, then the
/// skeleton of that again (lower case has confusables of its own), in
/// NFKC. The first skeleton runs before lower-casing so a capital that
/// looks like another lower-case letter (`I` and `l`) is caught too. Names
/// with one key look alike to a person.
pub fn owner_key(name: &str) -> String {
    let nfkc: String = name.nfkc().collect();
    let folded = unicode_security::skeleton(&nfkc)
        .collect::<String>()
        .to_lowercase();
    unicode_security::skeleton(&folded).nfkc().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_names_pass() {
        for name in [
            "a",
            "Bomber Ana",
            "sixteen-chars-xx",
            "Zoë",
            "Zoe\u{0308}",      // e + combining diaeresis
            "ボンバーマン",     // 12 columns
            "ボンバーマン大将", // exactly 16 columns
            "🙂",
            "Ωμέγα",
            "عربي", // Arabic letters, no bidi control
            "a b",
        ] {
            assert_eq!(check(name), Ok(name), "{name:?}");
            assert_eq!(for_display(name), name, "{name:?}");
        }
    }

    #[test]
    fn names_are_refused_by_class_with_a_reason() {
        let long = "x".repeat(17);
        for (name, why) in [
            ("", "1-16"),
            (long.as_str(), "got 17"),
            ("   ", "only spaces"),
            ("\u{3000}\u{3000}", "only spaces"), // ideographic spaces
            ("\u{0301}", "combining"),           // a lone combining mark
            ("\u{0301}\u{0302} ", "combining"),
            ("\u{0301}abc", "start with a combining mark"),
            ("ボンバーマン大将様", "got 18"), // wide CJK beyond 16 columns
            ("evil\u{1b}[2J", "control character (U+001B)"),
            ("tab\tname", "control character (U+0009)"),
            ("new\nline", "U+000A"),
            ("del\u{7f}", "U+007F"),
            ("c1\u{9b}", "U+009B"),
            ("rtl\u{202e}abc", "format character (U+202E)"),
            ("zero\u{200b}w", "format character (U+200B)"),
            ("bom\u{feff}", "format character (U+FEFF)"),
            ("alm\u{061c}x", "format character (U+061C)"),
            ("nads\u{206b}x", "format character (U+206B)"),
            ("mvs\u{180e}x", "format character (U+180E)"),
            ("tag\u{e0020}x", "format character (U+E0020)"),
            ("tag\u{e0041}x", "format character (U+E0041)"),
            ("tag\u{e007f}x", "format character (U+E007F)"),
            ("pua\u{e000}", "private-use character (U+E000)"),
            ("pua\u{f0000}", "private-use character (U+F0000)"),
            ("new\u{0378}", "unassigned code point (U+0378)"),
            ("new\u{10ffff}", "unassigned code point (U+10FFFF)"),
            ("ls\u{2028}x", "line separator (U+2028)"),
            ("ps\u{2029}x", "paragraph separator (U+2029)"),
            ("vs\u{fe0f}x", "default-ignorable) character (U+FE0F)"),
            ("fill\u{3164}", "default-ignorable) character (U+3164)"),
            ("cgj\u{034f}x", "default-ignorable) character (U+034F)"),
        ] {
            let err = check(name).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
    }

    #[test]
    fn every_tag_character_is_refused() {
        for cp in 0xE0020..=0xE007F {
            let c = char::from_u32(cp).unwrap();
            assert!(check(&format!("a{c}")).is_err(), "U+{cp:04X}");
        }
    }

    #[test]
    fn display_replaces_what_check_refuses_and_clips_to_width() {
        for (name, shown) in [
            ("evil\u{1b}[2J", "evil\u{fffd}[2J"),
            ("rtl\u{202e}abc", "rtl\u{fffd}abc"),
            ("\u{0301}x", "\u{fffd}x"),
            ("a\u{e0041}\u{200b}", "a\u{fffd}\u{fffd}"),
            ("new\nline\r", "new\u{fffd}line\u{fffd}"),
            ("x".repeat(40).as_str(), "x".repeat(16).as_str()),
            ("ボンバーマン大将様", "ボンバーマン大将"),
            ("abcdefghijklmno大", "abcdefghijklmno"),
        ] {
            assert_eq!(for_display(name), shown, "{name:?}");
        }
    }

    #[test]
    fn display_never_yields_a_refused_character() {
        let hostile: String = (0u32..0x3000)
            .chain(0xE0000..0xE0100)
            .filter_map(char::from_u32)
            .collect();
        for chunk in hostile.chars().collect::<Vec<_>>().chunks(16) {
            let name: String = chunk.iter().collect();
            let shown = for_display(&name);
            assert!(shown.width() <= MAX_NAME_COLUMNS, "{name:?}");
            assert!(
                shown.chars().all(|c| refused_class(c).is_none()),
                "{name:?} -> {shown:?}"
            );
        }
    }

    #[test]
    fn look_alike_names_share_an_owner_key() {
        let ana = owner_key("Ana");
        for same in ["ana", "ANA", "\u{0410}na", "\u{FF21}na", "An\u{0430}"] {
            assert_eq!(owner_key(same), ana, "{same:?}");
        }
        assert_eq!(owner_key("paypal"), owner_key("p\u{0430}yp\u{0430}l"));
        assert_eq!(owner_key("Il1"), owner_key("lll"));
        for other in ["Anna", "Ama", "Ana2", "Bob"] {
            assert_ne!(owner_key(other), ana, "{other:?}");
        }
    }
}
