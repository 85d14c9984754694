//! Canonical stream chunks → Anthropic stream events.

use serde_json::{Value, json};

use super::{error_body, message_id, stop_reason, usage_json};
use crate::protocol::ours::write_with_switchyard;
use crate::protocol::{Protocol, StreamChunk};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Thinking,
    Text,
    /// A tool_use block, for this OpenAI tool-call index.
    Tool(u32),
}

/// Canonical stream chunks → Anthropic stream events, one chunk at a time.
#[derive(Debug, Default)]
pub struct StreamEncoder {
    started: bool,
    open: Option<(u32, Block)>,
    next_index: u32,
    stop_reason: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: Option<u64>,
    /// The upstream speaks Anthropic too and its events are written as they came.
    passthrough: bool,
    /// In passthrough, the upstream's own `error` event went out.
    upstream_failed: bool,
    /// Each tool call's block: (OpenAI tool-call index, block index).
    tool_blocks: Vec<(u32, u32)>,
    /// The gateway's own `switchyard` member for `message_delta` (the stream's cost).
    ours: Option<Value>,
}

fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl StreamEncoder {
    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn open_block(&mut self, block: Block, start: Value, out: &mut Vec<u8>) -> u32 {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        self.open = Some((index, block));
        index
    }

    pub fn chunk(&mut self, c: &StreamChunk, model: &str, out: &mut Vec<u8>) {
        if let Some(raw) = c
            .raw
            .as_ref()
            .filter(|r| r.protocol == Protocol::AnthropicMessages)
        {
            self.passthrough = true;
            self.upstream_failed |= raw.event.as_deref() == Some("error");
            match c.extra.get("switchyard") {
                Some(ours) if raw.event.as_deref() == Some("message_delta") => {
                    write_with_switchyard(raw, None, ours, out);
                }
                _ => raw.write(out),
            }
            return;
        }
        if let Some(ours) = c.extra.get("switchyard").filter(|_| c.usage.is_some()) {
            self.ours = Some(ours.clone());
        }
        if let Some(u) = &c.usage {
            self.input_tokens = u.input_tokens.unwrap_or(self.input_tokens);
            self.cached_tokens = u.cached_tokens.or(self.cached_tokens);
            self.output_tokens = u.output_tokens.unwrap_or(self.output_tokens);
        }
        if !self.started {
            self.started = true;
            event(
                out,
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": message_id(c.id.as_deref()), "type": "message", "role": "assistant",
                    "model": c.model.as_deref().unwrap_or(model), "content": [],
                    "stop_reason": null, "stop_sequence": null,
                    "usage": usage_json(self.input_tokens, 0, self.cached_tokens),
                }}),
            );
        }
        let Some(choice) = c.choices.first() else {
            return;
        };
        let d = &choice.delta;
        if let Some(r) = d.reasoning.as_deref().filter(|r| !r.is_empty()) {
            let index = match self.open {
                Some((i, Block::Thinking)) => i,
                _ => self.open_block(
                    Block::Thinking,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    out,
                ),
            };
            event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "thinking_delta", "thinking": r}}),
            );
        }
        if let Some(text) = d.content.as_deref().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some((i, Block::Text)) => i,
                _ => self.open_block(Block::Text, json!({"type": "text", "text": ""}), out),
            };
            event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": text}}),
            );
        }
        for tc in &d.tool_calls {
            // Arguments of a call whose block other content closed (found by fuzzing) go to
            // that block, as Anthropic deltas name theirs, not to a new call without a name.
            let earlier = self.tool_blocks.iter().find(|(t, _)| *t == tc.index);
            let index = match (self.open, &tc.id, earlier) {
                (Some((i, Block::Tool(t))), None, _) if t == tc.index => i,
                (_, None, Some(&(_, i))) => i,
                _ => {
                    let start = json!({"type": "tool_use", "id": tc.id.clone().unwrap_or_default(),
                        "name": tc.name.clone().unwrap_or_default(), "input": {}});
                    let i = self.open_block(Block::Tool(tc.index), start, out);
                    self.tool_blocks.push((tc.index, i));
                    i
                }
            };
            if let Some(args) = tc.arguments.as_deref().filter(|a| !a.is_empty()) {
                event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": args}}),
                );
            }
        }
        if let Some(f) = choice.finish_reason.as_deref() {
            self.stop_reason = Some(stop_reason(Some(f)));
        }
    }

    /// `message_delta`'s usage: every count, the prompt's included (an upstream that counts at
    /// the end, as OpenAI's do, was not known at `message_start`).
    fn delta_usage(&self) -> Value {
        usage_json(self.input_tokens, self.output_tokens, self.cached_tokens)
    }

    /// The end of a complete stream: close the open block, then the message.
    pub fn done(&mut self, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own block stops and `message_delta` went out already.
            event(out, "message_stop", &json!({"type": "message_stop"}));
            return;
        }
        self.close(out);
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
            "usage": self.delta_usage()});
        if let Some(ours) = self.ours.take() {
            delta["switchyard"] = ours;
        }
        event(out, "message_delta", &delta);
        event(out, "message_stop", &json!({"type": "message_stop"}));
    }

    /// A fault after the stream began: Anthropic's `event: error`, and nothing after it.
    pub fn fault(&mut self, message: &str, out: &mut Vec<u8>) {
        if !self.upstream_failed {
            event(out, "error", &error_body(500, message));
        }
    }
}
