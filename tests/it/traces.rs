//! OpenTelemetry traces, read back from a real OTLP receiver (Arize Phoenix, started once for
//! this module's one test): a failed-over request's SERVER span and its two CLIENT spans, with
//! the GenAI attributes, their outcomes and their links; the client's `traceparent` continued
//! and each call's own span sent upstream; a stream's commit event; an unsampled parent
//! honoured; content only when asked for.

use serde_json::{Value, json};
use switchyard::provider::mock::MockServer;

use crate::support::*;

const CLIENT_PARENT: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str, sampled: bool) -> String {
    format!(
        "00-{trace}-{CLIENT_PARENT}-{}",
        if sampled { "01" } else { "00" }
    )
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

/// Phoenix's own view of a trace's spans (its span kind, status and events), by span id.
async fn native(p: &Phoenix, project: &str, trace: &str) -> Vec<Value> {
    let url = reqwest::Url::parse_with_params(
        &format!("{}/v1/projects/{project}/spans", p.url),
        [("trace_id", trace)],
    )
    .expect("url");
    let v: Value = client()
        .get(url)
        .send()
        .await
        .expect("phoenix")
        .json()
        .await
        .expect("json");
    v["data"].as_array().cloned().unwrap_or_default()
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

#[tokio::test]
async fn traces_reach_a_real_otlp_receiver_with_genai_attributes_and_intact_links() {
    let Some(phoenix) = Phoenix::start().await else {
        return;
    };
    let project = format!("switchyard-{:x}", fastrand::u32(..));
    let primary = mock(faulty("x", status(500))).await;
    let backup = mock(text_spec("one two three four")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nsqlite_path = \"{}\"\n[telemetry]\notlp_endpoint = \"{}\"\n\
             [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n{}{}",
            dir.path().join("log.db").display(),
            phoenix.url,
            models_channel(
                "primary",
                &primary.base_url(),
                &["m"],
                "priority = 1\ncircuit_breaker = { enabled = false }"
            ),
            models_channel("backup", &backup.base_url(), &["m"], "priority = 2"),
        ),
    )
    .expect("config");
    // The standard variables: a short batch delay, and Phoenix's project as a resource attribute.
    let resource = format!("openinference.project.name={project}");
    let env = [
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_RESOURCE_ATTRIBUTES", resource.as_str()),
    ];
    let cfg = config.to_str().expect("utf-8");
    let (_gw, url) = spawn_listening_env(
        &["serve", "--listen", "127.0.0.1:0", "--config", cfg],
        dir.path(),
        "switchyard listening on ",
        &env,
    )
    .await;
    let post = async |trace: &str, sampled: bool, stream: bool| {
        let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
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
    };
    let (failed_over, streamed, unsampled) = (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "5bf92f3577b34da6a3ce929d0e0e4737",
        "6bf92f3577b34da6a3ce929d0e0e4738",
    );
    post(failed_over, true, false).await;
    post(unsampled, false, false).await;
    post(streamed, true, true).await;

    // A failed-over request: the SERVER span under the client's, two CLIENT spans under it.
    let spans = phoenix.trace(&project, failed_over, 3).await;
    assert_eq!(spans.len(), 3, "{spans:?}");
    let server = by_name(&spans, "POST /v1/chat/completions");
    assert_eq!(server.len(), 1, "{spans:?}");
    let server = server[0];
    assert_eq!(server["parent_span_id"], CLIENT_PARENT);
    assert_eq!(attr(server, "http.response.status_code"), 200);
    assert_eq!(attr(server, "switchyard.channel"), "backup");
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
        assert_eq!(c["trace_id"], failed_over);
        assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(c, "gen_ai.provider.name"), "openai");
        assert_eq!(attr(c, "gen_ai.request.model"), "m");
        assert_eq!(attr(c, "server.address"), "127.0.0.1");
        assert_eq!(
            attr(c, "gen_ai.input.messages"),
            Value::Null,
            "no content by default"
        );
    }
    let (first, second) = (calls[0], calls[1]);
    assert_eq!(attr(first, "switchyard.attempt"), 1);
    assert_eq!(attr(first, "switchyard.channel"), "primary");
    assert_eq!(attr(first, "switchyard.outcome_class"), "server_error");
    assert_eq!(attr(first, "switchyard.failover_reason"), "server_error");
    assert_eq!(attr(first, "error.type"), "server_error");
    assert_eq!(attr(first, "http.response.status_code"), 500);
    assert_eq!(attr(second, "switchyard.attempt"), 2);
    assert_eq!(attr(second, "switchyard.channel"), "backup");
    assert_eq!(attr(second, "switchyard.outcome_class"), "ok");
    assert_eq!(attr(second, "error.type"), Value::Null);
    assert!(attr(second, "gen_ai.response.id").is_string(), "{second}");
    assert!(attr(second, "gen_ai.usage.output_tokens").as_i64() > Some(0));
    assert!(attr(second, "gen_ai.usage.input_tokens").as_i64() > Some(0));
    assert!(
        attr(second, "gen_ai.response.finish_reasons")
            .to_string()
            .contains("stop"),
        "{second}"
    );
    // Each call's own span went upstream as the parent of whatever the upstream records.
    let at = |s: &Value| {
        format!(
            "00-{failed_over}-{}-01",
            s["span_id"].as_str().unwrap_or("")
        )
    };
    assert!(sent_traceparents(&primary).contains(&at(first)));
    assert!(sent_traceparents(&backup).contains(&at(second)));
    // Phoenix's own reading: the calls are LLM spans, the request is not one; the failed call
    // is an error.
    let seen = native(&phoenix, &project, failed_over).await;
    let kind = |id: &Value| {
        seen.iter()
            .find(|s| s["context"]["span_id"] == *id)
            .map(|s| (s["span_kind"].clone(), s["status_code"].clone()))
    };
    assert_eq!(
        kind(&first["span_id"]),
        Some((json!("LLM"), json!("ERROR")))
    );
    assert_eq!(
        kind(&second["span_id"]),
        Some((json!("LLM"), json!("UNSET")))
    );
    assert_eq!(
        kind(&server["span_id"]).map(|k| k.0),
        Some(json!("UNKNOWN"))
    );

    // A stream: the commit point is an event of the request's span.
    phoenix.trace(&project, streamed, 3).await;
    let seen = native(&phoenix, &project, streamed).await;
    let server = seen
        .iter()
        .find(|s| s["name"] == "POST /v1/chat/completions")
        .expect("server span");
    let events: Vec<&str> = server["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(events.contains(&"switchyard.stream.commit"), "{server}");

    // A client's unsampled parent is honoured: its trace goes upstream, unsampled, and no span
    // of it is exported (sent before the stream, whose spans are in by now).
    let sent = sent_traceparents(&backup);
    assert!(
        sent.iter()
            .any(|t| t.starts_with(&format!("00-{unsampled}-")) && t.ends_with("-00")),
        "{sent:?}"
    );
    assert!(
        phoenix
            .spans(&project, unsampled)
            .await
            .expect("query")
            .is_empty()
    );

    content_is_captured_only_when_asked(&phoenix).await;
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
