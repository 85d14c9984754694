//! A JWT client: the token's issuer found by its `iss`, its signature checked with the
//! issuer's JWKS (kept, fetched again when a token names a key it does not hold, at most once a
//! minute; the keys already held keep working while the JWKS cannot be fetched), `aud`, `exp`
//! and `nbf` checked with the issuer's leeway, then its team and end user read from the claims.
//! Every failure is the client's: 401 `invalid_token`, whatever the JWKS endpoint does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::Clock;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::config::Snapshot;
use crate::config::auth::JwtIssuer;

/// A JWKS is fetched again for an unknown key at most this often.
const REFETCH_EVERY: Duration = Duration::from_secs(60);
/// The longest a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A JWKS larger than this is refused.
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// Why a token is refused (each is a 401 `invalid_token`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token's issuer is not one this gateway accepts")]
    UnknownIssuer,
    #[error("the token's algorithm {0} is not accepted for its issuer")]
    Algorithm(String),
    #[error("the token is signed with a key its issuer does not publish")]
    UnknownKey,
    #[error("the token is invalid: {0}")]
    Invalid(String),
    #[error("the token names no team this gateway has (claim {0:?})")]
    NoTeam(String),
}

/// Who a valid token is: the key it acts as (its team's), and its end user.
#[derive(Debug)]
pub struct Client {
    pub key: usize,
    pub user: Option<String>,
}

/// Whether `token` is shaped as a JWT (three base64url parts), so worth verifying.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.bytes().filter(|b| *b == b'.').count() == 2
}

/// One issuer's keys as last fetched, each decoded once when fetched (not per token), and
/// when a fetch was last tried.
#[derive(Default)]
struct Held {
    keys: Option<Arc<[HeldKey]>>,
    tried: Option<Instant>,
}

/// A key of a fetched JWKS: its `kid`, and the key or why it could not be read.
struct HeldKey {
    kid: Option<String>,
    key: Result<Arc<DecodingKey>, String>,
}

impl HeldKey {
    fn all(set: &JwkSet) -> Arc<[HeldKey]> {
        set.keys
            .iter()
            .map(|jwk| HeldKey {
                kid: jwk.common.key_id.clone(),
                key: DecodingKey::from_jwk(jwk)
                    .map(Arc::new)
                    .map_err(|e| e.to_string()),
            })
            .collect()
    }
}

/// The JWKS of every issuer, by URL.
pub struct Jwks {
    http: reqwest::Client,
    /// When a fetch was tried is read here (tests move it).
    clock: Arc<dyn Clock>,
    held: Mutex<HashMap<String, Held>>,
    /// One fetch at a time: the others wait for its keys.
    fetching: tokio::sync::Mutex<()>,
}

impl Jwks {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let http = super::provider_client(FETCH_TIMEOUT);
        Jwks {
            http,
            clock,
            held: Mutex::default(),
            fetching: tokio::sync::Mutex::new(()),
        }
    }
}

impl Jwks {
    /// The client `token` is, by `snap`'s issuers and teams.
    pub async fn verify(&self, snap: &Snapshot, token: &str) -> Result<Client, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|_| TokenError::Malformed)?;
        let iss = unverified.get("iss").and_then(Value::as_str);
        let issuer = snap
            .jwt
            .iter()
            .find(|i| Some(i.issuer.as_str()) == iss)
            .ok_or(TokenError::UnknownIssuer)?;
        if !issuer.algorithms.contains(&header.alg) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        let key = self.key(&issuer.jwks_url, header.kid.as_deref()).await?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&issuer.issuer]);
        v.set_audience(&issuer.audiences);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.leeway = issuer.clock_skew_seconds;
        v.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| TokenError::Invalid(e.to_string()))?
            .claims;
        let key = team_of(issuer, &claims, |t| snap.jwt_keys.contains_key(t))
            .and_then(|t| snap.jwt_keys.get(t).copied())
            .ok_or_else(|| TokenError::NoTeam(issuer.team_claim.clone()))?;
        let user = claims
            .get(&issuer.user_claim)
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Client { key, user })
    }

    /// The key named `kid` (or the only key, for a token naming none) of the JWKS at `jwks`.
    pub async fn key(
        &self,
        jwks: &reqwest::Url,
        kid: Option<&str>,
    ) -> Result<Arc<DecodingKey>, TokenError> {
        let url = jwks.as_str();
        if let Some(k) = self.find(url, kid) {
            return k;
        }
        let _one = self.fetching.lock().await;
        // Another request may have fetched them while this one waited.
        if let Some(k) = self.find(url, kid) {
            return k;
        }
        let due = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            held.get(url)
                .and_then(|h| h.tried)
                .is_none_or(|t| self.clock.now().saturating_duration_since(t) >= REFETCH_EVERY)
        };
        if due {
            let fetched = self.fetch(jwks).await;
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let h = held.entry(url.to_string()).or_default();
            h.tried = Some(self.clock.now());
            match fetched {
                Ok(set) => h.keys = Some(HeldKey::all(&set)),
                Err(e) => tracing::warn!(url, error = e, "could not fetch a JWT issuer's keys"),
            }
        }
        self.find(url, kid).unwrap_or(Err(TokenError::UnknownKey))
    }

    /// The key from what is held (`None`: not held).
    fn find(&self, url: &str, kid: Option<&str>) -> Option<Result<Arc<DecodingKey>, TokenError>> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let keys = held.get(url)?.keys.as_deref()?;
        let found = match kid {
            Some(kid) => keys.iter().find(|k| k.kid.as_deref() == Some(kid))?,
            None if keys.len() == 1 => &keys[0],
            None => return None,
        };
        Some(found.key.clone().map_err(TokenError::Invalid))
    }

    async fn fetch(&self, url: &reqwest::Url) -> Result<JwkSet, String> {
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()));
        }
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        if body.len() > MAX_JWKS_BYTES {
            return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}

/// The token's team: its team claim, else the first of its groups that `is_team`.
fn team_of<'a>(
    issuer: &JwtIssuer,
    claims: &'a Map<String, Value>,
    is_team: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    if let Some(t) = claims.get(&issuer.team_claim).and_then(Value::as_str) {
        return Some(t);
    }
    let groups = claims.get(&issuer.groups_claim)?.as_array()?;
    groups.iter().filter_map(Value::as_str).find(|g| is_team(g))
}
