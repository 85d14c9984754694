//! The response cache, exact: the same request again is answered from the cache in the
//! client's protocol, whole or streamed, without calling the upstream; what changes the answer
//! misses; `Cache-Control` and `x-switchyard-cache-ttl` are obeyed; one key never reads
//! another's entries; what is never cached says so.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::support::*;

#[tokio::test]
async fn the_same_question_again_is_answered_from_the_cache_whole_or_streamed() {
    let (up, gw) = cached_gateway("Canberra").await;
    let (st, cache, _, first) = chat_as(&gw, KEY, &[], question(json!({}))).await;
    assert_eq!((st, cache.as_str()), (200, "miss"));
    let (st, cache, age, again) = chat_as(&gw, KEY, &[], question(json!({}))).await;
    assert_eq!((st, cache.as_str()), (200, "hit"));
    assert!(age.parse::<u64>().is_ok(), "age {age:?}");
    assert_eq!(text_of(&again), text_of(&first));
    assert_eq!(up.requests(), 1, "a hit reached the upstream");
    // Streamed: the same answer, as a stream, still without the upstream.
    let r = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[],
            question(json!({"stream": true})),
        )
        .await;
    assert_eq!(header(&r, "x-switchyard-cache"), "hit");
    let body = r.text().await.unwrap();
    assert_eq!(sse_text(&body), text_of(&first));
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert_eq!(up.requests(), 1);
    // The log says which was which.
    let rows = gw.admin_requests().await;
    let mut seen: Vec<&str> = rows.iter().filter_map(|r| r["cache"].as_str()).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["hit", "hit", "miss"]);
    // And the metrics count them.
    let text = metrics_text(&gw.url).await;
    for (result, n) in [("hit", 2), ("miss", 1), ("bypass", 0)] {
        let line = format!("switchyard_cache_requests_total{{result=\"{result}\"}} {n}");
        assert!(text.lines().any(|l| l == line), "{line} not in {text}");
    }
}

#[tokio::test]
async fn what_changes_the_answer_misses_and_what_cannot_hits() {
    let (_up, gw) = cached_gateway("Canberra").await;
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "miss");
    // (what changed, the cache's answer)
    let cases = [
        (json!({"user": "someone"}), "hit"),
        (json!({"metadata": {"run": "7"}}), "hit"),
        (json!({"temperature": 0.9}), "miss"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}),
            "miss",
        ),
        (
            json!({"messages": [{"role": "system", "content": "Answer in two words."},
            {"role": "user", "content": "What is the capital of Australia?"}]}),
            "miss",
        ),
        (json!({"n": 2}), "bypass"),
    ];
    for (extra, want) in cases {
        let (st, got, _, _) = chat_as(&gw, KEY, &[], question(extra.clone())).await;
        assert_eq!((st, got.as_str()), (200, want), "{extra}");
    }
    // A request that is never cached says why.
    let r = gw
        .post_as("/v1/chat/completions", KEY, &[], question(json!({"n": 2})))
        .await;
    assert_eq!(header(&r, "x-switchyard-cache-bypass"), "n_above_1");
}

#[tokio::test]
async fn cache_control_and_the_ttl_header_are_obeyed() {
    let (up, gw) = cached_gateway("Canberra").await;
    // no-store: neither looked up nor kept.
    let nostore = [("cache-control", "no-store")];
    assert_eq!(
        chat_as(&gw, KEY, &nostore, question(json!({}))).await.1,
        "bypass"
    );
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "miss");
    // no-cache: not looked up (the upstream answers), the answer kept again.
    let nocache = [("cache-control", "no-cache")];
    let before = up.requests();
    assert_eq!(
        chat_as(&gw, KEY, &nocache, question(json!({}))).await.1,
        "miss"
    );
    assert_eq!(up.requests(), before + 1);
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "hit");
    // A one-second TTL: a hit now, a miss once it has passed.
    let other = question(json!({"max_tokens": 5}));
    let ttl = [("x-switchyard-cache-ttl", "1")];
    assert_eq!(chat_as(&gw, KEY, &ttl, other.clone()).await.1, "miss");
    assert_eq!(said(&gw, KEY, other.clone()).await, "hit");
    until("the entry to expire", Duration::from_secs(5), async || {
        // Asked with the TTL again, so that a miss stores it for one second only, too.
        let got = chat_as(&gw, KEY, &ttl, other.clone()).await.1;
        got == "miss"
    })
    .await;
}

#[tokio::test]
async fn one_key_never_reads_anothers_entries() {
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway_full(
        "",
        "\n[[keys]]\nname = \"other\"\nkey = \"sk-other-key-0001\"",
        &format!(
            "{CACHE}\n{}",
            models_channel("a", &up.base_url(), &["m"], "")
        ),
    )
    .await;
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "miss");
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "hit");
    // The very same request from another key: its own miss, the upstream called.
    let before = up.requests();
    assert_eq!(
        said(&gw, "sk-other-key-0001", question(json!({}))).await,
        "miss"
    );
    assert_eq!(up.requests(), before + 1);
    assert_eq!(
        said(&gw, "sk-other-key-0001", question(json!({}))).await,
        "hit"
    );
}

#[tokio::test]
async fn without_a_cache_nothing_is_said() {
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway(&models_channel("a", &up.base_url(), &["m"], "")).await;
    for _ in 0..2 {
        let (st, cache, _, _) = chat_as(&gw, KEY, &[], question(json!({}))).await;
        assert_eq!((st, cache.as_str()), (200, ""));
    }
    assert_eq!(up.requests(), 2);
}

#[tokio::test]
async fn a_hit_calls_no_upstream_and_costs_no_budget() {
    // A priced channel and a budget the first answer nearly spends.
    let (up, gw) = priced_gateway("0.1", "").await;
    let q = question(json!({"max_tokens": 5}));
    let (st, cache, _, _) = chat_as(&gw, KEY, &[], q.clone()).await;
    assert_eq!((st, cache.as_str()), (200, "miss"));
    // Another question no longer fits the budget...
    let other = question(json!({"max_tokens": 5, "messages": [
        {"role": "user", "content": "And the capital of Austria?"}]}));
    let (st, _, _, body) = chat_as(&gw, KEY, &[], other).await;
    assert_eq!(st, 429, "{body}");
    assert!(body.contains("budget_exceeded"), "{body}");
    // ...but the question asked before is answered from the cache, for nothing.
    for _ in 0..3 {
        let (st, cache, _, _) = chat_as(&gw, KEY, &[], q.clone()).await;
        assert_eq!((st, cache.as_str()), (200, "hit"));
    }
    assert_eq!(up.requests(), 1);
    // The ledger: each hit a row of the `cache` channel, costing nothing and saving what the
    // answer cost when it was made.
    let (paid, hits) = (usage_row(&gw, "a").await, usage_row(&gw, "cache").await);
    let first_cost = paid["cost_micros"].as_i64().unwrap();
    assert!(first_cost > 0, "{paid}");
    assert_eq!(hits["requests"], 3, "{hits}");
    assert_eq!(hits["cost_micros"], 0);
    assert_eq!(hits["input_tokens"], 0);
    assert_eq!(hits["cache_saved_micros"].as_i64(), Some(3 * first_cost));
}

#[tokio::test]
async fn a_streamed_answer_is_kept_only_when_it_completes() {
    let (up, gw) = cached_gateway("Canberra is the capital").await;
    let streamed = |v: Value| {
        let mut v = v;
        v["stream"] = json!(true);
        v
    };
    let r = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[],
            streamed(question(json!({}))),
        )
        .await;
    assert_eq!(header(&r, "x-switchyard-cache"), "miss");
    let _ = r.text().await.unwrap();
    // Kept whole when it ended: the same question, not streamed, is a hit with its text.
    let (st, cache, _, body) = chat_as(&gw, KEY, &[], question(json!({}))).await;
    assert_eq!((st, cache.as_str()), (200, "hit"));
    assert_eq!(text_of(&body), "Canberra is the capital");
    assert_eq!(up.requests(), 1);
    // A stream cut after its commit point is never kept.
    up.set_spec(after_chunks(2, true));
    let other = question(json!({"max_tokens": 7}));
    let r = gw
        .post_as("/v1/chat/completions", KEY, &[], streamed(other.clone()))
        .await;
    let _ = r.text().await;
    up.set_spec(text_spec("whole"));
    let (st, cache, _, _) = chat_as(&gw, KEY, &[], other).await;
    assert_eq!((st, cache.as_str()), (200, "miss"));
}

#[tokio::test]
async fn admins_see_the_cache_and_clear_it_by_key_by_model_or_whole() {
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway_full(
        "",
        "\n[[keys]]\nname = \"other\"\nkey = \"sk-other-key-0001\"",
        &format!(
            "{CACHE}\n{}",
            models_channel("a", &up.base_url(), &["m", "m2"], "")
        ),
    )
    .await;
    let on = |model: &str| {
        let mut q = question(json!({}));
        q["model"] = json!(model);
        q
    };
    for (key, model) in [(KEY, "m"), (KEY, "m2"), ("sk-other-key-0001", "m")] {
        assert_eq!(chat_as(&gw, key, &[], on(model)).await.1, "miss");
    }
    assert_eq!(said(&gw, KEY, on("m")).await, "hit");
    let stats = get_json(&format!("{}/admin/cache", gw.url), Some(ADMIN)).await;
    assert_eq!(stats["enabled"], true);
    assert_eq!(stats["entries"], 3, "{stats}");
    assert_eq!(
        (stats["hits"].as_u64(), stats["misses"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(stats["bytes"].as_u64().unwrap() > 0);
    let clear = async |query: &str| -> Value {
        client()
            .delete(format!("{}/admin/cache{query}", gw.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    };
    // By key: only what that key stored goes.
    assert_eq!(clear("?key=other").await["removed"], 1);
    assert_eq!(said(&gw, "sk-other-key-0001", on("m")).await, "miss");
    assert_eq!(said(&gw, KEY, on("m")).await, "hit");
    // By model, then everything.
    assert_eq!(clear("?model=m2").await["removed"], 1);
    assert_eq!(said(&gw, KEY, on("m2")).await, "miss");
    assert_eq!(clear("").await["removed"], 3);
    assert_eq!(said(&gw, KEY, on("m")).await, "miss");
    // Each clearing is an event, naming the admin and the filter.
    let url = format!("{}/admin/events", gw.url);
    until(
        "three cache.cleared events",
        Duration::from_secs(5),
        async || {
            let events = get_json(&url, Some(ADMIN)).await;
            let n = events["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "cache.cleared" && e["data"]["admin"] == "admin")
                .count();
            if n == 3 { Ok(()) } else { Err(events) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_hit_is_written_in_each_client_protocol_whole_and_streamed() {
    let (up, gw) = cached_gateway("Canberra is the capital").await;
    for proto in ["openai", "responses", "anthropic", "gemini"] {
        let before = up.requests();
        // (stream, what the cache must say): the first asks the upstream, the rest replay it.
        for (stream, want) in [(false, "miss"), (false, "hit"), (true, "hit")] {
            let (path, headers, mut body) = ask(proto, "m", stream);
            if proto == "responses" {
                // A response the API keeps is never cached (below): Codex's way.
                body["store"] = json!(false);
            }
            let r = post_in(&gw.url, &path, &headers, body).await;
            assert_eq!(r.status(), 200, "{proto} stream={stream}");
            assert_eq!(
                header(&r, "x-switchyard-cache"),
                want,
                "{proto} stream={stream}"
            );
            let text = r.text().await.unwrap();
            assert_eq!(
                answer_text(proto, &text, stream),
                "Canberra is the capital",
                "{proto} stream={stream}: {text}"
            );
        }
        assert_eq!(
            up.requests(),
            before + 1,
            "{proto}: a hit reached the upstream"
        );
    }
}

#[tokio::test]
async fn a_group_scope_shares_inside_the_groups_only() {
    let up = mock(text_spec("Canberra")).await;
    let keys = "groups = [\"red\"]\n\
        [[keys]]\nname = \"red-2\"\nkey = \"sk-red-two-0001\"\ngroups = [\"red\"]\n\
        [[keys]]\nname = \"blue\"\nkey = \"sk-blue-key-0001\"\ngroups = [\"blue\"]";
    let channels = format!(
        "[cache]\nenabled = true\nscope = \"group\"\n\n{}{}",
        models_channel("r", &up.base_url(), &["m"], "groups = [\"red\"]"),
        models_channel("b", &up.base_url(), &["m"], "groups = [\"blue\"]"),
    );
    let gw = gateway_full("", keys, &channels).await;
    assert_eq!(said(&gw, KEY, question(json!({}))).await, "miss");
    // Another key of the same group reads it; a key of another group does not.
    assert_eq!(
        said(&gw, "sk-red-two-0001", question(json!({}))).await,
        "hit"
    );
    assert_eq!(
        said(&gw, "sk-blue-key-0001", question(json!({}))).await,
        "miss"
    );
}

#[tokio::test]
async fn a_kept_responses_request_bypasses_and_a_scoped_admin_cannot_clear() {
    let up = mock(text_spec("Canberra")).await;
    let gw = gateway_full(
        "",
        "\n[[admins]]\nname = \"scoped\"\ntoken = \"scoped-admin-token-0001\"\nrole = \"admin\"\ngroups = [\"team-b\"]",
        &format!("{CACHE}\n{}", models_channel("a", &up.base_url(), &["m"], "")),
    )
    .await;
    let (path, headers, mut body) = ask("responses", "m", false);
    body["store"] = json!(true);
    let r = post_in(&gw.url, &path, &headers, body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-switchyard-cache"), "bypass");
    assert_eq!(header(&r, "x-switchyard-cache-bypass"), "kept_response");
    // An admin limited to groups reads the figures, and may not clear.
    let stats = get_json(
        &format!("{}/admin/cache", gw.url),
        Some("scoped-admin-token-0001"),
    )
    .await;
    assert_eq!(stats["enabled"], true);
    let r = client()
        .delete(format!("{}/admin/cache", gw.url))
        .bearer_auth("scoped-admin-token-0001")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}
