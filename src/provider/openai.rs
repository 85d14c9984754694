//! OpenAI-compatible upstreams (OpenAI, vLLM, Ollama, OpenRouter...): `/chat/completions` and
//! `/embeddings` under the channel's base URL, SSE streams.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use eventsource_stream::{EventStream, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde_json::Value;

use super::{ChunkStream, UpstreamError, parse_retry_after};
use crate::config::Secret;
use crate::protocol::openai::{EmbeddingsBody, RequestBody, chunk_from_value, response_from_value};
use crate::protocol::{
    ChatRequest, ChatResponse, EmbeddingsRequest, InvalidUpstream, Protocol, StreamChunk,
};

/// Largest upstream error body kept (for a 400 passed back to the client).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streaming upstream answer read; a larger one is a broken upstream.
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

pub struct OpenAi {
    base: Url,
    chat_url: Url,
    embeddings_url: Url,
    models_url: Url,
    /// Set when the upstream serves the Responses API: Responses clients' requests go here.
    responses_url: Option<Box<Url>>,
    /// Azure OpenAI: the `api-version`; the upstream model name is the deployment.
    azure: Option<String>,
    keys: Vec<Secret>,
    stream_usage: bool,
    client: reqwest::Client,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAi")
            .field("chat_url", &super::redact_url(self.chat_url.as_str()))
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl OpenAi {
    pub fn new(
        base: Url,
        keys: &[String],
        stream_usage: bool,
        azure: Option<String>,
        client: reqwest::Client,
    ) -> Result<Self, String> {
        // Append to the path, keeping any query the base carries (`?api-version=...`).
        let endpoint = |p: &str| {
            let mut u = base.clone();
            let path = format!("{}/{p}", base.path().trim_end_matches('/'));
            u.set_path(&path);
            u
        };
        if base.cannot_be_a_base() {
            return Err("not a base URL".into());
        }
        Ok(OpenAi {
            chat_url: endpoint("chat/completions"),
            embeddings_url: endpoint("embeddings"),
            models_url: endpoint("models"),
            responses_url: None,
            base: base.clone(),
            azure,
            keys: keys.iter().map(|k| Secret::new(k.as_str())).collect(),
            stream_usage,
            client,
        })
    }

    /// The upstream serves the Responses API (`{base}/responses`).
    pub fn serve_responses(&mut self, on: bool) {
        self.responses_url = on.then(|| {
            let mut u = self.base.clone();
            u.set_path(&format!(
                "{}/responses",
                self.base.path().trim_end_matches('/')
            ));
            Box::new(u)
        });
    }

    /// A Responses client's own body, for an upstream that speaks it: only the model rewritten
    /// (and `stream` as this attempt wants it).
    fn responses_body<'r>(
        &'r self,
        req: &'r ChatRequest,
        model: &str,
    ) -> Option<(&'r Url, Vec<u8>)> {
        let url = self.responses_url.as_ref()?;
        let Some(Value::Object(raw)) = req
            .raw
            .as_ref()
            .filter(|_| req.origin == Protocol::OpenAiResponses)
        else {
            return None;
        };
        let mut body = raw.clone();
        crate::protocol::responses::for_upstream(&mut body);
        body.insert("model".into(), Value::String(model.into()));
        body.insert("stream".into(), Value::Bool(req.stream));
        Some((url, serde_json::to_vec(&body).ok()?))
    }

    async fn post(
        &self,
        url: &Url,
        body: Vec<u8>,
        stream: bool,
        cred: Option<usize>,
        hops: u32,
    ) -> Result<reqwest::Response, UpstreamError> {
        // Built from scratch: no client header, cookie or credential ever reaches the upstream.
        let rb = self
            .client
            .post(url.clone())
            .header(super::HOPS_HEADER, hops.saturating_add(1))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(
                ACCEPT,
                HeaderValue::from_static(if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                }),
            )
            .body(body);
        send(self.authorize(rb, cred)?).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChatResponse, UpstreamError> {
        if let Some((url, body)) = self.responses_body(req, model) {
            let resp = self.post(url, body, false, cred, req.hops).await?;
            let v = read_json(resp, "response").await?;
            return Ok(crate::protocol::responses::response_from_value(v)?);
        }
        let body = serialize(&RequestBody {
            req,
            model,
            force_usage: false,
        })?;
        let url = self.url(&self.chat_url, "chat/completions", model);
        let resp = self.post(&url, body, false, cred, req.hops).await?;
        let v = read_json(resp, "chat completion").await?;
        Ok(response_from_value(v)?)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChunkStream, UpstreamError> {
        if let Some((url, body)) = self.responses_body(req, model) {
            let resp = self.post(url, body, true, cred, req.hops).await?;
            return Ok(Box::pin(super::Events::new(
                resp,
                crate::protocol::responses::StreamDecoder::default(),
                Some(Protocol::OpenAiResponses),
                "stream ended before response.completed",
            )));
        }
        let body = serialize(&RequestBody {
            req,
            model,
            force_usage: self.stream_usage,
        })?;
        let url = self.url(&self.chat_url, "chat/completions", model);
        let resp = self.post(&url, body, true, cred, req.hops).await?;
        Ok(Box::pin(SseChunks {
            inner: resp.bytes_stream().eventsource(),
            done: false,
            finished: false,
        }))
    }

    /// Where an operation goes: the fixed OpenAI URL, or Azure's deployment URL for the model
    /// (`{base}/openai/deployments/{model}/{op}?api-version=...`).
    fn url<'a>(&'a self, fixed: &'a Url, op: &str, model: &str) -> std::borrow::Cow<'a, Url> {
        let Some(version) = &self.azure else {
            return std::borrow::Cow::Borrowed(fixed);
        };
        let mut u = self.base.clone();
        let path = format!(
            "{}/openai/deployments/{model}/{op}",
            self.base.path().trim_end_matches('/')
        );
        u.set_path(&path);
        u.query_pairs_mut().append_pair("api-version", version);
        std::borrow::Cow::Owned(u)
    }

    /// The reserved credential, as a sensitive header (never logged by the HTTP stack):
    /// `Authorization: Bearer` for OpenAI, `api-key` for Azure.
    fn authorize(
        &self,
        rb: reqwest::RequestBuilder,
        cred: Option<usize>,
    ) -> Result<reqwest::RequestBuilder, UpstreamError> {
        let Some(k) = cred.and_then(|i| self.keys.get(i)) else {
            return Ok(rb);
        };
        let value = if self.azure.is_some() {
            k.expose().to_string()
        } else {
            format!("Bearer {}", k.expose())
        };
        let mut v = HeaderValue::from_str(&value)
            .map_err(|_| UpstreamError::Connect("api key is not a valid header value".into()))?;
        v.set_sensitive(true);
        Ok(if self.azure.is_some() {
            rb.header("api-key", v)
        } else {
            rb.header(AUTHORIZATION, v)
        })
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        send(self.authorize(self.client.get(self.models_url.clone()), cred)?).await?;
        Ok(())
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<Value, UpstreamError> {
        let body = serialize(&EmbeddingsBody { req, model })?;
        let url = self.url(&self.embeddings_url, "embeddings", model);
        let resp = self.post(&url, body, false, cred, req.hops).await?;
        let v = read_json(resp, "embeddings response").await?;
        if !v.get("data").is_some_and(Value::is_array) {
            return Err(InvalidUpstream {
                what: "embeddings response",
                message: "missing data array".into(),
            }
            .into());
        }
        Ok(v)
    }
}

fn serialize<T: serde::Serialize>(body: &T) -> Result<Vec<u8>, UpstreamError> {
    // Serialising our own canonical types cannot fail in practice (no non-string map keys);
    // report it as an upstream-side problem rather than panic.
    serde_json::to_vec(body).map_err(|e| {
        UpstreamError::Invalid(InvalidUpstream {
            what: "request body",
            message: e.to_string(),
        })
    })
}

/// The error and its sources, without URLs (the caller strips them first).
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Reads a whole body, refusing one larger than `cap`.
/// A whole upstream answer as JSON, never more than [`MAX_RESPONSE_BODY`] bytes of it.
pub(super) async fn read_json(
    resp: reqwest::Response,
    what: &'static str,
) -> Result<Value, UpstreamError> {
    let bytes = read_capped(resp, MAX_RESPONSE_BODY).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        UpstreamError::Invalid(InvalidUpstream {
            what,
            message: e.to_string(),
        })
    })
}

async fn read_capped(resp: reqwest::Response, cap: usize) -> Result<Bytes, UpstreamError> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    let mut body = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.map_err(|e| UpstreamError::Broken(error_chain(&e.without_url())))?;
        if body.len() + chunk.len() > cap {
            return Err(too_large(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

fn too_large(cap: usize) -> UpstreamError {
    UpstreamError::Invalid(InvalidUpstream {
        what: "response",
        message: format!("larger than {cap} bytes"),
    })
}

/// Sends a request; a connection failure or a non-2xx answer becomes its upstream error class.
pub(super) async fn send(rb: reqwest::RequestBuilder) -> Result<reqwest::Response, UpstreamError> {
    // `without_url`: the URL may carry credentials (`?key=`); it never reaches a log.
    let resp = rb
        .send()
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&e.without_url())))?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    Err(status_error(resp).await)
}

pub(super) async fn status_error(resp: reqwest::Response) -> UpstreamError {
    let status = resp.status().as_u16();
    let retry_after = parse_retry_after(resp.headers());
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(Ok(chunk)) = s.next().await {
        let room = MAX_ERROR_BODY.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    UpstreamError::Status {
        status,
        retry_after,
        body: Bytes::from(body),
        content_type,
    }
}

/// SSE events → canonical chunks. Ends at `[DONE]`; an end without `[DONE]` and without a
/// finish reason is a broken stream, never a clean close.
struct SseChunks<S> {
    inner: EventStream<S>,
    done: bool,
    finished: bool,
}

impl<S> Stream for SseChunks<S>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    type Item = Result<StreamChunk, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            match std::task::ready!(self.inner.poll_next_unpin(cx)) {
                Some(Ok(ev)) => {
                    let data = ev.data.trim();
                    if data.is_empty() {
                        continue;
                    }
                    if data == "[DONE]" {
                        self.done = true;
                        return Poll::Ready(None);
                    }
                    let v: Value = match serde_json::from_str(data) {
                        Ok(v) => v,
                        Err(e) => {
                            self.done = true;
                            return Poll::Ready(Some(Err(InvalidUpstream {
                                what: "stream chunk",
                                message: e.to_string(),
                            }
                            .into())));
                        }
                    };
                    if v.get("error").is_some() && v.get("choices").is_none() {
                        self.done = true;
                        return Poll::Ready(Some(Err(UpstreamError::StreamError)));
                    }
                    let chunk = chunk_from_value(v);
                    if let Ok(c) = &chunk {
                        self.finished |= c.has_finish();
                    }
                    return Poll::Ready(Some(chunk.map_err(Into::into)));
                }
                Some(Err(e)) => {
                    self.done = true;
                    let msg = match e {
                        eventsource_stream::EventStreamError::Transport(t) => {
                            error_chain(&t.without_url())
                        }
                        other => other.to_string(),
                    };
                    return Poll::Ready(Some(Err(UpstreamError::Broken(msg))));
                }
                None => {
                    self.done = true;
                    if self.finished {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Err(UpstreamError::Broken(
                        "stream ended before [DONE]".into(),
                    ))));
                }
            }
        }
    }
}
