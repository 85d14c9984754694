//! Canonical stream chunks → the client's `data:` lines.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use super::write::{Fields, Seq, UsageView, write_extra, write_head};
use crate::protocol::{ChunkChoice, Delta, StreamChunk, ToolCallDelta};

/// Canonical chunk → the JSON of one client `data:` line.
pub struct ChunkBody<'a> {
    pub chunk: &'a StreamChunk,
    /// Write `"usage": null` on chunks without usage, as OpenAI does for a client that asked
    /// for `stream_options.include_usage`.
    pub usage_null: bool,
}

impl Serialize for ChunkBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.chunk;
        let mut m = s.serialize_map(None)?;
        write_head(&mut m, &c.id, "chat.completion.chunk", c.created, &c.model)?;
        struct ChunkChoiceView<'a>(&'a ChunkChoice);
        impl Serialize for ChunkChoiceView<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let c = self.0;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("index", &c.index)?;
                m.serialize_entry("delta", &DeltaView(&c.delta))?;
                m.serialize_entry("finish_reason", &c.finish_reason)?;
                write_extra(&mut m, &c.extra)?;
                m.end()
            }
        }
        m.serialize_entry("choices", &Seq(&c.choices, ChunkChoiceView))?;
        match &c.usage {
            Some(u) => m.serialize_entry("usage", &UsageView(u))?,
            None if self.usage_null => m.serialize_entry("usage", &Value::Null)?,
            None => {}
        }
        write_extra(&mut m, &c.extra)?;
        m.end()
    }
}

struct ToolCallDeltaView<'a>(&'a ToolCallDelta);
impl Serialize for ToolCallDeltaView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("index", &t.index)?;
        if let Some(id) = &t.id {
            m.serialize_entry("id", id)?;
        }
        if let Some(k) = &t.kind {
            m.serialize_entry("type", k)?;
        }
        if t.function {
            let f = Fields([
                ("name", t.name.as_deref()),
                ("arguments", t.arguments.as_deref()),
            ]);
            m.serialize_entry("function", &f)?;
        }
        write_extra(&mut m, &t.extra)?;
        m.end()
    }
}

struct DeltaView<'a>(&'a Delta);
impl Serialize for DeltaView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut m = s.serialize_map(None)?;
        if let Some(r) = &d.role {
            m.serialize_entry("role", r.as_str())?;
        }
        if let Some(c) = &d.content {
            m.serialize_entry("content", c)?;
        }
        if let Some(r) = &d.reasoning {
            m.serialize_entry("reasoning_content", r)?;
        }
        if !d.tool_calls.is_empty() {
            m.serialize_entry("tool_calls", &Seq(&d.tool_calls, ToolCallDeltaView))?;
        }
        write_extra(&mut m, &d.extra)?;
        m.end()
    }
}
