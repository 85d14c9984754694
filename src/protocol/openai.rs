//! OpenAI Chat Completions: `from_*` (wire JSON → canonical) and `to_*` (canonical → wire JSON).
//!
//! Parsing moves values out of the already-parsed body (no second parse, no string copies);
//! serialising writes straight from the canonical types through `Serialize` views, so a request
//! costs one parse in and one write out per attempt.

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use super::{
    ChatRequest, ChatResponse, Choice, ChunkChoice, Content, Delta, EmbeddingsRequest,
    InvalidRequest, InvalidUpstream, MaxTokensField, Message, Part, Role, Stop, StreamChunk, Tool,
    ToolCall, ToolCallDelta, Usage,
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

/// A field-path error while reading JSON; the caller decides whose mistake it is.
#[derive(Debug)]
pub struct ReadError {
    pub path: String,
    pub message: String,
}

impl From<ReadError> for InvalidRequest {
    fn from(e: ReadError) -> Self {
        InvalidRequest::new(e.path, e.message)
    }
}

type Read<T> = Result<T, ReadError>;

fn bad<T>(path: impl Into<String>, message: impl Into<String>) -> Read<T> {
    Err(ReadError {
        path: path.into(),
        message: message.into(),
    })
}

use super::json_kind as kind;

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

fn object(v: Value, path: &str) -> Read<Map<String, Value>> {
    match v {
        Value::Object(m) => Ok(m),
        other => bad(path, format!("expected an object, got {}", kind(&other))),
    }
}

fn opt_string(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<String>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => bad(
            join(base, key),
            format!("expected a string, got {}", kind(&other)),
        ),
    }
}

fn req_string(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<String> {
    opt_string(m, key, base)?.map_or_else(|| bad(join(base, key), "is required"), Ok)
}

fn opt_bool(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<bool>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(other) => bad(
            join(base, key),
            format!("expected a boolean, got {}", kind(&other)),
        ),
    }
}

fn opt_number(
    m: &mut Map<String, Value>,
    key: &str,
    base: &str,
) -> Read<Option<serde_json::Number>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n)),
        Some(other) => bad(
            join(base, key),
            format!("expected a number, got {}", kind(&other)),
        ),
    }
}

fn opt_u64(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<u64>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => bad(
            join(base, key),
            format!("expected a non-negative integer, got {}", kind(&other)),
        ),
    }
}

fn opt_array(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<Vec<Value>>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => bad(
            join(base, key),
            format!("expected an array, got {}", kind(&other)),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// Client body → canonical request. Errors carry the field path as `param`.
pub fn request_from_value(body: Value) -> Result<ChatRequest, InvalidRequest> {
    let mut m = object(body, "").map_err(|_| InvalidRequest {
        param: None,
        message: "the request body must be a JSON object".into(),
    })?;
    let model = req_string(&mut m, "model", "")?;
    if model.is_empty() {
        return Err(InvalidRequest::new("model", "must not be empty"));
    }
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
        origin: super::Protocol::OpenAiChat,
        raw: None,
        extra: m,
        hops: 0,
    })
}

/// `default_role`: upstream answers may omit the role (it can only be the assistant's).
fn message_from_value(v: Value, path: &str, default_role: Option<Role>) -> Read<Message> {
    let mut m = object(v, path)?;
    let role = match (opt_string(&mut m, "role", path)?, default_role) {
        (Some(r), _) => Role::parse(r),
        (None, Some(r)) => r,
        (None, None) => return bad(join(path, "role"), "is required"),
    };
    let content = match m.shift_remove("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Content::Text(s)),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (i, p) in parts.into_iter().enumerate() {
                out.push(part_from_value(p, &format!("{path}.content[{i}]"))?);
            }
            Some(Content::Parts(out))
        }
        Some(other) => {
            return bad(
                join(path, "content"),
                format!(
                    "expected a string or an array of parts, got {}",
                    kind(&other)
                ),
            );
        }
    };
    let name = opt_string(&mut m, "name", path)?;
    let tool_calls = match opt_array(&mut m, "tool_calls", path)? {
        None => Vec::new(),
        Some(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| tool_call_from_value(v, &format!("{path}.tool_calls[{i}]")))
            .collect::<Read<_>>()?,
    };
    let tool_call_id = opt_string(&mut m, "tool_call_id", path)?;
    let reasoning = opt_string(&mut m, "reasoning_content", path)?;
    Ok(Message {
        role,
        content,
        name,
        tool_calls,
        tool_call_id,
        reasoning,
        extra: m,
        source: None,
    })
}

fn part_from_value(v: Value, path: &str) -> Read<Part> {
    let mut m = object(v, path)?;
    match m.get("type").and_then(Value::as_str) {
        Some("text") => {
            m.shift_remove("type");
            let text = req_string(&mut m, "text", path)?;
            Ok(Part::Text { text, extra: m })
        }
        // The string form of `image_url` some clients send is kept as is (Other).
        Some("image_url") if m.get("image_url").is_some_and(Value::is_object) => {
            m.shift_remove("type");
            let p = join(path, "image_url");
            let mut img = match m.shift_remove("image_url") {
                Some(v) => object(v, &p)?,
                None => return bad(p, "is required"),
            };
            let url = req_string(&mut img, "url", &p)?;
            let detail = opt_string(&mut img, "detail", &p)?;
            // Unknown fields inside image_url are rare; keep them by falling back to Other.
            if !img.is_empty() {
                img.insert("url".into(), Value::String(url));
                if let Some(d) = detail {
                    img.insert("detail".into(), Value::String(d));
                }
                m.insert("type".into(), Value::String("image_url".into()));
                m.insert("image_url".into(), Value::Object(img));
                return Ok(Part::Other(Value::Object(m)));
            }
            Ok(Part::Image {
                url,
                detail,
                extra: m,
            })
        }
        Some(_) => Ok(Part::Other(Value::Object(m))),
        None => bad(join(path, "type"), "is required"),
    }
}

/// A plain function call becomes `ToolCall::Function`; anything else (other types, a missing
/// `type`, non-string arguments, extra keys in `function`) is kept exactly as sent.
fn tool_call_from_value(v: Value, path: &str) -> Read<ToolCall> {
    let mut m = object(v, path)?;
    let plain = m.get("type").and_then(Value::as_str) == Some("function")
        && m.get("id").is_none_or(Value::is_string)
        && matches!(m.get("function"), Some(Value::Object(f))
            if f.get("name").is_some_and(Value::is_string)
                && f.get("arguments").is_none_or(Value::is_string)
                && f.keys().all(|k| k == "name" || k == "arguments"));
    if !plain {
        return Ok(ToolCall::Other(Value::Object(m)));
    }
    m.shift_remove("type");
    let p = join(path, "function");
    let mut f = match m.shift_remove("function") {
        Some(v) => object(v, &p)?,
        None => return bad(p, "is required"),
    };
    let id = opt_string(&mut m, "id", path)?;
    let name = req_string(&mut f, "name", &p)?;
    let arguments = opt_string(&mut f, "arguments", &p)?;
    Ok(ToolCall::Function {
        id,
        name,
        arguments,
        extra: m,
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

/// Canonical request → upstream body, written directly (no intermediate JSON tree).
pub struct RequestBody<'a> {
    pub req: &'a ChatRequest,
    /// The model name the upstream knows.
    pub model: &'a str,
    /// Ask the upstream for a usage chunk even when the client did not (for the request log).
    pub force_usage: bool,
}

impl Serialize for RequestBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.req;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("messages", &Seq(&r.messages, MessageView))?;
        if r.stream {
            m.serialize_entry("stream", &true)?;
        }
        if let Some((field, n)) = r.max_tokens {
            let key = match field {
                MaxTokensField::MaxTokens => "max_tokens",
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            };
            m.serialize_entry(key, &n)?;
        }
        if let Some(t) = &r.temperature {
            m.serialize_entry("temperature", t)?;
        }
        if let Some(t) = &r.top_p {
            m.serialize_entry("top_p", t)?;
        }
        match &r.stop {
            Some(Stop::One(s)) => m.serialize_entry("stop", s)?,
            Some(Stop::Many(v)) => m.serialize_entry("stop", v)?,
            None => {}
        }
        if !r.tools.is_empty() {
            m.serialize_entry("tools", &Seq(&r.tools, ToolView))?;
        }
        if let Some(tc) = &r.tool_choice {
            m.serialize_entry("tool_choice", tc)?;
        }
        let want_usage = r.stream && (self.force_usage || r.stream_include_usage);
        let mut wrote_options = false;
        // Another protocol's own fields (Anthropic's metadata, top_k...) mean nothing here; a
        // Responses request's were made Chat Completions fields when it was read.
        let same = r.origin.speaks_chat();
        for (k, v) in r.extra.iter().filter(|_| same) {
            if k == "stream_options" {
                if !r.stream {
                    continue; // OpenAI rejects stream_options without stream
                }
                let mut o = v.as_object().cloned().unwrap_or_default();
                if want_usage {
                    o.insert("include_usage".into(), Value::Bool(true));
                }
                m.serialize_entry(k, &o)?;
                wrote_options = true;
            } else {
                m.serialize_entry(k, v)?;
            }
        }
        if want_usage && !wrote_options {
            m.serialize_entry(
                "stream_options",
                &serde_json::json!({ "include_usage": true }),
            )?;
        }
        m.end()
    }
}

/// Serialises a slice through a per-item view (`Seq(&msgs, MessageView)`).
struct Seq<'a, T, V>(&'a [T], fn(&'a T) -> V);

impl<'a, T, V: Serialize> Serialize for Seq<'a, T, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}

/// A small JSON object of optional string fields, written without building a `Map`.
struct Fields<'a, const N: usize>([(&'static str, Option<&'a str>); N]);

impl<const N: usize> Serialize for Fields<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.0 {
            if let Some(v) = v {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// Writes the fields a canonical type does not model, in their original order.
fn write_extra<M: SerializeMap>(m: &mut M, extra: &Map<String, Value>) -> Result<(), M::Error> {
    for (k, v) in extra {
        m.serialize_entry(k, v)?;
    }
    Ok(())
}

/// `id`, `object`, `created`, `model`: the head of a completion and of a chunk.
fn write_head<M: SerializeMap>(
    m: &mut M,
    id: &Option<String>,
    object: &'static str,
    created: Option<u64>,
    model: &Option<String>,
) -> Result<(), M::Error> {
    if let Some(id) = id {
        m.serialize_entry("id", id)?;
    }
    m.serialize_entry("object", object)?;
    if let Some(c) = created {
        m.serialize_entry("created", &c)?;
    }
    if let Some(model) = model {
        m.serialize_entry("model", model)?;
    }
    Ok(())
}

struct MessageView<'a>(&'a Message);
impl Serialize for MessageView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let msg = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", msg.role.as_str())?;
        match &msg.content {
            Some(Content::Text(t)) => m.serialize_entry("content", t)?,
            Some(Content::Parts(ps)) => m.serialize_entry("content", &Seq(ps, PartView))?,
            // An assistant turn that only calls tools carries `content: null` on the wire.
            None => m.serialize_entry("content", &Value::Null)?,
        }
        if let Some(n) = &msg.name {
            m.serialize_entry("name", n)?;
        }
        if !msg.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &Seq(&msg.tool_calls, ToolCallView))?;
        }
        if let Some(id) = &msg.tool_call_id {
            m.serialize_entry("tool_call_id", id)?;
        }
        if let Some(r) = &msg.reasoning {
            m.serialize_entry("reasoning_content", r)?;
        }
        write_extra(&mut m, &msg.extra)?;
        m.end()
    }
}

struct PartView<'a>(&'a Part);
impl Serialize for PartView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Part::Text { text, extra } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "text")?;
                m.serialize_entry("text", text)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            Part::Image { url, detail, extra } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "image_url")?;
                let img = Fields([("url", Some(url.as_str())), ("detail", detail.as_deref())]);
                m.serialize_entry("image_url", &img)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            Part::Other(v) => v.serialize(s),
        }
    }
}

struct ToolCallView<'a>(&'a ToolCall);
impl Serialize for ToolCallView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ToolCall::Function {
                id,
                name,
                arguments,
                extra,
            } => {
                let mut m = s.serialize_map(None)?;
                if let Some(id) = id {
                    m.serialize_entry("id", id)?;
                }
                m.serialize_entry("type", "function")?;
                let f = Fields([
                    ("name", Some(name.as_str())),
                    ("arguments", arguments.as_deref()),
                ]);
                m.serialize_entry("function", &f)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            ToolCall::Other(v) => v.serialize(s),
        }
    }
}

struct ToolView<'a>(&'a Tool);
impl Serialize for ToolView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Tool::Function {
                name,
                description,
                parameters,
                extra,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "function")?;
                let mut f = Map::new();
                f.insert("name".into(), Value::String(name.clone()));
                if let Some(d) = description {
                    f.insert("description".into(), Value::String(d.clone()));
                }
                if let Some(p) = parameters {
                    f.insert("parameters".into(), p.clone());
                }
                let mut rest = extra.clone();
                if let Some(Value::Object(more)) = rest.shift_remove("function") {
                    f.extend(more);
                }
                m.serialize_entry("function", &f)?;
                write_extra(&mut m, &rest)?;
                m.end()
            }
            Tool::Other(v) => v.serialize(s),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

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
    let cached = m
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64);
    Ok(Usage {
        cached_tokens: cached,
        input_tokens: lenient_u64(&mut m, "prompt_tokens"),
        output_tokens: lenient_u64(&mut m, "completion_tokens"),
        total_tokens: lenient_u64(&mut m, "total_tokens"),
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
    })
}

struct UsageView<'a>(&'a Usage);

impl Serialize for UsageView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let u = self.0;
        let mut m = s.serialize_map(None)?;
        if let Some(n) = u.input_tokens {
            m.serialize_entry("prompt_tokens", &n)?;
        }
        if let Some(n) = u.output_tokens {
            m.serialize_entry("completion_tokens", &n)?;
        }
        if let Some(n) = u.total_tokens {
            m.serialize_entry("total_tokens", &n)?;
        }
        if let Some(n) = u.cached_tokens
            && !u.extra.contains_key("prompt_tokens_details")
        {
            m.serialize_entry(
                "prompt_tokens_details",
                &serde_json::json!({"cached_tokens": n}),
            )?;
        }
        write_extra(&mut m, &u.extra)?;
        m.end()
    }
}

/// Canonical response → client body, with Switchyard's failover report when there is one.
pub struct ResponseBody<'a> {
    pub resp: &'a ChatResponse,
    pub report: Option<&'a Value>,
}

impl Serialize for ResponseBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.resp;
        let mut m = s.serialize_map(None)?;
        write_head(&mut m, &r.id, "chat.completion", r.created, &r.model)?;
        struct ChoiceView<'a>(&'a Choice);
        impl Serialize for ChoiceView<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let c = self.0;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("index", &c.index)?;
                m.serialize_entry("message", &MessageView(&c.message))?;
                m.serialize_entry("finish_reason", &c.finish_reason)?;
                write_extra(&mut m, &c.extra)?;
                m.end()
            }
        }
        m.serialize_entry("choices", &Seq(&r.choices, ChoiceView))?;
        if let Some(u) = &r.usage {
            m.serialize_entry("usage", &UsageView(u))?;
        }
        for (k, v) in &r.extra {
            if k != "switchyard" {
                m.serialize_entry(k, v)?;
            }
        }
        if let Some(rep) = self.report {
            m.serialize_entry("switchyard", rep)?;
        }
        m.end()
    }
}

// ---------------------------------------------------------------------------------------------
// Stream chunks

/// One upstream SSE `data:` payload → canonical chunk.
pub fn chunk_from_str(data: &str) -> Result<StreamChunk, InvalidUpstream> {
    let v: Value = serde_json::from_str(data).map_err(|e| InvalidUpstream {
        what: "stream chunk",
        message: e.to_string(),
    })?;
    chunk_from_value(v)
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

/// Canonical chunk → the JSON of one client `data:` line.
pub struct ChunkBody<'a> {
    pub chunk: &'a StreamChunk,
    /// Write `"usage": null` on chunks without usage, as OpenAI does for a client that asked
    /// for `stream_options.include_usage`.
    pub usage_null: bool,
}

impl Serialize for ChunkBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.chunk;
        let mut m = s.serialize_map(None)?;
        write_head(&mut m, &c.id, "chat.completion.chunk", c.created, &c.model)?;
        struct ChunkChoiceView<'a>(&'a ChunkChoice);
        impl Serialize for ChunkChoiceView<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let c = self.0;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("index", &c.index)?;
                m.serialize_entry("delta", &DeltaView(&c.delta))?;
                m.serialize_entry("finish_reason", &c.finish_reason)?;
                write_extra(&mut m, &c.extra)?;
                m.end()
            }
        }
        m.serialize_entry("choices", &Seq(&c.choices, ChunkChoiceView))?;
        match &c.usage {
            Some(u) => m.serialize_entry("usage", &UsageView(u))?,
            None if self.usage_null => m.serialize_entry("usage", &Value::Null)?,
            None => {}
        }
        write_extra(&mut m, &c.extra)?;
        m.end()
    }
}

struct ToolCallDeltaView<'a>(&'a ToolCallDelta);
impl Serialize for ToolCallDeltaView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("index", &t.index)?;
        if let Some(id) = &t.id {
            m.serialize_entry("id", id)?;
        }
        if let Some(k) = &t.kind {
            m.serialize_entry("type", k)?;
        }
        if t.function {
            let f = Fields([
                ("name", t.name.as_deref()),
                ("arguments", t.arguments.as_deref()),
            ]);
            m.serialize_entry("function", &f)?;
        }
        write_extra(&mut m, &t.extra)?;
        m.end()
    }
}

struct DeltaView<'a>(&'a Delta);
impl Serialize for DeltaView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut m = s.serialize_map(None)?;
        if let Some(r) = &d.role {
            m.serialize_entry("role", r.as_str())?;
        }
        if let Some(c) = &d.content {
            m.serialize_entry("content", c)?;
        }
        if let Some(r) = &d.reasoning {
            m.serialize_entry("reasoning_content", r)?;
        }
        if !d.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &Seq(&d.tool_calls, ToolCallDeltaView))?;
        }
        write_extra(&mut m, &d.extra)?;
        m.end()
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

pub fn embeddings_from_value(body: Value) -> Result<EmbeddingsRequest, InvalidRequest> {
    let mut m = object(body, "").map_err(|_| InvalidRequest {
        param: None,
        message: "the request body must be a JSON object".into(),
    })?;
    let model = req_string(&mut m, "model", "")?;
    if model.is_empty() {
        return Err(InvalidRequest::new("model", "must not be empty"));
    }
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

pub struct EmbeddingsBody<'a> {
    pub req: &'a EmbeddingsRequest,
    pub model: &'a str,
}

impl Serialize for EmbeddingsBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("input", &self.req.input)?;
        write_extra(&mut m, &self.req.extra)?;
        m.end()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// The OpenAI error envelope: `{"error": {"message","type","param","code", ...extra}}`.
pub fn error_body(
    message: &str,
    kind: &str,
    code: &str,
    param: Option<&str>,
    extra: Option<(&str, Value)>,
) -> Value {
    let mut e = Map::new();
    e.insert("message".into(), Value::String(message.into()));
    e.insert("type".into(), Value::String(kind.into()));
    e.insert(
        "param".into(),
        param.map_or(Value::Null, |p| Value::String(p.into())),
    );
    e.insert("code".into(), Value::String(code.into()));
    if let Some((k, v)) = extra {
        e.insert(k.into(), v);
    }
    let mut outer = Map::new();
    outer.insert("error".into(), Value::Object(e));
    Value::Object(outer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(out, input);
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
            chunk_from_value(json!({"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}))
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
        assert_eq!(out["usage"], json!({"prompt_tokens": 2}));
        let plain = chunk_from_value(json!({"choices": []})).unwrap();
        let out = serde_json::to_value(ChunkBody {
            chunk: &plain,
            usage_null: true,
        })
        .unwrap();
        assert_eq!(out["usage"], Value::Null);
    }
}
