//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) carried in a
//! message's headers, so the consumer's span continues the producer's
//! trace across the outbox. The relay copies headers to every broker as
//! they are; only the format is checked here, at enqueue, where a bad value
//! can still be refused to the caller instead of confusing a consumer.

use crate::error::InvalidMessage;

/// Header holding the W3C `traceparent`.
pub const TRACEPARENT: &str = "traceparent";
/// Header holding the W3C `tracestate`.
pub const TRACESTATE: &str = "tracestate";

/// `tracestate` longer than this may be dropped by a vendor anyway (the
/// spec lets propagators truncate past 512 characters).
const MAX_TRACESTATE: usize = 512;

/// Checks a `traceparent`: `version-trace_id-parent_id-flags`, lowercase
/// hex, ids not all zero, version `ff` forbidden. Version `00` has exactly
/// four fields; later versions may append fields, which are kept.
pub(crate) fn check_traceparent(v: &str) -> Result<(), InvalidMessage> {
    let bad = |why: &'static str| Err(InvalidMessage::BadTraceContext(why));
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let [version, trace_id, parent_id, flags, rest @ ..] = parts.as_slice() else {
        return bad("traceparent must be version-traceid-parentid-flags");
    };
    if !hex(version, 2) || *version == "ff" {
        return bad("traceparent version must be two lowercase hex digits, not ff");
    }
    if *version == "00" && !rest.is_empty() {
        return bad("traceparent version 00 has exactly four fields");
    }
    if !hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
        return bad("traceparent trace-id must be 32 lowercase hex digits, not all zero");
    }
    if !hex(parent_id, 16) || parent_id.bytes().all(|b| b == b'0') {
        return bad("traceparent parent-id must be 16 lowercase hex digits, not all zero");
    }
    if !hex(flags, 2) {
        return bad("traceparent flags must be two lowercase hex digits");
    }
    Ok(())
}

/// Checks a `tracestate`: printable ASCII, at most 512 characters. Its
/// list entries are vendor-defined, so no deeper check.
pub(crate) fn check_tracestate(v: &str) -> Result<(), InvalidMessage> {
    if v.len() > MAX_TRACESTATE {
        return Err(InvalidMessage::BadTraceContext(
            "tracestate is longer than 512 characters",
        ));
    }
    if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(InvalidMessage::BadTraceContext(
            "tracestate must be printable ASCII",
        ));
    }
    Ok(())
}

/// The current OpenTelemetry span's context as `(traceparent, tracestate)`,
/// or `None` outside a valid span.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let parent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    Some((parent, sc.trace_state().header()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_format() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(check_traceparent(good).is_ok());
        assert!(
            check_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_ok()
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(check_traceparent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tracestate_format() {
        assert!(check_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").is_ok());
        assert!(check_tracestate(&"a".repeat(513)).is_err());
        assert!(check_tracestate("a=\u{1}").is_err());
    }

    #[cfg(feature = "opentelemetry")]
    #[test]
    fn current_span_context_goes_into_the_headers() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let plain = crate::NewMessage::new("e", "a", "1", &1).unwrap();
        assert_eq!(plain.clone().current_trace_context(), plain);
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("rojo", "1")]).unwrap(),
        );
        let _guard = opentelemetry::Context::current()
            .with_remote_span_context(sc)
            .attach();
        let m = plain.current_trace_context();
        assert_eq!(
            m.headers[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(m.headers[TRACESTATE], "rojo=1");
    }
}
