//! The built-in mock provider: configurable text, latency, chunking and scripted faults, so that
//! demos, tests and benchmarks need no network and no upstream keys.
//!
//! The same spec drives two forms: [`MockUpstream`] answers in-process (`provider = "mock"`),
//! and [`MockServer`] is a real OpenAI-compatible HTTP server (`switchyard mock --port P`) that
//! also records what it received, for tests that must see what crossed the wire.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::{Stream, StreamExt, stream};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::{ChunkStream, UpstreamError};
use crate::protocol::openai::{ChunkBody, ResponseBody};
use crate::protocol::{
    ChatRequest, ChatResponse, Choice, ChunkChoice, Content, Delta, EmbeddingsRequest, Message,
    Role, StreamChunk, ToolCall, ToolCallDelta, Usage,
};

/// How a mock channel or server answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockSpec {
    /// The reply text, split into `chunks` pieces when streamed.
    pub text: String,
    /// Time to the first token (and to the whole answer, plus chunk times, when not streamed).
    pub ttft_ms: u64,
    /// Gap between two streamed chunks.
    pub chunk_ms: u64,
    pub chunks: u32,
    /// Length of the deterministic embedding vectors.
    pub embedding_dims: usize,
    /// Answer with this tool call instead of text; its arguments are streamed in `chunks`.
    pub tool_call: Option<MockToolCall>,
    /// With `tool_call`: a conversation with a tool result after its last assistant turn gets
    /// `text` instead, so an agent's round trip (call, result, answer) ends.
    pub answer_tool_results: bool,
    /// Reasoning before the answer (OpenAI `reasoning_content`, Anthropic thinking, Gemini
    /// thought), streamed as one chunk.
    pub reasoning: Option<String>,
    /// Applied to every request that the script does not cover.
    pub fault: Option<Fault>,
    /// Applied to the 1st, 2nd... request this mock sees; then `fault` (or a normal answer).
    pub script: Vec<Fault>,
    /// Standalone server only: a fault for requests bearing this API key (wins over the rest).
    pub per_key: std::collections::HashMap<String, Fault>,
    /// Standalone server only: a fault for requests naming this (upstream) model.
    pub per_model: std::collections::HashMap<String, Fault>,
}

impl Default for MockSpec {
    fn default() -> Self {
        MockSpec {
            text: "Hello from the mock.".into(),
            ttft_ms: 0,
            chunk_ms: 0,
            chunks: 4,
            embedding_dims: 8,
            tool_call: None,
            answer_tool_results: false,
            reasoning: None,
            fault: None,
            script: Vec::new(),
            per_key: std::collections::HashMap::new(),
            per_model: std::collections::HashMap::new(),
        }
    }
}

/// A function call the mock answers with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockToolCall {
    pub name: String,
    /// JSON text of the arguments.
    pub arguments: String,
}

/// One scripted behaviour. Exactly one of the fields is set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fault {
    /// A normal answer (useful inside a script).
    pub ok: bool,
    /// Answer with this HTTP status and an OpenAI error body.
    pub status: Option<u16>,
    /// With `status`: a `Retry-After` header, in seconds.
    pub retry_after_seconds: Option<u64>,
    /// Never answer (a stream sends its role chunk, then nothing).
    pub hang: bool,
    /// Stream this many content chunks, then break the connection.
    pub cut_after: Option<u32>,
    /// Stream this many content chunks, then send nothing more (a stalled upstream).
    pub stall_after: Option<u32>,
    /// Stream a role chunk, then `[DONE]`: no content, no finish reason.
    pub empty: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Normal,
    Status(u16, Option<u64>),
    Hang,
    CutAfter(u32),
    StallAfter(u32),
    Empty,
}

impl Fault {
    fn behaviour(&self) -> Behaviour {
        if let Some(s) = self.status {
            Behaviour::Status(s, self.retry_after_seconds)
        } else if self.hang {
            Behaviour::Hang
        } else if let Some(k) = self.cut_after {
            Behaviour::CutAfter(k)
        } else if let Some(k) = self.stall_after {
            Behaviour::StallAfter(k)
        } else if self.empty {
            Behaviour::Empty
        } else {
            Behaviour::Normal
        }
    }

    fn validate(&self) -> Result<(), String> {
        let set = [
            self.ok,
            self.status.is_some(),
            self.hang,
            self.cut_after.is_some(),
            self.stall_after.is_some(),
            self.empty,
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set != 1 {
            return Err(
                "a fault sets exactly one of ok, status, hang, cut_after, stall_after, empty"
                    .into(),
            );
        }
        if let Some(s) = self.status
            && !(300..=599).contains(&s)
        {
            return Err(format!("fault status {s} must be 300..=599"));
        }
        if self.retry_after_seconds.is_some() && self.status.is_none() {
            return Err("retry_after_seconds goes with status".into());
        }
        Ok(())
    }
}

impl MockSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.embedding_dims == 0 || self.embedding_dims > 8192 {
            return Err("embedding_dims must be 1..=8192".into());
        }
        if let Some(f) = &self.fault {
            f.validate()?;
        }
        for f in self
            .script
            .iter()
            .chain(self.per_key.values())
            .chain(self.per_model.values())
        {
            f.validate()?;
        }
        Ok(())
    }

    /// The behaviour for a request with this bearer key and model: `per_key`, then
    /// `per_model`, then the script and `fault`.
    fn behaviour_for(&self, n: u64, key: Option<&str>, model: &str) -> Behaviour {
        match key
            .and_then(|k| self.per_key.get(k))
            .or_else(|| self.per_model.get(model))
        {
            Some(f) => f.behaviour(),
            None => self.behaviour(n),
        }
    }

    fn behaviour(&self, n: u64) -> Behaviour {
        match self.script.get(n as usize) {
            Some(f) => f.behaviour(),
            None => self
                .fault
                .as_ref()
                .map_or(Behaviour::Normal, Fault::behaviour),
        }
    }

    /// The text (or the tool call's arguments) in `chunks` pieces of near-equal length.
    fn pieces(&self) -> Vec<String> {
        let source = self.tool_call.as_ref().map_or(&self.text, |t| &t.arguments);
        let count = source.chars().count();
        if count == 0 {
            return Vec::new();
        }
        let per = count.div_ceil((self.chunks.max(1) as usize).min(count));
        // Cut at every `per`-th character boundary (no per-character copy: texts can be large).
        let mut cuts: Vec<usize> = source.char_indices().step_by(per).map(|(i, _)| i).collect();
        cuts.push(source.len());
        cuts.windows(2)
            .map(|w| source[w[0]..w[1]].to_string())
            .collect()
    }

    fn total_time(&self) -> Duration {
        Duration::from_millis(
            self.ttft_ms + self.chunk_ms * u64::from(self.chunks.saturating_sub(1)),
        )
    }
}

fn estimate_prompt_tokens(req: &ChatRequest) -> u64 {
    let chars: usize = req
        .messages
        .iter()
        .map(|m| m.content.as_ref().map_or(0, Content::text_len))
        .sum();
    (chars as u64).div_ceil(4) + 3 * req.messages.len() as u64
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn usage(req: &ChatRequest, output_tokens: u64) -> Usage {
    let input = estimate_prompt_tokens(req);
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output_tokens),
        total_tokens: Some(input.saturating_add(output_tokens)),
        cached_tokens: None,
        extra: Map::new(),
    }
}

impl MockSpec {
    /// The spec for this request: without the tool call once the tool's result came back
    /// (`answer_tool_results`).
    fn for_request(&self, req: &ChatRequest) -> std::borrow::Cow<'_, MockSpec> {
        // A tool result after the last assistant turn (agents may add their own text after it).
        let since = req
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map_or(0, |i| i + 1);
        let answered =
            self.answer_tool_results && req.messages[since..].iter().any(|m| m.role == Role::Tool);
        if !answered {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut spec = self.clone();
        spec.tool_call = None;
        std::borrow::Cow::Owned(spec)
    }
}

fn reply(spec: &MockSpec, model: &str, req: &ChatRequest, n: u64) -> ChatResponse {
    let spec = &*spec.for_request(req);
    let pieces = spec.pieces();
    ChatResponse {
        id: Some(format!("chatcmpl-mock-{n}")),
        model: Some(model.to_string()),
        created: Some(now_secs()),
        choices: vec![match &spec.tool_call {
            None => Choice {
                index: 0,
                message: Message {
                    reasoning: spec.reasoning.clone(),
                    ..Message::new(Role::Assistant, spec.text.clone())
                },
                finish_reason: Some("stop".into()),
                extra: Map::new(),
            },
            Some(t) => Choice {
                index: 0,
                message: Message {
                    content: None,
                    tool_calls: vec![ToolCall::Function {
                        id: Some(format!("call_mock_{n}")),
                        name: t.name.clone(),
                        arguments: Some(t.arguments.clone()),
                        extra: Map::new(),
                    }],
                    ..Message::new(Role::Assistant, "")
                },
                finish_reason: Some("tool_calls".into()),
                extra: Map::new(),
            },
        }],
        usage: Some(usage(req, pieces.len() as u64)),
        extra: Map::new(),
        raw: None,
    }
}

/// Role chunk, content chunks, finish chunk, usage chunk, in the order OpenAI sends them.
fn reply_chunks(spec: &MockSpec, model: &str, req: &ChatRequest, n: u64) -> Vec<StreamChunk> {
    let spec = &*spec.for_request(req);
    let created = Some(now_secs());
    let id = Some(format!("chatcmpl-mock-{n}"));
    let model = Some(model.to_string());
    let chunk = |delta: Delta, finish: Option<&str>| StreamChunk {
        id: id.clone(),
        model: model.clone(),
        created,
        choices: vec![ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish.map(str::to_string),
            extra: Map::new(),
        }],
        usage: None,
        extra: Map::new(),
        raw: None,
    };
    let pieces = spec.pieces();
    let output_tokens = pieces.len() as u64;
    let mut out = Vec::with_capacity(pieces.len() + 4);
    let call = |id: Option<String>, name: Option<String>, arguments: String| ToolCallDelta {
        index: 0,
        kind: id.as_ref().map(|_| "function".to_string()),
        id,
        function: true,
        name,
        arguments: Some(arguments),
        extra: Map::new(),
    };
    out.push(chunk(
        Delta {
            role: Some(Role::Assistant),
            content: Some(String::new()),
            ..Delta::default()
        },
        None,
    ));
    if let Some(r) = &spec.reasoning {
        out.push(chunk(
            Delta {
                reasoning: Some(r.clone()),
                ..Delta::default()
            },
            None,
        ));
    }
    // Like OpenAI: the call's id and name first, then its arguments in fragments.
    if let Some(t) = &spec.tool_call {
        out.push(chunk(
            Delta {
                tool_calls: vec![call(
                    Some(format!("call_mock_{n}")),
                    Some(t.name.clone()),
                    String::new(),
                )],
                ..Delta::default()
            },
            None,
        ));
    }
    for p in pieces {
        let delta = match spec.tool_call {
            Some(_) => Delta {
                tool_calls: vec![call(None, None, p)],
                ..Delta::default()
            },
            None => Delta {
                content: Some(p),
                ..Delta::default()
            },
        };
        out.push(chunk(delta, None));
    }
    let finish = if spec.tool_call.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    out.push(chunk(Delta::default(), Some(finish)));
    out.push(StreamChunk {
        id,
        model,
        created,
        choices: Vec::new(),
        usage: Some(usage(req, output_tokens)),
        extra: Map::new(),
        raw: None,
    });
    out
}

/// One paced stream item: a chunk after a delay, or the break of a `cut_after` fault.
enum Item {
    Chunk(Duration, Box<StreamChunk>),
    Break(Duration),
    Hang,
}

/// The schedule of a streamed answer under a behaviour.
fn schedule(spec: &MockSpec, b: Behaviour, chunks: Vec<StreamChunk>) -> Vec<Item> {
    let ttft = Duration::from_millis(spec.ttft_ms);
    let gap = Duration::from_millis(spec.chunk_ms);
    let mut out = Vec::with_capacity(chunks.len() + 1);
    let mut content_sent = 0u32;
    for (i, c) in chunks.into_iter().enumerate() {
        let first_content = content_sent == 0;
        if b == Behaviour::Empty && i > 0 {
            break;
        }
        let has_content = c.has_content();
        if has_content {
            match b {
                Behaviour::CutAfter(k) if content_sent == k => {
                    out.push(Item::Break(gap));
                    return out;
                }
                Behaviour::StallAfter(k) if content_sent == k => {
                    out.push(Item::Hang);
                    return out;
                }
                _ => {}
            }
        }
        // The first output waits for the time to first token; later output comes `gap` apart.
        let delay = match (has_content, first_content) {
            (true, true) => ttft,
            (true, false) => gap,
            (false, _) => Duration::ZERO,
        };
        out.push(Item::Chunk(delay, Box::new(c)));
        if b == Behaviour::Hang {
            out.push(Item::Hang);
            return out;
        }
        if has_content {
            content_sent += 1;
        }
    }
    out
}

fn error_json(status: u16) -> Value {
    let (kind, code) = match status {
        404 => ("invalid_request_error", "model_not_found"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        400..=499 => ("invalid_request_error", "mock_client_error"),
        _ => ("server_error", "mock_server_error"),
    };
    json!({"error": {"message": format!("mock fault: HTTP {status}"), "type": kind, "param": null, "code": code}})
}

fn embedding(input: &str, dims: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dims)
        .map(|i| {
            let mut h = DefaultHasher::new();
            (input, i).hash(&mut h);
            (h.finish() % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn embeddings_reply(spec: &MockSpec, model: &str, input: &Value) -> Value {
    let texts: Vec<String> = match input {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect(),
        other => vec![other.to_string()],
    };
    let tokens: u64 = texts.iter().map(|t| (t.len() as u64).div_ceil(4)).sum();
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embedding(t, spec.embedding_dims)}))
        .collect();
    json!({"object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
}

// ---------------------------------------------------------------------------------------------
// In-process

#[derive(Debug)]
pub struct MockUpstream {
    spec: MockSpec,
    seen: AtomicU64,
}

impl MockUpstream {
    pub fn new(spec: MockSpec) -> Self {
        MockUpstream {
            spec,
            seen: AtomicU64::new(0),
        }
    }

    fn next(&self) -> (u64, Behaviour) {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        (n, self.spec.behaviour(n))
    }

    fn status_error(status: u16, retry_after: Option<u64>) -> UpstreamError {
        UpstreamError::Status {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            body: Bytes::from(error_json(status).to_string()),
            content_type: Some("application/json".into()),
        }
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
    ) -> Result<ChatResponse, UpstreamError> {
        let (n, b) = self.next();
        match b {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang => std::future::pending().await,
            Behaviour::CutAfter(_) => {
                pause(Duration::from_millis(self.spec.ttft_ms)).await;
                Err(UpstreamError::Broken("mock cut the connection".into()))
            }
            Behaviour::StallAfter(_) => std::future::pending().await,
            Behaviour::Empty => {
                let mut r = reply(&self.spec, model, req, n);
                r.choices.clear();
                Ok(r)
            }
            Behaviour::Normal => {
                pause(self.spec.total_time()).await;
                Ok(reply(&self.spec, model, req, n))
            }
        }
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
    ) -> Result<ChunkStream, UpstreamError> {
        let (n, b) = self.next();
        if let Behaviour::Status(s, ra) = b {
            return Err(Self::status_error(s, ra));
        }
        let items = schedule(&self.spec, b, reply_chunks(&self.spec, model, req, n));
        Ok(Box::pin(paced(items).filter_map(|item| async move {
            match item {
                Paced::Chunk(c) => Some(Ok(*c)),
                Paced::Break => Some(Err(UpstreamError::Broken("mock cut the stream".into()))),
            }
        })))
    }

    pub async fn models(&self) -> Result<(), UpstreamError> {
        match self.next().1 {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang | Behaviour::StallAfter(_) => std::future::pending().await,
            _ => Ok(()),
        }
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
    ) -> Result<Value, UpstreamError> {
        let (_, b) = self.next();
        match b {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang => std::future::pending().await,
            Behaviour::CutAfter(_) => Err(UpstreamError::Broken("mock cut the connection".into())),
            Behaviour::StallAfter(_) => std::future::pending().await,
            Behaviour::Empty | Behaviour::Normal => {
                pause(Duration::from_millis(self.spec.ttft_ms)).await;
                Ok(embeddings_reply(&self.spec, model, &req.input))
            }
        }
    }
}

/// Sleeps, except for zero: a zero sleep still waits for the next timer tick (about 1 ms).
async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

enum Paced {
    Chunk(Box<StreamChunk>),
    Break,
}

/// Plays a schedule in time; a hang never yields again.
fn paced(items: Vec<Item>) -> impl Stream<Item = Paced> + Send {
    stream::unfold(items.into_iter(), |mut it| async move {
        match it.next()? {
            Item::Chunk(d, c) => {
                pause(d).await;
                Some((Paced::Chunk(c), it))
            }
            Item::Break(d) => {
                pause(d).await;
                // Return Pending once so the HTTP server flushes the chunks already written:
                // a cut connection has delivered what came before the cut.
                tokio::task::yield_now().await;
                Some((Paced::Break, it))
            }
            Item::Hang => std::future::pending().await,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Standalone server

/// What the mock server received: path, headers and JSON body of one request.
#[derive(Debug, Clone)]
pub struct Received {
    /// The route that answered (`/chat/completions`, `/embeddings`).
    pub path: String,
    /// The request's path and query as sent.
    pub uri: String,
    pub version: axum::http::Version,
    pub headers: HeaderMap,
    pub body: Value,
}

struct MockState {
    spec: Mutex<MockSpec>,
    seen: AtomicU64,
    record: bool,
    received: Mutex<Vec<Received>>,
    /// Responses whose connection went away before the answer was complete.
    aborted: AtomicU64,
    /// Responses sent to the end (for a stream: its last byte was taken by the connection).
    completed: AtomicU64,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    changed: Notify,
}

/// A running standalone mock server on 127.0.0.1.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<MockState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Starts on 127.0.0.1 with an OS-chosen port, recording every request (for tests).
    pub async fn start(spec: MockSpec) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Self::on(listener, spec, true)
    }

    /// Serves on a bound listener. `record` keeps every request body (tests only).
    pub fn on(listener: TcpListener, spec: MockSpec, record: bool) -> std::io::Result<MockServer> {
        spec.validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState {
            spec: Mutex::new(spec),
            seen: AtomicU64::new(0),
            record,
            received: Mutex::new(Vec::new()),
            aborted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            changed: Notify::new(),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .route("/v1beta/models/{model_action}", post(generate))
            .route("/models/{model_action}", post(generate))
            // Azure OpenAI: deployment URLs.
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(chat),
            )
            .route(
                "/openai/deployments/{deployment}/embeddings",
                post(embeddings),
            )
            .route("/messages", post(messages))
            .route("/v1/responses", post(responses))
            .route("/responses", post(responses))
            .route("/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .route("/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .with_state(state.clone());
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(MockServer { addr, state, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to put in a channel's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests received so far (all endpoints).
    pub fn requests(&self) -> u64 {
        self.state.seen.load(Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<Received> {
        self.state
            .received
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    pub fn aborted(&self) -> u64 {
        self.state.aborted.load(Ordering::SeqCst)
    }

    pub fn completed(&self) -> u64 {
        self.state.completed.load(Ordering::SeqCst)
    }

    /// The most chat requests this server was answering at the same time.
    pub fn max_in_flight(&self) -> u64 {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Replaces the spec; the request counter (and so the script position) starts over.
    pub fn set_spec(&self, spec: MockSpec) {
        if let Ok(mut s) = self.state.spec.lock() {
            *s = spec;
        }
        self.state.seen.store(0, Ordering::SeqCst);
    }

    /// Waits until `pred` holds for this server, re-checking on every request or abort.
    pub async fn wait_until(&self, pred: impl Fn(&MockServer) -> bool) {
        loop {
            let notified = self.state.changed.notified();
            if pred(self) {
                return;
            }
            notified.await;
        }
    }
}

/// What every mock route does first: parse the body, count and record the request, and pick
/// the spec in force.
struct Incoming {
    uri: axum::http::Uri,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Bytes,
}

/// Everything a mock route reads of a request, taken in one extractor.
impl<S: Send + Sync> axum::extract::FromRequest<S> for Incoming {
    type Rejection = axum::extract::rejection::BytesRejection;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let (uri, version, headers) = (req.uri().clone(), req.version(), req.headers().clone());
        let body = Bytes::from_request(req, state).await?;
        Ok(Incoming {
            uri,
            version,
            headers,
            body,
        })
    }
}

fn begin(
    state: &MockState,
    path: &str,
    req: Incoming,
) -> Result<(u64, MockSpec, Value), Box<Response>> {
    let body: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Box::new(bad_request(&format!("invalid JSON: {e}"))))?;
    let n = state.seen.fetch_add(1, Ordering::SeqCst);
    if state.record
        && let Ok(mut r) = state.received.lock()
    {
        r.push(Received {
            path: path.to_string(),
            uri: req.uri.to_string(),
            version: req.version,
            headers: req.headers,
            body: body.clone(),
        });
    }
    state.changed.notify_waiters();
    let spec = state.spec.lock().map(|s| s.clone()).unwrap_or_default();
    Ok((n, spec, body))
}

/// Counts an abort when dropped before `done` is set: the peer went away mid-answer.
struct AbortGuard {
    state: Arc<MockState>,
    done: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        let counter = if self.done {
            &self.state.completed
        } else {
            &self.state.aborted
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.state.changed.notify_waiters();
    }
}

fn status_response(status: u16, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        error_json(status).to_string(),
    )
        .into_response();
    if let Some(s) = retry_after
        && let Ok(v) = s.to_string().parse()
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    if (300..400).contains(&status) {
        // Back to this same mock: a client that follows it shows up as a second request.
        resp.headers_mut().insert(
            header::LOCATION,
            header::HeaderValue::from_static("/v1/chat/completions?redirected=1"),
        );
    }
    resp
}

fn bad_request(msg: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": null}})
            .to_string(),
    )
        .into_response()
}

async fn chat(State(state): State<Arc<MockState>>, incoming: Incoming) -> Response {
    answer(state, incoming, Proto::OpenAi).await
}

/// Anthropic Messages, answered from the same reply as chat completions.
async fn messages(State(state): State<Arc<MockState>>, incoming: Incoming) -> Response {
    answer(state, incoming, Proto::Anthropic).await
}

/// The Responses API, answered from the same reply as chat completions.
async fn responses(State(state): State<Arc<MockState>>, incoming: Incoming) -> Response {
    answer(state, incoming, Proto::Responses).await
}

/// Gemini `models/{model}:generateContent` and `:streamGenerateContent`.
async fn generate(
    State(state): State<Arc<MockState>>,
    axum::extract::Path(model_action): axum::extract::Path<String>,
    incoming: Incoming,
) -> Response {
    let Some((model, action)) = model_action.rsplit_once(':') else {
        return bad_request("expected models/{model}:generateContent");
    };
    let stream = action == "streamGenerateContent";
    answer(
        state,
        incoming,
        Proto::Gemini {
            model: model.to_string(),
            stream,
        },
    )
    .await
}

/// The protocol a mock request speaks (Gemini carries model and stream in its URL).
enum Proto {
    OpenAi,
    Anthropic,
    Gemini { model: String, stream: bool },
    Responses,
}

async fn answer(state: Arc<MockState>, incoming: Incoming, proto: Proto) -> Response {
    let anthropic = matches!(proto, Proto::Anthropic);
    let gemini = matches!(proto, Proto::Gemini { .. });
    let bearer = incoming
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| {
            ["x-api-key", "x-goog-api-key"]
                .iter()
                .find_map(|h| incoming.headers.get(*h)?.to_str().ok())
        })
        .map(str::to_string);
    let path = match proto {
        Proto::Anthropic => "/messages",
        Proto::Gemini { .. } => "/generateContent",
        Proto::OpenAi => "/chat/completions",
        Proto::Responses => "/responses",
    };
    let (n, spec, v) = match begin(&state, path, incoming) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let mut echo = None;
    let parsed = match &proto {
        Proto::Anthropic => crate::protocol::anthropic::request_from_value(v),
        Proto::Gemini { model, stream } => {
            crate::protocol::gemini::request_from_value(v, model, *stream)
        }
        Proto::OpenAi => crate::protocol::openai::request_from_value(v),
        Proto::Responses => crate::protocol::responses::request_from_value(v).map(|(r, e)| {
            echo = Some(e);
            r
        }),
    };
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return bad_request(&e.message),
    };
    let model = req.model.clone();
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let mut guard = AbortGuard {
        state: state.clone(),
        done: false,
    };
    let behaviour = spec.behaviour_for(n, bearer.as_deref(), &model);
    match behaviour {
        Behaviour::Status(s, ra) => {
            guard.done = true;
            let mut resp = status_response(s, ra);
            let message = format!("mock fault: HTTP {s}");
            if anthropic {
                let body = crate::protocol::anthropic::error_body(s, &message);
                *resp.body_mut() = Body::from(body.to_string());
            } else if gemini {
                let body = crate::protocol::gemini::error_body(s, &message);
                *resp.body_mut() = Body::from(body.to_string());
            }
            return resp;
        }
        Behaviour::Hang | Behaviour::StallAfter(_) if !req.stream => {
            std::future::pending::<()>().await
        }
        Behaviour::CutAfter(_) if !req.stream => {
            pause(Duration::from_millis(spec.ttft_ms)).await;
            let broken = stream::iter([
                Ok(Bytes::from_static(b"{\"id\":\"chatcmpl-mock\",")),
                Err(std::io::Error::other("mock cut the connection")),
            ]);
            return Response::new(Body::from_stream(broken));
        }
        _ => {}
    }
    if !req.stream {
        pause(spec.total_time()).await;
        guard.done = true;
        let mut resp = reply(&spec, &model, &req, n);
        if behaviour == Behaviour::Empty {
            resp.choices.clear();
        }
        let body = if let Some(e) = &echo {
            serde_json::to_vec(&crate::protocol::responses::response_to_value(
                &resp, e, &model,
            ))
        } else if anthropic {
            serde_json::to_vec(&crate::protocol::anthropic::response_to_value(
                &resp, &model,
            ))
        } else if gemini {
            serde_json::to_vec(&crate::protocol::gemini::response_to_value(&resp, &model))
        } else {
            serde_json::to_vec(&ResponseBody {
                resp: &resp,
                report: None,
            })
        }
        .unwrap_or_default();
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let responses = echo.is_some();
    let include_usage = req.stream_include_usage || anthropic || gemini || responses;
    let mut chunks = reply_chunks(&spec, &model, &req, n);
    if !include_usage {
        chunks.pop();
    }
    let mut encoder = crate::protocol::anthropic::StreamEncoder::default();
    let mut gemini_encoder = crate::protocol::gemini::StreamEncoder::default();
    let mut responses_encoder =
        echo.map(|e| crate::protocol::responses::StreamEncoder::new(e, model.clone()));
    let model_name = model.clone();
    let items = schedule(&spec, behaviour, chunks);
    let ends_clean = matches!(behaviour, Behaviour::Normal | Behaviour::Empty);
    let body = paced(items)
        .map(move |p| match p {
            Paced::Chunk(c) if responses_encoder.is_some() => {
                let mut out = Vec::new();
                if let Some(enc) = responses_encoder.as_mut() {
                    enc.chunk(&c, &mut out);
                    if c.is_usage_only() {
                        enc.done(&mut out);
                    }
                }
                Ok(Bytes::from(out))
            }
            Paced::Chunk(c) if gemini => {
                let mut out = Vec::new();
                gemini_encoder.chunk(&c, &model_name, &mut out);
                if c.is_usage_only() {
                    gemini_encoder.done(&model_name, &mut out);
                }
                Ok(Bytes::from(out))
            }
            Paced::Chunk(c) if anthropic => {
                let mut out = Vec::new();
                encoder.chunk(&c, &model_name, &mut out);
                // The usage chunk is the last: the message ends with it.
                if c.is_usage_only() {
                    encoder.done(&mut out);
                }
                Ok(Bytes::from(out))
            }
            Paced::Chunk(c) => {
                let mut line = b"data: ".to_vec();
                line.extend(
                    serde_json::to_vec(&ChunkBody {
                        chunk: &c,
                        usage_null: include_usage,
                    })
                    .unwrap_or_default(),
                );
                line.extend_from_slice(b"\n\n");
                Ok(Bytes::from(line))
            }
            Paced::Break => Err(std::io::Error::other("mock cut the stream")),
        })
        .chain(stream::iter(
            (ends_clean && !anthropic && !gemini && !responses)
                .then(|| Ok::<_, std::io::Error>(Bytes::from_static(b"data: [DONE]\n\n"))),
        ))
        .chain(stream::once(async move {
            // Reached only when the whole stream was sent: not an abort.
            guard.done = true;
            drop(guard);
            Ok::<_, std::io::Error>(Bytes::new())
        }));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn embeddings(State(state): State<Arc<MockState>>, incoming: Incoming) -> Response {
    let (n, spec, v) = match begin(&state, "/embeddings", incoming) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    match spec.behaviour(n) {
        Behaviour::Status(s, ra) => return status_response(s, ra),
        Behaviour::Hang | Behaviour::StallAfter(_) => std::future::pending::<()>().await,
        _ => {}
    }
    let model = v.get("model").and_then(Value::as_str).unwrap_or("mock");
    let input = v.get("input").cloned().unwrap_or(Value::Null);
    pause(Duration::from_millis(spec.ttft_ms)).await;
    let out = embeddings_reply(&spec, model, &input);
    (
        [(header::CONTENT_TYPE, "application/json")],
        out.to_string(),
    )
        .into_response()
}

async fn models(State(state): State<Arc<MockState>>, incoming: Incoming) -> Response {
    // A GET: nothing to parse.
    let incoming = Incoming {
        body: Bytes::from_static(b"null"),
        ..incoming
    };
    let (n, spec, _) = match begin(&state, "/models", incoming) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    if let Behaviour::Status(s, ra) = spec.behaviour(n) {
        return status_response(s, ra);
    }
    axum::Json(json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "switchyard-mock"}]}))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_text_evenly() {
        let spec = MockSpec {
            text: "abcdefgh".into(),
            chunks: 3,
            ..MockSpec::default()
        };
        assert_eq!(spec.pieces(), ["abc", "def", "gh"]);
        let spec = MockSpec {
            text: "ab".into(),
            chunks: 8,
            ..MockSpec::default()
        };
        assert_eq!(spec.pieces(), ["a", "b"]);
    }

    #[test]
    fn script_then_fault_then_normal() {
        let spec: MockSpec = toml::from_str(
            "script = [{ status = 500 }, { ok = true }]\nfault = { status = 429, retry_after_seconds = 2 }",
        )
        .unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.behaviour(0), Behaviour::Status(500, None));
        assert_eq!(spec.behaviour(1), Behaviour::Normal);
        assert_eq!(spec.behaviour(2), Behaviour::Status(429, Some(2)));
    }

    #[test]
    fn faults_must_set_exactly_one_thing() {
        let bad: MockSpec = toml::from_str("fault = { hang = true, status = 500 }").unwrap();
        assert!(bad.validate().is_err());
        let bad: MockSpec = toml::from_str("fault = { status = 204 }").unwrap();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn embeddings_are_deterministic_and_normalised() {
        let a = embedding("x", 16);
        assert_eq!(a, embedding("x", 16));
        assert_ne!(a, embedding("y", 16));
        let norm: f32 = a.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
