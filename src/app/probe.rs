//! Active probes: a background task that tests channels health has doubts about, so that no
//! client request is risked on them. Health decides when a probe is due
//! ([`Health::claim_probe`]); this module only runs it and reports back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Map;
use tokio::time::Instant;

use crate::config::{Live, ProbeKind, Snapshot};
use crate::health::{CredVerdict, Health, Key, ProbeReason};
use crate::protocol::{ChatRequest, MaxTokensField, Message, Role};
use crate::provider::{UpstreamError, Via};

/// How often the prober looks for due probes (real time; due-ness follows health's clock).
const TICK: Duration = Duration::from_millis(250);

/// Starts the prober; it runs until the task is aborted.
pub fn spawn_prober(live: Arc<Live>, health: Arc<Health>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(TICK).await;
            let snap = live.load();
            for (idx, ch) in snap.channels.iter().enumerate() {
                if !ch.enabled || !ch.breaker.enabled || ch.breaker.probe.is_none() {
                    continue;
                }
                for key in health.keys_of(&ch.name) {
                    if let Some(reason) = health.claim_probe(&key, &snap.health, &ch.breaker) {
                        let (snap, health) = (snap.clone(), health.clone());
                        tokio::spawn(async move { probe(&snap, &health, idx, key, reason).await });
                    }
                }
                // A key refused with 401 is retried by a probe each interval, with that key.
                let interval = ch.breaker.probe.map_or(Duration::MAX, |p| p.interval);
                if let Some(cred) =
                    health
                        .pools
                        .claim_credential_probe(&ch.name, &ch.credentials, interval)
                {
                    let (snap, health) = (snap.clone(), health.clone());
                    tokio::spawn(async move { probe_credential(&snap, &health, idx, cred).await });
                }
            }
        }
    })
}

/// The smallest real completion: one user word, one output token.
fn probe_request(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        messages: vec![Message::new(Role::User, "ping")],
        stream: false,
        stream_include_usage: false,
        max_tokens: Some((MaxTokensField::MaxTokens, 1)),
        temperature: None,
        top_p: None,
        stop: None,
        tools: Vec::new(),
        tool_choice: None,
        origin: crate::protocol::Protocol::OpenAiChat,
        raw: None,
        extra: Map::new(),
        hops: 0,
        response_format: None,
    }
}

/// Probes one disabled credential (a 1-token completion on the channel's first model, or
/// `GET /models`); success re-enables it.
async fn probe_credential(snap: &Snapshot, health: &Health, idx: usize, cred: usize) {
    let Some(ch) = snap.channels.get(idx) else {
        return;
    };
    let Some((label, _)) = ch.credentials.get(cred) else {
        return;
    };
    let route = snap
        .models
        .iter()
        .find_map(|(name, routes)| routes.iter().find(|r| r.channel == idx).map(|r| (name, r)));
    let ok = match (ch.breaker.probe.map(|p| p.kind), route) {
        (Some(ProbeKind::Models), _) => {
            let call = ch.upstream.models(Some(cred));
            matches!(tokio::time::timeout(ch.timeout, call).await, Ok(Ok(())))
        }
        (_, Some((model, r))) => {
            let req = probe_request(model);
            let call = ch
                .upstream
                .chat(&req, &r.upstream_model, Via::bare(Some(cred)));
            matches!(tokio::time::timeout(ch.timeout, call).await, Ok(Ok(_)))
        }
        (_, None) => false,
    };
    tracing::info!(
        channel = &*ch.name,
        credential = &**label,
        ok,
        "credential probe"
    );
    if ok {
        health.pools.enable(&ch.name, label);
    }
}

/// Holds a probe claim; gives it back unjudged if the probe ends early (or its task panics).
struct Claim<'a> {
    health: &'a Health,
    key: Key,
    judged: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.judged {
            self.health.release_probe(&self.key);
        }
    }
}

async fn probe(snap: &Snapshot, health: &Health, idx: usize, key: Key, reason: ProbeReason) {
    let mut claim = Claim {
        health,
        key: key.clone(),
        judged: false,
    };
    let Some(ch) = snap.channels.get(idx) else {
        return;
    };
    // The model to probe: the key's own (per-model breakers), else the channel's first.
    let route = snap.models.iter().find_map(|(name, routes)| {
        let r = routes.iter().find(|r| r.channel == idx)?;
        key.model
            .as_deref()
            .is_none_or(|m| m == &**name)
            .then(|| (name.clone(), r.upstream_model.clone()))
    });
    let Some((model, upstream_model)) = route else {
        return; // the channel no longer serves that model: nothing to probe
    };
    // A usable key, like any attempt: a refused or cooling key says nothing about the channel.
    let Ok(reservation) = health
        .pools
        .reserve(&ch.name, &ch.credentials, &model, &[], 1)
    else {
        return;
    };
    let cred = reservation.as_ref().map(|r| r.index);
    let kind = ch.breaker.probe.map_or(ProbeKind::Completion, |p| p.kind);
    let started = Instant::now();
    let result = match kind {
        ProbeKind::Completion => {
            let req = probe_request(&model);
            let call = ch.upstream.chat(&req, &upstream_model, Via::bare(cred));
            tokio::time::timeout(ch.timeout, call)
                .await
                .map(|r| r.map(|_| ()))
        }
        ProbeKind::Models => tokio::time::timeout(ch.timeout, ch.upstream.models(cred)).await,
    };
    let latency = started.elapsed();
    let ok = match result {
        Ok(Ok(())) => true,
        Ok(Err(UpstreamError::Status {
            status: status @ (401 | 403 | 429),
            retry_after,
            ..
        })) if reservation.is_some() => {
            // The key's problem, not the channel's: judge the key, leave the circuit as is.
            if let Some(r) = &reservation {
                let v = match status {
                    401 => CredVerdict::Refused,
                    403 => CredVerdict::ForbiddenForModel,
                    _ => CredVerdict::RateLimited { retry_after },
                };
                health.judge_credential(r, &model, v, ch.credential_cooldown);
            }
            return;
        }
        _ => false,
    };
    tracing::info!(
        channel = &*ch.name,
        model = &*model,
        reason = ?reason,
        ok,
        latency_ms = latency.as_millis() as u64,
        "probe"
    );
    claim.judged = true;
    health.probe_result(&key, &snap.health, &ch.breaker, ok, latency);
}
