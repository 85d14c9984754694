//! Google access tokens for Vertex AI: a service account's key (the channel's
//! `credentials_json` or `credentials_file`, else `GOOGLE_APPLICATION_CREDENTIALS`) traded for a
//! token by the JWT-bearer grant at its `token_uri` (RS256, signed by `ring`, already in the
//! tree for TLS; the `rsa` crate has an unfixed timing advisory), else the metadata server
//! (GKE workload identity, GCE; `GCE_METADATA_HOST` overrides its host).

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::{Fetch, Fetched};
use crate::provider::http::{self, Client};
use crate::secret::Secret;

/// The scope a Vertex call needs.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// A service account's key, as its JSON file holds it.
pub struct ServiceAccount {
    pub client_email: String,
    pub private_key_id: Option<String>,
    /// PKCS#8, parsed once.
    key: ring::signature::RsaKeyPair,
    pub token_uri: String,
}

impl ServiceAccount {
    /// From the key file's JSON; the error names what is missing, never the key.
    pub fn from_json(text: &str) -> Result<ServiceAccount, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|_| "the service account key is not JSON")?;
        let s = |k: &str| {
            v[k].as_str()
                .map(str::to_string)
                .ok_or(format!("the service account key has no {k}"))
        };
        use rustls::pki_types::PrivatePkcs8KeyDer;
        use rustls::pki_types::pem::PemObject;
        let pem = s("private_key")?;
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|_| "the service account's private_key is not a PKCS#8 PEM key")?;
        let key = ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
            .map_err(|_| "the service account's private_key is not an RSA key")?;
        Ok(ServiceAccount {
            client_email: s("client_email")?,
            private_key_id: s("private_key_id").ok(),
            key,
            token_uri: s("token_uri")
                .unwrap_or_else(|_| "https://oauth2.googleapis.com/token".into()),
        })
    }

    /// The signed assertion of the JWT-bearer grant, good for an hour from `now`.
    pub fn assertion(&self, now: SystemTime) -> Result<String, String> {
        let iat = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = &self.private_key_id {
            header["kid"] = kid.as_str().into();
        }
        let claims = json!({"iss": self.client_email, "scope": SCOPE, "aud": self.token_uri,
            "iat": iat, "exp": iat + 3600});
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let signing_input = format!("{}.{}", b64(&header), b64(&claims));
        let mut sig = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signing_input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| "signing the assertion failed")?;
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig);
        Ok(format!("{signing_input}.{sig}"))
    }
}

/// Where a Vertex channel's token comes from.
pub enum TokenSource {
    Account(Box<ServiceAccount>, Client),
    Metadata { host: String, client: Client },
}

impl TokenSource {
    /// What identifies the source, for its cache (no secret).
    pub fn identity(&self) -> String {
        match self {
            TokenSource::Account(a, _) => format!("{} {}", a.client_email, a.token_uri),
            TokenSource::Metadata { host, .. } => host.clone(),
        }
    }
}

impl Fetch for TokenSource {
    type Value = Secret;

    async fn fetch(&self) -> Result<Fetched<Secret>, String> {
        let now = SystemTime::now();
        let (req, client) = match self {
            TokenSource::Account(a, client) => {
                let assertion = a.assertion(now)?;
                let body = format!(
                    "grant_type={}&assertion={assertion}",
                    "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
                );
                let req = ::http::Request::post(&a.token_uri)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)));
                (req, client)
            }
            TokenSource::Metadata { host, client } => {
                let url = format!(
                    "http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
                );
                let req = ::http::Request::get(url)
                    .header("metadata-flavor", "Google")
                    .body(http_body_util::Full::new(bytes::Bytes::new()));
                (req, client)
            }
        };
        let req = req.map_err(|_| "not a valid token URL")?;
        let where_ = http::redact_url(&req.uri().to_string());
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .map_err(|_| format!("{where_} did not answer in 10 s"))?
            .map_err(|e| format!("{where_}: {}", http::error_chain(&*e)))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the token: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "{where_} refused the grant: HTTP {}",
                status.as_u16()
            ));
        }
        let v: Value = serde_json::from_slice(&body).map_err(|_| "the token answer is not JSON")?;
        let token = v["access_token"]
            .as_str()
            .ok_or("the token answer has no access_token")?;
        let ttl = v["expires_in"].as_u64().unwrap_or(3600);
        Ok(Fetched {
            value: Secret::new(token),
            expires: Some(now + Duration::from_secs(ttl)),
        })
    }

    fn describe(&self) -> String {
        match self {
            TokenSource::Account(a, _) => {
                format!(
                    "service account {} (token from {})",
                    a.client_email, a.token_uri
                )
            }
            TokenSource::Metadata { host, .. } => format!("metadata server at {host}"),
        }
    }
}
