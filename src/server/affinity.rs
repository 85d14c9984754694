//! Session affinity at the edge: which session a request belongs to (`X-Session-ID`, OpenAI's
//! `prompt_cache_key`, or, opted in, a hash of the conversation's start), and what its outcome
//! does to the binding: new, kept, or moved.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName};

use crate::config::{AffinitySettings, Snapshot};
use crate::exec::{OutcomeClass, Report};
use crate::health::Skip;
use crate::protocol::{ChatRequest, Content, Role, Tool};
use crate::state::State;

/// A request's session, hashed: neither the store nor the log ever sees the raw id.
pub struct Session {
    /// The store's key (scoped to the gateway key, so tenants never share a binding).
    pub key: String,
    /// A short hash for the log.
    pub tag: String,
}

/// Longest session id accepted; longer ones are hashed like any other, but refused as ids so
/// a client cannot make the gateway hash megabytes per request.
const MAX_ID: usize = 512;

/// Headers that name a session, in order of preference (made at compile time: a `&str` name
/// is parsed on every lookup).
const SESSION_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-session-id"),
    HeaderName::from_static("x-claude-code-session-id"),
    HeaderName::from_static("session-id"),
];

/// The request's session, if it names one (or implicit affinity is on and it has a first user
/// message).
pub fn session(
    headers: &HeaderMap,
    req: &ChatRequest,
    key_name: &str,
    implicit: bool,
) -> Option<Session> {
    // Ours first, then what coding agents send on their own: Claude Code's, then Codex's.
    let header = SESSION_HEADERS.iter().find_map(|h| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= MAX_ID)
    });
    if let Some(id) = header {
        return Some(hashed(key_name, "header", &[id.as_bytes()]));
    }
    let cache_key = req
        .extra
        .get("prompt_cache_key")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty() && v.len() <= MAX_ID);
    if let Some(id) = cache_key {
        return Some(hashed(key_name, "prompt_cache_key", &[id.as_bytes()]));
    }
    if !implicit {
        return None;
    }
    // The conversation's start: instructions, tools, and the first thing the user said.
    let first_user = req.messages.iter().find(|m| m.role == Role::User)?;
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for m in req
        .messages
        .iter()
        .filter(|m| matches!(m.role, Role::System | Role::Developer))
    {
        parts.push(text(m.content.as_ref()).into_bytes());
    }
    for t in &req.tools {
        parts.push(match t {
            Tool::Function {
                name, parameters, ..
            } => format!(
                "{name}{}",
                parameters
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_default()
            )
            .into_bytes(),
            Tool::Other(v) => v.to_string().into_bytes(),
        });
    }
    parts.push(text(first_user.content.as_ref()).into_bytes());
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    Some(hashed(key_name, "implicit", &refs))
}

fn text(c: Option<&Content>) -> String {
    c.map(Content::text).unwrap_or_default()
}

/// SHA-256 over length-prefixed pieces (so `ab`+`c` and `a`+`bc` differ): stable across
/// processes and versions, which replicas sharing bindings need.
/// The store's key for a response id, scoped to the gateway key like a session.
pub fn response_key(key_name: &str, id: &str) -> String {
    hashed(key_name, "response", &[id.as_bytes()]).key
}

fn hashed(key_name: &str, kind: &str, pieces: &[&[u8]]) -> Session {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in [key_name.as_bytes(), kind.as_bytes()].iter().chain(pieces) {
        ctx.update(&(p.len() as u64).to_le_bytes());
        ctx.update(p);
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(32);
    for b in ctx.finish().as_ref().iter().take(16) {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 15)]));
    }
    Session {
        tag: hex[..12].to_string(),
        key: hex,
    }
}

/// Failures that say the bound channel could not serve (not the client's own mistakes).
fn counts(class: OutcomeClass) -> bool {
    !matches!(
        class,
        OutcomeClass::ClientError | OutcomeClass::Blocked | OutcomeClass::TranslationError
    )
}

/// Applies a request's outcome to its session's binding; returns what happened to it
/// (`new`, `kept`, `moved`), or `None` when the session is (left) unbound.
pub async fn settle(
    state: &State,
    settings: &AffinitySettings,
    snap: &Snapshot,
    session: &Session,
    before: Option<&Arc<str>>,
    report: &Report,
) -> Option<&'static str> {
    let served = report
        .served
        .as_ref()
        .map(|s| s.channel.clone())
        .filter(|name| snap.channels.iter().any(|c| c.name == *name && c.affinity));
    let ttl = settings.ttl;
    let Some(bound) = before else {
        let s = served?;
        return state
            .bind(&session.key, None, &s, ttl)
            .await
            .then_some("new");
    };
    if served.as_ref() == Some(bound) {
        // Served where it is bound: the TTL starts again and the failures are forgotten.
        state.bind(&session.key, Some(bound), bound, ttl).await;
        return Some("kept");
    }
    let failed = report
        .attempts
        .iter()
        .any(|a| a.channel == *bound && a.class.is_some_and(counts));
    let skipped = report
        .attempts
        .iter()
        .find(|a| a.channel == *bound)
        .and_then(|a| a.skip);
    if failed {
        let n = state.bound_failed(&session.key, ttl).await;
        if n < settings.max_failures {
            return Some("kept");
        }
        tracing::info!(
            session = %session.tag,
            channel = &**bound,
            failures = n,
            "bound channel kept failing: binding cleared"
        );
    } else if skipped.is_some_and(|s| !matches!(s, Skip::CircuitOpen | Skip::CredentialsRefused)) {
        // Only briefly unavailable (at its concurrency cap, cooling from a 429, its trial in
        // flight elsewhere): the conversation keeps its channel for the next turn.
        return Some("kept");
    }
    // Failed too often, circuit open, every key refused, or no longer a candidate: the channel
    // that served takes over, unless another request moved the binding meanwhile.
    let Some(s) = served else {
        if failed {
            state.unbind(&session.key).await;
        }
        return None;
    };
    state
        .bind(&session.key, Some(bound), &s, ttl)
        .await
        .then_some("moved")
}
