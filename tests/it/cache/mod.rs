//! The response cache: `exact` (hits in every protocol, what misses, scopes, budgets, the
//! admin API), `shared` (Redis shared by replicas and Redis in trouble, per-key and per-model
//! policies, hits charged for resellers), `semantic` (paraphrases answered, near-misses not,
//! with the local MiniLM embedder, and `cache eval`). The helpers here are theirs.

mod exact;
mod semantic;
mod shared;

use serde_json::{Value, json};

use crate::support::*;

pub const CACHE: &str = "[cache]\nenabled = true\n";

/// A mock answering `text` behind a gateway with the cache on, serving `m`.
pub async fn cached_gateway(text: &str) -> (switchyard::provider::mock::MockServer, Gateway) {
    let up = mock(text_spec(text)).await;
    let channels = models_channel("a", &up.base_url(), &["m"], "");
    let gw = gateway(&format!("{CACHE}\n{channels}")).await;
    (up, gw)
}

pub fn question(extra: Value) -> Value {
    let mut v = json!({"model": "m", "messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is the capital of Australia?"}]});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// `POST /v1/chat/completions` as `key` with `headers`: status, the cache header, `age`, body.
pub async fn chat_as(
    gw: &Gateway,
    key: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, String, String, String) {
    let r = gw.post_as("/v1/chat/completions", key, headers, body).await;
    let out = (
        r.status().as_u16(),
        header(&r, "x-switchyard-cache").to_string(),
        header(&r, "age").to_string(),
    );
    (out.0, out.1, out.2, r.text().await.unwrap())
}

/// What the cache said of `body` sent as `key`.
pub async fn said(gw: &Gateway, key: &str, body: Value) -> String {
    chat_as(gw, key, &[], body).await.1
}

pub fn text_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A priced channel behind a cached gateway whose key has `budget = { usd }`, with `extra` in
/// `[cache]`.
pub async fn priced_gateway(
    usd: &str,
    extra: &str,
) -> (switchyard::provider::mock::MockServer, Gateway) {
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway_full(
        "",
        &format!("budget = {{ usd = {usd} }}"),
        &format!(
            "{CACHE}{extra}\n{}",
            models_channel(
                "a",
                &up.base_url(),
                &["m"],
                "price = { input = 2000, output = 8000 }"
            )
        ),
    )
    .await;
    (up, gw)
}

/// The usage row of channel `name` (`cache` for hits), by `GET /admin/usage?group_by=channel`.
pub async fn usage_row(gw: &Gateway, name: &str) -> Value {
    gw.flush_log().await;
    let usage = get_json(
        &format!("{}/admin/usage?group_by=channel", gw.url),
        Some(ADMIN),
    )
    .await;
    usage["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["channel"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} row: {usage}"))
}
