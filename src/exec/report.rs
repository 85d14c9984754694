//! The failover report: what happened to a request, attempt by attempt, as the client's
//! headers and body extension and the request log show it. Never carries upstream error text.

use std::sync::Arc;

use serde_json::{Value, json};

use super::OutcomeClass;
use crate::context::fit::Note;
use crate::health::Skip;
use crate::router::Chain;

/// One upstream call (or a channel skipped by its health) as reported to clients and the log.
/// Never carries upstream error text.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub channel: Arc<str>,
    pub model: Arc<str>,
    pub status: Option<u16>,
    /// `None` = success (or a skip).
    pub class: Option<OutcomeClass>,
    pub latency_ms: u64,
    /// Set when the channel was not called: why.
    pub skip: Option<Skip>,
    /// The model as the upstream knows it, and the credential's label (calls only; for the
    /// ledger, never shown to clients).
    pub upstream_model: Option<Arc<str>>,
    pub credential: Option<Arc<str>>,
    /// What the call is priced at.
    pub price: Option<Arc<crate::pricing::Price>>,
    /// The channel's kind (calls and skips of a channel).
    pub provider: Option<crate::provider::ProviderKind>,
    /// When the call ran, how long, and how much of it was the upstream's (calls only).
    pub timing: Option<Timing>,
}

/// One call's times: what its span and the gateway's overhead measure are made of.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub started: std::time::Instant,
    /// Until the answer (a stream: until its first content, the commit point).
    pub took: std::time::Duration,
    /// Of `took`, waiting on the upstream: the rest was the gateway's own work.
    pub waited: std::time::Duration,
    /// The call's span id, sent upstream in `traceparent` (0: the request is not traced).
    pub span_id: u64,
}

impl AttemptRecord {
    fn reason(&self) -> &'static str {
        match (self.skip, self.class) {
            (Some(s), _) => s.as_str(),
            (None, Some(c)) => c.as_str(),
            (None, None) => "ok",
        }
    }
}

impl serde::Serialize for AttemptRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(5))?;
        // No channel: a step skipped before any channel was chosen (a context fallback).
        m.serialize_entry(
            "channel",
            &(!self.channel.is_empty()).then_some(&*self.channel),
        )?;
        m.serialize_entry("model", &*self.model)?;
        m.serialize_entry("status", &self.status)?;
        m.serialize_entry("reason", self.reason())?;
        m.serialize_entry("latency_ms", &self.latency_ms)?;
        m.end()
    }
}

/// The channel that served, the model as the client named it, and the upstream's name for it.
#[derive(Debug, Clone)]
pub struct Served {
    pub channel: Arc<str>,
    pub model: Arc<str>,
    pub upstream_model: Arc<str>,
}

/// What happened to a request: the failover report.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The first model of the chain as the client sent it (before any redirect).
    pub requested_model: String,
    /// Redirects applied to the chain's models: (as written, routed as, rule).
    pub redirects: Vec<(String, Arc<str>, Arc<str>)>,
    pub attempts: Vec<AttemptRecord>,
    /// Who served (set at success / the commit point).
    pub served: Option<Served>,
    /// What fitting the request to the serving model's window did, when it was counted.
    pub context: Option<Note>,
    /// Time slept between retries of a channel (an upstream's Retry-After or the backoff).
    pub backoff: std::time::Duration,
    /// How the first try was chosen: the strategy and why (`route_reason`).
    pub route: Option<(crate::router::Strategy, crate::router::Why)>,
}

impl Report {
    /// `{strategy}.{why}` of the first try (`latency.fastest`, `session.bound`).
    pub fn route_reason(&self) -> Option<&'static str> {
        self.route.map(|(s, why)| crate::router::reason(s, why))
    }

    pub fn new(requested_model: &str) -> Self {
        Report {
            requested_model: requested_model.to_string(),
            ..Report::default()
        }
    }

    /// The report for a resolved chain.
    pub fn for_chain(chain: &Chain) -> Self {
        Report {
            requested_model: chain.requested_model.clone(),
            redirects: chain
                .steps
                .iter()
                .filter_map(|s| Some((s.written.clone(), s.model.clone(), s.redirect.clone()?)))
                .collect(),
            ..Report::default()
        }
    }

    /// Upstream calls made (skipped channels not counted).
    pub fn tried(&self) -> usize {
        self.attempts.iter().filter(|a| a.skip.is_none()).count()
    }

    /// Whether this request has already called `channel` (an attempt that was not skipped).
    pub fn called(&self, channel: &str) -> bool {
        self.attempts
            .iter()
            .any(|a| a.skip.is_none() && &*a.channel == channel)
    }

    pub fn attempts_json(&self) -> Value {
        serde_json::to_value(&self.attempts).unwrap_or(Value::Null)
    }

    /// The attempts as JSON text, for the log row (written directly, no tree).
    pub fn attempts_text(&self) -> String {
        serde_json::to_string(&self.attempts).unwrap_or_else(|_| "[]".into())
    }

    /// The body extension, present only when something moved the request: a failover (more
    /// than one attempt), a redirect, or a chain served by another model than the first.
    pub fn body_extension(&self) -> Option<Value> {
        let served = self.served.as_ref()?;
        let failover = self.tried() > 1;
        if !failover && self.redirects.is_empty() && *served.model == *self.requested_model {
            return None;
        }
        let mut ext = json!({
            "requested_model": self.requested_model,
            "served_model": &*served.model,
            "served_channel": &*served.channel,
            // Anything before the served attempt (a failure, or a channel skipped) moved it.
            "failover": {"occurred": self.attempts.len() > 1, "attempts": self.attempts_json()},
        });
        if !self.redirects.is_empty() {
            ext["redirects"] = self
                .redirects
                .iter()
                .map(|(from, to, rule)| json!({"from": from, "to": &**to, "rule": &**rule}))
                .collect();
        }
        Some(ext)
    }

    /// The last failure's class: what the request log calls the outcome of a failed request.
    pub fn last_class(&self) -> Option<OutcomeClass> {
        self.attempts.iter().rev().find_map(|a| a.class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_extension_only_when_failover_occurred() {
        let mut r = Report::new("m");
        let ok = AttemptRecord {
            channel: "a".into(),
            model: "m".into(),
            status: Some(200),
            class: None,
            latency_ms: 1,
            skip: None,
            upstream_model: None,
            credential: None,
            price: None,
            provider: None,
            timing: None,
        };
        r.attempts.push(ok.clone());
        r.served = Some(Served {
            channel: "a".into(),
            model: "m".into(),
            upstream_model: "m-1".into(),
        });
        assert!(r.body_extension().is_none());
        r.attempts.insert(
            0,
            AttemptRecord {
                class: Some(OutcomeClass::ServerError),
                status: Some(500),
                channel: "b".into(),
                ..ok
            },
        );
        let ext = r.body_extension().unwrap();
        assert_eq!(ext["failover"]["attempts"][0]["reason"], "server_error");
        assert_eq!(ext["served_channel"], "a");
    }
}
