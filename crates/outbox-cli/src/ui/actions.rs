//! The page's actions: replay one, replay selected, replay all matching a
//! filter, purge older than. Each is a POST that first answers with a
//! confirmation page (what will happen, and a button that repeats the POST
//! with `confirm=yes`); only that second POST acts. Each action is written
//! to the log (target `outbox::ui::audit`) and, for replays, to
//! `dead_replays` with who did it, through the same library calls as
//! `outbox dead`.

use super::auth::Via;
use super::{field, page, pairs, Ui};
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_relay::{Error, ReplayTarget};
use std::net::SocketAddr;

/// Ids one replay may name (a form of checkboxes is never near this).
const MAX_IDS: usize = 10_000;

/// Recorded in `dead_replays.replayed_by`: the page, how the caller
/// authenticated and from where (the token names no person).
fn by(via: Via, peer: &str) -> String {
    format!("outbox-ui ({} from {peer})", via.as_str())
}

/// An authorized action's request: who asks, for the audit line and
/// `dead_replays`, and the form it posted. A request the token does not
/// authorize is answered before the action's handler runs.
pub struct Action {
    who: String,
    form: Vec<(String, String)>,
}

impl FromRequest<Ui> for Action {
    type Rejection = Response;

    async fn from_request(req: Request, ui: &Ui) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(&mut parts, ui)
            .await
            .map_err(IntoResponse::into_response)?;
        let via = ui.inner.auth.authorize(&parts.headers);
        // A body that cannot be read is refused as such before a refused
        // authorization, as when the handlers took the body themselves.
        let body = String::from_request(Request::from_parts(parts, body), ui)
            .await
            .map_err(IntoResponse::into_response)?;
        let via = via.map_err(IntoResponse::into_response)?;
        Ok(Self {
            who: by(via, &peer.ip().to_string()),
            form: pairs(&body),
        })
    }
}

fn confirmed(form: &[(String, String)]) -> bool {
    field(form, "confirm").as_deref() == Some("yes")
}

fn done(query: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/?{query}"))],
    )
        .into_response()
}

fn failed(e: &Error) -> Response {
    match e {
        Error::NotDead(_) | Error::Config { .. } => {
            page::problem(StatusCode::CONFLICT, &format!("nothing was done: {e}"))
        }
        e => page::problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &outbox_relay::error_chain(e),
        ),
    }
}

/// `POST /replay`: `id=…` (repeated) — one message or the selected ones;
/// all must be dead, or none is replayed.
pub async fn replay(State(ui): State<Ui>, Action { who, form }: Action) -> Response {
    let mut ids = Vec::new();
    for (k, v) in &form {
        if k == "id" {
            match v.trim().parse::<i64>() {
                Ok(id) => ids.push(id),
                Err(_) => {
                    return page::problem(StatusCode::BAD_REQUEST, "a message id is not a number")
                }
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return page::problem(
            StatusCode::BAD_REQUEST,
            "select at least one dead letter to replay",
        );
    }
    if ids.len() > MAX_IDS {
        return page::problem(StatusCode::BAD_REQUEST, "too many ids in one replay");
    }
    if !confirmed(&form) {
        let what = if ids.len() == 1 {
            format!("Replay dead letter {}?", ids[0])
        } else {
            format!("Replay these {} dead letters?", ids.len())
        };
        let mut fields: Vec<(&str, String)> = ids.iter().map(|i| ("id", i.to_string())).collect();
        fields.push(("confirm", "yes".to_owned()));
        return page::confirm(
            &what,
            &format!(
                "Ids: {}. Each goes back to pending (attempts 0, due now) and is recorded in \
                 dead_replays; if any of them is no longer dead, none is replayed.",
                ids.iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "/replay",
            &fields,
            "Replay",
        );
    }
    match ui
        .inner
        .dead
        .replay(&ReplayTarget::Ids(ids.clone()), Some(&who))
        .await
    {
        Ok(replayed) => {
            tracing::info!(
                target: "outbox::ui::audit",
                action = "replay",
                by = %who,
                ids = ?replayed,
                replayed = replayed.len(),
                "operator action"
            );
            ui.inner.wake.notify_one();
            done(&format!("replayed={}", replayed.len()))
        }
        Err(e) => {
            tracing::warn!(target: "outbox::ui::audit", action = "replay", by = %who, ids = ?ids, error = %e, "operator action refused");
            failed(&e)
        }
    }
}

/// `POST /replay-matching`: `topic=…&q=…` — every dead letter the filter
/// matches (no filter: every dead letter).
pub async fn replay_matching(State(ui): State<Ui>, Action { who, form }: Action) -> Response {
    let topic = field(&form, "topic");
    let text = field(&form, "q");
    let target = ReplayTarget::Matching {
        topic: topic.clone(),
        text: text.clone(),
    };
    if !confirmed(&form) {
        let (n, skipped) = match tokio::try_join!(
            ui.inner
                .dead
                .count_matching(topic.as_deref(), text.as_deref()),
            ui.inner.dead.unreplayable(&target)
        ) {
            Ok(c) => c,
            Err(e) => return failed(&e),
        };
        let filter = match (&topic, &text) {
            (None, None) => "every dead letter".to_owned(),
            (Some(t), None) => format!("topic {t:?}"),
            (None, Some(q)) => format!("text {q:?}"),
            (Some(t), Some(q)) => format!("topic {t:?} and text {q:?}"),
        };
        let mut fields = vec![("confirm", "yes".to_owned())];
        if let Some(t) = &topic {
            fields.push(("topic", t.clone()));
        }
        if let Some(q) = &text {
            fields.push(("q", q.clone()));
        }
        let mut detail = format!(
            "Matching {filter}: {n} dead letters now. Each goes back to pending and is \
             recorded in dead_replays; letters that die before you confirm are taken too."
        );
        if skipped > 0 {
            detail.push_str(&format!(
                " {skipped} of them have headers the schema refuses and stay dead until fixed."
            ));
        }
        return page::confirm(
            &format!("Replay all {n} matching dead letters?"),
            &detail,
            "/replay-matching",
            &fields,
            "Replay all matching",
        );
    }
    match ui.inner.dead.replay(&target, Some(&who)).await {
        Ok(replayed) => {
            tracing::info!(
                target: "outbox::ui::audit",
                action = "replay-matching",
                by = %who,
                topic = ?topic,
                text = ?text,
                replayed = replayed.len(),
                "operator action"
            );
            ui.inner.wake.notify_one();
            done(&format!("replayed={}", replayed.len()))
        }
        Err(e) => {
            tracing::warn!(target: "outbox::ui::audit", action = "replay-matching", by = %who, topic = ?topic, text = ?text, error = %e, "operator action refused");
            failed(&e)
        }
    }
}

/// `POST /purge`: `older_than=30d` — deletes dead letters that died longer
/// ago. Not a replay, so not in `dead_replays`: the audit line is its record.
pub async fn purge(State(ui): State<Ui>, Action { who, form }: Action) -> Response {
    let Some(raw) = field(&form, "older_than") else {
        return page::problem(StatusCode::BAD_REQUEST, "say how old, e.g. 30d");
    };
    let older_than = match crate::cmd::parse_duration(&raw) {
        Ok(d) => d,
        Err(e) => return page::problem(StatusCode::BAD_REQUEST, &format!("older than: {e}")),
    };
    if !confirmed(&form) {
        return page::confirm(
            &format!("Delete dead letters that died more than {raw} ago?"),
            "They are deleted for good (not archived, not replayable).",
            "/purge",
            &[("older_than", raw.clone()), ("confirm", "yes".to_owned())],
            "Delete",
        );
    }
    match ui.inner.dead.purge(older_than).await {
        Ok(n) => {
            tracing::info!(
                target: "outbox::ui::audit",
                action = "purge",
                by = %who,
                older_than = %raw,
                purged = n,
                "operator action"
            );
            ui.inner.wake.notify_one();
            done(&format!("purged={n}"))
        }
        Err(e) => {
            tracing::warn!(target: "outbox::ui::audit", action = "purge", by = %who, older_than = %raw, error = %e, "operator action refused");
            failed(&e)
        }
    }
}
