//! `provider = "bedrock"` against a Bedrock mock that recomputes every SigV4 signature with
//! botocore (`tests/mocks/bedrock.py`): every client protocol through Converse, an Anthropic
//! client's body through InvokeModel as sent, tool calls, exceptions read as outcome classes
//! (before and after the commit point), API keys, refused credentials, and the AWS chain with
//! one credentials fetch for many requests.

use serde_json::{Value, json};

use crate::support::*;

const AK: &str = "AKIATESTKEY000001";
const SK: &str = "secret-for-the-tests-only-000001";
const TEXT: &str = "Hello from Bedrock.";
/// A cross-region inference profile: its `:` goes URL-encoded into the path.
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const NOVA: &str = "amazon.nova-pro-v1:0";

async fn bedrock_mock(extra: &[&str]) -> Option<CloudMock> {
    let mut args = vec!["--access-key", AK, "--secret-key", SK, "--text", TEXT];
    args.extend_from_slice(extra);
    CloudMock::start("bedrock", &args).await
}

/// A Bedrock channel in front of `mock`, serving `claude` and `nova`; `auth` is its
/// credentials' line (default: the mock's keys as `aws`).
fn bedrock_channel(name: &str, mock: &CloudMock, auth: Option<&str>, extra: &str) -> String {
    let aws = format!("aws = {{ access_key_id = \"{AK}\", secret_access_key = \"{SK}\" }}");
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"bedrock\"\nregion = \"us-east-1\"\n\
         base_url = \"{}\"\n{}\nmodels = [{{ name = \"claude\", upstream = \"{CLAUDE}\" }}, \
         {{ name = \"nova\", upstream = \"{NOVA}\" }}]\n{extra}\n\n",
        mock.url,
        auth.unwrap_or(&aws),
    )
}

#[tokio::test]
async fn every_client_protocol_is_answered_by_bedrock_with_signatures_botocore_accepts() {
    let Some(mock) = bedrock_mock(&[]).await else {
        return;
    };
    let gw = gateway(&bedrock_channel("bedrock", &mock, None, "")).await;
    for proto in ["openai", "responses", "anthropic", "gemini"] {
        for stream in [false, true] {
            // An Anthropic client asking a Claude model goes through InvokeModel; every other
            // pair through Converse.
            for model in ["nova", "claude"] {
                let (path, headers, body) = ask(proto, model, stream);
                let resp = post_in(&gw.url, &path, &headers, body).await;
                let status = resp.status().as_u16();
                let channel = header(&resp, "x-switchyard-channel").to_string();
                let text = resp.text().await.unwrap();
                assert_eq!(
                    (status, channel.as_str()),
                    (200, "bedrock"),
                    "{proto} {model} {stream}: {text}"
                );
                assert_eq!(
                    answer_text(proto, &text, stream),
                    TEXT,
                    "{proto} {model} {stream}: {text}"
                );
            }
        }
    }
    let got = mock.requests().await;
    assert_eq!(got.len(), 16);
    for r in &got {
        assert_eq!(r["auth_ok"], true, "botocore refused a signature: {r}");
        assert_eq!(r["signed_headers"], "content-type;host;x-amz-date", "{r}");
    }
    let invoked: Vec<&Value> = got
        .iter()
        .filter(|r| r["action"].as_str().unwrap().starts_with("invoke"))
        .collect();
    assert_eq!(
        invoked.len(),
        2,
        "only the Anthropic client's Claude requests invoke"
    );
    assert!(invoked.iter().all(|r| r["model"] == CLAUDE));
    assert!(
        invoked[0]["path"]
            .as_str()
            .unwrap()
            .contains("claude-sonnet-4-5-20250929-v1%3A0")
    );
    assert!(
        got.iter()
            .any(|r| r["action"] == "converse-stream" && r["model"] == NOVA)
    );
}

#[tokio::test]
async fn a_tool_call_round_trip_crosses_converse_with_usage_and_cost() {
    let Some(mock) = bedrock_mock(&["--tool-call", r#"weather={"city":"Paris"}"#]).await else {
        return;
    };
    let price = "price = { input = 3, output = 15 }";
    let gw = gateway(&bedrock_channel("bedrock", &mock, None, price)).await;
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]);
    let first = json!({"model": "nova", "messages": [{"role": "user", "content": "weather?"}], "tools": tools});
    let resp = gw.post_as("/v1/chat/completions", KEY, &[], first).await;
    let cost: u64 = header(&resp, "x-switchyard-cost-micros").parse().unwrap();
    let v: Value = resp.json().await.unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "weather", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    // Converse counts cache reads and writes apart; the client sees every prompt token.
    assert_eq!(v["usage"]["prompt_tokens"], 14, "{v}");
    assert_eq!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"], 2,
        "{v}"
    );
    assert!(cost > 0, "priced at the channel's rates");
    let history = json!({"model": "nova", "tools": tools, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]});
    let v: Value = gw
        .post_as("/v1/chat/completions", KEY, &[], history)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], TEXT, "{v}");
    let sent: Value =
        serde_json::from_str(mock.requests().await[1]["body"].as_str().unwrap()).unwrap();
    let turns = sent["messages"].as_array().unwrap();
    assert_eq!(turns[1]["content"][0]["toolUse"]["toolUseId"], call["id"]);
    assert_eq!(
        turns[2]["content"][0]["toolResult"],
        json!({"toolUseId": call["id"], "content": [{"text": "sunny"}]})
    );
    assert_eq!(
        sent["toolConfig"]["tools"][0]["toolSpec"]["name"],
        "weather"
    );
}

#[tokio::test]
async fn an_anthropic_clients_body_reaches_invoke_model_as_sent_and_its_events_come_back() {
    let Some(mock) = bedrock_mock(&[]).await else {
        return;
    };
    let gw = gateway(&bedrock_channel("bedrock", &mock, None, "")).await;
    // Claude Code's shape: thinking on, a signed thinking block in history, cache_control,
    // a beta in the body (as Claude Code's Bedrock mode sends it).
    let body = json!({"model": "claude", "max_tokens": 2048, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Earlier.", "signature": "EqQBCkYIBxgCKkD+sig=="},
                {"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}]}]});
    let resp = gw.post_as("/v1/messages", KEY, &[], body.clone()).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    // The upstream's own thinking and its signature reach the client as Bedrock sent them.
    assert!(text.contains("\"signature_delta\""), "{text}");
    assert!(text.contains("bedrock-signature-1"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    let got = &mock.requests().await[0];
    assert_eq!(got["action"], "invoke-with-response-stream");
    let sent: Value = serde_json::from_str(got["body"].as_str().unwrap()).unwrap();
    let mut want = body.as_object().unwrap().clone();
    want.remove("model");
    want.remove("stream");
    want.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
    assert_eq!(
        sent,
        Value::Object(want),
        "the body as sent, but for model and version"
    );
}

/// Two channels for `nova`: Bedrock first, the built-in mock second.
async fn with_fallback(mock: &CloudMock) -> Gateway {
    gateway(&format!(
        "{}[[channels]]\nname = \"backup\"\nprovider = \"mock\"\nmodels = [\"nova\"]\npriority = 2\n\
         mock = {{ text = \"backup\", chunks = 2 }}\n\n",
        bedrock_channel("bedrock", mock, None, "priority = 1")
    ))
    .await
}

#[tokio::test]
async fn bedrock_exceptions_read_as_their_outcome_classes() {
    let Some(mock) = bedrock_mock(&[]).await else {
        return;
    };
    // (exception, the class the attempt gets; None: the client's own, not failed over)
    let table = [
        ("ThrottlingException", Some("rate_limit")),
        ("ServiceUnavailableException", Some("server_error")),
        ("InternalServerException", Some("server_error")),
        ("ModelNotReadyException", Some("server_error")),
        ("ModelTimeoutException", Some("timeout")),
        ("AccessDeniedException", Some("auth_error")),
        ("ExpiredTokenException", Some("auth_error")),
        ("ValidationException", None),
    ];
    for (exception, class) in table {
        let gw = with_fallback(&mock).await;
        mock.script(json!([{"exception": exception}])).await;
        let resp = gw
            .chat(json!({"model": "nova", "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        let status = resp.status().as_u16();
        let channel = header(&resp, "x-switchyard-channel").to_string();
        let v: Value = resp.json().await.unwrap();
        match class {
            Some(class) => {
                assert_eq!(
                    (status, channel.as_str()),
                    (200, "backup"),
                    "{exception}: {v}"
                );
                let attempts = &v["switchyard"]["failover"]["attempts"];
                assert_eq!(attempts[0]["reason"], class, "{exception}: {v}");
            }
            None => assert_eq!(
                (status, &v["error"]["code"]),
                (400, &json!("upstream_rejected_request")),
                "{exception}: {v}"
            ),
        }
    }
    // A validation error saying the prompt is too long is a context overflow, said as each
    // client's protocol says it.
    let gw = with_fallback(&mock).await;
    let long = json!([{"exception": "ValidationException", "message": "Input is too long for requested model."}]);
    mock.script(long.clone()).await;
    let resp = gw
        .chat(json!({"model": "nova", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    mock.script(long).await;
    let resp = gw
        .post_as(
            "/v1/messages",
            KEY,
            &[],
            json!({"model": "nova", "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long"),
        "{v}"
    );
}

#[tokio::test]
async fn an_exception_in_the_stream_fails_over_before_the_first_token_and_is_an_error_frame_after()
{
    let Some(mock) = bedrock_mock(&[]).await else {
        return;
    };
    let gw = with_fallback(&mock).await;
    let ask =
        json!({"model": "nova", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    mock.script(json!([{"exception": "ThrottlingException", "in_stream": "before"}]))
        .await;
    let resp = gw.chat(ask.clone()).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "backup");
    assert_eq!(sse_text(&resp.text().await.unwrap()), "backup");
    mock.script(json!([{"exception": "ModelStreamErrorException", "in_stream": "after"}]))
        .await;
    let resp = gw.chat(ask).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "bedrock");
    let body = resp.text().await.unwrap();
    assert!(
        !body.contains("[DONE]"),
        "a broken stream never ends clean: {body}"
    );
    assert!(body.contains("\"error\""), "{body}");
    assert!(
        !sse_text(&body).is_empty(),
        "the first token came before the fault"
    );
}

#[tokio::test]
async fn api_keys_are_bearer_tokens_and_a_refused_credential_gives_way_to_the_next() {
    let Some(mock) = bedrock_mock(&["--api-key", "bedrock-api-key-good-0001"]).await else {
        return;
    };
    let keys = "credentials = [{ key = \"bedrock-api-key-bad-00001\", label = \"bad\" }, \
                { key = \"bedrock-api-key-good-0001\", label = \"good\" }]";
    let wrong =
        format!("aws = {{ access_key_id = \"{AK}\", secret_access_key = \"not-the-secret\" }}");
    let gw = gateway(&format!(
        "{}{}",
        bedrock_channel("keys", &mock, Some(keys), "priority = 1"),
        bedrock_channel("wrong-secret", &mock, Some(&wrong), "priority = 2"),
    ))
    .await;
    let ask = json!({"model": "nova", "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.chat(ask.clone()).await;
    assert_eq!(
        (
            resp.status().as_u16(),
            header(&resp, "x-switchyard-channel")
        ),
        (200, "keys")
    );
    let v: Value = resp.json().await.unwrap();
    let reasons = reasons(&v["switchyard"]["failover"]["attempts"]);
    assert_eq!(
        reasons,
        ["auth_error", "ok"],
        "the bad key refused, the good one served: {v}"
    );
    // The refused key is probed in the background from now on, so its probes may come
    // between or after these requests: they are told apart by what the mock said of them.
    let whys = |got: &[Value]| -> Vec<String> {
        got.iter()
            .map(|r| r["why"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let got = whys(&mock.requests().await);
    assert_eq!(got[0], "unknown api key", "{got:?}");
    assert!(got.iter().any(|w| w == "api key"), "{got:?}");

    // A signature made with the wrong secret is refused (as Bedrock does), never served.
    let only_wrong = gateway(&bedrock_channel("wrong-secret", &mock, Some(&wrong), "")).await;
    let resp = only_wrong.chat(ask).await;
    assert_eq!(resp.status(), 502);
    let signed: Vec<String> = whys(&mock.requests().await)
        .into_iter()
        .filter(|w| !w.contains("api key"))
        .collect();
    assert!(!signed.is_empty(), "the wrong secret's request never came");
    assert!(
        signed.iter().all(|w| w == "signature does not match"),
        "{signed:?}"
    );
}

/// The binary with `env` (every other AWS variable emptied), serving `nova` from `mock` with no
/// credentials of its own: the chain finds them.
async fn chain_gateway(
    mock: &CloudMock,
    dir: &std::path::Path,
    env: &[(&str, String)],
) -> (Proc, String) {
    let config = dir.join("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nadmin_token = \"{ADMIN}\"\n[log]\nsqlite_path = \"{}\"\n[[keys]]\nname = \"k\"\nkey = \"{KEY}\"\n\n\
             [[channels]]\nname = \"bedrock\"\nprovider = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{}\"\nmodels = [\"{NOVA}\"]\n",
            dir.join("log.db").display(),
            mock.url
        ),
    )
    .unwrap();
    let mut vars: Vec<(&str, String)> = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_STS",
    ]
    .into_iter()
    .map(|k| (k, String::new()))
    .collect();
    vars.push(("HOME", dir.display().to_string()));
    vars.extend(env.iter().cloned());
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cfg = config.to_str().unwrap();
    let args = ["serve", "--listen", "127.0.0.1:0", "--config", cfg];
    spawn_listening_env(&args, dir, "switchyard listening on ", &env).await
}

/// Sends `n` requests at once; every one must be served.
async fn burst(url: &str, n: usize) {
    let http = client();
    let all = futures_util::future::join_all((0..n).map(|_| {
        http.post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&json!({"model": NOVA, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    }))
    .await;
    for r in all {
        let r = r.expect("reachable");
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
}

#[tokio::test]
async fn the_aws_chain_finds_credentials_and_fetches_them_once_for_many_requests() {
    let Some(mock) = bedrock_mock(&[
        "--web-identity-token",
        "the-oidc-token",
        "--container-token",
        "container-secret",
    ])
    .await
    else {
        return;
    };
    // Web identity: STS at the mock, 64 requests at once, one AssumeRoleWithWebIdentity.
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "the-oidc-token\n").unwrap();
    let env = [
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            token_file.display().to_string(),
        ),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/gateway".into(),
        ),
        ("AWS_ENDPOINT_URL_STS", mock.url.clone()),
    ];
    let (_gw, url) = chain_gateway(&mock, dir.path(), &env).await;
    burst(&url, 64).await;
    assert_eq!(mock.get("stats").await["sts_calls"], 1);
    // The health view names the source and when its credentials expire, never a secret.
    let health = get_json(&format!("{url}/admin/health"), Some(ADMIN)).await;
    let token = &health["data"][0]["credentials"][0]["token"];
    assert!(
        token["source"]
            .as_str()
            .is_some_and(|s| s.contains("AssumeRoleWithWebIdentity")),
        "{health}"
    );
    let left = token["expires_in_seconds"].as_u64().unwrap_or_default();
    assert!((3500..=3600).contains(&left), "{token}");
    assert!(
        token["expires_at"].is_string() && token["refreshed_at"].is_string(),
        "{token}"
    );
    assert_eq!(token["fetches"], 1, "{token}");
    assert!(token["last_refresh_error"].is_null(), "{token}");
    let issued = mock.get("stats").await["issued_secrets"].clone();
    let issued = issued.as_array().unwrap();
    assert_eq!(issued.len(), 2, "one secret key and one session token");
    for s in issued {
        let s = s.as_str().unwrap();
        assert!(
            !health.to_string().contains(s),
            "a fetched secret leaked into health"
        );
    }

    // The container endpoint, with its authorization token.
    let dir = tempfile::tempdir().unwrap();
    let env = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/container-creds", mock.url),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
            "container-secret".into(),
        ),
    ];
    let (_gw, url) = chain_gateway(&mock, dir.path(), &env).await;
    burst(&url, 16).await;
    assert_eq!(mock.get("stats").await["container_calls"], 1);

    // A profile of the shared credentials file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(&file, format!("[default]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = x\n\n[work]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n")).unwrap();
    let env = [
        ("AWS_SHARED_CREDENTIALS_FILE", file.display().to_string()),
        ("AWS_PROFILE", "work".into()),
    ];
    let (_gw, url) = chain_gateway(&mock, dir.path(), &env).await;
    burst(&url, 2).await;
}
