//! Player names: drawn in other players' terminals, so only visible,
//! printable text of a bounded width.
//!
//! What is allowed is decided by Unicode character classes, from the
//! Unicode tables of `icu_properties`, not by a hand-written list: a name
//! may not hold control or format characters (General_Category Cc, Cf),
//! private-use, surrogate or unassigned code points, line or paragraph
//! separators (Zl, Zp), nor any Default_Ignorable_Code_Point (zero-width,
//! variation selectors, Hangul fillers, tags…). It may not render blank
//! (only blanks and combining marks), start or end with a blank, nor start
//! with a combining mark (which would fuse with whatever is drawn before
//! it). A blank is any character drawn as empty space: a space separator
//! (Zs), other white space, and the characters that draw nothing although
//! they are letters or symbols (the braille blank U+2800, the Hangul
//! fillers). Its width on a terminal, as `unicode-width` measures it, is
//! at most [`MAX_NAME_COLUMNS`].
//!
//! [`owner_key`] is what makes two names the same name for ownership:
//! names a person could mistake for each other (case, NFKC compatibility
//! forms, confusable characters such as Cyrillic `А` for Latin `A`, blanks
//! of any kind or number) have one key, so a name, once claimed, cannot be
//! taken by a look-alike.
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

/// Whether `c` is drawn as empty space: white space, a space separator
/// (Zs: NBSP, the ideographic space, thin and hair spaces…), or one of the
/// letters and symbols that draw nothing (the braille blank, the Hangul
/// fillers, which are also default-ignorable and so refused anyway).
pub fn is_blank(c: char) -> bool {
    c.is_whitespace()
        || CodePointMapData::<GeneralCategory>::new().get(c) == GeneralCategory::SpaceSeparator
        || matches!(
            c,
            '\u{2800}' | '\u{3164}' | '\u{115F}' | '\u{1160}' | '\u{FFA0}' | '\u{180E}'
        )
}

fn is_blank_or_mark(c: char) -> bool {
    is_blank(c) || is_mark(c)
}

/// Checks a player name: 1-16 characters, at most 16 columns wide, only
/// visible characters, not only blanks or combining marks, no blank at
/// either end.
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
    if name.starts_with(is_blank) || name.ends_with(is_blank) {
        return Err(NameError(
            "name must not start or end with a space (or a blank character); remove it".into(),
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

/// The key under which a name is owned; names with one key look alike to
/// a person.
///
/// The NFKC form is case-folded first (UTS 39 defines the skeleton for
/// case-insensitive comparison on case-folded text, so `ALICE` and `Alice`
/// meet), every blank is dropped (a name cannot be told from the same name
/// with one, two or a thin space inside it), and the confusable skeleton
/// (from `unicode-security`) is taken, folded again (a skeleton may hold
/// capitals) and put in NFKC. Last, `i` becomes `l`: a capital `I` is drawn
/// as `l` in many terminal fonts while its lower case is `i`, so `Ian` and
/// `lan`, `BILL` and `Bill` must meet too. That merges some names that a
/// careful reader could tell apart (`bill` and `blll`); a name refused for
/// a look-alike costs the player a second choice, a name taken by one costs
/// the owner their name.
pub fn owner_key(name: &str) -> String {
    let folded: String = name
        .nfkc()
        .flat_map(fold)
        .filter(|&c| !is_blank(c))
        .collect();
    let skeleton: String = unicode_security::skeleton(&folded)
        .flat_map(fold)
        .filter(|&c| !is_blank(c))
        .collect();
    skeleton
        .nfkc()
        .map(|c| if c == 'i' { 'l' } else { c })
        .collect()
}

/// Full case folding, near enough: upper case, then lower (`ß` and `SS`
/// both become `ss`, `ς` and `Σ` both `σ`).
fn fold(c: char) -> impl Iterator<Item = char> {
    c.to_uppercase().flat_map(char::to_lowercase)
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
            ("\u{2800}\u{2800}", "only spaces"), // braille blanks draw nothing
            ("\u{00A0}", "only spaces"),
            ("Ana ", "start or end with a space"),
            (" Ana", "start or end with a space"),
            ("Ana\u{00A0}", "start or end with a space"),
            ("Ana\u{3000}", "start or end with a space"),
            ("Ana\u{2800}", "start or end with a space"),
            ("\u{2009}Ana", "start or end with a space"),
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

    /// Every pair a hostile client got accepted as two names: each second
    /// name is either refused outright or has the first one's key.
    #[test]
    fn case_and_blank_look_alikes_are_one_name_or_refused() {
        for (owned, other) in [
            ("Alice", "ALICE"),
            ("Alice", "alice"),
            ("Ivan", "ivan"),
            ("Ivan", "IVAN"),
            ("Bill", "BILL"),
            ("Bill", "bILL"),
            ("Ian", "lan"),
            ("Ana", "Ana "),
            ("Ana", " Ana"),
            ("Ana", "Ana\u{00A0}"),
            ("Ana", "Ana\u{3000}"),
            ("Ana", "Ana\u{2800}"),
            ("Ana", "A  na"),
            ("Ana", "A na"),
            ("Ana", "A\u{2009}na"),
            ("Ana", "A\u{00A0}na"),
            ("Ana", "A\u{2800}na"),
            ("Ana", "A\u{3000}na"),
            ("vox-1", "vox-1\u{2800}"),
        ] {
            assert_eq!(check(owned), Ok(owned), "{owned:?} is a valid name");
            if check(other).is_ok() {
                assert_eq!(owner_key(other), owner_key(owned), "{owned:?} / {other:?}");
            }
        }
        // Blanks that render as nothing are never a name.
        for blank in [
            "\u{2800}\u{2800}",
            "\u{2800}",
            "\u{3000}",
            "\u{2009}\u{2009}",
        ] {
            assert!(check(blank).is_err(), "{blank:?}");
        }
        // A blank inside a name is fine; the key ignores it.
        assert_eq!(check("Bomber Ana"), Ok("Bomber Ana"));
        assert_eq!(owner_key("Bomber Ana"), owner_key("BomberAna"));
    }

    #[test]
    fn the_key_ignores_case_for_every_cased_letter() {
        for c in ('\u{20}'..='\u{24F}').chain('\u{370}'..='\u{52F}') {
            let upper: String = c.to_uppercase().collect();
            let lower: String = c.to_lowercase().collect();
            if check(&upper).is_ok() && check(&lower).is_ok() {
                assert_eq!(owner_key(&upper), owner_key(&lower), "{c:?}");
            }
        }
    }
}
