//! OpenID Connect for the console's single sign-on: the provider's discovery document (kept an
//! hour), the authorization request with PKCE (S256), a `state` and a `nonce` carried in a
//! signed, short-lived cookie (so any replica can take the callback), the code exchanged at
//! the token endpoint with the client's secret, and the ID token checked: its signature by the
//! provider's JWKS, `iss`, `aud`, `exp` and the `nonce`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, Validation};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::jwt::Jwks;
use crate::config::sso::SsoSettings;

/// A discovery document is read again after this long.
const DISCOVERY_KEPT: Duration = Duration::from_secs(3600);
/// A sign-in must come back from the provider within this long.
pub const FLOW_S: u64 = 600;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a sign-in failed.
#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    #[error("the identity provider cannot be reached: {0}")]
    Provider(String),
    #[error("the sign-in did not come back as it left (its state does not match); start again")]
    State,
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    #[error("the identity provider's token is not valid: {0}")]
    Token(String),
}

/// What the provider says of the signed-in user.
#[derive(Debug)]
pub struct Identity {
    /// The email, else the preferred username, else the subject.
    pub person: String,
    pub groups: Vec<String>,
}

/// The parts of the discovery document used here.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    pub end_session_endpoint: Option<String>,
}

/// An endpoint the discovery document names.
fn endpoint(u: &str) -> Result<reqwest::Url, SsoError> {
    reqwest::Url::parse(u).map_err(|e| SsoError::Provider(format!("its endpoint {u:?}: {e}")))
}

/// A sign-in in flight: what the callback must match, carried in its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    pub issued: u64,
}

fn random(n: usize) -> Option<Vec<u8>> {
    let mut b = vec![0u8; n];
    SystemRandom::new().fill(&mut b).ok()?;
    Some(b)
}

impl Flow {
    pub fn new(now: u64) -> Option<Flow> {
        Some(Flow {
            state: crate::secret::hex(&random(16)?),
            nonce: crate::secret::hex(&random(16)?),
            verifier: B64.encode(random(32)?),
            issued: now,
        })
    }

    /// The cookie value: the flow and its MAC under a key only this config's replicas hold.
    pub fn seal(&self, s: &SsoSettings) -> String {
        let body = format!(
            "{}.{}.{}.{}",
            self.state, self.nonce, self.verifier, self.issued
        );
        format!("{body}.{}", mac(s, &body))
    }

    /// The flow a cookie carries, if its MAC holds and it is recent.
    pub fn open(value: &str, s: &SsoSettings, now: u64) -> Option<Flow> {
        let (body, tag) = value.rsplit_once('.')?;
        if !crate::secret::same(mac(s, body).as_bytes(), tag.as_bytes()) {
            return None;
        }
        let mut p = body.split('.');
        let f = Flow {
            state: p.next()?.to_string(),
            nonce: p.next()?.to_string(),
            verifier: p.next()?.to_string(),
            issued: p.next()?.parse().ok()?,
        };
        (p.next().is_none() && now < f.issued.saturating_add(FLOW_S) && f.issued <= now + 60)
            .then_some(f)
    }

    /// PKCE's S256 challenge of the verifier.
    fn challenge(&self) -> String {
        B64.encode(ring::digest::digest(
            &ring::digest::SHA256,
            self.verifier.as_bytes(),
        ))
    }
}

fn mac(s: &SsoSettings, body: &str) -> String {
    let key = crate::secret::derive(&s.client_secret, "sso sign-in flow");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    crate::secret::hex(ring::hmac::sign(&key, body.as_bytes()).as_ref())
}

/// The provider's documents, kept.
pub struct Oidc {
    http: reqwest::Client,
    jwks: Arc<Jwks>,
    discovered: Mutex<Option<(String, Discovery, Instant)>>,
}

impl Oidc {
    pub fn new(jwks: Arc<Jwks>) -> Oidc {
        let http = super::provider_client(TIMEOUT);
        Oidc {
            http,
            jwks,
            discovered: Mutex::new(None),
        }
    }

    /// The provider's discovery document (fetched at most once an hour).
    pub async fn discovery(&self, s: &SsoSettings) -> Result<Discovery, SsoError> {
        let issuer = s.issuer.as_str().trim_end_matches('/').to_string();
        {
            let d = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((i, doc, at)) = &*d
                && *i == issuer
                && at.elapsed() < DISCOVERY_KEPT
            {
                return Ok(doc.clone());
            }
        }
        let url = format!("{issuer}/.well-known/openid-configuration");
        let doc: Discovery = self.get_json(&url).await?;
        // The document must be the issuer's own (OpenID Connect Discovery 1.0, 4.3).
        if doc.issuer.trim_end_matches('/') != issuer {
            return Err(SsoError::Provider(format!(
                "its discovery document names issuer {:?}",
                doc.issuer
            )));
        }
        let mut d = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
        *d = Some((issuer, doc.clone(), Instant::now()));
        Ok(doc)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, SsoError> {
        let resp = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| SsoError::Provider(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(SsoError::Provider(format!(
                "{url} answered {}",
                resp.status()
            )));
        }
        // Read as bytes: reqwest's `json` feature is not built into the gateway.
        let body = resp
            .bytes()
            .await
            .map_err(|e| SsoError::Provider(format!("{url}: {e}")))?;
        serde_json::from_slice(&body).map_err(|e| SsoError::Provider(format!("{url}: {e}")))
    }

    /// Where to send the browser to sign in.
    pub async fn authorize_url(&self, s: &SsoSettings, flow: &Flow) -> Result<String, SsoError> {
        let d = self.discovery(s).await?;
        let mut u = endpoint(&d.authorization_endpoint)?;
        u.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &s.client_id)
            .append_pair("redirect_uri", s.redirect_url.as_str())
            .append_pair("scope", &s.scopes)
            .append_pair("state", &flow.state)
            .append_pair("nonce", &flow.nonce)
            .append_pair("code_challenge", &flow.challenge())
            .append_pair("code_challenge_method", "S256");
        Ok(u.into())
    }

    /// The code exchanged and the ID token checked: who signed in.
    pub async fn finish(
        &self,
        s: &SsoSettings,
        flow: &Flow,
        code: &str,
    ) -> Result<Identity, SsoError> {
        let d = self.discovery(s).await?;
        let mut form = reqwest::Url::parse("x:/").map_err(|e| SsoError::Provider(e.to_string()))?;
        form.query_pairs_mut()
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", s.redirect_url.as_str())
            .append_pair("code_verifier", &flow.verifier);
        let resp = self
            .http
            .post(endpoint(&d.token_endpoint)?)
            .basic_auth(&s.client_id, Some(s.client_secret.expose()))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form.query().unwrap_or_default().to_string())
            .send()
            .await
            .map_err(|e| SsoError::Provider(e.to_string()))?;
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            let why = body["error"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string();
            return Err(SsoError::Refused(why));
        }
        let token = body["id_token"]
            .as_str()
            .ok_or_else(|| SsoError::Token("the token answer has no id_token".into()))?;
        let claims = self.id_token(s, &d, token, &flow.nonce).await?;
        Ok(identity(s, &claims))
    }

    /// The ID token's claims, once its signature, issuer, audience, expiry and nonce hold.
    async fn id_token(
        &self,
        s: &SsoSettings,
        d: &Discovery,
        token: &str,
        nonce: &str,
    ) -> Result<Map<String, Value>, SsoError> {
        let bad = |e: &dyn std::fmt::Display| SsoError::Token(e.to_string());
        let header = jsonwebtoken::decode_header(token).map_err(|e| bad(&e))?;
        let signed = !matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        );
        if !signed {
            return Err(SsoError::Token(
                "HMAC-signed ID tokens are not accepted".into(),
            ));
        }
        let key = self
            .jwks
            .key(&endpoint(&d.jwks_uri)?, header.kid.as_deref())
            .await
            .map_err(|e| bad(&e))?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&d.issuer]);
        v.set_audience(&[&s.client_id]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.leeway = 60;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| bad(&e))?
            .claims;
        let matches = claims
            .get("nonce")
            .and_then(Value::as_str)
            .is_some_and(|n| crate::secret::same(n.as_bytes(), nonce.as_bytes()));
        if !matches {
            return Err(SsoError::Token("its nonce is not this sign-in's".into()));
        }
        Ok(claims)
    }

    /// Where to end the session at the provider too, when it offers it.
    pub async fn logout_url(&self, s: &SsoSettings, back: &str) -> Option<String> {
        let end = self.discovery(s).await.ok()?.end_session_endpoint?;
        let mut u = endpoint(&end).ok()?;
        u.query_pairs_mut()
            .append_pair("client_id", &s.client_id)
            .append_pair("post_logout_redirect_uri", back);
        Some(u.into())
    }
}

fn identity(s: &SsoSettings, claims: &Map<String, Value>) -> Identity {
    let text = |k: &str| claims.get(k).and_then(Value::as_str).map(str::to_string);
    let person = text("email")
        .or_else(|| text("preferred_username"))
        .or_else(|| text("sub"))
        .unwrap_or_default();
    let groups = match claims.get(&s.groups_claim) {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Some(Value::String(g)) => vec![g.clone()],
        _ => Vec::new(),
    };
    Identity { person, groups }
}
