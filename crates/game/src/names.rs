//! Player names: drawn in other players' terminals, so only printable text.

/// Longest name, in characters.
pub const MAX_NAME_CHARS: usize = 16;

/// Characters that are not "control" in Unicode's sense but still reorder
/// or hide text on a terminal: bidi overrides and isolates, zero-width
/// characters, line and paragraph separators, the byte-order mark.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}'
        | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2069}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}')
}

/// Why a name was refused; the message tells the player what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(String);

/// Checks a player name: 1-16 printable characters, not only spaces.
pub fn check(name: &str) -> Result<&str, NameError> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(NameError(format!(
            "name must be 1-{MAX_NAME_CHARS} characters, got {chars}"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c.is_control() || is_invisible_format(c))
    {
        return Err(NameError(format!(
            "name contains a control or invisible character (U+{:04X}); use printable characters only",
            c as u32
        )));
    }
    if name.trim().is_empty() {
        return Err(NameError("name must not be only spaces".into()));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_names_pass() {
        for name in [
            "a",
            "Bomber Ana",
            "sixteen-chars-xx",
            "Zoë",
            "ボンバーマン",
            "🙂",
        ] {
            assert_eq!(check(name).unwrap(), name);
        }
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        let long = "x".repeat(17);
        for (name, why) in [
            ("", "1-16"),
            (long.as_str(), "got 17"),
            ("   ", "only spaces"),
            ("evil\u{1b}[2J", "U+001B"),
            ("tab\tname", "U+0009"),
            ("new\nline", "U+000A"),
            ("del\u{7f}", "U+007F"),
            ("c1\u{9b}", "U+009B"),
            ("rtl\u{202e}abc", "U+202E"),
            ("zero\u{200b}w", "U+200B"),
        ] {
            let err = check(name).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
    }
}
