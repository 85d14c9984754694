//! Anthropic Messages upstreams: `POST {base}/messages` with `x-api-key` and
//! `anthropic-version`; answers and SSE events decoded into canonical types.

use std::fmt;

use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde_json::Value;

use super::{ChunkStream, UpstreamError};
use crate::config::Secret;
use crate::protocol::anthropic::{StreamDecoder, request_to_value, response_from_value};
use crate::protocol::{ChatRequest, ChatResponse, InvalidUpstream, Protocol, RawBody};

const VERSION: &str = "2023-06-01";

pub struct Anthropic {
    messages_url: Url,
    models_url: Url,
    keys: Vec<Secret>,
    client: reqwest::Client,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Anthropic")
            .field(
                "messages_url",
                &super::redact_url(self.messages_url.as_str()),
            )
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Anthropic {
    pub fn new(base: Url, keys: &[String], client: reqwest::Client) -> Result<Self, String> {
        if base.cannot_be_a_base() {
            return Err("not a base URL".into());
        }
        let endpoint = |p: &str| {
            let mut u = base.clone();
            u.set_path(&format!("{}/{p}", base.path().trim_end_matches('/')));
            u
        };
        Ok(Anthropic {
            messages_url: endpoint("messages"),
            models_url: endpoint("models"),
            keys: keys.iter().map(|k| Secret::new(k.as_str())).collect(),
            client,
        })
    }

    fn headers(
        &self,
        rb: reqwest::RequestBuilder,
        cred: Option<usize>,
    ) -> Result<reqwest::RequestBuilder, UpstreamError> {
        let rb = rb.header("anthropic-version", HeaderValue::from_static(VERSION));
        let Some(k) = cred.and_then(|i| self.keys.get(i)) else {
            return Ok(rb);
        };
        let mut v = HeaderValue::from_str(k.expose())
            .map_err(|_| UpstreamError::Connect("api key is not a valid header value".into()))?;
        v.set_sensitive(true);
        Ok(rb.header("x-api-key", v))
    }

    async fn post(
        &self,
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
            .post(self.messages_url.clone())
            .header(super::HOPS_HEADER, hops.saturating_add(1))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(bytes);
        super::openai::send(self.headers(rb, cred)?).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChatResponse, UpstreamError> {
        let mut body = request_to_value(req, model);
        body.as_object_mut().map(|o| o.remove("stream"));
        let resp = self.post(&body, cred, req.hops).await?;
        let v = super::openai::read_json(resp, "anthropic message").await?;
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
        cred: Option<usize>,
    ) -> Result<ChunkStream, UpstreamError> {
        let mut body = request_to_value(req, model);
        if let Some(o) = body.as_object_mut() {
            o.insert("stream".into(), Value::Bool(true));
        }
        let resp = self.post(&body, cred, req.hops).await?;
        Ok(Box::pin(super::Events::new(
            resp,
            StreamDecoder::default(),
            (req.origin == Protocol::AnthropicMessages).then_some(Protocol::AnthropicMessages),
            "stream ended before message_stop",
        )))
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        super::openai::send(self.headers(self.client.get(self.models_url.clone()), cred)?).await?;
        Ok(())
    }
}
