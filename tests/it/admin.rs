//! Health, the request log through the admin API, and config reload.

use serde_json::{Value, json};
use switchyard::provider::mock::MockSpec;

use crate::support::*;

#[tokio::test]
async fn health_and_readiness() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let c = client();
    let h = c.get(format!("{}/healthz", gw.url)).send().await.unwrap();
    assert_eq!(h.status(), 200);
    let r: Value = c
        .get(format!("{}/readyz", gw.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["status"], "ready");
    assert_eq!(r["request_log"]["writer_alive"], true);
    assert_eq!(r["config"]["channels"], 1);
}

#[tokio::test]
async fn request_log_rows_describe_each_request() {
    let bad = mock(text_spec("x")).await;
    bad.set_spec(faulty("x", status(500)));
    let good = mock(MockSpec {
        chunk_ms: 5,
        ..text_spec("abcdef")
    })
    .await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("bad", &bad.base_url(), 1, ""),
        openai_channel("good", &good.base_url(), 2, "")
    ))
    .await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    let body = gw.chat(chat_body(true)).await.text().await.unwrap();
    assert!(body.ends_with("[DONE]\n\n"));
    gw.chat(json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))
        .await;

    let rows = gw.admin_requests().await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    // Newest first.
    let (missing, stream, plain) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(missing["status"], 404);
    assert_eq!(missing["outcome"], "model_not_found");
    for row in [stream, plain] {
        assert_eq!(row["key_name"], "team-a");
        assert_eq!(row["requested_model"], "m");
        assert_eq!(row["served_model"], "m");
        assert_eq!(row["channel"], "good");
        assert_eq!(row["status"], 200);
        assert_eq!(row["outcome"], "ok");
        assert_eq!(row["attempts"].as_array().unwrap().len(), 2);
        assert_eq!(row["attempts"][0]["reason"], "server_error");
        assert_eq!(row["output_tokens"], 3);
        assert!(row["ttfb_ms"].is_u64());
        assert!(row["total_ms"].as_u64().unwrap() >= row["ttfb_ms"].as_u64().unwrap());
    }
    assert_eq!(stream["stream"], true);
    assert_eq!(plain["stream"], false);
    assert!(stream["tokens_per_s"].as_f64().unwrap() > 0.0);
    // No secret ever lands in the log.
    let all = serde_json::to_string(&rows).unwrap();
    assert!(!all.contains(UPSTREAM_KEY) && !all.contains(KEY));
}

#[tokio::test]
async fn admin_routes_need_the_admin_token_and_exist_only_with_one() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let c = client();
    let url = format!("{}/admin/requests", gw.url);
    let resp = c.get(&url).bearer_auth(KEY).send().await.unwrap();
    error_envelope(resp, 401).await;
    let resp = c.get(&url).send().await.unwrap();
    error_envelope(resp, 401).await;
    let resp = c
        .get(format!("{url}?limit=-3"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    error_envelope(resp, 400).await;

    // The same gateway without an admin token: admin routes are off.
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[log]\nsqlite_path = \"{}\"\n{}",
        dir.path().join("l.db").display(),
        openai_channel("up", &up.base_url(), 1, "")
    );
    let clients = switchyard::provider::HttpClients::default();
    let snap = switchyard::config::load_str(&text, "t", &|_| None, &clients).unwrap();
    let off = switchyard::app::start(snap, clients, None).await.unwrap();
    let resp = c
        .get(format!("http://{}/admin/requests", off.addr))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    error_envelope(resp, 404).await;
}

#[tokio::test]
async fn reload_swaps_the_config_and_keeps_it_when_invalid() {
    let one = mock(text_spec("one")).await;
    let two = mock(MockSpec {
        chunk_ms: 20,
        chunks: 10,
        ..text_spec("two two two two two two two two")
    })
    .await;
    let gw = gateway(&openai_channel("one", &one.base_url(), 1, "")).await;
    let reload = || async { gw.reload().await };
    gw.rewrite(&openai_channel("two", &two.base_url(), 1, ""));
    let resp = reload().await;
    assert_eq!(resp.status(), 200);
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "two");

    // A stream in flight keeps its snapshot while the config changes under it.
    let mut streaming = gw.chat(chat_body(true)).await;
    assert_eq!(header(&streaming, "x-switchyard-channel"), "two");
    let _first = streaming.chunk().await.unwrap();
    gw.rewrite(&openai_channel("one", &one.base_url(), 1, ""));
    assert_eq!(reload().await.status(), 200);
    let mut rest = String::new();
    while let Some(c) = streaming.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");

    // An invalid file is refused with the error; the running config stays.
    gw.rewrite("[[channels]]\nname = \"broken\"\nprovider = \"openai\"\nmodels = [\"m\"]\npriority = \"x\"\n");
    let e = error_envelope(reload().await, 400).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("channels[0].priority"),
        "{e}"
    );
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "one");
}

#[tokio::test]
async fn a_reload_during_the_attempts_does_not_change_the_plan_in_flight() {
    let hang = mock(faulty(
        "x",
        switchyard::provider::mock::Fault {
            hang: true,
            ..Default::default()
        },
    ))
    .await;
    let backup = mock(text_spec("old backup")).await;
    let other = mock(text_spec("new channel")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("hang", &hang.base_url(), 1, "timeout_ms = 500"),
        openai_channel("backup", &backup.base_url(), 2, "")
    ))
    .await;
    let url = gw.chat_url();
    let pending = tokio::spawn(async move {
        client()
            .post(url)
            .bearer_auth(KEY)
            .json(&chat_body(false))
            .send()
            .await
            .unwrap()
    });
    // The request is on its first attempt; the config now loses its backup channel.
    eventually(&hang, "requests >= 1", |m| m.requests() >= 1).await;
    gw.rewrite(&openai_channel("other", &other.base_url(), 1, ""));
    let reload = gw.reload().await;
    assert_eq!(reload.status(), 200);
    // The request in flight still fails over along the plan it started with.
    let resp = pending.await.unwrap();
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    assert_eq!(other.requests(), 0);
    // New requests use the new config.
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "other");
}

#[tokio::test]
async fn unauthenticated_requests_are_not_logged() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    for _ in 0..3 {
        let resp = client()
            .post(gw.chat_url())
            .json(&chat_body(false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    let rows = gw.admin_requests().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], 200);
}
