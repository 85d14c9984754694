//! Fuzz targets: each takes arbitrary bytes, runs them through the gateway's own code, and
//! panics only when a property fails. `fuzz/` drives them with libFuzzer (`scripts/fuzz.sh`);
//! `tests/it/fuzz_corpus.rs` replays the committed corpora through the very same functions
//! on every `cargo test`.
//!
//! Properties: no panic and no hang on any input; a client's bad request is an
//! `InvalidRequest` that answers 4xx; a stream decodes to the same items however its bytes are
//! split; a decoded stream, encoded again in its protocol and decoded, says the same thing.

mod shaped;

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use serde_json::{Value, json};

use crate::context::count::Tokenizer;
use crate::protocol::openai::ChunkBody;
use crate::protocol::{ChatRequest, InvalidRequest, Protocol, StreamChunk};
use crate::provider::{decode_bedrock, decode_stream};

/// A client's request body in protocol `p`, as an ingress reads it; a request it accepts is
/// then written for every upstream kind and counted, as routing would.
pub fn ingress(p: Protocol, data: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match read(p, body) {
        Ok(req) => onward(&req),
        Err(e) => {
            let status = crate::server::ApiError::from(e).status();
            assert!(status.is_client_error(), "a bad request answered {status}");
        }
    }
}

/// A client's request body as protocol `p`'s ingress reads it.
fn read(p: Protocol, body: Value) -> Result<ChatRequest, InvalidRequest> {
    match p {
        Protocol::OpenAiChat => crate::protocol::openai::request_from_value(body),
        Protocol::AnthropicMessages => crate::protocol::anthropic::request_from_value(body),
        Protocol::Gemini => crate::protocol::gemini::request_from_value(body, "fuzz-model", false),
        Protocol::OpenAiResponses => {
            crate::protocol::responses::request_from_value(body).map(|(r, _)| r)
        }
    }
}

/// A client's request body in protocol `p`, built from `data` read as decisions: the
/// protocol's top level (model, a message list of roles and content parts) with members
/// whose keys and strings are mostly the protocol's own words (`shaped`). Then as [`ingress`].
pub fn ingress_shaped(p: Protocol, data: &[u8]) {
    if let Ok(body) = shaped_request(p, data) {
        ingress(p, body.to_string().as_bytes());
    }
}

fn shaped_request(p: Protocol, data: &[u8]) -> arbitrary::Result<Value> {
    let shape = match p {
        Protocol::OpenAiChat => &shaped::OPENAI_SHAPE,
        Protocol::AnthropicMessages => &shaped::ANTHROPIC_SHAPE,
        Protocol::Gemini => &shaped::GEMINI_SHAPE,
        Protocol::OpenAiResponses => &shaped::RESPONSES_SHAPE,
    };
    shaped::request(&mut Unstructured::new(data), shape)
}

/// A Bedrock stream built from `data` read as decisions: ConverseStream events, or InvokeModel
/// chunks carrying Anthropic events, with payloads shaped by their words, written as AWS
/// event-stream messages (their CRCs right, so the decoders are reached). Decoded whole and
/// in pieces of the size `data` chose, it gives the same items.
pub fn stream_bedrock(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((invoke, piece, bytes)) = bedrock_stream(&mut u) else {
        return;
    };
    let whole = render(&decode_bedrock(invoke, &[&bytes]));
    let pieces: Vec<&[u8]> = bytes.chunks(piece).collect();
    let split = render(&decode_bedrock(invoke, &pieces));
    assert_eq!(whole, split, "the stream decodes differently when split");
}

/// (InvokeModel's?, the piece size, the event-stream bytes).
fn bedrock_stream(u: &mut Unstructured) -> arbitrary::Result<(bool, usize, Vec<u8>)> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    use base64::Engine as _;
    let invoke: bool = u.arbitrary()?;
    let piece = u.int_in_range(1..=64)?;
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(0..=12)? {
        let (kind, payload) = if invoke {
            let event = shaped::object(u, shaped::ANTHROPIC_EVENTS, 3)?.to_string();
            let b64 = base64::engine::general_purpose::STANDARD.encode(event);
            ("chunk".to_string(), json!({ "bytes": b64 }).to_string())
        } else {
            let kind = u.choose(&shaped::CONVERSE[..6])?.to_string();
            (kind, shaped::object(u, shaped::CONVERSE, 3)?.to_string())
        };
        let message_type = if u.ratio(1, 16)? {
            "exception"
        } else {
            "event"
        };
        let header = |k: &str, v: String| Header::new(k.to_string(), HeaderValue::String(v.into()));
        let m = Message::new(payload.into_bytes())
            .add_header(header(":message-type", message_type.into()))
            .add_header(header(":event-type", kind.clone()))
            .add_header(header(":exception-type", kind));
        if aws_smithy_eventstream::frame::write_message_to(&m, &mut out).is_err() {
            return Err(arbitrary::Error::IncorrectFormat);
        }
    }
    Ok((invoke, piece, out))
}

/// What happens to an accepted request on its way out: written for each upstream kind, and
/// counted with each kind of tokenizer.
fn onward(req: &ChatRequest) {
    let _ = serde_json::to_vec(&crate::protocol::openai::RequestBody {
        req,
        model: "m",
        force_usage: true,
    });
    let _ = crate::protocol::anthropic::request_to_value(req, "m");
    let _ = crate::protocol::gemini::request_to_value(req);
    for model in ["gpt-4o", "claude-sonnet-4", "gemini-2.5-pro", "llama-3"] {
        let _ = crate::context::count::count_request(req, Tokenizer::for_model(model));
    }
}

/// An upstream's stream of protocol `p`. The first byte chooses how the rest is split into
/// reads besides whole: a byte at a time, at every boundary in turn, or in pieces of N.
pub fn stream(p: Protocol, data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    // The every-boundary mode is quadratic: bounded so each input stays fast.
    let bytes = &bytes[..bytes.len().min(8 * 1024)];
    for raw in [false, true] {
        let items = decode_stream(p, raw, &[bytes]);
        let whole = render(&items);
        let splits: Vec<Vec<&[u8]>> = match mode % 3 {
            0 => vec![bytes.chunks(1).collect()],
            1 => (1..bytes.len().min(512))
                .map(|i| vec![&bytes[..i], &bytes[i..]])
                .collect(),
            _ => vec![bytes.chunks(usize::from(mode).max(1)).collect()],
        };
        for pieces in splits {
            let split = render(&decode_stream(p, raw, &pieces));
            assert_eq!(whole, split, "the stream decodes differently when split");
        }
        if !raw {
            round_trip(p, items);
        }
    }
}

type Items = Vec<Result<Box<StreamChunk>, crate::provider::UpstreamError>>;

/// Items compared by what they say (errors by their message, as their types hold no equality).
fn render(items: &Items) -> Vec<String> {
    items
        .iter()
        .map(|i| match i {
            Ok(c) => format!("{c:?}"),
            Err(e) => format!("error: {e}"),
        })
        .collect()
}

/// A stream decoded, written again in its protocol as the gateway writes it to a client, and
/// decoded again, says the same: text, reasoning, tool calls, finish reasons and usage.
fn round_trip(p: Protocol, items: Items) {
    // The chunks up to the first error: what a client would have been sent.
    let chunks = |items: Items| -> Vec<Box<StreamChunk>> {
        items.into_iter().map_while(Result::ok).collect()
    };
    let first = chunks(items);
    if first.is_empty() {
        return;
    }
    let encoded = encode(p, &first);
    let again = chunks(decode_stream(p, false, &[&encoded]));
    let (said, read) = (Facts::of(&first), Facts::of(&again));
    assert!(
        read.keeps(&said),
        "a re-encoded stream says something else: {said:?} became {read:?} in {}",
        String::from_utf8_lossy(&encoded)
    );
}

/// The chunks as the gateway's encoder for a client of `p` writes them, ended cleanly.
pub(crate) fn encode(p: Protocol, chunks: &[Box<StreamChunk>]) -> Vec<u8> {
    use crate::protocol::{anthropic, gemini, responses};
    let mut out = Vec::new();
    let model = "fuzz-model";
    match p {
        Protocol::OpenAiChat => {
            for c in chunks {
                out.extend_from_slice(b"data: ");
                let body = ChunkBody {
                    chunk: c,
                    usage_null: false,
                };
                out.extend(serde_json::to_vec(&body).unwrap_or_default());
                out.extend_from_slice(b"\n\n");
            }
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
        Protocol::AnthropicMessages => {
            let mut enc = anthropic::StreamEncoder::default();
            chunks.iter().for_each(|c| enc.chunk(c, model, &mut out));
            enc.done(&mut out);
        }
        Protocol::Gemini => {
            let mut enc = gemini::StreamEncoder::default();
            chunks.iter().for_each(|c| enc.chunk(c, model, &mut out));
            enc.done(model, &mut out);
        }
        Protocol::OpenAiResponses => {
            let echo = match responses::request_from_value(
                serde_json::json!({"model": "m", "input": "hi"}),
            ) {
                Ok((_, echo)) => echo,
                Err(e) => panic!("a minimal Responses request is read: {e:?}"),
            };
            let mut enc = responses::StreamEncoder::new(echo, model.into());
            chunks.iter().for_each(|c| enc.chunk(c, &mut out));
            enc.done(&mut out);
        }
    }
    out
}

/// What a client reads from a stream, per choice.
#[derive(Debug, PartialEq, Default)]
pub(crate) struct Facts {
    pub(crate) text: BTreeMap<u32, String>,
    pub(crate) reasoning: BTreeMap<u32, String>,
    /// (choice, call) → (name, arguments).
    pub(crate) calls: BTreeMap<(u32, u32), (String, String)>,
    pub(crate) finish: BTreeMap<u32, String>,
    /// (input, output) tokens, as last reported.
    pub(crate) usage: Option<(Option<u64>, Option<u64>)>,
}

impl Facts {
    /// Whether this (read back) says all `first` said. What `first` lacks, the encoder may fill
    /// in as its protocol requires of a complete stream (a cut stream gets a finish reason and
    /// zero counts of what it never reported).
    fn keeps(&self, first: &Facts) -> bool {
        let counts = |u: Option<(Option<u64>, Option<u64>)>| u.unwrap_or((None, None));
        let ((i1, o1), (i2, o2)) = (counts(first.usage), counts(self.usage));
        let count_kept = |a: Option<u64>, b: Option<u64>| a.is_none() || a == b;
        self.text == first.text
            && self.reasoning == first.reasoning
            && self.calls == first.calls
            && first
                .finish
                .iter()
                .all(|(i, r)| self.finish.get(i) == Some(r))
            && count_kept(i1, i2)
            && count_kept(o1, o2)
    }

    pub(crate) fn of(chunks: &[Box<StreamChunk>]) -> Facts {
        let mut f = Facts::default();
        for c in chunks {
            for ch in &c.choices {
                let d = &ch.delta;
                if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
                    f.text.entry(ch.index).or_default().push_str(t);
                }
                if let Some(t) = d.reasoning.as_deref().filter(|t| !t.is_empty()) {
                    f.reasoning.entry(ch.index).or_default().push_str(t);
                }
                for t in &d.tool_calls {
                    let call = f.calls.entry((ch.index, t.index)).or_default();
                    call.0.push_str(t.name.as_deref().unwrap_or(""));
                    call.1.push_str(t.arguments.as_deref().unwrap_or(""));
                }
                if let Some(r) = &ch.finish_reason {
                    f.finish.insert(ch.index, r.clone());
                }
            }
            if let Some(u) = &c.usage {
                f.usage = Some((u.input_tokens, u.output_tokens));
            }
        }
        f
    }
}

/// A config file: loading it never panics, and a config that loads is checked whole.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let clients = crate::provider::HttpClients::default();
    let _ = crate::config::load_str(text, "fuzz.toml", &|_| None, &clients);
}

/// Text counted by every tokenizer: never more tokens than bytes from an exact BPE, none for
/// no text, and some for any text.
pub fn tokens(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for model in [
        "gpt-4o",
        "gpt-4",
        "claude-sonnet-4",
        "gemini-2.5-pro",
        "llama-3",
    ] {
        let tok = Tokenizer::for_model(model);
        let n = tok.count(&text);
        if text.is_empty() {
            assert_eq!(n, 0, "{model}: tokens for no text");
        } else {
            assert!(n > 0, "{model}: no tokens for {} bytes", text.len());
        }
        if tok.exact() {
            assert!(
                n as usize <= text.len(),
                "{model}: {n} tokens for {} bytes",
                text.len()
            );
        }
    }
}

/// Request headers, one `name: value` per line, read as the gateway reads them.
pub fn headers(data: &[u8]) {
    let mut map = axum::http::HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name),
            axum::http::HeaderValue::from_bytes(value),
        ) {
            map.append(n, v);
        }
    }
    crate::server::read_headers(&map);
}

/// One message of an MCP client as `/mcp` reads it: refused with the spec's codes (parse
/// error or invalid request, the id echoed when there is one), or read; what it names (a
/// gateway name, a cursor, a relayed answer's id) is then taken apart as the gateway would,
/// none of it panicking.
pub fn mcp_message(data: &[u8]) {
    use crate::mcp::jsonrpc::{self, Message};
    match jsonrpc::read(data) {
        Err(r) => {
            assert!(matches!(
                r.code,
                jsonrpc::PARSE_ERROR | jsonrpc::INVALID_REQUEST
            ));
            let v = r.to_value();
            assert_eq!(v["jsonrpc"], "2.0");
            assert!(v["error"]["message"].is_string());
        }
        Ok(Message::Request { method, params, .. }) => {
            let _ = crate::mcp::lists::Kind::of_method(&method);
            let p = params.unwrap_or_default();
            if let Some(name) = p.get("name").and_then(Value::as_str) {
                let _ = crate::mcp::names::split(["a", "a__b", "github"], "__", name);
            }
            let cursor = p.get("cursor").and_then(Value::as_str);
            let items = vec![serde_json::json!({"name": "x"}); 3];
            let _ = crate::mcp::lists::page(items, cursor, 2);
        }
        Ok(Message::Notification { method, .. }) => {
            let _ = crate::mcp::lists::Kind::changed_by(&method);
        }
        Ok(Message::Response { id, .. }) => {
            let _ = crate::mcp::relay::inward_id(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shaped targets exist to reach past the readers' first checks: from random bytes,
    /// a good share of what they build must be a request the protocol's ingress accepts.
    #[test]
    fn shaped_requests_are_often_accepted() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for p in [
            Protocol::OpenAiChat,
            Protocol::AnthropicMessages,
            Protocol::Gemini,
            Protocol::OpenAiResponses,
        ] {
            let (mut built, mut accepted) = (0, 0);
            for _ in 0..400 {
                let data: Vec<u8> = (0..512).map(|_| next() as u8).collect();
                if let Ok(body) = shaped_request(p, &data) {
                    built += 1;
                    accepted += usize::from(read(p, body).is_ok());
                }
            }
            assert!(
                built >= 300,
                "{p:?}: only {built} of 400 inputs built a request"
            );
            assert!(
                accepted * 10 >= built,
                "{p:?}: {accepted} of {built} accepted"
            );
        }
    }
}
