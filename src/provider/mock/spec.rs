//! What a mock answers: its text, timings and tool call, the faults it plays, and the
//! behaviour each request gets.

use std::time::Duration;

use serde::Deserialize;

use crate::protocol::{ChatRequest, Role};

/// How a mock channel or server answers.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MockSpec {
    /// The reply text, split into `chunks` pieces when streamed.
    pub text: String,
    /// Time to the first token (and to the whole answer, plus chunk times, when not streamed).
    pub ttft_ms: u64,
    /// Gap between two streamed chunks.
    pub chunk_ms: u64,
    pub chunks: u32,
    /// Length of the deterministic embedding vectors.
    pub embedding_dims: usize,
    /// Answer with this tool call instead of text; its arguments are streamed in `chunks`.
    pub tool_call: Option<MockToolCall>,
    /// With `tool_call`: a conversation with a tool result after its last assistant turn gets
    /// `text` instead, so an agent's round trip (call, result, answer) ends.
    pub answer_tool_results: bool,
    /// Reasoning before the answer (OpenAI `reasoning_content`, Anthropic thinking, Gemini
    /// thought), streamed as one chunk.
    pub reasoning: Option<String>,
    /// Applied to every request that the script does not cover.
    pub fault: Option<Fault>,
    /// Applied to the 1st, 2nd... request this mock sees; then `fault` (or a normal answer).
    pub script: Vec<Fault>,
    /// Standalone server only: a fault for requests bearing this API key (wins over the rest).
    pub per_key: std::collections::HashMap<String, Fault>,
    /// A fault for requests naming this (upstream) model.
    pub per_model: std::collections::HashMap<String, Fault>,
    /// Standalone server only: what its token-counting endpoints answer (else the prompt as
    /// its usage counts it).
    pub count_tokens: Option<u64>,
    /// Standalone server only: what it refuses (400), as a stricter provider would.
    pub refuse: Option<Refuse>,
    /// Standalone server only: a simulated prompt cache per caller key, reported as cached
    /// prompt tokens in the usage.
    pub prompt_cache: bool,
}

/// What a mock refuses, as an OpenAI-compatible provider that takes less than OpenAI does:
/// request fields, fields of a message, tool choices, response formats, tool call ids that
/// are not 9 letters and digits (Mistral), a request without some header.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Refuse {
    pub fields: Vec<String>,
    pub message_fields: Vec<String>,
    pub tool_choice: Vec<String>,
    pub response_format: Vec<String>,
    pub tool_call_ids_alnum9: bool,
    pub require_headers: Vec<String>,
}

impl Refuse {
    /// Why `body` (with these `headers`) is refused, if it is.
    pub fn why(&self, body: &serde_json::Value, headers: &axum::http::HeaderMap) -> Option<String> {
        if let Some(f) = self.fields.iter().find(|f| body.get(f.as_str()).is_some()) {
            return Some(format!("{f}: extra inputs are not permitted"));
        }
        if let Some(h) = self
            .require_headers
            .iter()
            .find(|h| !headers.contains_key(h.as_str()))
        {
            return Some(format!("the {h} header is required"));
        }
        if let Some(c) = body["tool_choice"]
            .as_str()
            .filter(|c| self.tool_choice.iter().any(|t| t == c))
        {
            return Some(format!("tool_choice {c:?} is not supported"));
        }
        if let Some(t) = body["response_format"]["type"]
            .as_str()
            .filter(|t| self.response_format.iter().any(|r| r == t))
        {
            return Some(format!("response_format {t:?} is not supported"));
        }
        for m in body["messages"].as_array().into_iter().flatten() {
            if let Some(f) = self
                .message_fields
                .iter()
                .find(|f| m.get(f.as_str()).is_some())
            {
                return Some(format!("messages[].{f} is not supported"));
            }
            let ids = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str())
                .chain(m["tool_call_id"].as_str());
            for id in ids {
                let valid = id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
                if self.tool_call_ids_alnum9 && !valid {
                    return Some(format!(
                        "Tool call id was {id} but must be a-z, A-Z, 0-9, with a length of 9."
                    ));
                }
            }
        }
        None
    }
}

impl Default for MockSpec {
    fn default() -> Self {
        MockSpec {
            text: "Hello from the mock.".into(),
            ttft_ms: 0,
            chunk_ms: 0,
            chunks: 4,
            embedding_dims: 8,
            tool_call: None,
            answer_tool_results: false,
            reasoning: None,
            fault: None,
            script: Vec::new(),
            per_key: std::collections::HashMap::new(),
            per_model: std::collections::HashMap::new(),
            count_tokens: None,
            refuse: None,
            prompt_cache: false,
        }
    }
}

/// A function call the mock answers with.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MockToolCall {
    pub name: String,
    /// JSON text of the arguments.
    pub arguments: String,
}

/// One scripted behaviour. Exactly one of the fields is set.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Fault {
    /// A normal answer (useful inside a script).
    pub ok: bool,
    /// Answer with this HTTP status and an OpenAI error body.
    pub status: Option<u16>,
    /// With `status`: a `Retry-After` header, in seconds.
    pub retry_after_seconds: Option<u64>,
    /// Never answer (a stream sends its role chunk, then nothing).
    pub hang: bool,
    /// Stream this many content chunks, then break the connection.
    pub cut_after: Option<u32>,
    /// Stream this many content chunks, then send nothing more (a stalled upstream).
    pub stall_after: Option<u32>,
    /// Stream a role chunk, then `[DONE]`: no content, no finish reason.
    pub empty: bool,
    /// Answer 200 with a body that is not JSON; a stream sends one content chunk, then an
    /// event that is not JSON, then ends.
    pub malformed: bool,
    /// A normal answer whose first token takes this long (`ttft_ms` for this request only).
    pub slow_first_token_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Behaviour {
    Normal,
    Status(u16, Option<u64>),
    Hang,
    CutAfter(u32),
    StallAfter(u32),
    Empty,
    Malformed,
    SlowFirst(u64),
}

impl Fault {
    fn behaviour(&self) -> Behaviour {
        if let Some(s) = self.status {
            Behaviour::Status(s, self.retry_after_seconds)
        } else if self.hang {
            Behaviour::Hang
        } else if let Some(k) = self.cut_after {
            Behaviour::CutAfter(k)
        } else if let Some(k) = self.stall_after {
            Behaviour::StallAfter(k)
        } else if self.empty {
            Behaviour::Empty
        } else if self.malformed {
            Behaviour::Malformed
        } else if let Some(ms) = self.slow_first_token_ms {
            Behaviour::SlowFirst(ms)
        } else {
            Behaviour::Normal
        }
    }

    fn validate(&self) -> Result<(), String> {
        let set = [
            self.ok,
            self.status.is_some(),
            self.hang,
            self.cut_after.is_some(),
            self.stall_after.is_some(),
            self.empty,
            self.malformed,
            self.slow_first_token_ms.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set != 1 {
            return Err(
                "a fault sets exactly one of ok, status, hang, cut_after, stall_after, empty, \
                 malformed, slow_first_token_ms"
                    .into(),
            );
        }
        if let Some(s) = self.status
            && !(300..=599).contains(&s)
        {
            return Err(format!("fault status {s} must be 300..=599"));
        }
        if self.retry_after_seconds.is_some() && self.status.is_none() {
            return Err("retry_after_seconds goes with status".into());
        }
        Ok(())
    }
}

impl MockSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.embedding_dims == 0 || self.embedding_dims > 8192 {
            return Err("embedding_dims must be 1..=8192".into());
        }
        if let Some(f) = &self.fault {
            f.validate()?;
        }
        for f in self
            .script
            .iter()
            .chain(self.per_key.values())
            .chain(self.per_model.values())
        {
            f.validate()?;
        }
        Ok(())
    }

    /// The behaviour for a request with this bearer key and model: `per_key`, then
    /// `per_model`, then the script and `fault`.
    pub(super) fn behaviour_for(&self, n: u64, key: Option<&str>, model: &str) -> Behaviour {
        match key
            .and_then(|k| self.per_key.get(k))
            .or_else(|| self.per_model.get(model))
        {
            Some(f) => f.behaviour(),
            None => self.behaviour(n),
        }
    }

    pub(super) fn behaviour(&self, n: u64) -> Behaviour {
        match self.script.get(n as usize) {
            Some(f) => f.behaviour(),
            None => self
                .fault
                .as_ref()
                .map_or(Behaviour::Normal, Fault::behaviour),
        }
    }

    /// The text (or the tool call's arguments) in `chunks` pieces of near-equal length.
    pub(super) fn pieces(&self) -> Vec<String> {
        let source = self.tool_call.as_ref().map_or(&self.text, |t| &t.arguments);
        let count = source.chars().count();
        if count == 0 {
            return Vec::new();
        }
        let per = count.div_ceil((self.chunks.max(1) as usize).min(count));
        // Cut at every `per`-th character boundary (no per-character copy: texts can be large).
        let mut cuts: Vec<usize> = source.char_indices().step_by(per).map(|(i, _)| i).collect();
        cuts.push(source.len());
        cuts.windows(2)
            .map(|w| source[w[0]..w[1]].to_string())
            .collect()
    }

    /// A slow first token is a normal answer with this request's own `ttft_ms`.
    pub(super) fn applying(&self, b: Behaviour) -> (std::borrow::Cow<'_, Self>, Behaviour) {
        match b {
            Behaviour::SlowFirst(ms) => {
                let mut slow = self.clone();
                slow.ttft_ms = ms;
                (std::borrow::Cow::Owned(slow), Behaviour::Normal)
            }
            b => (std::borrow::Cow::Borrowed(self), b),
        }
    }

    pub(super) fn total_time(&self) -> Duration {
        Duration::from_millis(
            self.ttft_ms + self.chunk_ms * u64::from(self.chunks.saturating_sub(1)),
        )
    }
}

impl MockSpec {
    /// The spec for this request: without the tool call once the tool's result came back
    /// (`answer_tool_results`).
    pub(super) fn for_request(&self, req: &ChatRequest) -> std::borrow::Cow<'_, MockSpec> {
        // A tool result after the last assistant turn (agents may add their own text after it).
        let since = req
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map_or(0, |i| i + 1);
        let answered =
            self.answer_tool_results && req.messages[since..].iter().any(|m| m.role == Role::Tool);
        if !answered {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut spec = self.clone();
        spec.tool_call = None;
        std::borrow::Cow::Owned(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_text_evenly() {
        let spec = MockSpec {
            text: "abcdefgh".into(),
            chunks: 3,
            ..MockSpec::default()
        };
        assert_eq!(spec.pieces(), ["abc", "def", "gh"]);
        let spec = MockSpec {
            text: "ab".into(),
            chunks: 8,
            ..MockSpec::default()
        };
        assert_eq!(spec.pieces(), ["a", "b"]);
    }

    #[test]
    fn script_then_fault_then_normal() {
        let spec: MockSpec = toml::from_str(
            "script = [{ status = 500 }, { ok = true }]\nfault = { status = 429, retry_after_seconds = 2 }",
        )
        .unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.behaviour(0), Behaviour::Status(500, None));
        assert_eq!(spec.behaviour(1), Behaviour::Normal);
        assert_eq!(spec.behaviour(2), Behaviour::Status(429, Some(2)));
    }

    #[test]
    fn faults_must_set_exactly_one_thing() {
        let bad: MockSpec = toml::from_str("fault = { hang = true, status = 500 }").unwrap();
        assert!(bad.validate().is_err());
        let bad: MockSpec = toml::from_str("fault = { status = 204 }").unwrap();
        assert!(bad.validate().is_err());
    }
}
