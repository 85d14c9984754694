//! The console's single sign-on (`[sso]`): `/console/sso/login` sends the browser to the
//! identity provider with a fresh flow (its state, nonce and PKCE verifier in a signed cookie
//! that any replica can read), and `/console/sso/callback` checks what comes back, exchanges
//! the code, checks the ID token, maps the person's groups to an admin of the config and signs
//! them in with the console's own session. People of no mapped group are refused.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::{AdminState, guarded, now_s, peer, refused, with_cookie};
use crate::admin::session;
use crate::auth::oidc::{FLOW_S, Flow};
use crate::config::Role;
use crate::config::sso::SsoSettings;
use crate::server::ApiError;

/// The flow's cookie: sent back by the browser on the provider's (cross-site) redirect, so
/// `SameSite=Lax`, and only to the SSO paths.
const FLOW_COOKIE: &str = "sy_sso";

fn flow_cookie(value: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{FLOW_COOKIE}={value}; Path=/console/sso; HttpOnly; SameSite=Lax; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

fn flow_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(FLOW_COOKIE)?.strip_prefix('='))
}

/// `GET /console/sso/login`: off to the provider.
pub async fn login(
    State(ops): State<AdminState>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let snap = ops.app.live.load();
    let Some(sso) = snap.server.sso.clone() else {
        return ApiError::NotFound("/console/sso/login".into()).into_response();
    };
    let Some(flow) = Flow::new(now_s()) else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "No randomness for a sign-in; try again.",
        );
    };
    let url = match ops.oidc.authorize_url(&sso, &flow).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "console: single sign-on could not start");
            return refused(StatusCode::BAD_GATEWAY, &e.to_string());
        }
    };
    let Ok(location) = HeaderValue::from_str(&url) else {
        return refused(
            StatusCode::BAD_GATEWAY,
            "The provider's sign-in address is not usable.",
        );
    };
    let secure = session::secure(&snap, &headers, peer(conn));
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut().insert(header::LOCATION, location);
    with_cookie(r, &flow_cookie(&flow.seal(&sso), FLOW_S, secure))
}

#[derive(Deserialize)]
pub struct Back {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /console/sso/callback`: the provider's answer, checked, and the person signed in.
pub async fn callback(
    State(ops): State<AdminState>,
    conn: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    back: Result<Query<Back>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let snap = ops.app.live.load();
    let Some(sso) = snap.server.sso.clone() else {
        return ApiError::NotFound("/console/sso/callback".into()).into_response();
    };
    let secure = session::secure(&snap, &headers, peer(conn));
    let clear = flow_cookie("", 0, secure);
    let Ok(Query(back)) = back else {
        return with_cookie(
            refused(
                StatusCode::BAD_REQUEST,
                "The sign-in's answer is malformed.",
            ),
            &clear,
        );
    };
    if let Some(e) = back.error {
        let why = back.error_description.unwrap_or(e);
        let m = format!("The identity provider refused the sign-in: {why}");
        return with_cookie(refused(StatusCode::UNAUTHORIZED, &m), &clear);
    }
    let flow = flow_value(&headers).and_then(|v| Flow::open(v, &sso, now_s()));
    let (Some(flow), Some(state), Some(code)) = (flow, back.state, back.code) else {
        let m = "This sign-in was not started here, or took too long; start again.";
        return with_cookie(refused(StatusCode::BAD_REQUEST, m), &clear);
    };
    if !crate::secret::same(flow.state.as_bytes(), state.as_bytes()) {
        let m = crate::auth::oidc::SsoError::State.to_string();
        return with_cookie(refused(StatusCode::BAD_REQUEST, &m), &clear);
    }
    let who = match ops.oidc.finish(&sso, &flow, &code).await {
        Ok(who) => who,
        Err(e) => {
            tracing::warn!(error = %e, "console: a single sign-on failed");
            return with_cookie(refused(StatusCode::UNAUTHORIZED, &e.to_string()), &clear);
        }
    };
    let Some(i) = mapped(&sso, &snap.server.admins, &who.groups) else {
        tracing::warn!(person = %who.person, "console: single sign-on of a person in no mapped group refused");
        let m = format!("{} is in no group this gateway lets in.", who.person);
        return with_cookie(refused(StatusCode::FORBIDDEN, &m), &clear);
    };
    let admin = &snap.server.admins[i];
    let Some(value) = session::issue(admin, Some(&who.person), now_s()) else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "No randomness for a session; try again.",
        );
    };
    tracing::info!(person = %who.person, admin = %admin.name, "console: signed in through SSO");
    // A page that moves on by itself: the session cookie is SameSite=Strict, and a redirect
    // that is still part of the provider's cross-site navigation would not carry it.
    let said = format!("Signed in as {}", who.person);
    let r = guarded(
        StatusCode::OK,
        onward(&said, "/console/channels").into_string(),
    );
    let r = with_cookie(r, &clear);
    with_cookie(r, &session::set_cookie(&value, session::LIFETIME_S, secure))
}

/// A page that says `what` and moves on to `to` by itself (a link too).
pub fn onward(what: &str, to: &str) -> maud::Markup {
    html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={ "0; url=" (to) };
                title { (what) }
            }
            body { p { (what) ". " a href=(to) { "Continue" } } }
        }
    }
}

/// The admin a person of `groups` signs in as: an admin mapping before a viewer one, each in
/// the config's order.
fn mapped(sso: &SsoSettings, admins: &[crate::config::Admin], groups: &[String]) -> Option<usize> {
    let theirs = || {
        sso.mappings
            .iter()
            .filter(|(g, _)| groups.contains(g))
            .map(|(_, i)| *i)
    };
    theirs()
        .find(|i| admins.get(*i).is_some_and(|a| a.role == Role::Admin))
        .or_else(|| theirs().next())
}

/// Where a person signed in through SSO goes on signing out: the provider's end of session,
/// back to the console, when the provider offers it.
pub async fn provider_logout(ops: &AdminState, sso: &SsoSettings) -> Option<String> {
    let mut back = sso.redirect_url.clone();
    back.set_path("/console");
    ops.oidc.logout_url(sso, back.as_str()).await
}
