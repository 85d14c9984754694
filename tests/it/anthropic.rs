//! Anthropic Messages clients (`POST /v1/messages`) served by OpenAI-protocol channels: the
//! request, the answer, streams, tool calls and errors, each in Anthropic's own shapes.

use serde_json::{Value, json};
use switchyard::provider::mock::{MockSpec, MockToolCall};

use crate::support::*;

async fn messages(gw: &Gateway, body: Value) -> reqwest::Response {
    client()
        .post(format!("{}/v1/messages", gw.url))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn ask(stream: bool) -> Value {
    json!({"model": "m", "max_tokens": 256, "stream": stream, "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hello"}]})
}

/// `event:` names and `data:` payloads of an Anthropic SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|ev| {
            let mut name = None;
            let mut data = None;
            for line in ev.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                }
                if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).ok();
                }
            }
            Some((name?, data?))
        })
        .collect()
}

#[tokio::test]
async fn a_message_is_answered_as_anthropic_by_an_openai_channel() {
    let up = mock(text_spec("Hi there")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let resp = messages(&gw, ask(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "up");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["content"][0], json!({"type": "text", "text": "Hi there"}));
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // The upstream got OpenAI: the system prompt as the first message.
    let sent = &up.received()[0].body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(sent["max_tokens"], 256);
}

#[tokio::test]
async fn a_streamed_tool_call_arrives_as_anthropic_events() {
    let up = mock(MockSpec {
        chunks: 3,
        tool_call: Some(MockToolCall {
            name: "read_file".into(),
            arguments: r#"{"path": "src/main.rs"}"#.into(),
        }),
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let mut body = ask(true);
    body["tools"] = json!([{"name": "read_file", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let resp = messages(&gw, body).await;
    assert_eq!(header(&resp, "content-type"), "text/event-stream");
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let start = evs
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(start.1["content_block"]["name"], "read_file");
    assert_eq!(start.1["content_block"]["id"], "call_mock_0");
    let json: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(json, r#"{"path": "src/main.rs"}"#);
    let delta = &evs[evs.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 3);
    // The tool definition reached the upstream as an OpenAI function.
    let sent = &up.received()[0].body;
    assert_eq!(sent["tools"][0]["function"]["name"], "read_file");
}

#[tokio::test]
async fn failover_before_the_first_token_is_invisible_and_a_cut_is_an_error_event() {
    let (_bad, _good, gw) = two_tiers(
        ("bad", faulty("x", status(500)), ""),
        ("good", text_spec("from the backup")),
    )
    .await;
    let resp = messages(&gw, ask(true)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    let evs = events(&resp.text().await.unwrap());
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "from the backup");
    assert_eq!(evs.last().unwrap().0, "message_stop");

    let cut = mock(after_chunks(1, true)).await;
    let gw = gateway(&openai_channel("cut", &cut.base_url(), 1, "")).await;
    let evs = events(&messages(&gw, ask(true)).await.text().await.unwrap());
    let (name, data) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["type"], "error");
    assert!(!evs.iter().any(|(n, _)| n == "message_stop"));
}

#[tokio::test]
async fn errors_use_the_anthropic_envelope() {
    let picky = mock(faulty("x", status(400))).await;
    let gw = gateway(&openai_channel("picky", &picky.base_url(), 1, "")).await;
    let check = |v: &Value, kind: &str| {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    };
    let resp = client()
        .post(format!("{}/v1/messages", gw.url))
        .header("x-api-key", "sk-wrong")
        .json(&ask(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    check(&resp.json().await.unwrap(), "authentication_error");
    let resp = messages(
        &gw,
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    check(&resp.json().await.unwrap(), "invalid_request_error");
    let resp = messages(
        &gw,
        json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(resp.status(), 404);
    check(&resp.json().await.unwrap(), "not_found_error");
    // The upstream's own 400 comes back in the client's envelope, with the upstream's message.
    let resp = messages(&gw, ask(false)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    check(&v, "invalid_request_error");
    assert_eq!(v["error"]["message"], "mock fault: HTTP 400");
}

/// A channel of provider kind `anthropic` in front of a mock.
fn anthropic_channel(name: &str, base: &str, prio: u32) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"anthropic\"\nbase_url = \"{base}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\npriority = {prio}\n\n"
    )
}

#[tokio::test]
async fn an_anthropic_base_url_is_taken_as_the_sdk_writes_it_or_with_v1() {
    let up = mock(text_spec("ok")).await;
    // Anthropic's SDKs take `https://api.anthropic.com` (no `/v1`); OpenAI-style configs add it.
    let root = up.base_url().trim_end_matches("/v1").to_string();
    let gw = gateway(&format!(
        "{}{}",
        anthropic_channel("sdk-style", &root, 1),
        anthropic_channel("v1-style", &up.base_url(), 2)
    ))
    .await;
    let resp = gw
        .chat(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-switchyard-channel"], "sdk-style");
    assert_eq!(up.received()[0].uri, "/v1/messages");
}

#[tokio::test]
async fn an_openai_client_is_served_by_an_anthropic_channel() {
    let up = mock(MockSpec {
        chunks: 3,
        tool_call: Some(MockToolCall {
            name: "read_file".into(),
            arguments: r#"{"path": "a.rs"}"#.into(),
        }),
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&anthropic_channel("claude", &up.base_url(), 1)).await;
    let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Open a.rs"}],
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]});
    let v: Value = gw.chat(body.clone()).await.json().await.unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read_file");
    assert_eq!(call["function"]["arguments"], r#"{"path":"a.rs"}"#);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    // The upstream got Anthropic: top-level system, max_tokens, input_schema, its headers.
    let got = &up.received()[0];
    assert_eq!(got.uri, "/v1/messages");
    assert_eq!(got.body["system"], "Be brief.");
    assert_eq!(
        got.body["messages"][0],
        json!({"role": "user", "content": [{"type": "text", "text": "Open a.rs"}]})
    );
    assert_eq!(
        got.body["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    assert!(got.body["max_tokens"].as_u64().is_some());
    assert_eq!(got.headers["x-api-key"], UPSTREAM_KEY);
    assert_eq!(got.headers["anthropic-version"], "2023-06-01");
    assert!(got.headers.get("authorization").is_none());

    // Streamed: the tool call arrives as OpenAI tool-call deltas.
    let mut stream_body = body;
    stream_body["stream"] = true.into();
    let text = gw.chat(stream_body).await.text().await.unwrap();
    let mut args = String::new();
    for d in sse_data(&text) {
        if let Ok(v) = serde_json::from_str::<Value>(&d) {
            for c in v["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                args.push_str(c["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
    }
    assert_eq!(args, r#"{"path": "a.rs"}"#);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
}

#[tokio::test]
async fn an_anthropic_client_round_trips_through_an_anthropic_channel() {
    let up = mock(text_spec("straight through")).await;
    let gw = gateway(&anthropic_channel("claude", &up.base_url(), 1)).await;
    let mut body = ask(true);
    body["metadata"] = json!({"user_id": "u-1"});
    let evs = events(&messages(&gw, body).await.text().await.unwrap());
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "straight through");
    assert_eq!(evs.last().unwrap().0, "message_stop");
    // Same protocol: the client's own Anthropic fields reach the Anthropic upstream.
    assert_eq!(up.received()[0].body["metadata"], json!({"user_id": "u-1"}));
}

#[tokio::test]
async fn an_overloaded_anthropic_channel_fails_over_across_providers() {
    let overloaded = mock(faulty("x", status(529))).await;
    let openai = mock(text_spec("served by openai")).await;
    let gw = gateway(&format!(
        "{}{}",
        anthropic_channel("claude", &overloaded.base_url(), 1),
        openai_channel("gpt", &openai.base_url(), 2, "")
    ))
    .await;
    let resp = messages(&gw, ask(true)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "gpt");
    let evs = events(&resp.text().await.unwrap());
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "served by openai");
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["attempts"][0]["status"], 529);
    assert_eq!(rows[0]["attempts"][0]["reason"], "server_error");
}

#[tokio::test]
async fn same_protocol_requests_pass_through_unchanged_but_for_the_model() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"claude\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [{{ name = \"m\", upstream = \"claude-real\" }}]\n",
        up.base_url()
    ))
    .await;
    // What Claude Code sends: cache_control, signed thinking, betas' fields, a document block.
    let body = json!({
        "model": "m", "max_tokens": 512,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
                {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "EqQBCkgIARABGAIiQ..."},
                {"type": "text", "text": "Sure."}]},
            {"role": "user", "content": "Go on."}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": []},
        "metadata": {"user_id": "session-1"}
    });
    let resp = messages(&gw, body.clone()).await;
    assert_eq!(resp.status(), 200);
    let mut expected = body;
    expected["model"] = json!("claude-real");
    assert_eq!(up.received()[0].body, expected);
}

#[tokio::test]
async fn crossing_protocols_says_what_was_lost_and_the_log_keeps_it() {
    let up = mock(text_spec("ok")).await;
    let claude = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("gpt", &up.base_url(), 1, ""),
        anthropic_channel("claude", &claude.base_url(), 2)
    ))
    .await;
    let mut body = ask(false);
    body["metadata"] = json!({"user_id": "u"});
    body["system"] = json!([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]);
    let resp = messages(&gw, body.clone()).await;
    assert_eq!(
        header(&resp, "x-switchyard-translation"),
        "lossy (metadata, cache_control)"
    );
    // The same request served by an Anthropic channel: nothing lost.
    let gw2 = gateway(&anthropic_channel("claude", &claude.base_url(), 1)).await;
    let resp = messages(&gw2, body).await;
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    // An OpenAI client's own per-message fields (encrypted reasoning...) stay behind, said.
    let openai_body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello",
            "reasoning_details": [{"type": "reasoning.encrypted", "data": "opaque"}]},
        {"role": "user", "content": "again"}]});
    let resp = gw2.chat(openai_body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-translation"),
        "lossy (messages[].reasoning_details)"
    );
    // An OpenAI client on an OpenAI channel: lossless too; and the log row says so.
    assert_eq!(
        header(&gw.chat(chat_body(false)).await, "x-switchyard-translation"),
        "lossless"
    );
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["translation"], "lossless");
    assert_eq!(rows[1]["translation"], "lossy (metadata, cache_control)");
}

/// What a real Claude sends with extended thinking: a signed thinking block, a ping, block
/// stops. Spacing and order as sent, so byte equality shows nothing was re-encoded.
const THINKING_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-up\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me think.\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"42.\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

fn thinking_message() -> Value {
    json!({"id": "msg_02", "type": "message", "role": "assistant", "model": "claude-up",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCgIYAhIM"},
            {"type": "text", "text": "42."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 9}})
}

#[tokio::test]
async fn same_protocol_answers_pass_through_with_thinking_signatures() {
    let addr = canned_upstream(THINKING_STREAM, thinking_message()).await;
    let gw = gateway(&anthropic_channel(
        "claude",
        &format!("http://{addr}/v1"),
        1,
    ))
    .await;

    let resp = messages(&gw, ask(true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    // The upstream's bytes, but for the stream's cost (nothing: no price) as `message_delta`'s
    // last member.
    let want = THINKING_STREAM.replace(
        r#""usage":{"output_tokens":9}}"#,
        r#""usage":{"output_tokens":9},"switchyard":{"cost_micros":0}}"#,
    );
    assert_eq!(resp.text().await.unwrap(), want);

    let resp = messages(&gw, ask(false)).await;
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    let mut v: Value = resp.json().await.unwrap();
    v.as_object_mut().unwrap().remove("switchyard");
    assert_eq!(v, thinking_message());

    // An OpenAI client of the same upstream gets the thinking as reasoning, the text, and no
    // empty chunk for the events that mean nothing to it (ping, block stops, signature).
    let text = gw.chat(chat_body(true)).await.text().await.unwrap();
    let chunks: Vec<Value> = sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    assert!(chunks.iter().all(|c| {
        c["choices"].as_array().is_some_and(|a| !a.is_empty()) || c["usage"].is_object()
    }));
    assert_eq!(sse_text(&text), "42.");
    assert!(text.contains("Let me think."), "{text}");
}

/// A DeepSeek-style OpenAI stream: reasoning first, then the answer.
const REASONING_STREAM: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"r1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Two and two\"}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"r1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\" make four.\"}}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"r1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"4\"},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

#[tokio::test]
async fn an_anthropic_client_sees_another_providers_reasoning_as_thinking() {
    let answer = json!({"id": "c2", "object": "chat.completion", "model": "r1",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four."}}]});
    let addr = canned_upstream(REASONING_STREAM, answer).await;
    let gw = gateway(&openai_channel("r1", &format!("http://{addr}/v1"), 1, "")).await;

    let v: Value = messages(&gw, ask(false)).await.json().await.unwrap();
    assert_eq!(
        v["content"][0],
        json!({"type": "thinking", "thinking": "Two and two make four.", "signature": ""})
    );
    assert_eq!(v["content"][1], json!({"type": "text", "text": "4"}));

    let evs = events(&messages(&gw, ask(true)).await.text().await.unwrap());
    let thinking: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, "Two and two make four.");
    assert_eq!(evs[1].1["content_block"]["type"], "thinking");
    assert_eq!(evs.last().unwrap().0, "message_stop");

    // Sent back, that unsigned block is not a signature lost on the way to the OpenAI channel.
    let mut body = ask(false);
    body["messages"] = json!([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [v["content"][0].clone(), v["content"][1].clone()]},
        {"role": "user", "content": "3+3?"}]);
    let resp = messages(&gw, body).await;
    assert_eq!(resp.status(), 200);
    let translation = header(&resp, "x-switchyard-translation");
    assert!(!translation.contains("signature"), "{translation}");
}

#[tokio::test]
async fn a_400_about_translated_signed_history_is_a_translation_defect_and_fails_over() {
    let about_thinking = answering(
        400,
        json!({"error": {"message": "messages[1]: unexpected field thinking", "type": "invalid_request_error"}}),
    )
    .await;
    let too_long = answering(
        400,
        json!({"error": {"message": "maximum context length is 8192 tokens", "code": "context_length_exceeded"}}),
    )
    .await;
    let claude = mock(text_spec("from claude")).await;
    let gw = |gpt: std::net::SocketAddr| {
        let channels = format!(
            "{}{}",
            openai_channel("gpt", &format!("http://{gpt}/v1"), 1, ""),
            anthropic_channel("claude", &claude.base_url(), 2)
        );
        async move { gateway(&channels).await }
    };
    let mut signed = ask(false);
    signed["messages"] = json!([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Sum.", "signature": "sig-claude"},
            {"type": "text", "text": "4"}]},
        {"role": "user", "content": "3+3?"}]);

    let first = gw(about_thinking).await;
    let resp = messages(&first, signed.clone()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "claude");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["translation_error", "ok"]
    );
    // Claude got its own signed block back, as the client sent it.
    assert_eq!(
        claude.received()[0].body["messages"][1]["content"][0]["signature"],
        "sig-claude"
    );
    // Without such history the same 400 is the client's: returned, never failed over.
    assert_eq!(messages(&first, ask(false)).await.status(), 400);
    assert_eq!(claude.requests(), 1);

    // A 400 about something else (the context is too long) stays the client's even with
    // signed history: Claude Code compacts on it.
    let second = gw(too_long).await;
    let resp = messages(&second, signed).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(claude.requests(), 1);
}
