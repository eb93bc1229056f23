//! Who may read and act. On loopback reading the page needs nothing; on a
//! wider address with a token, reading needs the token too (payloads and
//! errors are the producers' data), and without a token `outbox ui` serves
//! only when told `--read-only`. Acting needs the token: as `Authorization:
//! Bearer` (scripts), or as the session cookie the login form sets
//! (HttpOnly, SameSite=Strict). A browser attaches cookies to requests
//! other sites make it send, so a cookie-authenticated POST must also come
//! from this page itself: `Sec-Fetch-Site: same-origin`, or, from a browser
//! that does not send it, an `Origin` naming this host. Every comparison
//! with a secret is constant-time.

use super::page::{self, Access};
use super::{field, pairs, Ui};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The session cookie's name.
const COOKIE: &str = "outbox_ui_session";
/// A session ends this long after signing in, whatever it does.
pub const SESSION_MAX_AGE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at once; signing in beyond ends the oldest.
const MAX_SESSIONS: usize = 256;
/// The window failed logins are counted in.
const LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// Failed logins one client address may make per [`LOGIN_WINDOW`].
pub const LOGIN_FAILURES_PER_CLIENT: u32 = 5;
/// Failed logins all clients together may make per [`LOGIN_WINDOW`]: an
/// attacker with many addresses still guesses slowly.
pub const LOGIN_FAILURES_ALL: u32 = 30;
/// Client addresses whose failures are remembered.
const MAX_CLIENTS: usize = 10_000;

/// The token, the key sessions are derived with, and the live sessions.
pub struct Auth {
    token: Option<[u8; 32]>,
    /// Keys the session ids: `None` without a token.
    session: Option<Hmac<Sha256>>,
    sessions: Mutex<Sessions>,
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Sessions {
    /// Session id → when it was signed in.
    live: HashMap<String, Instant>,
    /// Makes each id different.
    issued: u64,
}

#[derive(Default)]
struct Failures {
    all: (Option<Instant>, u32),
    by_client: HashMap<IpAddr, (Instant, u32)>,
}

/// One window's count: `(start, n)`, restarted when the window has passed.
fn tick(window: &mut (Instant, u32), now: Instant) -> &mut u32 {
    if now.duration_since(window.0) >= LOGIN_WINDOW {
        *window = (now, 0);
    }
    &mut window.1
}

/// How an action was authorized, for the audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Bearer,
    Cookie,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Bearer => "bearer",
            Via::Cookie => "cookie",
        }
    }
}

/// A refused action: its status and the sentence shown.
pub struct Refused(pub StatusCode, pub &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        page::problem(self.0, self.1)
    }
}

/// SHA-256, so secrets of any length compare in constant time.
fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

impl Auth {
    pub fn new(token: Option<String>) -> Self {
        // The cookie carries a value derived from the token, not the token:
        // a leaked cookie (a proxy's log) does not give the Bearer secret.
        // Each session id is an HMAC, keyed by the token, of a counter and
        // the time: unguessable without the token, different every time.
        let session = token.as_ref().map(|t| {
            Hmac::<Sha256>::new_from_slice(t.as_bytes()).expect("HMAC takes any key length")
        });
        Self {
            token: token.map(|t| digest(t.as_bytes())),
            session,
            sessions: Mutex::default(),
            failures: Mutex::default(),
        }
    }

    /// A new session id, kept until it expires or signs out.
    fn open_session(&self) -> Option<String> {
        let mut mac = self.session.clone()?;
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        s.issued += 1;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        mac.update(b"outbox ui session v2");
        mac.update(&s.issued.to_be_bytes());
        mac.update(&now.as_nanos().to_be_bytes());
        mac.update(&std::process::id().to_be_bytes());
        let id: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        s.live.retain(|_, at| at.elapsed() < SESSION_MAX_AGE);
        if s.live.len() >= MAX_SESSIONS {
            if let Some(oldest) = s
                .live
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone())
            {
                s.live.remove(&oldest);
            }
        }
        s.live.insert(id.clone(), Instant::now());
        Some(id)
    }

    /// Ends the session `id`, if it is one.
    fn close_session(&self, id: &str) {
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        s.live
            .retain(|k, _| !bool::from(digest(k.as_bytes()).ct_eq(&digest(id.as_bytes()))));
    }

    /// Whether a login from `client` may be tried now.
    fn login_allowed(&self, client: IpAddr) -> bool {
        let now = Instant::now();
        let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let all = f
            .all
            .0
            .is_some_and(|at| now.duration_since(at) < LOGIN_WINDOW)
            && f.all.1 >= LOGIN_FAILURES_ALL;
        let mine = f.by_client.get(&client).is_some_and(|(at, n)| {
            now.duration_since(*at) < LOGIN_WINDOW && *n >= LOGIN_FAILURES_PER_CLIENT
        });
        !all && !mine
    }

    /// Counts a failed login from `client`.
    fn login_failed(&self, client: IpAddr) {
        let now = Instant::now();
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = (f.all.0.unwrap_or(now), f.all.1);
        *tick(&mut all, now) += 1;
        f.all = (Some(all.0), all.1);
        if f.by_client.len() >= MAX_CLIENTS {
            f.by_client
                .retain(|_, (at, _)| now.duration_since(*at) < LOGIN_WINDOW);
        }
        if f.by_client.len() < MAX_CLIENTS {
            *tick(f.by_client.entry(client).or_insert((now, 0)), now) += 1;
        }
    }

    fn token_is(&self, given: &str) -> bool {
        self.token
            .is_some_and(|t| bool::from(t.ct_eq(&digest(given.as_bytes()))))
    }

    /// Whether `given` is a live session: signed in less than
    /// [`SESSION_MAX_AGE`] ago and not signed out.
    fn session_is(&self, given: &str) -> bool {
        let given = digest(given.as_bytes());
        let s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        // Every id is compared, in constant time each.
        s.live.iter().fold(false, |found, (id, at)| {
            let same = bool::from(digest(id.as_bytes()).ct_eq(&given));
            found | (same && at.elapsed() < SESSION_MAX_AGE)
        })
    }

    fn cookie_ok(&self, headers: &HeaderMap) -> bool {
        cookie(headers, COOKIE).is_some_and(|c| self.session_is(&c))
    }

    /// Whether the request proves the token (cookie or Bearer), for
    /// reading a page that is private: reading changes nothing, so no
    /// same-origin proof is asked.
    pub fn may_read(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token_is(t.trim()));
        bearer || self.cookie_ok(headers)
    }

    /// What the request may do, for rendering.
    pub fn access(&self, headers: &HeaderMap) -> Access {
        if self.token.is_none() {
            Access::ReadOnly
        } else if self.cookie_ok(headers) {
            Access::SignedIn
        } else {
            Access::SignedOut
        }
    }

    /// Whether an action request may go ahead, and how it proved it.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<Via, Refused> {
        if self.token.is_none() {
            return Err(Refused(
                StatusCode::FORBIDDEN,
                "actions are off: this page was started without OUTBOX_UI_TOKEN",
            ));
        }
        // Whatever the credentials: a browser says a request comes from
        // another site, and no action of this page is meant to.
        cross_site_check(headers)?;
        if let Some(auth) = headers.get(header::AUTHORIZATION) {
            let given = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            return if self.token_is(given.trim()) {
                Ok(Via::Bearer)
            } else {
                Err(Refused(StatusCode::UNAUTHORIZED, "wrong token"))
            };
        }
        if !self.cookie_ok(headers) {
            return Err(Refused(
                StatusCode::UNAUTHORIZED,
                "sign in with the token first (or send Authorization: Bearer <token>)",
            ));
        }
        same_origin_check(headers)?;
        Ok(Via::Cookie)
    }
}

/// Refuses a request the browser marks as coming from another site.
fn cross_site_check(headers: &HeaderMap) -> Result<(), Refused> {
    match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        None | Some(b"same-origin") => Ok(()),
        Some(_) => Err(Refused(
            StatusCode::FORBIDDEN,
            "refused: the request comes from another site (Sec-Fetch-Site)",
        )),
    }
}

/// A cookie's authority needs proof the request comes from this page:
/// `Sec-Fetch-Site: same-origin`, else an `Origin` equal to this host.
fn same_origin_check(headers: &HeaderMap) -> Result<(), Refused> {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"same-origin")
    {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
    match (host, origin) {
        (Some(h), Some(o)) if o == format!("http://{h}") || o == format!("https://{h}") => Ok(()),
        _ => Err(Refused(
            StatusCode::FORBIDDEN,
            "refused: a cookie-authenticated action must come from this page \
             (no Sec-Fetch-Site: same-origin, and no Origin naming this host)",
        )),
    }
}

/// The value of cookie `name`, if sent.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// `POST /login`: `token=…` from the form; sets the session cookie.
pub async fn login(
    State(ui): State<Ui>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let auth = &ui.inner.auth;
    if auth.session.is_none() {
        return Refused(
            StatusCode::FORBIDDEN,
            "actions are off: this page was started without OUTBOX_UI_TOKEN",
        )
        .into_response();
    }
    // A login forged by another site would sign the victim in as the
    // attacker's session; the same proof as for actions keeps it out.
    if let Err(r) = cross_site_check(&headers).and_then(|()| same_origin_check(&headers)) {
        return r.into_response();
    }
    // Before the token is looked at: a throttled guess learns nothing.
    if !auth.login_allowed(peer.ip()) {
        tracing::warn!(target: "outbox::ui::audit", action = "login", from = %peer.ip(), outcome = "throttled");
        let mut r = page::problem(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed sign-ins; wait a minute",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("60"));
        return r;
    }
    let given = field(&pairs(&body), "token").unwrap_or_default();
    if !auth.token_is(&given) {
        auth.login_failed(peer.ip());
        tracing::warn!(target: "outbox::ui::audit", action = "login", from = %peer.ip(), outcome = "wrong token");
        return page::problem(StatusCode::UNAUTHORIZED, "wrong token");
    }
    let session = auth.open_session().unwrap_or_default();
    let max_age = SESSION_MAX_AGE.as_secs();
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_owned()),
            (
                header::SET_COOKIE,
                format!("{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}"),
            ),
        ],
    )
        .into_response()
}

/// `POST /logout`: ends the session on the server and clears the cookie.
pub async fn logout(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        ui.inner.auth.close_session(&id);
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_owned()),
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
            ),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_ends_at_its_max_age_and_at_sign_out() {
        let auth = Auth::new(Some("a-token-of-sixteen-or-more".to_owned()));
        let a = auth.open_session().unwrap();
        let b = auth.open_session().unwrap();
        assert_ne!(a, b, "each sign-in gets its own id");
        assert!(auth.session_is(&a) && auth.session_is(&b));
        auth.close_session(&a);
        assert!(!auth.session_is(&a), "signed out, still acts");
        assert!(auth.session_is(&b), "one sign-out ended another session");
        // Signed in longer ago than the maximum age.
        if let Some(old) = Instant::now().checked_sub(SESSION_MAX_AGE + Duration::from_secs(1)) {
            auth.sessions.lock().unwrap().live.insert(b.clone(), old);
            assert!(!auth.session_is(&b), "an expired session still acts");
        }
        assert!(!auth.session_is("forged"));
    }

    #[test]
    fn failed_logins_are_throttled_per_client_and_for_all() {
        let auth = Auth::new(Some("a-token-of-sixteen-or-more".to_owned()));
        let one: IpAddr = [10, 0, 0, 1].into();
        for _ in 0..LOGIN_FAILURES_PER_CLIENT {
            assert!(auth.login_allowed(one));
            auth.login_failed(one);
        }
        assert!(!auth.login_allowed(one));
        // The rest of the global budget, one failure from each of many addresses.
        for i in 0..(LOGIN_FAILURES_ALL - LOGIN_FAILURES_PER_CLIENT) {
            auth.login_failed([10, 0, 1, i as u8].into());
        }
        assert!(!auth.login_allowed([10, 0, 2, 1].into()), "no global limit");
    }
}
