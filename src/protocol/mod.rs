//! Protocol-neutral canonical request / response / stream types, and one module per wire format
//! that translates to and from them. Translation is pure: no I/O, no global state.
//!
//! Every canonical type keeps an `extra` map of the fields it does not model, in their original
//! order, so that same-protocol traffic passes through losslessly: a parameter Switchyard does not
//! know still reaches the upstream.

pub mod anthropic;
pub mod bedrock;
pub mod chain;
pub mod count;
mod crossing;
pub mod end_user;
pub mod gemini;
pub mod listing;
pub mod openai;
pub mod ours;
pub mod responses;

#[cfg(test)]
mod golden;

use serde_json::{Map, Value};

/// The wire formats a client or upstream may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    OpenAiChat,
    AnthropicMessages,
    Gemini,
    /// OpenAI's Responses API: a client protocol only (read into an OpenAI chat request).
    OpenAiResponses,
}

impl Protocol {
    /// Whether a request of this origin carries Chat Completions fields in `extra`.
    pub fn speaks_chat(self) -> bool {
        matches!(self, Protocol::OpenAiChat | Protocol::OpenAiResponses)
    }
}

/// What a JSON value is, for an error message ("expected an array, got a string").
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A client's mistake in the request body. Maps to 400 `invalid_request_error` with `param`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct InvalidRequest {
    pub param: Option<String>,
    pub message: String,
}

impl InvalidRequest {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidRequest {
            param: Some(param.into()),
            message: message.into(),
        }
    }
}

/// What an upstream sent that is not valid in its own protocol (a broken upstream, not a client
/// mistake): classified as a server error of that attempt.
#[derive(Debug, Clone, thiserror::Error)]
#[error("upstream sent an invalid {what}: {message}")]
pub struct InvalidUpstream {
    pub what: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Other(String),
}

impl Role {
    pub fn parse(s: String) -> Role {
        match s.as_str() {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::Other(s),
        }
    }
    pub fn as_str(&self) -> &str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Other(s) => s,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

impl Content {
    /// The text: the string, or the text parts joined by newlines (images and the rest left out).
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(ps) => ps
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The visible text, parts joined; used for logging sizes and, later, token counting.
    pub fn text_len(&self) -> usize {
        match self {
            Content::Text(t) => t.len(),
            Content::Parts(ps) => ps
                .iter()
                .map(|p| match p {
                    Part::Text { text, .. } => text.len(),
                    _ => 0,
                })
                .sum(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text {
        text: String,
        extra: Map<String, Value>,
    },
    Image {
        url: String,
        detail: Option<String>,
        extra: Map<String, Value>,
    },
    /// A part kind the canonical type does not model (audio, file...), kept as sent.
    Other(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolCall {
    Function {
        id: Option<String>,
        name: String,
        /// JSON text, as the model wrote it (possibly invalid JSON; not ours to fix).
        arguments: Option<String>,
        extra: Map<String, Value>,
    },
    Other(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Option<Content>,
    pub name: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    /// Visible reasoning text some upstreams return (`reasoning_content`).
    pub reasoning: Option<String>,
    pub extra: Map<String, Value>,
    /// The index of the client's message in `ChatRequest::raw` this one came from (Anthropic
    /// and Gemini turns may split into several), so trimming can cut the raw body the same way.
    pub source: Option<u32>,
}

impl Message {
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(Content::Text(text.into())),
            name: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: None,
            extra: Map::new(),
            source: None,
        }
    }

    /// A turn built from another protocol's blocks; `None` when it carries nothing. A lone text
    /// part becomes plain text, the shape every protocol's simplest form maps to.
    pub fn from_blocks(
        role: Role,
        mut parts: Vec<Part>,
        tool_calls: Vec<ToolCall>,
        reasoning: String,
    ) -> Option<Self> {
        if parts.is_empty() && tool_calls.is_empty() && reasoning.is_empty() {
            return None;
        }
        let content = match parts.len() {
            0 => None,
            1 if matches!(parts[0], Part::Text { .. }) => match parts.pop() {
                Some(Part::Text { text, .. }) => Some(Content::Text(text)),
                _ => None,
            },
            _ => Some(Content::Parts(parts)),
        };
        Some(Message {
            role,
            content,
            name: None,
            tool_calls,
            tool_call_id: None,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            extra: Map::new(),
            source: None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
    Function {
        name: String,
        description: Option<String>,
        parameters: Option<Value>,
        extra: Map<String, Value>,
    },
    Other(Value),
}

/// Which spelling of the output-token limit the client used; kept so it goes back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    MaxTokens,
    MaxCompletionTokens,
}

/// `stop` as sent: one string or a list.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn sequences(&self) -> &[String] {
        match self {
            Stop::One(s) => std::slice::from_ref(s),
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub stream: bool,
    /// The client asked for a usage chunk at the end of the stream.
    pub stream_include_usage: bool,
    pub max_tokens: Option<(MaxTokensField, u64)>,
    /// Kept as the JSON number sent (`1` stays `1`, not `1.0`).
    pub temperature: Option<serde_json::Number>,
    pub top_p: Option<serde_json::Number>,
    pub stop: Option<Stop>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<Value>,
    /// The protocol the client spoke: `extra` holds that protocol's fields.
    pub origin: Protocol,
    /// The client's body as sent, for a channel of the same protocol (Anthropic, Gemini): it
    /// goes upstream as is, only the model rewritten, so nothing the canonical form does not
    /// model is lost (cache_control, thinking signatures, documents...). OpenAI's own path is
    /// lossless through `extra` and keeps no copy.
    pub raw: Option<Value>,
    /// Fields not modelled above, in order; passed on to same-protocol upstreams only.
    pub extra: Map<String, Value>,
    /// Switchyards this request has passed through before this one (`x-switchyard-hops`).
    pub hops: u32,
    /// The shape the answer must take, as a client of another protocol than OpenAI's asked for
    /// it (an OpenAI client's `response_format` stays in `extra`: see `response_format()`).
    pub response_format: Option<ResponseFormat>,
}

/// What shape the answer must take: OpenAI's `response_format`, Gemini's response schema and
/// MIME type, Anthropic's `output_config.format`.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    Json,
    /// JSON matching a JSON Schema.
    Schema {
        name: Option<String>,
        schema: Value,
        strict: Option<bool>,
    },
}

impl ChatRequest {
    /// A copy with other messages (and raw body): the rest cloned, the history not.
    pub fn with_messages(&self, messages: Vec<Message>, raw: Option<Value>) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            messages,
            stream: self.stream,
            stream_include_usage: self.stream_include_usage,
            max_tokens: self.max_tokens,
            temperature: self.temperature.clone(),
            top_p: self.top_p.clone(),
            stop: self.stop.clone(),
            tools: self.tools.clone(),
            tool_choice: self.tool_choice.clone(),
            origin: self.origin,
            raw,
            extra: self.extra.clone(),
            hops: self.hops,
            response_format: self.response_format.clone(),
        }
    }
}

impl ChatRequest {
    /// A rough token count for budgets before the upstream says (about 4 characters a token,
    /// plus the output limit when one is set). The real count settles it afterwards.
    pub fn estimated_tokens(&self) -> u64 {
        self.prompt_estimate() + self.max_tokens.map_or(0, |(_, n)| n)
    }

    /// The prompt alone, counted roughly (about 4 characters a token).
    pub fn prompt_estimate(&self) -> u64 {
        let chars: usize = self
            .messages
            .iter()
            .map(|m| m.content.as_ref().map_or(0, Content::text_len))
            .sum();
        (chars as u64).div_ceil(4) + 3 * self.messages.len() as u64
    }
}

impl Usage {
    /// Prompt + completion, as sent or summed.
    pub fn total(&self) -> Option<u64> {
        self.total_tokens
            .or(match (self.input_tokens, self.output_tokens) {
                (None, None) => None,
                (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
            })
    }
}

/// Token counts as the upstream reported them; a count it did not send stays `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// As sent: some upstreams count more than input + output (reasoning, cache writes).
    pub total_tokens: Option<u64>,
    /// Of `input_tokens` (which counts every prompt token), those read from a prompt cache.
    pub cached_tokens: Option<u64>,
    /// Of `output_tokens` (which counts every generated token, as OpenAI does), those spent
    /// reasoning.
    pub reasoning_tokens: Option<u64>,
    /// Of `input_tokens`, those written to a prompt cache (Anthropic's cache creation).
    pub cache_write_tokens: Option<u64>,
    /// Provider details (cached tokens, reasoning tokens...), as sent.
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub index: u32,
    pub message: Message,
    pub finish_reason: Option<String>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub id: Option<String>,
    pub model: Option<String>,
    pub created: Option<u64>,
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
    pub extra: Map<String, Value>,
    /// The upstream's own body, answered as is to a client of the same protocol.
    pub raw: Option<RawBody>,
    /// A Chat Completions upstream's body as it came, for a Chat Completions client: written
    /// unread but for the gateway's own fields (the failover report).
    pub as_sent: Option<bytes::Bytes>,
}

/// What one upstream stream event means, as a protocol's decoder reads it.
pub enum Decoded {
    Chunk(Box<StreamChunk>),
    /// The last chunk: the answer is complete with it (Responses' `response.completed`).
    Last(Box<StreamChunk>),
    /// Nothing canonical (pings, block stops, lifecycle events): only the raw event goes on.
    Nothing,
    /// Not an event at all (a keep-alive, a blank or unparseable line): dropped.
    Skip,
    /// The answer is complete (Anthropic's `message_stop`).
    End,
    /// An error event from the upstream.
    Error,
    /// An event that is not valid in the upstream's protocol: a broken upstream.
    Invalid(InvalidUpstream),
}

/// An upstream's whole answer, tagged with its protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct RawBody {
    pub protocol: Protocol,
    pub body: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallDelta {
    pub index: u32,
    pub id: Option<String>,
    /// `type` as sent (`function`, or e.g. `custom`, whose payload stays in `extra`).
    pub kind: Option<String>,
    /// Whether a `function` object was sent (possibly with neither name nor arguments).
    pub function: bool,
    pub name: Option<String>,
    pub arguments: Option<String>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    pub role: Option<Role>,
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCallDelta>,
    pub extra: Map<String, Value>,
}

impl Delta {
    pub fn has_output(&self) -> bool {
        let nonempty = |v: &Value| match v {
            Value::Null => false,
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        };
        self.content.as_deref().is_some_and(|s| !s.is_empty())
            || self.reasoning.as_deref().is_some_and(|s| !s.is_empty())
            || !self.tool_calls.is_empty()
            || self.extra.values().any(nonempty)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    pub extra: Map<String, Value>,
}

/// One stream event: a delta per choice, and usage at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChunk {
    pub id: Option<String>,
    pub model: Option<String>,
    pub created: Option<u64>,
    pub choices: Vec<ChunkChoice>,
    pub usage: Option<Usage>,
    pub extra: Map<String, Value>,
    /// The upstream's own event, written as is to a client of the same protocol, so that what
    /// the canonical form does not model (thinking signatures, block stops, pings) reaches it.
    /// Events that mean nothing canonically come as chunks with no choices and only this.
    pub raw: Option<RawEvent>,
}

/// One upstream SSE event, tagged with its protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    pub protocol: Protocol,
    pub event: Option<String>,
    pub data: String,
}

impl RawEvent {
    /// The event as an SSE frame again: one `data:` line per line of data, as it was parsed.
    pub fn write(&self, out: &mut Vec<u8>) {
        if let Some(name) = &self.event {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(name.as_bytes());
            out.push(b'\n');
        }
        for line in self.data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
    }
}

impl StreamChunk {
    /// One choice's delta, as a decoder of another protocol's stream makes it.
    pub fn single(
        id: Option<String>,
        model: Option<String>,
        delta: Delta,
        finish: Option<String>,
        usage: Option<Usage>,
    ) -> Box<Self> {
        Box::new(StreamChunk {
            id,
            model,
            created: None,
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish,
                extra: Map::new(),
            }],
            usage,
            extra: Map::new(),
            raw: None,
        })
    }

    /// A chunk that carries only an upstream event, for same-protocol clients.
    pub fn raw_only(raw: RawEvent) -> Self {
        StreamChunk {
            id: None,
            model: None,
            created: None,
            choices: Vec::new(),
            usage: None,
            extra: Map::new(),
            raw: Some(raw),
        }
    }

    /// Nothing here for a client of another protocol than the upstream's.
    pub fn is_raw_only(&self) -> bool {
        self.choices.is_empty() && self.usage.is_none() && self.raw.is_some()
    }

    /// Output the client can see: text, reasoning, a tool-call delta, or any other non-empty
    /// delta field (`refusal`, `audio`, legacy `function_call`, OpenRouter's `reasoning`...).
    /// The streaming commit point is the first chunk for which this holds.
    pub fn has_content(&self) -> bool {
        self.choices.iter().any(|c| c.delta.has_output())
    }

    pub fn has_finish(&self) -> bool {
        self.choices.iter().any(|c| c.finish_reason.is_some())
    }

    /// The trailing usage-only chunk that `stream_options.include_usage` asks for.
    pub fn is_usage_only(&self) -> bool {
        self.choices.is_empty() && self.usage.is_some()
    }
}

impl EmbeddingsRequest {
    /// About 4 characters a token, for budgets until the upstream's usage settles it.
    pub fn estimated_tokens(&self) -> u64 {
        (self.input.to_string().len() as u64).div_ceil(4)
    }
}

/// An embeddings request: routed like chat, passed through as is (model swapped).
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingsRequest {
    pub model: String,
    pub input: Value,
    pub extra: Map<String, Value>,
    /// As [`ChatRequest::hops`].
    pub hops: u32,
}
