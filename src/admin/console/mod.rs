//! The console (`/console/*`): a web UI over the admin API, served by the gateway itself.
//! Sign-in turns an `[[admins]]` token into a session cookie (`admin/session.rs`); each page is
//! server-rendered HTML (`pages.rs`, `forms.rs`) whose script (`assets/`) reads and writes the
//! admin API with the session and its CSRF token. It exists where the admin API does, and only
//! when an admin is configured. Nothing here is on the request path.

mod assets;
mod forms;
mod pages;
mod parts;
mod sso;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form};
use serde::Deserialize;

use super::AdminState;
use super::session::{self, Session};
use crate::config::{Role, Snapshot};
use crate::server::ApiError;

/// No inline script or style, nothing from elsewhere, never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/", get(home))
        .route("/console/sign-in", post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/activity", post(activity))
        .route("/console/sso/login", get(sso::login))
        .route("/console/sso/callback", get(sso::callback))
        .route("/console/assets/{file}", get(assets::serve))
        .route("/console/{page}", get(page))
}

fn now_s() -> u64 {
    crate::clock::unix_ms().max(0) as u64 / 1000
}

fn peer(c: Option<Extension<ConnectInfo<SocketAddr>>>) -> IpAddr {
    c.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.0.ip())
}

/// Every console answer: the page and the headers that keep it from being framed, sniffed,
/// cached or leaking its address.
fn guarded(status: StatusCode, body: String) -> Response {
    let mut r = (status, Html(body)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The sign-in form again, saying why.
fn refused(status: StatusCode, why: &str) -> Response {
    guarded(status, pages::sign_in(Some(why), false).into_string())
}

fn redirect(to: &'static str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    r
}

fn with_cookie(mut r: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// The session the request carries, if any, opened against `snap` (the snapshot the handler
/// reads the admin from: its index is into that snapshot's admins).
async fn current(ops: &AdminState, snap: &Snapshot, headers: &HeaderMap) -> Option<Session> {
    let value = session::cookie(headers)?;
    ops.session(snap, value, now_s()).await
}

/// Without an admin configured there is no console, as there is no admin API.
async fn home(State(ops): State<AdminState>, headers: HeaderMap) -> Response {
    let state = &ops.app;
    let snap = state.live.load();
    if snap.server.admins.is_empty() {
        return ApiError::NotFound("/console".into()).into_response();
    }
    match current(&ops, &snap, &headers).await {
        Some(_) => redirect("/console/channels"),
        None => {
            let sso = snap.server.sso.is_some();
            guarded(StatusCode::OK, pages::sign_in(None, sso).into_string())
        }
    }
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

async fn sign_in(
    State(ops): State<AdminState>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, axum::extract::rejection::FormRejection>,
) -> Response {
    let state = &ops.app;
    let snap = state.live.load();
    if snap.server.admins.is_empty() {
        return ApiError::NotFound("/console/sign-in".into()).into_response();
    }
    let ip = peer(conn);
    let presented = form.map(|Form(f)| f.token).unwrap_or_default();
    // The admin API's own check: its failed-attempt limit, every token compared.
    let found = super::sign_in(&snap, &ops.failures, &presented, ip);
    let admin = match found {
        Ok(i) => &snap.server.admins[i],
        Err(super::Refused::Blocked(secs)) => {
            let m = format!("Too many failed attempts from this address; try again in {secs} s.");
            return refused(StatusCode::TOO_MANY_REQUESTS, &m);
        }
        Err(super::Refused::Wrong) => {
            let m = "That token is not an admin's or viewer's token.";
            return refused(StatusCode::UNAUTHORIZED, m);
        }
    };
    let Some(value) = session::issue(admin, None, now_s()) else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "No randomness for a session; try again.",
        );
    };
    tracing::info!(admin = %admin.name, "console: signed in");
    let secure = session::secure(&snap, &headers, ip);
    with_cookie(
        redirect("/console/channels"),
        &session::set_cookie(&value, session::LIFETIME_S, secure),
    )
}

#[derive(Deserialize)]
struct SignOut {
    csrf: String,
}

async fn sign_out(
    State(ops): State<AdminState>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<SignOut>, axum::extract::rejection::FormRejection>,
) -> Response {
    let state = &ops.app;
    let snap = state.live.load();
    let secure = session::secure(&snap, &headers, peer(conn));
    let mut to = None;
    if let (Some(s), Ok(Form(f))) = (current(&ops, &snap, &headers).await, form) {
        // A sign-out is a write: it needs the session's CSRF token like any other.
        if !s.csrf_matches(&f.csrf) {
            let m = "Sign-out refused: stale page; reload and try again.";
            return refused(StatusCode::FORBIDDEN, m);
        }
        session::revoke(&ops.app.state, &ops.signed_out, &s).await;
        // Signed in through SSO: signed out at the provider too, when it offers it.
        if let (Some(_), Some(sso)) = (&s.person, &snap.server.sso) {
            to = sso::provider_logout(&ops, sso).await;
        }
    }
    // On to the provider by a page, not a redirect: the form's own answer may only lead back
    // here (the CSP's `form-action 'self'` holds for redirects too).
    let r = match to {
        Some(to) => guarded(StatusCode::OK, sso::onward("Signed out", &to).into_string()),
        None => redirect("/console"),
    };
    with_cookie(r, &session::set_cookie("", 0, secure))
}

/// A page for a signed-in admin, its session's cookie re-signed when due (using the console
/// is what keeps a session from idling out); without a session, the sign-in form.
async fn page(
    State(ops): State<AdminState>,
    Path(slug): Path<String>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let state = &ops.app;
    let snap = state.live.load();
    if snap.server.admins.is_empty() {
        return ApiError::NotFound(format!("/console/{slug}")).into_response();
    }
    let Some(s) = current(&ops, &snap, &headers).await else {
        return redirect("/console");
    };
    let Some(admin) = snap.server.admins.get(s.admin) else {
        return redirect("/console");
    };
    let csrf = s.csrf();
    let who = pages::Viewer {
        name: s.person.as_deref().unwrap_or(&admin.name),
        admin: admin.role == Role::Admin,
        csrf: &csrf,
    };
    let Some(markup) = pages::page(&slug, &who) else {
        return guarded(StatusCode::NOT_FOUND, pages::not_found(&slug).into_string());
    };
    resigned(
        guarded(StatusCode::OK, markup.into_string()),
        &s,
        &snap,
        &headers,
        conn,
    )
}

/// The answer with the session's re-signed cookie, when it has one.
fn resigned(
    r: Response,
    s: &Session,
    snap: &Snapshot,
    headers: &HeaderMap,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    match s.resigned(now_s()) {
        Some(v) => {
            let secure = session::secure(snap, headers, peer(conn));
            with_cookie(r, &session::set_cookie(&v, session::LIFETIME_S, secure))
        }
        None => r,
    }
}

/// `POST /console/activity`: the page tells the gateway its user is active (a click or a key,
/// at most once a minute), so a session in use on one page does not idle out; 401 when the
/// session has ended. Background refreshes do not call it: they are not activity.
async fn activity(
    State(ops): State<AdminState>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let state = &ops.app;
    let snap = state.live.load();
    let Some(s) = current(&ops, &snap, &headers).await else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    resigned(
        StatusCode::NO_CONTENT.into_response(),
        &s,
        &snap,
        &headers,
        conn,
    )
}
