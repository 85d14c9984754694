//! A shared entry's bytes in Redis: JSON (the answer as an OpenAI Chat Completion, the form the
//! canonical answer round-trips through, with what the entry knows about itself), compressed
//! with LZ4; and a kept question's vector beside it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Entry, Origin};

/// The version of this layout: another build's entries under another layout are misses.
const LAYOUT: u8 = 1;

#[derive(Serialize, Deserialize)]
struct Stored {
    v: u8,
    stored_ms: u64,
    cost_micros: u64,
    key: String,
    models: Vec<String>,
    response: Value,
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The entry's bytes, compressed.
pub fn encode(e: &Entry) -> Vec<u8> {
    let response = serde_json::to_value(crate::protocol::openai::ResponseBody {
        resp: &e.response,
        report: None,
    })
    .unwrap_or(Value::Null);
    let s = Stored {
        v: LAYOUT,
        stored_ms: ms(e.stored),
        cost_micros: e.cost_micros,
        key: e.origin.key.to_string(),
        models: e.origin.models.iter().map(|m| m.to_string()).collect(),
        response,
    };
    let json = serde_json::to_vec(&s).unwrap_or_default();
    lz4_flex::compress_prepend_size(&json)
}

/// An entry from its bytes; `None` for anything this build did not write (a miss).
pub fn decode(bytes: &[u8], ttl_left: Duration) -> Option<Entry> {
    let json = lz4_flex::decompress_size_prepended(bytes).ok()?;
    let s: Stored = serde_json::from_slice(&json).ok()?;
    if s.v != LAYOUT {
        return None;
    }
    let response = crate::protocol::openai::response_from_value(s.response).ok()?;
    Some(Entry {
        bytes: super::memory::size_of(&response),
        response,
        stored: SystemTime::UNIX_EPOCH + Duration::from_millis(s.stored_ms),
        expires: Instant::now() + ttl_left,
        cost_micros: s.cost_micros,
        origin: Origin {
            key: s.key.into(),
            models: s.models.into_iter().map(Arc::from).collect(),
        },
    })
}

/// A kept question beside its entry: when it expires (ms), its vector, then its text.
pub fn encode_question(vector: &[f32], text: &str, expires: SystemTime) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + vector.len() * 4 + text.len());
    out.extend_from_slice(&ms(expires).to_le_bytes());
    out.extend_from_slice(&u32::try_from(vector.len()).unwrap_or(0).to_le_bytes());
    for x in vector {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(text.as_bytes());
    out
}

/// A kept question's vector and text, if it has not expired at `now`.
pub fn decode_question(b: &[u8], now: SystemTime) -> Option<(Vec<f32>, String)> {
    let expires = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    if expires <= ms(now) {
        return None;
    }
    let n = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?) as usize;
    let end = 12usize.checked_add(n.checked_mul(4)?)?;
    let vector = b
        .get(12..end)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let text = std::str::from_utf8(b.get(end..)?).ok()?.to_string();
    Some((vector, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Answers as upstreams give them: text, tool calls, reasoning, usage with cache details.
    #[test]
    fn an_entry_survives_its_trip_through_redis_bytes() {
        let bodies = [
            json!({"id": "c1", "object": "chat.completion", "created": 7, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Canberra."}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                    "prompt_tokens_details": {"cached_tokens": 4}}}),
            json!({"id": "c2", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": null, "reasoning_content": "think",
                        "tool_calls": [{"id": "t1", "type": "function",
                            "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}]}),
        ];
        for b in bodies {
            let response = crate::protocol::openai::response_from_value(b).unwrap();
            let e = Entry {
                response: response.clone(),
                stored: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                expires: Instant::now(),
                cost_micros: 42,
                bytes: 1,
                origin: Origin {
                    key: "a".into(),
                    models: vec!["m".into(), "n".into()],
                },
            };
            let back = decode(&encode(&e), Duration::from_secs(5)).unwrap();
            // What a client is sent from it is the same (the canonical form may spell out a
            // zero the writer adds anyway).
            let shown = |r: &crate::protocol::ChatResponse| {
                serde_json::to_value(crate::protocol::openai::ResponseBody {
                    resp: r,
                    report: None,
                })
                .unwrap()
            };
            assert_eq!(shown(&back.response), shown(&response));
            assert_eq!(back.response.choices, response.choices);
            assert_eq!(back.stored, e.stored);
            assert_eq!(back.cost_micros, 42);
            assert_eq!(&*back.origin.key, "a");
            assert_eq!(back.origin.models.len(), 2);
        }
        assert!(decode(b"not lz4", Duration::ZERO).is_none());
    }

    #[test]
    fn a_question_survives_and_expires() {
        let now = SystemTime::now();
        let b = encode_question(&[0.5, -0.25], "hi there", now + Duration::from_secs(9));
        let (v, t) = decode_question(&b, now).unwrap();
        assert_eq!(v, vec![0.5, -0.25]);
        assert_eq!(t, "hi there");
        assert!(decode_question(&b, now + Duration::from_secs(10)).is_none());
        assert!(decode_question(&b[..10], now).is_none());
    }
}
