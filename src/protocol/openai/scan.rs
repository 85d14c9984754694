//! Same-protocol answers read without building them: a borrowed, typed look at a Chat
//! Completions chunk or whole answer for what the gateway must know (content seen, finish
//! reasons, usage, the id and model), while the upstream's own bytes go on to the client as they
//! came. Anything a scan does not model — for a chunk: an error, tool calls, refusals, any
//! other delta field; for an answer: tool calls, content parts — makes it say "read it whole"
//! (`None`), and the full reader gives the exact canonical form (and its errors).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::protocol::{
    ChatResponse, Choice as AnswerChoice, ChunkChoice, Content, Delta, Message, Role, StreamChunk,
    Usage,
};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    choices: Option<Choices>,
    #[serde(default)]
    usage: Option<Counts>,
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

impl Choice<'_> {
    /// The canonical choice (the `i`th), or `None` when the delta holds what only the full
    /// reader models (a refusal's text).
    fn canonical(self, i: usize) -> Option<ChunkChoice> {
        let mut delta = Delta::default();
        if let Some(d) = self.delta {
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
        Some(ChunkChoice {
            index: self.index.unwrap_or(i as u32),
            delta,
            finish_reason: self.finish_reason.map(Cow::into_owned),
            extra: Default::default(),
        })
    }
}

/// A chunk's choices read straight into canonical ones, with no list of borrowed ones between
/// (one allocation an event less); a choice the scan cannot model fails the whole scan.
struct Choices(Vec<ChunkChoice>);

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each;
        impl<'de> serde::de::Visitor<'de> for Each {
            type Value = Choices;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Choices, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(1));
                while let Some(ch) = seq.next_element::<Choice<'de>>()? {
                    let i = out.len();
                    let c = ch.canonical(i);
                    out.push(c.ok_or_else(|| serde::de::Error::custom("read whole"))?);
                }
                Ok(Choices(out))
            }
        }
        d.deserialize_seq(Each)
    }
}

/// What the gateway needs of one chunk, or `None` when it must be read whole. `head`: the
/// stream's first chunk, whose id and model are kept (telemetry reads them once).
pub fn scan_chunk(data: &str, head: bool) -> Option<Box<StreamChunk>> {
    let c: Chunk = serde_json::from_str(data).ok()?;
    if c.error.is_some() {
        return None;
    }
    let choices = c.choices.map(|Choices(v)| v).unwrap_or_default();
    let keep = |s: Option<Cow<str>>| s.filter(|_| head).map(Cow::into_owned);
    Some(Box::new(StreamChunk {
        id: keep(c.id),
        model: keep(c.model),
        created: None,
        choices,
        usage: c.usage.map(Counts::usage),
        extra: Default::default(),
        raw: None,
    }))
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<u64>,
    #[serde(borrow)]
    choices: Vec<AnswerChoiceScan<'a>>,
    #[serde(default)]
    usage: Option<Counts>,
}

#[derive(Deserialize)]
struct AnswerChoiceScan<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow)]
    message: Said<'a>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

/// An assistant message of plain text: tool calls (even an empty list) are read whole.
#[derive(Deserialize)]
struct Said<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<IgnoredAny>,
    #[serde(default)]
    function_call: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Counts {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Detail>,
    #[serde(default)]
    completion_tokens_details: Option<Detail>,
}

impl Counts {
    /// The counts the gateway reads; the details stay in the upstream's bytes, not in `extra`.
    fn usage(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            total_tokens: self.total_tokens,
            cached_tokens: self.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens),
            cache_write_tokens: None,
            extra: Default::default(),
        }
    }
}

#[derive(Deserialize)]
struct Detail {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// What the gateway needs of a whole answer (its text for counting and tracing, finish
/// reasons, usage), or `None` when it must be read whole.
pub fn scan_answer(body: &[u8]) -> Option<ChatResponse> {
    let a: Answer = serde_json::from_slice(body).ok()?;
    let mut choices = Vec::with_capacity(a.choices.len());
    for (i, c) in a.choices.into_iter().enumerate() {
        let m = c.message;
        if m.tool_calls.is_some() || m.function_call.is_some() {
            return None;
        }
        choices.push(AnswerChoice {
            index: c.index.unwrap_or(i as u32),
            message: Message {
                role: Role::Assistant,
                content: m.content.map(|t| Content::Text(t.into_owned())),
                name: None,
                tool_calls: Vec::new(),
                tool_call_id: None,
                reasoning: m.reasoning_content.map(Cow::into_owned),
                extra: Default::default(),
                source: None,
            },
            finish_reason: c.finish_reason.map(Cow::into_owned),
            extra: Default::default(),
        });
    }
    let usage = a.usage.map(Counts::usage);
    Some(ChatResponse {
        id: a.id.map(Cow::into_owned),
        model: a.model.map(Cow::into_owned),
        created: a.created,
        choices,
        usage,
        extra: Default::default(),
        raw: None,
        as_sent: None,
    })
}
