//! Google Vertex AI upstreams: one project and location, three publishers behind them.
//! Gemini (`publishers/google/models/{m}:generateContent`, `:streamGenerateContent?alt=sse`;
//! Gemini's own translation), Claude (`publishers/anthropic/models/{m}:rawPredict`,
//! `:streamRawPredict`; the Messages body with Vertex's `anthropic_version` and no `model`, an
//! Anthropic client's as sent) and open models (`endpoints/openapi/chat/completions`,
//! OpenAI-compatible). Embeddings through a Gemini embedding model's `:predict`. Every call
//! carries a Google access token (`provider::auth::google`), fetched ahead of its expiry.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use ::http::header::{AUTHORIZATION, HeaderValue};
use bytes::Bytes;
use reqwest::Url;
use serde_json::{Value, json};

use super::auth::Refreshing;
use super::auth::google::TokenSource;
use super::http::{self, Target, join, post_json, read_json, send, to_body};
use super::sse::Events;
use super::{ChunkStream, UpstreamError, Via};
use crate::protocol::openai::{RequestBody, response_from_value};
use crate::protocol::{
    ChatRequest, ChatResponse, EmbeddingsRequest, Protocol, RawBody, anthropic, gemini,
};

/// The `anthropic_version` Vertex wants in a Claude body.
pub const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Who serves a model on Vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publisher {
    Google,
    Anthropic,
    /// Open models behind Vertex's OpenAI-compatible endpoint.
    OpenApi,
}

impl Publisher {
    /// As a model entry names it, else by the model's name: `claude-*` Anthropic's,
    /// `gemini-*` (and the embedding models) Google's, anything else the open endpoint's.
    pub fn of(named: Option<&str>, model: &str) -> Result<Publisher, String> {
        match named {
            Some("anthropic") => Ok(Publisher::Anthropic),
            Some("google") => Ok(Publisher::Google),
            Some("openapi") => Ok(Publisher::OpenApi),
            Some(other) => Err(format!(
                "publisher {other:?}: expected \"anthropic\", \"google\" or \"openapi\""
            )),
            None if model.starts_with("claude") => Ok(Publisher::Anthropic),
            None if model.starts_with("gemini")
                || model.starts_with("text-embedding")
                || model.starts_with("text-multilingual-embedding") =>
            {
                Ok(Publisher::Google)
            }
            None => Ok(Publisher::OpenApi),
        }
    }

    /// The wire protocol its calls speak.
    pub fn protocol(self) -> Protocol {
        match self {
            Publisher::Google => Protocol::Gemini,
            Publisher::Anthropic => Protocol::AnthropicMessages,
            Publisher::OpenApi => Protocol::OpenAiChat,
        }
    }
}

pub struct Vertex {
    /// `{base}/projects/{p}/locations/{l}`.
    root: Url,
    token: Arc<Refreshing<TokenSource>>,
    /// Upstream model name → who serves it.
    publishers: HashMap<String, Publisher>,
    client: http::Client,
}

impl fmt::Debug for Vertex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vertex")
            .field("root", &http::redact_url(self.root.as_str()))
            .finish_non_exhaustive()
    }
}

impl Vertex {
    pub fn new(
        root: Url,
        token: Arc<Refreshing<TokenSource>>,
        publishers: HashMap<String, Publisher>,
        client: http::Client,
    ) -> Self {
        Vertex {
            root,
            token,
            publishers,
            client,
        }
    }

    pub fn base(&self) -> &Url {
        &self.root
    }

    pub fn endpoint(&self) -> String {
        format!(
            "{}/publishers/{{publisher}}/models/{{model}} ({})",
            http::redact_url(self.root.as_str()).trim_end_matches('/'),
            self.token.status().source
        )
    }

    pub fn auth_status(&self) -> super::auth::AuthStatus {
        self.token.status()
    }

    pub fn publisher(&self, model: &str) -> Publisher {
        self.publishers
            .get(model)
            .copied()
            .unwrap_or_else(|| Publisher::of(None, model).unwrap_or(Publisher::OpenApi))
    }

    fn url(
        &self,
        publisher: Publisher,
        model: &str,
        action: &str,
    ) -> Result<Target, UpstreamError> {
        let url = match publisher {
            Publisher::OpenApi => join(&self.root, "endpoints/openapi/chat/completions"),
            Publisher::Google => join(
                &self.root,
                &format!("publishers/google/models/{model}:{action}"),
            ),
            Publisher::Anthropic => join(
                &self.root,
                &format!("publishers/anthropic/models/{model}:{action}"),
            ),
        };
        Target::of(&url)
    }

    /// One call with the channel's current access token; a token that cannot be had refuses
    /// the credential, as a 401 would.
    async fn post(
        &self,
        to: Target,
        body: Vec<u8>,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        let token = self.token.get().await.map_err(|e| UpstreamError::Status {
            status: 401,
            retry_after: None,
            body: Bytes::from(format!("no Google access token: {e}")),
            content_type: None,
        })?;
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| UpstreamError::Connect("the access token is not a header value".into()))?;
        v.set_sensitive(true);
        let req = post_json(&to, body, stream, hops, Some((AUTHORIZATION, v)), via.trace);
        send(&self.client, req, via.waited).await
    }

    /// A Claude body for Vertex: the Messages body (an Anthropic client's as sent), Vertex's
    /// `anthropic_version`, no `model` (the path says it).
    fn claude_body(req: &ChatRequest, model: &str, stream: bool) -> Value {
        let mut v = anthropic::request_to_value(req, model);
        if let Some(o) = v.as_object_mut() {
            o.remove("model");
            o.remove("stream");
            if stream {
                o.insert("stream".into(), Value::Bool(true));
            }
            o.insert("anthropic_version".into(), VERTEX_ANTHROPIC_VERSION.into());
        }
        v
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        let p = self.publisher(model);
        let (action, body) = match p {
            Publisher::Google => ("generateContent", to_body(&gemini::request_to_value(req))?),
            Publisher::Anthropic => (
                "rawPredict",
                to_body(&Self::claude_body(req, model, false))?,
            ),
            Publisher::OpenApi => {
                let b = RequestBody {
                    req,
                    model,
                    force_usage: false,
                };
                ("chat/completions", to_body(&b)?)
            }
        };
        let resp = self
            .post(self.url(p, model, action)?, body, false, via, req.hops)
            .await?;
        let v = read_json(resp, "vertex answer", via.waited).await?;
        // A client of the publisher's own protocol gets the body itself.
        let raw = (req.origin == p.protocol() && p != Publisher::OpenApi).then(|| RawBody {
            protocol: p.protocol(),
            body: v.clone(),
        });
        let mut out = match p {
            Publisher::Google => gemini::response_from_value(&v)?,
            Publisher::Anthropic => anthropic::response_from_value(&v)?,
            Publisher::OpenApi => response_from_value(v)?,
        };
        out.raw = raw;
        Ok(out)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        let p = self.publisher(model);
        let same = (req.origin == p.protocol()).then_some(p.protocol());
        match p {
            Publisher::Google => {
                let body = to_body(&gemini::request_to_value(req))?;
                let mut url = join(
                    &self.root,
                    &format!("publishers/google/models/{model}:streamGenerateContent"),
                );
                url.query_pairs_mut().append_pair("alt", "sse");
                let resp = self
                    .post(Target::of(&url)?, body, true, via, req.hops)
                    .await?;
                Ok(Box::pin(Events::new(resp, super::gemini::partials(), same)))
            }
            Publisher::Anthropic => {
                let body = to_body(&Self::claude_body(req, model, true))?;
                let to = self.url(p, model, "streamRawPredict")?;
                let resp = self.post(to, body, true, via, req.hops).await?;
                Ok(Box::pin(Events::new(
                    resp,
                    anthropic::StreamDecoder::default(),
                    same,
                )))
            }
            Publisher::OpenApi => {
                let body = to_body(&RequestBody {
                    req,
                    model,
                    force_usage: true,
                })?;
                let resp = self
                    .post(self.url(p, model, "")?, body, true, via, req.hops)
                    .await?;
                Ok(Box::pin(Events::new(
                    resp,
                    super::openai::chat_decoder(false),
                    None,
                )))
            }
        }
    }

    /// OpenAI embeddings through a Gemini embedding model's `:predict` (open models: the
    /// OpenAI-compatible endpoint has none).
    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<Value, UpstreamError> {
        if self.publisher(model) != Publisher::Google {
            return Err(UpstreamError::Status {
                status: 404,
                retry_after: None,
                body: Bytes::from_static(b"embeddings only through a Google embedding model"),
                content_type: None,
            });
        }
        let texts: Vec<Value> = match &req.input {
            Value::String(s) => vec![json!({"content": s})],
            Value::Array(items) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|s| json!({"content": s}))
                .collect(),
            _ => Vec::new(),
        };
        let body = to_body(&json!({ "instances": texts }))?;
        let resp = self
            .post(
                self.url(Publisher::Google, model, "predict")?,
                body,
                false,
                via,
                req.hops,
            )
            .await?;
        let v = read_json(resp, "vertex predictions", via.waited).await?;
        let preds = v["predictions"].as_array().ok_or_else(|| {
            UpstreamError::Invalid(crate::protocol::InvalidUpstream {
                what: "vertex predictions",
                message: "missing predictions".into(),
            })
        })?;
        let mut tokens = 0;
        let data: Vec<Value> = preds
            .iter()
            .enumerate()
            .map(|(i, p)| {
                tokens += p["embeddings"]["statistics"]["token_count"]
                    .as_u64()
                    .unwrap_or(0);
                json!({"object": "embedding", "index": i, "embedding": p["embeddings"]["values"]})
            })
            .collect();
        Ok(json!({"object": "list", "model": model, "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    }

    /// A free check that Vertex takes the credential: a token can be had.
    pub async fn models(&self) -> Result<(), UpstreamError> {
        self.token
            .get()
            .await
            .map(|_| ())
            .map_err(|e| UpstreamError::Status {
                status: 401,
                retry_after: None,
                body: Bytes::from(format!("no Google access token: {e}")),
                content_type: None,
            })
    }
}
