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

use super::{field, page, pairs, Ui};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The session cookie's name.
const COOKIE: &str = "outbox_ui_session";

/// The token, and the session value derived from it.
pub struct Auth {
    token: Option<[u8; 32]>,
    session: Option<String>,
}

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
        let session = token.as_ref().map(|t| {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(t.as_bytes()).expect("HMAC takes any key length");
            mac.update(b"outbox ui session v1");
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        });
        Self {
            token: token.map(|t| digest(t.as_bytes())),
            session,
        }
    }

    fn token_is(&self, given: &str) -> bool {
        self.token
            .is_some_and(|t| bool::from(t.ct_eq(&digest(given.as_bytes()))))
    }

    fn session_is(&self, given: &str) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| bool::from(digest(s.as_bytes()).ct_eq(&digest(given.as_bytes()))))
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
pub async fn login(State(ui): State<Ui>, headers: HeaderMap, body: String) -> Response {
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
    let given = field(&pairs(&body), "token").unwrap_or_default();
    if !auth.token_is(&given) {
        tracing::warn!(target: "outbox::ui::audit", action = "login", outcome = "wrong token");
        return page::problem(StatusCode::UNAUTHORIZED, "wrong token");
    }
    let session = auth.session.clone().unwrap_or_default();
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_owned()),
            (
                header::SET_COOKIE,
                format!("{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"),
            ),
        ],
    )
        .into_response()
}

/// `POST /logout`: clears the cookie.
pub async fn logout() -> Response {
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
