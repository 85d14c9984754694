//! The HTTP side every upstream kind shares: pooled clients, building a request (the hop count,
//! JSON, the credential as a sensitive header), sending it, reading an answer within its caps,
//! and turning a non-2xx answer into its typed [`UpstreamError`]. No routing, no protocol.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::Url;
use serde_json::Value;

use super::{TraceHeaders, UpstreamError, Waited};
use crate::protocol::InvalidUpstream;
use crate::secret::Secret;

/// Sent on every upstream call: how many Switchyards the request has passed, this one included,
/// so gateways chained into each other detect a loop (`server.max_hops`).
pub const HOPS_HEADER: &str = "x-switchyard-hops";

/// W3C Trace Context: the attempt's span as the upstream's parent (names made once, not parsed
/// per call).
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Largest upstream error body kept (for a 400 passed back to the client).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streaming upstream answer read; a larger one is a broken upstream.
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// The upstream HTTP client: hyper under rustls, with nothing between (no redirect or retry
/// layer, no URL re-parsed per call: reqwest's cost ~20k instructions a request,
/// docs/benchmarks.md). Redirects are never followed: a 3xx is the attempt's failure. HTTP/1.1
/// connections are kept in our own pool ([`super::pool`]). Shared (its settings are large, and
/// every channel of a transport uses the one pool).
pub type Client = Arc<super::pool::Client>;

/// An upstream's answer, its body still to read.
pub type Response = http::Response<super::pool::Body>;

/// Shared pooled HTTP clients, one per distinct transport setting, kept across reloads so a
/// config swap does not drop warm connections.
#[derive(Clone, Default)]
pub struct HttpClients {
    inner: Arc<Mutex<HashMap<(u64, Transport), Client>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Transport {
    Http1,
    Alpn,
    H2c,
}

impl HttpClients {
    /// The client for a channel: HTTP/1.1 unless it opted into HTTP/2 (one multiplexed
    /// connection can queue long streams behind its stream limit without saying so); https
    /// negotiates HTTP/2 by ALPN, cleartext needs prior knowledge (h2c).
    pub fn client(&self, base: &Url, http2: bool, connect: Duration) -> Result<Client, String> {
        let mode = match (http2, base.scheme()) {
            (false, _) => Transport::Http1,
            (true, "https") => Transport::Alpn,
            (true, _) => Transport::H2c,
        };
        let ms = connect.as_millis() as u64;
        let mut map = self
            .inner
            .lock()
            .map_err(|_| "client cache poisoned".to_string())?;
        if let Some(c) = map.get(&(ms, mode)) {
            return Ok(c.clone());
        }
        let c = build_client(mode, connect)?;
        map.insert((ms, mode), c.clone());
        Ok(c)
    }
}

/// A pooled client for one transport: the system's trust roots (as reqwest had them), TCP
/// no-delay, the channel's connect timeout, idle connections kept 90 s.
fn build_client(mode: Transport, connect: Duration) -> Result<Client, String> {
    install_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or("no TLS crypto provider")?;
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
        .map_err(|e| format!("TLS trust roots: {e}"))?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.set_connect_timeout(Some(connect));
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let b = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let conn = match mode {
        Transport::Http1 => b.enable_http1().wrap_connector(tcp),
        // ALPN offers both; cleartext HTTP/2 is prior knowledge (`http2_only` below).
        Transport::Alpn => b.enable_http1().enable_http2().wrap_connector(tcp),
        Transport::H2c => b.enable_http2().wrap_connector(tcp),
    };
    // The connect timeout covers the TLS handshake too, not only TCP: an upstream that accepts
    // and then says nothing fails its attempt in time.
    let conn = super::pool::Within {
        inner: conn,
        limit: connect,
    };
    if mode == Transport::Http1 {
        return Ok(Arc::new(super::pool::Client::inline(conn)));
    }
    let mut cb = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    cb.pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(mode == Transport::H2c);
    Ok(Arc::new(super::pool::Client::shared(cb.build(conn))))
}

/// rustls needs one process-wide crypto provider; we use ring (no C toolchain needed beyond cc).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `base` with `path` appended to its path, keeping any query it carries (`?api-version=`).
pub fn join(base: &Url, path: &str) -> Url {
    let mut u = base.clone();
    u.set_path(&format!("{}/{path}", base.path().trim_end_matches('/')));
    u
}

/// The credential `cred` of `keys` as a sensitive header value (never logged by the HTTP
/// stack), optionally with a scheme (`Bearer `). `None` when the channel has no key.
pub fn credential(
    keys: &[Secret],
    cred: Option<usize>,
    scheme: &str,
) -> Result<Option<HeaderValue>, UpstreamError> {
    let Some(k) = cred.and_then(|i| keys.get(i)) else {
        return Ok(None);
    };
    let mut v = if scheme.is_empty() {
        HeaderValue::from_str(k.expose())
    } else {
        HeaderValue::from_str(&format!("{scheme}{}", k.expose()))
    }
    .map_err(|_| UpstreamError::Connect("api key is not a valid header value".into()))?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// A JSON POST built from scratch: no client header, cookie or credential ever reaches the
/// upstream; only the hop count, the content type, what the protocol needs and the key.
pub fn post_json(
    to: &Target,
    body: impl Into<Bytes>,
    stream: bool,
    hops: u32,
    auth: Option<(HeaderName, HeaderValue)>,
    trace: Option<&TraceHeaders>,
) -> Request<Full<Bytes>> {
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut req = request(Method::POST, to, Full::new(body.into()));
    let h = req.headers_mut();
    h.insert(HOPS_HEADER, HeaderValue::from(hops.saturating_add(1)));
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(ACCEPT, HeaderValue::from_static(accept));
    // The attempt's trace context, so the upstream's spans join the client's trace.
    if let Some(t) = trace {
        h.insert(TRACEPARENT.clone(), t.traceparent.clone());
        if let Some(s) = &t.tracestate {
            h.insert(TRACESTATE.clone(), s.clone());
        }
    }
    if let Some((name, value)) = auth {
        h.insert(name, value);
    }
    req
}

/// A call without a body on a client's behalf (a kept response read or deleted): like
/// [`post_json`], the hop count and the credential, nothing of the client's.
pub fn bodiless(
    method: Method,
    to: &Target,
    hops: u32,
    auth: Option<(HeaderName, HeaderValue)>,
    trace: Option<&TraceHeaders>,
) -> Request<Full<Bytes>> {
    let mut req = request(method, to, Full::default());
    let h = req.headers_mut();
    h.insert(HOPS_HEADER, HeaderValue::from(hops.saturating_add(1)));
    h.insert(ACCEPT, HeaderValue::from_static("application/json"));
    if let Some(t) = trace {
        h.insert(TRACEPARENT.clone(), t.traceparent.clone());
    }
    if let Some((name, value)) = auth {
        h.insert(name, value);
    }
    req
}

/// A GET (the models probe), with the credential when there is one.
pub fn get(to: &Target, auth: Option<(HeaderName, HeaderValue)>) -> Request<Full<Bytes>> {
    let mut req = request(Method::GET, to, Full::default());
    if let Some((name, value)) = auth {
        req.headers_mut().insert(name, value);
    }
    req
}

/// An upstream URL made ready once (at config load for fixed endpoints): the request line's
/// URI, and userinfo as HTTP Basic credentials (as reqwest took it), never sent in the URI.
#[derive(Debug, Clone)]
pub struct Target {
    uri: Uri,
    basic: Option<HeaderValue>,
}

impl Target {
    pub fn of(url: &Url) -> Result<Target, UpstreamError> {
        let mut bare = std::borrow::Cow::Borrowed(url);
        let mut basic = None;
        if !url.username().is_empty() || url.password().is_some() {
            use base64::Engine as _;
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            let pair = format!(
                "{}:{}",
                decode(url.username()),
                decode(url.password().unwrap_or(""))
            );
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            let mut v = HeaderValue::from_str(&format!("Basic {encoded}")).map_err(|_| {
                UpstreamError::Connect("base URL credentials are not a valid header".into())
            })?;
            v.set_sensitive(true);
            basic = Some(v);
            let u = bare.to_mut();
            let _ = u.set_username("");
            let _ = u.set_password(None);
        }
        // The message never carries the URL (it may hold a key).
        let uri = Uri::try_from(bare.as_str())
            .map_err(|_| UpstreamError::Connect("the upstream URL is not a valid URI".into()))?;
        Ok(Target { uri, basic })
    }
}

fn request(method: Method, to: &Target, body: Full<Bytes>) -> Request<Full<Bytes>> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    // A clone of a parsed URI: reference counts, no parse.
    *req.uri_mut() = to.uri.clone();
    if let Some(v) = &to.basic {
        req.headers_mut()
            .insert(http::header::AUTHORIZATION, v.clone());
    }
    req
}

/// Serialises a request body; our own canonical types cannot fail in practice (no non-string
/// map keys), so a failure is reported as an upstream-side problem rather than a panic.
pub fn to_body<T: serde::Serialize + ?Sized>(body: &T) -> Result<Vec<u8>, UpstreamError> {
    serde_json::to_vec(body).map_err(|e| {
        UpstreamError::Invalid(InvalidUpstream {
            what: "request body",
            message: e.to_string(),
        })
    })
}

/// The error and its sources, without URLs (the caller strips them first).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// Sends a request; a connection failure or a non-2xx answer becomes its upstream error class.
pub async fn send(
    client: &Client,
    req: Request<Full<Bytes>>,
    waited: &Waited,
) -> Result<Response, UpstreamError> {
    // Until the status (and, for an error, its body) is in, the time is the upstream's.
    let _waiting = waited.start();
    let resp = answer(client, req).await?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    Err(status_error(resp).await)
}

/// The upstream's answer, whatever its status (a provider that reads more of an error than its
/// status and body); only a connection that failed is an error here.
pub async fn answer(client: &Client, req: Request<Full<Bytes>>) -> Result<Response, UpstreamError> {
    // hyper's errors name no URL (it may carry credentials, `?key=`).
    client
        .request(req)
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&*e)))
}

/// A whole upstream answer as JSON, never more than [`MAX_RESPONSE_BODY`] bytes of it.
pub async fn read_json(
    resp: Response,
    what: &'static str,
    waited: &Waited,
) -> Result<Value, UpstreamError> {
    parse_json(&read_body(resp, waited).await?, what)
}

/// A whole upstream answer's bytes, never more than [`MAX_RESPONSE_BODY`] of them.
pub async fn read_body(resp: Response, waited: &Waited) -> Result<Bytes, UpstreamError> {
    let _waiting = waited.start();
    read_capped(resp, MAX_RESPONSE_BODY).await
}

/// An upstream answer's bytes as JSON.
pub fn parse_json(bytes: &[u8], what: &'static str) -> Result<Value, UpstreamError> {
    serde_json::from_slice(bytes).map_err(|e| {
        UpstreamError::Invalid(InvalidUpstream {
            what,
            message: e.to_string(),
        })
    })
}

/// The declared length of a body, when the upstream sent one.
fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Reads a whole body, refusing one larger than `cap`.
async fn read_capped(resp: Response, cap: usize) -> Result<Bytes, UpstreamError> {
    if content_length(resp.headers()).is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    let body = http_body_util::Limited::new(resp.into_body(), cap);
    match body.collect().await {
        // One frame (the usual answer) comes out as it came, without a copy.
        Ok(all) => Ok(all.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(cap)),
        Err(e) => Err(UpstreamError::Broken(error_chain(&*e))),
    }
}

fn too_large(cap: usize) -> UpstreamError {
    UpstreamError::Invalid(InvalidUpstream {
        what: "response",
        message: format!("larger than {cap} bytes"),
    })
}

/// A non-2xx answer: its status, Retry-After and (capped) body, for classification.
pub async fn status_error(resp: Response) -> UpstreamError {
    let status = resp.status().as_u16();
    let retry_after = parse_retry_after(resp.headers());
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    let mut stream = resp.into_body();
    while let Some(Ok(frame)) = stream.frame().await {
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
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

/// `Retry-After: <seconds>`, OpenAI's `retry-after-ms`, or else the later of OpenAI's
/// `x-ratelimit-reset-requests` / `-tokens` (`1s`, `6m0s`, `20ms`). HTTP dates are ignored.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
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
    // An absurd value (more seconds than a Duration holds) is no hint at all, not a panic.
    Duration::try_from_secs_f64(total).ok()
}

fn retry_after_header(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_millis(ms as u64));
    }
    headers
        .get(http::header::RETRY_AFTER)
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
        let mut h = HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), None);
        // OpenAI's rate-limit reset headers, when there is no Retry-After: the later one wins.
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-reset-requests", "1.5s".parse().unwrap());
        h.insert("x-ratelimit-reset-tokens", "6m0s".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(360)));
        h.insert("x-ratelimit-reset-tokens", "20ms".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("x-ratelimit-reset-tokens", "1h2m3s".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("5x"), None);
        // More seconds than a Duration holds: no hint, and no panic.
        assert_eq!(parse_go_duration("99999999999999999999999s"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn base_url_userinfo_becomes_basic_auth_and_leaves_the_uri() {
        let url = Url::parse("http://us%20er:p%40ss@h:8/v1/chat").unwrap();
        let req = request(Method::GET, &Target::of(&url).unwrap(), Full::default());
        assert_eq!(req.uri().to_string(), "http://h:8/v1/chat");
        // base64("us er:p@ss")
        assert_eq!(req.headers()["authorization"], "Basic dXMgZXI6cEBzcw==");
        assert!(req.headers()["authorization"].is_sensitive());
        let plain = Target::of(&Url::parse("http://h/v1").unwrap()).unwrap();
        let plain = request(Method::GET, &plain, Full::default());
        assert!(plain.headers().get("authorization").is_none());
    }

    #[test]
    fn joins_paths_keeping_the_query() {
        let base = Url::parse("https://h/openai/?api-version=1").unwrap();
        assert_eq!(
            join(&base, "chat").as_str(),
            "https://h/openai/chat?api-version=1"
        );
    }
}
