//! Calls beside chat, in the upstream's own protocol: token counting (Anthropic's
//! `messages/count_tokens`, Gemini's `:countTokens`, the Responses API's `input_tokens`) and the
//! responses an upstream that serves the Responses API keeps. Like chat, they are called and
//! reported here; which channel gets them is `exec`'s choice.

use bytes::Bytes;
use serde_json::Value;

use super::{Upstream, UpstreamError, Via};
use crate::protocol::{Protocol, count};

/// What a client asks of a response an upstream keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptCall<'a> {
    Get,
    Delete,
    /// Its input items, with the client's paging (`after`, `limit`, `order`, `include[]`) as
    /// the query.
    InputItems(Option<&'a str>),
}

/// An upstream asked for what its kind does not serve: it is misconfigured for the request,
/// and the request fails over (as embeddings do on a provider without them).
fn not_served(what: &'static str) -> UpstreamError {
    UpstreamError::Status {
        status: 404,
        retry_after: None,
        body: Bytes::from_static(what.as_bytes()),
        content_type: None,
    }
}

impl Upstream {
    /// The client protocol whose token counting this upstream serves itself.
    pub fn counts_in(&self) -> Option<Protocol> {
        match self {
            Upstream::Anthropic(_) => Some(Protocol::AnthropicMessages),
            Upstream::Gemini(_) => Some(Protocol::Gemini),
            Upstream::OpenAi(o) if o.serves_responses() => Some(Protocol::OpenAiResponses),
            Upstream::OpenAi(_)
            | Upstream::Bedrock(_)
            | Upstream::Vertex(_)
            | Upstream::Mock(_) => None,
        }
    }

    /// Counts the client's counting body of protocol `p` on this upstream, for its `model`;
    /// the answer is the upstream's own, in `p`'s shape.
    pub async fn count_tokens(
        &self,
        p: Protocol,
        body: &Value,
        model: &str,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        if self.counts_in() != Some(p) {
            return Err(not_served("no token counting in this protocol here"));
        }
        let body = count::for_upstream(p, body, model);
        let v = match self {
            Upstream::Anthropic(a) => a.count_tokens(&body, via, hops).await?,
            Upstream::Gemini(g) => g.count_tokens(&body, model, via, hops).await?,
            Upstream::OpenAi(o) => o.count_tokens(&body, via, hops).await?,
            Upstream::Bedrock(_) | Upstream::Vertex(_) | Upstream::Mock(_) => {
                return Err(not_served("no token counting here"));
            }
        };
        if count::tokens_of(p, &v).is_none() {
            return Err(crate::protocol::InvalidUpstream {
                what: "token count",
                message: "the answer carries no count".into(),
            }
            .into());
        }
        Ok(v)
    }

    /// A response this upstream keeps (it serves the Responses API), read or deleted.
    pub async fn kept_response(
        &self,
        id: &str,
        call: KeptCall<'_>,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        match self {
            Upstream::OpenAi(o) if o.serves_responses() => o.kept(id, call, via, hops).await,
            _ => Err(not_served("no Responses API here")),
        }
    }
}
