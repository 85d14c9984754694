//! Writing OpenAI JSON, for an upstream's request and a client's answer alike: `Serialize`
//! views straight from the canonical types (no intermediate JSON tree).

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use crate::protocol::{Content, Message, Part, ToolCall, Usage};

/// Serialises a slice through a per-item view (`Seq(&msgs, MessageView)`).
pub(super) struct Seq<'a, T, V>(pub(super) &'a [T], pub(super) fn(&'a T) -> V);

impl<'a, T, V: Serialize> Serialize for Seq<'a, T, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}

/// A small JSON object of optional string fields, written without building a `Map`.
pub(super) struct Fields<'a, const N: usize>(pub(super) [(&'static str, Option<&'a str>); N]);

impl<const N: usize> Serialize for Fields<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.0 {
            if let Some(v) = v {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// Token counts as a JSON object, written directly (no tree).
struct Counts<const N: usize>([(&'static str, u64); N]);

impl<const N: usize> Serialize for Counts<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(N))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Writes the fields a canonical type does not model, in their original order.
pub(super) fn write_extra<M: SerializeMap>(
    m: &mut M,
    extra: &Map<String, Value>,
) -> Result<(), M::Error> {
    for (k, v) in extra {
        m.serialize_entry(k, v)?;
    }
    Ok(())
}

/// `id`, `object`, `created`, `model`: the head of a completion and of a chunk.
pub(super) fn write_head<M: SerializeMap>(
    m: &mut M,
    id: &Option<String>,
    object: &'static str,
    created: Option<u64>,
    model: &Option<String>,
) -> Result<(), M::Error> {
    if let Some(id) = id {
        m.serialize_entry("id", id)?;
    }
    m.serialize_entry("object", object)?;
    if let Some(c) = created {
        m.serialize_entry("created", &c)?;
    }
    if let Some(model) = model {
        m.serialize_entry("model", model)?;
    }
    Ok(())
}

pub(super) struct MessageView<'a>(pub(super) &'a Message);
impl Serialize for MessageView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let msg = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", msg.role.as_str())?;
        match &msg.content {
            Some(Content::Text(t)) => m.serialize_entry("content", t)?,
            Some(Content::Parts(ps)) => m.serialize_entry("content", &Seq(ps, PartView))?,
            // An assistant turn that only calls tools carries `content: null` on the wire.
            None => m.serialize_entry("content", &Value::Null)?,
        }
        if let Some(n) = &msg.name {
            m.serialize_entry("name", n)?;
        }
        if !msg.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &Seq(&msg.tool_calls, ToolCallView))?;
        }
        if let Some(id) = &msg.tool_call_id {
            m.serialize_entry("tool_call_id", id)?;
        }
        if let Some(r) = &msg.reasoning {
            m.serialize_entry("reasoning_content", r)?;
        }
        write_extra(&mut m, &msg.extra)?;
        m.end()
    }
}

struct PartView<'a>(&'a Part);
impl Serialize for PartView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Part::Text { text, extra } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "text")?;
                m.serialize_entry("text", text)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            Part::Image { url, detail, extra } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "image_url")?;
                let img = Fields([("url", Some(url.as_str())), ("detail", detail.as_deref())]);
                m.serialize_entry("image_url", &img)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            Part::Other(v) => v.serialize(s),
        }
    }
}

struct ToolCallView<'a>(&'a ToolCall);
impl Serialize for ToolCallView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ToolCall::Function {
                id,
                name,
                arguments,
                extra,
            } => {
                let mut m = s.serialize_map(None)?;
                if let Some(id) = id {
                    m.serialize_entry("id", id)?;
                }
                m.serialize_entry("type", "function")?;
                let f = Fields([
                    ("name", Some(name.as_str())),
                    ("arguments", arguments.as_deref()),
                ]);
                m.serialize_entry("function", &f)?;
                write_extra(&mut m, extra)?;
                m.end()
            }
            ToolCall::Other(v) => v.serialize(s),
        }
    }
}

pub(super) struct UsageView<'a>(pub(super) &'a Usage);

impl Serialize for UsageView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Complete whatever the upstream's protocol counted: OpenAI's SDK users sum and read
        // every field (the details as sent, when an OpenAI upstream sent them).
        let u = self.0;
        let (prompt, completion) = (u.input_tokens.unwrap_or(0), u.output_tokens.unwrap_or(0));
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("prompt_tokens", &prompt)?;
        m.serialize_entry("completion_tokens", &completion)?;
        m.serialize_entry("total_tokens", &u.total().unwrap_or(prompt + completion))?;
        if !u.extra.contains_key("prompt_tokens_details") {
            let cached = Counts([("cached_tokens", u.cached_tokens.unwrap_or(0))]);
            m.serialize_entry("prompt_tokens_details", &cached)?;
        }
        if !u.extra.contains_key("completion_tokens_details") {
            let reasoning = Counts([("reasoning_tokens", u.reasoning_tokens.unwrap_or(0))]);
            m.serialize_entry("completion_tokens_details", &reasoning)?;
        }
        write_extra(&mut m, &u.extra)?;
        m.end()
    }
}
