//! Structure-aware fuzz inputs: the fuzzer's bytes read as decisions (`arbitrary`'s
//! `Unstructured`) that build JSON shaped like a protocol's request or a Bedrock stream's
//! events (object keys and string values drawn mostly from the protocol's own words), so
//! mutations explore what the readers do with near-valid input instead of failing at the
//! first byte of JSON syntax.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value};

/// Keys and values a Chat Completions request uses.
pub const OPENAI: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "tool_calls",
    "tool_call_id",
    "id",
    "function",
    "name",
    "arguments",
    "type",
    "text",
    "image_url",
    "url",
    "detail",
    "input_audio",
    "file",
    "refusal",
    "stream",
    "stream_options",
    "include_usage",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "tools",
    "tool_choice",
    "parameters",
    "description",
    "strict",
    "response_format",
    "json_schema",
    "json_object",
    "schema",
    "n",
    "metadata",
    "models",
    "fallback_models",
    "redundancy",
    "reasoning_effort",
    "reasoning_content",
    "auto",
    "required",
    "none",
    "parallel_tool_calls",
    "data:image/png;base64,iVBORw0KGgo=",
    "https://example.com/a.png",
];

/// Keys and values an Anthropic Messages request uses.
pub const ANTHROPIC: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "user",
    "assistant",
    "system",
    "type",
    "text",
    "image",
    "source",
    "base64",
    "url",
    "media_type",
    "image/png",
    "data",
    "tool_use",
    "tool_result",
    "tool_use_id",
    "id",
    "name",
    "input",
    "is_error",
    "thinking",
    "signature",
    "redacted_thinking",
    "document",
    "cache_control",
    "ephemeral",
    "max_tokens",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "tools",
    "tool_choice",
    "input_schema",
    "description",
    "auto",
    "any",
    "none",
    "metadata",
    "user_id",
    "budget_tokens",
    "enabled",
    "output_config",
    "format",
    "json_schema",
    "schema",
    "models",
    "fallback_models",
];

/// Keys and values a Gemini `generateContent` request uses.
pub const GEMINI: &[&str] = &[
    "contents",
    "role",
    "user",
    "model",
    "parts",
    "text",
    "thought",
    "thoughtSignature",
    "inlineData",
    "inline_data",
    "mimeType",
    "mime_type",
    "image/png",
    "data",
    "fileData",
    "fileUri",
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
    "name",
    "args",
    "response",
    "id",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "stopSequences",
    "responseMimeType",
    "application/json",
    "responseSchema",
    "responseJsonSchema",
    "thinkingConfig",
    "thinkingBudget",
    "includeThoughts",
    "tools",
    "functionDeclarations",
    "function_declarations",
    "parameters",
    "description",
    "toolConfig",
    "functionCallingConfig",
    "mode",
    "AUTO",
    "ANY",
    "NONE",
    "allowedFunctionNames",
    "safetySettings",
    "cachedContent",
];

/// Keys and values a Responses API request uses.
pub const RESPONSES: &[&str] = &[
    "model",
    "input",
    "instructions",
    "role",
    "content",
    "user",
    "assistant",
    "system",
    "developer",
    "type",
    "message",
    "input_text",
    "output_text",
    "input_image",
    "image_url",
    "input_file",
    "text",
    "function_call",
    "function_call_output",
    "call_id",
    "name",
    "arguments",
    "output",
    "reasoning",
    "summary",
    "summary_text",
    "effort",
    "id",
    "status",
    "tools",
    "function",
    "web_search",
    "parameters",
    "strict",
    "tool_choice",
    "auto",
    "required",
    "none",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "store",
    "previous_response_id",
    "format",
    "json_schema",
    "json_object",
    "schema",
    "metadata",
    "truncation",
    "include",
    "parallel_tool_calls",
];

/// ConverseStream's event names and the keys and values of their payloads.
pub const CONVERSE: &[&str] = &[
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
    "role",
    "assistant",
    "contentBlockIndex",
    "start",
    "delta",
    "text",
    "toolUse",
    "toolUseId",
    "name",
    "input",
    "reasoningContent",
    "reasoningText",
    "signature",
    "redactedContent",
    "stopReason",
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "guardrail_intervened",
    "content_filtered",
    "usage",
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "cacheReadInputTokens",
    "cacheWriteInputTokens",
    "metrics",
    "latencyMs",
    "message",
    "additionalModelResponseFields",
];

/// InvokeModel's chunks carry Anthropic's stream events.
pub const ANTHROPIC_EVENTS: &[&str] = &[
    "type",
    "message_start",
    "message",
    "id",
    "role",
    "assistant",
    "content",
    "model",
    "usage",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "content_block_start",
    "index",
    "content_block",
    "text",
    "thinking",
    "tool_use",
    "name",
    "input",
    "content_block_delta",
    "delta",
    "text_delta",
    "thinking_delta",
    "signature_delta",
    "signature",
    "input_json_delta",
    "partial_json",
    "content_block_stop",
    "message_delta",
    "stop_reason",
    "end_turn",
    "max_tokens",
    "message_stop",
    "ping",
    "error",
    "amazon-bedrock-invocationMetrics",
];

/// A string: one of `words` mostly, else the fuzzer's own.
fn word(u: &mut Unstructured, words: &[&str]) -> Result<String> {
    if u.ratio(7, 8)? {
        Ok(u.choose(words)?.to_string())
    } else {
        u.arbitrary()
    }
}

/// A JSON array of up to `max` items, each made by `item`.
fn array(
    u: &mut Unstructured,
    max: usize,
    mut item: impl FnMut(&mut Unstructured) -> Result<Value>,
) -> Result<Value> {
    let n = u.int_in_range(0..=max)?;
    let items: Result<Vec<Value>> = (0..n).map(|_| item(u)).collect();
    items.map(Value::Array)
}

/// A JSON value whose keys and strings come mostly from `words`, nested at most `depth` deep.
pub fn value(u: &mut Unstructured, words: &[&str], depth: u32) -> Result<Value> {
    let kinds = if depth == 0 { 5 } else { 8 };
    Ok(match u.choose_index(kinds)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.int_in_range(-2i64..=100_000)?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        4 | 5 => Value::String(word(u, words)?),
        6 => array(u, 4, |u| value(u, words, depth - 1))?,
        _ => object(u, words, depth - 1)?,
    })
}

/// A JSON object of up to six members, keys from `words`.
pub fn object(u: &mut Unstructured, words: &[&str], depth: u32) -> Result<Value> {
    members(u, words, depth).map(Value::Object)
}

fn members(u: &mut Unstructured, words: &[&str], depth: u32) -> Result<Map<String, Value>> {
    let n = u.int_in_range(0..=6)?;
    let mut m = Map::new();
    for _ in 0..n {
        let k = word(u, words)?;
        let v = value(u, words, depth)?;
        m.insert(k, v);
    }
    Ok(m)
}

/// The fixed top level of a protocol's request: where its message list sits, the roles and
/// the kinds of content part it knows. Beneath and beside it, members are shaped as above.
pub struct Shape {
    pub words: &'static [&'static str],
    /// The body names its model (Gemini's is in the path).
    pub model: bool,
    pub list: &'static str,
    pub roles: &'static [&'static str],
    pub content: &'static str,
    /// Each part's `type`; for Gemini, which member a part has.
    pub parts: &'static [&'static str],
    /// A message's own `type` (Responses' input items), when the protocol has one.
    pub items: &'static [&'static str],
    /// Parts are `{"type", "text", …}` objects and content may be a plain string; else
    /// (Gemini) a part is one member named by its kind.
    pub typed: bool,
    /// The body must say `max_tokens` (Anthropic).
    pub max_tokens: bool,
}

pub const OPENAI_SHAPE: Shape = Shape {
    words: OPENAI,
    model: true,
    list: "messages",
    roles: &["system", "developer", "user", "assistant", "tool"],
    content: "content",
    parts: &["text", "image_url", "input_audio", "file", "refusal"],
    items: &[],
    typed: true,
    max_tokens: false,
};

pub const ANTHROPIC_SHAPE: Shape = Shape {
    words: ANTHROPIC,
    model: true,
    list: "messages",
    roles: &["user", "assistant"],
    content: "content",
    parts: &[
        "text",
        "image",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "document",
    ],
    items: &[],
    typed: true,
    max_tokens: true,
};

pub const GEMINI_SHAPE: Shape = Shape {
    words: GEMINI,
    model: false,
    list: "contents",
    roles: &["user", "model"],
    content: "parts",
    parts: &[
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "thought",
    ],
    items: &[],
    typed: false,
    max_tokens: false,
};

pub const RESPONSES_SHAPE: Shape = Shape {
    words: RESPONSES,
    model: true,
    list: "input",
    roles: &["user", "assistant", "system", "developer"],
    content: "content",
    parts: &[
        "input_text",
        "output_text",
        "input_image",
        "input_file",
        "refusal",
    ],
    items: &[
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
    ],
    typed: true,
    max_tokens: false,
};

/// A request with `shape`'s top level: its model, a list of up to six messages, each with a
/// role and its content as text or parts; the other members shaped by the protocol's words.
pub fn request(u: &mut Unstructured, shape: &Shape) -> Result<Value> {
    let mut top = members(u, shape.words, 2)?;
    if shape.model && u.ratio(15, 16)? {
        top.insert(
            "model".into(),
            Value::String(word(u, &["gpt-4o", "claude", "m"])?),
        );
    }
    if shape.max_tokens && u.ratio(7, 8)? {
        top.insert(
            "max_tokens".into(),
            Value::from(u.int_in_range(-1i64..=4096)?),
        );
    }
    top.insert(shape.list.into(), array(u, 6, |u| message(u, shape))?);
    Ok(Value::Object(top))
}

fn message(u: &mut Unstructured, shape: &Shape) -> Result<Value> {
    let mut m = members(u, shape.words, 1)?;
    if u.ratio(7, 8)? {
        m.insert("role".into(), Value::String(word(u, shape.roles)?));
    }
    if !shape.items.is_empty() && u.ratio(1, 2)? {
        m.insert("type".into(), Value::String(word(u, shape.items)?));
    }
    let content = if shape.typed && u.ratio(1, 3)? {
        Value::String(u.arbitrary()?)
    } else {
        array(u, 4, |u| part(u, shape))?
    };
    m.insert(shape.content.into(), content);
    Ok(Value::Object(m))
}

fn part(u: &mut Unstructured, shape: &Shape) -> Result<Value> {
    let mut p = members(u, shape.words, 1)?;
    let kind = word(u, shape.parts)?;
    let text = Value::String(u.arbitrary()?);
    if shape.typed {
        p.insert("text".into(), text);
        p.insert("type".into(), Value::String(kind));
    } else if kind == "text" {
        p.insert(kind, text);
    } else {
        p.insert(kind, object(u, shape.words, 2)?);
    }
    Ok(Value::Object(p))
}
