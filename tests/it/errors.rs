//! The client's mistakes and the gateway's exhaustion: every error is in the client's own
//! protocol's envelope with the right status and code (and, exhausted, the attempts), never a
//! panic and never a 5xx for the client's own mistake.

use serde_json::json;

use crate::support::*;

async fn one_good_channel() -> (switchyard::provider::mock::MockServer, Gateway) {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_with(
        "max_body_bytes = 2048",
        &openai_channel("up", &up.base_url(), 1, ""),
    )
    .await;
    (up, gw)
}

#[tokio::test]
async fn missing_or_wrong_keys_are_401() {
    let (up, gw) = one_good_channel().await;
    let c = client();
    let resp = c
        .post(gw.chat_url())
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    let e = error_envelope(resp, 401).await;
    assert_eq!(e["code"], "invalid_api_key");
    let resp = c
        .post(gw.chat_url())
        .bearer_auth("sk-wrong")
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    error_envelope(resp, 401).await;
    // x-api-key works as well as Bearer, also beside an Authorization of another scheme.
    let resp = c
        .post(gw.chat_url())
        .header("x-api-key", KEY)
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = c
        .post(gw.chat_url())
        .header("authorization", "Basic cHJveHk6cHc=")
        .header("x-api-key", KEY)
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "x-request-id").starts_with("req_"));
    assert_eq!(up.requests(), 2);
}

#[tokio::test]
async fn malformed_bodies_are_400_with_the_param() {
    let (up, gw) = one_good_channel().await;
    let c = client();
    let resp = c
        .post(gw.chat_url())
        .bearer_auth(KEY)
        .body("{\"model\": \"m\", \"messages\": [")
        .send()
        .await
        .unwrap();
    let e = error_envelope(resp, 400).await;
    assert_eq!(e["code"], "invalid_json");

    let cases = [
        (json!({"model": 42, "messages": []}), "model"),
        (json!({"model": "m", "messages": "hi"}), "messages"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 1}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            "temperature",
        ),
    ];
    for (body, param) in cases {
        let resp = c
            .post(gw.chat_url())
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        let e = error_envelope(resp, 400).await;
        assert_eq!(e["param"], param, "{body}");
        assert_eq!(e["type"], "invalid_request_error");
    }
    let resp = c
        .post(gw.chat_url())
        .bearer_auth(KEY)
        .json(&json!([1, 2]))
        .send()
        .await
        .unwrap();
    error_envelope(resp, 400).await;
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_even_without_content_length() {
    let (up, gw) = one_good_channel().await;
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let resp = gw.chat(big.clone()).await;
    assert!(header(&resp, "x-request-id").starts_with("req_"));
    let e = error_envelope(resp, 413).await;
    assert_eq!(e["code"], "request_too_large");
    // Chunked upload: no Content-Length to check up front.
    let bytes = serde_json::to_vec(&big).unwrap();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(512).map(|c| Ok(c.to_vec())).collect();
    let resp = client()
        .post(gw.chat_url())
        .bearer_auth(KEY)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    error_envelope(resp, 413).await;
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn unknown_model_is_404_and_unknown_routes_are_enveloped() {
    let (_up, gw) = one_good_channel().await;
    let resp = gw
        .chat(json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    let e = error_envelope(resp, 404).await;
    assert_eq!(e["code"], "model_not_found");
    let resp = client()
        .get(format!("{}/v1/nothing", gw.url))
        .send()
        .await
        .unwrap();
    error_envelope(resp, 404).await;
    let resp = client().get(gw.chat_url()).send().await.unwrap();
    error_envelope(resp, 405).await;
}

#[tokio::test]
async fn no_enabled_channel_is_503() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("off", &up.base_url(), 1, "enabled = false")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 503).await;
    assert_eq!(e["code"], "no_available_channel");
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn all_failed_is_502_listing_attempts_without_upstream_text() {
    let a = mock(faulty("x", status(500))).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("a", &a.base_url(), 1, ""),
        openai_channel("dead", &refused_url().await, 2, "")
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let raw = resp.text().await.unwrap();
    assert!(!raw.contains("mock fault"), "upstream text leaked: {raw}");
    assert!(!raw.contains(UPSTREAM_KEY));
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["error"]["code"], "all_attempts_failed");
    let attempts = v["error"]["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["channel"], "a");
    assert_eq!(attempts[0]["model"], "m");
    assert_eq!(attempts[0]["status"], 500);
    assert_eq!(attempts[0]["reason"], "server_error");
    assert_eq!(attempts[1]["reason"], "connection_error");
}

/// Where each client protocol's envelope puts the code and the attempts.
fn code_and_attempts(protocol: &str, v: &serde_json::Value) -> (String, serde_json::Value) {
    let e = &v["error"];
    match protocol {
        "gemini" => {
            let details = e["details"].as_array().cloned().unwrap_or_default();
            let of = |t: &str| details.iter().find(|d| d["@type"] == t).cloned();
            let info = of("type.googleapis.com/google.rpc.ErrorInfo").unwrap_or_default();
            let attempts = of("type.googleapis.com/switchyard.v1.Attempts").unwrap_or_default();
            (
                info["reason"].as_str().unwrap_or("").into(),
                attempts["attempts"].clone(),
            )
        }
        _ => (
            e["code"].as_str().unwrap_or("").into(),
            e["attempts"].clone(),
        ),
    }
}

#[tokio::test]
async fn exhausted_errors_list_their_attempts_and_code_in_every_envelope() {
    let a = mock(faulty("x", status(500))).await;
    // Circuits off: every request of the table meets both channels.
    let off = "circuit_breaker = { enabled = false }";
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("a", &a.base_url(), 1, off),
        openai_channel("dead", &refused_url().await, 2, off)
    ))
    .await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            "openai",
            "/v1/chat/completions",
            json!({"model": "m", "messages": user}),
        ),
        (
            "responses",
            "/v1/responses",
            json!({"model": "m", "input": "hi"}),
        ),
        (
            "anthropic",
            "/v1/messages",
            json!({"model": "m", "max_tokens": 5, "messages": user}),
        ),
        (
            "gemini",
            "/v1beta/models/m:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        ),
    ];
    for (protocol, path, body) in cases {
        let resp = gw.post_as(path, KEY, &[], body).await;
        assert_eq!(resp.status(), 502, "{protocol}");
        assert_eq!(header(&resp, "x-should-retry"), "false", "{protocol}");
        let raw = resp.text().await.unwrap();
        assert!(
            !raw.contains("mock fault"),
            "{protocol}: upstream text leaked: {raw}"
        );
        let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let (code, attempts) = code_and_attempts(protocol, &v);
        assert_eq!(code, "all_attempts_failed", "{protocol}: {v}");
        assert_eq!(
            reasons(&attempts),
            ["server_error", "connection_error"],
            "{protocol}: {v}"
        );
        assert_eq!(attempts[0]["channel"], "a", "{protocol}");
        assert_eq!(attempts[0]["status"], 500, "{protocol}");
        // Each still reads as its own protocol's error.
        match protocol {
            "anthropic" => assert_eq!(v["type"], "error"),
            "gemini" => assert_eq!(v["error"]["code"], 502),
            _ => assert!(v["error"]["message"].is_string()),
        }
    }
}

#[tokio::test]
async fn streaming_requests_get_json_errors_before_commit() {
    let a = mock(faulty("x", status(500))).await;
    let gw = gateway(&openai_channel("a", &a.base_url(), 1, "")).await;
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(header(&resp, "content-type"), "application/json");
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["attempts"][0]["reason"], "server_error");
}

#[tokio::test]
async fn a_body_that_trickles_past_the_deadline_is_408() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_with(
        "request_timeout_ms = 300",
        &openai_channel(
            "up",
            &up.base_url(),
            1,
            "timeout_ms = 300\nfirst_token_timeout_ms = 300\nconnect_timeout_ms = 100",
        ),
    )
    .await;
    let body = futures_util::stream::unfold(0, |i| async move {
        if i == 3 {
            return None;
        }
        // Not a wait: the pace of the slow client under test (a byte every 200 ms, the whole
        // body well past the 300 ms deadline), which the gateway must cut off.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Some((Ok::<_, std::io::Error>(b" ".to_vec()), i + 1))
    });
    let resp = client()
        .post(gw.chat_url())
        .bearer_auth(KEY)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    let e = error_envelope(resp, 408).await;
    assert_eq!(e["code"], "request_body_timeout");
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn an_anthropic_overflow_reaches_an_anthropic_client_in_the_words_claude_code_reads() {
    // Anthropic's second way of saying it: the prompt fits, but not with the reply's budget.
    let overflow = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}});
    let addr = answering(400, overflow).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"claude\"\nprovider = \"anthropic\"\nbase_url = \"http://{addr}/v1\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\n"
    ))
    .await;
    let body =
        json!({"model": "m", "max_tokens": 21333, "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.post_as("/v1/messages", KEY, &[], body).await;
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("prompt is too long: input length"), "{m}");
    // Any other rejection of an Anthropic upstream goes back to an Anthropic client as it came.
    let addr = answering(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool"}}),
    )
    .await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"claude\"\nprovider = \"anthropic\"\nbase_url = \"http://{addr}/v1\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\n"
    ))
    .await;
    let body =
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let v: serde_json::Value = gw
        .post_as("/v1/messages", KEY, &[], body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool"}})
    );
}
