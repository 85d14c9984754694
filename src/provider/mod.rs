//! Upstream clients, one per provider kind, behind one enum with `chat`, `chat_stream` and
//! `embeddings`. Providers call and report; they never decide routing or retries (that is
//! `exec`'s job, from the typed [`UpstreamError`] they return).

mod anthropic;
mod gemini;
pub mod mock;
mod openai;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;

use crate::config::ChannelConfig;
use crate::config::ProviderKind;
use crate::protocol::{ChatRequest, ChatResponse, EmbeddingsRequest, InvalidUpstream, StreamChunk};

pub use mock::MockSpec;

/// What went wrong with one upstream call, before any classification.
/// Sent on every upstream call: how many Switchyards the request has passed, this one included,
/// so gateways chained into each other detect a loop (`server.max_hops`).
pub const HOPS_HEADER: &str = "x-switchyard-hops";

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Refused, reset, DNS, TLS: no HTTP response at all.
    #[error("connection failed: {0}")]
    Connect(String),
    /// The upstream answered with a non-success status.
    #[error("upstream answered HTTP {status}")]
    Status {
        status: u16,
        retry_after: Option<Duration>,
        /// The upstream's body; only ever returned to a client for its own 400/413/422.
        body: Bytes,
        content_type: Option<String>,
    },
    /// The body was not valid in the upstream's own protocol.
    #[error(transparent)]
    Invalid(#[from] InvalidUpstream),
    /// The connection broke while reading the body or stream.
    #[error("stream broke: {0}")]
    Broken(String),
    /// An error event inside a 200 stream.
    #[error("upstream sent an error event in the stream")]
    StreamError,
}

pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<StreamChunk, UpstreamError>> + Send>>;

/// A protocol's stream decoder: one SSE event (its name and parsed data) at a time.
pub trait Decoder {
    fn decode(&mut self, event: &str, data: &serde_json::Value) -> crate::protocol::Decoded;
}

impl Decoder for crate::protocol::anthropic::StreamDecoder {
    fn decode(&mut self, _: &str, data: &serde_json::Value) -> crate::protocol::Decoded {
        self.event(data)
    }
}

impl Decoder for crate::protocol::responses::StreamDecoder {
    fn decode(&mut self, event: &str, data: &serde_json::Value) -> crate::protocol::Decoded {
        self.event(event, data)
    }
}

/// Upstream SSE events → canonical chunks, for protocols whose stream says when it is complete
/// (an end before that is a broken stream). With `raw`, every event also goes on as it came,
/// for a client that speaks the upstream's protocol.
type ByteStream = Pin<Box<dyn Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send>>;

pub struct Events<D> {
    inner: eventsource_stream::EventStream<ByteStream>,
    decoder: D,
    raw: Option<crate::protocol::Protocol>,
    end_missing: &'static str,
    done: bool,
    /// The upstream's error event went on (for a same-protocol client); the error follows.
    failing: bool,
}

impl<D: Decoder> Events<D> {
    pub fn new(
        resp: reqwest::Response,
        decoder: D,
        raw: Option<crate::protocol::Protocol>,
        end_missing: &'static str,
    ) -> Self {
        use eventsource_stream::Eventsource;
        let bytes: ByteStream = Box::pin(resp.bytes_stream());
        Events {
            inner: bytes.eventsource(),
            decoder,
            raw,
            end_missing,
            done: false,
            failing: false,
        }
    }
}

impl<D: Decoder + Unpin> Stream for Events<D> {
    type Item = Result<StreamChunk, UpstreamError>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use crate::protocol::{Decoded, RawEvent};
        use futures_util::StreamExt;
        use std::task::Poll;
        if self.failing {
            self.failing = false;
            self.done = true;
            return Poll::Ready(Some(Err(UpstreamError::StreamError)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            match std::task::ready!(self.inner.poll_next_unpin(cx)) {
                Some(Ok(ev)) => {
                    let Ok(data) = serde_json::from_str::<serde_json::Value>(&ev.data) else {
                        continue; // keep-alives and blank events
                    };
                    let decoded = self.decoder.decode(&ev.event, &data);
                    let raw = self.raw.map(|protocol| RawEvent {
                        protocol,
                        event: Some(ev.event),
                        data: ev.data,
                    });
                    let chunk = |mut c: Box<StreamChunk>, raw| {
                        c.raw = raw;
                        Poll::Ready(Some(Ok(*c)))
                    };
                    match (decoded, raw) {
                        (Decoded::Chunk(c), raw) => return chunk(c, raw),
                        (Decoded::Last(c), raw) => {
                            self.done = true;
                            return chunk(c, raw);
                        }
                        (Decoded::Nothing, Some(raw)) => {
                            return Poll::Ready(Some(Ok(StreamChunk::raw_only(raw))));
                        }
                        (Decoded::Nothing, None) => continue,
                        (Decoded::End, _) => {
                            self.done = true;
                            return Poll::Ready(None);
                        }
                        // The upstream's own words first, for a client that speaks them (after
                        // commit it sees them; before, the attempt fails over either way).
                        (Decoded::Error, Some(raw)) => {
                            self.failing = true;
                            return Poll::Ready(Some(Ok(StreamChunk::raw_only(raw))));
                        }
                        (Decoded::Error, None) => {
                            self.done = true;
                            return Poll::Ready(Some(Err(UpstreamError::StreamError)));
                        }
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(UpstreamError::Broken(e.to_string()))));
                }
                None => {
                    self.done = true;
                    return Poll::Ready(Some(Err(UpstreamError::Broken(self.end_missing.into()))));
                }
            }
        }
    }
}

/// Shared pooled HTTP clients, one per distinct transport setting, kept across reloads so a
/// config swap does not drop warm connections.
#[derive(Clone, Default)]
pub struct HttpClients {
    inner: Arc<Mutex<HashMap<(u64, Transport), reqwest::Client>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Transport {
    Http1,
    Alpn,
    H2c,
}

impl HttpClients {
    fn get(&self, connect_timeout_ms: u64, mode: Transport) -> Result<reqwest::Client, String> {
        let mut map = self
            .inner
            .lock()
            .map_err(|_| "client cache poisoned".to_string())?;
        if let Some(c) = map.get(&(connect_timeout_ms, mode)) {
            return Ok(c.clone());
        }
        install_crypto_provider();
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(connect_timeout_ms))
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            // Never follow an upstream redirect: it would re-send the request (and possibly a
            // credential) somewhere the config does not name. A 3xx is that attempt's failure.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        // HTTP/1.1 unless asked: one multiplexed connection can queue long streams behind its
        // stream limit without saying so.
        b = match mode {
            Transport::Http1 => b.http1_only(),
            Transport::Alpn => b,
            Transport::H2c => b.http2_prior_knowledge(),
        };
        let c = b.build().map_err(|e| e.without_url().to_string())?;
        map.insert((connect_timeout_ms, mode), c.clone());
        Ok(c)
    }
}

/// rustls needs one process-wide crypto provider; we use ring (no C toolchain needed beyond cc).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// One channel's upstream, ready to call.
#[derive(Debug)]
pub enum Upstream {
    OpenAi(openai::OpenAi),
    Anthropic(anthropic::Anthropic),
    Gemini(gemini::Gemini),
    Mock(mock::MockUpstream),
}

impl Upstream {
    /// Builds the upstream for a channel; errors name the offending field of the channel.
    pub fn build(
        c: &ChannelConfig,
        connect_timeout_ms: u64,
        clients: &HttpClients,
    ) -> Result<Upstream, (&'static str, String)> {
        match c.provider {
            ProviderKind::Openai
            | ProviderKind::Anthropic
            | ProviderKind::Azure
            | ProviderKind::Gemini => {
                if c.mock.is_some() {
                    return Err(("mock", "only allowed with provider = \"mock\"".into()));
                }
                let base = c.base_url.as_deref().ok_or((
                    "base_url",
                    format!("is required for provider = \"{}\"", c.provider.as_str()),
                ))?;
                let url = reqwest::Url::parse(base)
                    .map_err(|e| ("base_url", format!("not a valid URL: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(("base_url", "must be an http:// or https:// URL".into()));
                }
                // https negotiates HTTP/2 by ALPN; cleartext needs prior knowledge (h2c).
                let mode = match (c.http2, url.scheme()) {
                    (false, _) => Transport::Http1,
                    (true, "https") => Transport::Alpn,
                    (true, _) => Transport::H2c,
                };
                let client = clients
                    .get(connect_timeout_ms, mode)
                    .map_err(|e| ("base_url", e))?;
                let keys: Vec<String> = if c.credentials.is_empty() {
                    c.api_keys.clone()
                } else {
                    c.credentials.iter().map(|k| k.key.clone()).collect()
                };
                let bad = |e: String| ("base_url", format!("not a valid URL: {e}"));
                if c.provider == ProviderKind::Gemini {
                    let g = gemini::Gemini::new(url, &keys, client).map_err(bad)?;
                    return Ok(Upstream::Gemini(g));
                }
                if c.provider == ProviderKind::Anthropic {
                    let a = anthropic::Anthropic::new(url, &keys, client).map_err(bad)?;
                    return Ok(Upstream::Anthropic(a));
                }
                let azure = match (c.provider, &c.api_version) {
                    (ProviderKind::Azure, None) => {
                        return Err(("api_version", "is required for provider = \"azure\"".into()));
                    }
                    (ProviderKind::Azure, Some(v)) => Some(v.clone()),
                    (_, Some(_)) => {
                        return Err(("api_version", "only for provider = \"azure\"".into()));
                    }
                    (_, None) => None,
                };
                if c.responses && c.provider != ProviderKind::Openai {
                    return Err(("responses", "only for provider = \"openai\"".into()));
                }
                let mut o =
                    openai::OpenAi::new(url, &keys, c.stream_usage, azure, client).map_err(bad)?;
                o.serve_responses(c.responses);
                Ok(Upstream::OpenAi(o))
            }
            ProviderKind::Mock => {
                if c.base_url.is_some() {
                    return Err(("base_url", "a mock channel takes no base_url".into()));
                }
                if !c.api_keys.is_empty() || !c.credentials.is_empty() {
                    return Err(("api_keys", "a mock channel takes no api_keys".into()));
                }
                let spec = c.mock.clone().unwrap_or_default();
                spec.validate().map_err(|m| ("mock", m))?;
                Ok(Upstream::Mock(mock::MockUpstream::new(spec)))
            }
        }
    }

    /// `cred`: the index of the reserved credential (`None`: the channel has none).
    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChatResponse, UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.chat(req, model, cred).await,
            Upstream::Anthropic(a) => a.chat(req, model, cred).await,
            Upstream::Gemini(g) => g.chat(req, model, cred).await,
            Upstream::Mock(m) => m.chat(req, model).await,
        }
    }

    /// Opens a stream; the future resolves when the upstream has answered with a status.
    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<ChunkStream, UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.chat_stream(req, model, cred).await,
            Upstream::Anthropic(a) => a.chat_stream(req, model, cred).await,
            Upstream::Gemini(g) => g.chat_stream(req, model, cred).await,
            Upstream::Mock(m) => m.chat_stream(req, model).await,
        }
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        cred: Option<usize>,
    ) -> Result<Value, UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.embeddings(req, model, cred).await,
            // Anthropic serves no embeddings: a channel listing an embedding model is
            // misconfigured, and the request fails over.
            Upstream::Anthropic(_) | Upstream::Gemini(_) => Err(UpstreamError::Status {
                status: 404,
                retry_after: None,
                body: Bytes::from_static(b"no embeddings endpoint for this provider kind"),
                content_type: None,
            }),
            Upstream::Mock(m) => m.embeddings(req, model).await,
        }
    }

    /// `GET /models`: a free check that the upstream answers and accepts the credential.
    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.models(cred).await,
            Upstream::Anthropic(a) => a.models(cred).await,
            Upstream::Gemini(g) => g.models(cred).await,
            Upstream::Mock(m) => m.models().await,
        }
    }
}

/// `Retry-After: <seconds>`, OpenAI's `retry-after-ms`, or else the later of OpenAI's
/// `x-ratelimit-reset-requests` / `-tokens` (`1s`, `6m0s`, `20ms`). HTTP dates are ignored.
pub fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    retry_after_header(headers).or_else(|| {
        ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
            .iter()
            .filter_map(|h| headers.get(*h)?.to_str().ok().and_then(parse_go_duration))
            .max()
    })
}

/// A duration as OpenAI writes it (Go's format): `1h2m3.5s`, `6m0s`, `20ms`, `1.5s`.
fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += n * secs;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

fn retry_after_header(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_millis(ms as u64));
    }
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|s| Duration::from_millis((s * 1000.0) as u64))
}

/// Removes credentials from a URL before it is logged or traced (`?key=`, `?api_key=`, userinfo).
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = reqwest::Url::parse(url) else {
        return "<unparseable url>".into();
    };
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_username("***");
        let _ = u.set_password(None);
    }
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| {
            let secret = matches!(
                k.to_ascii_lowercase().as_str(),
                "key" | "api_key" | "apikey" | "api-key" | "token" | "access_token" | "sig"
            );
            (
                k.into_owned(),
                if secret { "***".into() } else { v.into_owned() },
            )
        })
        .collect();
    if !pairs.is_empty() {
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_credentials_in_urls() {
        let r = redact_url("https://user:pw@example.com/v1?key=SECRET&alt=sse");
        assert!(!r.contains("SECRET") && !r.contains("pw"), "{r}");
        assert!(r.contains("alt=sse"), "{r}");
        assert_eq!(redact_url("::"), "<unparseable url>");
    }

    #[test]
    fn parses_retry_after_forms() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), None);
        // OpenAI's rate-limit reset headers, when there is no Retry-After: the later one wins.
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("x-ratelimit-reset-requests", "1.5s".parse().unwrap());
        h.insert("x-ratelimit-reset-tokens", "6m0s".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(360)));
        h.insert("x-ratelimit-reset-tokens", "20ms".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("x-ratelimit-reset-tokens", "1h2m3s".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("5x"), None);
        assert_eq!(parse_go_duration(""), None);
    }
}
