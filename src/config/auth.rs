//! `[[auth.jwt]]`: issuers whose signed tokens are clients like gateway keys. Each token names
//! a team (its `team_claim`, else the first of its `groups_claim` that is a team), and acts as
//! that team's JWT key (`jwt:<team>`, made here for every team): the team's groups, models and
//! every level's limits; its `user_claim` is the request's end user.

use std::sync::Arc;

use jsonwebtoken::Algorithm;
use serde::Deserialize;

type FieldError = (String, String);

/// `[auth]`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    #[serde(default)]
    pub jwt: Vec<JwtConfig>,
}

/// One `[[auth.jwt]]` issuer as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The `iss` its tokens carry.
    pub issuer: String,
    /// Tokens must name one of these in `aud`.
    pub audiences: Vec<String>,
    /// Where its signing keys are published (JWKS).
    pub jwks_url: String,
    /// The signatures taken (default RS256, ES256, EdDSA); `none` and HS* never are.
    pub algorithms: Option<Vec<String>>,
    /// Leeway on `exp` and `nbf`.
    #[serde(default = "default_skew")]
    pub clock_skew_seconds: u64,
    #[serde(default = "default_team_claim")]
    pub team_claim: String,
    #[serde(default = "default_user_claim")]
    pub user_claim: String,
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
}

fn default_skew() -> u64 {
    60
}
fn default_team_claim() -> String {
    "team".into()
}
fn default_user_claim() -> String {
    "sub".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}

/// An issuer, compiled.
#[derive(Debug)]
pub struct JwtIssuer {
    pub issuer: String,
    pub audiences: Vec<String>,
    pub jwks_url: reqwest::Url,
    pub algorithms: Vec<Algorithm>,
    pub clock_skew_seconds: u64,
    pub team_claim: String,
    pub user_claim: String,
    pub groups_claim: String,
}

/// A JWT client's key name for `team`.
pub fn key_name(team: &str) -> String {
    format!("jwt:{team}")
}

pub fn compile(s: &AuthSection) -> Result<Vec<Arc<JwtIssuer>>, FieldError> {
    let mut out = Vec::with_capacity(s.jwt.len());
    for (i, j) in s.jwt.iter().enumerate() {
        let at = |f: &str| format!("auth.jwt[{i}].{f}");
        if j.issuer.is_empty() {
            return Err((at("issuer"), "must not be empty".into()));
        }
        if out.iter().any(|o: &Arc<JwtIssuer>| o.issuer == j.issuer) {
            return Err((
                at("issuer"),
                format!("issuer {:?} is given twice", j.issuer),
            ));
        }
        if j.audiences.is_empty() || j.audiences.iter().any(String::is_empty) {
            return Err((at("audiences"), "name at least one audience".into()));
        }
        let jwks_url = reqwest::Url::parse(&j.jwks_url)
            .ok()
            .filter(|u| u.scheme() == "https" || (u.scheme() == "http" && loopback(u)))
            .ok_or_else(|| {
                (
                    at("jwks_url"),
                    "an https:// URL (http:// only for a loopback host)".into(),
                )
            })?;
        let names = j
            .algorithms
            .clone()
            .unwrap_or_else(|| ["RS256", "ES256", "EdDSA"].map(String::from).to_vec());
        let mut algorithms = Vec::with_capacity(names.len());
        for (k, n) in names.iter().enumerate() {
            let alg: Algorithm = n.parse().map_err(|_| {
                (
                    at(&format!("algorithms[{k}]")),
                    format!("unknown algorithm {n:?}"),
                )
            })?;
            // A shared secret would let anyone holding the issuer's public key sign.
            if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
                return Err((
                    at(&format!("algorithms[{k}]")),
                    "HMAC algorithms are never accepted: only signatures checked with the issuer's public keys".into(),
                ));
            }
            algorithms.push(alg);
        }
        out.push(Arc::new(JwtIssuer {
            issuer: j.issuer.clone(),
            audiences: j.audiences.clone(),
            jwks_url,
            algorithms,
            clock_skew_seconds: j.clock_skew_seconds,
            team_claim: j.team_claim.clone(),
            user_claim: j.user_claim.clone(),
            groups_claim: j.groups_claim.clone(),
        }));
    }
    Ok(out)
}

/// Whether `u` names this machine (`localhost`, 127.0.0.0/8, `[::1]`).
pub fn loopback(u: &reqwest::Url) -> bool {
    let host = u.host_str().unwrap_or("");
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
