//! Hiding secrets in connection strings before anything shows them.
//!
//! [`redact`] is the one function every URL or DSN goes through on its way
//! to a log line, an error or `outbox config check`. It reads the two forms
//! users write: URLs (`scheme://user:password@host/…?password=…`) and
//! libpq's `key=value` pairs (`host=h password='a b'`). When a string is
//! ambiguous it hides too much rather than too little: a password may hold
//! any of `/#?@` unencoded, so the userinfo runs to the *last* `@`.

/// What a secret is replaced with.
pub const HIDDEN: &str = "***";

/// `s` (a URL or a libpq `key=value` string) with every password, token
/// or other secret-looking value replaced by `***`.
///
/// ```
/// use outbox_relay::redact::redact;
/// assert_eq!(redact("redis://u:pw@h:6379/0"), "redis://u:***@h:6379/0");
/// assert_eq!(redact("host=h password='a b' user=u"), "host=h password=*** user=u");
/// assert_eq!(redact("nats://h:4222?token=t&x=1"), "nats://h:4222?token=***&x=1");
/// ```
pub fn redact(s: &str) -> String {
    match s.find("://") {
        // A malformed scheme (`fo o://u:pw@h`) is still a URL to hide;
        // a `=` before the `://` means a libpq value that holds one.
        Some(i) if is_scheme(&s[..i]) || !s[..i].contains('=') => {
            redact_url_form(&s[..i], &s[i + 3..])
        }
        _ if s.contains('=') => redact_key_values(s),
        _ => s.to_owned(),
    }
}

/// [`redact`]ed, then without its query: for a publisher URL whose options
/// are this crate's, where a misspelt option (`pasword=`) is not
/// recognisably a secret by name. Cut after redacting, since a raw `?` may
/// sit inside the password.
pub fn redact_without_query(s: &str) -> String {
    let mut shown = redact(s);
    if let Some(q) = shown.find('?') {
        shown.truncate(q);
    }
    shown
}

/// Whether an option of this name holds a secret. Generous on purpose:
/// hiding a harmless value costs a little clarity, showing a secret costs
/// the secret.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "auth",
        "credential",
        "sig",
    ]
    .iter()
    .any(|s| k.contains(s))
}

fn is_scheme(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn redact_url_form(scheme: &str, rest: &str) -> String {
    let mut out = format!("{scheme}://");
    // The userinfo ends at the last `@`: a raw `@`, `/`, `?` or `#` in a
    // password must not end it early and leave the tail on show.
    let rest = match rest.rfind('@') {
        Some(at) if rest[..at].contains(':') => {
            let user = &rest[..rest.find(':').unwrap_or(0)];
            out.push_str(user);
            out.push(':');
            out.push_str(HIDDEN);
            out.push('@');
            &rest[at + 1..]
        }
        _ => rest,
    };
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((head, query)) => {
            out.push_str(head);
            out.push('?');
            out.push_str(&redact_query(query));
        }
    }
    out
}

/// `k=v&k=v…` with secret values hidden. A secret value runs to the next
/// `&`, through any `#`, which may be part of it.
fn redact_query(query: &str) -> String {
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_key(&decode(k)) => format!("{k}={HIDDEN}"),
            _ => pair.to_owned(),
        })
        .collect();
    pairs.join("&")
}

fn decode(s: &str) -> String {
    percent_decode(s).unwrap_or_else(|| s.to_owned())
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// libpq's `key = value` form: values may be single-quoted, with `\'` and
/// `\\` escapes inside quotes and `\` escaping any character outside them.
/// Parsed the way libpq parses it, so the whole value is hidden, not its
/// first word.
fn redact_key_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    loop {
        copy_ws(&mut out, &mut chars);
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut end = s.len();
        while let Some(&(i, c)) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                end = i;
                break;
            }
            chars.next();
        }
        let key = &s[start..end];
        out.push_str(key);
        copy_ws(&mut out, &mut chars);
        if chars.peek().map(|&(_, c)| c) != Some('=') {
            continue;
        }
        out.push('=');
        chars.next();
        copy_ws(&mut out, &mut chars);
        let Some(&(vstart, first)) = chars.peek() else {
            break;
        };
        let mut vend = s.len();
        if first == '\'' {
            chars.next();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '\'' => {
                        vend = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
        } else {
            while let Some(&(i, c)) = chars.peek() {
                if c.is_whitespace() {
                    vend = i;
                    break;
                }
                chars.next();
                if c == '\\' {
                    chars.next();
                }
            }
        }
        let vend = vend.min(s.len());
        if is_secret_key(key) {
            out.push_str(HIDDEN);
        } else {
            out.push_str(&s[vstart..vend]);
        }
    }
    out
}

fn copy_ws(out: &mut String, chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) {
    while let Some(&(_, c)) = chars.peek() {
        if !c.is_whitespace() {
            break;
        }
        out.push(c);
        chars.next();
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn every_form_of_password_is_hidden() {
        for (input, want) in [
            (
                "postgres://app:s3cret@db:5432/x?sslmode=require",
                "postgres://app:***@db:5432/x?sslmode=require",
            ),
            ("postgres://app@db/x", "postgres://app@db/x"),
            ("postgres", "postgres"),
            ("amqp://u:p%40ss@h/", "amqp://u:***@h/"),
            // Raw `/#?@` in the password: the userinfo runs to the last @.
            ("postgres://u:a/b#c?d@e@h:1/db", "postgres://u:***@h:1/db"),
            (
                "postgres://u@h/db?password=pw&sslmode=require",
                "postgres://u@h/db?password=***&sslmode=require",
            ),
            (
                "postgres://u@h/db?sslmode=disable&password=a#b",
                "postgres://u@h/db?sslmode=disable&password=***",
            ),
            ("redis://h:1?token=t", "redis://h:1?token=***"),
            (
                "kafka://h:1?sasl.password=pw&sasl.username=u",
                "kafka://h:1?sasl.password=***&sasl.username=u",
            ),
            (
                "kafka://h:1?sasl%2Epassword=pw",
                "kafka://h:1?sasl%2Epassword=***",
            ),
            ("host=h password=pw user=u", "host=h password=*** user=u"),
            (
                "host=h password = pw user=u",
                "host=h password = *** user=u",
            ),
            ("host=h password='a b' user=u", "host=h password=*** user=u"),
            (
                r"host=h password='it\'s a b' user=u",
                "host=h password=*** user=u",
            ),
            (r"password=a\ b user=u", "password=*** user=u"),
            ("password='unterminated b c", "password=***"),
            ("PASSWORD=x", "PASSWORD=***"),
            ("password=", "password="),
            ("sslpassword=x host=h", "sslpassword=*** host=h"),
            ("", ""),
            ("://u:p@h", "://u:***@h"),
            ("fo o://u:p@h", "fo o://u:***@h"),
            ("host=h password=a://u:p@h", "host=h password=***"),
        ] {
            assert_eq!(redact(input), want, "{input}");
        }
    }

    #[test]
    fn the_query_goes_after_the_password_is_hidden() {
        use super::redact_without_query as r;
        assert_eq!(r("redis://u:a?b@h:1/0?pasword=x"), "redis://u:***@h:1/0");
        assert_eq!(r("redis://h:1/0?pasword=x"), "redis://h:1/0");
    }
}
