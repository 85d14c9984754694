//! One delivery: the payload POSTed with its Standard Webhooks headers within 5 s, through a
//! client that never follows a redirect and, unless private targets are allowed, never connects
//! to a private, loopback or link-local address whatever a name resolves to (a name that
//! resolves to one is refused at connect time, so DNS cannot be used to reach inside).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::webhooks::{Webhook, private};

/// How long a receiver has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Retries back off from 1 s, doubling, to at most an hour.
const FIRST: Duration = Duration::from_secs(1);
const CAP: Duration = Duration::from_secs(3600);
/// How long an event is retried before it expires.
pub const GIVE_UP: Duration = Duration::from_secs(24 * 3600);

/// What a receiver's answer means for the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered(u16),
    /// 5xx, 408, 429, a redirect, a timeout or a connection error: sent again later.
    Retry(Option<u16>, String),
    /// Any other 4xx: the receiver refuses it; not sent again.
    Refused(u16),
}

impl Outcome {
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Delivered(s) | Outcome::Refused(s) => Some(*s),
            Outcome::Retry(s, _) => *s,
        }
    }

    pub fn of_status(status: u16) -> Outcome {
        match status {
            200..=299 => Outcome::Delivered(status),
            408 | 429 => Outcome::Retry(Some(status), format!("HTTP {status}")),
            400..=499 => Outcome::Refused(status),
            _ => Outcome::Retry(Some(status), format!("HTTP {status}")),
        }
    }
}

/// The wait before retry number `attempts` (1 after the first failure): 1 s doubling, capped at
/// an hour, ±20 % so a receiver coming back is not met by every sender at once.
pub fn backoff(attempts: i64) -> Duration {
    let exp = attempts.clamp(1, 32) as u32 - 1;
    let base = FIRST.saturating_mul(2u32.saturating_pow(exp)).min(CAP);
    base.mul_f64(0.8 + 0.4 * fastrand::f64())
}

/// Resolves names, leaving out private addresses (none left: refused).
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = all.into_iter().filter(|a| !private(a.ip())).collect();
            if public.is_empty() {
                return Err(format!(
                    "{host} resolves only to private, loopback or link-local addresses ([events] allow_private_targets is off)"
                )
                .into());
            }
            let addrs: Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}

/// The two clients deliveries use: one that reaches only public addresses, one for any.
pub struct Sender {
    public: reqwest::Client,
    any: reqwest::Client,
}

impl Sender {
    pub fn new() -> Result<Sender, reqwest::Error> {
        crate::provider::install_crypto_provider();
        let base = || {
            reqwest::Client::builder()
                .timeout(TIMEOUT)
                .connect_timeout(TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .user_agent(concat!("Switchyard-Webhooks/", env!("CARGO_PKG_VERSION")))
        };
        Ok(Sender {
            public: base().dns_resolver(PublicOnly).build()?,
            any: base().build()?,
        })
    }

    /// POSTs `payload` as event `id` to `hook`; the outcome and how long it took.
    pub async fn send(
        &self,
        hook: &Webhook,
        allow_private: bool,
        id: &str,
        payload: &str,
    ) -> (Outcome, Duration) {
        let ts = crate::clock::unix_ms() / 1000;
        let keys: Vec<&str> = hook.keys.iter().map(|k| k.expose()).collect();
        let sig = super::sign::signature(&keys, id, ts, payload.as_bytes());
        let client = if allow_private {
            &self.any
        } else {
            &self.public
        };
        let started = Instant::now();
        let sent = client
            .post(hook.url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(payload.to_string())
            .send()
            .await;
        let outcome = match sent {
            Ok(resp) => Outcome::of_status(resp.status().as_u16()),
            Err(e) if e.is_timeout() => Outcome::Retry(None, "timed out after 5 s".into()),
            Err(e) => Outcome::Retry(None, error_text(&e)),
        };
        (outcome, started.elapsed())
    }
}

/// A connection error's text without its URL (which the delivery log shows apart).
fn error_text(e: &reqwest::Error) -> String {
    use std::error::Error;
    let mut s = String::from(if e.is_connect() { "connect: " } else { "" });
    let mut cur: Option<&dyn Error> = e.source();
    let mut last = e.to_string();
    while let Some(c) = cur {
        last = c.to_string();
        cur = c.source();
    }
    s.push_str(&last);
    s.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_doubling_to_an_hour_with_jitter() {
        for (n, secs) in [
            (1, 1.0),
            (2, 2.0),
            (3, 4.0),
            (10, 512.0),
            (13, 3600.0),
            (40, 3600.0),
        ] {
            let d = backoff(n).as_secs_f64();
            assert!(d >= 0.8 * secs - 1e-9 && d <= 1.2 * secs + 1e-9, "{n}: {d}");
        }
        let table = [
            (200, "delivered"),
            (204, "delivered"),
            (500, "retry"),
            (503, "retry"),
            (408, "retry"),
            (429, "retry"),
            (301, "retry"),
            (400, "refused"),
            (401, "refused"),
            (410, "refused"),
        ];
        for (status, want) in table {
            let got = match Outcome::of_status(status) {
                Outcome::Delivered(_) => "delivered",
                Outcome::Retry(..) => "retry",
                Outcome::Refused(_) => "refused",
            };
            assert_eq!(got, want, "{status}");
        }
    }
}
