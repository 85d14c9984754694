//! `[events]` and `[[webhooks]]` as written, and compiled: where routing events are sent, signed
//! with Standard Webhooks `whsec_` secrets. A webhook URL is checked here as far as the text
//! goes (http or https, no credentials, no private address literal unless allowed); the
//! addresses a name resolves to are checked at each delivery (`webhook::deliver`).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use crate::secret::Secret;

/// `[events]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EventsSection {
    /// Failovers of one (requested model, served channel, reason) after the first, within
    /// this many seconds, are sent as one summary (0: never folded).
    pub fold_seconds: u32,
    /// Webhooks may target loopback, private and link-local addresses (off: SSRF protection).
    pub allow_private_targets: bool,
    /// Outbox and delivery rows are kept this long; events themselves 30 days.
    pub retention_days: NonZeroU32,
    /// Events waiting to be written, at most; more are dropped and counted.
    pub queue_capacity: usize,
}

impl Default for EventsSection {
    fn default() -> Self {
        EventsSection {
            fold_seconds: 10,
            allow_private_targets: false,
            retention_days: NonZeroU32::MIN.saturating_add(6),
            queue_capacity: 10_000,
        }
    }
}

/// A `[[webhooks]]` entry as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub name: String,
    pub url: String,
    /// `whsec_` and the base64 of 24 to 64 random bytes.
    pub secret: String,
    /// While a secret rotates: deliveries carry a signature under each.
    pub previous_secret: Option<String>,
    /// Event types or `prefix.*` patterns (`*`: all).
    pub events: Vec<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

/// `[events]`, compiled.
#[derive(Debug, Clone)]
pub struct EventSettings {
    pub fold: Duration,
    pub allow_private_targets: bool,
    pub retention: Duration,
    pub queue_capacity: usize,
}

/// A webhook, compiled: its signing keys (the current first).
#[derive(Debug, Clone)]
pub struct Webhook {
    pub name: Arc<str>,
    pub url: reqwest::Url,
    pub keys: Vec<Secret>,
    pub events: Vec<String>,
    pub enabled: bool,
}

impl Webhook {
    /// Whether this webhook takes events of `kind`.
    pub fn wants(&self, kind: &str) -> bool {
        self.enabled && self.events.iter().any(|p| crate::events::matches(p, kind))
    }
}

type FieldError = (String, String);

pub fn settings(s: &EventsSection) -> EventSettings {
    EventSettings {
        fold: Duration::from_secs(u64::from(s.fold_seconds)),
        allow_private_targets: s.allow_private_targets,
        retention: Duration::from_secs(u64::from(s.retention_days.get()) * 86_400),
        queue_capacity: s.queue_capacity.clamp(16, 1_000_000),
    }
}

/// The signing key a `whsec_` secret holds, or why it is not one.
pub fn signing_key(secret: &str) -> Result<Vec<u8>, &'static str> {
    let b64 = secret
        .strip_prefix("whsec_")
        .ok_or("must start with whsec_ (Standard Webhooks)")?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| "must be whsec_ and base64")?;
    if !(24..=64).contains(&key.len()) {
        return Err("must hold 24 to 64 bytes (base64 after whsec_)");
    }
    Ok(key)
}

/// A new secret: `whsec_` and the base64 of 32 random bytes.
pub fn generate_secret() -> Result<String, ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes)?;
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// Whether an address is one a multi-tenant gateway must not be made to call.
pub fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                // 100.64.0.0/10, carrier-grade NAT (and cloud metadata neighbours).
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return private(IpAddr::V4(v4));
            }
            let s = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (s & 0xfe00) == 0xfc00 // unique local
                || (s & 0xffc0) == 0xfe80 // link local
        }
    }
}

/// A webhook URL as far as its text can be checked.
pub fn check_url(raw: &str, allow_private: bool) -> Result<reqwest::Url, &'static str> {
    let url = reqwest::Url::parse(raw).map_err(|_| "is not a URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be http:// or https://");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials (sign with the secret instead)");
    }
    let Some(host) = url.host_str() else {
        return Err("has no host");
    };
    if allow_private {
        return Ok(url);
    }
    // A name is checked where it matters, when it is resolved for each delivery.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let refused = bare.parse::<IpAddr>().is_ok_and(private);
    if refused {
        return Err(
            "targets a private, loopback or link-local address (set [events] allow_private_targets = true to allow)",
        );
    }
    Ok(url)
}

/// The webhooks, checked (`webhooks[i].field` names what is wrong).
pub fn compile(
    hooks: &[WebhookConfig],
    events: &EventSettings,
    has_store: bool,
) -> Result<Vec<Webhook>, FieldError> {
    let mut out: Vec<Webhook> = Vec::with_capacity(hooks.len());
    for (i, w) in hooks.iter().enumerate() {
        let f = |name: &str, m: &str| (format!("webhooks[{i}].{name}"), m.to_string());
        if !has_store {
            return Err(f(
                "name",
                "webhooks need a [store]: their outbox is kept there, so no event is lost",
            ));
        }
        if w.name.is_empty() || w.name.contains('/') {
            return Err(f("name", "required: a non-empty name without '/'"));
        }
        if out.iter().any(|o| *o.name == *w.name) {
            return Err(f("name", "is used by another webhook"));
        }
        let url = check_url(&w.url, events.allow_private_targets).map_err(|m| f("url", m))?;
        let mut keys = Vec::new();
        signing_key(&w.secret).map_err(|m| f("secret", m))?;
        keys.push(Secret::new(w.secret.clone()));
        if let Some(p) = &w.previous_secret {
            signing_key(p).map_err(|m| f("previous_secret", m))?;
            keys.push(Secret::new(p.clone()));
        }
        if w.events.is_empty() {
            return Err(f("events", "must name at least one event type or pattern"));
        }
        if let Some(Err(m)) = w
            .events
            .iter()
            .map(|p| crate::events::check_pattern(p))
            .find(Result::is_err)
        {
            return Err(f("events", &m));
        }
        out.push(Webhook {
            name: w.name.as_str().into(),
            url,
            keys,
            events: w.events.clone(),
            enabled: w.enabled,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_refused_for_scheme_credentials_and_private_targets() {
        let table = [
            ("https://hooks.example.com/x", false, true),
            ("ftp://hooks.example.com/x", true, false),
            ("https://user:pw@hooks.example.com/x", true, false),
            ("http://127.0.0.1:9000/", false, false),
            ("http://127.0.0.1:9000/", true, true),
            ("http://10.1.2.3/", false, false),
            ("http://169.254.169.254/latest/meta-data", false, false),
            ("http://[::1]/", false, false),
            ("http://[fd00::1]/", false, false),
            ("http://[::ffff:192.168.0.1]/", false, false),
            ("http://localhost:8080/", false, true),
            ("http://100.64.0.1/", false, false),
            ("http://8.8.8.8/", false, true),
        ];
        for (url, allow, ok) in table {
            assert_eq!(check_url(url, allow).is_ok(), ok, "{url} allow={allow}");
        }
    }

    #[test]
    fn webhooks_need_a_store_a_known_pattern_and_unique_names() {
        let events = settings(&EventsSection::default());
        let hook = |name: &str, pattern: &str| WebhookConfig {
            name: name.into(),
            url: "https://hooks.example.com/x".into(),
            secret: generate_secret().unwrap(),
            previous_secret: None,
            events: vec![pattern.into()],
            enabled: true,
        };
        let field = |r: Result<Vec<Webhook>, FieldError>| r.err().map(|e| e.0);
        assert_eq!(
            field(compile(&[hook("a", "*")], &events, false)),
            Some("webhooks[0].name".into())
        );
        assert_eq!(
            field(compile(&[hook("a", "budgets.*")], &events, true)),
            Some("webhooks[0].events".into())
        );
        assert_eq!(
            field(compile(&[hook("a", "*"), hook("a", "*")], &events, true)),
            Some("webhooks[1].name".into())
        );
        assert_eq!(
            field(compile(&[hook("a/b", "*")], &events, true)),
            Some("webhooks[0].name".into())
        );
        let ok = compile(&[hook("a", "circuit.*")], &events, true).unwrap();
        assert!(ok[0].wants("circuit.closed") && !ok[0].wants("model.failover"));
        assert_eq!(events.fold, Duration::from_secs(10));
        assert_eq!(events.retention, Duration::from_secs(7 * 86_400));
    }

    #[test]
    fn secrets_are_whsec_base64_of_24_to_64_bytes() {
        let s = generate_secret().unwrap();
        assert_eq!(signing_key(&s).unwrap().len(), 32);
        assert!(signing_key("abc").is_err());
        assert!(signing_key("whsec_!!").is_err());
        assert!(signing_key("whsec_c2hvcnQ=").is_err());
    }
}
