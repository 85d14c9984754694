//! What a request carries across protocols: the history only its own provider accepts, the
//! answer's shape, and what translating it for another protocol's upstream loses (named by
//! field for `x-switchyard-translation` and the log, never by value).

use serde_json::Value;

use super::{ChatRequest, Content, Part, Protocol, ResponseFormat, Tool};

impl ResponseFormat {
    /// OpenAI's `response_format` (also what a Responses request's `text.format` became).
    pub fn from_openai(v: &Value) -> Option<ResponseFormat> {
        match v["type"].as_str()? {
            "json_object" => Some(ResponseFormat::Json),
            "json_schema" => {
                let s = &v["json_schema"];
                Some(ResponseFormat::Schema {
                    name: s["name"].as_str().map(str::to_string),
                    schema: s.get("schema").cloned().unwrap_or(Value::Null),
                    strict: s["strict"].as_bool(),
                })
            }
            _ => None,
        }
    }
}

/// The items of every `list[].items[]` in a JSON body (`messages[].content[]`...).
fn nested<'a>(raw: &'a Value, list: &str, items: &'a str) -> impl Iterator<Item = &'a Value> {
    raw[list]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(move |m| m[items].as_array().into_iter().flatten())
}

impl ChatRequest {
    /// History only the client's own provider accepts: signed thinking (Anthropic), thought
    /// signatures (Gemini). An empty signature is one this gateway made from another
    /// provider's reasoning, and does not count.
    pub fn has_provider_only_history(&self) -> bool {
        let Some(raw) = &self.raw else {
            return false;
        };
        // Looked for where each protocol puts them, not by key anywhere: a tool argument may
        // well be called `signature`.
        let signed = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
        match self.origin {
            Protocol::AnthropicMessages => nested(raw, "messages", "content").any(|b| {
                (b["type"] == "thinking" && signed(&b["signature"]))
                    || b["type"] == "redacted_thinking"
            }),
            Protocol::Gemini => {
                nested(raw, "contents", "parts").any(|p| signed(&p["thoughtSignature"]))
            }
            _ => false,
        }
    }

    /// Anthropic prompt-caching marks, where Anthropic reads them: system blocks, message
    /// blocks, tools. Found structurally, not by re-serialising the whole body.
    fn has_cache_control(&self) -> bool {
        let Some(raw) = self
            .raw
            .as_ref()
            .filter(|_| self.origin == Protocol::AnthropicMessages)
        else {
            return false;
        };
        let marked = |b: &Value| b.get("cache_control").is_some();
        raw["system"].as_array().into_iter().flatten().any(marked)
            || raw["tools"].as_array().into_iter().flatten().any(marked)
            || nested(raw, "messages", "content").any(marked)
    }

    /// Some message says "JSON": OpenAI refuses its JSON mode (`json_object`) without it.
    pub fn mentions_json(&self) -> bool {
        self.messages.iter().any(|m| {
            m.content
                .as_ref()
                .is_some_and(|c| c.text().to_ascii_lowercase().contains("json"))
        })
    }

    /// The shape the answer must take, whichever protocol the client asked in.
    pub fn response_format(&self) -> Option<ResponseFormat> {
        match &self.response_format {
            Some(f) => Some(f.clone()),
            None if self.origin.speaks_chat() => self
                .extra
                .get("response_format")
                .and_then(ResponseFormat::from_openai),
            None => None,
        }
    }

    /// What translating this request to `target` cannot carry: empty when nothing is lost.
    /// Named by field, never by value (it goes into a header and the log).
    pub fn translation_losses(&self, target: Protocol) -> Vec<String> {
        if self.origin == target || (target == Protocol::OpenAiChat && self.origin.speaks_chat()) {
            return Vec::new();
        }
        // The client's own protocol fields stay behind (OpenAI's go only to OpenAI), but for a
        // response format the target carries.
        let carried = match self.response_format() {
            Some(ResponseFormat::Schema { .. }) => true,
            Some(ResponseFormat::Json) => match target {
                Protocol::AnthropicMessages => false,
                Protocol::OpenAiChat | Protocol::OpenAiResponses => self.mentions_json(),
                Protocol::Gemini => true,
            },
            None => false,
        };
        let mut lost: Vec<String> = self
            .extra
            .keys()
            .filter(|k| !(carried && *k == "response_format"))
            .cloned()
            .collect();
        if !carried && self.response_format.is_some() {
            lost.push("response_format".into());
        }
        if self.tools.iter().any(|t| matches!(t, Tool::Other(_))) {
            lost.push("non-function tools".into());
        }
        let parts = self.messages.iter().any(|m| {
            matches!(&m.content, Some(Content::Parts(ps)) if ps.iter().any(|p| matches!(p, Part::Other(_))))
        });
        if parts {
            lost.push("content parts of other types".into());
        }
        if self.has_cache_control() {
            lost.push("cache_control".into());
        }
        if self.has_provider_only_history() {
            lost.push("thinking signatures".into());
        }
        if target != Protocol::OpenAiChat && self.messages.iter().any(|m| m.reasoning.is_some()) {
            lost.push("reasoning history".into());
        }
        // Per-message fields of the client's protocol (OpenRouter's `reasoning_details`...).
        let mut fields: Vec<&str> = self
            .messages
            .iter()
            .flat_map(|m| m.extra.keys().map(String::as_str))
            .collect();
        fields.sort_unstable();
        fields.dedup();
        lost.extend(fields.into_iter().map(|f| format!("messages[].{f}")));
        lost
    }
}

/// Alternating turns, as Anthropic's Messages and Bedrock's Converse want them: the blocks of
/// consecutive messages of one role merged into one turn, messages with no blocks left out.
#[derive(Debug, Default)]
pub struct Turns(pub Vec<(&'static str, Vec<Value>)>);

impl Turns {
    pub fn push(&mut self, role: &'static str, blocks: Vec<Value>) {
        if blocks.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => self.0.push((role, blocks)),
        }
    }
}
