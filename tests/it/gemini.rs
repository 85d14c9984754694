//! Gemini clients (`/v1beta/models/{model}:generateContent` / `:streamGenerateContent`) and
//! `gemini` channels, and failover across all three protocols.

use serde_json::{Value, json};
use switchyard::provider::mock::{MockSpec, MockToolCall};

use crate::support::*;

fn gemini_channel(name: &str, addr: std::net::SocketAddr, prio: u32) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"gemini\"\nbase_url = \"http://{addr}/v1beta\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\npriority = {prio}\n\n"
    )
}

async fn generate(gw: &Gateway, stream: bool, body: Value, auth: &str) -> reqwest::Response {
    let action = if stream {
        "streamGenerateContent?alt=sse&"
    } else {
        "generateContent?"
    };
    client()
        .post(format!("{}/v1beta/models/m:{action}{auth}", gw.url))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn ask() -> Value {
    json!({"systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "Hello"}]}]})
}

fn events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test]
async fn a_gemini_client_is_answered_by_an_openai_channel() {
    let up = mock(text_spec("Hi there")).await;
    let gw = gateway(&openai_channel("gpt", &up.base_url(), 1, "")).await;
    let key = format!("key={KEY}");
    let v: Value = generate(&gw, false, ask(), &key)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "Hi there"
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert!(v["usageMetadata"]["promptTokenCount"].as_u64().unwrap() > 0);
    assert_eq!(
        up.received()[0].body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    // Streamed, and with the key in the x-goog-api-key header instead.
    let resp = client()
        .post(format!(
            "{}/v1beta/models/m:streamGenerateContent?alt=sse",
            gw.url
        ))
        .header("x-goog-api-key", KEY)
        .json(&ask())
        .send()
        .await
        .unwrap();
    let evs = events(&resp.text().await.unwrap());
    let text: String = evs
        .iter()
        .flat_map(|e| {
            e["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "Hi there");
    assert_eq!(evs.last().unwrap()["candidates"][0]["finishReason"], "STOP");
    // Errors in Gemini's envelope.
    let resp = generate(&gw, false, ask(), "key=sk-wrong").await;
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(e["error"]["code"], 401);
}

#[tokio::test]
async fn a_streamed_tool_call_reaches_a_gemini_client_whole() {
    let up = mock(MockSpec {
        chunks: 4,
        tool_call: Some(MockToolCall {
            name: "weather".into(),
            arguments: r#"{"city": "Paris"}"#.into(),
        }),
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&openai_channel("gpt", &up.base_url(), 1, "")).await;
    let mut body = ask();
    body["tools"] =
        json!([{"functionDeclarations": [{"name": "weather", "parameters": {"type": "object"}}]}]);
    let evs = events(
        &generate(&gw, true, body, &format!("key={KEY}"))
            .await
            .text()
            .await
            .unwrap(),
    );
    let calls: Vec<&Value> = evs
        .iter()
        .flat_map(|e| {
            e["candidates"][0]["content"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(|p| p.get("functionCall"))
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["name"], "weather");
    assert_eq!(calls[0]["args"], json!({"city": "Paris"}));
    assert_eq!(
        up.received()[0].body["tools"][0]["function"]["name"],
        "weather"
    );
}

#[tokio::test]
async fn an_openai_client_is_served_by_a_gemini_channel() {
    let up = mock(text_spec("from gemini")).await;
    let gw = gateway(&gemini_channel("gem", up.addr(), 1)).await;
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]});
    let v: Value = gw.chat(body.clone()).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from gemini");
    let mut stream = body;
    stream["stream"] = true.into();
    let text = gw.chat(stream).await.text().await.unwrap();
    assert_eq!(sse_text(&text), "from gemini");
    assert!(text.ends_with("data: [DONE]\n\n"));
    let got = &up.received()[0];
    assert_eq!(got.uri, "/v1beta/models/m:generateContent");
    assert_eq!(
        got.body["systemInstruction"]["parts"][0]["text"],
        "Be brief."
    );
    assert_eq!(
        got.body["contents"][0],
        json!({"role": "user", "parts": [{"text": "Hi"}]})
    );
    assert_eq!(got.headers["x-goog-api-key"], UPSTREAM_KEY);
    assert_eq!(
        up.received()[1].uri,
        "/v1beta/models/m:streamGenerateContent?alt=sse"
    );
}

#[tokio::test]
async fn an_anthropic_client_fails_over_from_openai_to_gemini_with_the_stream_intact() {
    let openai = mock(faulty("x", status(503))).await;
    let gem = mock(text_spec("Gemini took over")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("gpt", &openai.base_url(), 1, ""),
        gemini_channel("gem", gem.addr(), 2)
    ))
    .await;
    let resp = client()
        .post(format!("{}/v1/messages", gw.url))
        .header("x-api-key", KEY)
        .json(&json!({"model": "m", "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "Hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&resp, "x-switchyard-channel"), "gem");
    let body = resp.text().await.unwrap();
    let text: String = body
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "Gemini took over");
    assert!(body.contains("event: message_stop"));
    assert_eq!(openai.requests(), 1);
}

/// What a real Gemini thinking model streams: thought summaries and a `thoughtSignature` the
/// next turn must send back; spacing as sent, so byte equality shows nothing was re-encoded.
const SIGNED_STREAM: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Thinking it over.\", \"thought\": true}], \"role\": \"model\"}, \"index\": 0}], \"modelVersion\": \"gemini-up\"}\n\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"42.\", \"thoughtSignature\": \"CiQBVKhc7z\"}], \"role\": \"model\"}, \"finishReason\": \"STOP\", \"index\": 0}], \"usageMetadata\": {\"promptTokenCount\": 5, \"candidatesTokenCount\": 2, \"thoughtsTokenCount\": 7, \"totalTokenCount\": 14}, \"modelVersion\": \"gemini-up\"}\n\n";

fn signed_answer() -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Thinking it over.", "thought": true},
            {"text": "42.", "thoughtSignature": "CiQBVKhc7z"}]},
        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 14},
        "modelVersion": "gemini-up", "responseId": "r-1"})
}

#[tokio::test]
async fn same_protocol_answers_pass_through_with_thought_signatures() {
    let addr = canned_upstream(SIGNED_STREAM, signed_answer()).await;
    let gw = gateway(&gemini_channel("gem", addr, 1)).await;

    let resp = generate(&gw, true, ask(), &format!("key={KEY}")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    // The upstream's bytes, but for the stream's cost (nothing: no price) as the last member of
    // the event with the usage.
    let (head, tail) = SIGNED_STREAM.rsplit_once(r#""gemini-up"}"#).unwrap();
    let want = format!(r#"{head}"gemini-up","switchyard":{{"cost_micros":0}}}}{tail}"#);
    assert_eq!(resp.text().await.unwrap(), want);

    let resp = generate(&gw, false, ask(), &format!("key={KEY}")).await;
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    assert_eq!(resp.json::<Value>().await.unwrap(), signed_answer());

    // An OpenAI client of the same upstream still gets the translation: thought as reasoning.
    let text = gw.chat(chat_body(true)).await.text().await.unwrap();
    assert_eq!(sse_text(&text), "42.");
    assert!(text.contains("Thinking it over."), "{text}");
}

#[tokio::test]
async fn a_gemini_cli_json_mode_request_is_served_across_protocols_with_its_schema() {
    let up = mock(text_spec("{\"a\": \"b\"}")).await;
    let gw = gateway(&openai_channel("gpt", &up.base_url(), 1, "")).await;
    // Gemini CLI's JSON-mode call: an empty declarations list and a response schema.
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "next speaker?"}]}],
        "tools": [{"functionDeclarations": []}],
        "generationConfig": {"temperature": 0, "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}}}});
    let key = format!("key={KEY}");
    let resp = generate(&gw, false, body, &key).await;
    assert_eq!(resp.status(), 200);
    // The schema crosses as OpenAI's response_format (Gemini's upper-case types as JSON
    // Schema's); nothing stayed behind.
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    let got = &up.received()[0].body;
    assert_eq!(got["temperature"], 0);
    assert_eq!(
        got["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "response",
            "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}})
    );
    assert!(got.get("tools").is_none(), "{got}");
    assert!(got.to_string().find("generationConfig").is_none(), "{got}");
    // A setting with no counterpart is named as what stayed behind.
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"topK": 3}});
    let resp = generate(&gw, false, body, &key).await;
    let t = header(&resp, "x-switchyard-translation").to_string();
    assert!(t.contains("generationConfig.topK"), "{t}");
}

/// A Gemini upstream that streams one piece of text, then fails with its own error event.
const FAILING_STREAM: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Half\"}], \"role\": \"model\"}, \"index\": 0}]}\n\n\
data: {\"error\": {\"code\": 503, \"message\": \"upstream overloaded\", \"status\": \"UNAVAILABLE\"}}\n\n";

#[tokio::test]
async fn a_gemini_upstreams_own_error_after_commit_is_the_only_error_a_gemini_client_sees() {
    let addr = canned_upstream(FAILING_STREAM, signed_answer()).await;
    let gw = gateway(&gemini_channel("gem", addr, 1)).await;
    let resp = generate(&gw, true, ask(), &format!("key={KEY}")).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let errors: Vec<Value> = sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v.get("error").is_some())
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert_eq!(errors[0]["error"]["message"], "upstream overloaded");
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["outcome"], "stream_server_error");
}

#[tokio::test]
async fn a_gemini_request_refused_before_its_body_is_read_is_logged_with_its_model() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_with(
        "max_body_bytes = 64",
        &openai_channel("gpt", &up.base_url(), 1, ""),
    )
    .await;
    let big = json!({"contents": [{"role": "user", "parts": [{"text": "x".repeat(200)}]}]});
    let resp = generate(&gw, true, big, &format!("key={KEY}")).await;
    assert_eq!(resp.status(), 413);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["status"],
        "INVALID_ARGUMENT"
    );
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["requested_model"], "m");
    assert_eq!(rows[0]["stream"], true);
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn a_schema_other_protocols_cannot_take_stays_behind_and_is_named() {
    let up = mock(text_spec("B")).await;
    let gw = gateway(&openai_channel("gpt", &up.base_url(), 1, "")).await;
    // An enum of text: Gemini's own mode, with no counterpart in OpenAI's response_format.
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "A or B?"}]}],
        "generationConfig": {"responseMimeType": "text/x.enum",
            "responseSchema": {"type": "STRING", "enum": ["A", "B"]}}});
    let resp = generate(&gw, false, body, &format!("key={KEY}")).await;
    assert_eq!(resp.status(), 200);
    let t = header(&resp, "x-switchyard-translation").to_string();
    assert!(t.contains("generationConfig.responseSchema"), "{t}");
    assert!(up.received()[0].body.get("response_format").is_none());
}
