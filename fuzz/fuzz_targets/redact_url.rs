//! Any string as a publisher or database URL: redaction never panics, and
//! a `user:password@` part never survives it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|url: &str| {
    let shown = outbox_relay::publishers::redact_url(url);
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                if password.len() >= 4 && password != "***" {
                    assert!(!shown.contains(&format!(":{password}@")), "{shown}");
                }
            }
        }
    }
});
