//! OpenAI Responses API (`POST /v1/responses`) ↔ the canonical request, response and stream.
//!
//! A Responses request is read whole (the client sends its history, as Codex does with
//! `store: false`, or the server puts a kept conversation before its input for a
//! `previous_response_id`): its input items become Chat Completions messages (instructions first,
//! a function call and the assistant text before it one turn, each call output a tool message),
//! its fields their Chat Completions equivalents (`max_output_tokens`, `text.format`,
//! `reasoning.effort`), and it is then read as an OpenAI chat request, so every channel kind
//! serves it. Hosted tools (web search, file search...) have no Chat Completions form: they are
//! dropped and named in `x-switchyard-translation`. `custom` tools (free-form input) travel as
//! functions with one `input` string and come back as `custom_tool_call`s.
//!
//! Answers are rebuilt as Responses objects; streams as the documented event sequence:
//! `response.created`, `response.in_progress`, per output item `response.output_item.added`,
//! its part and delta events, `response.output_item.done`, and `response.completed` (or
//! `response.incomplete` at the token limit, `response.failed` after a fault).

use serde_json::{Map, Value, json};

use super::{ChatRequest, ChatResponse, Content, InvalidRequest, StreamChunk, ToolCall, Usage};

/// What the answer must echo of the request, and what reading it dropped.
#[derive(Debug, Clone)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    /// The request's own fields the Response object repeats (instructions, tools...).
    fields: Map<String, Value>,
    /// Names of `custom` tools: a call to one is answered as a `custom_tool_call`.
    custom_tools: Vec<String>,
    /// Named by field or tool type, never by value.
    pub losses: Vec<String>,
    /// The client lets responses be kept (`store` is not `false`).
    pub store: bool,
    /// The conversation as sent (input items), to keep with the answer (empty with `store: false`).
    conversation: Vec<Value>,
}

impl Echo {
    /// The conversation to keep after this answer: what was sent, then `output`; `None` when
    /// the client said `store: false` or it is over the size cap.
    pub fn kept_with(&self, output: &[Value]) -> Option<String> {
        if !self.store {
            return None;
        }
        let mut all = self.conversation.clone();
        all.extend(output.iter().cloned());
        serde_json::to_string(&all)
            .ok()
            .filter(|t| t.len() <= MAX_KEPT_BYTES)
    }
}

/// Request fields a Response object repeats as sent.
const ECHOED: &[&str] = &[
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
];

/// Fields with the same name and meaning in Chat Completions: passed on as they are.
const SAME_IN_CHAT: &[&str] = &[
    "temperature",
    "top_p",
    "stream",
    "parallel_tool_calls",
    "prompt_cache_key",
    "user",
    "service_tier",
    "safety_identifier",
    "metadata",
];

fn bad(param: &str, message: impl Into<String>) -> InvalidRequest {
    InvalidRequest::new(param, message)
}

use super::json_kind as kind;

fn random_hex(n: usize) -> String {
    let mut rng = fastrand::Rng::new();
    (0..n)
        .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap_or('0'))
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `previous_response_id` a request continues from, if any.
pub fn previous_response_id(body: &Value) -> Option<&str> {
    body.get("previous_response_id").and_then(Value::as_str)
}

/// A request's `input` as items (a string is one user message).
fn input_items(body: &Value) -> Vec<Value> {
    match &body["input"] {
        Value::String(s) => vec![json!({"role": "user", "content": s})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

/// Continues a kept conversation: its items, then the request's own input, and no
/// `previous_response_id` (the request is whole again, for any channel).
pub fn continue_from(body: &mut Value, kept: &str) -> Result<(), InvalidRequest> {
    let mut items: Vec<Value> = serde_json::from_str(kept).map_err(|_| InvalidRequest {
        param: Some("previous_response_id".into()),
        message: "the kept conversation of this response could not be read".into(),
    })?;
    items.extend(input_items(body));
    if let Some(o) = body.as_object_mut() {
        o.remove("previous_response_id");
        o.insert("input".into(), Value::Array(items));
    }
    Ok(())
}

/// Whether an item id was made by this gateway (`msg_sy…`, `rs_sy…`: never an upstream's hex).
fn minted(id: &str) -> bool {
    id.split_once('_')
        .is_some_and(|(_, rest)| rest.starts_with("sy"))
}

/// A Responses body for an upstream that speaks the API: items this gateway made (for an
/// answer it translated) mean nothing there. Its reasoning items carry no encrypted content and
/// go; other items lose the id it made up, so the upstream does not look for them.
pub fn for_upstream(body: &mut Map<String, Value>) {
    let Some(Value::Array(items)) = body.get_mut("input") else {
        return;
    };
    items.retain(|i| !(i["type"] == "reasoning" && i["id"].as_str().is_some_and(minted)));
    for i in items.iter_mut() {
        if i["id"].as_str().is_some_and(minted)
            && let Some(o) = i.as_object_mut()
        {
            o.remove("id");
        }
    }
}

/// Largest kept conversation (JSON bytes); a longer one keeps only its channel.
pub const MAX_KEPT_BYTES: usize = 1 << 20;

/// A Responses request body → the canonical request (origin: OpenAI chat) and its echo.
pub fn request_from_value(body: Value) -> Result<(ChatRequest, Echo), InvalidRequest> {
    // The client's body as sent, for a channel that speaks the Responses API itself.
    let raw = body.clone();
    let store = body.get("store") != Some(&Value::Bool(false));
    // Copied only when it may be kept: Codex sends `store: false` and its whole history.
    let conversation = if store {
        input_items(&body)
    } else {
        Vec::new()
    };
    let Value::Object(mut m) = body else {
        return Err(InvalidRequest {
            param: None,
            message: "the request body must be a JSON object".into(),
        });
    };
    let mut fields = Map::new();
    for k in ECHOED {
        if let Some(v) = m.get(*k) {
            fields.insert((*k).into(), v.clone());
        }
    }
    let mut losses = Vec::new();
    let mut chat = Map::new();
    match m.remove("model") {
        Some(Value::String(s)) if !s.is_empty() => {
            chat.insert("model".into(), Value::String(s));
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(bad("model", "is required"));
        }
        Some(other) => {
            return Err(bad(
                "model",
                format!("expected a string, got {}", kind(&other)),
            ));
        }
    }
    for k in SAME_IN_CHAT {
        if let Some(v) = m.remove(*k).filter(|v| !v.is_null()) {
            chat.insert((*k).into(), v);
        }
    }
    if let Some(n) = m.remove("max_output_tokens").filter(|v| !v.is_null()) {
        chat.insert("max_completion_tokens".into(), n);
    }
    if let Some(effort) = m
        .get("reasoning")
        .and_then(|r| r.get("effort"))
        .filter(|e| !e.is_null())
    {
        chat.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(format) = m.get("text").and_then(|t| t.get("format")) {
        match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => {
                let mut schema = Map::new();
                for k in ["name", "schema", "strict", "description"] {
                    if let Some(v) = format.get(k) {
                        schema.insert(k.into(), v.clone());
                    }
                }
                chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": schema}),
                );
            }
            Some("json_object") => {
                chat.insert("response_format".into(), json!({"type": "json_object"}));
            }
            _ => {}
        }
    }
    let mut custom_tools = Vec::new();
    if let Some(tools) = m.remove("tools").filter(|v| !v.is_null()) {
        let Value::Array(tools) = tools else {
            return Err(bad(
                "tools",
                format!("expected an array, got {}", kind(&tools)),
            ));
        };
        let mut out = Vec::new();
        for (i, t) in tools.into_iter().enumerate() {
            match t.get("type").and_then(Value::as_str) {
                Some("function") => {
                    let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                    if name.is_empty() {
                        return Err(bad(&format!("tools[{i}].name"), "is required"));
                    }
                    let mut f = Map::new();
                    for k in ["name", "description", "parameters", "strict"] {
                        if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                            f.insert(k.into(), v.clone());
                        }
                    }
                    out.push(json!({"type": "function", "function": f}));
                }
                Some("custom") => {
                    let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                    custom_tools.push(name.to_string());
                    out.push(json!({"type": "function", "function": {
                        "name": name,
                        "description": t.get("description").cloned().unwrap_or(Value::Null),
                        "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                                       "required": ["input"]},
                    }}));
                }
                Some(other) => losses.push(format!("{other} tool")),
                None => return Err(bad(&format!("tools[{i}].type"), "is required")),
            }
        }
        if !out.is_empty() {
            chat.insert("tools".into(), Value::Array(out));
        }
    }
    // Chat Completions refuses these without tools (every one may have been a hosted tool).
    if !chat.contains_key("tools") {
        chat.remove("parallel_tool_calls");
    }
    if let Some(tc) = m.remove("tool_choice").filter(|v| !v.is_null()) {
        let choice = match &tc {
            Value::String(_) => Some(tc.clone()),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("function" | "custom") => o
                    .get("name")
                    .map(|n| json!({"type": "function", "function": {"name": n}})),
                // Forcing a hosted tool: it is not there any more, let the model choose.
                _ => Some(json!("auto")),
            },
            _ => None,
        };
        if let Some(c) = choice.filter(|_| chat.contains_key("tools")) {
            chat.insert("tool_choice".into(), c);
        }
    }
    let mut messages: Vec<Value> = Vec::new();
    // Per message: the input item it starts at (trimming cuts the raw input by these).
    let mut sources: Vec<Option<u32>> = Vec::new();
    if let Some(i) = m.remove("instructions").filter(|v| !v.is_null()) {
        match i {
            Value::String(s) => {
                messages.push(json!({"role": "system", "content": s}));
                sources.push(None);
            }
            other => {
                return Err(bad(
                    "instructions",
                    format!("expected a string, got {}", kind(&other)),
                ));
            }
        }
    }
    match m.remove("input") {
        Some(Value::String(s)) => {
            messages.push(json!({"role": "user", "content": s}));
            sources.push(None);
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.into_iter().enumerate() {
                input_item(item, i, &mut messages, &mut losses)?;
                sources.resize(messages.len(), Some(i as u32));
            }
        }
        None | Some(Value::Null) => return Err(bad("input", "is required")),
        Some(other) => {
            return Err(bad(
                "input",
                format!(
                    "expected a string or an array of items, got {}",
                    kind(&other)
                ),
            ));
        }
    }
    if messages.is_empty() {
        return Err(bad("input", "must contain at least one message"));
    }
    chat.insert("messages".into(), Value::Array(messages));
    // The rest (include, store, truncation, stream_options...) is the Responses API's own.
    let mut req = super::openai::request_from_value(Value::Object(chat))?;
    for (msg, s) in req.messages.iter_mut().zip(sources) {
        msg.source = s;
    }
    // Usage is always part of `response.completed`.
    req.stream_include_usage = true;
    req.origin = super::Protocol::OpenAiResponses;
    req.raw = Some(raw);
    losses.sort();
    losses.dedup();
    Ok((
        req,
        Echo {
            // `sy`: never hex, so an id this gateway made is told from an upstream's.
            id: format!("resp_sy{}", random_hex(30)),
            created_at: now_secs(),
            fields,
            custom_tools,
            losses,
            store,
            conversation,
        },
    ))
}

/// One input item → Chat Completions messages (a call joins the assistant turn before it).
fn input_item(
    item: Value,
    i: usize,
    out: &mut Vec<Value>,
    losses: &mut Vec<String>,
) -> Result<(), InvalidRequest> {
    let at = |f: &str| format!("input[{i}].{f}");
    let Value::Object(o) = item else {
        return Err(bad(
            &format!("input[{i}]"),
            format!("expected an object, got {}", kind(&item)),
        ));
    };
    let ty = o.get("type").and_then(Value::as_str);
    let pairs = matches!(
        ty,
        Some(
            "function_call"
                | "custom_tool_call"
                | "function_call_output"
                | "custom_tool_call_output"
        )
    );
    let call_id = match o.get("call_id") {
        Some(Value::String(id)) if !id.is_empty() => Value::String(id.clone()),
        _ if pairs => return Err(bad(&at("call_id"), "is required")),
        _ => Value::Null,
    };
    let call = |call_id: &Value, name: &Value, arguments: String| json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let push_call = |out: &mut Vec<Value>, c: Value| {
        // Calls after the assistant's text (or other calls) are one turn.
        if let Some(last) = out.last_mut().filter(|l| l["role"] == "assistant") {
            if !last["tool_calls"].is_array() {
                last["tool_calls"] = json!([]);
            }
            if let Some(a) = last["tool_calls"].as_array_mut() {
                a.push(c);
            }
        } else {
            out.push(json!({"role": "assistant", "content": null, "tool_calls": [c]}));
        }
    };
    match ty {
        None | Some("message") => {
            let role = o.get("role").and_then(Value::as_str).unwrap_or_default();
            if !matches!(role, "user" | "assistant" | "system" | "developer") {
                return Err(bad(
                    &at("role"),
                    format!("expected user, assistant, system or developer, got {role:?}"),
                ));
            }
            let content = match o.get("content") {
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(Value::Array(parts)) => {
                    let mut out_parts = Vec::new();
                    for (j, p) in parts.iter().enumerate() {
                        out_parts.extend(content_part(p, &at(&format!("content[{j}]")), losses)?);
                    }
                    Value::Array(out_parts)
                }
                _ => return Err(bad(&at("content"), "is required")),
            };
            out.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let args = o
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_string();
            push_call(
                out,
                call(&call_id, o.get("name").unwrap_or(&Value::Null), args),
            );
        }
        Some("custom_tool_call") => {
            let input = o.get("input").and_then(Value::as_str).unwrap_or_default();
            let args = json!({ "input": input }).to_string();
            push_call(
                out,
                call(&call_id, o.get("name").unwrap_or(&Value::Null), args),
            );
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let output = match o.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // Reasoning the client kept (encrypted for its own provider): not readable elsewhere.
        Some("reasoning") => {}
        Some(other) => losses.push(format!("{other} input items")),
    }
    Ok(())
}

/// A Responses content part → Chat Completions content parts.
fn content_part(
    p: &Value,
    path: &str,
    losses: &mut Vec<String>,
) -> Result<Option<Value>, InvalidRequest> {
    Ok(match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text") => Some(json!({
            "type": "text",
            "text": p.get("text").and_then(Value::as_str).unwrap_or_default(),
        })),
        Some("refusal") => Some(json!({
            "type": "text",
            "text": p.get("refusal").and_then(Value::as_str).unwrap_or_default(),
        })),
        Some("input_image") => match p.get("image_url").and_then(Value::as_str) {
            Some(url) => {
                let mut image = json!({ "url": url });
                if let Some(d) = p.get("detail").filter(|d| !d.is_null()) {
                    image["detail"] = d.clone();
                }
                Some(json!({"type": "image_url", "image_url": image}))
            }
            None => {
                losses.push("images by file_id".into());
                None
            }
        },
        Some("input_file") => {
            let mut file = Map::new();
            for k in ["file_id", "file_data", "filename"] {
                if let Some(v) = p.get(k) {
                    file.insert(k.into(), v.clone());
                }
            }
            Some(json!({"type": "file", "file": file}))
        }
        Some(_) => {
            losses.push("content parts of other types".into());
            None
        }
        None => return Err(bad(&format!("{path}.type"), "is required")),
    })
}

/// The Response object's fields that do not depend on the answer.
fn skeleton(echo: &Echo, model: &str, status: &str) -> Value {
    let mut r = json!({
        "id": echo.id,
        "object": "response",
        "created_at": echo.created_at,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": [],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": true,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": null,
        "metadata": {},
    });
    for (k, v) in &echo.fields {
        r[k.as_str()] = v.clone();
    }
    r
}

fn usage_json(u: &Usage) -> Value {
    let input = u.input_tokens.unwrap_or(0);
    let output = u.output_tokens.unwrap_or(0);
    let reasoning = u
        .extra
        .get("completion_tokens_details")
        .and_then(|d| d.get("reasoning_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": u.total_tokens.unwrap_or(input + output),
    })
}

/// `completed`, or `incomplete` with its reason, from a finish reason.
fn status_of(finish: Option<&str>) -> (&'static str, Value) {
    match finish {
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id,
        "summary": [{"type": "summary_text", "text": text}]})
}

impl Echo {
    /// A tool call as its output item: a `custom_tool_call` for a custom tool (its `input`
    /// taken back out of the arguments), else a `function_call`.
    fn call_item(&self, id: &str, call_id: &str, name: &str, args: &str, status: &str) -> Value {
        if self.custom_tools.iter().any(|t| t == name) {
            let input = serde_json::from_str::<Value>(args)
                .ok()
                .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| args.to_string());
            return json!({"type": "custom_tool_call", "id": id, "call_id": call_id,
                "name": name, "input": input, "status": status});
        }
        json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
            "arguments": args, "status": status})
    }
}

/// The canonical answer → a Response object.
pub fn response_to_value(resp: &ChatResponse, echo: &Echo, model: &str) -> Value {
    let choice = resp.choices.first();
    let (status, incomplete) = status_of(choice.and_then(|c| c.finish_reason.as_deref()));
    let mut r = skeleton(echo, resp.model.as_deref().unwrap_or(model), status);
    r["incomplete_details"] = incomplete;
    let mut output = Vec::new();
    let tag = &echo.id[5..];
    if let Some(c) = choice {
        if let Some(reasoning) = c.message.reasoning.as_deref().filter(|t| !t.is_empty()) {
            output.push(reasoning_item(&format!("rs_{tag}"), reasoning));
        }
        let text = c.message.content.as_ref().map(Content::text);
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            output.push(message_item(&format!("msg_{tag}"), &t, "completed"));
        }
        for (n, call) in c.message.tool_calls.iter().enumerate() {
            if let ToolCall::Function {
                id,
                name,
                arguments,
                ..
            } = call
            {
                let call_id = id.clone().unwrap_or_else(|| format!("call_{tag}_{n}"));
                output.push(echo.call_item(
                    &format!("fc_{tag}_{n}"),
                    &call_id,
                    name,
                    arguments.as_deref().unwrap_or("{}"),
                    "completed",
                ));
            }
        }
    }
    r["output"] = Value::Array(output);
    if let Some(u) = &resp.usage {
        r["usage"] = usage_json(u);
    }
    r
}

/// The text item being streamed (reasoning or message): one at a time.
#[derive(Debug)]
enum Open {
    Reasoning {
        index: usize,
        id: String,
        text: String,
    },
    Message {
        index: usize,
        id: String,
        text: String,
    },
}

/// A tool call being streamed. Calls stay open side by side (an upstream may interleave the
/// argument deltas of parallel calls) and close when the answer ends.
#[derive(Debug)]
struct Call {
    /// The upstream's tool-call index.
    upstream: u32,
    index: usize,
    id: String,
    call_id: String,
    name: String,
    args: String,
    /// A custom tool's input is sent whole when the call ends.
    custom: bool,
}

/// Canonical stream chunks → Responses events, one state machine per stream.
#[derive(Debug)]
pub struct StreamEncoder {
    echo: Echo,
    model: String,
    seq: u64,
    started: bool,
    open: Option<Open>,
    calls: Vec<Call>,
    /// Finished items by output index.
    output: Vec<(usize, Value)>,
    next_index: usize,
    usage: Option<Usage>,
    finish: Option<String>,
    /// The upstream speaks the Responses API too: its events are written as they came.
    passthrough: bool,
    /// In passthrough, the upstream sent its own `response.failed` (or `error`).
    upstream_failed: bool,
}

impl StreamEncoder {
    pub fn new(echo: Echo, model: String) -> Self {
        StreamEncoder {
            echo,
            model,
            seq: 0,
            started: false,
            open: None,
            calls: Vec::new(),
            output: Vec::new(),
            next_index: 0,
            usage: None,
            finish: None,
            passthrough: false,
            upstream_failed: false,
        }
    }

    fn event(&mut self, out: &mut Vec<u8>, ty: &str, mut data: Value) {
        data["type"] = ty.into();
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(ty.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = skeleton(&self.echo, &self.model, "in_progress");
        self.event(out, "response.created", json!({ "response": r }));
        let r = skeleton(&self.echo, &self.model, "in_progress");
        self.event(out, "response.in_progress", json!({ "response": r }));
    }

    fn tag(&self) -> String {
        self.echo.id[5..].to_string()
    }

    fn take_index(&mut self) -> usize {
        self.next_index += 1;
        self.next_index - 1
    }

    /// The items in output order.
    fn items(&self) -> Vec<Value> {
        let mut all = self.output.clone();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, v)| v).collect()
    }

    /// Ends the open text item: its closing events and `output_item.done`.
    fn close_text(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let (index, item) = match open {
            Open::Reasoning { index, id, text } => {
                let part = json!({"type": "summary_text", "text": text});
                self.event(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                );
                (index, reasoning_item(&id, &text))
            }
            Open::Message { index, id, text } => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text, "logprobs": []}),
                );
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                (index, message_item(&id, &text, "completed"))
            }
        };
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push((index, item));
    }

    /// Ends every open call, in output order.
    fn close_calls(&mut self, out: &mut Vec<u8>) {
        let mut calls = std::mem::take(&mut self.calls);
        calls.sort_by_key(|c| c.index);
        for c in calls {
            let item = self
                .echo
                .call_item(&c.id, &c.call_id, &c.name, &c.args, "completed");
            if c.custom {
                let mut added = item.clone();
                added["input"] = "".into();
                added["status"] = "in_progress".into();
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": c.index, "item": added}),
                );
                let input = item["input"].clone();
                self.event(
                    out,
                    "response.custom_tool_call_input.delta",
                    json!({"item_id": c.id, "output_index": c.index, "delta": input}),
                );
                self.event(
                    out,
                    "response.custom_tool_call_input.done",
                    json!({"item_id": c.id, "output_index": c.index, "input": input}),
                );
            } else {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": c.id, "output_index": c.index, "arguments": c.args}),
                );
            }
            self.event(
                out,
                "response.output_item.done",
                json!({"output_index": c.index, "item": item}),
            );
            self.output.push((c.index, item));
        }
    }

    pub fn chunk(&mut self, c: &StreamChunk, out: &mut Vec<u8>) {
        if let Some(raw) = c
            .raw
            .as_ref()
            .filter(|r| r.protocol == super::Protocol::OpenAiResponses)
        {
            // Numbered by the upstream from 0, one per event: a fault after it goes on counting.
            self.passthrough = true;
            self.seq += 1;
            if matches!(raw.event.as_deref(), Some("response.failed" | "error")) {
                self.upstream_failed = true;
            }
            raw.write(out);
            return;
        }
        if let Some(u) = &c.usage {
            self.usage = Some(u.clone());
        }
        if let Some(m) = &c.model {
            self.model.clone_from(m);
        }
        let Some(choice) = c.choices.first() else {
            return;
        };
        self.start(out);
        let d = &choice.delta;
        let tag = self.tag();
        if let Some(r) = d.reasoning.as_deref().filter(|r| !r.is_empty()) {
            if !matches!(self.open, Some(Open::Reasoning { .. })) {
                self.close_text(out);
                let index = self.take_index();
                let id = format!("rs_{tag}_{index}");
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index,
                        "item": {"type": "reasoning", "id": id, "summary": []}}),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.added",
                    json!({"item_id": id, "output_index": index, "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""}}),
                );
                self.open = Some(Open::Reasoning {
                    index,
                    id,
                    text: String::new(),
                });
            }
            if let Some(Open::Reasoning { index, id, text }) = &mut self.open {
                text.push_str(r);
                let data =
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": r});
                self.event(out, "response.reasoning_summary_text.delta", data);
            }
        }
        if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
            if !matches!(self.open, Some(Open::Message { .. })) {
                self.close_text(out);
                let index = self.take_index();
                let id = format!("msg_{tag}_{index}");
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": {"type": "message", "id": id,
                        "status": "in_progress", "role": "assistant", "content": []}}),
                );
                self.event(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                );
                self.open = Some(Open::Message {
                    index,
                    id,
                    text: String::new(),
                });
            }
            if let Some(Open::Message { index, id, text }) = &mut self.open {
                text.push_str(t);
                let data = json!({"item_id": id, "output_index": index, "content_index": 0,
                    "delta": t, "logprobs": []});
                self.event(out, "response.output_text.delta", data);
            }
        }
        for tc in &d.tool_calls {
            // The same call: its upstream index, with no id or the id it started with.
            let known = self.calls.iter().position(|c| {
                c.upstream == tc.index && tc.id.as_ref().is_none_or(|id| *id == c.call_id)
            });
            let k = match known {
                Some(k) => k,
                None => {
                    // Text before the calls is finished once they begin.
                    self.close_text(out);
                    let index = self.take_index();
                    let name = tc.name.clone().unwrap_or_default();
                    let call_id = tc
                        .id
                        .clone()
                        .unwrap_or_else(|| format!("call_{tag}_{index}"));
                    let id = format!("fc_{tag}_{index}");
                    let custom = self.echo.custom_tools.contains(&name);
                    if !custom {
                        self.event(
                            out,
                            "response.output_item.added",
                            json!({"output_index": index, "item": {"type": "function_call", "id": id,
                                "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}}),
                        );
                    }
                    self.calls.push(Call {
                        upstream: tc.index,
                        index,
                        id,
                        call_id,
                        name,
                        args: String::new(),
                        custom,
                    });
                    self.calls.len() - 1
                }
            };
            if let Some(a) = tc.arguments.as_deref().filter(|a| !a.is_empty()) {
                let call = &mut self.calls[k];
                call.args.push_str(a);
                if !call.custom {
                    let data = json!({"item_id": call.id, "output_index": call.index, "delta": a});
                    self.event(out, "response.function_call_arguments.delta", data);
                }
            }
        }
        if let Some(f) = &choice.finish_reason {
            self.finish = Some(f.clone());
        }
    }

    /// The end of a complete stream: the open items closed, then the whole response.
    pub fn done(&mut self, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own `response.completed` went out already.
            return;
        }
        self.start(out);
        self.close_text(out);
        self.close_calls(out);
        let (status, incomplete) = status_of(self.finish.as_deref());
        let mut r = skeleton(&self.echo, &self.model, status);
        r["incomplete_details"] = incomplete;
        r["output"] = Value::Array(self.items());
        if let Some(u) = &self.usage {
            r["usage"] = usage_json(u);
        }
        let ty = if status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.event(out, ty, json!({ "response": r }));
    }

    /// The response's id and the conversation to keep, once the stream completed: this
    /// gateway's own answer (an upstream that speaks the API keeps its own).
    pub fn completed(&self) -> Option<(String, Option<String>)> {
        (!self.passthrough).then(|| (self.echo.id.clone(), self.echo.kept_with(&self.items())))
    }

    /// A fault after the stream began: `response.failed`, and nothing after it (unless the
    /// upstream already said so in its own words).
    pub fn fault(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        if self.passthrough && self.upstream_failed {
            return;
        }
        if !self.passthrough {
            self.start(out);
        }
        let mut r = skeleton(&self.echo, &self.model, "failed");
        r["output"] = Value::Array(self.items());
        r["error"] = json!({"code": code, "message": message});
        self.event(out, "response.failed", json!({ "response": r }));
    }
}

/// A Responses API answer (from an upstream that speaks it) → the canonical answer, with the
/// body itself kept for a Responses client.
pub fn response_from_value(v: Value) -> Result<ChatResponse, super::InvalidUpstream> {
    let Some(items) = v.get("output").and_then(Value::as_array) else {
        return Err(super::InvalidUpstream {
            what: "response",
            message: "missing output array".into(),
        });
    };
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for p in item["content"].as_array().into_iter().flatten() {
                    text.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            Some("reasoning") => {
                for p in item["summary"].as_array().into_iter().flatten() {
                    reasoning.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            Some(kind @ ("function_call" | "custom_tool_call")) => {
                let arguments = if kind == "function_call" {
                    item["arguments"].as_str().unwrap_or("{}").to_string()
                } else {
                    json!({"input": item["input"]}).to_string()
                };
                calls.push(ToolCall::Function {
                    id: item["call_id"].as_str().map(str::to_string),
                    name: item["name"].as_str().unwrap_or_default().to_string(),
                    arguments: Some(arguments),
                    extra: Map::new(),
                });
            }
            _ => {}
        }
    }
    let finish = finish_of(&v, !calls.is_empty());
    let message = super::Message {
        content: (!text.is_empty()).then_some(Content::Text(text)),
        tool_calls: calls,
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        ..super::Message::new(super::Role::Assistant, "")
    };
    Ok(ChatResponse {
        id: v["id"].as_str().map(str::to_string),
        model: v["model"].as_str().map(str::to_string),
        created: v["created_at"].as_u64(),
        choices: vec![super::Choice {
            index: 0,
            message,
            finish_reason: Some(finish.into()),
            extra: Map::new(),
        }],
        usage: usage_from(&v["usage"]),
        extra: Map::new(),
        raw: Some(super::RawBody {
            protocol: super::Protocol::OpenAiResponses,
            body: v,
        }),
    })
}

/// The chat finish reason a Response's status says.
fn finish_of(response: &Value, called: bool) -> &'static str {
    match (
        response["status"].as_str(),
        response["incomplete_details"]["reason"].as_str(),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => "length",
        (Some("incomplete"), Some("content_filter")) => "content_filter",
        _ if called => "tool_calls",
        _ => "stop",
    }
}

fn usage_from(u: &Value) -> Option<Usage> {
    let input = u.get("input_tokens")?.as_u64();
    Some(Usage {
        input_tokens: input,
        output_tokens: u["output_tokens"].as_u64(),
        total_tokens: u["total_tokens"].as_u64(),
        cached_tokens: u["input_tokens_details"]["cached_tokens"].as_u64(),
        extra: Map::new(),
    })
}

/// Responses API stream events (from an upstream that speaks it) → canonical chunks: text,
/// reasoning and tool-call deltas for the commit point and the log; lifecycle events carry
/// nothing canonical. Ends with `response.completed` (or `.incomplete`).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    id: Option<String>,
    model: Option<String>,
    /// The output index of each call so far: a call's chat tool index is its place here.
    calls: Vec<u64>,
}

impl StreamDecoder {
    /// The chat tool-call index of the call at `output_index` (new calls take the next one).
    fn tool_index(&mut self, output_index: u64) -> u32 {
        match self.calls.iter().position(|o| *o == output_index) {
            Some(i) => i as u32,
            None => {
                self.calls.push(output_index);
                (self.calls.len() - 1) as u32
            }
        }
    }
}

impl StreamDecoder {
    fn chunk(
        &self,
        delta: super::Delta,
        finish: Option<String>,
        usage: Option<Usage>,
    ) -> Box<StreamChunk> {
        StreamChunk::single(self.id.clone(), self.model.clone(), delta, finish, usage)
    }

    pub fn event(&mut self, event: &str, data: &Value) -> super::Decoded {
        use super::{Decoded, Delta, ToolCallDelta};
        let ty = data["type"].as_str().unwrap_or(event);
        let output_index = data["output_index"].as_u64().unwrap_or(0);
        let delta = |f: &dyn Fn(&mut Delta)| {
            let mut d = Delta::default();
            f(&mut d);
            d
        };
        match ty {
            "response.created" => {
                self.id = data["response"]["id"].as_str().map(str::to_string);
                self.model = data["response"]["model"].as_str().map(str::to_string);
                Decoded::Nothing
            }
            "response.output_text.delta" => {
                let t = data["delta"].as_str().unwrap_or_default().to_string();
                Decoded::Chunk(self.chunk(delta(&|d| d.content = Some(t.clone())), None, None))
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let t = data["delta"].as_str().unwrap_or_default().to_string();
                Decoded::Chunk(self.chunk(delta(&|d| d.reasoning = Some(t.clone())), None, None))
            }
            "response.output_item.added"
                if matches!(
                    data["item"]["type"].as_str(),
                    Some("function_call" | "custom_tool_call")
                ) =>
            {
                let index = self.tool_index(output_index);
                let item = &data["item"];
                let call = ToolCallDelta {
                    index,
                    id: item["call_id"].as_str().map(str::to_string),
                    kind: Some("function".into()),
                    function: true,
                    name: item["name"].as_str().map(str::to_string),
                    arguments: None,
                    extra: Map::new(),
                };
                Decoded::Chunk(self.chunk(
                    delta(&|d| d.tool_calls = vec![call.clone()]),
                    None,
                    None,
                ))
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                let index = self.tool_index(output_index);
                let call = ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: true,
                    name: None,
                    arguments: data["delta"].as_str().map(str::to_string),
                    extra: Map::new(),
                };
                Decoded::Chunk(self.chunk(
                    delta(&|d| d.tool_calls = vec![call.clone()]),
                    None,
                    None,
                ))
            }
            "response.completed" | "response.incomplete" => {
                let r = &data["response"];
                let finish = finish_of(r, !self.calls.is_empty());
                Decoded::Last(self.chunk(
                    Delta::default(),
                    Some(finish.into()),
                    usage_from(&r["usage"]),
                ))
            }
            "response.failed" | "error" => Decoded::Error,
            _ => Decoded::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ChunkChoice, Delta, ToolCallDelta};

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
        let (_, e) =
            request_from_value(json!({"model": "m", "input": "hi", "store": false})).unwrap();
        assert_eq!(e.kept_with(&[]), None);
        let big = "x".repeat(MAX_KEPT_BYTES);
        let (_, e) = request_from_value(json!({"model": "m", "input": big})).unwrap();
        assert_eq!(e.kept_with(&[]), None);
    }
}
