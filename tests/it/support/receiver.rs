//! A webhook receiver on 127.0.0.1, as an operator would run one: it keeps every delivery
//! (headers and body) and answers from a script of statuses, then `then` (200 unless set).

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// One delivery as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// The status it was answered with.
    pub answered: u16,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
struct Inner {
    got: Vec<Received>,
    script: Vec<u16>,
    then: Option<u16>,
}

#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Mutex<Inner>>,
    pub url: String,
}

impl Receiver {
    /// Everything received so far.
    pub fn got(&self) -> Vec<Received> {
        self.inner.lock().unwrap().got.clone()
    }

    /// The deliveries answered 2xx.
    pub fn delivered(&self) -> Vec<Received> {
        self.got()
            .into_iter()
            .filter(|r| (200..300).contains(&r.answered))
            .collect()
    }

    /// Answers `status` from now on (after any script left).
    pub fn answer(&self, status: u16) {
        self.inner.lock().unwrap().then = Some(status);
    }
}

async fn take(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut inner = r.inner.lock().unwrap();
    let status = if inner.script.is_empty() {
        inner.then.unwrap_or(200)
    } else {
        inner.script.remove(0)
    };
    inner.got.push(Received {
        id: h("webhook-id"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        body,
        answered: status,
    });
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}

/// A receiver answering `script` in order, then 200.
pub async fn receiver(script: &[u16]) -> Receiver {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let r = Receiver {
        inner: Arc::new(Mutex::new(Inner {
            script: script.to_vec(),
            ..Inner::default()
        })),
        url: format!("http://{addr}/hooks"),
    };
    let app = axum::Router::new()
        .route("/hooks", axum::routing::post(take))
        .with_state(r.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    r
}

/// A `[[webhooks]]` table for `url`, with `[events]` allowing loopback targets.
pub fn webhook_config(name: &str, url: &str, secret: &str, events: &str, fold: u32) -> String {
    format!(
        "\n[events]\nallow_private_targets = true\nfold_seconds = {fold}\n\n\
         [[webhooks]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret = \"{secret}\"\nevents = [{events}]\n"
    )
}

/// A valid `whsec_` secret (24 bytes of `byte`).
pub fn whsec(byte: u8) -> String {
    use base64::Engine;
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([byte; 24])
    )
}
