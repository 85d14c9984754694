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

#[tokio::test]
async fn every_client_protocol_reaches_each_vertex_publisher_with_a_token_google_auth_granted() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    let gw = gateway(&vertex_channel("vertex", &m, &key_file(dir.path()), "")).await;
    for proto in ["openai", "responses", "anthropic", "gemini"] {
        for stream in [false, true] {
            for model in [GEMINI, "claude", "llama"] {
                let (path, headers, body) = ask(proto, model, stream);
                let resp = post_in(&gw.url, &path, &headers, body).await;
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
async fn a_refused_grant_fails_over_and_the_health_view_shows_its_error_never_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let Some((m, _up)) = vertex_mock(dir.path(), &[]).await else {
        return;
    };
    // The mock's account and token URL, signed with a key the mock never issued: google-auth
    // refuses the assertion, as Google does a deleted key.
    let mut sa: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sa.json")).unwrap())
            .unwrap();
    let pem = include_str!("../fixtures/google/test-service-account-key.pem");
    sa["private_key"] = json!(pem);
    let wrong = dir.path().join("wrong.json");
    std::fs::write(&wrong, sa.to_string()).unwrap();
    let gw = gateway(&format!(
        "{}[[channels]]\nname = \"backup\"\nprovider = \"mock\"\nmodels = [\"{GEMINI}\"]\npriority = 2\n\
         mock = {{ text = \"backup\" }}\n\n",
        vertex_channel(
            "vertex",
            &m,
            &format!("credentials_file = \"{}\"", wrong.display()),
            "priority = 1"
        )
    ))
    .await;
    let ask = json!({"model": GEMINI, "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.chat(ask).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    assert_eq!(m.get("stats").await["grants"], 1);

    let health = get_json(&format!("{}/admin/health", gw.url), Some(ADMIN)).await;
    let rows = health["data"].as_array().unwrap();
    let row = rows.iter().find(|r| r["channel"] == "vertex").unwrap();
    let token = &row["credentials"][0]["token"];
    let err = token["last_refresh_error"].as_str().unwrap_or_default();
    assert!(
        err.contains("invalid_grant") || err.contains("400"),
        "{token}"
    );
    assert_eq!(token["fetches"], 1, "{token}");
    let text = health.to_string();
    let key_line = pem.lines().nth(5).unwrap();
    assert!(
        !text.contains(key_line),
        "the private key leaked into health"
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
