//! Gemini upstreams: `{base}/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, `x-goog-api-key`; answers decoded into canonical types.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use eventsource_stream::{EventStream, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde_json::Value;

use super::{ChunkStream, UpstreamError};
use crate::config::Secret;
use crate::protocol::gemini::{StreamDecoder, request_to_value, response_from_value};
use crate::protocol::{
    ChatRequest, ChatResponse, InvalidUpstream, Protocol, RawBody, RawEvent, StreamChunk,
};

pub struct Gemini {
    base: Url,
    keys: Vec<Secret>,
    client: reqwest::Client,
}

impl fmt::Debug for Gemini {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gemini")
            .field("base", &super::redact_url(self.base.as_str()))
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Gemini {
    pub fn new(base: Url, keys: &[String], client: reqwest::Client) -> Result<Self, String> {
        if base.cannot_be_a_base() {
            return Err("not a base URL".into());
        }
        Ok(Gemini {
            base,
            keys: keys.iter().map(|k| Secret::new(k.as_str())).collect(),
            client,
        })
    }

    fn url(&self, op: &str) -> Url {
        let mut u = self.base.clone();
        u.set_path(&format!("{}/{op}", self.base.path().trim_end_matches('/')));
        u
    }

    fn key(
        &self,
        rb: reqwest::RequestBuilder,
        cred: Option<usize>,
    ) -> Result<reqwest::RequestBuilder, UpstreamError> {
        let Some(k) = cred.and_then(|i| self.keys.get(i)) else {
            return Ok(rb);
        };
        let mut v = HeaderValue::from_str(k.expose())
            .map_err(|_| UpstreamError::Connect("api key is not a valid header value".into()))?;
        v.set_sensitive(true);
        Ok(rb.header("x-goog-api-key", v))
    }

    async fn post(
        &self,
        url: Url,
        body: &Value,
        cred: Option<usize>,
        hops: u32,
    ) -> Result<reqwest::Response, UpstreamError> {
        let bytes = serde_json::to_vec(body).map_err(|e| InvalidUpstream {
            what: "request body",
            message: e.to_string(),
        })?;
        let rb = self
            .client
            .post(url)
            .header(super::HOPS_HEADER, hops.saturating_add(1))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(bytes);
        super::openai::send(self.key(rb, cred)?).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChatResponse, UpstreamError> {
        let url = self.url(&format!("models/{model}:generateContent"));
        let resp = self
            .post(url, &request_to_value(req), cred, req.hops)
            .await?;
        let v = super::openai::read_json(resp, "gemini response").await?;
        // A same-protocol client gets the upstream's body itself (thought signatures...).
        let mut out = response_from_value(&v)?;
        out.raw = (req.origin == Protocol::Gemini).then_some(RawBody {
            protocol: Protocol::Gemini,
            body: v,
        });
        Ok(out)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChunkStream, UpstreamError> {
        let mut url = self.url(&format!("models/{model}:streamGenerateContent"));
        url.query_pairs_mut().append_pair("alt", "sse");
        let resp = self
            .post(url, &request_to_value(req), cred, req.hops)
            .await?;
        Ok(Box::pin(Events {
            inner: resp.bytes_stream().eventsource(),
            decoder: StreamDecoder::default(),
            keep_raw: req.origin == Protocol::Gemini,
            finished: false,
            done: false,
        }))
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        super::openai::send(self.key(self.client.get(self.url("models")), cred)?).await?;
        Ok(())
    }
}

/// Gemini SSE events (each a partial response) → canonical chunks. Gemini sends no `[DONE]`:
/// the stream is complete when it ends after a finish reason.
struct Events<S> {
    inner: EventStream<S>,
    decoder: StreamDecoder,
    /// The client speaks Gemini too: every event also goes on as is.
    keep_raw: bool,
    finished: bool,
    done: bool,
}

impl<S> Stream for Events<S>
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
                    let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
                        continue;
                    };
                    if v.get("error").is_some() {
                        self.done = true;
                        return Poll::Ready(Some(Err(UpstreamError::StreamError)));
                    }
                    let mut chunk = self.decoder.event(&v);
                    if self.keep_raw {
                        chunk.raw = Some(RawEvent {
                            protocol: Protocol::Gemini,
                            event: None,
                            data: ev.data,
                        });
                    }
                    self.finished |= chunk.has_finish();
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(UpstreamError::Broken(e.to_string()))));
                }
                None => {
                    self.done = true;
                    if self.finished {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Err(UpstreamError::Broken(
                        "stream ended before a finish reason".into(),
                    ))));
                }
            }
        }
    }
}
