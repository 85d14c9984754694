//! OpenTelemetry traces, read back from a real OTLP receiver (Arize Phoenix, started once for
//! this module's one receiver test): a failed-over request's SERVER span and its two CLIENT
//! spans, with the GenAI attributes, their outcomes and their links; the client's `traceparent`
//! continued and each call's own span sent upstream; a stream's commit event; routing events;
//! an unsampled parent honoured; content only when asked for. And the standard `OTEL_*`
//! variables, without a receiver.

use serde_json::{Value, json};
use switchyard::provider::mock::MockServer;

use crate::support::*;

const CLIENT_PARENT: &str = "00f067aa0ba902b7";
const SERVER: &str = "POST /v1/chat/completions";

/// `auto` routes between two instances over `m` (the hashed embedder needs no service).
const ROUTER: &str = "[[routers]]\nmodel = \"auto\"\nembedder = { kind = \"hashed\" }\n\
    [[routers.instances]]\nname = \"chat\"\nmodel = \"m\"\nexamples = [\"say hi\"]\n\
    [[routers.instances]]\nname = \"fallback\"\nmodel = \"m\"\ncatchall = true\n";

fn traceparent(trace: &str, sampled: bool) -> String {
    let flags = if sampled { "01" } else { "00" };
    format!("00-{trace}-{CLIENT_PARENT}-{flags}")
}

/// The `traceparent` each call to `up` carried.
fn sent_traceparents(up: &MockServer) -> Vec<String> {
    up.received()
        .iter()
        .filter_map(|r| {
            r.headers
                .get("traceparent")?
                .to_str()
                .ok()
                .map(str::to_string)
        })
        .collect()
}

/// `switchyard serve` with `config_body` after a `[log]` and the test key, `env` set.
async fn serve_binary(
    config_body: &str,
    env: &[(&str, &str)],
) -> (Proc, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    let text = format!(
        "[log]\nsqlite_path = \"{}\"\n[[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n{config_body}",
        dir.path().join("log.db").display(),
    );
    std::fs::write(&config, text).expect("config");
    let cfg = config.to_str().expect("utf-8");
    let (proc, url) = spawn_listening_env(
        &["serve", "--listen", "127.0.0.1:0", "--config", cfg],
        dir.path(),
        "switchyard listening on ",
        env,
    )
    .await;
    (proc, url, dir)
}

/// A chat request for `model` in trace `trace` (sampled or not); its body.
async fn traced(url: &str, trace: &str, sampled: bool, model: &str, stream: bool) -> String {
    let body = json!({"model": model, "stream": stream,
                      "messages": [{"role": "user", "content": "say hi"}]});
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("traceparent", traceparent(trace, sampled))
        .json(&body)
        .send()
        .await
        .expect("gateway");
    assert_eq!(r.status(), 200);
    r.text().await.expect("body")
}

/// Phoenix's own view of a trace's spans (its span kind, status and events).
async fn native(p: &Phoenix, project: &str, trace: &str) -> Vec<Value> {
    let url = format!("{}/v1/projects/{project}/spans", p.url);
    let v = fetch(&url, &[("trace_id", trace)]).await.expect("phoenix");
    v["data"].as_array().cloned().unwrap_or_default()
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The events on a trace's request span, as Phoenix keeps them (once its `n` spans are in).
async fn server_events(p: &Phoenix, project: &str, trace: &str, n: usize) -> String {
    p.trace(project, trace, n).await;
    native(p, project, trace)
        .await
        .iter()
        .find(|s| s["name"] == SERVER)
        .map(|s| s["events"].to_string())
        .unwrap_or_default()
}

struct Upstreams {
    primary: MockServer,
    backup: MockServer,
}

#[tokio::test]
async fn traces_reach_a_real_otlp_receiver_with_genai_attributes_and_intact_links() {
    let Some(phoenix) = Phoenix::start().await else {
        return;
    };
    let project = format!("switchyard-{:x}", fastrand::u32(..));
    let up = Upstreams {
        primary: mock(faulty("x", status(500))).await,
        backup: mock(text_spec("one two three four")).await,
    };
    let channels = format!(
        "{}{}{}",
        models_channel(
            "primary",
            &up.primary.base_url(),
            &["m"],
            "priority = 1\ncircuit_breaker = { enabled = false }"
        ),
        models_channel("backup", &up.backup.base_url(), &["m", "k"], "priority = 2"),
        models_channel(
            "trip",
            &up.primary.base_url(),
            &["k"],
            "priority = 1\n[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600"
        ),
    );
    // The standard variables: a short batch delay, and Phoenix's project as a resource attribute.
    let resource = format!("openinference.project.name={project}");
    let env = [
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_RESOURCE_ATTRIBUTES", resource.as_str()),
    ];
    // The response cache on, but off for the models asked twice: the span says it bypassed.
    let cache = "[cache]\nenabled = true\n[[models]]\nname = \"m\"\ncache = { mode = \"off\" }\n\
                 [[models]]\nname = \"k\"\ncache = { mode = \"off\" }\n";
    let body = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\n{cache}{channels}{ROUTER}",
        phoenix.url
    );
    let (_gw, url, _dir) = serve_binary(&body, &env).await;
    let [failed_over, unsampled, streamed, tripping, skipped, routed] = [
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "6bf92f3577b34da6a3ce929d0e0e4738",
        "5bf92f3577b34da6a3ce929d0e0e4737",
        "8bf92f3577b34da6a3ce929d0e0e4730",
        "9bf92f3577b34da6a3ce929d0e0e4731",
        "abf92f3577b34da6a3ce929d0e0e4732",
    ];
    traced(&url, failed_over, true, "m", false).await;
    traced(&url, unsampled, false, "m", false).await;
    traced(&url, streamed, true, "m", true).await;
    // `trip` fails once and its circuit opens: the next request for `k` passes it over.
    traced(&url, tripping, true, "k", false).await;
    traced(&url, skipped, true, "k", false).await;
    traced(&url, routed, true, "auto", false).await;

    a_failover_is_a_request_span_over_two_call_spans(&phoenix, &project, failed_over, &up).await;
    let commit = server_events(&phoenix, &project, streamed, 3).await;
    assert!(commit.contains("switchyard.stream.commit"), "{commit}");
    // The request's span tells what routing did: a channel passed over, a semantic pick.
    let skip = server_events(&phoenix, &project, skipped, 2).await;
    for word in ["switchyard.channel.skipped", "circuit_open", "trip"] {
        assert!(skip.contains(word), "{word}: {skip}");
    }
    let pick = server_events(&phoenix, &project, routed, 2).await;
    for word in ["switchyard.semantic.decision", "chat"] {
        assert!(pick.contains(word), "{word}: {pick}");
    }
    // An unsampled parent is honoured: its trace goes upstream, unsampled, and no span of it is
    // exported (it was sent before requests whose spans are in by now).
    let sent = sent_traceparents(&up.backup);
    let flagged = format!("00-{unsampled}-");
    assert!(
        sent.iter()
            .any(|t| t.starts_with(&flagged) && t.ends_with("-00")),
        "{sent:?}"
    );
    let none = phoenix.spans(&project, unsampled).await.expect("query");
    assert!(none.is_empty(), "{none:?}");

    content_is_captured_only_when_asked(&phoenix).await;
}

/// The SERVER span under the client's, the two CLIENT spans under it with their attributes,
/// each call's own span sent upstream, and Phoenix's reading of them.
async fn a_failover_is_a_request_span_over_two_call_spans(
    phoenix: &Phoenix,
    project: &str,
    trace: &str,
    up: &Upstreams,
) {
    let spans = phoenix.trace(project, trace, 3).await;
    assert_eq!(spans.len(), 3, "{spans:?}");
    let server = by_name(&spans, SERVER);
    assert_eq!(server.len(), 1, "{spans:?}");
    let server = server[0];
    assert_eq!(server["parent_span_id"], CLIENT_PARENT);
    assert_eq!(attr(server, "http.response.status_code"), 200);
    assert_eq!(attr(server, "switchyard.channel"), "backup");
    // How the first try was chosen: primary alone in its tier.
    assert_eq!(attr(server, "switchyard.route.reason"), "weighted.alone");
    assert_eq!(attr(server, "switchyard.cache"), "bypass");
    let names: Vec<&str> = server["attributes"]
        .as_array()
        .expect("attributes")
        .iter()
        .filter_map(|a| a["key"].as_str())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("gen_ai.")),
        "the SERVER span carries no gen_ai attributes: {names:?}"
    );
    let mut calls = by_name(&spans, "chat m");
    calls.sort_by_key(|s| attr(s, "switchyard.attempt").as_i64());
    assert_eq!(calls.len(), 2, "{spans:?}");
    for c in &calls {
        assert_eq!(c["parent_span_id"], server["span_id"]);
        assert_eq!(c["trace_id"], trace);
        for (key, want) in [
            ("gen_ai.operation.name", json!("chat")),
            ("gen_ai.provider.name", json!("openai")),
            ("gen_ai.request.model", json!("m")),
            ("server.address", json!("127.0.0.1")),
            ("gen_ai.input.messages", Value::Null),
        ] {
            assert_eq!(attr(c, key), want, "{key}: {c}");
        }
    }
    let (first, second) = (calls[0], calls[1]);
    for (key, want) in [
        ("switchyard.attempt", json!(1)),
        ("switchyard.channel", json!("primary")),
        ("switchyard.outcome_class", json!("server_error")),
        ("switchyard.failover_reason", json!("server_error")),
        ("error.type", json!("server_error")),
        ("http.response.status_code", json!(500)),
    ] {
        assert_eq!(attr(first, key), want, "{key}: {first}");
    }
    for (key, want) in [
        ("switchyard.attempt", json!(2)),
        ("switchyard.channel", json!("backup")),
        ("switchyard.outcome_class", json!("ok")),
        ("error.type", Value::Null),
    ] {
        assert_eq!(attr(second, key), want, "{key}: {second}");
    }
    assert!(attr(second, "gen_ai.response.id").is_string(), "{second}");
    assert!(attr(second, "gen_ai.usage.output_tokens").as_i64() > Some(0));
    assert!(attr(second, "gen_ai.usage.input_tokens").as_i64() > Some(0));
    let reasons = attr(second, "gen_ai.response.finish_reasons").to_string();
    assert!(reasons.contains("stop"), "{second}");
    // Each call's own span went upstream as the parent of whatever the upstream records.
    let at = |s: &Value| format!("00-{trace}-{}-01", s["span_id"].as_str().unwrap_or(""));
    assert!(sent_traceparents(&up.primary).contains(&at(first)));
    assert!(sent_traceparents(&up.backup).contains(&at(second)));
    // Phoenix's own reading: the calls are LLM spans, the request is not one; the failed call
    // is an error.
    let seen = native(phoenix, project, trace).await;
    let kind = |s: &Value| {
        seen.iter()
            .find(|x| x["context"]["span_id"] == s["span_id"])
            .map(|x| (x["span_kind"].clone(), x["status_code"].clone()))
    };
    assert_eq!(kind(first), Some((json!("LLM"), json!("ERROR"))));
    assert_eq!(kind(second), Some((json!("LLM"), json!("UNSET"))));
    assert_eq!(kind(server).map(|k| k.0), Some(json!("UNKNOWN")));
}

/// `[telemetry] capture_content = true`: the prompt and completion on the call's span.
async fn content_is_captured_only_when_asked(phoenix: &Phoenix) {
    let up = mock(text_spec("the completion text")).await;
    let gw = gateway_with(
        &format!(
            "[telemetry]\notlp_endpoint = \"{}\"\ncapture_content = true",
            phoenix.url
        ),
        &openai_channel("a", &up.base_url(), 1, ""),
    )
    .await;
    let trace = "7bf92f3577b34da6a3ce929d0e0e4739";
    let r = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("traceparent", &traceparent(trace, true))],
            json!({"model": "m", "messages": [{"role": "user", "content": "the prompt text"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    let t = gw.running.state.telemetry.clone();
    tokio::task::spawn_blocking(move || t.flush())
        .await
        .expect("flushed");
    // No project resource here: Phoenix files it under `default`.
    let spans = phoenix.trace("default", trace, 2).await;
    let call = by_name(&spans, "chat m");
    let call = call.first().expect("the call's span");
    let input = attr(call, "gen_ai.input.messages").to_string();
    let output = attr(call, "gen_ai.output.messages").to_string();
    assert!(input.contains("the prompt text"), "{input}");
    assert!(output.contains("the completion text"), "{output}");
}

/// The gateway's `/metrics` sample `name`'s value.
async fn sample(url: &str, name: &str) -> Option<f64> {
    let r = client().get(format!("{url}/metrics")).send().await.ok()?;
    let text = r.text().await.ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// With no `[telemetry]` at all, the standard variables turn tracing on and pick the sampler:
/// `always_off` records nothing and tells the upstream so; `always_on` starts traces of its own.
#[tokio::test]
async fn the_standard_variables_choose_the_endpoint_and_the_sampler() {
    for (sampler, spans, flags) in [("always_off", 0.0, "-00"), ("always_on", 2.0, "-01")] {
        let up = mock(text_spec("ok")).await;
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_TRACES_SAMPLER", sampler),
        ];
        let (_gw, url, _dir) =
            serve_binary(&openai_channel("a", &up.base_url(), 1, ""), &env).await;
        let trace = "cbf92f3577b34da6a3ce929d0e0e4733";
        let mut rb = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY);
        if sampler == "always_off" {
            // Even a sampled parent: `always_off` does not follow the parent.
            rb = rb.header("traceparent", traceparent(trace, true));
        }
        let r = rb.json(&chat_body(false)).send().await.expect("gateway");
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
        let sent = sent_traceparents(&up);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(sent[0].ends_with(flags), "{sampler}: {sent:?}");
        assert_eq!(sent[0].contains(trace), sampler == "always_off", "{sent:?}");
        // Spans are built on their own thread: counted a moment after the answer.
        until(
            &format!("{sampler}: {spans} spans"),
            std::time::Duration::from_secs(10),
            async || {
                let counted = sample(&url, "switchyard_trace_spans_total").await;
                if counted == Some(spans) {
                    Ok(())
                } else {
                    Err(format!("{counted:?}"))
                }
            },
        )
        .await;
    }
}
