//! Canonical stream chunks → Responses stream events.

use serde_json::{Value, json};

use super::echo::{Kept, skeleton};
use super::{Echo, message_item, reasoning_item, status_of, usage_json};
use crate::protocol::ours::write_with_switchyard;
use crate::protocol::{Protocol, StreamChunk, ToolCallDelta, Usage};

/// The text item being streamed (reasoning or message): one at a time.
#[derive(Debug)]
enum Open {
    Reasoning {
        index: usize,
        id: String,
        text: String,
    },
    Message {
        index: usize,
        id: String,
        text: String,
    },
}

/// A tool call being streamed. Calls stay open side by side (an upstream may interleave the
/// argument deltas of parallel calls) and close when the answer ends.
#[derive(Debug)]
struct Call {
    /// The upstream's tool-call index.
    upstream: u32,
    index: usize,
    id: String,
    call_id: String,
    name: String,
    args: String,
    /// A custom tool's input is sent whole when the call ends.
    custom: bool,
}

/// Canonical stream chunks → Responses events, one state machine per stream.
#[derive(Debug)]
pub struct StreamEncoder {
    echo: Echo,
    model: String,
    seq: u64,
    started: bool,
    open: Option<Open>,
    calls: Vec<Call>,
    /// Finished items by output index.
    output: Vec<(usize, Value)>,
    next_index: usize,
    usage: Option<Usage>,
    finish: Option<String>,
    /// The upstream speaks the Responses API too: its events are written as they came.
    passthrough: bool,
    /// In passthrough, the upstream sent its own `response.failed` (or `error`).
    upstream_failed: bool,
    /// The gateway's own `switchyard` member for the last event's response (the cost).
    ours: Option<Value>,
}

impl StreamEncoder {
    pub fn new(echo: Echo, model: String) -> Self {
        StreamEncoder {
            echo,
            model,
            seq: 0,
            started: false,
            open: None,
            calls: Vec::new(),
            output: Vec::new(),
            next_index: 0,
            usage: None,
            finish: None,
            passthrough: false,
            upstream_failed: false,
            ours: None,
        }
    }

    fn event(&mut self, out: &mut Vec<u8>, ty: &str, mut data: Value) {
        data["type"] = ty.into();
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(ty.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(data.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = skeleton(&self.echo, &self.model, "in_progress");
        self.event(out, "response.created", json!({ "response": r }));
        let r = skeleton(&self.echo, &self.model, "in_progress");
        self.event(out, "response.in_progress", json!({ "response": r }));
    }

    fn tag(&self) -> String {
        self.echo.id[5..].to_string()
    }

    fn take_index(&mut self) -> usize {
        self.next_index += 1;
        self.next_index - 1
    }

    /// The items in output order.
    fn items(&self) -> Vec<Value> {
        let mut all = self.output.clone();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, v)| v).collect()
    }

    /// Ends the open text item: its closing events and `output_item.done`.
    fn close_text(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let (index, item) = match open {
            Open::Reasoning { index, id, text } => {
                let part = json!({"type": "summary_text", "text": text});
                self.event(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                );
                self.event(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                );
                (index, reasoning_item(&id, &text))
            }
            Open::Message { index, id, text } => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text, "logprobs": []}),
                );
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                (index, message_item(&id, &text, "completed"))
            }
        };
        self.event(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push((index, item));
    }

    /// Ends every open call, in output order.
    fn close_calls(&mut self, out: &mut Vec<u8>) {
        let mut calls = std::mem::take(&mut self.calls);
        calls.sort_by_key(|c| c.index);
        for c in calls {
            let item = self
                .echo
                .call_item(&c.id, &c.call_id, &c.name, &c.args, "completed");
            if c.custom {
                let mut added = item.clone();
                added["input"] = "".into();
                added["status"] = "in_progress".into();
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": c.index, "item": added}),
                );
                let input = item["input"].clone();
                self.event(
                    out,
                    "response.custom_tool_call_input.delta",
                    json!({"item_id": c.id, "output_index": c.index, "delta": input}),
                );
                self.event(
                    out,
                    "response.custom_tool_call_input.done",
                    json!({"item_id": c.id, "output_index": c.index, "input": input}),
                );
            } else {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": c.id, "output_index": c.index, "arguments": c.args}),
                );
            }
            self.event(
                out,
                "response.output_item.done",
                json!({"output_index": c.index, "item": item}),
            );
            self.output.push((c.index, item));
        }
    }

    pub fn chunk(&mut self, c: &StreamChunk, out: &mut Vec<u8>) {
        if let Some(raw) = c
            .raw
            .as_ref()
            .filter(|r| r.protocol == Protocol::OpenAiResponses)
        {
            // Numbered by the upstream from 0, one per event: a fault after it goes on counting.
            self.passthrough = true;
            self.seq += 1;
            if matches!(raw.event.as_deref(), Some("response.failed" | "error")) {
                self.upstream_failed = true;
            }
            let last = matches!(
                raw.event.as_deref(),
                Some("response.completed" | "response.incomplete")
            );
            match c.extra.get("switchyard").filter(|_| last) {
                Some(ours) => write_with_switchyard(raw, Some("response"), ours, out),
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
        if let Some(m) = &c.model {
            self.model.clone_from(m);
        }
        let Some(choice) = c.choices.first() else {
            return;
        };
        self.start(out);
        let d = &choice.delta;
        let tag = self.tag();
        if let Some(r) = d.reasoning.as_deref().filter(|r| !r.is_empty()) {
            self.reasoning_delta(r, &tag, out);
        }
        if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
            self.text_delta(t, &tag, out);
        }
        for tc in &d.tool_calls {
            self.tool_call_delta(tc, &tag, out);
        }
        if let Some(f) = &choice.finish_reason {
            self.finish = Some(f.clone());
        }
    }

    /// Reasoning text: into the open reasoning item, or a new one after closing the open message.
    fn reasoning_delta(&mut self, r: &str, tag: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close_text(out);
            let index = self.take_index();
            let id = format!("rs_{tag}_{index}");
            self.event(
                out,
                "response.output_item.added",
                json!({"output_index": index,
                    "item": {"type": "reasoning", "id": id, "summary": []}}),
            );
            self.event(
                out,
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": index, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}}),
            );
            self.open = Some(Open::Reasoning {
                index,
                id,
                text: String::new(),
            });
        }
        if let Some(Open::Reasoning { index, id, text }) = &mut self.open {
            text.push_str(r);
            let data =
                json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": r});
            self.event(out, "response.reasoning_summary_text.delta", data);
        }
    }

    /// Answer text: into the open message item, or a new one after closing the open reasoning.
    fn text_delta(&mut self, t: &str, tag: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close_text(out);
            let index = self.take_index();
            let id = format!("msg_{tag}_{index}");
            self.event(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": {"type": "message", "id": id,
                    "status": "in_progress", "role": "assistant", "content": []}}),
            );
            self.event(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
            );
            self.open = Some(Open::Message {
                index,
                id,
                text: String::new(),
            });
        }
        if let Some(Open::Message { index, id, text }) = &mut self.open {
            text.push_str(t);
            let data = json!({"item_id": id, "output_index": index, "content_index": 0,
                "delta": t, "logprobs": []});
            self.event(out, "response.output_text.delta", data);
        }
    }

    /// A tool-call delta: the call's item opened when the call is new, its arguments added.
    fn tool_call_delta(&mut self, tc: &ToolCallDelta, tag: &str, out: &mut Vec<u8>) {
        // The same call: its upstream index, with no id or the id it started with.
        let known = self.calls.iter().position(|c| {
            c.upstream == tc.index && tc.id.as_ref().is_none_or(|id| *id == c.call_id)
        });
        let k = match known {
            Some(k) => k,
            None => {
                // Text before the calls is finished once they begin.
                self.close_text(out);
                let index = self.take_index();
                let name = tc.name.clone().unwrap_or_default();
                let call_id = tc
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{tag}_{index}"));
                let id = format!("fc_{tag}_{index}");
                let custom = self.echo.custom_tools.contains(&name);
                if !custom {
                    self.event(
                        out,
                        "response.output_item.added",
                        json!({"output_index": index, "item": {"type": "function_call", "id": id,
                            "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}}),
                    );
                }
                self.calls.push(Call {
                    upstream: tc.index,
                    index,
                    id,
                    call_id,
                    name,
                    args: String::new(),
                    custom,
                });
                self.calls.len() - 1
            }
        };
        if let Some(a) = tc.arguments.as_deref().filter(|a| !a.is_empty()) {
            let call = &mut self.calls[k];
            call.args.push_str(a);
            if !call.custom {
                let data = json!({"item_id": call.id, "output_index": call.index, "delta": a});
                self.event(out, "response.function_call_arguments.delta", data);
            }
        }
    }

    /// The end of a complete stream: the open items closed, then the whole response.
    pub fn done(&mut self, out: &mut Vec<u8>) {
        if self.passthrough {
            // The upstream's own `response.completed` went out already.
            return;
        }
        self.start(out);
        self.close_text(out);
        self.close_calls(out);
        let mut r = self.whole();
        if let (Some(ours), Some(m)) = (self.ours.take(), r.as_object_mut()) {
            crate::protocol::ours::merge_switchyard(m, &ours);
        }
        let ty = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.event(out, ty, json!({ "response": r }));
    }

    /// The whole response as the stream's last event carries it.
    fn whole(&self) -> Value {
        let (status, incomplete) = status_of(self.finish.as_deref());
        let mut r = skeleton(&self.echo, &self.model, status);
        r["incomplete_details"] = incomplete;
        r["output"] = Value::Array(self.items());
        if let Some(u) = &self.usage {
            r["usage"] = usage_json(u);
        }
        r
    }

    /// The response's id, the conversation and the response to keep, once the stream
    /// completed: this gateway's own answer (an upstream that speaks the API keeps its own).
    pub fn completed(&self) -> Option<(String, Kept)> {
        if self.passthrough {
            return None;
        }
        let whole = self.whole();
        Some((self.echo.id.clone(), self.echo.kept(&whole)))
    }

    /// A fault after the stream began: `response.failed`, and nothing after it (unless the
    /// upstream already said so in its own words).
    pub fn fault(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        if self.passthrough && self.upstream_failed {
            return;
        }
        if !self.passthrough {
            self.start(out);
        }
        let mut r = skeleton(&self.echo, &self.model, "failed");
        r["output"] = Value::Array(self.items());
        r["error"] = json!({"code": code, "message": message});
        self.event(out, "response.failed", json!({ "response": r }));
    }
}
