//! Any bytes as an envelope a consumer received: decoding never panics, and
//! what decodes re-encodes to something that decodes to the same envelope.
#![no_main]
use libfuzzer_sys::fuzz_target;
use outbox_relay::Envelope;

fuzz_target!(|text: &str| {
    if let Ok(e) = Envelope::from_json(text) {
        assert_eq!(Envelope::from_json(&e.to_json()).unwrap(), e);
    }
});
