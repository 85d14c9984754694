//! The Responses API (`POST /v1/responses`), as Codex speaks it: input items read into the
//! upstream's chat request, answers and event streams in the documented shape, failover before
//! the first event, `response.failed` after a fault, and errors in OpenAI's envelope.

use serde_json::{Value, json};
use switchyard::provider::mock::{Fault, MockSpec, MockToolCall};

use crate::support::*;

async fn create(gw: &Gateway, body: Value) -> reqwest::Response {
    gw.post_as("/v1/responses", KEY, &[], body).await
}

/// `event:` names and `data:` payloads of a Responses SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|ev| {
            let name = ev
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_default()
                .to_string();
            let data = ev
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str(d).ok())
                .unwrap_or(Value::Null);
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn a_codex_turn_reaches_a_chat_upstream_as_one_conversation() {
    let up = mock(text_spec("done")).await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let body = json!({
        "model": "m", "instructions": "You are Codex.", "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "sess-1",
        "max_output_tokens": 300, "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}},
        "tools": [
            {"type": "function", "name": "shell", "description": "Run a command",
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}},
            {"type": "web_search"}
        ],
        "tool_choice": "auto", "parallel_tool_calls": false,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.rs\nb.rs"}
        ]
    });
    let resp = create(&gw, body).await;
    assert_eq!(resp.status(), 200);
    // The hosted tool could not go to a chat upstream, and the client is told.
    assert_eq!(
        header(&resp, "x-switchyard-translation"),
        "lossy (web_search tool)"
    );
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["content"][0]["text"], "done");
    // The request's own settings are repeated, as the API does.
    assert_eq!(v["instructions"], "You are Codex.");
    assert_eq!(v["max_output_tokens"], 300);
    assert_eq!(v["tools"].as_array().unwrap().len(), 2);
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let got = &up.received()[0].body;
    assert_eq!(
        got["messages"],
        json!([
            {"role": "system", "content": "You are Codex."},
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Listing."}], "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":[\"ls\"]}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.rs\nb.rs"}
        ])
    );
    assert_eq!(got["max_completion_tokens"], 300);
    assert_eq!(got["reasoning_effort"], "high");
    assert_eq!(got["prompt_cache_key"], "sess-1");
    assert_eq!(got["parallel_tool_calls"], false);
    assert_eq!(got["response_format"]["json_schema"]["name"], "out");
    assert_eq!(got["tools"].as_array().unwrap().len(), 1);
    assert_eq!(got["tools"][0]["function"]["name"], "shell");
    // The Responses API's own fields stay behind.
    for k in [
        "include",
        "store",
        "input",
        "instructions",
        "text",
        "reasoning",
    ] {
        assert!(got.get(k).is_none(), "{k} reached the chat upstream");
    }
}

#[tokio::test]
async fn a_stream_fails_over_before_its_first_event_and_follows_the_documented_order() {
    let (_a, _b, gw) = two_tiers(
        ("dead", faulty("x", status(500)), ""),
        (
            "live",
            MockSpec {
                chunks: 2,
                tool_call: Some(MockToolCall {
                    name: "shell".into(),
                    arguments: r#"{"command":["ls"]}"#.into(),
                }),
                ..MockSpec::default()
            },
        ),
    )
    .await;
    let resp = create(
        &gw,
        json!({"model": "m", "stream": true, "input": "list",
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "live");
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.first().copied(),
        Some("response.created"),
        "{names:?}"
    );
    assert_eq!(names[1], "response.in_progress");
    assert_eq!(names[2], "response.output_item.added");
    assert_eq!(names.last().copied(), Some("response.completed"));
    let i_done = names
        .iter()
        .position(|n| *n == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(names[i_done + 1], "response.output_item.done");
    // Every event names itself and is numbered in order.
    for (i, (n, d)) in evs.iter().enumerate() {
        assert_eq!(d["type"], n.as_str());
        assert_eq!(d["sequence_number"], i);
    }
    let args: String = evs
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(args, r#"{"command":["ls"]}"#);
    let done = &evs.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["type"], "function_call");
    assert_eq!(done["output"][0]["name"], "shell");
    assert!(done["output"][0]["call_id"].as_str().is_some());
    assert!(done["usage"]["total_tokens"].as_u64().is_some());
}

#[tokio::test]
async fn a_fault_after_the_first_event_ends_the_stream_with_response_failed() {
    let up = mock(MockSpec {
        fault: Some(Fault {
            cut_after: Some(1),
            ..Fault::default()
        }),
        ..text_spec("one two three four")
    })
    .await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let resp = create(&gw, json!({"model": "m", "stream": true, "input": "hi"})).await;
    assert_eq!(resp.status(), 200);
    let evs = events(&resp.text().await.unwrap());
    let (last, data) = evs.last().unwrap();
    assert_eq!(last, "response.failed", "{evs:?}");
    assert_eq!(data["response"]["status"], "failed");
    assert_eq!(data["response"]["error"]["code"], "stream_interrupted");
    assert!(!evs.iter().any(|(n, _)| n == "response.completed"));
}

#[tokio::test]
async fn custom_tools_go_as_functions_and_come_back_as_custom_tool_calls() {
    let up = mock(MockSpec {
        chunks: 2,
        tool_call: Some(MockToolCall {
            name: "apply_patch".into(),
            arguments: r#"{"input":"*** Begin Patch\n*** End Patch"}"#.into(),
        }),
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let body = json!({"model": "m", "input": [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "c0", "name": "apply_patch", "input": "earlier"},
            {"type": "custom_tool_call_output", "call_id": "c0", "output": "ok"}],
        "tools": [{"type": "custom", "name": "apply_patch", "description": "Apply a patch"}]});
    let v: Value = create(&gw, body.clone()).await.json().await.unwrap();
    let item = &v["output"][0];
    assert_eq!(item["type"], "custom_tool_call", "{v}");
    assert_eq!(item["input"], "*** Begin Patch\n*** End Patch");
    let got = &up.received()[0].body;
    assert_eq!(got["tools"][0]["function"]["name"], "apply_patch");
    assert_eq!(
        got["messages"][1]["tool_calls"][0]["function"]["arguments"],
        r#"{"input":"earlier"}"#
    );
    // Streamed: the whole input in one delta, then done, inside the item's events.
    let mut stream = body;
    stream["stream"] = true.into();
    let evs = events(&create(&gw, stream).await.text().await.unwrap());
    let done = evs
        .iter()
        .find(|(n, _)| n == "response.custom_tool_call_input.done")
        .expect("custom input done");
    assert_eq!(done.1["input"], "*** Begin Patch\n*** End Patch");
    assert_eq!(evs.last().unwrap().0, "response.completed");
}

#[tokio::test]
async fn bad_requests_and_unknown_continuations_get_openais_envelope() {
    let up = mock(text_spec("x")).await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let e = error_envelope(create(&gw, json!({"model": "m"})).await, 400).await;
    assert_eq!(e["param"], "input");
    let e = error_envelope(
        create(
            &gw,
            json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
        )
        .await,
        400,
    )
    .await;
    assert_eq!(e["param"], "input[0].role");
    let e = error_envelope(
        create(
            &gw,
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_123"}),
        )
        .await,
        404,
    )
    .await;
    assert_eq!(e["code"], "previous_response_not_found");
    assert_eq!(e["param"], "previous_response_id");
    let e = error_envelope(
        create(&gw, json!({"model": "nope", "input": "hi"})).await,
        404,
    )
    .await;
    assert_eq!(e["code"], "model_not_found");
    assert_eq!(up.requests(), 0);
}

/// An `openai` channel that serves the Responses API itself.
fn responses_channel(name: &str, base: &str, prio: u32) -> String {
    openai_channel(name, base, prio, "responses = true")
}

#[tokio::test]
async fn a_responses_upstream_gets_the_clients_body_and_its_answer_comes_back_as_is() {
    let up = mock(text_spec("straight")).await;
    let gw = gateway(&responses_channel("r", &up.base_url(), 1)).await;
    let body = json!({"model": "m", "store": false, "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "web_search"}, {"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "input": [{"role": "user", "content": "hi"},
                  {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}]});
    let resp = create(&gw, body.clone()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-translation"), "lossless");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], "straight");
    let got = &up.received()[0];
    assert_eq!(got.path, "/responses");
    // Everything the client sent, hosted tools and encrypted reasoning included.
    let mut expect = body;
    expect["stream"] = false.into();
    assert_eq!(got.body, expect);

    // Streamed: the upstream's events, as they came, numbered by it.
    let mut stream = got.body.clone();
    stream["stream"] = true.into();
    let text = create(&gw, stream).await.text().await.unwrap();
    let evs = events(&text);
    assert_eq!(evs[0].0, "response.created");
    assert_eq!(evs.last().unwrap().0, "response.completed");
    for (i, (_, d)) in evs.iter().enumerate() {
        assert_eq!(d["sequence_number"], i);
    }
    // The ids are the upstream's own (it made the response), not ones the gateway minted.
    let upstream_id = evs[0].1["response"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        evs.last().unwrap().1["response"]["id"],
        upstream_id.as_str()
    );
}

#[tokio::test]
async fn a_dead_responses_upstream_fails_over_to_a_chat_channel_by_translation() {
    let dead = mock(faulty("x", status(503))).await;
    let chat = mock(text_spec("translated")).await;
    let gw = gateway(&format!(
        "{}{}",
        responses_channel("r", &dead.base_url(), 1),
        openai_channel("c", &chat.base_url(), 2, "")
    ))
    .await;
    let body = json!({"model": "m", "stream": true, "input": "hi",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "shell", "parameters": {"type": "object"}}]});
    let resp = create(&gw, body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "c");
    assert_eq!(
        header(&resp, "x-switchyard-translation"),
        "lossy (web_search tool)"
    );
    let evs = events(&resp.text().await.unwrap());
    assert_eq!(evs.last().unwrap().0, "response.completed");
    assert_eq!(
        evs.last().unwrap().1["response"]["output"][0]["content"][0]["text"],
        "translated"
    );
    assert_eq!(dead.received()[0].path, "/responses");
    assert_eq!(chat.received()[0].path, "/chat/completions");
}

#[tokio::test]
async fn trimming_cuts_a_responses_input_by_whole_exchanges() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_full(
        "",
        "trim = true",
        &format!(
            "{}[[models]]\nname = \"m\"\ncontext_window = 2000\nmax_output_tokens = 200\n",
            responses_channel("r", &up.base_url(), 1)
        ),
    )
    .await;
    let filler = "the quick brown fox jumps over the lazy dog ".repeat(8);
    let mut input = vec![json!({"role": "user", "content": "refactor the parser"})];
    for i in 0..20 {
        input.push(json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [], "encrypted_content": "x"}));
        input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "shell", "arguments": "{}"}));
        input.push(
            json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": filler}),
        );
    }
    let resp = create(
        &gw,
        json!({"model": "m", "instructions": "agent", "input": input}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let turns: usize = header(&resp, "x-switchyard-trimmed-turns").parse().unwrap();
    assert!(turns > 0);
    let sent = up.received()[0].body["input"].as_array().unwrap().clone();
    assert_eq!(sent.len(), 61 - 3 * turns);
    // The task stays first; each kept call has its reasoning before it and its output after.
    assert_eq!(sent[0]["content"], "refactor the parser");
    for w in sent[1..].chunks(3) {
        assert_eq!(w[0]["type"], "reasoning");
        assert_eq!(w[1]["type"], "function_call");
        assert_eq!(w[2]["type"], "function_call_output");
        assert_eq!(w[1]["call_id"], w[2]["call_id"]);
    }
    assert_eq!(sent.last().unwrap()["call_id"], "c19");
    assert_eq!(up.received()[0].body["instructions"], "agent");
}

/// Continues `previous` (a streamed answer's conversation is kept before its last event, so a
/// continuation right after it finds it).
async fn continue_from(gw: &Gateway, previous: &str, stream: bool) -> reqwest::Response {
    let body = json!({"model": "m", "input": "and then?", "previous_response_id": previous, "stream": stream});
    create(gw, body).await
}

#[tokio::test]
async fn a_kept_conversation_continues_on_any_channel() {
    let a = mock(text_spec("from a")).await;
    let b = mock(text_spec("from b")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("a", &a.base_url(), 1, ""),
        openai_channel("b", &b.base_url(), 2, "")
    ))
    .await;
    let first: Value = create(
        &gw,
        json!({"model": "m", "input": "hi", "instructions": "terse"}),
    )
    .await
    .json()
    .await
    .unwrap();
    let id = first["id"].as_str().unwrap();
    // Streamed, continuing the first: the whole conversation reaches the upstream.
    let resp = continue_from(&gw, id, true).await;
    assert_eq!(resp.status(), 200);
    let evs = events(&resp.text().await.unwrap());
    let second = evs.last().unwrap().1["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let got = &a.received()[1].body["messages"];
    assert_eq!(got[0]["content"], "hi");
    assert_eq!(got[1]["role"], "assistant");
    assert_eq!(got[1]["content"][0]["text"], "from a");
    assert_eq!(got[2]["content"], "and then?");
    // The channel that made it goes down: the kept conversation goes on elsewhere.
    a.set_spec(faulty("x", status(500)));
    let resp = continue_from(&gw, &second, false).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "b");
    let got = &b.received()[0].body["messages"];
    assert_eq!(got.as_array().unwrap().len(), 5, "{got}");
    assert_eq!(got[4]["content"], "and then?");
    // `store: false`, or another gateway key: nothing to continue.
    let unkept: Value = create(&gw, json!({"model": "m", "input": "hi", "store": false}))
        .await
        .json()
        .await
        .unwrap();
    let e = error_envelope(
        create(
            &gw,
            json!({"model": "m", "input": "x", "previous_response_id": unkept["id"]}),
        )
        .await,
        404,
    )
    .await;
    assert_eq!(e["code"], "previous_response_not_found");
}

#[tokio::test]
async fn a_response_an_upstream_keeps_is_continued_only_there() {
    let keeper = mock(text_spec("kept upstream")).await;
    let other = mock(text_spec("elsewhere")).await;
    let gw = gateway(&format!(
        "{}{}",
        responses_channel("r", &keeper.base_url(), 1),
        openai_channel("c", &other.base_url(), 2, "")
    ))
    .await;
    let first: Value = create(&gw, json!({"model": "m", "input": "hi"}))
        .await
        .json()
        .await
        .unwrap();
    let id = first["id"].as_str().unwrap().to_string();
    let resp = continue_from(&gw, &id, false).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "r");
    // It went as sent: the upstream resolves the id itself.
    assert_eq!(
        keeper.received()[1].body["previous_response_id"],
        id.as_str()
    );
    // That channel down: a clear 503, not a reply from a channel that never saw the conversation.
    keeper.set_spec(faulty("x", status(500)));
    let e = error_envelope(continue_from(&gw, &id, false).await, 503).await;
    assert_eq!(e["code"], "previous_response_unavailable");
    assert!(e["message"].as_str().unwrap().contains("channel r"), "{e}");
    assert_eq!(other.requests(), 0);
}

#[tokio::test]
async fn a_conversation_kept_in_redis_continues_on_another_replica() {
    let up = mock(text_spec("shared")).await;
    let channels = format!(
        "{}{}",
        redis_state("responses"),
        openai_channel("a", &up.base_url(), 1, "")
    );
    let one = gateway(&channels).await;
    let two = gateway(&channels).await;
    wait_connected(&one, true).await;
    wait_connected(&two, true).await;
    let first: Value = create(&one, json!({"model": "m", "input": "hi"}))
        .await
        .json()
        .await
        .unwrap();
    let resp = continue_from(&two, first["id"].as_str().unwrap(), false).await;
    assert_eq!(resp.status(), 200);
    let got = &up.received()[1].body["messages"];
    assert_eq!(got.as_array().unwrap().len(), 3, "{got}");
}
