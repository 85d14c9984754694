//! Prompt caches kept warm, measured: 200 ten-turn conversations of a coding agent (tools, a
//! shared system prompt, no session id) through four channels of two keys each, whose mocks
//! simulate a provider's prompt cache per key. With the defaults (implicit affinity "auto",
//! bindings to the channel and its key) the share of prompt tokens served from cache is what one
//! upstream alone gets; with sessions off it falls (towards 1/8 for the previous turn's prefix;
//! older turns that landed on the same key still hit); a bound channel that dies
//! halfway loses no conversation, and each moves and hits again on its new upstream.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec};

use crate::support::*;

const CONVERSATIONS: usize = 200;
const TURNS: usize = 10;

fn cached_mock() -> MockSpec {
    MockSpec {
        prompt_cache: true,
        ..text_spec("done")
    }
}

/// `n` channels serving `m` in one tier, each with `keys` upstream keys, in front of `mocks`.
fn channels(mocks: &[MockServer], keys: usize) -> String {
    mocks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let list: Vec<String> = (0..keys).map(|k| format!("\"sk-up-{i}-{k}\"")).collect();
            format!(
                "[[channels]]\nname = \"c{i}\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
                 api_keys = [{}]\nmodels = [\"m\"]\n\n",
                m.base_url(),
                list.join(", ")
            )
        })
        .collect()
}

/// Conversation `c` at turn `t`: the agent's short system prompt and tools, its own first
/// request (a file pasted in: what makes each conversation's prefix its own), then `t`
/// exchanges, each with a tool's output.
fn turn(c: usize, t: usize) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": format!("Task {c}: fix the failing test in this file.\n{}",
            format!("fn step_{c}() {{ assert_eq!(compute({c}), {c}); }}\n").repeat(40))}),
    ];
    for i in 0..t {
        messages.push(
            json!({"role": "assistant", "content": format!("Step {i} of task {c}: reading.")}),
        );
        messages.push(
            json!({"role": "user", "content": format!("Tool output {i}: {}",
            format!("line {i} of module {c} ok; ").repeat(16))}),
        );
    }
    json!({"model": "m", "messages": messages, "tools": [{"type": "function", "function": {
        "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]})
}

/// One answered turn: the conversation, the channel, the affinity header, prompt and cached tokens.
#[derive(Clone)]
struct Turn {
    conversation: usize,
    channel: String,
    affinity: String,
    prompt: u64,
    cached: u64,
}

/// Turn `t` of every conversation, 16 at a time; every one must be answered.
async fn turns(gw: &Gateway, t: usize) -> Vec<Turn> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (next, http, url) = (next.clone(), client(), gw.chat_url());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if c >= CONVERSATIONS {
                    return out;
                }
                let r = http
                    .post(&url)
                    .bearer_auth(KEY)
                    .json(&turn(c, t))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "conversation {c} turn {t}");
                let channel = header(&r, "x-switchyard-channel").to_string();
                let affinity = header(&r, "x-switchyard-affinity").to_string();
                let v: Value = r.json().await.unwrap();
                out.push(Turn {
                    conversation: c,
                    channel,
                    affinity,
                    prompt: v["usage"]["prompt_tokens"].as_u64().unwrap(),
                    cached: v["usage"]["prompt_tokens_details"]["cached_tokens"]
                        .as_u64()
                        .unwrap_or(0),
                });
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// The share of prompt tokens served from cache over `turns`.
fn hit_share(turns: &[Turn]) -> f64 {
    let prompt: u64 = turns.iter().map(|t| t.prompt).sum();
    let cached: u64 = turns.iter().map(|t| t.cached).sum();
    cached as f64 / prompt as f64
}

/// Every turn of every conversation through a gateway in front of `mocks`; `kill` (turn,
/// channel) makes that channel's mock answer 503 to everything from that turn on.
async fn conversations(
    gw: &Gateway,
    mocks: &[MockServer],
    kill: Option<(usize, usize)>,
) -> Vec<Vec<Turn>> {
    let mut by_turn = Vec::new();
    for t in 0..TURNS {
        if let Some((at, ch)) = kill
            && at == t
        {
            mocks[ch].set_spec(faulty("dead", status(503)));
        }
        by_turn.push(turns(gw, t).await);
    }
    by_turn
}

#[tokio::test]
async fn conversations_keep_their_prompt_cache_through_the_defaults() {
    // One upstream with one key: the most a cache can give these conversations.
    let alone = [mock(cached_mock()).await];
    let gw = gateway(&channels(&alone, 1)).await;
    let base = hit_share(&conversations(&gw, &alone, None).await.concat());
    // Four channels × two keys, the defaults.
    let four: Vec<MockServer> =
        futures_util::future::join_all((0..4).map(|_| mock(cached_mock()))).await;
    let gw = gateway(&channels(&four, 2)).await;
    let defaults = hit_share(&conversations(&gw, &four, None).await.concat());
    // The same without sessions: every turn drawn anew over the eight keys.
    let four_off: Vec<MockServer> =
        futures_util::future::join_all((0..4).map(|_| mock(cached_mock()))).await;
    let gw = gateway(&format!(
        "[affinity]\nimplicit = false\n\n{}",
        channels(&four_off, 2)
    ))
    .await;
    let off = hit_share(&conversations(&gw, &four_off, None).await.concat());
    eprintln!(
        "prompt-cache hit share over {CONVERSATIONS} conversations x {TURNS} turns: one upstream {base:.3}, \
         4 channels x 2 keys with the defaults {defaults:.3} ({:.3} of one upstream), sessions off {off:.3} ({:.3})",
        defaults / base,
        off / base
    );
    assert!(base > 0.5, "the simulated cache hits: {base}");
    assert!(
        defaults >= 0.95 * base,
        "defaults {defaults} vs alone {base}"
    );
    assert!(off < 0.6 * base, "sessions off {off} vs alone {base}");
}

#[tokio::test]
async fn a_bound_channel_that_dies_loses_no_conversation_and_each_hits_again_elsewhere() {
    let four: Vec<MockServer> =
        futures_util::future::join_all((0..4).map(|_| mock(cached_mock()))).await;
    let gw = gateway(&channels(&four, 2)).await;
    // c0 answers 503 to everything from turn 5 on (every turn must still be answered).
    let by_turn = conversations(&gw, &four, Some((TURNS / 2, 0))).await;
    let on_dead: Vec<usize> = by_turn[TURNS / 2 - 1]
        .iter()
        .filter(|t| t.channel == "c0")
        .map(|t| t.conversation)
        .collect();
    assert!(
        on_dead.len() >= CONVERSATIONS / 8,
        "c0 served {} conversations",
        on_dead.len()
    );
    let mut moved: HashMap<usize, bool> = HashMap::new();
    for t in by_turn[TURNS / 2..].iter().flatten() {
        assert_ne!(t.channel, "c0", "a dead channel served");
        if t.affinity == "moved" {
            moved.insert(t.conversation, true);
        }
    }
    let last = &by_turn[TURNS - 1];
    for c in &on_dead {
        assert!(moved.contains_key(c), "conversation {c} was never re-bound");
        let t = last.iter().find(|t| t.conversation == *c).unwrap();
        assert!(
            t.cached > 0,
            "conversation {c} does not hit on its new upstream ({})",
            t.channel
        );
    }
    let after = hit_share(&by_turn[TURNS - 2..].concat());
    eprintln!(
        "c0 killed at turn {}: {} conversations moved, hit share of the last two turns {after:.3}",
        TURNS / 2,
        on_dead.len()
    );
}

#[tokio::test]
async fn what_the_cache_served_and_saved_is_in_usage_and_metrics() {
    let up = mock(cached_mock()).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"c0\"\nprovider = \"openai\"\nbase_url = \"{}\"\napi_keys = [\"sk-up-0-0\"]\n\
         models = [\"m\"]\nprice = {{ input = 3.0, output = 15.0, cached_input = 0.3 }}\n\n",
        up.base_url()
    ))
    .await;
    // The same conversation twice: the second turn's prefix is cached.
    for t in 0..2 {
        let r = gw.chat(turn(7, t)).await;
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
    }
    gw.flush_log().await;
    let usage = get_json(
        &format!("{}/admin/usage?group_by=channel", gw.url),
        Some(ADMIN),
    )
    .await;
    let row = &usage["rows"][0];
    assert_eq!(row["channel"], "c0", "{usage}");
    let (input, cached) = (
        row["input_tokens"].as_i64().unwrap(),
        row["cached_input_tokens"].as_i64().unwrap(),
    );
    assert!(cached > 0 && cached < input, "{row}");
    let ratio = row["cache_hit_ratio"].as_f64().unwrap();
    assert!((ratio - cached as f64 / input as f64).abs() < 1e-3, "{row}");
    // Saved: the cached tokens at the input rate less the cached rate, $2.70 per 1M.
    let saved = row["cache_saved_micros"].as_i64().unwrap();
    let expected = cached * 2_700_000 / 1_000_000;
    assert!(
        (saved - expected).abs() <= 2,
        "saved {saved}, expected {expected}: {row}"
    );
    assert_eq!(row["cache_write_tokens"], 0);
    // The metrics carry the cached share by gen_ai_token_type.
    let text = metrics_text(&gw.url).await;
    let sum = |kind: &str| -> f64 {
        text.lines()
            .find(|l| {
                l.starts_with("gen_ai_client_token_usage_sum")
                    && l.contains(&format!("gen_ai_token_type=\"{kind}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(sum("cached_input"), cached as f64, "{text}");
    assert_eq!(sum("input"), input as f64);
    assert_eq!(sum("cache_write"), 0.0);
}
