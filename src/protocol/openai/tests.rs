//! OpenAI Chat Completions both ways: round trips keep unknown fields and JSON shapes, errors
//! name the param, and upstream answers are read leniently.

use super::*;
use crate::protocol::Role;
use serde_json::{Value, json};

fn roundtrip_request(v: Value) -> Value {
    let model = v["model"].as_str().unwrap().to_string();
    let req = request_from_value(v).unwrap();
    serde_json::to_value(RequestBody {
        req: &req,
        model: &model,
        force_usage: false,
    })
    .unwrap()
}

#[test]
fn request_roundtrip_keeps_unknown_fields_and_shapes() {
    let input = json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
            "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}, "strict": true}}],
        "tool_choice": "auto",
        "max_completion_tokens": 100,
        "temperature": 0.5,
        "stop": ["x"],
        "logit_bias": {"50256": -100},
        "some_future_param": {"nested": [1, 2]},
        "models": ["a", "b"]
    });
    let out = roundtrip_request(input.clone());
    let mut expected = input;
    expected.as_object_mut().unwrap().shift_remove("models");
    assert_eq!(out, expected);
    // Key order inside tool schemas is kept: it is part of the prompt the model sees.
    let props: Vec<&String> = out["tools"][0]["function"]["parameters"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(props, ["b", "a"]);
}

#[test]
fn streaming_request_asks_upstream_for_usage_and_keeps_other_options() {
    let req = request_from_value(json!({
        "model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}],
        "stream_options": {"include_obfuscation": false}
    }))
    .unwrap();
    assert!(!req.stream_include_usage);
    let out = serde_json::to_value(RequestBody {
        req: &req,
        model: "up",
        force_usage: true,
    })
    .unwrap();
    assert_eq!(out["model"], "up");
    assert_eq!(
        out["stream_options"],
        json!({"include_obfuscation": false, "include_usage": true})
    );
}

#[test]
fn wrong_types_name_the_param() {
    let cases = [
        (json!({"messages": []}), "model"),
        (json!({"model": "m"}), "messages"),
        (json!({"model": 3, "messages": []}), "model"),
        (json!({"model": "m", "messages": "hi"}), "messages"),
        (
            json!({"model": "m", "messages": [{"content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [1]}),
            "stop[0]",
        ),
    ];
    for (body, param) in cases {
        let err = request_from_value(body.clone()).unwrap_err();
        assert_eq!(err.param.as_deref(), Some(param), "{body}: {err}");
    }
    assert!(request_from_value(json!([1])).unwrap_err().param.is_none());
}

#[test]
fn response_roundtrip_and_report() {
    let input = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "gpt-4o-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "refusal": null},
            "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 0}},
        "system_fingerprint": "fp"
    });
    let resp = response_from_value(input.clone()).unwrap();
    assert_eq!(resp.usage.as_ref().unwrap().output_tokens, Some(1));
    let out = serde_json::to_value(ResponseBody {
        resp: &resp,
        report: None,
    })
    .unwrap();
    // As sent, completed with the details object the upstream left out.
    let mut expected = input.clone();
    expected["usage"]["completion_tokens_details"] = json!({"reasoning_tokens": 0});
    assert_eq!(out, expected);
    let rep = json!({"served_channel": "a"});
    let out = serde_json::to_value(ResponseBody {
        resp: &resp,
        report: Some(&rep),
    })
    .unwrap();
    assert_eq!(out["switchyard"]["served_channel"], "a");
}

#[test]
fn chunk_roundtrip_and_content_detection() {
    let role_only = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
    let c = chunk_from_value(role_only.clone()).unwrap();
    assert!(!c.has_content());
    assert_eq!(
        serde_json::to_value(ChunkBody {
            chunk: &c,
            usage_null: false
        })
        .unwrap(),
        role_only
    );

    let tool = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t1", "type": "function",
            "function": {"name": "f", "arguments": ""}}]}, "finish_reason": null}]});
    let c = chunk_from_value(tool.clone()).unwrap();
    assert!(c.has_content());
    assert_eq!(
        serde_json::to_value(ChunkBody {
            chunk: &c,
            usage_null: false
        })
        .unwrap(),
        tool
    );

    let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}});
    let c = chunk_from_value(usage).unwrap();
    assert!(c.is_usage_only());
    assert!(chunk_from_str("{not json").is_err());
    assert_eq!(
        chunk_from_str(r#"{"error": {"message": "x"}}"#).unwrap(),
        None
    );
}

#[test]
fn request_values_keep_their_json_shape() {
    let input = json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"obj": 1}}},
                {"type": "function", "function": {"name": "g"}},
                {"id": "c", "type": "custom", "custom": {"name": "patch", "input": "diff"}}
            ]}
        ],
        "temperature": 1,
        "top_p": 0.95,
        "stop": "END",
        "tool_choice": null
    });
    assert_eq!(roundtrip_request(input.clone()), input);
}

#[test]
fn any_visible_delta_field_counts_as_content() {
    let chunk = |delta: Value| {
        chunk_from_value(
            json!({"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
        )
        .unwrap()
    };
    assert!(!chunk(json!({"role": "assistant", "content": "", "refusal": null})).has_content());
    assert!(chunk(json!({"refusal": "I can't"})).has_content());
    assert!(chunk(json!({"audio": {"id": "a", "data": "AAA"}})).has_content());
    assert!(chunk(json!({"function_call": {"name": "f"}})).has_content());
    assert!(chunk(json!({"reasoning": "thinking..."})).has_content());
    assert!(chunk(json!({"reasoning_content": "thinking..."})).has_content());
}

#[test]
fn non_function_tool_call_deltas_pass_unchanged() {
    let input = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "t1", "type": "custom", "custom": {"name": "patch", "input": ""}},
            {"index": 1, "function": {"arguments": "{\"a\""}}
        ]}, "finish_reason": null}]});
    let c = chunk_from_value(input.clone()).unwrap();
    assert!(c.has_content());
    let out = serde_json::to_value(ChunkBody {
        chunk: &c,
        usage_null: false,
    })
    .unwrap();
    assert_eq!(out, input);
}

#[test]
fn a_count_sent_as_null_is_written_once_as_a_number() {
    let input = json!({"id": "c", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": null}});
    let resp = response_from_value(input).unwrap();
    let out = serde_json::to_string(&ResponseBody {
        resp: &resp,
        report: None,
    })
    .unwrap();
    assert_eq!(out.matches("\"completion_tokens\"").count(), 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 0);
    assert_eq!(v["usage"]["total_tokens"], 10);
}

#[test]
fn upstream_answers_are_read_leniently_and_usage_is_kept_as_sent() {
    let input = json!({
        "id": 17, "object": "chat.completion", "created": 1.5, "model": "m",
        "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 9,
            "completion_tokens_details": {"reasoning_tokens": 5}}
    });
    let resp = response_from_value(input).unwrap();
    assert_eq!(resp.choices[0].message.role, Role::Assistant);
    let out = serde_json::to_value(ResponseBody {
        resp: &resp,
        report: None,
    })
    .unwrap();
    assert_eq!(out["id"], 17);
    assert_eq!(out["created"], 1.5);
    assert_eq!(out["usage"]["total_tokens"], 9);
    assert_eq!(
        out["usage"]["completion_tokens_details"]["reasoning_tokens"],
        5
    );
    let usage_only =
        chunk_from_value(json!({"choices": [], "usage": {"prompt_tokens": 2}})).unwrap();
    let out = serde_json::to_value(ChunkBody {
        chunk: &usage_only,
        usage_null: true,
    })
    .unwrap();
    // Completed: every count, the details objects, the total summed.
    assert_eq!(
        out["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 0, "total_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0}})
    );
    let plain = chunk_from_value(json!({"choices": []})).unwrap();
    let out = serde_json::to_value(ChunkBody {
        chunk: &plain,
        usage_null: true,
    })
    .unwrap();
    assert_eq!(out["usage"], Value::Null);
}
