//! An exact entry's key: SHA-256 over the scope, the chain of models as resolved, and the
//! canonical request without what cannot change the answer (the stream flag and its options,
//! `user`, `metadata`). Tools, the system prompt and every sampling field are in it. The
//! request's fields are printed (`Debug`) into one buffer, hashed once; the format is this
//! build's, so the build's version is hashed too: another build never reads an entry it might
//! print differently.

use std::fmt::Write as _;

use serde_json::Value;

use crate::protocol::{ChatRequest, Content, Part, Role};

/// An entry's key.
pub type Key = [u8; 32];

/// Fields of a request's body that cannot change its answer.
const IGNORED: [&str; 5] = ["stream", "stream_options", "user", "metadata", "model"];

/// Why a request is neither looked up nor stored (`x-switchyard-cache: bypass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    /// More than one answer asked for (`n > 1`).
    Choices,
    /// `temperature > 0` without a `seed` while `deterministic_only` is set.
    Sampled,
    /// A Responses request the upstream keeps (`store: true`) or that continues one.
    Kept,
    /// The client said `Cache-Control: no-store`.
    NoStore,
    /// Images, audio or files larger than `max_entry_bytes` in all.
    LargeMedia,
}

impl Bypass {
    pub fn as_str(self) -> &'static str {
        match self {
            Bypass::Choices => "n_above_1",
            Bypass::Sampled => "sampled_without_seed",
            Bypass::Kept => "kept_response",
            Bypass::NoStore => "no_store",
            Bypass::LargeMedia => "large_media",
        }
    }
}

/// The bytes of a request's images, audio and files, as sent (a part the canonical form does
/// not model is measured only when there is one).
fn media_bytes(req: &ChatRequest) -> u64 {
    let part = |p: &Part| match p {
        Part::Text { .. } => 0,
        Part::Image { url, .. } => url.len(),
        Part::Other(v) => serde_json::to_vec(v).map_or(0, |b| b.len()),
    };
    req.messages
        .iter()
        .filter_map(|m| match &m.content {
            Some(Content::Parts(ps)) => Some(ps.iter().map(part).sum::<usize>()),
            _ => None,
        })
        .sum::<usize>() as u64
}

/// Why `req` is not cached, if it is not.
pub fn refusal(req: &ChatRequest, deterministic_only: bool, max_media: u64) -> Option<Bypass> {
    if media_bytes(req) > max_media {
        return Some(Bypass::LargeMedia);
    }
    if req
        .extra
        .get("n")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        return Some(Bypass::Choices);
    }
    let sampled = req
        .temperature
        .as_ref()
        .and_then(serde_json::Number::as_f64)
        .is_some_and(|t| t > 0.0);
    if deterministic_only && sampled && !req.extra.contains_key("seed") {
        return Some(Bypass::Sampled);
    }
    let kept = req.extra.get("store").and_then(Value::as_bool) == Some(true)
        && req.origin == crate::protocol::Protocol::OpenAiResponses;
    if kept || req.extra.contains_key("previous_response_id") {
        return Some(Bypass::Kept);
    }
    None
}

/// The key's text, written whole and hashed once: hashing each printed fragment as it came
/// cost more than the hash itself.
struct Hashing(String);

impl std::fmt::Write for Hashing {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.push_str(s);
        Ok(())
    }
}

impl Hashing {
    /// One field, length-delimited by a separator no `Debug` output holds.
    fn field(&mut self, name: &str, v: &dyn std::fmt::Debug) {
        let _ = write!(self, "\u{0}{name}\u{0}{v:?}");
    }
}

/// A key's text starts with the build, what it is for, the scope and the chain.
fn head<'m>(what: &str, scope: &str, models: impl IntoIterator<Item = &'m str>) -> Hashing {
    let mut h = Hashing(String::with_capacity(1024));
    h.field("build", &env!("CARGO_PKG_VERSION"));
    h.field("for", &what);
    h.field("scope", &scope);
    for m in models {
        h.field("model", &m);
    }
    h
}

impl Hashing {
    fn digest(self) -> Key {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.0.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        out
    }

    /// The canonical fields other than the messages, and the extra ones that can change the
    /// answer.
    fn settings(&mut self, req: &ChatRequest) {
        self.field("max_tokens", &req.max_tokens);
        self.field("temperature", &req.temperature);
        self.field("top_p", &req.top_p);
        self.field("stop", &req.stop);
        self.field("tools", &req.tools);
        self.field("tool_choice", &req.tool_choice);
        self.field("response_format", &req.response_format);
        for (k, v) in req
            .extra
            .iter()
            .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
        {
            self.field(k, v);
        }
    }
}

/// Semantic mode's bucket for `req` and its question: the key of everything but the last user
/// message's text (scope, chain, system prompt, tools, sampling fields, earlier turns), and that
/// text. `None` when the request is not one question in text: its last message is not a user's
/// text alone (an image or a file changes what is asked), or it has earlier turns and
/// `multi_turn` is off.
pub fn bucket<'m>(
    scope: &str,
    models: impl IntoIterator<Item = &'m str>,
    req: &ChatRequest,
    multi_turn: bool,
) -> Option<(Key, String)> {
    let (last, before) = req.messages.split_last()?;
    if last.role != Role::User || !last.tool_calls.is_empty() {
        return None;
    }
    let text_only = match last.content.as_ref()? {
        Content::Text(_) => true,
        Content::Parts(ps) => ps.iter().all(|p| matches!(p, Part::Text { .. })),
    };
    let question = last.content.as_ref()?.text();
    if !text_only || question.trim().is_empty() {
        return None;
    }
    let earlier_turns = before
        .iter()
        .any(|m| !matches!(m.role, Role::System | Role::Developer));
    if earlier_turns && !multi_turn {
        return None;
    }
    let mut h = head("semantic", scope, models);
    h.field("origin", &req.origin);
    h.field("before", &before);
    h.settings(req);
    Some((h.digest(), question))
}

/// The key of `req` for readers of `scope`, served by `models` (the chain as resolved).
pub fn key<'m>(scope: &str, models: impl IntoIterator<Item = &'m str>, req: &ChatRequest) -> Key {
    let mut h = head("exact", scope, models);
    h.field("origin", &req.origin);
    match &req.raw {
        // A body kept as sent (Anthropic, Gemini) holds what the canonical form does not
        // model: it is the request.
        Some(Value::Object(body)) => {
            for (k, v) in body.iter().filter(|(k, _)| !IGNORED.contains(&k.as_str())) {
                h.field(k, v);
            }
        }
        _ => {
            h.field("messages", &req.messages);
            h.settings(req);
        }
    }
    h.digest()
}
