//! An upstream's answer → canonical: a whole chat completion, and the stream decoder (one
//! `data:` payload → one canonical chunk). Read leniently: see `lenient_string`.

use serde_json::{Map, Value};

use super::read::{
    Read, ReadError, join, message_from_value, object, opt_array, opt_string, opt_u64,
};
use crate::protocol::{
    ChatResponse, Choice, ChunkChoice, Delta, InvalidUpstream, Message, Role, StreamChunk,
    ToolCallDelta, Usage,
};

fn upstream(what: &'static str) -> impl Fn(ReadError) -> InvalidUpstream {
    move |e| InvalidUpstream {
        what,
        message: format!("{}: {}", e.path, e.message),
    }
}

/// Takes `key` out only when it is a string; anything else stays in the map (and so in the
/// output, as sent). Upstream answers are read leniently: a field the gateway does not need
/// must not turn a good answer into a failed attempt.
fn lenient_string(m: &mut Map<String, Value>, key: &str) -> Option<String> {
    match m.get(key) {
        Some(Value::String(_)) => match m.shift_remove(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// Like [`lenient_string`], for non-negative integers.
fn lenient_u64(m: &mut Map<String, Value>, key: &str) -> Option<u64> {
    let n = m.get(key).and_then(Value::as_u64)?;
    m.shift_remove(key);
    Some(n)
}

fn usage_from_value(v: Value, path: &str) -> Read<Usage> {
    let mut m = object(v, path)?;
    // Read, not moved: the details stay in `extra` for OpenAI clients, exactly as sent.
    let detail = |d: &str, k: &str| m.get(d).and_then(|d| d.get(k)).and_then(Value::as_u64);
    let cached = detail("prompt_tokens_details", "cached_tokens");
    let reasoning = detail("completion_tokens_details", "reasoning_tokens");
    // The counts always leave `extra`, even as null: they are written back from the fields.
    let mut count = |k: &str| m.shift_remove(k).and_then(|v| v.as_u64());
    Ok(Usage {
        cached_tokens: cached,
        reasoning_tokens: reasoning,
        cache_write_tokens: None,
        input_tokens: count("prompt_tokens"),
        output_tokens: count("completion_tokens"),
        total_tokens: count("total_tokens"),
        extra: m,
    })
}

fn opt_usage(m: &mut Map<String, Value>) -> Read<Option<Usage>> {
    match m.shift_remove("usage") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => usage_from_value(v, "usage").map(Some),
    }
}

/// Upstream non-stream body → canonical response.
pub fn response_from_value(body: Value) -> Result<ChatResponse, InvalidUpstream> {
    let conv = upstream("chat completion");
    let mut m = object(body, "").map_err(&conv)?;
    let id = lenient_string(&mut m, "id");
    let model = lenient_string(&mut m, "model");
    let created = lenient_u64(&mut m, "created");
    m.shift_remove("object");
    let raw_choices = opt_array(&mut m, "choices", "")
        .map_err(&conv)?
        .unwrap_or_default();
    let mut choices = Vec::with_capacity(raw_choices.len());
    for (i, c) in raw_choices.into_iter().enumerate() {
        let path = format!("choices[{i}]");
        let mut c = object(c, &path).map_err(&conv)?;
        let index = opt_u64(&mut c, "index", &path)
            .map_err(&conv)?
            .unwrap_or(i as u64) as u32;
        let message = match c.shift_remove("message") {
            Some(v) => message_from_value(v, &join(&path, "message"), Some(Role::Assistant))
                .map_err(&conv)?,
            None => Message {
                role: Role::Assistant,
                content: None,
                name: None,
                tool_calls: Vec::new(),
                tool_call_id: None,
                reasoning: None,
                extra: Map::new(),
                source: None,
            },
        };
        let finish_reason = opt_string(&mut c, "finish_reason", &path).map_err(&conv)?;
        choices.push(Choice {
            index,
            message,
            finish_reason,
            extra: c,
        });
    }
    let usage = opt_usage(&mut m).map_err(&conv)?;
    Ok(ChatResponse {
        id,
        model,
        created,
        choices,
        usage,
        extra: m,
        raw: None,
        as_sent: None,
    })
}

/// One upstream SSE `data:` payload → canonical chunk; `None` for an error event (an `error`
/// object and no choices).
pub fn chunk_from_str(data: &str) -> Result<Option<StreamChunk>, InvalidUpstream> {
    let v: Value = serde_json::from_str(data).map_err(|e| InvalidUpstream {
        what: "stream chunk",
        message: e.to_string(),
    })?;
    if v.get("error").is_some() && v.get("choices").is_none() {
        return Ok(None);
    }
    chunk_from_value(v).map(Some)
}

pub fn chunk_from_value(v: Value) -> Result<StreamChunk, InvalidUpstream> {
    let conv = upstream("stream chunk");
    let mut m = object(v, "").map_err(&conv)?;
    let id = lenient_string(&mut m, "id");
    let model = lenient_string(&mut m, "model");
    let created = lenient_u64(&mut m, "created");
    m.shift_remove("object");
    let raw = opt_array(&mut m, "choices", "")
        .map_err(&conv)?
        .unwrap_or_default();
    let mut choices = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        let path = format!("choices[{i}]");
        let mut c = object(c, &path).map_err(&conv)?;
        let index = opt_u64(&mut c, "index", &path)
            .map_err(&conv)?
            .unwrap_or(i as u64) as u32;
        let delta = match c.shift_remove("delta") {
            None | Some(Value::Null) => Delta::default(),
            Some(v) => delta_from_value(v, &join(&path, "delta")).map_err(&conv)?,
        };
        let finish_reason = opt_string(&mut c, "finish_reason", &path).map_err(&conv)?;
        choices.push(ChunkChoice {
            index,
            delta,
            finish_reason,
            extra: c,
        });
    }
    let usage = opt_usage(&mut m).map_err(&conv)?;
    Ok(StreamChunk {
        id,
        model,
        created,
        choices,
        usage,
        extra: m,
        raw: None,
    })
}

fn delta_from_value(v: Value, path: &str) -> Read<Delta> {
    let mut m = object(v, path)?;
    let role = opt_string(&mut m, "role", path)?.map(Role::parse);
    let content = opt_string(&mut m, "content", path)?;
    let reasoning = opt_string(&mut m, "reasoning_content", path)?;
    let mut tool_calls = Vec::new();
    for (i, tc) in opt_array(&mut m, "tool_calls", path)?
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let p = format!("{path}.tool_calls[{i}]");
        let mut t = object(tc, &p)?;
        let index = opt_u64(&mut t, "index", &p)?.unwrap_or(i as u64) as u32;
        let id = lenient_string(&mut t, "id");
        let kind = lenient_string(&mut t, "type");
        // A plain `function` object is modelled; any other shape stays in `extra` as sent.
        let plain = matches!(t.get("function"), Some(Value::Object(f))
            if f.iter().all(|(k, v)| (k == "name" || k == "arguments") && v.is_string()));
        let (function, name, arguments) = if plain {
            let mut f = object(t.shift_remove("function").unwrap_or_default(), &p)?;
            (
                true,
                lenient_string(&mut f, "name"),
                lenient_string(&mut f, "arguments"),
            )
        } else {
            (false, None, None)
        };
        tool_calls.push(ToolCallDelta {
            index,
            id,
            kind,
            function,
            name,
            arguments,
            extra: t,
        });
    }
    Ok(Delta {
        role,
        content,
        reasoning,
        tool_calls,
        extra: m,
    })
}
