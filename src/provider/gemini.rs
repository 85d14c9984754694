//! Gemini upstreams: `{base}/v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, `x-goog-api-key`; answers decoded into canonical types.

use std::fmt;

use ::http::header::{HeaderName, HeaderValue};
use reqwest::Url;
use serde_json::Value;

use super::http::{self, Target, join, post_json, read_json, send, to_body};
use super::sse::{Decoder, Events, json};
use super::{ChunkStream, UpstreamError, Via, Waited};
use crate::protocol::gemini::{StreamDecoder, request_to_value, response_from_value};
use crate::protocol::{ChatRequest, ChatResponse, Decoded, Protocol, RawBody};
use crate::secret::Secret;

pub struct Gemini {
    root: Url,
    keys: Vec<Secret>,
    client: http::Client,
}

impl fmt::Debug for Gemini {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gemini")
            .field("root", &http::redact_url(self.root.as_str()))
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// The API root under a base URL written either way: as Google's SDKs take it, without a
/// version (`https://generativelanguage.googleapis.com`, a proxy's `/gemini`: `v1beta` is
/// added, as the SDKs add it), or with one anywhere in its path (`.../v1beta`, Vertex's
/// `.../v1/publishers/google`: taken as written).
pub fn api_root(base: &Url) -> Url {
    let versioned = base.path_segments().into_iter().flatten().any(is_version);
    if versioned {
        base.clone()
    } else {
        join(base, "v1beta")
    }
}

/// `v1`, `v1beta`, `v1alpha`, `v1beta1`, `v2`...
fn is_version(segment: &str) -> bool {
    let Some(rest) = segment.strip_prefix('v') else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let after = &rest[digits..];
    let tail = after
        .strip_prefix("alpha")
        .or_else(|| after.strip_prefix("beta"))
        .unwrap_or(after);
    digits > 0 && tail.chars().all(|c| c.is_ascii_digit())
}

impl Gemini {
    pub fn new(base: Url, keys: Vec<Secret>, client: http::Client) -> Self {
        Gemini {
            root: api_root(&base),
            keys,
            client,
        }
    }

    /// Where calls go (its host and port name the upstream on spans).
    pub fn base(&self) -> &Url {
        &self.root
    }

    pub fn endpoint(&self) -> String {
        let url = http::redact_url(join(&self.root, "models/MODEL:generateContent").as_str());
        url.replace("/MODEL:", "/{model}:")
    }

    fn auth(
        &self,
        cred: Option<usize>,
    ) -> Result<Option<(HeaderName, HeaderValue)>, UpstreamError> {
        Ok(http::credential(&self.keys, cred, "")?
            .map(|v| (HeaderName::from_static("x-goog-api-key"), v)))
    }

    async fn post(
        &self,
        url: Url,
        body: &Value,
        stream: bool,
        via: Via<'_>,
        hops: u32,
    ) -> Result<http::Response, UpstreamError> {
        let auth = self.auth(via.cred)?;
        let req = post_json(
            &Target::of(&url)?,
            to_body(body)?,
            stream,
            hops,
            auth,
            via.trace,
        );
        send(&self.client, req, via.waited).await
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        let url = join(&self.root, &format!("models/{model}:generateContent"));
        let resp = self
            .post(url, &request_to_value(req), false, via, req.hops)
            .await?;
        let v = read_json(resp, "gemini response", via.waited).await?;
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
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        let mut url = join(&self.root, &format!("models/{model}:streamGenerateContent"));
        url.query_pairs_mut().append_pair("alt", "sse");
        let resp = self
            .post(url, &request_to_value(req), true, via, req.hops)
            .await?;
        Ok(Box::pin(Events::new(
            resp,
            Partials::default(),
            (req.origin == Protocol::Gemini).then_some(Protocol::Gemini),
        )))
    }

    /// `POST {root}/models/{model}:countTokens` with the client's counting body.
    pub async fn count_tokens(
        &self,
        body: &Value,
        model: &str,
        via: Via<'_>,
        hops: u32,
    ) -> Result<Value, UpstreamError> {
        let url = join(&self.root, &format!("models/{model}:countTokens"));
        let resp = self.post(url, body, false, via, hops).await?;
        read_json(resp, "gemini token count", via.waited).await
    }

    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        let req = http::get(&Target::of(&join(&self.root, "models"))?, self.auth(cred)?);
        send(&self.client, req, &Waited::default()).await?;
        Ok(())
    }
}

/// Gemini's events are partial responses and it sends no end event: the stream is complete
/// when the bytes end after a finish reason.
#[derive(Default)]
struct Partials {
    decoder: StreamDecoder,
    finished: bool,
}

/// The decoder of a Gemini stream.
pub(super) fn partials() -> impl Decoder {
    Partials::default()
}

impl Decoder for Partials {
    fn decode(&mut self, _: &str, data: &str) -> Decoded {
        let Some(v) = json(data) else {
            return Decoded::Skip;
        };
        if v.get("error").is_some() {
            return Decoded::Error;
        }
        let chunk = self.decoder.event(&v);
        self.finished |= chunk.has_finish();
        Decoded::Chunk(Box::new(chunk))
    }

    fn at_end(&self) -> Result<(), &'static str> {
        if self.finished {
            Ok(())
        } else {
            Err("stream ended before a finish reason")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_taken_with_or_without_the_version() {
        for (base, root) in [
            (
                "https://generativelanguage.googleapis.com",
                "https://generativelanguage.googleapis.com/v1beta",
            ),
            (
                "https://generativelanguage.googleapis.com/v1beta/",
                "https://generativelanguage.googleapis.com/v1beta/",
            ),
            ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
            ("https://proxy/gemini", "https://proxy/gemini/v1beta"),
            // Vertex AI's express mode, and its v1beta1: the version is not last.
            (
                "https://aiplatform.googleapis.com/v1/publishers/google",
                "https://aiplatform.googleapis.com/v1/publishers/google",
            ),
            (
                "https://x/v1beta1/projects/p/locations/l/publishers/google",
                "https://x/v1beta1/projects/p/locations/l/publishers/google",
            ),
        ] {
            assert_eq!(
                api_root(&Url::parse(base).unwrap()).as_str(),
                root,
                "{base}"
            );
        }
    }
}
