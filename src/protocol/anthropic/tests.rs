//! Anthropic Messages both ways: client requests, answers and streams to and from canonical.
use super::*;
use crate::protocol::Protocol;
use crate::protocol::openai::{RequestBody, chunk_from_value};
use serde_json::{Value, json};

#[test]
fn a_claude_code_style_request_becomes_openai_turns() {
    let req = request_from_value(json!({
        "model": "claude-x", "max_tokens": 1024, "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call ls.", "signature": "sig"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.rs"}]},
                {"type": "text", "text": "Now open it."}
            ]}
        ],
        "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"}
    }))
    .unwrap();
    let out = serde_json::to_value(RequestBody {
        req: &req,
        model: "gpt-x",
        force_usage: true,
    })
    .unwrap();
    let msgs = out["messages"].as_array().unwrap();
    assert_eq!(
        msgs[0],
        json!({"role": "system", "content": "You are Claude Code."})
    );
    assert_eq!(msgs[1]["content"], "List the files.");
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\".\"}"
    );
    assert_eq!(msgs[2]["reasoning_content"], "I should call ls.");
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "content": "a.rs", "tool_call_id": "toolu_1"})
    );
    assert_eq!(msgs[4]["content"], "Now open it.");
    assert_eq!(
        out["tools"][0]["function"]["parameters"],
        json!({"type": "object"})
    );
    assert_eq!(out["tool_choice"], "required");
    assert_eq!(out["stop"], json!(["END"]));
    assert_eq!(out["max_tokens"], 1024);
    // Anthropic-only fields never reach an OpenAI upstream.
    assert!(out.get("metadata").is_none(), "{out}");
}

#[test]
fn bad_requests_name_the_field() {
    let err =
        request_from_value(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
            .unwrap_err();
    assert_eq!(err.param.as_deref(), Some("max_tokens"));
    let err = request_from_value(
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}),
    )
    .unwrap_err();
    assert_eq!(err.param.as_deref(), Some("messages[0].role"));
}

#[test]
fn a_stream_of_text_then_a_tool_call_becomes_anthropic_events() {
    let mut enc = StreamEncoder::default();
    let mut out = Vec::new();
    for c in [
        json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\":1}"}}]}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
    ] {
        enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
    }
    enc.done(&mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(
        text.contains("\"partial_json\":\"{\\\"p\\\":1}\""),
        "{text}"
    );
    assert!(text.contains("\"stop_reason\":\"tool_use\""));
    assert!(text.contains("\"output_tokens\":4"));
}

#[test]
fn cached_prompt_tokens_cross_every_pair() {
    use crate::protocol::{gemini, openai};
    // Anthropic counts cache reads and writes apart; canonically they are prompt tokens.
    let resp = response_from_value(&json!({"type": "message", "id": "m1", "model": "c",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7, "output_tokens": 5}}))
    .unwrap();
    let u = resp.usage.clone().unwrap();
    assert_eq!((u.input_tokens, u.cached_tokens), (Some(110), Some(100)));
    let v = serde_json::to_value(openai::ResponseBody {
        resp: &resp,
        report: None,
    })
    .unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 110);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 100);
    let g = gemini::response_to_value(&resp, "m");
    assert_eq!(g["usageMetadata"]["promptTokenCount"], 110);
    assert_eq!(g["usageMetadata"]["cachedContentTokenCount"], 100);

    let o = openai::response_from_value(json!({"id": "c", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 103, "completion_tokens": 5, "total_tokens": 108,
            "prompt_tokens_details": {"cached_tokens": 100}}}))
    .unwrap();
    assert_eq!(
        response_to_value(&o, "m")["usage"],
        json!({"input_tokens": 3, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 100})
    );
    let gm = gemini::response_from_value(&json!({"candidates": [{"content": {"role": "model",
            "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 103, "candidatesTokenCount": 5,
            "totalTokenCount": 108, "cachedContentTokenCount": 100}}))
    .unwrap();
    assert_eq!(
        response_to_value(&gm, "m")["usage"]["cache_read_input_tokens"],
        100
    );

    // Streamed: the final usage chunk's cache reads reach `message_delta`.
    let mut enc = StreamEncoder::default();
    let mut out = Vec::new();
    for c in [
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}),
        json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 103, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 100}}}),
    ] {
        enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
    }
    enc.done(&mut out);
    let text = String::from_utf8(out).unwrap();
    let delta: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|d| d["type"] == "message_delta")
        .unwrap();
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": 3, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 100})
    );
}

#[test]
fn other_providers_reasoning_is_an_unsigned_thinking_block_that_never_reaches_claude() {
    let mut enc = StreamEncoder::default();
    let mut out = Vec::new();
    for c in [
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Hmm"}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"reasoning_content": ", yes."}}]}),
        json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}),
    ] {
        enc.chunk(&chunk_from_value(c).unwrap(), "m", &mut out);
    }
    enc.done(&mut out);
    let text = String::from_utf8(out).unwrap();
    let data: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(
        data[1]["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    assert_eq!(
        data[2]["delta"],
        json!({"type": "thinking_delta", "thinking": "Hmm"})
    );
    assert_eq!(data[3]["delta"]["thinking"], ", yes.");
    assert_eq!(data[4], json!({"type": "content_block_stop", "index": 0}));
    assert_eq!(data[5]["content_block"]["type"], "text");
    assert_eq!(data[5]["index"], 1);

    let resp = crate::protocol::openai::response_from_value(json!({
        "id": "c2", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hi", "reasoning_content": "Hmm."}}]}))
    .unwrap();
    let v = response_to_value(&resp, "m");
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": "Hmm.", "signature": ""},
            {"type": "text", "text": "Hi"}])
    );

    // Sent back in history to Claude: the unsigned block goes, Claude's own signed one stays.
    let req = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": ""},
            {"type": "text", "text": "Hi"}]},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Mine.", "signature": "sig-1"},
            {"type": "text", "text": "Hi again"}]},
        {"role": "user", "content": "Bye"}]}))
    .unwrap();
    let body = request_to_value(&req, "claude");
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "text", "text": "Hi"}])
    );
    assert_eq!(body["messages"][3]["content"][0]["signature"], "sig-1");
}

#[test]
fn stripping_our_thinking_keeps_claude_s_rules() {
    // A turn that was only our thinking goes; our thinking in the last assistant turn
    // means this request runs without extended thinking.
    let req = request_from_value(json!({"model": "m", "max_tokens": 64,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hmm.", "signature": ""}]},
            {"role": "user", "content": "Run ls"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "ls it is.", "signature": ""},
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.rs"}]}]}))
    .unwrap();
    let body = request_to_value(&req, "claude");
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "user", "assistant", "user"]);
    assert!(body.get("thinking").is_none());
    assert!(!req.has_provider_only_history());

    // Claude's own signed (or redacted) thinking is provider-only history; a tool argument
    // that happens to be called `signature` is not.
    let tool_arg = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "sign",
            "input": {"signature": "abc", "cache_control": "none"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}))
    .unwrap();
    assert!(!tool_arg.has_provider_only_history());
    assert!(tool_arg.translation_losses(Protocol::OpenAiChat).is_empty());
    let redacted = request_from_value(json!({"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"},
            {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "Again"}]}))
    .unwrap();
    assert!(redacted.has_provider_only_history());
}

#[test]
fn a_raw_event_is_written_back_line_for_line() {
    let mut out = Vec::new();
    crate::protocol::RawEvent {
        protocol: Protocol::AnthropicMessages,
        event: Some("ping".into()),
        data: "{\"type\":\n\"ping\"}".into(),
    }
    .write(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "event: ping\ndata: {\"type\":\ndata: \"ping\"}\n\n"
    );
}

#[test]
fn arguments_of_a_block_that_is_no_client_tool_call_belong_to_no_call() {
    // Found by fuzzing: an input_json_delta of a server_tool_use (web search) block, or of a
    // block never started, was appended to the first call.
    let mut d = StreamDecoder::default();
    let events = [
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "input_json_delta", "partial_json": "{\"query\":\"x\"}"}}),
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "{\"path\":\"a.rs\"}"}}),
        json!({"type": "content_block_delta", "index": 7,
               "delta": {"type": "input_json_delta", "partial_json": "stray"}}),
    ];
    let mut args = Vec::new();
    for e in &events {
        if let Decoded::Chunk(c) = d.event(e) {
            for t in &c.choices[0].delta.tool_calls {
                args.push((t.index, t.name.clone(), t.arguments.clone()));
            }
        }
    }
    assert_eq!(
        args,
        [
            (0, Some("read_file".to_string()), Some(String::new())),
            (0, None, Some("{\"path\":\"a.rs\"}".to_string())),
        ]
    );
}
