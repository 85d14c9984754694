//! Token-counting requests in each client protocol that has one (Anthropic's
//! `messages/count_tokens`, Gemini's `:countTokens`, the Responses API's `input_tokens`): read
//! into the canonical request (so the local count is the one trimming makes), passed to an
//! upstream of the same protocol with only the model changed, and answered in the protocol's
//! shape. Pure: no I/O.

use serde_json::{Value, json};

use super::{ChatRequest, InvalidRequest, Protocol, anthropic, gemini, responses};

/// A counting request as its protocol wrote it, for `model` (the path's, for Gemini).
pub fn request(p: Protocol, body: &Value, model: &str) -> Result<ChatRequest, InvalidRequest> {
    if !body.is_object() {
        return Err(InvalidRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    }
    match p {
        Protocol::AnthropicMessages => {
            let mut v = body.clone();
            // A count has no reply: `max_tokens` is not part of it, so one is made up to read
            // the rest as a Messages request.
            if v.get("max_tokens").is_none_or(Value::is_null) {
                v["max_tokens"] = json!(1);
            }
            anthropic::request_from_value(v)
        }
        Protocol::Gemini => gemini::request_from_value(gemini_request(body), model, false),
        Protocol::OpenAiResponses => responses::request_from_value(body.clone()).map(|(r, _)| r),
        Protocol::OpenAiChat => Err(InvalidRequest {
            param: None,
            message: "Chat Completions has no token-counting endpoint".into(),
        }),
    }
}

/// Gemini's body is `{contents}` or `{generateContentRequest: {contents, systemInstruction,
/// tools, ...}}`; the second counts everything a generation would send.
fn gemini_request(body: &Value) -> Value {
    match body.get("generateContentRequest") {
        Some(Value::Object(g)) => {
            let mut g = g.clone();
            g.remove("model");
            Value::Object(g)
        }
        _ => {
            let mut b = body.clone();
            if let Some(o) = b.as_object_mut() {
                o.remove("generateContentRequest");
            }
            b
        }
    }
}

/// The client's counting body for an upstream of the same protocol: as sent, naming the
/// upstream's model (Gemini's is in the URL, and in an inner `generateContentRequest`).
pub fn for_upstream(p: Protocol, body: &Value, model: &str) -> Value {
    let mut v = body.clone();
    match p {
        Protocol::Gemini => {
            if let Some(g) = v
                .get_mut("generateContentRequest")
                .and_then(Value::as_object_mut)
            {
                g.insert("model".into(), format!("models/{model}").into());
            }
        }
        _ => {
            if let Some(o) = v.as_object_mut() {
                if p == Protocol::OpenAiResponses {
                    responses::for_upstream(o);
                }
                o.insert("model".into(), model.into());
            }
        }
    }
    v
}

/// A count in the protocol's answer shape.
pub fn answer(p: Protocol, tokens: u64) -> Value {
    match p {
        Protocol::Gemini => json!({"totalTokens": tokens}),
        Protocol::OpenAiResponses => {
            json!({"object": "response.input_tokens", "input_tokens": tokens})
        }
        Protocol::AnthropicMessages | Protocol::OpenAiChat => json!({"input_tokens": tokens}),
    }
}

/// The count an upstream's answer says, in its protocol's shape (`None`: not a count).
pub fn tokens_of(p: Protocol, answer: &Value) -> Option<u64> {
    let field = match p {
        Protocol::Gemini => "totalTokens",
        _ => "input_tokens",
    };
    answer.get(field).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_reads_its_counting_body() {
        let anthropic = json!({"model": "m", "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]});
        let r = request(Protocol::AnthropicMessages, &anthropic, "m").unwrap();
        assert_eq!(r.messages.len(), 2);
        let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let r = request(Protocol::Gemini, &gemini, "g").unwrap();
        assert_eq!((r.model.as_str(), r.messages.len()), ("g", 1));
        let inner = json!({"generateContentRequest": {"model": "models/g",
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}});
        let r = request(Protocol::Gemini, &inner, "g").unwrap();
        assert_eq!(r.messages.len(), 2);
        let resp = json!({"model": "m", "input": "hi", "instructions": "Be brief."});
        let r = request(Protocol::OpenAiResponses, &resp, "m").unwrap();
        assert_eq!(r.messages.len(), 2);
        let err = request(Protocol::AnthropicMessages, &json!([1]), "m").unwrap_err();
        assert!(err.message.contains("JSON object"), "{err:?}");
    }

    #[test]
    fn the_upstream_gets_the_body_as_sent_with_its_model() {
        let b = json!({"model": "alias", "messages": [], "extra": 1});
        let v = for_upstream(Protocol::AnthropicMessages, &b, "claude-x");
        assert_eq!(v, json!({"model": "claude-x", "messages": [], "extra": 1}));
        let g = json!({"generateContentRequest": {"model": "models/alias", "contents": []}});
        let v = for_upstream(Protocol::Gemini, &g, "gemini-x");
        assert_eq!(v["generateContentRequest"]["model"], "models/gemini-x");
    }

    #[test]
    fn answers_and_counts_in_each_shape() {
        for p in [
            Protocol::AnthropicMessages,
            Protocol::Gemini,
            Protocol::OpenAiResponses,
        ] {
            assert_eq!(tokens_of(p, &answer(p, 42)), Some(42), "{p:?}");
        }
        assert_eq!(answer(Protocol::Gemini, 7), json!({"totalTokens": 7}));
        assert_eq!(
            answer(Protocol::OpenAiResponses, 7)["object"],
            "response.input_tokens"
        );
    }
}
