//! The mock's canonical answers: the whole reply, its stream chunks and their schedule in time,
//! error bodies and embeddings.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use futures_util::{Stream, stream};
use serde_json::{Map, Value, json};

use super::spec::{Behaviour, MockSpec};
use crate::protocol::{
    ChatRequest, ChatResponse, Choice, ChunkChoice, Content, Delta, Message, Role, StreamChunk,
    ToolCall, ToolCallDelta, Usage,
};

pub(super) fn estimate_prompt_tokens(req: &ChatRequest) -> u64 {
    let chars: usize = req
        .messages
        .iter()
        .map(|m| m.content.as_ref().map_or(0, Content::text_len))
        .sum();
    (chars as u64).div_ceil(4) + 3 * req.messages.len() as u64
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn usage(req: &ChatRequest, output_tokens: u64) -> Usage {
    let input = estimate_prompt_tokens(req);
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output_tokens),
        total_tokens: Some(input.saturating_add(output_tokens)),
        cached_tokens: None,
        reasoning_tokens: None,
        cache_write_tokens: None,
        extra: Map::new(),
    }
}

pub(super) fn reply(spec: &MockSpec, model: &str, req: &ChatRequest, n: u64) -> ChatResponse {
    let spec = &*spec.for_request(req);
    let pieces = spec.pieces();
    ChatResponse {
        id: Some(format!("chatcmpl-mock-{n}")),
        model: Some(model.to_string()),
        created: Some(now_secs()),
        choices: vec![match &spec.tool_call {
            None => Choice {
                index: 0,
                message: Message {
                    reasoning: spec.reasoning.clone(),
                    ..Message::new(Role::Assistant, spec.text.clone())
                },
                finish_reason: Some("stop".into()),
                extra: Map::new(),
            },
            Some(t) => Choice {
                index: 0,
                message: Message {
                    content: None,
                    tool_calls: vec![ToolCall::Function {
                        id: Some(format!("call_mock_{n}")),
                        name: t.name.clone(),
                        arguments: Some(t.arguments.clone()),
                        extra: Map::new(),
                    }],
                    ..Message::new(Role::Assistant, "")
                },
                finish_reason: Some("tool_calls".into()),
                extra: Map::new(),
            },
        }],
        usage: Some(usage(req, pieces.len() as u64)),
        extra: Map::new(),
        raw: None,
        as_sent: None,
    }
}

/// Role chunk, content chunks, finish chunk, usage chunk, in the order OpenAI sends them.
pub(super) fn reply_chunks(
    spec: &MockSpec,
    model: &str,
    req: &ChatRequest,
    n: u64,
) -> Vec<StreamChunk> {
    let spec = &*spec.for_request(req);
    let created = Some(now_secs());
    let id = Some(format!("chatcmpl-mock-{n}"));
    let model = Some(model.to_string());
    let chunk = |delta: Delta, finish: Option<&str>| StreamChunk {
        id: id.clone(),
        model: model.clone(),
        created,
        choices: vec![ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish.map(str::to_string),
            extra: Map::new(),
        }],
        usage: None,
        extra: Map::new(),
        raw: None,
    };
    let pieces = spec.pieces();
    let output_tokens = pieces.len() as u64;
    let mut out = Vec::with_capacity(pieces.len() + 4);
    let call = |id: Option<String>, name: Option<String>, arguments: String| ToolCallDelta {
        index: 0,
        kind: id.as_ref().map(|_| "function".to_string()),
        id,
        function: true,
        name,
        arguments: Some(arguments),
        extra: Map::new(),
    };
    out.push(chunk(
        Delta {
            role: Some(Role::Assistant),
            content: Some(String::new()),
            ..Delta::default()
        },
        None,
    ));
    if let Some(r) = &spec.reasoning {
        out.push(chunk(
            Delta {
                reasoning: Some(r.clone()),
                ..Delta::default()
            },
            None,
        ));
    }
    // Like OpenAI: the call's id and name first, then its arguments in fragments.
    if let Some(t) = &spec.tool_call {
        out.push(chunk(
            Delta {
                tool_calls: vec![call(
                    Some(format!("call_mock_{n}")),
                    Some(t.name.clone()),
                    String::new(),
                )],
                ..Delta::default()
            },
            None,
        ));
    }
    for p in pieces {
        let delta = match spec.tool_call {
            Some(_) => Delta {
                tool_calls: vec![call(None, None, p)],
                ..Delta::default()
            },
            None => Delta {
                content: Some(p),
                ..Delta::default()
            },
        };
        out.push(chunk(delta, None));
    }
    let finish = if spec.tool_call.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    out.push(chunk(Delta::default(), Some(finish)));
    out.push(StreamChunk {
        id,
        model,
        created,
        choices: Vec::new(),
        usage: Some(usage(req, output_tokens)),
        extra: Map::new(),
        raw: None,
    });
    out
}

/// One paced stream item: a chunk after a delay, or the break of a `cut_after` fault.
pub(super) enum Item {
    Chunk(Duration, Box<StreamChunk>),
    Break(Duration),
    /// An event that is not JSON, and the end of the body.
    Garbage(Duration),
    Hang,
}

/// What a `malformed` stream sends after its first content chunk.
pub(super) const GARBAGE: &[u8] = b"data: {\"choices\": [{oops\n\n";

/// What a `malformed` answer is: the start of a completion, then nothing.
pub(super) const MALFORMED_BODY: &str =
    "{\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion\",\"choices\":[";

/// The schedule of a streamed answer under a behaviour.
pub(super) fn schedule(spec: &MockSpec, b: Behaviour, chunks: Vec<StreamChunk>) -> Vec<Item> {
    let ttft = Duration::from_millis(spec.ttft_ms);
    let gap = Duration::from_millis(spec.chunk_ms);
    let mut out = Vec::with_capacity(chunks.len() + 1);
    let mut content_sent = 0u32;
    for (i, c) in chunks.into_iter().enumerate() {
        let first_content = content_sent == 0;
        if b == Behaviour::Empty && i > 0 {
            break;
        }
        let has_content = c.has_content();
        if has_content {
            match b {
                Behaviour::CutAfter(k) if content_sent == k => {
                    out.push(Item::Break(gap));
                    return out;
                }
                Behaviour::StallAfter(k) if content_sent == k => {
                    out.push(Item::Hang);
                    return out;
                }
                Behaviour::Malformed if content_sent == 1 => {
                    out.push(Item::Garbage(gap));
                    return out;
                }
                _ => {}
            }
        }
        // The first output waits for the time to first token; later output comes `gap` apart.
        let delay = match (has_content, first_content) {
            (true, true) => ttft,
            (true, false) => gap,
            (false, _) => Duration::ZERO,
        };
        out.push(Item::Chunk(delay, Box::new(c)));
        if b == Behaviour::Hang {
            out.push(Item::Hang);
            return out;
        }
        if has_content {
            content_sent += 1;
        }
    }
    out
}

pub(super) fn error_json(status: u16) -> Value {
    let (kind, code) = match status {
        404 => ("invalid_request_error", "model_not_found"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        400..=499 => ("invalid_request_error", "mock_client_error"),
        _ => ("server_error", "mock_server_error"),
    };
    json!({"error": {"message": format!("mock fault: HTTP {status}"), "type": kind, "param": null, "code": code}})
}

fn embedding(input: &str, dims: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dims)
        .map(|i| {
            let mut h = DefaultHasher::new();
            (input, i).hash(&mut h);
            (h.finish() % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

pub(super) fn embeddings_reply(spec: &MockSpec, model: &str, input: &Value) -> Value {
    let texts: Vec<String> = match input {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect(),
        other => vec![other.to_string()],
    };
    let tokens: u64 = texts.iter().map(|t| (t.len() as u64).div_ceil(4)).sum();
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embedding(t, spec.embedding_dims)}))
        .collect();
    json!({"object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
}

/// Sleeps, except for zero: a zero sleep still waits for the next timer tick (about 1 ms).
pub(super) async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

pub(super) enum Paced {
    Chunk(Box<StreamChunk>),
    Garbage,
    Break,
}

/// Plays a schedule in time; a hang never yields again.
pub(super) fn paced(items: Vec<Item>) -> impl Stream<Item = Paced> + Send {
    stream::unfold(items.into_iter(), |mut it| async move {
        match it.next()? {
            Item::Chunk(d, c) => {
                pause(d).await;
                Some((Paced::Chunk(c), it))
            }
            Item::Break(d) => {
                pause(d).await;
                // Return Pending once so the HTTP server flushes the chunks already written:
                // a cut connection has delivered what came before the cut.
                tokio::task::yield_now().await;
                Some((Paced::Break, it))
            }
            Item::Garbage(d) => {
                pause(d).await;
                Some((Paced::Garbage, it))
            }
            Item::Hang => std::future::pending().await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_are_deterministic_and_normalised() {
        let a = embedding("x", 16);
        assert_eq!(a, embedding("x", 16));
        assert_ne!(a, embedding("y", 16));
        let norm: f32 = a.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
