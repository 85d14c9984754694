//! Embedders: hashed character n-grams (in-process, weak) and any channel serving OpenAI
//! `/v1/embeddings` (a sidecar call: built from scratch, none of the client's headers).

use serde_json::{Value, json};

use std::time::Duration;

use crate::config::{EmbedderSpec, Snapshot};
use crate::health::{Health, Key, Verdict};
use crate::protocol::EmbeddingsRequest;
use crate::provider::Via;

/// Why a router could not score a prompt. Every one fails open to the catchall.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the request has no user text to route by")]
    NoPrompt,
    #[error("the embedder channel failed: {0}")]
    Upstream(String),
    #[error("the embedder answered something that is not an embedding: {0}")]
    Malformed(String),
    #[error("the prompt's embedding has {got} dimensions, the examples' {want}")]
    Dimension { got: usize, want: usize },
    #[error("the local embedder is not in this build (model_dir {0})")]
    LocalUnavailable(String),
    #[error("the local embedder: {0}")]
    LocalLoad(String),
    #[error("the local embedder's queue is full")]
    Busy,
}

/// Characters of a text sent to an embedding channel, at most (~2k tokens).
const MAX_EMBED_CHARS: usize = 8_000;

/// The first `max` characters of `s` (on a character boundary).
fn truncated(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Dimensions of the hashed embedder.
const HASHED_DIMS: usize = 512;

/// Character trigrams and words of the lowercased text, hashed (FNV-1a: stable everywhere)
/// into signed buckets. Matches spelling, not meaning: a fallback only.
pub fn hashed(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; HASHED_DIMS];
    let lower = text.to_lowercase();
    let mut add = |feature: &[u8], weight: f32| {
        let h = feature.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        v[(h % HASHED_DIMS as u64) as usize] += sign * weight;
    };
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        add(word.as_bytes(), 1.0);
        let padded: Vec<char> = format!(" {word} ").chars().collect();
        for w in padded.windows(3) {
            let s: String = w.iter().collect();
            add(s.as_bytes(), 0.5);
        }
    }
    v
}

/// Embeds `texts` with the router's embedder, one vector per text, in order.
pub(super) async fn embed(
    snap: &Snapshot,
    health: &Health,
    locals: &super::Locals,
    spec: &EmbedderSpec,
    texts: &[String],
    within: Duration,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    match spec {
        EmbedderSpec::Hashed => Ok(texts.iter().map(|t| hashed(t)).collect()),
        EmbedderSpec::Local { model_dir } => {
            tokio::time::timeout(within, locals.embed(model_dir, texts))
                .await
                .map_err(|_| EmbedError::Upstream("timed out".into()))?
        }
        EmbedderSpec::Channel { channel, model } => {
            let Some(ch) = snap.channels.get(*channel) else {
                return Err(EmbedError::Upstream("the channel is gone".into()));
            };
            if !ch.enabled {
                return Err(EmbedError::Upstream("the channel is disabled".into()));
            }
            // The embedder channel's health is kept like any channel's: a dead embedder opens
            // its circuit, and requests then skip the call instead of waiting it out.
            let key = Key {
                channel: ch.name.clone(),
                model: ch.breaker.per_model.then(|| model.clone()),
            };
            if health
                .standing(&key, &snap.health, &ch.breaker)
                .skip
                .is_some()
            {
                return Err(EmbedError::Upstream("its circuit is open".into()));
            }
            // The channel's own name for the model, when it maps one.
            let upstream = snap
                .models
                .get(&**model)
                .and_then(|rs| rs.iter().find(|r| r.channel == *channel))
                .map_or_else(|| model.clone(), |r| r.upstream_model.clone());
            // Long prompts are cut: the start says what is asked, and the embedding endpoint
            // would refuse input past its context.
            let input: Vec<&str> = texts
                .iter()
                .map(|t| truncated(t, MAX_EMBED_CHARS))
                .collect();
            let req = EmbeddingsRequest {
                model: upstream.to_string(),
                input: json!(input),
                extra: serde_json::Map::new(),
                hops: 0,
            };
            let slot = health
                .pools
                .reserve(&ch.name, &ch.credentials, &upstream, &[], 0)
                .map_err(|_| EmbedError::Upstream("no credential with headroom".into()))?;
            let cred = slot.as_ref().map(|r| r.index);
            let t0 = std::time::Instant::now();
            let answer = tokio::time::timeout(
                within.min(ch.timeout),
                ch.upstream.embeddings(&req, &upstream, Via::bare(cred)),
            )
            .await;
            let latency = t0.elapsed();
            let parsed = match answer {
                Err(_) => Err(EmbedError::Upstream("timed out".into())),
                Ok(Err(e)) => Err(EmbedError::Upstream(e.to_string())),
                Ok(Ok(v)) => vectors(&v, texts.len()),
            };
            let verdict = match &parsed {
                Ok(_) => Verdict::Success { latency },
                Err(_) => Verdict::Failure { latency },
            };
            health.record(&key, &snap.health, &ch.breaker, verdict);
            parsed
        }
    }
}

/// `data[i].embedding` by `data[i].index`, every component a number.
fn vectors(answer: &Value, n: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |m: &str| EmbedError::Malformed(m.to_string());
    let data = answer["data"]
        .as_array()
        .ok_or_else(|| bad("no data array"))?;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (pos, item) in data.iter().enumerate() {
        let i = match item.get("index") {
            None => pos,
            Some(v) => {
                v.as_u64()
                    .ok_or_else(|| bad("an index that is not a number"))? as usize
            }
        };
        let slot = out.get_mut(i).ok_or_else(|| bad("an index out of range"))?;
        let comps = item["embedding"]
            .as_array()
            .ok_or_else(|| bad("an embedding that is not an array"))?;
        if comps.is_empty() {
            return Err(bad("an empty embedding"));
        }
        let v = comps
            .iter()
            .map(|c| c.as_f64().map(|x| x as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad("a component that is not a number"))?;
        *slot = Some(v);
    }
    out.into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("an input without its embedding"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_read_by_index_and_every_defect_is_an_error() {
        let ok = json!({"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1, 0]}]});
        assert_eq!(
            vectors(&ok, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        for bad in [
            json!({}),
            json!({"data": [{"index": 0, "embedding": null}]}),
            json!({"data": [{"index": 0, "embedding": [1, "x"]}]}),
            json!({"data": [{"index": 5, "embedding": [1]}]}),
            json!({"data": [{"index": 0, "embedding": []}]}),
            json!({"data": []}),
        ] {
            assert!(vectors(&bad, 1).is_err(), "{bad}");
        }
    }
}
