//! A client's request → canonical: a chat completion request and an embeddings request.

use serde_json::{Map, Value};

use super::read::{
    Read, bad, join, message_from_value, object, opt_array, opt_bool, opt_number, opt_string,
    opt_u64, req_string,
};
use crate::protocol::json_kind as kind;
use crate::protocol::{
    ChatRequest, EmbeddingsRequest, InvalidRequest, MaxTokensField, Protocol, Stop, Tool,
};

/// Switchyard's own request fields: never sent upstream.
pub const GATEWAY_FIELDS: [&str; 3] = ["models", "fallback_models", "redundancy"];

/// Never sent upstream. The server takes them out first (`chain::take`); this is the backstop,
/// with a scan of the few top-level keys rather than hashed lookups for fields rarely present.
fn strip_gateway_fields(m: &mut Map<String, Value>) {
    if m.keys().any(|k| GATEWAY_FIELDS.contains(&k.as_str())) {
        for f in GATEWAY_FIELDS {
            m.shift_remove(f);
        }
    }
}

/// A client's body as an object, and the model it names (required, not empty).
fn body_and_model(body: Value) -> Result<(Map<String, Value>, String), InvalidRequest> {
    let mut m = object(body, "").map_err(|_| InvalidRequest {
        param: None,
        message: "the request body must be a JSON object".into(),
    })?;
    let model = req_string(&mut m, "model", "")?;
    if model.is_empty() {
        return Err(InvalidRequest::new("model", "must not be empty"));
    }
    Ok((m, model))
}

/// Client body → canonical request. Errors carry the field path as `param`.
pub fn request_from_value(body: Value) -> Result<ChatRequest, InvalidRequest> {
    let (mut m, model) = body_and_model(body)?;
    let raw_messages = opt_array(&mut m, "messages", "")?
        .ok_or_else(|| InvalidRequest::new("messages", "is required"))?;
    if raw_messages.is_empty() {
        return Err(InvalidRequest::new(
            "messages",
            "must contain at least one message",
        ));
    }
    let mut messages = Vec::with_capacity(raw_messages.len());
    for (i, v) in raw_messages.into_iter().enumerate() {
        messages.push(message_from_value(v, &format!("messages[{i}]"), None)?);
    }
    let stream = opt_bool(&mut m, "stream", "")?.unwrap_or(false);
    let stream_include_usage = match m.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(InvalidRequest::new(
                    "stream_options.include_usage",
                    format!("expected a boolean, got {}", kind(other)),
                ));
            }
        },
        Some(other) => {
            return Err(InvalidRequest::new(
                "stream_options",
                format!("expected an object, got {}", kind(other)),
            ));
        }
    };
    let max_tokens = match opt_u64(&mut m, "max_completion_tokens", "")? {
        Some(n) => Some((MaxTokensField::MaxCompletionTokens, n)),
        None => opt_u64(&mut m, "max_tokens", "")?.map(|n| (MaxTokensField::MaxTokens, n)),
    };
    let temperature = opt_number(&mut m, "temperature", "")?;
    let top_p = opt_number(&mut m, "top_p", "")?;
    let stop = match m.shift_remove("stop") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Stop::One(s)),
        Some(Value::Array(a)) => Some(Stop::Many(
            a.into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s),
                    other => Err(InvalidRequest::new(
                        format!("stop[{i}]"),
                        format!("expected a string, got {}", kind(&other)),
                    )),
                })
                .collect::<Result<_, _>>()?,
        )),
        Some(other) => {
            return Err(InvalidRequest::new(
                "stop",
                format!(
                    "expected a string or an array of strings, got {}",
                    kind(&other)
                ),
            ));
        }
    };
    let tools = match opt_array(&mut m, "tools", "")? {
        None => Vec::new(),
        Some(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| tool_from_value(v, &format!("tools[{i}]")))
            .collect::<Read<_>>()?,
    };
    let tool_choice = m.shift_remove("tool_choice");
    strip_gateway_fields(&mut m);
    Ok(ChatRequest {
        model,
        messages,
        stream,
        stream_include_usage,
        max_tokens,
        temperature,
        top_p,
        stop,
        tools,
        tool_choice,
        origin: Protocol::OpenAiChat,
        raw: None,
        extra: m,
        hops: 0,
        response_format: None,
    })
}

fn tool_from_value(v: Value, path: &str) -> Read<Tool> {
    let mut m = object(v, path)?;
    if m.get("type").and_then(Value::as_str) != Some("function") {
        return Ok(Tool::Other(Value::Object(m)));
    }
    let p = join(path, "function");
    let mut f = match m.get("function") {
        Some(Value::Object(_)) => match m.shift_remove("function") {
            Some(v) => object(v, &p)?,
            None => return bad(p, "is required"),
        },
        _ => return bad(p, "is required and must be an object"),
    };
    m.shift_remove("type");
    let name = req_string(&mut f, "name", &p)?;
    let description = opt_string(&mut f, "description", &p)?;
    let parameters = f.shift_remove("parameters").filter(|v| !v.is_null());
    // Anything else inside `function` (e.g. `strict`) rides along in `extra` under a prefix-free
    // key set of its own: keep it by storing the remaining function fields.
    if !f.is_empty() {
        m.insert("function".into(), Value::Object(f));
    }
    Ok(Tool::Function {
        name,
        description,
        parameters,
        extra: m,
    })
}

pub fn embeddings_from_value(body: Value) -> Result<EmbeddingsRequest, InvalidRequest> {
    let (mut m, model) = body_and_model(body)?;
    let input = match m.shift_remove("input") {
        Some(v @ (Value::String(_) | Value::Array(_))) => v,
        None | Some(Value::Null) => return Err(InvalidRequest::new("input", "is required")),
        Some(other) => {
            return Err(InvalidRequest::new(
                "input",
                format!("expected a string or an array, got {}", kind(&other)),
            ));
        }
    };
    strip_gateway_fields(&mut m);
    Ok(EmbeddingsRequest {
        model,
        input,
        extra: m,
        hops: 0,
    })
}
