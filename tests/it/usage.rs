//! Token usage reaches every client complete in its own protocol, whichever upstream counted
//! it: OpenAI's SDK users sum `prompt_tokens` and `completion_tokens` and read the details
//! objects; Anthropic's and Gemini's read theirs.

use serde_json::{Value, json};

use crate::support::*;

/// One upstream of each kind, in front of the same mock, one model each.
fn channel(kind: &str, base: &str) -> String {
    let base = match kind {
        "gemini" => base.replace("/v1", "/v1beta"),
        _ => base.to_string(),
    };
    format!(
        "[[channels]]\nname = \"{kind}\"\nprovider = \"{kind}\"\nbase_url = \"{base}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"via-{kind}\"]\n\n"
    )
}

/// A request for `model` in the client's protocol: (path, body).
fn request(client: &str, model: &str) -> (String, Value) {
    let user = json!([{"role": "user", "content": "Count to three."}]);
    match client {
        "openai" => (
            "/v1/chat/completions".into(),
            json!({"model": model, "messages": user}),
        ),
        "responses" => (
            "/v1/responses".into(),
            json!({"model": model, "input": "Count to three."}),
        ),
        "anthropic" => (
            "/v1/messages".into(),
            json!({"model": model, "max_tokens": 50, "messages": user}),
        ),
        _ => (
            format!("/v1beta/models/{model}:generateContent"),
            json!({"contents": [{"role": "user", "parts": [{"text": "Count to three."}]}]}),
        ),
    }
}

fn count(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} is not a count in {v}"))
}

/// Every field the client's protocol has, as a number; the total is the sum.
fn assert_complete(client: &str, v: &Value) {
    match client {
        "openai" => {
            let (p, c) = (
                count(v, "/usage/prompt_tokens"),
                count(v, "/usage/completion_tokens"),
            );
            assert_eq!(count(v, "/usage/total_tokens"), p + c, "{v}");
            count(v, "/usage/prompt_tokens_details/cached_tokens");
            count(v, "/usage/completion_tokens_details/reasoning_tokens");
        }
        "responses" => {
            let (i, o) = (
                count(v, "/usage/input_tokens"),
                count(v, "/usage/output_tokens"),
            );
            assert_eq!(count(v, "/usage/total_tokens"), i + o, "{v}");
            count(v, "/usage/input_tokens_details/cached_tokens");
            count(v, "/usage/output_tokens_details/reasoning_tokens");
        }
        "anthropic" => {
            count(v, "/usage/input_tokens");
            count(v, "/usage/output_tokens");
            count(v, "/usage/cache_creation_input_tokens");
            count(v, "/usage/cache_read_input_tokens");
        }
        _ => {
            let (p, c) = (
                count(v, "/usageMetadata/promptTokenCount"),
                count(v, "/usageMetadata/candidatesTokenCount"),
            );
            assert_eq!(count(v, "/usageMetadata/totalTokenCount"), p + c, "{v}");
        }
    }
}

#[tokio::test]
async fn translated_usage_is_complete_in_every_client_protocol() {
    let up = mock(text_spec("one two three")).await;
    let kinds = ["openai", "anthropic", "gemini"];
    let channels: String = kinds.iter().map(|k| channel(k, &up.base_url())).collect();
    let gw = gateway(&channels).await;
    for client in ["openai", "responses", "anthropic", "gemini"] {
        for kind in kinds {
            // The same protocol both sides is the upstream's own body, not a translation.
            if client == kind {
                continue;
            }
            let (path, body) = request(client, &format!("via-{kind}"));
            let resp = gw.post_as(&path, KEY, &[], body).await;
            assert_eq!(resp.status(), 200, "{client} via {kind}");
            assert_eq!(header(&resp, "x-switchyard-channel"), kind);
            let v: Value = resp.json().await.unwrap();
            assert_complete(client, &v);
        }
    }
}

#[tokio::test]
async fn a_streamed_usage_chunk_is_complete_for_an_openai_client() {
    let up = mock(text_spec("one two three")).await;
    let channels: String = ["anthropic", "gemini"]
        .iter()
        .map(|k| channel(k, &up.base_url()))
        .collect();
    let gw = gateway(&channels).await;
    for kind in ["anthropic", "gemini"] {
        let body = json!({"model": format!("via-{kind}"), "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "Count to three."}]});
        let text = gw.chat(body).await.text().await.unwrap();
        let usage = sse_data(&text)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|c| c["usage"].is_object())
            .unwrap_or_else(|| panic!("{kind}: no usage chunk in {text}"));
        assert_complete("openai", &usage);
    }
}

/// A request's charge is readable within a second of its answer, with no flush forced: the
/// log writer's tick, not a test hook, puts it there.
#[tokio::test]
async fn a_charge_is_readable_within_a_second_of_the_answer() {
    let up = mock(text_spec("priced words")).await;
    let gw = gateway_full(
        "",
        "",
        &openai_channel("a", &up.base_url(), 1, "price = { input = 1, output = 1 }"),
    )
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-request-id").to_string();
    let answered = std::time::Instant::now();
    let url = format!("{}/admin/usage/requests/{id}", gw.url);
    until(
        "the charge is readable",
        std::time::Duration::from_secs(1),
        async || {
            client()
                .get(&url)
                .bearer_auth(ADMIN)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    assert!(answered.elapsed() < std::time::Duration::from_secs(1));
    let v = get_json(&url, Some(ADMIN)).await;
    assert!(v["cost_micros"].as_u64().unwrap_or(0) > 0, "{v}");
}
