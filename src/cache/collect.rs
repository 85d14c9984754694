//! A streamed answer collected back into a whole one, to be kept: per choice its text,
//! reasoning, tool calls (their pieces joined by index) and finish reason; the usage last seen.

use serde_json::Map;

use crate::protocol::{ChatResponse, Choice, Content, Message, Role, StreamChunk, ToolCall, Usage};

#[derive(Default)]
struct Collected {
    text: String,
    reasoning: String,
    /// (id, name, arguments) by the delta's index.
    calls: Vec<(Option<String>, String, String)>,
    finish: Option<String>,
}

/// The chunks of one stream, collected.
#[derive(Default)]
pub struct Collect {
    id: Option<String>,
    model: Option<String>,
    created: Option<u64>,
    choices: Vec<Collected>,
    usage: Option<Usage>,
}

impl Collect {
    pub fn push(&mut self, c: &StreamChunk) {
        self.id = self.id.take().or_else(|| c.id.clone());
        self.model = self.model.take().or_else(|| c.model.clone());
        self.created = self.created.or(c.created);
        if let Some(u) = &c.usage {
            self.usage = Some(u.clone());
        }
        for ch in &c.choices {
            let i = ch.index as usize;
            if self.choices.len() <= i {
                self.choices.resize_with(i + 1, Collected::default);
            }
            let into = &mut self.choices[i];
            let d = &ch.delta;
            if let Some(t) = &d.content {
                into.text.push_str(t);
            }
            if let Some(r) = &d.reasoning {
                into.reasoning.push_str(r);
            }
            for t in &d.tool_calls {
                let k = t.index as usize;
                if into.calls.len() <= k {
                    into.calls.resize_with(k + 1, Default::default);
                }
                let call = &mut into.calls[k];
                call.0 = call.0.take().or_else(|| t.id.clone());
                if let Some(n) = &t.name {
                    call.1.push_str(n);
                }
                if let Some(a) = &t.arguments {
                    call.2.push_str(a);
                }
            }
            if ch.finish_reason.is_some() {
                into.finish = ch.finish_reason.clone();
            }
        }
    }

    /// The whole answer the stream made.
    pub fn finish(self) -> ChatResponse {
        let choices = self
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, c)| Choice {
                index: i as u32,
                message: Message {
                    content: (!c.text.is_empty()).then(|| Content::Text(c.text)),
                    reasoning: (!c.reasoning.is_empty()).then_some(c.reasoning),
                    tool_calls: c
                        .calls
                        .into_iter()
                        .map(|(id, name, arguments)| ToolCall::Function {
                            id,
                            name,
                            arguments: Some(arguments),
                            extra: Map::new(),
                        })
                        .collect(),
                    ..Message::new(Role::Assistant, "")
                },
                finish_reason: c.finish,
                extra: Map::new(),
            })
            .collect();
        ChatResponse {
            id: self.id,
            model: self.model,
            created: self.created,
            choices,
            usage: self.usage,
            extra: Map::new(),
            raw: None,
            as_sent: None,
        }
    }
}
