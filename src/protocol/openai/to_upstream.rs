//! A canonical request → an upstream's body: chat completions and embeddings.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use super::write::{MessageView, Seq, write_extra};
use crate::protocol::{ChatRequest, EmbeddingsRequest, MaxTokensField, ResponseFormat, Stop, Tool};

/// Canonical request → upstream body, written directly (no intermediate JSON tree).
pub struct RequestBody<'a> {
    pub req: &'a ChatRequest,
    /// The model name the upstream knows.
    pub model: &'a str,
    /// Ask the upstream for a usage chunk even when the client did not (for the request log).
    pub force_usage: bool,
}

impl Serialize for RequestBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.req;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("messages", &Seq(&r.messages, MessageView))?;
        if r.stream {
            m.serialize_entry("stream", &true)?;
        }
        if let Some((field, n)) = r.max_tokens {
            let key = match field {
                MaxTokensField::MaxTokens => "max_tokens",
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            };
            m.serialize_entry(key, &n)?;
        }
        if let Some(t) = &r.temperature {
            m.serialize_entry("temperature", t)?;
        }
        if let Some(t) = &r.top_p {
            m.serialize_entry("top_p", t)?;
        }
        match &r.stop {
            Some(Stop::One(s)) => m.serialize_entry("stop", s)?,
            Some(Stop::Many(v)) => m.serialize_entry("stop", v)?,
            None => {}
        }
        if !r.tools.is_empty() {
            m.serialize_entry("tools", &Seq(&r.tools, ToolView))?;
        }
        if let Some(tc) = &r.tool_choice {
            m.serialize_entry("tool_choice", tc)?;
        }
        // Another protocol's client asked for JSON (an OpenAI client's own goes with `extra`).
        match &r.response_format {
            // OpenAI refuses its JSON mode unless a message asks for JSON: else it stays behind.
            Some(ResponseFormat::Json) if r.mentions_json() => {
                m.serialize_entry("response_format", &json!({"type": "json_object"}))?
            }
            Some(ResponseFormat::Schema {
                name,
                schema,
                strict,
            }) => {
                let mut s =
                    json!({"name": name.as_deref().unwrap_or("response"), "schema": schema});
                if let Some(strict) = strict {
                    s["strict"] = json!(strict);
                }
                m.serialize_entry(
                    "response_format",
                    &json!({"type": "json_schema", "json_schema": s}),
                )?
            }
            Some(ResponseFormat::Json) | None => {}
        }
        let want_usage = r.stream && (self.force_usage || r.stream_include_usage);
        let mut wrote_options = false;
        // Another protocol's own fields (Anthropic's metadata, top_k...) mean nothing here; a
        // Responses request's were made Chat Completions fields when it was read.
        let same = r.origin.speaks_chat();
        for (k, v) in r.extra.iter().filter(|_| same) {
            if k == "stream_options" {
                if !r.stream {
                    continue; // OpenAI rejects stream_options without stream
                }
                let mut o = v.as_object().cloned().unwrap_or_default();
                if want_usage {
                    o.insert("include_usage".into(), Value::Bool(true));
                }
                m.serialize_entry(k, &o)?;
                wrote_options = true;
            } else {
                m.serialize_entry(k, v)?;
            }
        }
        if want_usage && !wrote_options {
            m.serialize_entry(
                "stream_options",
                &serde_json::json!({ "include_usage": true }),
            )?;
        }
        m.end()
    }
}

struct ToolView<'a>(&'a Tool);
impl Serialize for ToolView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Tool::Function {
                name,
                description,
                parameters,
                extra,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("type", "function")?;
                let mut f = Map::new();
                f.insert("name".into(), Value::String(name.clone()));
                if let Some(d) = description {
                    f.insert("description".into(), Value::String(d.clone()));
                }
                if let Some(p) = parameters {
                    f.insert("parameters".into(), p.clone());
                }
                let mut rest = extra.clone();
                if let Some(Value::Object(more)) = rest.shift_remove("function") {
                    f.extend(more);
                }
                m.serialize_entry("function", &f)?;
                write_extra(&mut m, &rest)?;
                m.end()
            }
            Tool::Other(v) => v.serialize(s),
        }
    }
}

pub struct EmbeddingsBody<'a> {
    pub req: &'a EmbeddingsRequest,
    pub model: &'a str,
}

impl Serialize for EmbeddingsBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("input", &self.req.input)?;
        write_extra(&mut m, &self.req.extra)?;
        m.end()
    }
}
