//! The standalone mock server (`switchyard mock`): its state, routes and the record of what it
//! received.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{StreamExt, stream};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::exchange::{Incoming, MockState, Received, bad_request, begin, status_response};
use super::reply::{Paced, embeddings_reply, paced, pause, reply, reply_chunks, schedule};
use super::side;
use super::spec::{Behaviour, MockSpec};
use super::wire::{Proto, Wire};
use crate::protocol::ChatRequest;

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

/// `axum::serve`, with HTTP/2's limit of streams a connection lifted (hyper's default is 200):
/// a gateway whose channel has `http2 = true` carries `bench/streams.sh`'s 10,000 streams on a
/// few connections, where HTTP/1 would need a socket each.
async fn serve(listener: TcpListener, app: axum::Router, state: Arc<MockState>) {
    let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    b.http2().max_concurrent_streams(None);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, most likely: wait for some to close.
                tracing::warn!(error = %e, "mock: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        state.connections.fetch_add(1, Ordering::SeqCst);
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                tower_service::Service::call(&mut app.clone(), req.map(Body::new))
            });
        let b = b.clone();
        tokio::spawn(async move {
            let _ = b.serve_connection(TokioIo::new(tcp), service).await;
        });
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
            connections: AtomicU64::new(0),
            changed: Notify::new(),
            cache: Default::default(),
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
            .route("/v1/messages/count_tokens", post(side::anthropic_count))
            .route("/messages/count_tokens", post(side::anthropic_count))
            .route("/v1/responses/input_tokens", post(side::responses_count))
            .route("/responses/input_tokens", post(side::responses_count))
            .route(
                "/v1/responses/{id}",
                get(side::get_response).delete(side::delete_response),
            )
            .route(
                "/responses/{id}",
                get(side::get_response).delete(side::delete_response),
            )
            .route("/v1/responses/{id}/input_items", get(side::input_items))
            .route("/responses/{id}/input_items", get(side::input_items))
            .route("/mcp", post(super::mcp::post))
            .with_state(state.clone());
        let task = tokio::spawn(serve(listener, app, state.clone()));
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

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    pub fn completed(&self) -> u64 {
        self.state.completed.load(Ordering::SeqCst)
    }

    /// The chat requests this server is answering now.
    pub fn in_flight(&self) -> u64 {
        self.state.in_flight.load(Ordering::SeqCst)
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
    if action == "countTokens" {
        return side::count_in(&state, incoming, crate::protocol::Protocol::Gemini, model).await;
    }
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

/// The caller's key: a bearer token, or the key header of Anthropic or Gemini.
fn caller_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| {
            ["x-api-key", "x-goog-api-key"]
                .iter()
                .find_map(|h| headers.get(*h)?.to_str().ok())
        })
        .map(str::to_string)
}

/// A chat request in any protocol: the behaviour in force decides how (and whether) it is
/// answered; `wire` writes the answer in the request's protocol.
async fn answer(state: Arc<MockState>, incoming: Incoming, proto: Proto) -> Response {
    let bearer = caller_key(&incoming.headers);
    let headers = incoming.headers.clone();
    let (n, spec, v) = match begin(&state, proto.path(), incoming) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    if let Some(why) = spec.refuse.as_ref().and_then(|r| r.why(&v, &headers)) {
        return bad_request(&why);
    }
    let (req, wire) = match proto.parse(v) {
        Ok(r) => r,
        Err(e) => return bad_request(&e.message),
    };
    let model = req.model.clone();
    let cached = spec
        .prompt_cache
        .then(|| state.cache.hit(bearer.as_deref().unwrap_or(""), &req));
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let mut guard = AbortGuard {
        state: state.clone(),
        done: false,
    };
    let b = spec.behaviour_for(n, bearer.as_deref(), &model);
    let (spec, behaviour) = spec.applying(b);
    match behaviour {
        Behaviour::Status(s, ra) => {
            guard.done = true;
            let mut resp = status_response(s, ra);
            if let Some(body) = wire.error_body(s) {
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
        Behaviour::Malformed if !req.stream => {
            guard.done = true;
            pause(spec.total_time()).await;
            return (
                [(header::CONTENT_TYPE, "application/json")],
                super::reply::MALFORMED_BODY,
            )
                .into_response();
        }
        _ => {}
    }
    if req.stream {
        return stream_answer(&spec, behaviour, &req, n, wire, guard, cached);
    }
    pause(spec.total_time()).await;
    guard.done = true;
    let mut resp = reply(&spec, &model, &req, n);
    if let (Some(u), Some(c)) = (resp.usage.as_mut(), cached) {
        u.cached_tokens = Some(c);
    }
    if behaviour == Behaviour::Empty {
        resp.choices.clear();
    }
    let body = wire.object(&resp, &model);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A streamed answer: the reply's chunks played in time under `behaviour`. `guard` counts the
/// answer completed once its last byte was taken, aborted if the stream is dropped before.
fn stream_answer(
    spec: &MockSpec,
    behaviour: Behaviour,
    req: &ChatRequest,
    n: u64,
    wire: Wire,
    mut guard: AbortGuard,
    cached: Option<u64>,
) -> Response {
    let include_usage = wire.include_usage(req);
    let mut chunks = reply_chunks(spec, &req.model, req, n);
    if let (Some(u), Some(c)) = (chunks.last_mut().and_then(|c| c.usage.as_mut()), cached) {
        u.cached_tokens = Some(c);
    }
    if !include_usage {
        chunks.pop();
    }
    let mut frames = wire.frames(req.model.clone(), include_usage);
    let end = match behaviour {
        Behaviour::Normal | Behaviour::Empty => frames.end(),
        _ => None,
    };
    let items = schedule(spec, behaviour, chunks);
    let body = paced(items)
        .map(move |p| match p {
            Paced::Chunk(c) => Ok(frames.frame(&c)),
            Paced::Garbage => Ok(Bytes::from_static(super::reply::GARBAGE)),
            Paced::Break => Err(std::io::Error::other("mock cut the stream")),
        })
        .chain(stream::iter(end.map(Ok::<_, std::io::Error>)))
        .chain(
            stream::once(async move {
                // Reached only when the whole stream was sent: not an abort.
                guard.done = true;
                drop(guard);
            })
            // No frame of its own: over HTTP/2 an empty DATA frame a stream is what h2 counts
            // as a flood (GOAWAY `too_many_data_frames` at a few hundred streams).
            .filter_map(|()| std::future::ready(None::<Result<Bytes, std::io::Error>>)),
        );
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
    let (n, spec, _) = match begin(&state, "/models", incoming.bodiless()) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    if let Behaviour::Status(s, ra) = spec.behaviour(n) {
        return status_response(s, ra);
    }
    axum::Json(json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "switchyard-mock"}]}))
        .into_response()
}
