//! Model chains (`models`, `fallback_models`, key defaults), `redundancy` (timeouts, `on`),
//! exhaustion codes, redirects, groups, route explain, loop and retry-storm guards.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec};

use crate::support::*;

/// One mock per model: `a`, `b`, `c`, each behind its own channel serving only that model.
async fn three(a: MockSpec, b: MockSpec, c: MockSpec) -> [MockServer; 3] {
    [mock(a).await, mock(b).await, mock(c).await]
}

fn channels(m: &[MockServer; 3], extra: &str) -> String {
    ["a", "b", "c"]
        .iter()
        .zip(m)
        .map(|(name, up)| models_channel(&format!("ch-{name}"), &up.base_url(), &[name], extra))
        .collect()
}

/// A gateway in front of [`three`] mocks, one channel per model.
async fn abc(a: MockSpec, b: MockSpec, c: MockSpec) -> ([MockServer; 3], Gateway) {
    let m = three(a, b, c).await;
    let gw = gateway(&channels(&m, "")).await;
    (m, gw)
}

/// As [`abc`], with lines for the test key's table (and top-level tables after them).
async fn abc_keyed(
    a: MockSpec,
    b: MockSpec,
    c: MockSpec,
    key_extra: &str,
) -> ([MockServer; 3], Gateway) {
    let m = three(a, b, c).await;
    let gw = gateway_full("", key_extra, &channels(&m, "")).await;
    (m, gw)
}

/// Model `a` answers after 3 s, `b` at once ("from b"); `extra` goes into every channel.
async fn slow_a(extra: &str) -> ([MockServer; 3], Gateway) {
    let slow = MockSpec {
        ttft_ms: 3_000,
        ..text_spec("slow a")
    };
    let m = three(slow, text_spec("from b"), text_spec("c")).await;
    let gw = gateway(&channels(&m, extra)).await;
    (m, gw)
}

/// A chat request and how long its answer (headers, for streams) took.
async fn timed(gw: &Gateway, fields: Value, stream: bool) -> (reqwest::Response, Duration) {
    let t0 = Instant::now();
    let resp = gw.chat(ask(fields, stream)).await;
    (resp, t0.elapsed())
}

fn ask(model_fields: Value, stream: bool) -> Value {
    let mut body = json!({"stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    if let (Some(b), Some(f)) = (body.as_object_mut(), model_fields.as_object()) {
        b.extend(f.clone());
    }
    body
}

fn models_of(attempts: &Value) -> Vec<String> {
    attempts
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["model"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn models_is_the_chain_and_the_report_names_requested_and_served() {
    let (m, gw) = abc(
        faulty("a", status(500)),
        text_spec("from b"),
        text_spec("c"),
    )
    .await;
    let resp = gw
        .chat(ask(json!({"model": "c", "models": ["a", "b", "c"]}), false))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-requested-model"), "a");
    assert_eq!(header(&resp, "x-switchyard-model"), "b");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from b");
    let ext = &v["switchyard"];
    assert_eq!(ext["requested_model"], "a");
    assert_eq!(ext["served_model"], "b");
    assert_eq!(models_of(&ext["failover"]["attempts"]), ["a", "b"]);
    assert_eq!(
        reasons(&ext["failover"]["attempts"]),
        ["server_error", "ok"]
    );
    // `models` overrides `model`: c is never called.
    assert_eq!(m[2].requests(), 0);

    // Streams: the same chain, headers true at commit.
    let resp = gw.chat(ask(json!({"models": ["a", "b"]}), true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-requested-model"), "a");
    assert_eq!(header(&resp, "x-switchyard-model"), "b");
    assert_eq!(sse_text(&resp.text().await.unwrap()), "from b");
}

#[tokio::test]
async fn fallback_models_follow_model_in_order_through_every_class() {
    let (m, gw) = abc(
        faulty("a", status(500)),
        faulty("b", status(429)),
        text_spec("from c"),
    )
    .await;
    let resp = gw
        .chat(ask(
            json!({"model": "a", "fallback_models": ["b", "c"]}),
            false,
        ))
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["switchyard"]["served_model"], "c");
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["server_error", "rate_limit", "ok"]
    );
    // The upstream got its own model name, never the chain fields.
    let got = &m[2].received()[0].body;
    assert_eq!(got["model"], "c");
    assert!(got.get("fallback_models").is_none() && got.get("models").is_none());
}

#[tokio::test]
async fn key_defaults_start_at_the_named_models_position() {
    let (m, gw) = abc_keyed(
        faulty("a", status(500)),
        text_spec("from b"),
        text_spec("from c"),
        "failover_defaults = { models = [\"c\", \"a\", \"b\"] }",
    )
    .await;
    // a → b (c comes before a in the defaults, so it is not part of a's chain).
    let v: Value = gw
        .chat(ask(json!({"model": "a"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["switchyard"]["served_model"], "b");
    assert_eq!(m[2].requests(), 0);
    // c alone is served by c, with no report (nothing moved).
    let v: Value = gw
        .chat(ask(json!({"model": "c"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from c");
    assert!(v.get("switchyard").is_none());
}

#[tokio::test]
async fn a_model_not_in_the_defaults_stands_alone_and_keeps_its_single_model_code() {
    let (m, gw) = abc_keyed(
        faulty("a", status(500)),
        text_spec("b"),
        text_spec("c"),
        "failover_defaults = { models = [\"b\", \"c\"] }",
    )
    .await;
    let resp = gw.chat(ask(json!({"model": "a"}), false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_attempts_failed");
    assert_eq!(m[1].requests() + m[2].requests(), 0);
}

#[tokio::test]
async fn chain_shape_errors_are_400s_naming_the_field_in_the_clients_envelope() {
    let (m, gw) = abc(text_spec("a"), text_spec("b"), text_spec("c")).await;
    let cases = [
        (json!({"models": ["a", "b", "c", "d"]}), "models"),
        (
            json!({"models": ["a"], "fallback_models": ["b"]}),
            "fallback_models",
        ),
        (
            json!({"model": "a", "redundancy": {"timeout_ms": 500}}),
            "redundancy.timeout_ms",
        ),
        (
            json!({"model": "a", "redundancy": {"first_token_timeout_ms": 70000}}),
            "redundancy.first_token_timeout_ms",
        ),
        (
            json!({"model": "a", "redundancy": {"on": ["client_error"]}}),
            "redundancy.on[0]",
        ),
        (
            json!({"models": ["a", {"model": "b", "timeout_ms": 400000}]}),
            "models[1].timeout_ms",
        ),
    ];
    for (fields, param) in cases {
        let e = error_envelope(gw.chat(ask(fields.clone(), false)).await, 400).await;
        assert_eq!(e["param"], param, "{fields}");
    }
    // Duplicates collapse before the cap: four names, three models.
    let resp = gw
        .chat(ask(json!({"models": ["a", "b", "a", "c"]}), false))
        .await;
    assert_eq!(resp.status(), 200);
    // A chain naming a model that does not exist is a 404 before any call.
    let e = error_envelope(
        gw.chat(ask(json!({"models": ["a", "zz"]}), false)).await,
        404,
    )
    .await;
    assert_eq!(e["code"], "model_not_found");
    assert_eq!(m.iter().map(MockServer::requests).sum::<u64>(), 1);

    // Anthropic ingress: the same fields, Anthropic's envelope.
    let resp = gw
        .post_as(
            "/v1/messages",
            KEY,
            &[],
            json!({"model": "a", "max_tokens": 10, "fallback_models": ["b", "c", "zz", "yy"],
                   "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn anthropic_ingress_follows_the_chain() {
    let (_m, gw) = abc(
        faulty("a", status(503)),
        text_spec("from b"),
        text_spec("c"),
    )
    .await;
    let resp = gw
        .post_as(
            "/v1/messages",
            KEY,
            &[],
            json!({"model": "a", "max_tokens": 10, "fallback_models": ["b"],
                   "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "b");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["content"][0]["text"], "from b");
    assert_eq!(v["switchyard"]["requested_model"], "a");
}

#[tokio::test]
async fn a_class_not_in_on_stops_the_chain() {
    let (m, gw) = abc(faulty("a", status(500)), text_spec("b"), text_spec("c")).await;
    let resp = gw
        .chat(ask(
            json!({"models": ["a", "b"], "redundancy": {"on": ["rate_limit", "timeout"]}}),
            false,
        ))
        .await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_models_failed");
    assert_eq!(models_of(&e["attempts"]), ["a"]);
    assert_eq!(m[1].requests(), 0);
    // With server_error in `on`, the same request moves on.
    let resp = gw
        .chat(ask(
            json!({"models": ["a", "b"], "redundancy": {"on": ["server_error"]}}),
            false,
        ))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(m[1].requests(), 1);
}

#[tokio::test]
async fn exhausted_chains_are_429_when_all_rate_limited_else_502() {
    let (_m, gw) = abc(
        faulty("a", status(429)),
        faulty("b", status(429)),
        faulty("c", status(500)),
    )
    .await;
    let resp = gw.chat(ask(json!({"models": ["a", "b"]}), false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    assert!(!header(&resp, "retry-after").is_empty());
    let e = error_envelope(resp, 429).await;
    assert_eq!(e["code"], "all_rate_limited");
    let resp = gw.chat(ask(json!({"models": ["c", "b"]}), false)).await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_models_failed");
    // c failed; b (its key still cooling from the 429) was skipped.
    assert_eq!(reasons(&e["attempts"])[0], "server_error");
    assert_eq!(models_of(&e["attempts"]), ["c", "b"]);
}

#[tokio::test]
async fn per_entry_timeouts_override_the_chain_and_do_not_hurt_health() {
    let (_m, gw) = slow_a("").await;
    let (resp, took) = timed(
        &gw,
        json!({"models": [{"model": "a", "timeout_ms": 1000}, "b"],
               "redundancy": {"timeout_ms": 60000}}),
        false,
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["timeout", "ok"]
    );
    // Streams: first_token_timeout_ms, chain-wide this time.
    let t0 = Instant::now();
    let resp = gw
        .chat(ask(
            json!({"models": ["a", "b"], "redundancy": {"first_token_timeout_ms": 500}}),
            true,
        ))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(sse_text(&resp.text().await.unwrap()), "from b");
    assert!(t0.elapsed() < Duration::from_millis(2500));
    // The caller's tighter limits said nothing about channel a: no verdict was recorded.
    let health = gw.admin_health().await;
    let a = health.iter().find(|r| r["channel"] == "ch-a").unwrap();
    assert_eq!(a["verdicts"], 0, "{a}");
    assert_eq!(a["score"], 100.0, "{a}");
}

#[tokio::test]
async fn a_channels_own_tighter_timeout_still_counts_against_it() {
    let (_m, gw) = slow_a("timeout_ms = 1000").await;
    let resp = gw
        .chat(ask(
            json!({"models": ["a", "b"], "redundancy": {"timeout_ms": 5000}}),
            false,
        ))
        .await;
    assert_eq!(resp.status(), 200);
    let health = gw.admin_health().await;
    let a = health.iter().find(|r| r["channel"] == "ch-a").unwrap();
    assert_eq!(a["verdicts"], 1, "{a}");
}

#[tokio::test]
async fn a_model_whose_channels_are_all_open_moves_the_chain_on_at_once() {
    let m = three(
        faulty("a", status(500)),
        text_spec("from b"),
        text_spec("c"),
    )
    .await;
    let gw = gateway(&channels(
        &m,
        "[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600\n",
    ))
    .await;
    // One failure opens a's circuit (the single-model request fails: 502).
    assert_eq!(
        gw.chat(ask(json!({"model": "a"}), false)).await.status(),
        502
    );
    assert_eq!(m[0].requests(), 1);
    let t0 = Instant::now();
    let resp = gw.chat(ask(json!({"models": ["a", "b"]}), false)).await;
    assert_eq!(resp.status(), 200);
    assert!(t0.elapsed() < Duration::from_millis(500));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["circuit_open", "ok"]
    );
    assert_eq!(m[0].requests(), 1, "the open channel is not called");
}

#[tokio::test]
async fn redirects_key_rules_before_global_first_match_wins_and_are_logged() {
    let (_m, gw) = abc_keyed(
        text_spec("from a"),
        text_spec("from b"),
        text_spec("from c"),
        "redirects = [{ from = \"gpt-4o\", to = \"a\" }]\n\n\
         [[redirects]]\nfrom = \"gpt-4*\"\nto = \"b\"\n\n\
         [[redirects]]\nfrom = \"gpt-4-turbo\"\nto = \"c\"\n\n\
         [[redirects]]\nfrom = \"claude-(.*)\"\nto = \"$1\"\nkind = \"regex\"\n",
    )
    .await;
    let served = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    // The key's exact rule beats the global glob.
    let resp = gw.chat(ask(json!({"model": "gpt-4o"}), false)).await;
    assert_eq!(header(&resp, "x-switchyard-requested-model"), "gpt-4o");
    assert_eq!(header(&resp, "x-switchyard-model"), "a");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(served(&v), "from a");
    assert_eq!(
        v["switchyard"]["redirects"][0]["rule"],
        "keys[0].redirects[0]"
    );
    assert_eq!(v["switchyard"]["requested_model"], "gpt-4o");
    // The first global match wins: the glob before the exact rule listed after it.
    let v: Value = gw
        .chat(ask(json!({"model": "gpt-4-turbo"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(served(&v), "from b");
    // A regex rewrites with its capture.
    let v: Value = gw
        .chat(ask(json!({"model": "claude-c"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(served(&v), "from c");
    // The log keeps what the client sent and what served it.
    let rows = gw.admin_requests().await;
    let row = rows
        .iter()
        .find(|r| r["requested_model"] == "gpt-4o")
        .unwrap();
    assert_eq!(row["served_model"], "a");
}

#[tokio::test]
async fn groups_filter_channels_order_them_and_limit_the_model_list() {
    let prem = mock(text_spec("premium")).await;
    let std = mock(text_spec("standard")).await;
    let only = mock(text_spec("exclusive")).await;
    let chans = format!(
        "{}{}{}",
        models_channel("std", &std.base_url(), &["m"], "priority = 1"),
        models_channel(
            "prem",
            &prem.base_url(),
            &["m"],
            "priority = 9\ngroups = [\"premium\"]"
        ),
        models_channel("excl", &only.base_url(), &["x"], "groups = [\"premium\"]"),
    );
    let gw = gateway_full(
        "",
        "groups = [\"premium\", \"default\"]\n\n\
         [[keys]]\nname = \"cheap\"\nkey = \"sk-cheap-key-0001\"\ngroups = [\"default\"]\n",
        &chans,
    )
    .await;
    // Group order first: the premium channel serves although its priority is lower.
    let v: Value = gw
        .chat(ask(json!({"model": "m"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "premium");
    let v: Value = gw
        .post_as(
            "/v1/chat/completions",
            "sk-cheap-key-0001",
            &[],
            ask(json!({"model": "m"}), false),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "standard");
    // A model only another group serves does not exist for this key.
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            "sk-cheap-key-0001",
            &[],
            ask(json!({"model": "x"}), false),
        )
        .await;
    assert_eq!(error_envelope(resp, 404).await["code"], "model_not_found");
    assert_eq!(only.requests(), 0);
    // /v1/models lists what each key can reach.
    let list = |key: &'static str| {
        let url = format!("{}/v1/models", gw.url);
        async move {
            let v: Value = client()
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let mut ids: Vec<String> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(list(KEY).await, ["m", "x"]);
    assert_eq!(list("sk-cheap-key-0001").await, ["m"]);
}

#[tokio::test]
async fn explain_shows_the_plan_a_real_request_then_follows() {
    let first = mock(faulty("first", status(500))).await;
    let second = mock(text_spec("second")).await;
    let b = mock(text_spec("from b")).await;
    let chans = format!(
        "{}{}{}{}{}",
        models_channel(
            "secret-team",
            &second.base_url(),
            &["a"],
            "groups = [\"other\"]"
        ),
        models_channel(
            "t1",
            &first.base_url(),
            &["a"],
            "priority = 1\nweight = 3\n[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600"
        ),
        models_channel("t2", &second.base_url(), &["a"], "priority = 2"),
        models_channel("off", &second.base_url(), &["a"], "enabled = false"),
        models_channel("bee", &b.base_url(), &["b"], ""),
    );
    let gw = gateway_full(
        "",
        "groups = [\"default\"]\n\
         failover_defaults = { models = [\"a\", \"b\"], timeout_ms = 20000 }\n\n\
         [[redirects]]\nfrom = \"alias\"\nto = \"a\"\n",
        &chans,
    )
    .await;
    let body = ask(json!({"model": "alias"}), false);
    let resp = gw
        .post_as("/v1/route/explain", KEY, &[], body.clone())
        .await;
    assert_eq!(resp.status(), 200);
    let plan: Value = resp.json().await.unwrap();
    assert_eq!(plan["requested_model"], "alias");
    assert_eq!(plan["source"], "key_defaults");
    let steps = plan["chain"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0]["model"], "a");
    assert_eq!(steps[0]["redirect"], "redirects[0]");
    assert_eq!(steps[0]["timeout_ms"], 20000);
    let order: Vec<&str> = steps[0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["t1", "t2"]);
    assert_eq!(steps[0]["candidates"][0]["tier"], 1);
    assert_eq!(steps[0]["candidates"][0]["weight"], 3);
    assert_eq!(steps[0]["candidates"][0]["health_score"], 100.0);
    assert_eq!(steps[0]["candidates"][0]["circuit"], "closed");
    assert_eq!(
        steps[0]["excluded"],
        json!([{"channel": "off", "reason": "disabled"}])
    );
    // Another group's channel is not shown to this key at all.
    assert!(!plan.to_string().contains("secret-team"), "{plan}");
    assert_eq!(steps[1]["candidates"][0]["channel"], "bee");
    // Explaining called no one.
    assert_eq!(first.requests() + second.requests() + b.requests(), 0);

    // The real request follows that plan: t1 fails, t2 serves.
    let v: Value = gw.chat(body.clone()).await.json().await.unwrap();
    let attempts = &v["switchyard"]["failover"]["attempts"];
    let channels: Vec<&str> = attempts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["channel"].as_str().unwrap())
        .collect();
    assert_eq!(channels, ["t1", "t2"]);
    // Now t1's circuit is open: the preview says so, and the next request skips it.
    let plan: Value = gw
        .post_as("/v1/route/explain", KEY, &[], body.clone())
        .await
        .json()
        .await
        .unwrap();
    let a = &plan["chain"][0];
    assert_eq!(a["candidates"].as_array().unwrap().len(), 1);
    assert!(
        a["excluded"]
            .as_array()
            .unwrap()
            .contains(&json!({"channel": "t1", "reason": "circuit_open"})),
        "{a}"
    );
    let v: Value = gw.chat(body).await.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["circuit_open", "ok"]
    );
    // Errors come in the client's envelope.
    let resp = gw
        .post_as("/v1/route/explain", KEY, &[], json!({"models": ["nope"]}))
        .await;
    assert_eq!(error_envelope(resp, 404).await["code"], "model_not_found");
}

#[tokio::test]
async fn too_many_hops_is_508_and_never_retried() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_with("max_hops = 2", &openai_channel("up", &up.base_url(), 1, "")).await;
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-switchyard-hops", "3")],
            chat_body(false),
        )
        .await;
    assert_eq!(header(&resp, "x-should-retry"), "false");
    assert_eq!(error_envelope(resp, 508).await["code"], "loop_detected");
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-switchyard-hops", "lots")],
            chat_body(false),
        )
        .await;
    assert_eq!(error_envelope(resp, 400).await["code"], "invalid_header");
    assert_eq!(up.requests(), 0);
    // Within the limit: served, and the upstream is told one more hop.
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-switchyard-hops", "2")],
            chat_body(false),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(up.received()[0].headers["x-switchyard-hops"], "3");
}

#[tokio::test]
async fn two_gateways_pointed_at_each_other_stop_with_508_and_do_not_fail_over() {
    let spare = mock(text_spec("spare")).await;
    // B forwards everything to A; A forwards to B, with a healthy spare in a lower tier.
    let a = gateway_with(
        "max_hops = 3",
        &openai_channel("spare", &spare.base_url(), 9, ""),
    )
    .await;
    // Each gateway presents the other's gateway key, as a chained deployment would.
    let to = |name: &str, url: &str| {
        openai_channel(name, &format!("{url}/v1"), 1, "").replace(UPSTREAM_KEY, KEY)
    };
    let b = gateway_with("max_hops = 3", &to("to-a", &a.url)).await;
    a.rewrite(&format!(
        "{}{}",
        to("to-b", &b.url),
        openai_channel("spare", &spare.base_url(), 9, "")
    ));
    // The rewrite drops the server extras; max_hops falls back to its default (5).
    assert_eq!(a.reload().await.status(), 200);
    let resp = a.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 508);
    assert_eq!(header(&resp, "x-should-retry"), "false");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "loop_detected");
    // A 508 from downstream is final: the spare was never asked, at any hop.
    assert_eq!(spare.requests(), 0);
}

/// A retry budget of 20 % (no floor, a long window) in front of `bad`, which answers 500 to
/// model `m` with its breaker off (and `bad_extra`), and a healthy channel `(name, model, extra)`.
async fn budgeted(bad_extra: &str, other: (&str, &str, &str)) -> (MockServer, MockServer, Gateway) {
    let bad = mock(faulty("bad", status(500))).await;
    let good = mock(text_spec("good")).await;
    let (name, model, extra) = other;
    let chans = format!(
        "{}{}",
        models_channel(
            "bad",
            &bad.base_url(),
            &["m"],
            &format!("{bad_extra}\ncircuit_breaker = {{ enabled = false }}")
        ),
        models_channel(name, &good.base_url(), &[model], extra),
    );
    let budget = "retry_budget = { ratio = 0.2, min_per_second = 0, window_seconds = 600 }";
    (bad, good, gateway_with(budget, &chans).await)
}

#[tokio::test]
async fn a_failover_to_a_channel_not_yet_called_is_never_refused_by_the_retry_budget() {
    // Issue 22's case: a primary that fails every request, its breaker off, and a healthy
    // backup. Each request's failover is one call to another upstream: none is refused.
    let (bad, good, gw) = budgeted("priority = 1", ("good", "m", "priority = 2")).await;
    for i in 0..400 {
        let r = gw.chat(ask(json!({"model": "m"}), false)).await;
        assert_eq!(r.status(), 200, "request {i}");
    }
    assert_eq!(bad.requests(), 400);
    assert_eq!(good.requests(), 400);
}

#[tokio::test]
async fn the_retry_budget_bounds_retries_on_a_failing_upstream() {
    let (bad, _good, gw) =
        budgeted("max_retries = 3\nretry_interval_ms = 1", ("fine", "ok", "")).await;
    // Ten requests that need no retry earn two retries (20 %).
    for _ in 0..10 {
        assert_eq!(
            gw.chat(ask(json!({"model": "ok"}), false)).await.status(),
            200
        );
    }
    // Each of these would retry `bad` three times. The 11th request may take 2 (0 < 2.2,
    // 1 < 2.2), the 12th 1 (2 < 2.4); from then on 3 retries are over 20 % of 13, 14, 15.
    let mut resps = Vec::new();
    for _ in 0..5 {
        resps.push(gw.chat(ask(json!({"model": "m"}), false)).await);
    }
    let refused = resps.remove(4);
    assert!(resps.iter().all(|r| r.status() == 502));
    assert_eq!(header(&refused, "x-should-retry"), "false");
    let e = error_envelope(refused, 502).await;
    assert_eq!(e["code"], "all_attempts_failed");
    assert_eq!(
        reasons(&e["attempts"]),
        ["server_error", "retry_budget_exhausted"]
    );
    // Five first calls and three retries: a storm on `bad` stays at 1.6 calls a request, not 4.
    assert_eq!(bad.requests(), 8);
}

#[tokio::test]
async fn the_retry_budget_is_a_deliberate_block_that_never_moves_a_chain_on() {
    let m = three(faulty("a", status(500)), text_spec("b"), text_spec("c")).await;
    let gw = gateway_with(
        "retry_budget = { ratio = 0.0, min_per_second = 0, window_seconds = 60 }",
        &channels(&m, "max_retries = 1\nretry_interval_ms = 1"),
    )
    .await;
    let resp = gw.chat(ask(json!({"models": ["a", "b"]}), false)).await;
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_models_failed");
    assert_eq!(
        reasons(&e["attempts"]),
        ["server_error", "retry_budget_exhausted"]
    );
    assert_eq!(m[0].requests(), 1);
    assert_eq!(m[1].requests(), 0);
}

#[tokio::test]
async fn a_chain_stopped_by_a_later_models_rate_limit_is_not_all_rate_limited() {
    let (m, gw) = abc(
        faulty("a", status(500)),
        faulty("b", status(429)),
        text_spec("c"),
    )
    .await;
    // a's 500 moves on (server_error is in `on`); b's 429 is not in `on` and stops the chain.
    let resp = gw
        .chat(ask(
            json!({"models": ["a", "b", "c"], "redundancy": {"on": ["server_error"]}}),
            false,
        ))
        .await;
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_models_failed");
    assert_eq!(reasons(&e["attempts"]), ["server_error", "rate_limit"]);
    assert_eq!(m[2].requests(), 0);
}

#[tokio::test]
async fn the_attempt_cap_spans_the_whole_chain() {
    let m = three(
        faulty("a", status(500)),
        faulty("b", status(500)),
        text_spec("c"),
    )
    .await;
    let gw = gateway_with("max_attempts = 2", &channels(&m, "")).await;
    let resp = gw
        .chat(ask(json!({"models": ["a", "b", "c"]}), false))
        .await;
    let e = error_envelope(resp, 502).await;
    assert_eq!(e["code"], "all_models_failed");
    assert_eq!(models_of(&e["attempts"]), ["a", "b"]);
    assert_eq!(m[2].requests(), 0);
}

#[tokio::test]
async fn a_per_entry_first_token_timeout_beats_the_chain_wide_one() {
    let (_m, gw) = slow_a("").await;
    let (resp, took) = timed(
        &gw,
        json!({"models": [{"model": "a", "first_token_timeout_ms": 500}, "b"],
               "redundancy": {"first_token_timeout_ms": 60000}}),
        true,
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "from b");
    // The first chunk carries the report: who was asked for, who served.
    let first: Value = serde_json::from_str(&sse_data(&body)[0]).unwrap();
    assert_eq!(first["switchyard"]["requested_model"], "a");
    assert_eq!(first["switchyard"]["served_model"], "b");
    assert_eq!(
        reasons(&first["switchyard"]["failover"]["attempts"]),
        ["timeout", "ok"]
    );
}

#[tokio::test]
async fn each_model_of_a_chain_is_called_in_its_own_channels_protocol() {
    let a = mock(faulty("a", status(500))).await;
    let b = mock(text_spec("from claude")).await;
    let chans = format!(
        "{}[[channels]]\nname = \"claude\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [{{ name = \"b\", upstream = \"claude-b\" }}]\n\n",
        models_channel("gpt", &a.base_url(), &["a"], ""),
        b.base_url()
    );
    let gw = gateway(&chans).await;
    let resp = gw
        .chat(ask(
            json!({"model": "a", "fallback_models": ["b"], "max_tokens": 50}),
            false,
        ))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "b");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from claude");
    // a got an OpenAI body for `a`; b an Anthropic Messages body for its upstream name.
    assert_eq!(a.received()[0].body["model"], "a");
    let got = &b.received()[0];
    assert_eq!(got.path, "/messages");
    assert_eq!(got.body["model"], "claude-b");
    assert_eq!(got.body["max_tokens"], 50);
    assert!(got.body.get("fallback_models").is_none());
    // The log charges the usage to the model that served.
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["requested_model"], "a");
    assert_eq!(rows[0]["served_model"], "b");
    assert!(
        rows[0]["output_tokens"].as_u64().is_some_and(|n| n > 0),
        "{}",
        rows[0]
    );
}

#[tokio::test]
async fn a_redirected_model_finds_its_place_in_the_key_defaults() {
    let (_m, gw) = abc_keyed(
        faulty("a", status(500)),
        text_spec("from b"),
        text_spec("c"),
        "failover_defaults = { models = [\"a\", \"b\"] }\n\n\
         [[redirects]]\nfrom = \"alias\"\nto = \"a\"\n",
    )
    .await;
    let v: Value = gw
        .chat(ask(json!({"model": "alias"}), false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["switchyard"]["requested_model"], "alias");
    assert_eq!(v["switchyard"]["served_model"], "b");
    assert_eq!(
        models_of(&v["switchyard"]["failover"]["attempts"]),
        ["a", "b"]
    );
}

#[tokio::test]
async fn embeddings_never_take_the_key_defaults_chain() {
    let (m, gw) = abc_keyed(
        faulty("a", status(500)),
        text_spec("b"),
        text_spec("c"),
        "failover_defaults = { models = [\"a\", \"b\"] }",
    )
    .await;
    // Vectors from another model would live in another space: one model only.
    let resp = gw
        .post_as(
            "/v1/embeddings",
            KEY,
            &[],
            json!({"model": "a", "input": "hi"}),
        )
        .await;
    assert_eq!(
        error_envelope(resp, 502).await["code"],
        "all_attempts_failed"
    );
    assert_eq!(m[1].requests(), 0);
}

#[tokio::test]
async fn gemini_ingress_uses_the_key_defaults() {
    let (_m, gw) = abc_keyed(
        faulty("a", status(500)),
        text_spec("from b"),
        text_spec("c"),
        "failover_defaults = { models = [\"a\", \"b\"] }",
    )
    .await;
    let resp = gw
        .post_as(
            "/v1beta/models/a:generateContent",
            KEY,
            &[],
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "b");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "from b");
}
