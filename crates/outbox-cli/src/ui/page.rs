//! The page's HTML. maud escapes every interpolated value, so whatever a
//! producer wrote into a topic, a payload or an error is shown as text.
//! It imports the snapshot it shows and nothing else of the page's
//! modules: `auth`, `actions` and `snapshot`'s runner come to it.

use super::snapshot::{Snapshot, STATUSES};
use super::{SHOWN_FIELD, SHOWN_REASON, SHOWN_TEXT};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use outbox_relay::admin::{cut, DeadMessage, DeadSummary, Timestamp};
use std::time::Duration;

/// What a request may do, for the page to show the right controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No token configured: no actions at all.
    ReadOnly,
    /// Actions need signing in first.
    SignedOut,
    /// Signed in: the action buttons work.
    SignedIn,
}

/// A page response.
pub fn html(status: StatusCode, body: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into_string(),
    )
        .into_response()
}

fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/assets/ui.css";
                script src="/assets/ui.js" defer {}
            }
            body { (body) }
        }
    }
}

/// An error or refusal, as a small page.
pub fn problem(status: StatusCode, message: &str) -> Response {
    html(
        status,
        layout(
            "outbox: refused",
            html! {
                main.narrow {
                    h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
                    p.problem { (message) }
                    p { a href="/" { "Back to the page" } }
                }
            },
        ),
    )
}

/// The confirmation step of an action: the same POST again, confirmed.
pub fn confirm(
    title: &str,
    detail: &str,
    action: &str,
    fields: &[(&str, String)],
    button: &str,
) -> Response {
    html(
        StatusCode::OK,
        layout(
            "outbox: confirm",
            html! {
                main.narrow {
                    h1 { (title) }
                    p { (detail) }
                    form method="post" action=(action) {
                        @for (k, v) in fields {
                            input type="hidden" name=(k) value=(v);
                        }
                        button.danger type="submit" id="confirm" { (button) }
                        " "
                        a href="/" { "Cancel" }
                    }
                }
            },
        ),
    )
}

/// What the last action did, from the redirect's query (numbers only: the
/// query is the visitor's, and no text of it is shown).
#[derive(Debug, Clone, Copy)]
pub enum Flash {
    None,
    Replayed(u64),
    Purged(u64),
}

impl Flash {
    pub fn from_query(q: &[(String, String)]) -> Self {
        let num = |k: &str| {
            q.iter()
                .find(|(key, _)| key == k)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        match (num("replayed"), num("purged")) {
            (Some(n), _) => Flash::Replayed(n),
            (None, Some(n)) => Flash::Purged(n),
            _ => Flash::None,
        }
    }
}

/// Everything the main page shows.
pub struct IndexView<'a> {
    pub schema: &'a str,
    pub snap: &'a Snapshot,
    pub dead: &'a [DeadSummary],
    pub dead_error: Option<&'a str>,
    pub topic: Option<&'a str>,
    pub text: Option<&'a str>,
    pub flash: Flash,
    pub access: Access,
}

/// A time as the page shows it, whichever type the store reads it as: a
/// stored `'infinity'` or year 200000 shows as such.
trait ShownTime {
    fn shown(&self) -> String;
}

impl ShownTime for DateTime<Utc> {
    fn shown(&self) -> String {
        self.format("%Y-%m-%d %H:%M:%S").to_string()
    }
}

impl ShownTime for Timestamp {
    fn shown(&self) -> String {
        self.at().map_or_else(|| self.to_string(), |t| t.shown())
    }
}

fn time<T: ShownTime>(t: &T) -> String {
    t.shown()
}

fn opt_time<T: ShownTime>(t: &Option<T>) -> String {
    t.as_ref().map_or_else(|| "-".to_owned(), time)
}

/// A JSON field of a dead letter as shown, cut to [`SHOWN_FIELD`].
trait ShownJson {
    fn shown(&self) -> String;
}

impl ShownJson for serde_json::Value {
    fn shown(&self) -> String {
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        cut(&text, SHOWN_FIELD).into_owned()
    }
}

impl ShownJson for outbox_relay::Payload {
    fn shown(&self) -> String {
        // As stored: never re-parsed (any depth, any number).
        cut(self.get(), SHOWN_FIELD).into_owned()
    }
}

/// Producer-chosen text, cut to `max` bytes.
fn short(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    cut(text, max)
}

fn opt_short(text: &Option<String>, max: usize) -> std::borrow::Cow<'_, str> {
    cut(text.as_deref().unwrap_or(""), max)
}

fn age(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

fn access_bar(access: Access) -> Markup {
    html! {
        div.access {
            @match access {
                Access::ReadOnly => span #access-state { "Read-only: actions are off (started without OUTBOX_UI_TOKEN)." },
                Access::SignedOut => form #login method="post" action="/login" {
                    label { "Token " input type="password" name="token" autocomplete="current-password" required; }
                    " " button type="submit" { "Sign in to act" }
                },
                Access::SignedIn => form method="post" action="/logout" {
                    span #access-state { "Signed in: actions on. " }
                    button type="submit" { "Sign out" }
                },
            }
        }
    }
}

/// The main page.
pub fn index(v: &IndexView<'_>) -> Markup {
    let filtered = v.topic.is_some() || v.text.is_some();
    let can_act = v.access == Access::SignedIn;
    layout(
        &format!("outbox: {}", v.schema),
        html! {
            header {
                h1 { "outbox " span.schema { "schema " (v.schema) } }
                span #conn { "connecting…" }
                (access_bar(v.access))
            }
            @match v.flash {
                Flash::Replayed(n) => p.flash #flash { "Replayed " (n) " dead letter(s): back to pending." },
                Flash::Purged(n) => p.flash #flash { "Deleted " (n) " dead letter(s)." },
                Flash::None => {},
            }
            section #live { (live(v.snap)) }
            section #dead {
                h2 { "Dead letters" }
                form.filter method="get" action="/" {
                    label { "Topic " input type="text" name="topic" value=[v.topic] list="topics"; }
                    datalist #topics {
                        @for t in v.snap.topics.keys() { option value=(t) {} }
                    }
                    label { " Text " input type="search" name="q" value=[v.text] placeholder="reason, error, payload…"; }
                    " " button type="submit" { "Filter" }
                    @if filtered { " " a href="/" { "Clear" } }
                }
                @if let Some(e) = v.dead_error { p.problem { (e) } }
                form #dead-form method="post" action="/replay" {
                    table.dead {
                        thead { tr {
                            th { "" } th { "id" } th { "topic" } th { "event type" }
                            th.num { "attempts" } th { "reason" } th { "dead at" }
                        } }
                        tbody #dead-rows data-filtered=(if filtered { "1" } else { "0" }) {
                            (dead_rows(v.dead))
                        }
                    }
                    @if can_act {
                        button type="submit" #replay-selected { "Replay selected" }
                    }
                }
                @if can_act {
                    div.actions {
                        form method="post" action="/replay-matching" {
                            @if let Some(t) = v.topic { input type="hidden" name="topic" value=(t); }
                            @if let Some(q) = v.text { input type="hidden" name="q" value=(q); }
                            button type="submit" #replay-matching {
                                @if filtered { "Replay all matching this filter" } @else { "Replay all dead letters" }
                            }
                        }
                        form method="post" action="/purge" {
                            label { "Delete dead letters older than " input type="text" name="older_than" value="30d" size="6"; }
                            " " button.danger type="submit" #purge { "Purge" }
                        }
                    }
                }
                @if filtered {
                    p.note { "Filtered: this list is not refreshed live; filter again to refresh." }
                }
            }
        },
    )
}

/// A private page to a visitor without the token: the sign-in form only.
pub fn sign_in_only(schema: &str) -> Markup {
    layout(
        &format!("outbox: {schema}"),
        html! {
            header {
                h1 { "outbox " span.schema { "schema " (schema) } }
                (access_bar(Access::SignedOut))
            }
            main.narrow {
                p #private { "This page is served beyond this host: sign in with the token to see it." }
            }
        },
    )
}

/// Rows of the dead-letter table.
pub fn dead_rows(dead: &[DeadSummary]) -> Markup {
    html! {
        @if dead.is_empty() {
            tr { td colspan="7" .empty { "No dead letters." } }
        }
        @for m in dead {
            tr data-id=(m.id) {
                td { input type="checkbox" name="id" value=(m.id) aria-label="select"; }
                td { a href={ "/dead/" (m.id) } { (m.id) } }
                td { (short(&m.topic, SHOWN_TEXT)) }
                td { (short(&m.event_type, SHOWN_TEXT)) }
                td.num { (m.attempts) }
                td.reason { (opt_short(&m.dead_reason, SHOWN_REASON)) }
                td { (opt_time(&m.dead_at)) }
            }
        }
    }
}

fn sparkline(rates: &[f64]) -> Markup {
    const W: f64 = 300.0;
    const H: f64 = 40.0;
    if rates.len() < 2 {
        return html! { span.note { "collecting…" } };
    }
    let max = rates.iter().copied().fold(0.0_f64, f64::max).max(1.0);
    let step = W / (rates.len() - 1) as f64;
    let points: Vec<String> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * step,
                H - r / max * (H - 2.0) - 1.0
            )
        })
        .collect();
    html! {
        svg.spark viewBox="0 0 300 40" width="300" height="40" role="img" aria-label="messages sent per second" {
            polyline points=(points.join(" ")) {}
        }
        span.note { "peak " (format!("{max:.0}")) "/s" }
    }
}

/// The live part of the page: replaced on every snapshot.
pub fn live(s: &Snapshot) -> Markup {
    let rate = s.throughput.last().copied();
    html! {
        @if let Some(e) = &s.error {
            p.problem { "Cannot count: " (e) }
        }
        div.cards {
            @for st in STATUSES {
                div.card data-status=(st) {
                    span.label { (st) }
                    span.value #{ "count-" (st) } { (s.total(st)) }
                }
            }
            div.card {
                span.label { "sent, not archived (stats)" }
                span.value #count-sent { (s.sent_estimate) }
            }
            div.card {
                span.label { "oldest pending" }
                span.value #oldest-pending { (s.oldest_pending.map_or_else(|| "none".to_owned(), age)) }
            }
            div.card {
                span.label { "breaker" }
                span.value #breaker {
                    @match s.breaker {
                        Some(true) => "open",
                        Some(false) => "closed",
                        None => "unknown",
                    }
                }
            }
        }
        div.throughput {
            h2 { "Sent per second " span #rate { (rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.1}"))) } }
            (sparkline(&s.throughput))
        }
        div.columns {
            div {
                h2 { "By topic (unsent)" }
                table #topics-table {
                    thead { tr { th { "topic" } @for st in STATUSES { th.num { (st) } } } }
                    tbody {
                        @if s.topics.is_empty() { tr { td colspan="5" .empty { "Nothing unsent." } } }
                        @for (topic, counts) in &s.topics {
                            tr {
                                td { (topic) }
                                @for st in STATUSES { td.num { (counts.get(st).copied().unwrap_or(0)) } }
                            }
                        }
                        @if s.topics_left_out > 0 {
                            tr { td colspan="5" .note #topics-left-out {
                                (s.topics_left_out) " more topics not listed (only the " (super::MAX_TOPICS) " with the most rows are)."
                            } }
                        }
                    }
                }
            }
            div {
                h2 { "Relays seen" }
                table #relays-table {
                    thead { tr { th { "relay" } th.num { "in flight" } th { "last claim" } th { "lease until" } } }
                    tbody {
                        @if s.relays.is_empty() { tr { td colspan="4" .empty { "No claims in flight, no relay registered." } } }
                        @for r in &s.relays {
                            tr {
                                td { (r.id) }
                                td.num { (r.in_flight) }
                                td { (opt_time(&r.last_claim)) }
                                td { (opt_time(&r.lease_until)) }
                            }
                        }
                        @if s.relays_left_out > 0 {
                            tr { td colspan="4" .note { (s.relays_left_out) " more relays not listed." } }
                        }
                    }
                }
            }
            div {
                h2 { "Recent replays" }
                table #replays-table {
                    thead { tr { th { "message" } th { "when" } th { "by" } th { "had died of" } } }
                    tbody {
                        @if s.replays.is_empty() { tr { td colspan="4" .empty { "None yet." } } }
                        @for r in &s.replays {
                            tr {
                                td { (r.message_id) }
                                td { (time(&r.replayed_at)) }
                                td { (short(&r.replayed_by, SHOWN_TEXT)) }
                                td.reason { (opt_short(&r.dead_reason, SHOWN_REASON)) }
                            }
                        }
                    }
                }
            }
        }
        p.note #snapshot-info data-seq=(s.seq) {
            "Snapshot " (s.seq) " at " (time(&s.taken_at)) " UTC, counted in " (age(s.took))
            "; one count per interval, shared by every viewer."
        }
    }
}

/// The SSE event's data: one line of JSON (no raw newline or carriage
/// return from the database can break the event framing).
pub fn event_json(s: &Snapshot) -> String {
    serde_json::json!({
        "seq": s.seq,
        "live": live(s).into_string(),
        "dead": dead_rows(&s.dead).into_string(),
    })
    .to_string()
}

/// One dead letter, every field.
pub fn detail(schema: &str, m: &DeadMessage, access: Access) -> Markup {
    layout(
        &format!("outbox: dead letter {}", m.id),
        html! {
            header {
                h1 { "Dead letter " (m.id) " " span.schema { "schema " (schema) } }
                (access_bar(access))
            }
            main {
                p { a href="/" { "Back to the page" } }
                table.fields {
                    tr { th { "event_id" } td { (m.event_id) } }
                    tr { th { "topic" } td { (short(&m.topic, SHOWN_FIELD)) } }
                    tr { th { "event_type" } td { (short(&m.event_type, SHOWN_TEXT)) " v" (m.event_version) } }
                    tr { th { "aggregate" } td { (short(&m.aggregate_type, SHOWN_TEXT)) " / " (short(&m.aggregate_id, SHOWN_TEXT)) } }
                    tr { th { "attempts" } td { (m.attempts) } }
                    tr { th { "created_at" } td { (time(&m.created_at)) } }
                    tr { th { "dead_at" } td { (opt_time(&m.dead_at)) } }
                    tr { th { "dead_reason" } td { pre #dead-reason { (opt_short(&m.dead_reason, SHOWN_FIELD)) } } }
                    tr { th { "last_error" } td { pre #last-error { (opt_short(&m.last_error, SHOWN_FIELD)) } } }
                    tr { th { "headers" } td { pre #headers { (ShownJson::shown(&m.headers)) } } }
                    tr { th { "payload" } td { pre #payload { (ShownJson::shown(&m.payload)) } } }
                }
                @if access == Access::SignedIn {
                    form method="post" action="/replay" {
                        input type="hidden" name="id" value=(m.id);
                        button type="submit" #replay-one { "Replay this message" }
                    }
                }
            }
        },
    )
}
