use serde_json::{Value, json};

use super::*;
use crate::protocol::{Decoded, anthropic, openai};

fn chat(body: Value) -> crate::protocol::ChatRequest {
    openai::request_from_value(body).expect("a valid chat request")
}

#[test]
fn a_chat_request_becomes_a_converse_body() {
    let req = chat(json!({
        "model": "m", "max_tokens": 50, "temperature": 0.5, "stop": ["END"],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "thanks"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather",
            "parameters": {"type": "object"}}}],
        "tool_choice": "required"
    }));
    let v = request_to_value(&req);
    assert_eq!(v["system"], json!([{"text": "Be brief."}]));
    assert_eq!(
        v["inferenceConfig"],
        json!({"maxTokens": 50, "temperature": 0.5, "stopSequences": ["END"]})
    );
    let m = v["messages"].as_array().unwrap();
    // user, assistant (tool use), user (the result and "thanks" merged): alternating.
    let roles: Vec<&str> = m.iter().map(|t| t["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        m[0]["content"][1],
        json!({"image": {"format": "png", "source": {"bytes": "iVBO"}}})
    );
    assert_eq!(
        m[1]["content"][0],
        json!({"toolUse": {"toolUseId": "c1", "name": "weather", "input": {"city": "Paris"}}})
    );
    assert_eq!(
        m[2]["content"][0],
        json!({"toolResult": {"toolUseId": "c1", "content": [{"text": "sunny"}]}})
    );
    assert_eq!(m[2]["content"][1], json!({"text": "thanks"}));
    assert_eq!(v["toolConfig"]["toolChoice"], json!({"any": {}}));
    assert_eq!(
        v["toolConfig"]["tools"][0]["toolSpec"],
        json!({"name": "weather", "description": "Weather", "inputSchema": {"json": {"type": "object"}}})
    );
}

#[test]
fn an_anthropic_clients_extras_and_documents_cross_and_its_body_goes_to_invoke_model() {
    let body = json!({"model": "m", "max_tokens": 10, "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Read", "cache_control": {"type": "ephemeral"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]}]});
    let req = anthropic::request_from_value(body).unwrap();
    let v = request_to_value(&req);
    assert_eq!(
        v["additionalModelRequestFields"],
        json!({"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}})
    );
    assert_eq!(
        v["messages"][0]["content"][1],
        json!({"document": {"format": "pdf", "name": "document-1", "source": {"bytes": "JVBE"}}})
    );
    let inv = invoke_body(&req, "us.anthropic.claude-x");
    assert_eq!(inv["anthropic_version"], BEDROCK_ANTHROPIC_VERSION);
    assert!(
        inv.get("model").is_none() && inv.get("stream").is_none(),
        "{inv}"
    );
    // As the client sent it: cache_control on its block, the document as is.
    assert_eq!(
        inv["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(inv["messages"][0]["content"][1]["type"], "document");
}

#[test]
fn a_converse_answer_and_its_stream_read_into_canonical() {
    let answer = json!({"output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "sig"}}},
            {"text": "Hi"},
            {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 25,
            "cacheReadInputTokens": 4, "cacheWriteInputTokens": 6}});
    let r = response_from_value(&answer).unwrap();
    let c = &r.choices[0];
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(c.message.reasoning.as_deref(), Some("Hmm."));
    assert_eq!(c.message.tool_calls.len(), 1);
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.cached_tokens,
            u.cache_write_tokens,
            u.output_tokens
        ),
        (Some(20), Some(4), Some(6), Some(5))
    );
    assert!(response_from_value(&json!({"output": {}})).is_err());

    let mut d = StreamDecoder::default();
    let events = [
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        ),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "weather"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"city\""}}}),
        ),
        // A delta for a block never started as a call belongs to no call.
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 7, "delta": {"toolUse": {"input": "x"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}}),
        ),
    ];
    let mut seen = Vec::new();
    for (kind, data) in &events {
        seen.push(match d.event(kind, data) {
            Decoded::Chunk(c) => format!("chunk:{}", c.has_content() || c.has_finish()),
            Decoded::Last(c) => {
                format!("last:{:?}", c.usage.as_ref().and_then(|u| u.output_tokens))
            }
            Decoded::Nothing => "nothing".into(),
            _ => "other".into(),
        });
    }
    assert_eq!(
        seen,
        [
            "chunk:false",
            "chunk:true",
            "chunk:true",
            "chunk:true",
            "nothing",
            "nothing",
            "chunk:true",
            "last:Some(2)"
        ]
    );
    assert!(d.complete());
}
