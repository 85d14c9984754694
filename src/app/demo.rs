//! The served demo (`serve` without `--config`): the console on loopback, signed in to with an
//! admin token made at each start, over a store in a temporary SQLite file (so its writes
//! work), and a few seconds of traffic through the mock channels on start, a failover and
//! streams among it, so that every console page has something true to show.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{self, DEMO_KEY, Snapshot};
use crate::provider::HttpClients;
use crate::store::seal;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the demo's store cannot be made in a temporary directory: {0}")]
    Dir(#[from] std::io::Error),
    #[error(transparent)]
    Random(#[from] seal::SealError),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
}

/// The served demo's console: its admin token, and the store's directory, removed when the
/// demo ends.
pub struct Demo {
    token: String,
    _dir: tempfile::TempDir,
}

impl Demo {
    /// The embedded demo with a console: a new admin token, store and master key.
    pub fn load(clients: &HttpClients) -> Result<(Demo, Snapshot), DemoError> {
        let dir = tempfile::Builder::new()
            .prefix("switchyard-demo-")
            .tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("store.db").display());
        let token = format!("sy-demo-{}", &seal::generate_key()?["sk-sy-".len()..]);
        let master = seal::generate_master_key()?;
        let snap = config::demo_with_console(clients, &url, &master, &token)?;
        Ok((Demo { token, _dir: dir }, snap))
    }

    /// The banner's line: the console's URL, which signs in at once (the token rides in the
    /// fragment, which the browser never sends), and the token itself.
    pub fn banner(&self, addr: SocketAddr) -> String {
        format!(
            "switchyard console: http://{addr}/console#token={t} (demo admin token {t}, new at each start)",
            t = self.token
        )
    }

    /// The demo traffic, started in the background: over HTTP to the gateway at `addr`, as
    /// clients would send it.
    pub fn traffic(addr: SocketAddr) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let base = format!("http://{addr}");
            let mut refused = 0;
            for (round, asks) in [ROUND, FAILOVER, ROUND].iter().enumerate() {
                for ask in asks.iter() {
                    if !send(&http, &base, ask).await {
                        refused += 1;
                    }
                    // Spread over a few seconds, so the charts draw a line, not a point.
                    tokio::time::sleep(Duration::from_millis(150 + 50 * round as u64)).await;
                }
            }
            if refused > 0 {
                tracing::warn!(refused, "some demo requests were not answered 200");
            }
        })
    }
}

/// One request: path, the header carrying the key, the body.
struct Ask {
    path: &'static str,
    key_header: &'static str,
    body: fn() -> Value,
}

const ROUND: &[Ask] = &[
    Ask {
        path: "/v1/chat/completions",
        key_header: "authorization",
        body: || json!({"model": "demo", "messages": [{"role": "user", "content": "What does a gateway do?"}]}),
    },
    Ask {
        path: "/v1/chat/completions",
        key_header: "authorization",
        body: || {
            json!({"model": "demo", "stream": true, "stream_options": {"include_usage": true},
                   "messages": [{"role": "user", "content": "Stream me an answer."}]})
        },
    },
    Ask {
        path: "/v1/messages",
        key_header: "x-api-key",
        body: || {
            json!({"model": "demo", "max_tokens": 128, "stream": true,
                   "messages": [{"role": "user", "content": "Hello from an Anthropic client."}]})
        },
    },
    Ask {
        path: "/v1beta/models/demo:generateContent",
        key_header: "x-goog-api-key",
        body: || json!({"contents": [{"role": "user", "parts": [{"text": "Hello from a Gemini client."}]}]}),
    },
    Ask {
        path: "/v1/responses",
        key_header: "authorization",
        body: || json!({"model": "demo", "input": "Hello from a Responses client."}),
    },
    Ask {
        path: "/v1/embeddings",
        key_header: "authorization",
        body: || json!({"model": "demo-embed", "input": "an embedding"}),
    },
];

/// `demo-failover`: refused by `demo-primary`, served by `demo-backup`.
const FAILOVER: &[Ask] = &[Ask {
    path: "/v1/chat/completions",
    key_header: "authorization",
    body: || json!({"model": "demo-failover", "messages": [{"role": "user", "content": "Show me a failover."}]}),
}];

/// Sends `ask` and reads the whole answer (a stream to its end); whether it was a 200.
async fn send(http: &reqwest::Client, base: &str, ask: &Ask) -> bool {
    let key = match ask.key_header {
        "authorization" => format!("Bearer {DEMO_KEY}"),
        _ => DEMO_KEY.to_string(),
    };
    let body = (ask.body)().to_string();
    let sent = http
        .post(format!("{base}{}", ask.path))
        .header(ask.key_header, key)
        .header("content-type", "application/json")
        .header("user-agent", "switchyard-demo-traffic")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(resp) => {
            let ok = resp.status().is_success();
            ok && resp.bytes().await.is_ok()
        }
        Err(e) => {
            tracing::debug!(error = %e, "a demo request failed");
            false
        }
    }
}
