//! Anthropic Messages upstreams: `POST {base}/v1/messages` with `x-api-key` and
//! `anthropic-version`; answers and SSE events decoded into canonical types.

use std::fmt;

use ::http::header::{HeaderName, HeaderValue};
use reqwest::Url;
use serde_json::Value;

use super::http::{self, Target, join, post_json, read_json, send, to_body};
use super::sse::{Decoder, Events, json};
use super::{ChunkStream, UpstreamError, Via, Waited};
use crate::protocol::anthropic::{StreamDecoder, request_to_value, response_from_value};
use crate::protocol::{ChatRequest, ChatResponse, Decoded, Protocol, RawBody};
use crate::secret::Secret;

const VERSION: &str = "2023-06-01";
const VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

pub struct Anthropic {
    messages_url: Url,
    /// Parsed once.
    messages: Target,
    count: Target,
    models: Target,
    keys: Vec<Secret>,
    client: http::Client,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Anthropic")
            .field(
                "messages_url",
                &http::redact_url(self.messages_url.as_str()),
            )
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// The API root under a base URL written either way: as Anthropic's SDKs take it
/// (`https://api.anthropic.com`) or with the version (`.../v1`), as OpenAI-style configs do.
pub fn api_root(base: &Url) -> Url {
    if base.path().trim_end_matches('/').ends_with("/v1") {
        base.clone()
    } else {
        join(base, "v1")
    }
}

impl Anthropic {
    pub fn new(base: Url, keys: Vec<Secret>, client: http::Client) -> Result<Self, UpstreamError> {
        let root = api_root(&base);
        let messages_url = join(&root, "messages");
        Ok(Anthropic {
            messages: Target::of(&messages_url)?,
            count: Target::of(&join(&root, "messages/count_tokens"))?,
            models: Target::of(&join(&root, "models"))?,
            messages_url,
            keys,
            client,
        })
    }

    /// Where calls go (its host and port name the upstream on spans).
    pub fn base(&self) -> &Url {
        &self.messages_url
    }

    pub fn endpoint(&self) -> String {
        http::redact_url(self.messages_url.as_str())
    }

    fn auth(
        &self,
        cred: Option<usize>,
    ) -> Result<Option<(HeaderName, HeaderValue)>, UpstreamError> {
        Ok(http::credential(&self.keys, cred, "")?
            .map(|v| (HeaderName::from_static("x-api-key"), v)))
    }

    async fn post(
        &self,
        body: &Value,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        self.post_to(&self.messages, body, stream, via, hops).await
    }

    async fn post_to(
        &self,
        to: &Target,
        body: &Value,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        let auth = self.auth(via.cred)?;
        let mut req = post_json(to, to_body(body)?, stream, hops, auth, via.trace);
        req.headers_mut()
            .insert(VERSION_HEADER, HeaderValue::from_static(VERSION));
        send(&self.client, req, via.waited).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        let mut body = request_to_value(req, model);
        body.as_object_mut().map(|o| o.remove("stream"));
        let resp = self.post(&body, false, via, req.hops).await?;
        let v = read_json(resp, "anthropic message", via.waited).await?;
        // A same-protocol client gets the upstream's body itself (thinking signatures...).
        let mut out = response_from_value(&v)?;
        out.raw = (req.origin == Protocol::AnthropicMessages).then_some(RawBody {
            protocol: Protocol::AnthropicMessages,
            body: v,
        });
        Ok(out)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        let mut body = request_to_value(req, model);
        if let Some(o) = body.as_object_mut() {
            o.insert("stream".into(), Value::Bool(true));
        }
        let resp = self.post(&body, true, via, req.hops).await?;
        Ok(Box::pin(Events::new(
            resp,
            StreamDecoder::default(),
            (req.origin == Protocol::AnthropicMessages).then_some(Protocol::AnthropicMessages),
        )))
    }

    /// `POST {root}/messages/count_tokens` with the client's counting body.
    pub async fn count_tokens(
        &self,
        body: &Value,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        let resp = self.post_to(&self.count, body, false, via, hops).await?;
        read_json(resp, "anthropic token count", via.waited).await
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        let mut req = http::get(&self.models, self.auth(cred)?);
        req.headers_mut()
            .insert(VERSION_HEADER, HeaderValue::from_static(VERSION));
        send(&self.client, req, &Waited::default()).await?;
        Ok(())
    }
}

/// Anthropic's stream says when it is complete (`message_stop`): any other end is a break.
impl Decoder for StreamDecoder {
    fn decode(&mut self, _: &str, data: &str) -> Decoded {
        json(data).map_or(Decoded::Skip, |v| self.event(&v))
    }

    fn at_end(&self) -> Result<(), &'static str> {
        Err("stream ended before message_stop")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_taken_with_or_without_the_version() {
        for (base, messages) in [
            (
                "https://api.anthropic.com",
                "https://api.anthropic.com/v1/messages",
            ),
            (
                "https://api.anthropic.com/",
                "https://api.anthropic.com/v1/messages",
            ),
            (
                "https://api.anthropic.com/v1",
                "https://api.anthropic.com/v1/messages",
            ),
            ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1/messages"),
            (
                "https://proxy/anthropic",
                "https://proxy/anthropic/v1/messages",
            ),
        ] {
            let root = api_root(&Url::parse(base).unwrap());
            assert_eq!(join(&root, "messages").as_str(), messages, "{base}");
        }
    }
}
