//! What the gateway forwards to an upstream and what it does not: unknown fields go through,
//! gateway fields and client credentials never do; model names are mapped, upstream keys rotate,
//! base URL queries are kept, redirects are not followed, Azure gets its own URLs and header,
//! HTTP/1.1 unless a channel opts into HTTP/2; and `/v1/models` lists what the key may use.

use serde_json::json;
use switchyard::provider::mock::MockSpec;

use crate::support::*;

#[tokio::test]
async fn unknown_fields_reach_the_upstream_and_gateway_fields_do_not() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let body = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi", "future_message_field": 1}],
        "some_future_param": {"nested": [1, 2, 3]},
        "reasoning_effort": "high",
        "logit_bias": {"50256": -100},
        "fallback_models": ["m"],
        "redundancy": {"on": ["timeout"]}
    });
    assert_eq!(gw.chat(body).await.status(), 200);
    let got = &up.received()[0].body;
    assert_eq!(got["some_future_param"], json!({"nested": [1, 2, 3]}));
    assert_eq!(got["reasoning_effort"], "high");
    assert_eq!(got["logit_bias"], json!({"50256": -100}));
    assert_eq!(got["messages"][0]["future_message_field"], 1);
    assert!(got.get("fallback_models").is_none());
    assert!(got.get("redundancy").is_none());
}

#[tokio::test]
async fn mapped_models_use_the_upstream_name() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"up\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         models = [{{ name = \"friendly\", upstream = \"vendor-model-2024-08-06\" }}]\n",
        up.base_url()
    ))
    .await;
    let resp = gw
        .chat(json!({"model": "friendly", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "friendly");
    assert_eq!(
        header(&resp, "x-switchyard-upstream-model"),
        "vendor-model-2024-08-06"
    );
    assert_eq!(up.received()[0].body["model"], "vendor-model-2024-08-06");
    // No api_keys configured: no Authorization header at all (Ollama-style upstream).
    assert!(up.received()[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn client_credentials_and_headers_never_reach_the_upstream() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let resp = client()
        .post(gw.chat_url())
        .bearer_auth(KEY)
        .header("cookie", "session=client-cookie")
        .header("x-custom-secret", "client-secret")
        .header("openai-organization", "org-client")
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.unwrap();
    assert!(!raw.contains(UPSTREAM_KEY));
    let h = &up.received()[0].headers;
    assert_eq!(
        h.get("authorization").unwrap().to_str().unwrap(),
        format!("Bearer {UPSTREAM_KEY}")
    );
    assert!(h.get("cookie").is_none());
    assert!(h.get("x-custom-secret").is_none());
    assert!(h.get("openai-organization").is_none());
    let all: String = h
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("")))
        .collect();
    assert!(!all.contains(KEY), "gateway key leaked upstream: {all}");
}

#[tokio::test]
async fn api_keys_rotate_round_robin() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"up\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         api_keys = [\"sk-one-1111\", \"sk-two-2222\"]\nmodels = [\"m\"]\n",
        up.base_url()
    ))
    .await;
    for _ in 0..4 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let keys: Vec<String> = up
        .received()
        .iter()
        .map(|r| r.headers["authorization"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        keys,
        [
            "Bearer sk-one-1111",
            "Bearer sk-two-2222",
            "Bearer sk-one-1111",
            "Bearer sk-two-2222"
        ]
    );
}

#[tokio::test]
async fn models_lists_what_the_key_can_use() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let resp = client()
        .get(format!("{}/v1/models", gw.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = resp.json().await.unwrap();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e", "m"]);
    // A model whose only channel is disabled is not offered.
    gw.rewrite(&format!(
        "{}[[channels]]\nname = \"off\"\nprovider = \"mock\"\nmodels = [\"hidden\"]\nenabled = false\n",
        openai_channel("up", &up.base_url(), 1, "")
    ));
    let reload = gw.reload().await;
    assert_eq!(reload.status(), 200);
    let v: serde_json::Value = client()
        .get(format!("{}/v1/models", gw.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!v.to_string().contains("hidden"), "{v}");
    assert!(v.to_string().contains("\"m\""), "{v}");
    let resp = client()
        .get(format!("{}/v1/models", gw.url))
        .send()
        .await
        .unwrap();
    error_envelope(resp, 401).await;
}

#[tokio::test]
async fn upstream_http_version_is_1_1_unless_the_channel_opts_into_http2() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("h1", &up.base_url(), 1, ""),
        openai_channel("h2", &up.base_url(), 2, "http2 = true")
    ))
    .await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    // Streams over HTTP/2 too: take h1 out and stream through the h2 channel.
    gw.rewrite(&openai_channel("h2", &up.base_url(), 1, "http2 = true"));
    let reload = gw.reload().await;
    assert_eq!(reload.status(), 200);
    let body = gw.chat(chat_body(true)).await.text().await.unwrap();
    assert_eq!(sse_text(&body), "ok");
    let versions: Vec<_> = up.received().iter().map(|r| r.version).collect();
    assert_eq!(
        versions,
        [reqwest::Version::HTTP_11, reqwest::Version::HTTP_2]
    );
}

#[tokio::test]
async fn an_http2_channel_carries_more_streams_at_once_than_one_connections_default() {
    // hyper serves 200 streams a connection unless told otherwise; the mock lifts that, so
    // `bench/streams.sh` can carry 10,000 streams on one connection.
    let up = mock(MockSpec {
        ttft_ms: 1500,
        ..paced("ok", 1, 0)
    })
    .await;
    let gw = gateway(&openai_channel("h2", &up.base_url(), 1, "http2 = true")).await;
    let streams = (0..300).map(|_| async {
        let resp = gw.chat(chat_body(true)).await;
        (resp.status(), sse_text(&resp.text().await.unwrap()))
    });
    let done = futures_util::future::join_all(streams).await;
    assert!(done.iter().all(|(s, text)| *s == 200 && text == "ok"));
    assert!(up.max_in_flight() > 200, "{}", up.max_in_flight());
    assert!(
        up.received()
            .iter()
            .all(|r| r.version == reqwest::Version::HTTP_2)
    );
}

#[tokio::test]
async fn a_query_in_the_base_url_is_kept() {
    let up = mock(text_spec("ok")).await;
    let base = format!("{}?api-version=2024-10-21", up.base_url());
    let gw = gateway(&openai_channel("q", &base, 1, "")).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert_eq!(
        up.received()[0].uri,
        "/v1/chat/completions?api-version=2024-10-21"
    );
}

#[tokio::test]
async fn upstream_redirects_are_not_followed() {
    let (redirecting, _good, gw) = two_tiers(
        ("redirecting", faulty("x", status(307)), ""),
        ("good", text_spec("ok")),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    // Followed, the 307 would have sent the request (and the upstream key) again.
    assert_eq!(redirecting.requests(), 1);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["switchyard"]["failover"]["attempts"][0]["status"], 307);
}

#[tokio::test]
async fn azure_channels_use_deployment_urls_and_the_api_key_header() {
    let up = mock(text_spec("from azure")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"azure\"\nprovider = \"azure\"\nbase_url = \"http://{}\"\n\
         api_version = \"2024-10-21\"\napi_keys = [\"{UPSTREAM_KEY}\"]\n\
         models = [{{ name = \"m\", upstream = \"gpt4o-deployment\" }}]\n",
        up.addr()
    ))
    .await;
    let v: serde_json::Value = gw.chat(chat_body(false)).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from azure");
    let body = gw.chat(chat_body(true)).await.text().await.unwrap();
    assert_eq!(sse_text(&body), "from azure");
    for r in up.received() {
        assert_eq!(
            r.uri,
            "/openai/deployments/gpt4o-deployment/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(r.headers["api-key"], UPSTREAM_KEY);
        assert!(r.headers.get("authorization").is_none());
    }
    assert_eq!(up.received().len(), 2);
}

/// An OpenAI-compatible answer as a vendor writes it: its own spacing, field order and fields.
const VENDOR_ANSWER: &str = "{\"id\": \"c-9\", \"object\": \"chat.completion\", \"created\": 7, \"model\": \"up-model\", \"system_fingerprint\": \"fp_1\", \"service_tier\": \"default\",\n \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"Hello \\u00e9\", \"refusal\": null, \"annotations\": []}, \"logprobs\": null, \"finish_reason\": \"stop\"}],\n \"usage\": {\"prompt_tokens\": 11, \"completion_tokens\": 3, \"total_tokens\": 14, \"prompt_tokens_details\": {\"cached_tokens\": 2, \"audio_tokens\": 0}}}";

#[tokio::test]
async fn a_chat_client_gets_the_upstreams_answer_byte_for_byte() {
    let addr = canned_bytes("", VENDOR_ANSWER).await;
    let gw = gateway(&openai_channel("up", &format!("http://{addr}/v1"), 1, "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "application/json");
    assert_eq!(resp.text().await.unwrap(), VENDOR_ANSWER);
    // Read all the same: the log has the usage.
    gw.flush_log().await;
    let row = &gw.admin_requests().await[0];
    assert_eq!(
        (&row["input_tokens"], &row["output_tokens"]),
        (&json!(11), &json!(3))
    );
}

#[tokio::test]
async fn a_passed_answer_after_a_failover_gains_only_the_report() {
    let bad = mock(faulty("x", status(500))).await;
    let addr = canned_bytes("", VENDOR_ANSWER).await;
    let channels = format!(
        "{}{}",
        openai_channel("bad", &bad.base_url(), 1, ""),
        openai_channel("good", &format!("http://{addr}/v1"), 2, "")
    );
    let gw = gateway(&channels).await;
    let mut got: serde_json::Value = gw.chat(chat_body(false)).await.json().await.unwrap();
    let report = got.as_object_mut().unwrap().remove("switchyard").unwrap();
    assert_eq!(
        report["failover"]["attempts"][0]["channel"], "bad",
        "{report}"
    );
    assert_eq!(report["served_channel"], "good");
    let want: serde_json::Value = serde_json::from_str(VENDOR_ANSWER).unwrap();
    assert_eq!(got, want);
}

#[tokio::test]
async fn an_answer_the_scan_does_not_model_is_read_whole_and_still_answered() {
    // A tool call: read into the canonical form and written from it (fields kept).
    let answer = "{\"id\":\"c-2\",\"object\":\"chat.completion\",\"created\":7,\"model\":\"up-model\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}";
    let addr = canned_bytes("", answer).await;
    let gw = gateway(&openai_channel("up", &format!("http://{addr}/v1"), 1, "")).await;
    let got: serde_json::Value = gw.chat(chat_body(false)).await.json().await.unwrap();
    let call = &got["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "f", "{got}");
    assert_eq!(got["usage"]["total_tokens"], 6);
    // And a body that is not a chat completion at all is still the upstream's fault.
    let addr = canned_bytes("", "{\"choices\": \"nope\"}").await;
    let gw = gateway(&openai_channel("up", &format!("http://{addr}/v1"), 1, "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 502, "{}", resp.text().await.unwrap());
}
