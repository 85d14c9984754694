//! `[sso]`: single sign-on for the console and the admin API by OpenID Connect (authorization
//! code flow with PKCE and a nonce). Each `[[sso.mappings]]` entry turns an identity-provider
//! group into a role and the teams it may manage; it is compiled into an admin of the config
//! (`sso:<group>`) that only a signed-in session can act as, never a bearer token.

use std::sync::Arc;

use serde::Deserialize;

use super::role::Role;
use crate::secret::Secret;

type FieldError = (String, String);

/// The path of the console's callback: `redirect_url` must end here.
pub const CALLBACK: &str = "/console/sso/callback";

/// `[sso]` as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SsoConfig {
    /// The provider's issuer; its discovery document is `{issuer}/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Default `openid email profile`; `openid` is always asked for.
    pub scopes: Option<Vec<String>>,
    /// The console's callback as the browser reaches it (`https://gw.example.com/console/sso/callback`).
    pub redirect_url: String,
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    #[serde(default)]
    pub mappings: Vec<MappingConfig>,
}

fn default_groups_claim() -> String {
    "groups".into()
}

/// `[[sso.mappings]]`: a group of the provider's and what its members may do.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MappingConfig {
    pub group: String,
    pub role: Role,
    /// The teams its members manage (none: every team).
    #[serde(default)]
    pub teams: Vec<String>,
}

/// `[sso]`, compiled.
#[derive(Debug)]
pub struct SsoSettings {
    pub issuer: reqwest::Url,
    pub client_id: String,
    pub client_secret: Secret,
    pub scopes: String,
    pub redirect_url: reqwest::Url,
    pub groups_claim: String,
    /// Each mapping's group, and its admin's place in `server.admins`.
    pub mappings: Vec<(String, usize)>,
}

/// An `http://` URL is taken only for a loopback host (a provider on this machine, in tests).
fn url(field: &str, text: &str) -> Result<reqwest::Url, FieldError> {
    reqwest::Url::parse(text)
        .ok()
        .filter(|u| u.scheme() == "https" || (u.scheme() == "http" && super::auth::loopback(u)))
        .ok_or_else(|| {
            (
                format!("sso.{field}"),
                "an https:// URL (http:// only for a loopback host)".into(),
            )
        })
}

/// A mapping as the admin of the config it is compiled into: only a session acts as it.
pub struct Mapped {
    pub name: Arc<str>,
    /// Never presented by anyone: derived from the client secret, it keys the sessions.
    pub token: Secret,
    pub role: Role,
    pub teams: Vec<Arc<str>>,
}

/// `[sso]` checked, and the admins its mappings are (to go at `first`, on in order).
pub fn compile(s: &SsoConfig, first: usize) -> Result<(Arc<SsoSettings>, Vec<Mapped>), FieldError> {
    let issuer = url("issuer", &s.issuer)?;
    let redirect_url = url("redirect_url", &s.redirect_url)?;
    if redirect_url.path() != CALLBACK {
        return Err((
            "sso.redirect_url".into(),
            format!("must be the console's callback, path {CALLBACK}"),
        ));
    }
    if s.client_id.is_empty() {
        return Err(("sso.client_id".into(), "must not be empty".into()));
    }
    if s.client_secret.len() < 16 {
        return Err((
            "sso.client_secret".into(),
            "must be at least 16 characters (it also signs the sign-in's state)".into(),
        ));
    }
    let mut scopes = vec!["openid".to_string()];
    for sc in s
        .scopes
        .clone()
        .unwrap_or_else(|| vec!["email".into(), "profile".into()])
    {
        if sc.is_empty() || sc.contains(char::is_whitespace) {
            return Err(("sso.scopes".into(), format!("{sc:?} is not a scope")));
        }
        if !scopes.contains(&sc) {
            scopes.push(sc);
        }
    }
    if s.mappings.is_empty() {
        return Err((
            "sso.mappings".into(),
            "map at least one group to a role: users of no mapped group are refused".into(),
        ));
    }
    let secret = Secret::new(s.client_secret.as_str());
    let mut mappings = Vec::with_capacity(s.mappings.len());
    let mut admins = Vec::with_capacity(s.mappings.len());
    for (i, m) in s.mappings.iter().enumerate() {
        if m.group.is_empty() || mappings.iter().any(|(g, _)| *g == m.group) {
            return Err((
                format!("sso.mappings[{i}].group"),
                format!("must be set and unique, got {:?}", m.group),
            ));
        }
        mappings.push((m.group.clone(), first + admins.len()));
        let purpose = format!("sso mapping {}", m.group);
        admins.push(Mapped {
            name: format!("sso:{}", m.group).into(),
            token: Secret::new(crate::secret::derive(&secret, &purpose)),
            role: m.role,
            teams: m.teams.iter().map(|t| t.as_str().into()).collect(),
        });
    }
    let settings = SsoSettings {
        issuer,
        client_id: s.client_id.clone(),
        client_secret: secret,
        scopes: scopes.join(" "),
        redirect_url,
        groups_claim: s.groups_claim.clone(),
        mappings,
    };
    Ok((Arc::new(settings), admins))
}
