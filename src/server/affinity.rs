//! Session affinity at the edge: which session a request belongs to (`X-Session-ID`, OpenAI's
//! `prompt_cache_key`, or, opted in, a hash of the conversation's start), and what its outcome
//! does to the binding: new, kept, or moved.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName};

use crate::config::{AffinitySettings, Implicit, Snapshot};
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
    implicit: Implicit,
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
    let cached = || !req.tools.is_empty() || system_tokens(req) > CACHED_PREFIX_TOKENS;
    match implicit {
        Implicit::Off => return None,
        Implicit::Auto if !cached() => return None,
        _ => {}
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

/// The shortest prefix providers cache (Anthropic's and OpenAI's minimum): a shorter system
/// prompt without tools gains nothing from staying on one upstream.
const CACHED_PREFIX_TOKENS: u64 = 1024;

/// The system (and developer) prompt's tokens, estimated as trimming's fast path does.
fn system_tokens(req: &ChatRequest) -> u64 {
    let chars: usize = req
        .messages
        .iter()
        .filter(|m| matches!(m.role, Role::System | Role::Developer))
        .map(|m| m.content.as_ref().map_or(0, Content::text_len))
        .sum();
    (chars as u64).div_ceil(4)
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

/// A binding as stored: the channel, then (after a unit separator) the credential that served,
/// since providers cache prompts per key: a conversation moved to another key of its channel
/// misses its cache. A binding written before credentials were bound is a channel alone.
pub struct Bound<'a> {
    pub channel: &'a str,
    pub credential: Option<&'a str>,
}

const SEP: char = '\u{1f}';

impl<'a> Bound<'a> {
    pub fn parse(stored: &'a str) -> Bound<'a> {
        match stored.split_once(SEP) {
            Some((channel, label)) => Bound {
                channel,
                credential: Some(label).filter(|l| !l.is_empty()),
            },
            None => Bound {
                channel: stored,
                credential: None,
            },
        }
    }

    fn stored(channel: &str, credential: Option<&str>) -> String {
        match credential {
            Some(label) => format!("{channel}{SEP}{label}"),
            None => channel.to_string(),
        }
    }
}

/// The channel that served (if it takes bindings) and the credential its answer came with.
fn served<'r>(snap: &Snapshot, report: &'r Report) -> Option<(&'r Arc<str>, Option<&'r str>)> {
    let s = report.served.as_ref()?;
    if !snap
        .channels
        .iter()
        .any(|c| c.name == s.channel && c.affinity)
    {
        return None;
    }
    let credential = report
        .attempts
        .iter()
        .rev()
        .find(|a| a.channel == s.channel && a.class.is_none() && a.skip.is_none())
        .and_then(|a| a.credential.as_deref());
    Some((&s.channel, credential))
}

/// Applies a request's outcome to its session's binding; returns what happened to it
/// (`new`, `kept`, `moved`), or `None` when the session is (left) unbound. The binding names
/// the credential that served too; a turn served by another key of the bound channel (its
/// key cooling or at its limits) moves the binding there.
pub async fn settle(
    state: &State,
    settings: &AffinitySettings,
    snap: &Snapshot,
    session: &Session,
    before: Option<&Arc<str>>,
    report: &Report,
) -> Option<&'static str> {
    let served = served(snap, report);
    let ttl = settings.ttl;
    let Some(before) = before else {
        let (ch, cred) = served?;
        return state
            .bind(&session.key, None, &Bound::stored(ch, cred), ttl)
            .await
            .then_some("new");
    };
    let bound = Bound::parse(before);
    if let Some((ch, cred)) = served.filter(|(ch, _)| ***ch == *bound.channel) {
        // Served where it is bound: the TTL starts again and the failures are forgotten.
        let now = Bound::stored(ch, cred.or(bound.credential));
        state.bind(&session.key, Some(before), &now, ttl).await;
        let other_key = bound.credential.is_some() && cred.is_some() && cred != bound.credential;
        return Some(if other_key { "moved" } else { "kept" });
    }
    let failed = report
        .attempts
        .iter()
        .any(|a| *a.channel == *bound.channel && a.class.is_some_and(counts));
    let skipped = report
        .attempts
        .iter()
        .find(|a| *a.channel == *bound.channel)
        .and_then(|a| a.skip);
    if failed {
        let n = state.bound_failed(&session.key, ttl).await;
        if n < settings.max_failures {
            return Some("kept");
        }
        tracing::info!(
            session = %session.tag,
            channel = bound.channel,
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
    let Some((ch, cred)) = served else {
        if failed {
            state.unbind(&session.key).await;
        }
        return None;
    };
    state
        .bind(&session.key, Some(before), &Bound::stored(ch, cred), ttl)
        .await
        .then_some("moved")
}
