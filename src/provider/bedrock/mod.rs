//! AWS Bedrock upstreams (`bedrock-runtime`): Converse and ConverseStream for every model, and
//! for an Anthropic client served by an Anthropic model, InvokeModel and
//! InvokeModelWithResponseStream with the client's Messages body as sent. Authenticated by a
//! Bedrock API key (bearer) or SigV4 (`sign.rs`) with credentials from the channel or the
//! standard chain (`provider::auth::aws`); streams are AWS event streams (`events.rs`);
//! exceptions are read by type (`errors.rs`).

mod errors;
pub(crate) mod events;
pub mod sign;

use std::fmt;
use std::time::SystemTime;

use ::http::header::{ACCEPT, AUTHORIZATION, HeaderName, HeaderValue};
use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Url;
use serde_json::Value;

use super::auth::aws::AwsSource;
use super::http::{self, Target, post_json, read_json, to_body};
use super::sse::Events;
use super::{ChunkStream, UpstreamError, Via};
use crate::protocol::{ChatRequest, ChatResponse, Protocol, RawBody, anthropic, bedrock};
use crate::secret::Secret;

/// How a Bedrock channel authenticates.
pub enum BedrockAuth {
    /// Bedrock API keys, as bearer tokens (the channel's credentials, by index).
    Keys(Vec<Secret>),
    /// SigV4 with AWS credentials.
    Aws(AwsSource),
}

pub struct Bedrock {
    base: Url,
    region: String,
    auth: BedrockAuth,
    client: http::Client,
}

impl fmt::Debug for Bedrock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bedrock")
            .field("base", &http::redact_url(self.base.as_str()))
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// Every byte of a model id but the unreserved ones is escaped: inference-profile ids carry
/// `:`, ARNs `:` and `/`, and Bedrock wants them encoded in the path.
const MODEL_ID: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The content type of Bedrock's streams.
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("application/vnd.amazon.eventstream");

/// Whether `model` is an Anthropic model on Bedrock (`anthropic.claude-…`, a cross-region
/// profile `us.anthropic.claude-…`, or an ARN naming one).
fn anthropic_model(model: &str) -> bool {
    model.contains("anthropic.")
}

/// An Anthropic client's request to an Anthropic model goes through InvokeModel, as sent.
fn invokes(req: &ChatRequest, model: &str) -> bool {
    req.origin == Protocol::AnthropicMessages && anthropic_model(model)
}

impl Bedrock {
    pub fn new(base: Url, region: String, auth: BedrockAuth, client: http::Client) -> Self {
        Bedrock {
            base,
            region,
            auth,
            client,
        }
    }

    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn endpoint(&self) -> String {
        let auth = match &self.auth {
            BedrockAuth::Keys(k) => format!("Bedrock API key ({} credential(s))", k.len()),
            BedrockAuth::Aws(src) => src.describe(),
        };
        format!(
            "{}/model/{{model}}/converse (region {}, {auth})",
            http::redact_url(self.base.as_str()).trim_end_matches('/'),
            self.region
        )
    }

    /// The refreshing credential's state, for the health view.
    pub fn auth_status(&self) -> Option<super::auth::AuthStatus> {
        match &self.auth {
            BedrockAuth::Aws(src) => src.status(),
            BedrockAuth::Keys(_) => None,
        }
    }

    fn url(&self, model: &str, action: &str) -> Result<Target, UpstreamError> {
        let id = utf8_percent_encode(model, MODEL_ID);
        let base = self.base.as_str().trim_end_matches('/');
        let url = Url::parse(&format!("{base}/model/{id}/{action}"))
            .map_err(|_| UpstreamError::Connect("the model id makes no valid URL".into()))?;
        Target::of(&url)
    }

    /// One call: the body signed (or the key set), the answer, or the exception it was.
    async fn call(
        &self,
        to: Target,
        body: Vec<u8>,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        let body = Bytes::from(body);
        let mut req = post_json(&to, body.clone(), stream, hops, None, via.trace);
        if stream {
            req.headers_mut().insert(ACCEPT, EVENT_STREAM);
        }
        match &self.auth {
            BedrockAuth::Keys(keys) => {
                if let Some(v) = http::credential(keys, via.cred, "Bearer ")? {
                    req.headers_mut().insert(AUTHORIZATION, v);
                }
            }
            BedrockAuth::Aws(src) => {
                // Credentials that cannot be had refuse this credential, as an expired one.
                let creds = src.credentials().await.map_err(|e| refused(&e))?;
                sign::sign_request(&mut req, &body, &creds, &self.region, SystemTime::now())
                    .map_err(|e| refused(&e))?;
            }
        }
        let _waiting = via.waited.start();
        let resp = http::answer(&self.client, req).await?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let kind_header = HeaderName::from_static("x-amzn-errortype");
        let header = resp
            .headers()
            .get(&kind_header)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let err = http::status_error(resp).await;
        let body = match &err {
            UpstreamError::Status { body, .. } => body.clone(),
            _ => Bytes::new(),
        };
        let kind = errors::exception_type(header.as_deref(), &body);
        Err(errors::classified(err, kind.as_deref()))
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        if invokes(req, model) {
            let body = to_body(&bedrock::invoke_body(req, model))?;
            let resp = self
                .call(self.url(model, "invoke")?, body, false, via, req.hops)
                .await?;
            let v = read_json(resp, "bedrock anthropic message", via.waited).await?;
            let mut out = anthropic::response_from_value(&v)?;
            out.raw = Some(RawBody {
                protocol: Protocol::AnthropicMessages,
                body: v,
            });
            return Ok(out);
        }
        let body = to_body(&bedrock::request_to_value(req))?;
        let resp = self
            .call(self.url(model, "converse")?, body, false, via, req.hops)
            .await?;
        let v: Value = read_json(resp, "converse answer", via.waited).await?;
        let mut out = bedrock::response_from_value(&v)?;
        out.model = Some(model.to_string());
        Ok(out)
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        if invokes(req, model) {
            let body = to_body(&bedrock::invoke_body(req, model))?;
            let to = self.url(model, "invoke-with-response-stream")?;
            let resp = self.call(to, body, true, via, req.hops).await?;
            return Ok(Box::pin(Events::framed(
                resp.into_body(),
                events::AwsFrames::new(true),
                events::InvokeEvents::default(),
                Some(Protocol::AnthropicMessages),
            )));
        }
        let body = to_body(&bedrock::request_to_value(req))?;
        let to = self.url(model, "converse-stream")?;
        let resp = self.call(to, body, true, via, req.hops).await?;
        Ok(Box::pin(Events::framed(
            resp.into_body(),
            events::AwsFrames::new(false),
            events::ConverseEvents::default(),
            None,
        )))
    }

    /// A free check that Bedrock answers and takes the credential: a Converse call with no
    /// messages, which Bedrock refuses as invalid (400) once the caller is authenticated,
    /// without running any model.
    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        let waited = super::Waited::default();
        let via = Via {
            cred,
            trace: None,
            waited: &waited,
        };
        let to = self.url("probe", "converse")?;
        match self
            .call(to, b"{\"messages\":[]}".to_vec(), false, via, 0)
            .await
        {
            Ok(_) | Err(UpstreamError::Status { status: 400, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Credentials that could not be had (or signed with): the credential is refused, as if the
/// upstream had said so.
fn refused(why: &str) -> UpstreamError {
    UpstreamError::Status {
        status: 401,
        retry_after: None,
        body: Bytes::from(format!("AWS credentials unavailable: {why}")),
        content_type: None,
    }
}
