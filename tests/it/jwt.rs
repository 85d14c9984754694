//! JWT clients: tokens signed by keys a JWKS served here publishes are clients like gateway
//! keys, with their team's rules and their end user; every malformed or hostile token is 401
//! `invalid_token`, whatever the JWKS endpoint does; a rotated key is picked up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair};
use serde_json::{Value, json};

use crate::support::*;

const ISSUER: &str = "https://idp.example.test";
const AUDIENCE: &str = "switchyard";

/// A signing key: its JWK (public) and what signs with it.
struct Signer {
    kid: String,
    alg: Algorithm,
    jwk: Value,
    key: EncodingKey,
}

impl Signer {
    fn es256(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let public = pair.public_key().as_ref();
        Signer {
            kid: kid.into(),
            alg: Algorithm::ES256,
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
                        "x": B64.encode(&public[1..33]), "y": B64.encode(&public[33..65])}),
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
        }
    }

    fn eddsa(kid: &str) -> Signer {
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        Signer {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
                        "x": B64.encode(pair.public_key().as_ref())}),
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.key).unwrap()
    }
}

fn now() -> i64 {
    switchyard::clock::unix_ms() / 1000
}

/// Claims of a valid token for `team`'s user `sub`.
fn claims(team: &str, sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "team": team,
           "iat": now(), "exp": now() + 600})
}

/// A JWKS served on 127.0.0.1: what it answers can change, or be a 500.
#[derive(Clone, Default)]
struct Issuer {
    keys: Arc<Mutex<Vec<Value>>>,
    down: Arc<Mutex<bool>>,
    fetches: Arc<Mutex<u32>>,
}

impl Issuer {
    async fn serve(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let me = me.clone();
                async move {
                    *me.fetches.lock().unwrap() += 1;
                    if *me.down.lock().unwrap() {
                        return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, String::new());
                    }
                    let keys = me.keys.lock().unwrap().clone();
                    (
                        axum::http::StatusCode::OK,
                        json!({ "keys": keys }).to_string(),
                    )
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        format!("http://{addr}/jwks")
    }

    fn publish(&self, s: &Signer) {
        self.keys.lock().unwrap().push(s.jwk.clone());
    }
}

async fn gateway_for(jwks_url: &str, up: &switchyard::provider::mock::MockServer) -> Gateway {
    let extra = format!(
        "\n[[teams]]\nname = \"platform\"\nrpm = 1000\n\n[[teams]]\nname = \"data\"\n\n\
         [[auth.jwt]]\nissuer = \"{ISSUER}\"\naudiences = [\"{AUDIENCE}\"]\njwks_url = \"{jwks_url}\"\n"
    );
    gateway_full("", &extra, &openai_channel("a", &up.base_url(), 1, "")).await
}

/// The status and error code of a chat request with `token`.
async fn call(gw: &Gateway, token: &str) -> (u16, String, String) {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.post_as("/v1/chat/completions", token, &[], body).await;
    let status = resp.status().as_u16();
    let www = header(&resp, "www-authenticate").to_string();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        v["error"]["code"].as_str().unwrap_or("").to_string(),
        www,
    )
}

#[tokio::test]
async fn valid_tokens_are_team_clients_and_every_hostile_one_is_refused() {
    let up = mock(text_spec("ok")).await;
    let issuer = Issuer::default();
    let (es, ed, stranger) = (
        Signer::es256("es-1"),
        Signer::eddsa("ed-1"),
        Signer::es256("es-1"),
    );
    issuer.publish(&es);
    issuer.publish(&ed);
    let gw = gateway_for(&issuer.serve().await, &up).await;
    let mut expired = claims("platform", "u");
    expired["exp"] = json!(now() - 3600);
    let mut wrong_aud = claims("platform", "u");
    wrong_aud["aud"] = json!("someone-else");
    let mut foreign = claims("platform", "u");
    foreign["iss"] = json!("https://other.example.test");
    let mut by_group = claims("platform", "grace");
    by_group.as_object_mut().unwrap().remove("team");
    by_group["groups"] = json!(["everyone", "data"]);
    let mut no_team = claims("nobody", "u");
    no_team["groups"] = json!(["everyone"]);
    // HS256 keyed with the issuer's public key, as if it were a shared secret.
    let public = serde_json::to_vec(&es.jwk).unwrap();
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("es-1".into());
    let confused = jsonwebtoken::encode(
        &h,
        &claims("platform", "u"),
        &EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    let unsigned = format!(
        "{}.{}.",
        B64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        B64.encode(claims("platform", "u").to_string())
    );
    let mut unknown_kid = Signer::es256("es-9");
    unknown_kid.kid = "es-9".into();
    // (what, token, status)
    let rows: Vec<(&str, String, u16)> = vec![
        ("ES256", es.sign(&claims("platform", "alice")), 200),
        ("EdDSA", ed.sign(&claims("platform", "bob")), 200),
        ("team from groups", es.sign(&by_group), 200),
        ("expired", es.sign(&expired), 401),
        ("wrong audience", es.sign(&wrong_aud), 401),
        ("unknown issuer", es.sign(&foreign), 401),
        (
            "signed by another key under a known kid",
            stranger.sign(&claims("platform", "u")),
            401,
        ),
        (
            "a kid the issuer does not publish",
            unknown_kid.sign(&claims("platform", "u")),
            401,
        ),
        ("HS256 with the public key as secret", confused, 401),
        ("alg none", unsigned, 401),
        ("no team this gateway has", es.sign(&no_team), 401),
        ("not base64", "eyJhbGciOi.@@@.###".to_string(), 401),
    ];
    for (what, token, status) in &rows {
        let (got, code, www) = call(&gw, token).await;
        assert_eq!(got, *status, "{what}: {code}");
        if *status == 401 {
            assert_eq!(code, "invalid_token", "{what}");
            assert!(www.contains("invalid_token"), "{what}: {www}");
        }
    }
    assert_eq!(up.requests(), 3, "refused tokens never reach the upstream");
    // Other clients present the token where they put a key: Anthropic's `x-api-key`, and
    // embeddings through the OpenAI SDK's bearer.
    let token = es.sign(&claims("platform", "dora"));
    let msgs = json!([{"role": "user", "content": "hi"}]);
    // (path, header, body)
    let others = [
        (
            "/v1/messages",
            "x-api-key",
            json!({"model": "m", "max_tokens": 8, "messages": msgs}),
        ),
        (
            "/v1/embeddings",
            "authorization",
            json!({"model": "e", "input": "hi"}),
        ),
    ];
    for (path, name, body) in others {
        let value = if name == "authorization" {
            format!("Bearer {token}")
        } else {
            token.clone()
        };
        let resp = client()
            .post(format!("{}{path}", gw.url))
            .header(name, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    // The clients are their teams' keys, with their end users.
    gw.flush_log().await;
    let v = get_json(
        &format!("{}/admin/usage?group_by=user", gw.url),
        Some(ADMIN),
    )
    .await;
    let users: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["user"].as_str())
        .collect();
    for u in ["alice", "bob", "grace"] {
        assert!(users.contains(&u), "{u}: {v}");
    }
    let v = get_json(&format!("{}/admin/usage?group_by=key", gw.url), Some(ADMIN)).await;
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect();
    assert!(
        keys.contains(&"jwt:platform") && keys.contains(&"jwt:data"),
        "{v}"
    );
}

#[tokio::test]
async fn keys_held_outlive_a_down_jwks_and_a_rotated_key_is_picked_up_within_a_minute() {
    let up = mock(text_spec("ok")).await;
    let issuer = Issuer::default();
    let old = Signer::es256("old");
    issuer.publish(&old);
    let url = issuer.serve().await;
    // A JWKS that never answered: refused 401, never a 5xx.
    *issuer.down.lock().unwrap() = true;
    let gw = gateway_for(&url, &up).await;
    assert_eq!(call(&gw, &old.sign(&claims("platform", "u"))).await.0, 401);
    gw.clock.advance(Duration::from_secs(61));
    *issuer.down.lock().unwrap() = false;
    assert_eq!(call(&gw, &old.sign(&claims("platform", "u"))).await.0, 200);
    // Down again: the key already read keeps working, and a burst of unknown kids asks the
    // JWKS once at most.
    *issuer.down.lock().unwrap() = true;
    gw.clock.advance(Duration::from_secs(61));
    let fetched = *issuer.fetches.lock().unwrap();
    let new = Signer::eddsa("new");
    for _ in 0..5 {
        assert_eq!(call(&gw, &new.sign(&claims("platform", "u"))).await.0, 401);
        assert_eq!(call(&gw, &old.sign(&claims("platform", "u"))).await.0, 200);
    }
    assert_eq!(*issuer.fetches.lock().unwrap(), fetched + 1);
    // The issuer rotates: the new key is read at the next fetch, at most a minute on.
    *issuer.down.lock().unwrap() = false;
    issuer.publish(&new);
    assert_eq!(call(&gw, &new.sign(&claims("platform", "u"))).await.0, 401);
    gw.clock.advance(Duration::from_secs(61));
    assert_eq!(call(&gw, &new.sign(&claims("platform", "u"))).await.0, 200);
    assert_eq!(call(&gw, &old.sign(&claims("platform", "u"))).await.0, 200);
}
