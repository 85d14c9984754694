//! A kept answer as a stream again, for a client that asks for one: per choice its role, its
//! reasoning and text in pieces of at most `PIECE` characters (cut on character boundaries),
//! its tool calls, its finish reason; then the usage.

use serde_json::Map;

use crate::protocol::{
    ChatResponse, ChunkChoice, Content, Delta, Role, StreamChunk, ToolCall, ToolCallDelta,
};

/// The most characters a replayed text chunk carries.
const PIECE: usize = 256;

fn chunk(r: &ChatResponse, choices: Vec<ChunkChoice>) -> Box<StreamChunk> {
    Box::new(StreamChunk {
        id: r.id.clone(),
        model: r.model.clone(),
        created: r.created,
        choices,
        usage: None,
        extra: Map::new(),
        raw: None,
    })
}

fn one(index: u32, delta: Delta, finish: Option<String>) -> Vec<ChunkChoice> {
    vec![ChunkChoice {
        index,
        delta,
        finish_reason: finish,
        extra: Map::new(),
    }]
}

/// `text` cut into pieces of at most `PIECE` characters.
fn pieces(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let cut = rest
            .char_indices()
            .nth(PIECE)
            .map_or(rest.len(), |(i, _)| i);
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece.to_string())
    })
}

/// The chunks that stream `r` again.
pub fn chunks(r: &ChatResponse) -> Vec<Box<StreamChunk>> {
    let mut out = Vec::new();
    for c in &r.choices {
        let m = &c.message;
        let role = Delta {
            role: Some(Role::Assistant),
            ..Delta::default()
        };
        out.push(chunk(r, one(c.index, role, None)));
        for p in m.reasoning.as_deref().map(pieces).into_iter().flatten() {
            let d = Delta {
                reasoning: Some(p),
                ..Delta::default()
            };
            out.push(chunk(r, one(c.index, d, None)));
        }
        let text = m.content.as_ref().map(Content::text).unwrap_or_default();
        for p in pieces(&text) {
            let d = Delta {
                content: Some(p),
                ..Delta::default()
            };
            out.push(chunk(r, one(c.index, d, None)));
        }
        let calls: Vec<ToolCallDelta> = m
            .tool_calls
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                ToolCall::Function {
                    id,
                    name,
                    arguments,
                    extra,
                } => Some(ToolCallDelta {
                    index: i as u32,
                    id: id.clone(),
                    kind: Some("function".into()),
                    function: true,
                    name: Some(name.clone()),
                    arguments: arguments.clone(),
                    extra: extra.clone(),
                }),
                ToolCall::Other(_) => None,
            })
            .collect();
        if !calls.is_empty() {
            let d = Delta {
                tool_calls: calls,
                ..Delta::default()
            };
            out.push(chunk(r, one(c.index, d, None)));
        }
        out.push(chunk(
            r,
            one(c.index, Delta::default(), c.finish_reason.clone()),
        ));
    }
    let mut last = chunk(r, Vec::new());
    last.usage = r.usage.clone();
    out.push(last);
    out
}
