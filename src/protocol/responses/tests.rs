//! The Responses API both ways: requests, answers and streams, and kept conversations.
use super::*;
use crate::protocol::{ChunkChoice, Delta, StreamChunk, ToolCallDelta};
use serde_json::{Map, Value, json};

fn echo() -> Echo {
    request_from_value(json!({"model": "m", "input": "hi"}))
        .unwrap()
        .1
}

fn call_delta(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> StreamChunk {
    StreamChunk {
        id: None,
        model: None,
        created: None,
        choices: vec![ChunkChoice {
            index: 0,
            delta: Delta {
                tool_calls: vec![ToolCallDelta {
                    index,
                    id: id.map(str::to_string),
                    kind: None,
                    function: true,
                    name: name.map(str::to_string),
                    arguments: Some(args.to_string()),
                    extra: Map::new(),
                }],
                ..Delta::default()
            },
            finish_reason: None,
            extra: Map::new(),
        }],
        usage: None,
        extra: Map::new(),
        raw: None,
    }
}

fn events(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[test]
fn parallel_calls_with_interleaved_arguments_stay_two_calls() {
    let mut enc = StreamEncoder::new(echo(), "m".into());
    let mut out = Vec::new();
    for c in [
        call_delta(0, Some("a"), Some("f"), ""),
        call_delta(1, Some("b"), Some("g"), ""),
        call_delta(0, None, None, "{\"x\":"),
        call_delta(1, None, None, "{\"y\":"),
        call_delta(0, None, None, "1}"),
        call_delta(1, None, None, "2}"),
    ] {
        enc.chunk(&c, &mut out);
    }
    enc.done(&mut out);
    let evs = events(&out);
    let done = evs.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    let output = done["response"]["output"].as_array().unwrap();
    assert_eq!(output.len(), 2, "{output:?}");
    assert_eq!(output[0]["call_id"], "a");
    assert_eq!(output[0]["arguments"], "{\"x\":1}");
    assert_eq!(output[1]["call_id"], "b");
    assert_eq!(output[1]["arguments"], "{\"y\":2}");
    // Each delta names its own item; indices and ids are distinct.
    let deltas: Vec<(Value, Value)> = evs
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| (e["output_index"].clone(), e["delta"].clone()))
        .collect();
    assert_eq!(deltas[0], (json!(0), json!("{\"x\":")));
    assert_eq!(deltas[1], (json!(1), json!("{\"y\":")));
    assert_ne!(output[0]["id"], output[1]["id"]);
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
}

#[test]
fn items_without_a_call_id_are_the_clients_mistake() {
    for ty in ["function_call", "function_call_output", "custom_tool_call"] {
        let err = request_from_value(json!({"model": "m",
            "input": [{"type": ty, "name": "f", "arguments": "{}", "output": "x"}]}))
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("input[0].call_id"), "{ty}");
    }
}

#[test]
fn parallel_tool_calls_goes_only_with_tools() {
    let (req, echo) = request_from_value(json!({"model": "m", "input": "hi",
        "tools": [{"type": "web_search"}], "parallel_tool_calls": true}))
    .unwrap();
    assert!(!req.extra.contains_key("parallel_tool_calls"));
    assert_eq!(echo.losses, ["web_search tool"]);
}

#[test]
fn items_this_gateway_made_do_not_reach_an_upstream_that_speaks_the_api() {
    let mut body = json!({"input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_sy0123", "summary": [{"type": "summary_text", "text": "t"}]},
        {"type": "reasoning", "id": "rs_68ab", "encrypted_content": "e"},
        {"type": "message", "id": "msg_sy0123", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "function_call", "id": "fc_68ab", "call_id": "call_sy1", "name": "f", "arguments": "{}"}
    ]});
    for_upstream(body.as_object_mut().unwrap());
    let items = body["input"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[1]["id"], "rs_68ab");
    assert!(items[2].get("id").is_none());
    assert_eq!(items[3]["id"], "fc_68ab");
    assert_eq!(items[3]["call_id"], "call_sy1");
}

#[test]
fn the_token_limit_makes_an_incomplete_response() {
    let e = echo();
    let mut resp = crate::protocol::openai::response_from_value(json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "length",
            "message": {"role": "assistant", "content": "cut"}}]}))
    .unwrap();
    let v = response_to_value(&resp, &e, "m");
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    resp.choices[0].finish_reason = Some("stop".into());
    assert_eq!(response_to_value(&resp, &e, "m")["status"], "completed");
    // Streamed, it ends with `response.incomplete`, not `response.completed`.
    let mut enc = StreamEncoder::new(e, "m".into());
    let mut out = Vec::new();
    let mut c = call_delta(0, None, None, "");
    c.choices[0].delta = Delta {
        content: Some("cut".into()),
        ..Delta::default()
    };
    c.choices[0].finish_reason = Some("length".into());
    enc.chunk(&c, &mut out);
    enc.done(&mut out);
    let last = events(&out).pop().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
}

#[test]
fn a_conversation_is_kept_only_if_allowed_and_within_the_cap() {
    let (_, e) = request_from_value(json!({"model": "m", "input": "hi"})).unwrap();
    let kept = e.kept_with(&[json!({"type": "message", "role": "assistant", "content": []})]);
    let items: Vec<Value> = serde_json::from_str(&kept.unwrap()).unwrap();
    assert_eq!(items.len(), 2);
    let (_, e) = request_from_value(json!({"model": "m", "input": "hi", "store": false})).unwrap();
    assert_eq!(e.kept_with(&[]), None);
    let big = "x".repeat(MAX_KEPT_BYTES);
    let (_, e) = request_from_value(json!({"model": "m", "input": big})).unwrap();
    assert_eq!(e.kept_with(&[]), None);
}

#[test]
fn a_repeated_call_announcement_does_not_name_the_call_twice() {
    // Found by fuzzing: a second `output_item.added` for the same call gave it its name again,
    // and a Chat Completions client concatenates names.
    let mut d = StreamDecoder::default();
    let added = json!({"type": "response.output_item.added", "output_index": 1,
        "item": {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": ""}});
    let names: Vec<Option<String>> = [&added, &added]
        .iter()
        .filter_map(|e| match d.event("response.output_item.added", e) {
            crate::protocol::Decoded::Chunk(c) => {
                Some(c.choices[0].delta.tool_calls[0].name.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(names, [Some("read_file".to_string())]);
}
