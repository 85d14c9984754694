//! `provider = "vertex"` against a Vertex mock that verifies every JWT-bearer assertion with
//! google-auth and refuses a missing, unknown or expired token (`tests/mocks/vertex.py`), in
//! front of the switchyard mock: each publisher (Google, Anthropic, open models) from every
//! client protocol, Claude bodies as sent, one token grant for many requests, refused tokens
//! and the metadata server.

use serde_json::{Value, json};
use switchyard::provider::mock::MockServer;

use crate::support::*;

const TEXT: &str = "Hello from Vertex.";
const GEMINI: &str = "gemini-2.5-flash";
const CLAUDE: &str = "claude-sonnet-4-5@20250929";
const LLAMA: &str = "meta/llama-3.3-70b-instruct-maas";

/// The mock in front of a switchyard mock; its service account key written to `dir`.
async fn vertex_mock(dir: &std::path::Path, extra: &[&str]) -> Option<(CloudMock, MockServer)> {
    let up = mock(text_spec(TEXT)).await;
    let key = dir.join("sa.json").display().to_string();
    let upstream = format!("http://{}", up.addr());
    let mut args = vec!["--upstream", upstream.as_str(), "--write-key", key.as_str()];
    args.extend_from_slice(extra);
    let m = CloudMock::start("vertex", &args).await?;
    Some((m, up))
}

fn vertex_channel(name: &str, m: &CloudMock, auth: &str, extra: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"vertex\"\nproject = \"switchyard-tests\"\n\
         location = \"us-east5\"\nbase_url = \"{}/v1\"\n{auth}\nmodels = [\"{GEMINI}\", \
         {{ name = \"claude\", upstream = \"{CLAUDE}\" }}, {{ name = \"llama\", upstream = \"{LLAMA}\", publisher = \"openapi\" }}, \
         \"text-embedding-005\"]\n{extra}\n\n",
        m.url
    )
}

fn key_file(dir: &std::path::Path) -> String {
    format!("credentials_file = \"{}\"", dir.join("sa.json").display())
}

/// A chat request in `proto`: path, headers, body.
fn ask(proto: &str, model: &str, stream: bool) -> (String, Vec<(&'static str, String)>, Value) {
    let msg = json!([{"role": "user", "content": "hi"}]);
    match proto {
        "anthropic" => (
            "/v1/messages".into(),
            vec![("x-api-key", KEY.into())],
            json!({"model": model, "max_tokens": 64, "stream": stream, "messages": msg}),
        ),
        "gemini" => {
            let action = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            (
                format!("/v1beta/models/{model}:{action}"),
                vec![("x-goog-api-key", KEY.into())],
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            )
        }
        "responses" => (
            "/v1/responses".into(),
            vec![("authorization", format!("Bearer {KEY}"))],
            json!({"model": model, "stream": stream, "input": "hi"}),
        ),
        _ => (
            "/v1/chat/completions".into(),
            vec![("authorization", format!("Bearer {KEY}"))],
            json!({"model": model, "stream": stream, "messages": msg}),
        ),
    }
}

/// The answer's text in any protocol, whole or streamed.
fn answer_text(proto: &str, body: &str, stream: bool) -> String {
    let pick = |v: &Value| -> Option<String> {
        match proto {
            "anthropic" if stream => v["delta"]["text"].as_str(),
            "anthropic" => v["content"][0]["text"].as_str(),
            "gemini" => v["candidates"][0]["content"]["parts"][0]["text"].as_str(),
            "responses" if stream => (v["type"] == "response.output_text.delta")
                .then(|| v["delta"].as_str())
                .flatten(),
            "responses" => v["output"][0]["content"][0]["text"].as_str(),
            _ if stream => v["choices"][0]["delta"]["content"].as_str(),
            _ => v["choices"][0]["message"]["content"].as_str(),
        }
        .map(str::to_string)
    };
    if !stream {
        return serde_json::from_str(body)
            .ok()
            .as_ref()
            .and_then(pick)
            .unwrap_or_default();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| pick(&v))
        .collect()
}

#[tokio::test]
async fn every_client_protocol_reaches_each_vertex_publisher_with_a_token_google_auth_granted() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    let gw = gateway(&vertex_channel("vertex", &m, &key_file(dir.path()), "")).await;
    let http = client();
    for proto in ["openai", "responses", "anthropic", "gemini"] {
        for stream in [false, true] {
            for model in [GEMINI, "claude", "llama"] {
                let (path, headers, body) = ask(proto, model, stream);
                let mut rb = http.post(format!("{}{path}", gw.url)).json(&body);
                for (k, v) in &headers {
                    rb = rb.header(*k, v);
                }
                let resp = rb.send().await.unwrap();
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap();
                assert_eq!(status, 200, "{proto} {model} {stream}: {text}");
                assert_eq!(
                    answer_text(proto, &text, stream),
                    TEXT,
                    "{proto} {model} {stream}: {text}"
                );
            }
        }
    }
    let got = m.requests().await;
    assert_eq!(got.len(), 24);
    assert!(got.iter().all(|r| r["token_ok"] == true), "{got:?}");
    let paths: Vec<&str> = got.iter().map(|r| r["path"].as_str().unwrap()).collect();
    let root = "/v1/projects/switchyard-tests/locations/us-east5";
    for want in [
        format!("{root}/publishers/google/models/{GEMINI}:generateContent"),
        format!("{root}/publishers/google/models/{GEMINI}:streamGenerateContent?alt=sse"),
        format!("{root}/publishers/anthropic/models/{CLAUDE}:rawPredict"),
        format!("{root}/publishers/anthropic/models/{CLAUDE}:streamRawPredict"),
        format!("{root}/endpoints/openapi/chat/completions"),
    ] {
        assert!(paths.contains(&want.as_str()), "{want} in {paths:?}");
    }
    assert_eq!(
        m.get("stats").await["grants"],
        1,
        "one token for every request"
    );
}

#[tokio::test]
async fn an_anthropic_clients_body_reaches_claude_on_vertex_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    let gw = gateway(&vertex_channel("vertex", &m, &key_file(dir.path()), "")).await;
    let body = json!({"model": "claude", "max_tokens": 512,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Earlier.", "signature": "EqQBCkYIBxgCKkD+sig=="},
                {"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}]}]});
    let resp = gw.post_as("/v1/messages", KEY, &[], body.clone()).await;
    assert_eq!(resp.status(), 200);
    let got = m.requests().await;
    let sent: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    let mut want = body.as_object().unwrap().clone();
    want.remove("model");
    want.insert("anthropic_version".into(), json!("vertex-2023-10-16"));
    assert_eq!(
        sent,
        Value::Object(want),
        "the body as sent, but for model and version"
    );
}

#[tokio::test]
async fn one_grant_serves_many_requests_and_a_refused_token_gives_way_to_the_next_channel() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    let gw = gateway(&format!(
        "{}[[channels]]\nname = \"backup\"\nprovider = \"mock\"\nmodels = [\"{GEMINI}\"]\npriority = 2\n\
         mock = {{ text = \"backup\" }}\n\n",
        vertex_channel("vertex", &m, &key_file(dir.path()), "priority = 1")
    ))
    .await;
    let ask = json!({"model": GEMINI, "messages": [{"role": "user", "content": "hi"}]});
    let all = futures_util::future::join_all((0..64).map(|_| gw.chat(ask.clone()))).await;
    for r in all {
        assert_eq!(header(&r, "x-switchyard-channel"), "vertex");
    }
    assert_eq!(
        m.get("stats").await["grants"],
        1,
        "64 requests at once, one grant"
    );
    // The token stops working (revoked): the attempt is an auth error and the request fails over.
    client()
        .post(format!("{}/_mock/revoke", m.url))
        .send()
        .await
        .unwrap();
    let resp = gw.chat(ask).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["switchyard"]["failover"]["attempts"][0]["reason"], "auth_error",
        "{v}"
    );
}

#[tokio::test]
async fn a_short_lived_token_is_fetched_again_before_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    // Good for 30 s: always inside the minute before expiry, so each request fetches anew.
    let Some((m, _up)) = vertex_mock(dir.path(), &["--token-ttl", "30"]).await else {
        return;
    };
    let gw = gateway(&vertex_channel("vertex", &m, &key_file(dir.path()), "")).await;
    let ask = json!({"model": GEMINI, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..3 {
        assert_eq!(gw.chat(ask.clone()).await.status(), 200);
    }
    assert_eq!(m.get("stats").await["grants"], 3);
}

#[tokio::test]
async fn embeddings_go_through_predict_and_the_metadata_server_grants_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    let gw = gateway(&vertex_channel("vertex", &m, &key_file(dir.path()), "")).await;
    let resp = gw
        .post_as(
            "/v1/embeddings",
            KEY,
            &[],
            json!({"model": "text-embedding-005", "input": ["a b", "c"]}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["usage"]["prompt_tokens"], 3, "{v}");

    // No key anywhere: the metadata server (GCE_METADATA_HOST), as on GKE or GCE.
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nsqlite_path = \"{}\"\n[[keys]]\nname = \"k\"\nkey = \"{KEY}\"\n\n{}",
            dir.path().join("log.db").display(),
            vertex_channel("vertex", &m, "", "")
        ),
    )
    .unwrap();
    let host = m.url.trim_start_matches("http://").to_string();
    let env = [
        ("GCE_METADATA_HOST", host.as_str()),
        ("GOOGLE_APPLICATION_CREDENTIALS", ""),
    ];
    let cfg = config.to_str().unwrap();
    let args = ["serve", "--listen", "127.0.0.1:0", "--config", cfg];
    let (_gw, url) = spawn_listening_env(&args, dir.path(), "switchyard listening on ", &env).await;
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": GEMINI, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(m.get("stats").await["metadata_grants"], 1);
}

#[tokio::test]
async fn a_bad_service_account_key_fails_the_load_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        format!(
            "[[keys]]\nname = \"k\"\nkey = \"{KEY}\"\n\n[[channels]]\nname = \"v\"\nprovider = \"vertex\"\n\
             project = \"p\"\nlocation = \"global\"\ncredentials_json = '{{\"client_email\": \"a@b\", \"private_key\": \"not a key\"}}'\nmodels = [\"{GEMINI}\"]\n"
        ),
    )
    .unwrap();
    let out = run_bin(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(!out.ok);
    assert!(
        out.err.contains("channels[0].credentials_json"),
        "{}",
        out.err
    );
    assert!(out.err.contains("PKCS#8"), "{}", out.err);
}
