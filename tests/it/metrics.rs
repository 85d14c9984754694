//! `GET /metrics`: scraped by a real Prometheus, read back through its query API; the token,
//! its own listener, and cardinality bounded by the config whatever clients send.

use serde_json::{Value, json};
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

/// The gateway's `/metrics` text (with `token` as bearer, if given) and its status.
async fn scrape(url: &str, token: Option<&str>) -> (u16, String) {
    let mut rb = client().get(format!("{url}/metrics"));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let r = rb.send().await.expect("reachable");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// The sample lines of `/metrics` (comments left out).
fn samples(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

/// A failing primary and a healthy backup for `m` (priced), and an upstream that answers `r`
/// with 429: the traffic every metric below is read from.
async fn traffic_gateway(
    server_extra: &str,
) -> (Vec<switchyard::provider::mock::MockServer>, Gateway) {
    let primary = mock(faulty("x", status(500))).await;
    let backup = mock(text_spec("one two three four")).await;
    let limited = mock(MockSpec {
        fault: Some(Fault {
            status: Some(429),
            retry_after_seconds: Some(60),
            ..Fault::default()
        }),
        ..MockSpec::default()
    })
    .await;
    let channels = format!(
        "{}{}{}",
        models_channel(
            "primary",
            &primary.base_url(),
            &["m"],
            "priority = 1\ncircuit_breaker = { enabled = false }"
        ),
        models_channel(
            "backup",
            &backup.base_url(),
            &["m"],
            "priority = 2\nprice = { input = 1000, output = 2000 }"
        ),
        models_channel("limited", &limited.base_url(), &["r"], ""),
    );
    // `auto` picks between `m` and `r` by meaning (the hashed embedder needs no service).
    let router = "[[routers]]\nmodel = \"auto\"\nembedder = { kind = \"hashed\" }\n\
                  [[routers.instances]]\nname = \"chat\"\nmodel = \"m\"\nexamples = [\"say hi\"]\n\
                  [[routers.instances]]\nname = \"fallback\"\nmodel = \"m\"\ncatchall = true\n";
    // The key is in a team of its own budget: its gauges are the team's series.
    let gw = gateway_full(
        server_extra,
        "budget = { usd = 10 }\nteam = \"platform\"\n\n\
         [[teams]]\nname = \"platform\"\nbudget = { usd = 20 }\n",
        &format!("{channels}{router}"),
    )
    .await;
    (vec![primary, backup, limited], gw)
}

/// Three answers and two streams that fail over (one in a session), one routed by meaning
/// (failing over too), and a 429.
async fn drive(gw: &Gateway) {
    for _ in 0..3 {
        let r = gw.chat(chat_body(false)).await;
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
    }
    for session in ["s1", ""] {
        let headers: &[(&str, &str)] = if session.is_empty() {
            &[]
        } else {
            &[("x-session-id", "s1")]
        };
        let body =
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let r = gw.post_as("/v1/chat/completions", KEY, headers, body).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.expect("stream");
        assert!(text.contains("[DONE]"), "{text}");
    }
    let r = gw
        .chat(json!({"model": "auto", "messages": [{"role": "user", "content": "say hi"}]}))
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let r = gw
        .chat(json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    let e = error_envelope(r, 429).await;
    assert_eq!(e["code"], "all_rate_limited");
    gw.flush_log().await;
}

/// What the request log says the key spent (every row's cost).
async fn logged_spend(gw: &Gateway) -> f64 {
    gw.admin_requests()
        .await
        .iter()
        .filter_map(|r| r["cost_micros"].as_u64())
        .sum::<u64>() as f64
}

#[tokio::test]
async fn a_real_prometheus_reads_failovers_streams_429s_and_the_gateways_own_time() {
    let (_mocks, gw) = traffic_gateway("").await;
    let target = gw.url.trim_start_matches("http://").to_string();
    let Some(prom) = Prometheus::scraping(&target, None).await else {
        return;
    };
    drive(&gw).await;
    prom.expect("up{job=\"switchyard\"}", 1.0).await;
    let table: &[(&str, f64)] = &[
        (
            r#"switchyard_requests_total{ingress="openai",model="m",outcome="ok"}"#,
            5.0,
        ),
        (
            r#"switchyard_requests_total{ingress="openai",model="auto",outcome="ok"}"#,
            1.0,
        ),
        // Prometheus keeps its own `instance` (the target) and files ours as `exported_instance`.
        (
            r#"switchyard_semantic_decisions_total{router="auto",exported_instance="chat"}"#,
            1.0,
        ),
        (
            r#"switchyard_requests_total{model="r",outcome="all_rate_limited"}"#,
            1.0,
        ),
        (
            r#"switchyard_failovers_total{model="m",from_channel="primary",reason="server_error"}"#,
            6.0,
        ),
        (
            r#"switchyard_attempts_total{channel="primary",model="m",outcome_class="server_error"}"#,
            6.0,
        ),
        (
            r#"switchyard_attempts_total{channel="backup",model="m",outcome_class="ok"}"#,
            6.0,
        ),
        (
            r#"switchyard_attempts_total{channel="limited",model="r",outcome_class="rate_limit"}"#,
            1.0,
        ),
        // Every call timed, by the GenAI conventions: five failures, five answers, one 429.
        (
            r#"gen_ai_client_operation_duration_seconds_count{gen_ai_provider_name="openai",gen_ai_request_model="m",error_type="server_error"}"#,
            6.0,
        ),
        (
            r#"gen_ai_client_operation_duration_seconds_count{gen_ai_request_model="m",error_type=""}"#,
            6.0,
        ),
        (
            r#"gen_ai_client_operation_duration_seconds_count{gen_ai_request_model="r",error_type="rate_limit"}"#,
            1.0,
        ),
        (
            r#"gen_ai_client_token_usage_count{gen_ai_request_model="m",gen_ai_token_type="output"}"#,
            6.0,
        ),
        (
            r#"gen_ai_server_time_to_first_token_seconds_count{gen_ai_request_model="m"}"#,
            2.0,
        ),
        (
            r#"gen_ai_server_time_per_output_token_seconds_count{gen_ai_request_model="m"}"#,
            2.0,
        ),
        (r#"switchyard_overhead_seconds_count{stream="false"}"#, 5.0),
        (r#"switchyard_overhead_seconds_count{stream="true"}"#, 2.0),
        // Scrape-time state: the 429 cools the only key of `limited` for a minute.
        (r#"switchyard_credential_available{channel="limited"}"#, 0.0),
        (r#"switchyard_credential_available{channel="backup"}"#, 1.0),
        (r#"switchyard_circuit_state{channel="primary"}"#, 0.0),
        (
            r#"switchyard_channel_health_score{channel="backup"}"#,
            100.0,
        ),
        ("switchyard_session_bindings", 1.0),
        ("switchyard_state_connected", 1.0),
        ("switchyard_log_dropped_total", 0.0),
        (
            r#"switchyard_budget_limit_micros{key="team-a"}"#,
            10_000_000.0,
        ),
    ];
    for (expr, want) in table {
        prom.expect(expr, *want).await;
    }
    // Spend: what the log charged, by key and served model; the budget's use is the same.
    let spent = logged_spend(&gw).await;
    assert!(spent > 0.0, "the backup is priced");
    prom.expect(
        r#"switchyard_cost_micros_total{key="team-a",model="m"}"#,
        spent,
    )
    .await;
    prom.expect(r#"switchyard_budget_used_micros{key="team-a"}"#, spent)
        .await;
    prom.expect(
        r#"switchyard_budget_headroom_micros{key="team-a"}"#,
        10_000_000.0 - spent,
    )
    .await;
    prom.expect(
        r#"switchyard_team_budget_used_micros{team="platform"}"#,
        spent,
    )
    .await;
    prom.expect(
        r#"switchyard_team_budget_limit_micros{team="platform"}"#,
        20_000_000.0,
    )
    .await;
    // The gateway's own time is a small part of each request: the upstream's is not in it.
    let own = prom
        .query(r#"switchyard_overhead_seconds_sum{stream="false"}"#)
        .await
        .expect("query");
    assert!(own[0].1 > 0.0 && own[0].1 < 5.0 * 0.25, "{own:?}");
    grafana_dashboard_queries_run(&prom).await;
}

/// Every query of the dashboard in `docs/` runs in Prometheus against these series, and names
/// only metrics the gateway exposes.
async fn grafana_dashboard_queries_run(prom: &Prometheus) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana-dashboard.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard"))
        .expect("the dashboard is JSON");
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 8, "{exprs:?}");
    let exposed: Vec<String> = prom
        .query("count by (__name__) ({__name__=~\"switchyard_.+|gen_ai_.+\"})")
        .await
        .expect("names")
        .iter()
        .filter_map(|(m, _)| m["__name__"].as_str().map(str::to_string))
        .collect();
    for e in &exprs {
        let q = e
            .replace("$__rate_interval", "1m")
            .replace("$__range", "5m");
        let rows = prom.query(&q).await;
        assert!(rows.is_ok(), "{q}: {rows:?}");
        // Metric names only: label names live in `by (...)` and `{...}`.
        let labels = regex_lite::Regex::new(r"by \([^)]*\)|\{[^}]*\}").expect("regex");
        let bare = labels.replace_all(&q, "");
        let names = regex_lite::Regex::new(r"(switchyard|gen_ai)_[a-z_]+").expect("regex");
        for m in names.find_iter(&bare) {
            let base = m
                .as_str()
                .trim_end_matches("_bucket")
                .trim_end_matches("_count")
                .trim_end_matches("_sum");
            assert!(
                exposed.iter().any(|x| x.starts_with(base)),
                "{q} names {} which /metrics does not have ({exposed:?})",
                m.as_str()
            );
        }
    }
}

#[tokio::test]
async fn a_token_guards_metrics_and_a_listener_of_its_own_moves_them() {
    let up = mock(text_spec("ok")).await;
    let port = free_port();
    let gw = gateway_with(
        &format!("[metrics]\ntoken = \"scrape-secret\"\nlisten = \"127.0.0.1:{port}\""),
        &openai_channel("a", &up.base_url(), 1, ""),
    )
    .await;
    let metrics_url = format!("http://127.0.0.1:{port}");
    let (status, _) = scrape(&metrics_url, None).await;
    assert_eq!(status, 401);
    let (status, _) = scrape(&metrics_url, Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, text) = scrape(&metrics_url, Some("scrape-secret")).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE switchyard_requests_total counter"),
        "{text}"
    );
    assert!(!text.contains("scrape-secret"));
    // Not on the main listener any more.
    let (status, _) = scrape(&gw.url, Some("scrape-secret")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn metrics_off_are_not_served_and_count_nothing() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_with(
        "[metrics]\nenabled = false",
        &openai_channel("a", &up.base_url(), 1, ""),
    )
    .await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert_eq!(scrape(&gw.url, None).await.0, 404);
    assert_eq!(gw.running.state.telemetry.metrics.requests.len(), 0);
}

#[tokio::test]
async fn labels_come_from_the_config_whatever_clients_send() {
    let up = mock(text_spec("ok")).await;
    let keys = "\n[[keys]]\nname = \"team-b\"\nkey = \"sk-team-b-key-0000000\"\n";
    let gw = gateway_full(
        "[metrics]\nmax_key_labels = 1",
        keys,
        &openai_channel(
            "a",
            &up.base_url(),
            1,
            "price = { input = 1000, output = 1000 }",
        ),
    )
    .await;
    // Requests for models nobody configured, each with its own session and request id.
    for i in 0..40 {
        let body = json!({"model": format!("made-up-{i}"), "messages": [{"role": "user", "content": "hi"}]});
        let sid = format!("session-{i}");
        let r = gw
            .post_as("/v1/chat/completions", KEY, &[("x-session-id", &sid)], body)
            .await;
        assert_eq!(r.status(), 404);
    }
    let r = gw
        .post_as(
            "/v1/chat/completions",
            "sk-team-b-key-0000000",
            &[],
            chat_body(false),
        )
        .await;
    assert_eq!(r.status(), 200);
    let id = header(&r, "x-request-id").to_string();
    assert!(!id.is_empty());
    let (_, text) = scrape(&gw.url, None).await;
    let lines = samples(&text);
    let requests: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with("switchyard_requests_total"))
        .collect();
    assert_eq!(
        requests.len(),
        2,
        "one series for all the unknown models, one for m: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|l| l.contains("model=\"other\"") && l.ends_with(" 40")),
        "{requests:?}"
    );
    // The second key is past max_key_labels: its spend counts as `other`.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("switchyard_cost_micros_total{key=\"other\",model=\"m\"}")),
        "{lines:?}"
    );
    for never in [id.as_str(), "made-up-", "session-", "team-b", "127.0.0.1"] {
        assert!(!text.contains(never), "{never} must not be a label");
    }
}

#[tokio::test]
async fn an_unreachable_collector_costs_requests_nothing_but_a_counter() {
    let up = mock(text_spec("ok")).await;
    let dead = free_port();
    let gw = gateway_with(
        &format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{dead}\""),
        &openai_channel("a", &up.base_url(), 1, ""),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let t = gw.running.state.telemetry.clone();
    tokio::task::spawn_blocking(move || t.flush())
        .await
        .expect("flushed");
    let (_, text) = scrape(&gw.url, None).await;
    let failures = samples(&text)
        .into_iter()
        .find(|l| l.starts_with("switchyard_trace_export_failures_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    assert!(failures.is_some_and(|n| n >= 1), "{text}");
    assert!(
        samples(&text).contains(&"switchyard_trace_spans_total 10"),
        "{text}"
    );
}

#[tokio::test]
async fn session_bindings_on_redis_are_every_replicas() {
    let up = mock(text_spec("ok")).await;
    let state = redis_state("bindings-metric");
    let channel = openai_channel("a", &up.base_url(), 1, "");
    let (one, two) = (
        gateway_with(&state, &channel).await,
        gateway_with(&state, &channel).await,
    );
    wait_connected(&one, true).await;
    wait_connected(&two, true).await;
    for id in ["alpha", "beta"] {
        assert_eq!(session_turn(&one, id).await.0, 200);
    }
    let (_, text) = scrape(&two.url, None).await;
    let lines = samples(&text);
    assert!(
        lines.contains(&"switchyard_session_bindings 2.0"),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"switchyard_state_connected 1.0"),
        "{lines:?}"
    );
}

/// Every metric `docs/observability.md` lists is one `/metrics` has, and the other way round.
#[tokio::test]
async fn the_documented_metrics_are_the_exposed_ones() {
    let (_mocks, gw) = traffic_gateway("").await;
    drive(&gw).await;
    let (_, text) = scrape(&gw.url, None).await;
    // Prometheus text 0.0.4 names a counter's family with `_total`, an info's with `_info`.
    let exposed: std::collections::BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(|n| {
            n.trim_end_matches("_total")
                .trim_end_matches("_info")
                .to_string()
        })
        .collect();
    let doc = include_str!("../../docs/observability.md");
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `switchyard_") || l.starts_with("| `gen_ai_"))
        .filter_map(|l| l.split('`').nth(1))
        // OpenMetrics names a counter's family without `_total`, an info's without `_info`.
        .map(|n| {
            n.trim_end_matches("_total")
                .trim_end_matches("_info")
                .to_string()
        })
        .collect();
    assert_eq!(documented, exposed);
}

/// `/metrics` answers Prometheus text 0.0.4 unless asked for OpenMetrics; `promtool` takes the
/// first, and prometheus_client's parser for each form reads the same series from both.
#[tokio::test]
async fn both_forms_pass_their_reference_parsers() {
    let Some(py) = std::env::var("SWITCHYARD_PY")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        skipping("SWITCHYARD_PY (with prometheus_client) is needed");
        return;
    };
    let (_mocks, gw) = traffic_gateway("").await;
    drive(&gw).await;
    let get = async |accept: Option<&str>| {
        let mut rb = client().get(format!("{}/metrics", gw.url));
        if let Some(a) = accept {
            rb = rb.header("accept", a);
        }
        let r = rb.send().await.unwrap();
        let kind = header(&r, "content-type").to_string();
        (kind, r.text().await.unwrap())
    };
    let (kind, classic) = get(None).await;
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    // Prometheus's own scrape header asks for OpenMetrics first.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (kind, om) = get(Some(prometheus)).await;
    assert_eq!(
        kind,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n") && !classic.contains("# EOF"));
    let dir = tempfile::tempdir().unwrap();
    let (c, o) = (dir.path().join("classic.txt"), dir.path().join("om.txt"));
    std::fs::write(&c, &classic).unwrap();
    std::fs::write(&o, &om).unwrap();
    let promtool = std::env::var("SWITCHYARD_PROMETHEUS")
        .ok()
        .map(|p| std::path::Path::new(&p).with_file_name("promtool"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "promtool".into());
    let out = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&c).unwrap())
        .output()
        .expect("promtool runs");
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "promtool: {said}");
    // Each form through its own parser: the same families, the same request count.
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families as classic
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
def read(parse, path):
    out = {}
    for f in parse(open(path).read()):
        for s in f.samples:
            if s.name == "switchyard_requests_total":
                out[tuple(sorted(s.labels.items()))] = s.value
                # An info is a gauge named `…_info` in 0.0.4, an info named without it in OpenMetrics.
        out[("family", f.name.removesuffix("_info"))] = 1
    return out
a, b = read(classic, sys.argv[1]), read(om, sys.argv[2])
assert a == b, (sorted(set(a) ^ set(b)), )
assert any(k[0] != "family" for k in a), "no request counted"
print("families", sum(1 for k in a if k[0] == "family"))
"#;
    let out = std::process::Command::new(&py)
        .args(["-c", script])
        .arg(&c)
        .arg(&o)
        .output()
        .expect("python runs");
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("families"), "{said}");
}
