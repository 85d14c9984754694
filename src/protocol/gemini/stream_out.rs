//! Canonical stream chunks → Gemini SSE events.

use serde_json::{Value, json};

use super::{error_body, finish_to, usage_to};
use crate::protocol::ours::write_with_switchyard;
use crate::protocol::{Protocol, StreamChunk, Usage};

/// Canonical chunks → Gemini SSE events. Text goes out as it comes; a function call is held
/// until its arguments are complete (Gemini has no argument fragments).
#[derive(Debug, Default)]
pub struct StreamEncoder {
    /// Tool-call index → (name, arguments so far).
    pending: std::collections::BTreeMap<u32, (String, String)>,
    finish: Option<String>,
    usage: Option<Usage>,
    /// The upstream speaks Gemini too and its events are written as they came.
    passthrough: bool,
    /// The upstream's own error went out as it came: the fault that follows adds nothing.
    upstream_failed: bool,
    /// The gateway's own `switchyard` member for the last event (the stream's cost).
    ours: Option<Value>,
}

fn data(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl StreamEncoder {
    pub fn chunk(&mut self, c: &StreamChunk, model: &str, out: &mut Vec<u8>) {
        if let Some(raw) = c.raw.as_ref().filter(|r| r.protocol == Protocol::Gemini) {
            self.passthrough = true;
            // Only an error event has no candidates: look no further into the others.
            self.upstream_failed |= c.choices.is_empty()
                && serde_json::from_str::<Value>(&raw.data).is_ok_and(|v| v.get("error").is_some());
            // Beside each `usageMetadata`: the cost so far, as its counts are so far.
            match c.extra.get("switchyard").filter(|_| c.usage.is_some()) {
                Some(ours) => write_with_switchyard(raw, None, ours, out),
                None => raw.write(out),
            }
            return;
        }
        if let Some(u) = &c.usage {
            self.usage = Some(u.clone());
            if let Some(ours) = c.extra.get("switchyard") {
                self.ours = Some(ours.clone());
            }
        }
        let Some(ch) = c.choices.first() else {
            return;
        };
        for tc in &ch.delta.tool_calls {
            let e = self.pending.entry(tc.index).or_default();
            if let Some(n) = &tc.name {
                e.0.push_str(n);
            }
            if let Some(a) = &tc.arguments {
                e.1.push_str(a);
            }
        }
        if let Some(f) = &ch.finish_reason {
            self.finish = Some(f.clone());
        }
        let mut parts = Vec::new();
        if let Some(r) = ch.delta.reasoning.as_deref().filter(|r| !r.is_empty()) {
            parts.push(json!({"text": r, "thought": true}));
        }
        if let Some(t) = ch.delta.content.as_deref().filter(|t| !t.is_empty()) {
            parts.push(json!({"text": t}));
        }
        if !parts.is_empty() {
            data(
                out,
                &json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}], "modelVersion": model}),
            );
        }
    }

    /// The end: the held function calls, the finish reason and usage.
    pub fn done(&mut self, model: &str, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own last event carried the finish reason and usage.
            return;
        }
        let parts: Vec<Value> = std::mem::take(&mut self.pending)
            .into_values()
            .map(|(name, args)| {
                let args: Value = serde_json::from_str(&args).unwrap_or_else(|_| json!({}));
                json!({"functionCall": {"name": name, "args": args}})
            })
            .collect();
        let mut v = json!({"candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": finish_to(self.finish.as_deref()), "index": 0}], "modelVersion": model});
        if let Some(u) = &self.usage {
            v["usageMetadata"] = usage_to(u);
        }
        if let Some(ours) = self.ours.take() {
            v["switchyard"] = ours;
        }
        data(out, &v);
    }

    /// A fault after the stream began: Gemini's error object, and nothing after it.
    pub fn fault(&mut self, message: &str, out: &mut Vec<u8>) {
        if !self.upstream_failed {
            data(out, &error_body(500, message));
        }
    }
}
