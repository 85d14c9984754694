//! An exact entry's key: SHA-256 over the scope, the chain of models as resolved, and the
//! canonical request without what cannot change the answer (the stream flag and its options,
//! `user`, `metadata`). Tools, the system prompt and every sampling field are in it. The
//! request's fields are printed (`Debug`) into one buffer, hashed once; the format is this
//! build's, so the build's version is hashed too: another build never reads an entry it might
//! print differently.

use std::fmt::Write as _;

use serde_json::Value;

use crate::protocol::ChatRequest;

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
}

impl Bypass {
    pub fn as_str(self) -> &'static str {
        match self {
            Bypass::Choices => "n_above_1",
            Bypass::Sampled => "sampled_without_seed",
            Bypass::Kept => "kept_response",
            Bypass::NoStore => "no_store",
        }
    }
}

/// Why `req` is not cached, if it is not.
pub fn refusal(req: &ChatRequest, deterministic_only: bool) -> Option<Bypass> {
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

/// The key of `req` for readers of `scope`, served by `models` (the chain as resolved).
pub fn key<'m>(scope: &str, models: impl IntoIterator<Item = &'m str>, req: &ChatRequest) -> Key {
    let mut h = Hashing(String::with_capacity(1024));
    h.field("build", &env!("CARGO_PKG_VERSION"));
    h.field("scope", &scope);
    for m in models {
        h.field("model", &m);
    }
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
            h.field("max_tokens", &req.max_tokens);
            h.field("temperature", &req.temperature);
            h.field("top_p", &req.top_p);
            h.field("stop", &req.stop);
            h.field("tools", &req.tools);
            h.field("tool_choice", &req.tool_choice);
            h.field("response_format", &req.response_format);
            for (k, v) in req
                .extra
                .iter()
                .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
            {
                h.field(k, v);
            }
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, h.0.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}
