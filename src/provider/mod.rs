//! Upstream clients, one per provider kind, behind one enum with `chat`, `chat_stream` and
//! `embeddings`. Providers call and report; they never decide routing or retries (that is
//! `exec`'s job, from the typed [`UpstreamError`] they return).

mod anthropic;
pub mod auth;
pub mod bedrock;
mod gemini;
mod http;
pub mod mock;
mod openai;
mod pool;
pub mod presets;
mod side;
mod sse;
pub mod vertex;
mod via;

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use crate::protocol::{ChatRequest, ChatResponse, EmbeddingsRequest, InvalidUpstream, StreamChunk};
use crate::secret::Secret;

pub use http::{HOPS_HEADER, HttpClients, install_crypto_provider, join as http_join, redact_url};
pub use mock::MockSpec;
pub use side::KeptCall;
pub use sse::{Frame, Frames, NotUtf8};
pub use via::{TraceContext, TraceHeaders, Via, Waited};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible base URL (OpenAI, vLLM, Ollama, OpenRouter...).
    Openai,
    /// Anthropic Messages (`{base_url}/messages`, `x-api-key`).
    Anthropic,
    /// Azure OpenAI (deployment URLs, `api-version`, `api-key`).
    Azure,
    /// Gemini (`{base_url}/models/{model}:generateContent`, `x-goog-api-key`).
    Gemini,
    /// The built-in mock, answered in-process.
    Mock,
    /// AWS Bedrock (`bedrock-runtime`: Converse, and InvokeModel for Anthropic clients).
    Bedrock,
    /// Google Vertex AI: Gemini, Claude and open models of one project and location.
    Vertex,
    // OpenAI-compatible providers by name: `presets.toml` says how each differs.
    Groq,
    Together,
    Fireworks,
    Deepseek,
    Mistral,
    Xai,
    Openrouter,
    Cerebras,
    Perplexity,
    Ollama,
    Vllm,
    Lmstudio,
}

impl ProviderKind {
    /// The wire protocol this kind of upstream speaks.
    pub fn protocol(self) -> crate::protocol::Protocol {
        use crate::protocol::Protocol;
        match self {
            // Converse is Anthropic's Messages in other words (its errors are put in
            // Anthropic's envelope): what crossing to it loses is what crossing to Anthropic
            // loses.
            ProviderKind::Anthropic | ProviderKind::Bedrock => Protocol::AnthropicMessages,
            // Per model on Vertex (`Upstream::protocol`); Gemini's is its first.
            ProviderKind::Gemini | ProviderKind::Vertex => Protocol::Gemini,
            _ => Protocol::OpenAiChat,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Azure => "azure",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Mock => "mock",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Vertex => "vertex",
            ProviderKind::Groq => "groq",
            ProviderKind::Together => "together",
            ProviderKind::Fireworks => "fireworks",
            ProviderKind::Deepseek => "deepseek",
            ProviderKind::Mistral => "mistral",
            ProviderKind::Xai => "xai",
            ProviderKind::Openrouter => "openrouter",
            ProviderKind::Cerebras => "cerebras",
            ProviderKind::Perplexity => "perplexity",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Vllm => "vllm",
            ProviderKind::Lmstudio => "lmstudio",
        }
    }

    /// A named OpenAI-compatible provider's preset (`None` for the other kinds).
    pub fn preset(self) -> Option<&'static presets::Preset> {
        presets::preset(self.as_str())
    }
}

/// A channel's upstream as the config validated it: everything [`Upstream::build`] needs, and
/// nothing it would have to check again. Made once per config, never per request: the
/// variants' sizes do not matter.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum UpstreamSpec {
    Http(HttpSpec),
    Mock(MockSpec),
}

#[derive(Debug, Clone)]
pub struct HttpSpec {
    /// The channel's name: what keeps a fetched credential's cache across reloads.
    pub channel: String,
    pub api: Api,
    /// An http:// or https:// URL that can be a base.
    pub base: Url,
    /// In the order credentials are reserved by index (never printed, `Debug` included).
    pub keys: Vec<Secret>,
    pub http2: bool,
    pub connect_timeout: Duration,
}

/// The API an HTTP upstream speaks, with what only that API has.
#[derive(Debug, Clone)]
pub enum Api {
    OpenAi {
        /// Ask for a usage chunk on streams (`stream_options.include_usage`).
        stream_usage: bool,
        /// The upstream serves the Responses API too.
        responses: bool,
        /// A named OpenAI-compatible provider's differences, applied to every request.
        preset: Option<&'static presets::Preset>,
        /// Headers every request carries (the preset's, then the channel's own).
        headers: Vec<(String, String)>,
    },
    Azure {
        api_version: String,
        stream_usage: bool,
    },
    Anthropic,
    Gemini,
    Bedrock {
        region: String,
        /// The channel's own AWS credentials (else its keys as Bedrock API keys, else the
        /// standard chain).
        aws: Option<AwsKeys>,
    },
    Vertex {
        /// Where its access tokens come from.
        auth: GoogleAuth,
        /// Upstream model name → its publisher.
        publishers: std::collections::HashMap<String, vertex::Publisher>,
    },
}

/// Where a Vertex channel's access tokens come from.
#[derive(Debug, Clone)]
pub enum GoogleAuth {
    /// A service account's key file, as JSON (checked at load).
    ServiceAccount(Secret),
    /// The metadata server at this host.
    Metadata(String),
}

/// AWS credentials as a channel gives them.
#[derive(Debug, Clone)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

/// What went wrong with one upstream call, before any classification.
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

/// An upstream stream of protocol `p`, arriving in `pieces`, decoded as a channel's stream is
/// (`raw`: for a client of the same protocol, every event also kept as it came). For the fuzz
/// targets and their corpus replay: the gateway's own decoders, polled as live.
pub(crate) fn decode_stream(
    p: crate::protocol::Protocol,
    raw: bool,
    pieces: &[&[u8]],
) -> Vec<Result<Box<StreamChunk>, UpstreamError>> {
    use crate::protocol::Protocol;
    let same = raw.then_some(p);
    match p {
        Protocol::OpenAiChat => sse::collect(openai::chat_decoder(raw), same, pieces),
        Protocol::AnthropicMessages => sse::collect(
            crate::protocol::anthropic::StreamDecoder::default(),
            same,
            pieces,
        ),
        Protocol::Gemini => sse::collect(gemini::partials(), same, pieces),
        Protocol::OpenAiResponses => sse::collect(
            crate::protocol::responses::StreamDecoder::default(),
            same,
            pieces,
        ),
    }
}

/// A Bedrock stream (ConverseStream, or InvokeModel's with `invoke`) arriving in `pieces`,
/// decoded as its channel's is. For the fuzz targets and their corpus replay.
pub(crate) fn decode_bedrock(
    invoke: bool,
    pieces: &[&[u8]],
) -> Vec<Result<Box<StreamChunk>, UpstreamError>> {
    use bedrock::events::{AwsFrames, ConverseEvents, InvokeEvents};
    if invoke {
        let same = Some(crate::protocol::Protocol::AnthropicMessages);
        sse::collect_framed(AwsFrames::new(true), InvokeEvents::default(), same, pieces)
    } else {
        sse::collect_framed(
            AwsFrames::new(false),
            ConverseEvents::default(),
            None,
            pieces,
        )
    }
}

/// Boxed chunks: one allocation an event, passed on by pointer from the decoder to the client.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<Box<StreamChunk>, UpstreamError>> + Send>>;

/// One channel's upstream, ready to call.
#[derive(Debug)]
pub enum Upstream {
    /// Boxed: its parsed endpoints make it the largest kind by far.
    OpenAi(Box<openai::OpenAi>),
    Anthropic(anthropic::Anthropic),
    Gemini(gemini::Gemini),
    Bedrock(Box<bedrock::Bedrock>),
    Vertex(Box<vertex::Vertex>),
    Mock(mock::MockUpstream),
}

impl Upstream {
    /// Builds the upstream for a validated spec; only making its HTTP client can fail.
    pub fn build(spec: UpstreamSpec, clients: &HttpClients) -> Result<Upstream, String> {
        let h = match spec {
            UpstreamSpec::Mock(m) => return Ok(Upstream::Mock(mock::MockUpstream::new(m))),
            UpstreamSpec::Http(h) => h,
        };
        let client = clients.client(&h.base, h.http2, h.connect_timeout)?;
        let keys = h.keys;
        Ok(match h.api {
            Api::OpenAi {
                stream_usage,
                responses,
                preset,
                headers,
            } => Upstream::OpenAi(Box::new(
                openai::OpenAi::new(h.base, keys, stream_usage, None, responses, client)
                    .map_err(|e| e.to_string())?
                    .with_quirks(preset, &headers)?,
            )),
            Api::Azure {
                api_version,
                stream_usage,
            } => Upstream::OpenAi(Box::new(
                openai::OpenAi::new(h.base, keys, stream_usage, Some(api_version), false, client)
                    .map_err(|e| e.to_string())?,
            )),
            Api::Anthropic => Upstream::Anthropic(
                anthropic::Anthropic::new(h.base, keys, client).map_err(|e| e.to_string())?,
            ),
            Api::Gemini => Upstream::Gemini(gemini::Gemini::new(h.base, keys, client)),
            Api::Bedrock { region, aws } => {
                let auth = bedrock_auth(&h.channel, &region, keys, aws, &client)?;
                Upstream::Bedrock(Box::new(bedrock::Bedrock::new(
                    h.base, region, auth, client,
                )))
            }
            Api::Vertex { auth, publishers } => {
                let source = match auth {
                    GoogleAuth::ServiceAccount(json) => auth::google::TokenSource::Account(
                        Box::new(auth::google::ServiceAccount::from_json(json.expose())?),
                        client.clone(),
                    ),
                    GoogleAuth::Metadata(host) => auth::google::TokenSource::Metadata {
                        host,
                        client: client.clone(),
                    },
                };
                let key = format!(
                    "google:{}:{}",
                    h.channel,
                    auth::fingerprint(&[&source.identity()])
                );
                let token = auth::shared(key, || source);
                Upstream::Vertex(Box::new(vertex::Vertex::new(
                    h.base, token, publishers, client,
                )))
            }
        })
    }

    /// The wire protocol a call for `model` speaks (a Vertex channel's depends on the model's
    /// publisher), for translation losses and the upstream's wording of errors.
    pub fn protocol(&self, kind: ProviderKind, model: &str) -> crate::protocol::Protocol {
        match self {
            Upstream::Vertex(v) => v.publisher(model).protocol(),
            _ => kind.protocol(),
        }
    }

    /// Where a chat completion goes (credentials redacted), for `switchyard check`.
    pub fn endpoint(&self) -> String {
        match self {
            Upstream::OpenAi(o) => o.endpoint(),
            Upstream::Anthropic(a) => a.endpoint(),
            Upstream::Gemini(g) => g.endpoint(),
            Upstream::Bedrock(b) => b.endpoint(),
            Upstream::Vertex(v) => v.endpoint(),
            Upstream::Mock(_) => "in-process mock".into(),
        }
    }

    /// The upstream's host and port (`server.address` on a call's span); `None` for the mock.
    pub fn address(&self) -> Option<(String, u16)> {
        let url = match self {
            Upstream::OpenAi(o) => o.base(),
            Upstream::Anthropic(a) => a.base(),
            Upstream::Gemini(g) => g.base(),
            Upstream::Bedrock(b) => b.base(),
            Upstream::Vertex(v) => v.base(),
            Upstream::Mock(_) => return None,
        };
        Some((url.host_str()?.to_string(), url.port_or_known_default()?))
    }

    /// `via`: the reserved credential, the attempt's trace context, where waits add up.
    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChatResponse, UpstreamError> {
        // Each kind's call boxed: inline, this future was as large as the largest kind's
        // (SigV4, token grants) for every call, and was copied whole at each level that
        // awaited it (memcpy was 17 % of a request's instructions, `bench/instructions.sh`).
        match self {
            Upstream::OpenAi(o) => Box::pin(o.chat(req, model, via)).await,
            Upstream::Anthropic(a) => Box::pin(a.chat(req, model, via)).await,
            Upstream::Gemini(g) => Box::pin(g.chat(req, model, via)).await,
            Upstream::Bedrock(b) => Box::pin(b.chat(req, model, via)).await,
            Upstream::Vertex(v) => Box::pin(v.chat(req, model, via)).await,
            Upstream::Mock(m) => Box::pin(m.chat(req, model, via.waited)).await,
        }
    }

    /// Opens a stream; the future resolves when the upstream has answered with a status.
    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<ChunkStream, UpstreamError> {
        // Boxed per kind, as `chat` is.
        match self {
            Upstream::OpenAi(o) => Box::pin(o.chat_stream(req, model, via)).await,
            Upstream::Anthropic(a) => Box::pin(a.chat_stream(req, model, via)).await,
            Upstream::Gemini(g) => Box::pin(g.chat_stream(req, model, via)).await,
            Upstream::Bedrock(b) => Box::pin(b.chat_stream(req, model, via)).await,
            Upstream::Vertex(v) => Box::pin(v.chat_stream(req, model, via)).await,
            Upstream::Mock(m) => Box::pin(m.chat_stream(req, model)).await,
        }
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        via: Via<'_>,
    ) -> Result<Value, UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.embeddings(req, model, via).await,
            Upstream::Vertex(v) => v.embeddings(req, model, via).await,
            // Anthropic serves no embeddings: a channel listing an embedding model is
            // misconfigured, and the request fails over.
            Upstream::Anthropic(_) | Upstream::Gemini(_) | Upstream::Bedrock(_) => {
                Err(UpstreamError::Status {
                    status: 404,
                    retry_after: None,
                    body: Bytes::from_static(b"no embeddings endpoint for this provider kind"),
                    content_type: None,
                })
            }
            Upstream::Mock(m) => m.embeddings(req, model, via.waited).await,
        }
    }

    /// `GET /models`: a free check that the upstream answers and accepts the credential.
    pub async fn models(&self, cred: Option<usize>) -> Result<(), UpstreamError> {
        match self {
            Upstream::OpenAi(o) => o.models(cred).await,
            Upstream::Anthropic(a) => a.models(cred).await,
            Upstream::Gemini(g) => g.models(cred).await,
            Upstream::Bedrock(b) => b.models(cred).await,
            Upstream::Vertex(v) => v.models().await,
            Upstream::Mock(m) => m.models().await,
        }
    }

    /// A fetched credential's state (AWS temporary credentials, Google tokens), for the health
    /// view; `None` for keys given as they are.
    pub fn auth_status(&self) -> Option<auth::AuthStatus> {
        match self {
            Upstream::Bedrock(b) => b.auth_status(),
            Upstream::Vertex(v) => Some(v.auth_status()),
            _ => None,
        }
    }
}

/// A Bedrock channel's authentication: its keys as Bedrock API keys, else its `aws`
/// credentials, else the standard AWS chain.
fn bedrock_auth(
    channel: &str,
    region: &str,
    keys: Vec<Secret>,
    aws: Option<AwsKeys>,
    client: &http::Client,
) -> Result<bedrock::BedrockAuth, String> {
    if !keys.is_empty() {
        return Ok(bedrock::BedrockAuth::Keys(keys));
    }
    let source = match aws {
        Some(k) => auth::aws::AwsSource::Static(
            auth::aws::AwsCredentials {
                access_key_id: k.access_key_id,
                secret_access_key: k.secret_access_key,
                session_token: k.session_token,
                expires: None,
            },
            "the channel's aws",
        ),
        None => auth::aws::chain(channel, region, &|k| std::env::var(k).ok(), client.clone())?,
    };
    Ok(bedrock::BedrockAuth::Aws(source))
}
