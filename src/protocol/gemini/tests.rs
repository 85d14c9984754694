//! Gemini both ways: client requests to canonical and back, and streamed tool calls held whole.
use super::*;
use crate::protocol::openai::{RequestBody, chunk_from_value};
use serde_json::{Value, json};

#[test]
fn a_gemini_request_becomes_openai_turns_and_back() {
    let body = json!({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 21}}}]}
        ],
        "tools": [{"functionDeclarations": [{"name": "weather", "parameters": {"type": "object"}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {"maxOutputTokens": 100, "temperature": 0.2, "stopSequences": ["END"]}
    });
    let req = request_from_value(body, "gemini-x", false).unwrap();
    let out = serde_json::to_value(RequestBody {
        req: &req,
        model: "gpt",
        force_usage: false,
    })
    .unwrap();
    let msgs = out["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["content"], "Be brief.");
    let id = msgs[2]["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(
        msgs[3]["tool_call_id"], id,
        "the response is paired with its call"
    );
    assert_eq!(out["tool_choice"], "required");
    assert_eq!(out["max_tokens"], 100);
    // And back to Gemini for a Gemini upstream: the same turns.
    let back = request_to_value(&req);
    assert_eq!(
        back["contents"][1]["parts"][0]["functionCall"]["args"],
        json!({"city": "Paris"})
    );
    assert_eq!(
        back["contents"][2]["parts"][0]["functionResponse"]["name"],
        "weather"
    );
    assert_eq!(back["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(back["generationConfig"]["maxOutputTokens"], 100);
}

#[test]
fn streamed_tool_call_fragments_are_held_until_complete() {
    let mut enc = StreamEncoder::default();
    let mut out = Vec::new();
    for c in [
        json!({"choices": [{"index": 0, "delta": {"content": "Let me check."}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"ci"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Paris\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}),
    ] {
        enc.chunk(&chunk_from_value(c).unwrap(), "g", &mut out);
    }
    enc.done("g", &mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0]["candidates"][0]["content"]["parts"][0]["text"],
        "Let me check."
    );
    let call = &events[1]["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(call["args"], json!({"city": "Paris"}));
    assert_eq!(events[1]["usageMetadata"]["candidatesTokenCount"], 7);
}

#[test]
fn thoughts_count_as_output_and_go_back_as_thoughts() {
    let answer = |usage: Value| {
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "42"}]},
            "finishReason": "STOP", "index": 0}], "usageMetadata": usage})
    };
    let r = response_from_value(&answer(json!({"promptTokenCount": 5,
        "candidatesTokenCount": 2, "thoughtsTokenCount": 7, "totalTokenCount": 14})))
    .unwrap();
    let u = r.usage.clone().unwrap();
    // As OpenAI counts it: the output includes the reasoning.
    assert_eq!((u.output_tokens, u.reasoning_tokens), (Some(9), Some(7)));
    let back = response_to_value(&r, "g");
    assert_eq!(
        back["usageMetadata"],
        json!({"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 14,
            "thoughtsTokenCount": 7})
    );
    // Still thinking at the token limit: Gemini leaves the zero candidates count out.
    let r = response_from_value(&answer(json!({"promptTokenCount": 5,
        "thoughtsTokenCount": 7, "totalTokenCount": 12})))
    .unwrap();
    assert_eq!(r.usage.unwrap().output_tokens, Some(7));
}
