//! Text from the database on its way to an operator's terminal.
//!
//! Topics, reasons and payloads are written by producers and by the
//! receivers that refused them: an `ESC ] 0 ; … BEL` retitles the window, an
//! `ESC [ 2 J` clears it, a CR overwrites the line before it. Printed raw
//! they act on the terminal; printed through [`printable`] they show as text.

/// `s` with every control character (C0, DEL, C1) and every invisible
/// direction override written as `\u00XX`, the JSON escape, so a JSON
/// document stays valid JSON meaning the same value.
pub fn printable(s: &str) -> String {
    escape(s, |_| true)
}

/// A JSON document from serde_json made [`printable`], keeping the line
/// breaks of pretty printing: serde_json escapes C0 controls inside
/// strings, so a raw newline can only be layout, but it leaves DEL, C1
/// and the direction overrides raw.
pub fn printable_json(json: &str) -> String {
    escape(json, |c| c != '\n')
}

fn escape(s: &str, unless: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if (c.is_control() || is_bidi_control(c)) && unless(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that reorder what follows them on screen (the "Trojan
/// Source" ones), invisible themselves.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::{printable, printable_json};

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(
            printable("a\u{1b}]0;pwned\u{7}b"),
            "a\\u001b]0;pwned\\u0007b"
        );
        assert_eq!(
            printable("x\ry\n\u{9b}\u{7f}"),
            "x\\u000dy\\u000a\\u009b\\u007f"
        );
        assert_eq!(printable("\u{202e}cod.exe"), "\\u202ecod.exe");
        assert_eq!(printable("plain é ✓"), "plain é ✓");
        let json = serde_json::to_string(&"\u{1b}[2J\u{9b}").unwrap();
        let shown = printable_json(&json);
        assert_eq!(printable_json("[\n  1\n]"), "[\n  1\n]");
        assert_eq!(
            serde_json::from_str::<String>(&shown).unwrap(),
            "\u{1b}[2J\u{9b}"
        );
    }
}
