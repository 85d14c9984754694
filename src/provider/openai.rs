//! OpenAI-compatible upstreams (OpenAI, Azure, vLLM, Ollama, OpenRouter...): `/chat/completions`,
//! `/responses` (when the upstream serves it) and `/embeddings` under the channel's base URL.

use std::fmt;

use ::http::Method;
use ::http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use reqwest::Url;
use serde_json::Value;

use super::http::{self, Target, join, post_json, read_json, send, to_body};
use super::presets::Preset;
use super::sse::{Decoder, Events};
use super::{ChunkStream, KeptCall, UpstreamError, Via, Waited};
use crate::protocol::openai::{
    EmbeddingsBody, RequestBody, chunk_from_str, response_from_value, scan_answer, scan_chunk,
};
use crate::protocol::{
    ChatRequest, ChatResponse, Decoded, EmbeddingsRequest, InvalidUpstream, Protocol,
};
use crate::secret::Secret;

pub struct OpenAi {
    base: Url,
    chat_url: Url,
    /// The fixed endpoints, parsed once (Azure's are per deployment, made per call).
    chat: Target,
    embeddings: Target,
    models: Target,
    /// Set when the upstream serves the Responses API: Responses clients' requests go here.
    responses: Option<Box<Target>>,
    /// Azure OpenAI: the `api-version`; the upstream model name is the deployment.
    azure: Option<String>,
    keys: Vec<Secret>,
    stream_usage: bool,
    client: http::Client,
    /// A named provider's differences, applied to each Chat Completions body.
    preset: Option<&'static Preset>,
    /// Headers every request carries.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAi")
            .field("chat_url", &http::redact_url(self.chat_url.as_str()))
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl OpenAi {
    pub fn new(
        base: Url,
        keys: Vec<Secret>,
        stream_usage: bool,
        azure: Option<String>,
        responses: bool,
        client: http::Client,
    ) -> Result<Self, UpstreamError> {
        let chat_url = join(&base, "chat/completions");
        let responses = match responses {
            true => Some(Box::new(Target::of(&join(&base, "responses"))?)),
            false => None,
        };
        Ok(OpenAi {
            chat: Target::of(&chat_url)?,
            embeddings: Target::of(&join(&base, "embeddings"))?,
            models: Target::of(&join(&base, "models"))?,
            chat_url,
            responses,
            base,
            azure,
            keys,
            stream_usage,
            client,
            preset: None,
            headers: Vec::new(),
        })
    }

    /// With a named provider's differences and the headers every request carries (names and
    /// values checked at load).
    pub fn with_quirks(
        mut self,
        preset: Option<&'static Preset>,
        headers: &[(String, String)],
    ) -> Result<Self, String> {
        self.preset = preset;
        for (k, v) in headers {
            let name =
                HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("header name {k:?}"))?;
            let value =
                HeaderValue::from_str(v).map_err(|_| format!("header {k}: not a header value"))?;
            self.headers.push((name, value));
        }
        Ok(self)
    }

    /// The Chat Completions body: OpenAI's, with the provider's differences applied.
    fn chat_body(
        &self,
        req: &ChatRequest,
        model: &str,
        force_usage: bool,
    ) -> Result<Vec<u8>, UpstreamError> {
        let body = RequestBody {
            req,
            model,
            force_usage,
        };
        let Some(p) = self.preset else {
            return to_body(&body);
        };
        let mut v = serde_json::to_value(&body).map_err(|e| {
            UpstreamError::Invalid(InvalidUpstream {
                what: "request body",
                message: e.to_string(),
            })
        })?;
        p.apply(&mut v);
        to_body(&v)
    }

    /// Where calls go (its host and port name the upstream on spans).
    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn endpoint(&self) -> String {
        // A placeholder for Azure's deployment, written after the URL (which would escape it).
        let url = match &self.azure {
            Some(v) => self.azure_url("chat/completions", "MODEL", v),
            None => self.chat_url.clone(),
        };
        http::redact_url(url.as_str()).replace("/MODEL/", "/{model}/")
    }

    /// A Responses client's own body, for an upstream that speaks it: only the model rewritten
    /// (and `stream` as this attempt wants it).
    fn responses_body<'r>(
        &'r self,
        req: &'r ChatRequest,
        model: &str,
    ) -> Option<(&'r Target, Vec<u8>)> {
        let url = self.responses.as_deref()?;
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
        to: &Target,
        body: Vec<u8>,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        let mut req = post_json(to, body, stream, hops, self.auth(via.cred)?, via.trace);
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        send(&self.client, req, via.waited).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        if let Some((url, body)) = self.responses_body(req, model) {
            let resp = self.post(url, body, false, via, req.hops).await?;
            let v = read_json(resp, "response", via.waited).await?;
            return Ok(crate::protocol::responses::response_from_value(v)?);
        }
        let body = self.chat_body(req, model, false)?;
        let url = self.target(&self.chat, "chat/completions", model)?;
        let resp = self.post(&url, body, false, via, req.hops).await?;
        let bytes = http::read_body(resp, via.waited).await?;
        // A Chat Completions client gets the answer as it came: scanned, not rebuilt.
        if req.origin == Protocol::OpenAiChat
            && let Some(mut r) = scan_answer(&bytes)
        {
            r.as_sent = Some(bytes);
            return Ok(r);
        }
        let v = http::parse_json(&bytes, "chat completion")?;
        Ok(response_from_value(v)?)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        if let Some((url, body)) = self.responses_body(req, model) {
            let resp = self.post(url, body, true, via, req.hops).await?;
            return Ok(Box::pin(Events::new(
                resp,
                crate::protocol::responses::StreamDecoder::default(),
                Some(Protocol::OpenAiResponses),
            )));
        }
        let body = self.chat_body(req, model, self.stream_usage)?;
        let url = self.target(&self.chat, "chat/completions", model)?;
        let resp = self.post(&url, body, true, via, req.hops).await?;
        // A Chat Completions client gets the upstream's events as they came: read, not rebuilt.
        let same = req.origin == Protocol::OpenAiChat;
        let decoder = ChatDecoder {
            scan: same,
            ..ChatDecoder::default()
        };
        Ok(Box::pin(Events::new(
            resp,
            decoder,
            same.then_some(Protocol::OpenAiChat),
        )))
    }

    /// Where an operation goes: the fixed OpenAI URL, or Azure's deployment URL for the model
    /// (`{base}/openai/deployments/{model}/{op}?api-version=...`).
    fn target<'a>(
        &'a self,
        fixed: &'a Target,
        op: &str,
        model: &str,
    ) -> Result<std::borrow::Cow<'a, Target>, UpstreamError> {
        Ok(match &self.azure {
            None => std::borrow::Cow::Borrowed(fixed),
            Some(v) => std::borrow::Cow::Owned(Target::of(&self.azure_url(op, model, v))?),
        })
    }

    fn azure_url(&self, op: &str, model: &str, version: &str) -> Url {
        let mut u = join(&self.base, &format!("openai/deployments/{model}/{op}"));
        u.query_pairs_mut().append_pair("api-version", version);
        u
    }

    /// The reserved credential: `Authorization: Bearer` for OpenAI, `api-key` for Azure.
    fn auth(
        &self,
        cred: Option<usize>,
    ) -> Result<Option<(HeaderName, HeaderValue)>, UpstreamError> {
        Ok(if self.azure.is_some() {
            http::credential(&self.keys, cred, "")?.map(|v| (HeaderName::from_static("api-key"), v))
        } else {
            http::credential(&self.keys, cred, "Bearer ")?.map(|v| (AUTHORIZATION, v))
        })
    }

    /// Whether the upstream serves the Responses API.
    pub fn serves_responses(&self) -> bool {
        self.responses.is_some()
    }

    /// `POST {base}/responses/input_tokens` with the client's counting body.
    pub async fn count_tokens(
        &self,
        body: &Value,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        let to = Target::of(&join(&self.base, "responses/input_tokens"))?;
        let resp = self.post(&to, to_body(body)?, false, via, hops).await?;
        read_json(resp, "responses token count", via.waited).await
    }

    /// A response the upstream keeps: `GET` or `DELETE {base}/responses/{id}`, or its
    /// `input_items` page.
    pub async fn kept(
        &self,
        id: &str,
        call: KeptCall<'_>,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| UpstreamError::Connect("the base URL cannot take a path".into()))?
            .pop_if_empty()
            .extend(["responses", id]);
        let method = match call {
            KeptCall::Get => Method::GET,
            KeptCall::Delete => Method::DELETE,
            KeptCall::InputItems(query) => {
                if let Ok(mut segments) = url.path_segments_mut() {
                    segments.push("input_items");
                }
                url.set_query(query);
                Method::GET
            }
        };
        let req = http::bodiless(
            method,
            &Target::of(&url)?,
            hops,
            self.auth(via.cred)?,
            via.trace,
        );
        let resp = send(&self.client, req, via.waited).await?;
        read_json(resp, "kept response", via.waited).await
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        let req = http::get(&self.models, self.auth(cred)?);
        send(&self.client, req, &Waited::default()).await?;
        Ok(())
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<Value, UpstreamError> {
        let body = to_body(&EmbeddingsBody { req, model })?;
        let url = self.target(&self.embeddings, "embeddings", model)?;
        let resp = self.post(&url, body, false, via, req.hops).await?;
        let v = read_json(resp, "embeddings response", via.waited).await?;
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

/// Chat Completions events: ends at `[DONE]`; an end of the bytes without it is complete only
/// after a finish reason.
#[derive(Default)]
struct ChatDecoder {
    finished: bool,
    /// The events go on as they came (a Chat Completions client): scanned where the scan can
    /// say what they hold, read whole where not.
    scan: bool,
    /// A chunk has been read (the first one's id and model are kept).
    started: bool,
}

/// The decoder of a Chat Completions stream (`scan`: for a client of the same protocol).
pub(super) fn chat_decoder(scan: bool) -> impl Decoder {
    ChatDecoder {
        scan,
        ..ChatDecoder::default()
    }
}

impl Decoder for ChatDecoder {
    fn decode(&mut self, _: &str, data: &str) -> Decoded {
        let data = data.trim();
        if data.is_empty() {
            return Decoded::Skip;
        }
        if data == "[DONE]" {
            return Decoded::End;
        }
        let head = !std::mem::replace(&mut self.started, true);
        let scanned = self.scan.then(|| scan_chunk(data, head)).flatten();
        let read = match scanned {
            Some(c) => Ok(Some(c)),
            None => chunk_from_str(data).map(|c| c.map(Box::new)),
        };
        match read {
            Ok(Some(c)) => {
                self.finished |= c.has_finish();
                Decoded::Chunk(c)
            }
            Ok(None) => Decoded::Error,
            Err(e) => Decoded::Invalid(e),
        }
    }

    fn at_end(&self) -> Result<(), &'static str> {
        if self.finished {
            Ok(())
        } else {
            Err("stream ended before [DONE]")
        }
    }
}

/// A Responses stream says when it is complete (`response.completed`): any other end is a break.
impl Decoder for crate::protocol::responses::StreamDecoder {
    fn decode(&mut self, event: &str, data: &str) -> Decoded {
        super::sse::json(data).map_or(Decoded::Skip, |v| self.event(event, &v))
    }

    fn at_end(&self) -> Result<(), &'static str> {
        Err("stream ended before response.completed")
    }
}
