//! Session affinity (in-memory store): bind, keep, TTL expiry, unbind after consecutive failures,
//! a bound channel whose circuit is open, opt-out channels, `prompt_cache_key`, implicit keys.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec};

use crate::support::*;

/// Three equal channels in one tier serving `m`; `extra[i]` goes into channel i.
async fn three_equal(extra: [&str; 3]) -> ([MockServer; 3], Gateway) {
    three_equal_with("", "", extra).await
}

/// As [`three_equal`], with lines for the test key's table and top-level tables (`[affinity]`)
/// before the channels.
async fn three_equal_with(
    key_extra: &str,
    top: &str,
    extra: [&str; 3],
) -> ([MockServer; 3], Gateway) {
    let m = [
        mock(text_spec("x")).await,
        mock(text_spec("y")).await,
        mock(text_spec("z")).await,
    ];
    let chans: String = ["x", "y", "z"]
        .iter()
        .zip(&m)
        .zip(extra)
        .map(|((n, up), e)| models_channel(n, &up.base_url(), &["m"], e))
        .collect();
    let gw = gateway_full("", key_extra, &format!("{top}\n{chans}")).await;
    (m, gw)
}

fn index(name: &str) -> usize {
    ["x", "y", "z"].iter().position(|n| *n == name).unwrap()
}

fn failing(text: &str) -> MockSpec {
    faulty(text, status(500))
}

#[tokio::test]
async fn a_session_stays_on_the_channel_that_served_its_first_turn() {
    let (_m, gw) = three_equal(["", "", ""]).await;
    let (st, first, aff) = session_turn(&gw, "conv-1").await;
    assert_eq!((st, aff.as_str()), (200, "new"));
    for _ in 0..12 {
        let (_, ch, aff) = session_turn(&gw, "conv-1").await;
        assert_eq!(ch, first);
        assert_eq!(aff, "kept");
    }
    // Streams too: the headers at the commit point say so.
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-session-id", "conv-1")],
            chat_body(true),
        )
        .await;
    assert_eq!(header(&resp, "x-switchyard-channel"), first);
    assert_eq!(header(&resp, "x-switchyard-affinity"), "kept");
    assert!(!sse_text(&resp.text().await.unwrap()).is_empty());
    // Without a session id the normal weighted order spreads the load.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..30 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(header(&resp, "x-switchyard-affinity"), "");
        seen.insert(header(&resp, "x-switchyard-channel").to_string());
    }
    assert!(seen.len() > 1, "{seen:?}");
    // The log has the session's short hash, never the id, and what happened.
    let rows = gw.admin_requests().await;
    let row = rows.iter().find(|r| r["affinity"] == "new").unwrap();
    let tag = row["session"].as_str().unwrap();
    assert_eq!(tag.len(), 12);
    assert!(!rows.iter().any(|r| r.to_string().contains("conv-1")));
}

#[tokio::test]
async fn the_binding_expires_after_its_ttl_without_use_and_is_refreshed_by_use() {
    let (_m, gw) = three_equal(["", "", ""]).await;
    assert_eq!(session_turn(&gw, "s").await.2, "new");
    // Used every 20 h: a 24 h TTL never runs out.
    for _ in 0..3 {
        gw.clock.advance(Duration::from_secs(20 * 3600));
        assert_eq!(session_turn(&gw, "s").await.2, "kept");
    }
    gw.clock.advance(Duration::from_secs(24 * 3600 + 1));
    assert_eq!(session_turn(&gw, "s").await.2, "new");
}

#[tokio::test]
async fn three_consecutive_failures_of_the_bound_channel_move_the_binding() {
    failures_move_the_binding("").await;
}

#[tokio::test]
async fn three_consecutive_failures_move_the_binding_in_redis() {
    failures_move_the_binding(&redis_state("fail3")).await;
}

#[tokio::test]
async fn a_bound_channel_whose_circuit_is_open_is_skipped_at_once() {
    open_circuit_moves_the_binding("").await;
}

#[tokio::test]
async fn a_bound_channel_whose_circuit_is_open_is_skipped_at_once_in_redis() {
    open_circuit_moves_the_binding(&redis_state("open")).await;
}

#[tokio::test]
async fn a_session_stays_on_its_channel_in_redis() {
    let (_m, gw) = three_equal_with("", &redis_state("keep"), ["", "", ""]).await;
    wait_connected(&gw, true).await;
    let (_, first, aff) = session_turn(&gw, "conv-r").await;
    assert_eq!(aff, "new");
    for _ in 0..6 {
        assert_eq!(
            session_turn(&gw, "conv-r").await,
            (200, first.clone(), "kept".into())
        );
    }
}

async fn failures_move_the_binding(top: &str) {
    let no_breaker = "circuit_breaker = { enabled = false }";
    let (m, gw) = three_equal_with("", top, [no_breaker, no_breaker, no_breaker]).await;
    if !top.is_empty() {
        wait_connected(&gw, true).await;
    }
    let (_, bound, _) = session_turn(&gw, "s").await;
    let b = index(&bound);
    m[b].set_spec(failing("down"));
    // Two failures: served elsewhere, the binding stays (the bound channel is still tried first).
    for _ in 0..2 {
        let (st, ch, aff) = session_turn(&gw, "s").await;
        assert_eq!(st, 200);
        assert_ne!(ch, bound);
        assert_eq!(aff, "kept");
    }
    // The third clears it; the channel that served becomes the binding.
    let (_, moved_to, aff) = session_turn(&gw, "s").await;
    assert_eq!(aff, "moved");
    assert_ne!(moved_to, bound);
    let calls = m[b].requests();
    for _ in 0..5 {
        let (_, ch, aff) = session_turn(&gw, "s").await;
        assert_eq!((ch.as_str(), aff.as_str()), (moved_to.as_str(), "kept"));
    }
    // The old channel is no longer tried for this session.
    assert_eq!(m[b].requests(), calls);
}

async fn open_circuit_moves_the_binding(top: &str) {
    let breaker = "[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600";
    let (m, gw) = three_equal_with("", top, [breaker, breaker, breaker]).await;
    if !top.is_empty() {
        wait_connected(&gw, true).await;
    }
    let (_, bound, _) = session_turn(&gw, "s").await;
    let b = index(&bound);
    m[b].set_spec(failing("down"));
    // One failure opens its circuit; the request fails over (binding kept: one failure of three).
    assert_eq!(session_turn(&gw, "s").await.2, "kept");
    let calls = m[b].requests();
    // Next turn: the open channel is not called, the binding moves.
    let (st, ch, aff) = session_turn(&gw, "s").await;
    assert_eq!((st, aff.as_str()), (200, "moved"));
    assert_ne!(ch, bound);
    assert_eq!(m[b].requests(), calls);
}

#[tokio::test]
async fn an_opted_out_channel_is_never_bound() {
    opted_out_is_never_bound("").await;
}

#[tokio::test]
async fn an_opted_out_channel_is_never_bound_in_redis() {
    opted_out_is_never_bound(&redis_state("optout")).await;
}

async fn opted_out_is_never_bound(top: &str) {
    let only = mock(text_spec("only")).await;
    let gw = gateway_full(
        "",
        "",
        &format!(
            "{top}\n{}",
            models_channel("shared-pool", &only.base_url(), &["m"], "affinity = false")
        ),
    )
    .await;
    if !top.is_empty() {
        wait_connected(&gw, true).await;
    }
    for _ in 0..3 {
        let (st, ch, aff) = session_turn(&gw, "s").await;
        assert_eq!((st, ch.as_str(), aff.as_str()), (200, "shared-pool", ""));
    }
}

#[tokio::test]
async fn prompt_cache_key_binds_and_implicit_affinity_binds_what_providers_cache() {
    let (_m, gw) = three_equal(["", "", ""]).await;
    let body = |extra: Value| {
        let mut b = json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a coder."},
            {"role": "user", "content": "fix the bug"}]});
        if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        b
    };
    let resp = gw.chat(body(json!({"prompt_cache_key": "pck-1"}))).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "new");
    let first = header(&resp, "x-switchyard-channel").to_string();
    for _ in 0..8 {
        let resp = gw.chat(body(json!({"prompt_cache_key": "pck-1"}))).await;
        assert_eq!(header(&resp, "x-switchyard-channel"), first);
        assert_eq!(header(&resp, "x-switchyard-affinity"), "kept");
    }
    // "auto" (the default): a short system prompt without tools is not bound (no provider
    // caches it, so the strategy spreads such conversations)...
    let resp = gw.chat(body(json!({}))).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "");
    // ...one with tools is, and one whose system prompt is over 1,024 tokens.
    let tools = json!({"tools": [{"type": "function",
        "function": {"name": "read", "parameters": {"type": "object"}}}]});
    let resp = gw.chat(body(tools.clone())).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "new");
    let mut long = body(json!({}));
    long["messages"][0]["content"] = json!("Follow the rules. ".repeat(250));
    let resp = gw.chat(long.clone()).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "new");
    // Just under the limit: not bound.
    long["messages"][0]["content"] = json!("x".repeat(4096));
    let resp = gw.chat(long).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "");
    // false: nothing without an id is bound, tools or not.
    let (_m3, gw3) = three_equal_with("", "[affinity]\nimplicit = false\n", ["", "", ""]).await;
    let resp = gw3.chat(body(tools)).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "");

    // On: the conversation's start is the key, so later turns (more messages) stay put.
    let (_m2, gw2) = three_equal_with("", "[affinity]\nimplicit = true\n", ["", "", ""]).await;
    let resp = gw2.chat(body(json!({}))).await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "new");
    let first = header(&resp, "x-switchyard-channel").to_string();
    for i in 0..8 {
        let mut b = body(json!({}));
        b["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": format!("step {i}")}),
            json!({"role": "user", "content": "go on"}),
        ]);
        let resp = gw2.chat(b).await;
        assert_eq!(header(&resp, "x-switchyard-channel"), first);
        assert_eq!(header(&resp, "x-switchyard-affinity"), "kept");
    }
}

#[tokio::test]
async fn sessions_of_different_keys_never_share_a_binding() {
    let (_m, gw) = three_equal_with(
        "\n[[keys]]\nname = \"other\"\nkey = \"sk-other-key-0001\"\n",
        "",
        ["", "", ""],
    )
    .await;
    assert_eq!(session_turn(&gw, "same-id").await.2, "new");
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            "sk-other-key-0001",
            &[("x-session-id", "same-id")],
            chat_body(false),
        )
        .await;
    assert_eq!(header(&resp, "x-switchyard-affinity"), "new");
}

#[tokio::test]
async fn a_briefly_unavailable_bound_channel_keeps_the_binding() {
    let (m, gw) = three_equal(["", "", ""]).await;
    let (_, bound, _) = session_turn(&gw, "s").await;
    let b = index(&bound);
    // A 429 for ten minutes: the keyless channel cools (one failure of three: kept).
    m[b].set_spec(faulty(
        "busy",
        switchyard::provider::mock::Fault {
            status: Some(429),
            retry_after_seconds: Some(600),
            ..Default::default()
        },
    ));
    let (st, ch, aff) = session_turn(&gw, "s").await;
    assert_eq!((st, aff.as_str()), (200, "kept"));
    assert_ne!(ch, bound);
    // While it cools it is skipped, not called, and the conversation keeps its channel.
    let calls = m[b].requests();
    for _ in 0..3 {
        let (st, ch, aff) = session_turn(&gw, "s").await;
        assert_eq!((st, aff.as_str()), (200, "kept"));
        assert_ne!(ch, bound);
    }
    assert_eq!(m[b].requests(), calls);
    // Back after the cooldown: the session is on its channel again.
    m[b].set_spec(text_spec("back"));
    gw.clock.advance(Duration::from_secs(601));
    assert_eq!(session_turn(&gw, "s").await, (200, bound, "kept".into()));
}

#[tokio::test]
async fn coding_agents_own_session_headers_bind_their_conversations() {
    let (_m, gw) = three_equal(["", "", ""]).await;
    // Claude Code's header on the Anthropic API (with its `?beta=true`), Codex's on the
    // Responses API: each keeps its conversation on one channel.
    let claude =
        json!({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let codex = json!({"model": "m", "input": "hi", "store": false});
    for (path, header_name, body) in [
        ("/v1/messages?beta=true", "x-claude-code-session-id", claude),
        ("/v1/responses", "session-id", codex),
    ] {
        let mut first = None;
        for turn in 0..8 {
            let resp = gw
                .post_as(path, KEY, &[(header_name, "agent-session-7")], body.clone())
                .await;
            assert_eq!(resp.status(), 200, "{path}");
            let ch = header(&resp, "x-switchyard-channel").to_string();
            let aff = header(&resp, "x-switchyard-affinity").to_string();
            match &first {
                None => {
                    // The same id through another header is the same session.
                    assert_eq!(
                        aff,
                        if path.contains("messages") {
                            "new"
                        } else {
                            "kept"
                        }
                    );
                    first = Some(ch);
                }
                Some(f) => {
                    assert_eq!(&ch, f, "{path} turn {turn}");
                    assert_eq!(aff, "kept");
                }
            }
        }
    }
}

/// The upstream key the mock's `n`-th recorded request came with.
fn key_of(m: &MockServer, n: usize) -> String {
    let r = &m.received()[n];
    let auth = r.headers["authorization"].to_str().unwrap();
    auth.trim_start_matches("Bearer ").to_string()
}

#[tokio::test]
async fn a_session_keeps_its_key_and_moves_with_it_when_the_key_is_cooling() {
    // One channel with two keys: without a binding the pool takes them in turn.
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "[[channels]]\nname = \"pool\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         api_keys = [\"sk-up-first-0001\", \"sk-up-second-0002\"]\nmodels = [\"m\"]\n\n",
        up.base_url()
    ))
    .await;
    assert_eq!(
        session_turn(&gw, "s").await,
        (200, "pool".into(), "new".into())
    );
    let first = key_of(&up, 0);
    // Other traffic turns the rotation (one request, then two, so that taking the keys in
    // turn would land the session on the other one); its turns stay on its key (its cache).
    for i in 0..4 {
        for _ in 0..=(i % 2) {
            let r = gw.chat(chat_body(false)).await;
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await;
        }
        let n = up.received().len();
        assert_eq!(session_turn(&gw, "s").await.2, "kept");
        assert_eq!(key_of(&up, n), first, "turn {i} left its key");
    }
    // Its key answers 429: the other key serves, and the binding moves with it.
    let spec = MockSpec {
        per_key: [(first.clone(), status(429))].into(),
        ..text_spec("ok")
    };
    up.set_spec(spec);
    let before = up.received().len();
    assert_eq!(
        session_turn(&gw, "s").await,
        (200, "pool".into(), "moved".into())
    );
    let second = key_of(&up, before + 1);
    assert_ne!(second, first);
    // The first key is well again; the session stays on the key it moved to.
    up.set_spec(text_spec("ok"));
    gw.clock.advance(std::time::Duration::from_secs(120));
    for _ in 0..3 {
        let n = up.received().len();
        assert_eq!(session_turn(&gw, "s").await.2, "kept");
        assert_eq!(key_of(&up, n), second);
    }
}
