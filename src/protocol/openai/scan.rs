//! A same-protocol stream's events read without building them: a borrowed, typed look at one
//! Chat Completions chunk for what the gateway must know (content seen, finish reasons, the
//! first id and model), while the event's own bytes go on to the client as they came. Anything
//! it does not model — usage, an error, tool calls, refusals, any other delta field — makes it
//! say "read it whole" (`None`), and the full reader gives the exact canonical chunk.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::protocol::{ChunkChoice, Delta, StreamChunk};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    delta: Option<ChoiceDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

/// The delta fields the scan models; any other field (even null) is an error, so the chunk is
/// read whole.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChoiceDelta<'a> {
    /// Allowed, not kept: a role is no output.
    #[serde(rename = "role", default)]
    _role: Option<IgnoredAny>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    /// OpenAI sends `"refusal": null` on a first delta; a refusal's text is read whole.
    #[serde(default)]
    refusal: Option<IgnoredAny>,
}

/// What the gateway needs of one chunk, or `None` when it must be read whole. `head`: the
/// stream's first chunk, whose id and model are kept (telemetry reads them once).
pub fn scan_chunk(data: &str, head: bool) -> Option<Box<StreamChunk>> {
    let c: Chunk = serde_json::from_str(data).ok()?;
    if c.usage.is_some() || c.error.is_some() {
        return None;
    }
    let mut choices = Vec::new();
    for (i, ch) in c.choices.unwrap_or_default().into_iter().enumerate() {
        let mut delta = Delta::default();
        if let Some(d) = ch.delta {
            if d.refusal.is_some() {
                return None;
            }
            // Only output counts: an empty string is no content, as the full reader's test says.
            delta.content = d.content.filter(|t| !t.is_empty()).map(Cow::into_owned);
            delta.reasoning = d
                .reasoning_content
                .filter(|t| !t.is_empty())
                .map(Cow::into_owned);
        }
        choices.push(ChunkChoice {
            index: ch.index.unwrap_or(i as u32),
            delta,
            finish_reason: ch.finish_reason.map(Cow::into_owned),
            extra: Default::default(),
        });
    }
    let keep = |s: Option<Cow<str>>| s.filter(|_| head).map(Cow::into_owned);
    Some(Box::new(StreamChunk {
        id: keep(c.id),
        model: keep(c.model),
        created: None,
        choices,
        usage: None,
        extra: Default::default(),
        raw: None,
    }))
}
