//! Any string: validation never panics, and an accepted name is plain.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|name: &str| {
    if let Ok(s) = outbox::Schema::new(name) {
        assert!(s
            .name()
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        assert!(s.name().len() <= 63);
    }
});
