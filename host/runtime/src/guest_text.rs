//! Text a plugin wrote that the host shows people or writes to files (error messages, its
//! stderr, its name in file names): capped and escaped, so a plugin can neither flood the
//! host's memory, logs and terminal, nor write escape sequences or fake lines into them,
//! nor choose where a file goes.

/// The most bytes of one guest text an error keeps; the rest is counted, not kept.
pub const MAX_GUEST_TEXT: usize = 4096;

/// `s` cut to [`MAX_GUEST_TEXT`] bytes ("… N bytes more" after it), with control and
/// bidirectional-formatting characters escaped (`\n`, `\u{1b}`, `\u{202e}`): one line that
/// shows what the plugin sent.
pub fn guest_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_GUEST_TEXT) + 24);
    for (i, c) in s.char_indices() {
        if out.len() >= MAX_GUEST_TEXT {
            out.push_str(&format!("… {} bytes more", s.len() - i));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else if is_bidi_or_invisible(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that reorder or hide text on a terminal (Trojan Source): bidi controls and
/// marks, zero-width and invisible format characters, variation selectors, tag characters.
pub(crate) fn is_bidi_or_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// A plugin name made safe as part of a file name: ASCII letters, digits, `-` and `_`
/// kept, every other run of characters one `-`, at most 64 bytes, never empty. A name
/// like `../../x` cannot leave the folder it is written in.
pub fn file_stem(name: &str) -> String {
    let mut stem = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            stem.push(c);
        } else if !stem.ends_with('-') {
            stem.push('-');
        }
        if stem.len() >= 64 {
            break;
        }
    }
    let stem = stem.trim_matches('-');
    if stem.is_empty() { "plugin".into() } else { stem.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_text_is_one_capped_line_without_escape_sequences() {
        assert_eq!(guest_text("plain words, ünïcode"), "plain words, ünïcode");
        assert_eq!(guest_text("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(guest_text("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(guest_text("abc\u{202e}cba"), "abc\\u{202e}cba");
        let huge = "x".repeat(100 << 20);
        let t = guest_text(&huge);
        assert!(t.starts_with(&"x".repeat(MAX_GUEST_TEXT)));
        assert!(t.ends_with(&format!("… {} bytes more", (100 << 20) - MAX_GUEST_TEXT)), "{}", &t[MAX_GUEST_TEXT..]);
        assert!(t.len() < MAX_GUEST_TEXT + 40);
        // Multi-byte characters are never split.
        assert!(guest_text(&"é".repeat(5000)).is_char_boundary(MAX_GUEST_TEXT));
    }

    #[test]
    fn file_stems_stay_in_their_folder() {
        assert_eq!(file_stem("frozenlake"), "frozenlake");
        assert_eq!(file_stem("maze-keys_py"), "maze-keys_py");
        assert_eq!(file_stem("../../../outside/pwned"), "outside-pwned");
        assert_eq!(file_stem("/etc/passwd"), "etc-passwd");
        assert_eq!(file_stem("a b\nc\u{1b}"), "a-b-c");
        assert_eq!(file_stem(".."), "plugin");
        assert_eq!(file_stem(""), "plugin");
        assert_eq!(file_stem(&"n".repeat(500)).len(), 64);
    }
}
