//! `[[channels]]`: each upstream endpoint with its credentials, timeouts (one taxonomy,
//! checked against the request deadline), circuit breaker and the validated spec its provider
//! is built from; and the index of which channels serve which model.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

use super::FieldError;
use crate::config::file::{ChannelConfig, Timeouts};
use crate::config::settings::Limits;
use crate::config::snapshot::{Channel, DEFAULT_GROUP, ModelRoute};
use crate::provider::{
    Api, AwsKeys, GoogleAuth, HttpClients, HttpSpec, ProviderKind, Upstream, UpstreamSpec,
};
use crate::secret::Secret;

/// The channels, and model name → the channels that list it, in config order.
pub type Compiled = (Vec<Channel>, BTreeMap<Arc<str>, Vec<ModelRoute>>);

pub fn compile(
    list: &[ChannelConfig],
    request_timeout_ms: u64,
    clients: &HttpClients,
) -> Result<Compiled, FieldError> {
    let mut names = HashSet::new();
    let mut channels = Vec::with_capacity(list.len());
    let mut models: BTreeMap<Arc<str>, Vec<ModelRoute>> = BTreeMap::new();
    for (i, c) in list.iter().enumerate() {
        let at = |(f, m): (&str, String)| (format!("channels[{i}].{f}"), m);
        if c.name.is_empty() {
            return Err(at(("name", "must not be empty".into())));
        }
        if !names.insert(c.name.as_str()) {
            return Err(at(("name", format!("duplicate channel name {:?}", c.name))));
        }
        if let Some(j) = c.groups.iter().position(|g| g.is_empty()) {
            return Err((
                format!("channels[{i}].groups[{j}]"),
                "must not be empty".into(),
            ));
        }
        let credentials = credentials(c, i)?;
        bounded(c).map_err(at)?;
        let t = c.timeouts(request_timeout_ms);
        check_timeouts(t, request_timeout_ms).map_err(at)?;
        let spec = upstream_spec(c, Duration::from_millis(t.connect_ms)).map_err(at)?;
        let upstream = Upstream::build(spec, clients).map_err(|e| at(("base_url", e)))?;
        index_models(c, i, &mut models)?;
        let price = match &c.price {
            Some(p) => Some(Arc::new(p.compile("price.").map_err(|(f, m)| at((&f, m)))?)),
            None => None,
        };
        let quota = crate::config::quota::compile(crate::config::quota::QuotaFields {
            budget: c.budget.as_ref(),
            rpm: c.rpm,
            tpm: c.tpm,
            max_concurrency: c.max_concurrency,
            limits_fail: c.limits_fail,
            channel: true,
        })
        .map_err(|(f, m)| at((f, m)))?;
        channels.push(Channel {
            name: c.name.as_str().into(),
            kind: c.provider,
            priority: c.priority,
            weight: c.weight.get(),
            enabled: c.enabled,
            max_retries: c.max_retries,
            retry_interval: Duration::from_millis(c.retry_interval_ms),
            timeout: Duration::from_millis(t.attempt_ms),
            first_token_timeout: Duration::from_millis(t.first_token_ms),
            breaker: c.circuit_breaker.settings(),
            credentials,
            credential_cooldown: Duration::from_secs(c.credential_cooldown_seconds),
            groups: if c.groups.is_empty() {
                vec![DEFAULT_GROUP.into()]
            } else {
                c.groups.iter().map(|g| g.as_str().into()).collect()
            },
            affinity: c.affinity,
            responses: c.responses,
            upstream,
            price,
            quota,
            scope: format!("channel:{}", c.name).into(),
        });
    }
    Ok((channels, models))
}

/// The channel's credentials by label, in key order: `api_keys` get a fingerprint label,
/// `credentials` their own (or a fingerprint) and their limits.
fn credentials(c: &ChannelConfig, i: usize) -> Result<Vec<(Arc<str>, Limits)>, FieldError> {
    if !c.api_keys.is_empty() && !c.credentials.is_empty() {
        return Err((
            format!("channels[{i}].credentials"),
            "give either api_keys or credentials, not both".into(),
        ));
    }
    let keys = c
        .api_keys
        .iter()
        .enumerate()
        .map(|(j, k)| (format!("api_keys[{j}]"), k));
    let given = c.credentials.iter().enumerate();
    for (at, k) in keys.chain(given.map(|(j, cr)| (format!("credentials[{j}].key"), &cr.key))) {
        // It goes in a header (or Gemini's query): one that could not be sent is refused here,
        // not found out on every request.
        if k.trim().is_empty() || http::HeaderValue::from_str(k).is_err() {
            return Err((
                format!("channels[{i}].{at}"),
                "must be a non-empty key of visible ASCII characters".into(),
            ));
        }
    }
    let mut labels: Vec<(Arc<str>, Limits)> = Vec::new();
    // A channel that signs its own way has one credential, its identity (named, never shown).
    if c.provider == ProviderKind::Bedrock && c.api_keys.is_empty() && c.credentials.is_empty() {
        let label = match &c.aws {
            Some(a) => format!("aws-{}", fingerprint(&a.access_key_id)),
            None => "aws-chain".into(),
        };
        labels.push((label.into(), Limits::default()));
    }
    if c.provider == ProviderKind::Vertex {
        labels.push(("google".into(), Limits::default()));
    }
    for k in &c.api_keys {
        labels.push((fingerprint(k).into(), Limits::default()));
    }
    for (j, cr) in c.credentials.iter().enumerate() {
        let label = cr.label.clone().unwrap_or_else(|| fingerprint(&cr.key));
        if labels.iter().any(|(l, _)| **l == *label) {
            return Err((
                format!("channels[{i}].credentials[{j}].label"),
                format!("duplicate label {label:?}"),
            ));
        }
        labels.push((
            label.into(),
            Limits {
                rpm: cr.rpm.map(|n| n.get()),
                max_concurrency: cr.max_concurrency.map(|n| n.get()),
                tpm: cr.tpm.map(|n| n.get()),
            },
        ));
    }
    Ok(labels)
}

/// A credential's default label: a short hash of the key, so it follows the key through
/// reorders and reloads and shows nothing of it.
fn fingerprint(key: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    format!("key-{:06x}", h.finish() & 0xff_ffff)
}

/// The timeout taxonomy: connect ≤ first token and attempt ≤ the request deadline.
fn check_timeouts(t: Timeouts, request_timeout_ms: u64) -> Result<(), (&'static str, String)> {
    if t.attempt_ms > request_timeout_ms {
        return Err((
            "timeout_ms",
            format!(
                "{} ms is longer than server.request_timeout_ms ({request_timeout_ms} ms); the attempt could never time out",
                t.attempt_ms
            ),
        ));
    }
    if t.first_token_ms > request_timeout_ms {
        return Err((
            "first_token_timeout_ms",
            format!(
                "{} ms is longer than server.request_timeout_ms ({request_timeout_ms} ms)",
                t.first_token_ms
            ),
        ));
    }
    if t.connect_ms > t.attempt_ms.min(t.first_token_ms) {
        return Err((
            "connect_timeout_ms",
            "must not be longer than timeout_ms or first_token_timeout_ms".into(),
        ));
    }
    Ok(())
}

/// What the channel's provider is built from; every field that only one kind takes is
/// refused on the others.
fn upstream_spec(
    c: &ChannelConfig,
    connect_timeout: Duration,
) -> Result<UpstreamSpec, (&'static str, String)> {
    if c.provider == ProviderKind::Mock {
        if c.base_url.is_some() {
            return Err(("base_url", "a mock channel takes no base_url".into()));
        }
        if !c.api_keys.is_empty() || !c.credentials.is_empty() {
            return Err(("api_keys", "a mock channel takes no api_keys".into()));
        }
        let spec = c.mock.clone().unwrap_or_default();
        spec.validate().map_err(|m| ("mock", m))?;
        return Ok(UpstreamSpec::Mock(spec));
    }
    if c.mock.is_some() {
        return Err(("mock", "only allowed with provider = \"mock\"".into()));
    }
    cloud_fields(c)?;
    let default_base = default_base(c)?;
    let base = c.base_url.as_deref().or(default_base.as_deref()).ok_or((
        "base_url",
        format!("is required for provider = \"{}\"", c.provider.as_str()),
    ))?;
    let base = Url::parse(base).map_err(|e| ("base_url", format!("not a valid URL: {e}")))?;
    // A Vertex channel's calls all go under its project and location.
    let base = match (&c.provider, &c.project, &c.location) {
        (ProviderKind::Vertex, Some(p), Some(l)) => {
            crate::provider::http_join(&base, &format!("projects/{p}/locations/{l}"))
        }
        _ => base,
    };
    if !matches!(base.scheme(), "http" | "https") {
        return Err(("base_url", "must be an http:// or https:// URL".into()));
    }
    if base.cannot_be_a_base() {
        return Err(("base_url", "not a valid URL: not a base URL".into()));
    }
    if c.api_version.is_some() && c.provider != ProviderKind::Azure {
        return Err(("api_version", "only for provider = \"azure\"".into()));
    }
    if c.responses && c.provider != ProviderKind::Openai {
        return Err(("responses", "only for provider = \"openai\"".into()));
    }
    let api = match c.provider {
        ProviderKind::Azure => Api::Azure {
            api_version: c
                .api_version
                .clone()
                .ok_or(("api_version", "is required for provider = \"azure\"".into()))?,
            stream_usage: c.stream_usage,
        },
        ProviderKind::Anthropic => Api::Anthropic,
        ProviderKind::Gemini => Api::Gemini,
        ProviderKind::Vertex => Api::Vertex {
            auth: google_auth(c)?,
            publishers: publishers(c)?,
        },
        ProviderKind::Bedrock => Api::Bedrock {
            region: c.region.clone().unwrap_or_default(),
            aws: c.aws.as_ref().map(|a| AwsKeys {
                access_key_id: a.access_key_id.clone(),
                secret_access_key: Secret::new(a.secret_access_key.as_str()),
                session_token: a.session_token.as_deref().map(Secret::new),
            }),
        },
        kind => {
            let preset = kind.preset();
            Api::OpenAi {
                stream_usage: c.stream_usage && preset.is_none_or(|p| p.stream_usage),
                responses: c.responses,
                preset,
                headers: headers(c, preset)?,
            }
        }
    };
    let keys = if c.credentials.is_empty() {
        c.api_keys.iter().map(|k| Secret::new(k.as_str())).collect()
    } else {
        c.credentials
            .iter()
            .map(|k| Secret::new(k.key.as_str()))
            .collect()
    };
    Ok(UpstreamSpec::Http(HttpSpec {
        channel: c.name.clone(),
        api,
        base,
        keys,
        http2: c.http2,
        connect_timeout,
    }))
}

/// The headers an OpenAI-compatible channel's calls carry: its preset's, then its own (which
/// win), each a valid header; never the ones the gateway writes itself.
fn headers(
    c: &ChannelConfig,
    preset: Option<&'static crate::provider::presets::Preset>,
) -> Result<Vec<(String, String)>, (&'static str, String)> {
    let mut all: std::collections::BTreeMap<String, String> =
        preset.map(|p| p.headers.clone()).unwrap_or_default();
    for (k, v) in &c.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| ("headers", format!("{k:?} is not a header name")))?;
        if matches!(
            name.as_str(),
            "authorization" | "host" | "content-type" | "content-length" | "x-switchyard-hops"
        ) {
            return Err(("headers", format!("{k} is the gateway's own to send")));
        }
        http::HeaderValue::from_str(v)
            .map_err(|_| ("headers", format!("{k}: not a header value")))?;
        all.insert(k.clone(), v.clone());
    }
    Ok(all.into_iter().collect())
}

/// The fields only a cloud kind takes, refused on the others and checked on its own.
fn cloud_fields(c: &ChannelConfig) -> Result<(), (&'static str, String)> {
    let compatible = c.provider == ProviderKind::Openai || c.provider.preset().is_some();
    if !compatible && !c.headers.is_empty() {
        return Err((
            "headers",
            "only for OpenAI-compatible channels (openai and the named providers)".into(),
        ));
    }
    let vertex = c.provider == ProviderKind::Vertex;
    let only_vertex = [
        ("project", c.project.is_some()),
        ("location", c.location.is_some()),
        ("credentials_json", c.credentials_json.is_some()),
        ("credentials_file", c.credentials_file.is_some()),
        ("models", c.models.iter().any(|m| m.publisher().is_some())),
    ];
    if !vertex && let Some((f, _)) = only_vertex.iter().find(|(_, set)| *set) {
        let what = if *f == "models" {
            "a model's publisher"
        } else {
            "it"
        };
        return Err((f, format!("{what} is only for provider = \"vertex\"")));
    }
    if vertex {
        for (f, v) in [("project", &c.project), ("location", &c.location)] {
            let ok = v.as_deref().is_some_and(|s| {
                !s.is_empty() && s.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
            });
            if !ok {
                return Err((f, "is required for provider = \"vertex\"".into()));
            }
        }
        if !c.api_keys.is_empty() || !c.credentials.is_empty() {
            return Err((
                "credentials",
                "a vertex channel authenticates with Google tokens: credentials_json, credentials_file, GOOGLE_APPLICATION_CREDENTIALS or the metadata server".into(),
            ));
        }
    }
    let bedrock = c.provider == ProviderKind::Bedrock;
    if !bedrock && c.region.is_some() {
        return Err(("region", "only for provider = \"bedrock\"".into()));
    }
    if !bedrock && c.aws.is_some() {
        return Err(("aws", "only for provider = \"bedrock\"".into()));
    }
    if bedrock {
        let region = c.region.as_deref().unwrap_or_default();
        let valid = !region.is_empty()
            && region
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-');
        if !valid {
            return Err((
                "region",
                "is required for provider = \"bedrock\": an AWS region such as us-east-1".into(),
            ));
        }
        if c.aws.is_some() && (!c.api_keys.is_empty() || !c.credentials.is_empty()) {
            return Err((
                "aws",
                "give either aws (SigV4) or credentials (Bedrock API keys), not both".into(),
            ));
        }
        if let Some(a) = &c.aws
            && (a.access_key_id.is_empty() || a.secret_access_key.is_empty())
        {
            return Err((
                "aws",
                "access_key_id and secret_access_key must not be empty".into(),
            ));
        }
    }
    Ok(())
}

/// The base URL a kind has without one: Bedrock's regional runtime endpoint, Vertex's regional
/// (or global) endpoint, a named OpenAI-compatible provider's own.
fn default_base(c: &ChannelConfig) -> Result<Option<String>, (&'static str, String)> {
    if let Some(p) = c.provider.preset() {
        if p.key_required && c.api_keys.is_empty() && c.credentials.is_empty() {
            return Err((
                "api_keys",
                format!("provider = \"{}\" needs an API key", p.name),
            ));
        }
        return Ok(Some(p.base_url.clone()));
    }
    Ok(match c.provider {
        ProviderKind::Bedrock => c
            .region
            .as_ref()
            .map(|r| format!("https://bedrock-runtime.{r}.amazonaws.com")),
        ProviderKind::Vertex => c.location.as_ref().map(|l| match l.as_str() {
            "global" => "https://aiplatform.googleapis.com/v1".to_string(),
            l => format!("https://{l}-aiplatform.googleapis.com/v1"),
        }),
        _ => None,
    })
}

/// A Vertex channel's token source: its `credentials_json`, its `credentials_file`,
/// `GOOGLE_APPLICATION_CREDENTIALS`, else the metadata server (`GCE_METADATA_HOST`). A key
/// given is checked here, so a bad one fails the load, not every request.
fn google_auth(c: &ChannelConfig) -> Result<GoogleAuth, (&'static str, String)> {
    use crate::provider::auth::google::ServiceAccount;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (field, json) = if let Some(j) = &c.credentials_json {
        ("credentials_json", j.clone())
    } else if let Some(path) = c
        .credentials_file
        .clone()
        .or_else(|| env("GOOGLE_APPLICATION_CREDENTIALS"))
    {
        let field = if c.credentials_file.is_some() {
            "credentials_file"
        } else {
            "project"
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            (
                field,
                format!("reading the service account key {path:?}: {e}"),
            )
        })?;
        (field, text)
    } else {
        let host = env("GCE_METADATA_HOST").unwrap_or_else(|| "metadata.google.internal".into());
        return Ok(GoogleAuth::Metadata(host));
    };
    ServiceAccount::from_json(&json).map_err(|e| (field, e))?;
    Ok(GoogleAuth::ServiceAccount(Secret::new(json)))
}

/// Which Vertex publisher serves each of the channel's upstream models.
fn publishers(
    c: &ChannelConfig,
) -> Result<HashMap<String, crate::provider::vertex::Publisher>, (&'static str, String)> {
    let mut out = HashMap::new();
    for m in c.models.iter() {
        let p = crate::provider::vertex::Publisher::of(m.publisher(), m.upstream())
            .map_err(|e| ("models", e))?;
        out.insert(m.upstream().to_string(), p);
    }
    Ok(out)
}

/// Adds the channel's models to the index: names not empty, none listed twice.
fn index_models(
    c: &ChannelConfig,
    i: usize,
    models: &mut BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<(), FieldError> {
    let mut seen = HashMap::new();
    for (j, m) in c.models.iter().enumerate() {
        let at = format!("channels[{i}].models[{j}]");
        if m.name().is_empty() || m.upstream().is_empty() {
            return Err((at, "model names must not be empty".into()));
        }
        if seen.insert(m.name(), j).is_some() {
            return Err((at, format!("model {:?} is listed twice", m.name())));
        }
        models.entry(m.name().into()).or_default().push(ModelRoute {
            channel: i,
            upstream_model: m.upstream().into(),
            price: None,
        });
    }
    Ok(())
}

/// The longest any channel duration may be: what a clock can add to now without overflow,
/// with room to spare (a month).
const MAX_SECONDS: u64 = 30 * 86_400;

/// Every duration a channel sets is at most [`MAX_SECONDS`].
fn bounded(c: &ChannelConfig) -> Result<(), (&'static str, String)> {
    let cb = &c.circuit_breaker;
    let secs = [
        ("credential_cooldown_seconds", c.credential_cooldown_seconds),
        ("retry_interval_ms", c.retry_interval_ms / 1000),
        ("circuit_breaker.window_seconds", cb.window_seconds.get()),
        (
            "circuit_breaker.cooldown_seconds",
            cb.cooldown_seconds.get(),
        ),
        (
            "circuit_breaker.rate_limit_cooldown_seconds",
            cb.rate_limit_cooldown_seconds,
        ),
        ("circuit_breaker.slow_start_seconds", cb.slow_start_seconds),
        (
            "circuit_breaker.probe.interval_seconds",
            cb.probe.interval_seconds.get(),
        ),
    ];
    match secs.iter().find(|(_, v)| *v > MAX_SECONDS) {
        Some((f, _)) => Err((f, format!("at most {MAX_SECONDS} seconds (30 days)"))),
        None => Ok(()),
    }
}
