//! Claude on three clouds behind one model: the Anthropic API first, then Bedrock, then
//! Vertex. A rate limit, an overload (529), a server error or a timeout moves the request on,
//! before the first byte, to the next cloud; each cloud's own mock checks its own credentials.

use serde_json::json;
use switchyard::provider::mock::Fault;

use crate::support::*;

const AK: &str = "AKIATESTKEY000002";
const SK: &str = "secret-for-the-tests-only-000002";

#[tokio::test]
async fn claude_fails_over_from_the_anthropic_api_to_bedrock_to_vertex() {
    let dir = tempfile::tempdir().unwrap();
    let Some(bedrock) = CloudMock::start(
        "bedrock",
        &[
            "--access-key",
            AK,
            "--secret-key",
            SK,
            "--text",
            "from bedrock",
        ],
    )
    .await
    else {
        return;
    };
    let behind = mock(text_spec("from vertex")).await;
    let key = dir.path().join("sa.json").display().to_string();
    let upstream = format!("http://{}", behind.addr());
    let Some(vertex) =
        CloudMock::start("vertex", &["--upstream", &upstream, "--write-key", &key]).await
    else {
        return;
    };
    // (what the Anthropic API does, the class its attempt gets)
    let table: [(Fault, &str); 4] = [
        (status(429), "rate_limit"),
        (status(529), "server_error"),
        (status(500), "server_error"),
        (
            Fault {
                hang: true,
                ..Fault::default()
            },
            "timeout",
        ),
    ];
    for (fault, class) in table {
        for stream in [false, true] {
            let anthropic = mock(faulty("from anthropic", fault.clone())).await;
            let gw = gateway(&three_clouds(
                &anthropic.base_url(),
                &bedrock.url,
                &vertex.url,
                &key,
            ))
            .await;
            let ask = json!({"model": "claude", "max_tokens": 64, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]});
            let resp = gw.post_as("/v1/messages", KEY, &[], ask.clone()).await;
            assert_eq!(
                header(&resp, "x-switchyard-channel"),
                "bedrock",
                "{class} stream {stream}"
            );
            // Nothing of the failed try reaches the client.
            let body = text_of(&resp.text().await.unwrap());
            assert_eq!(body, "from bedrock", "{class} stream {stream}");
            let rows = gw.admin_requests().await;
            let classes: Vec<&str> = rows[0]["attempts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["reason"].as_str().unwrap())
                .collect();
            assert_eq!(classes, [class, "ok"], "{}", rows[0]);
            // Bedrock fails too: Vertex serves.
            bedrock
                .script(json!([{"exception": "InternalServerException"}]))
                .await;
            let resp = gw.post_as("/v1/messages", KEY, &[], ask).await;
            assert_eq!(
                header(&resp, "x-switchyard-channel"),
                "vertex",
                "{class} stream {stream}"
            );
            assert_eq!(
                text_of(&resp.text().await.unwrap()),
                "from vertex",
                "{class}"
            );
        }
    }
}

/// An Anthropic answer's text, whole or streamed.
fn text_of(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        return v["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
        .collect()
}

/// One model, `claude`, on the Anthropic API (tier 1), Bedrock (2) and Vertex (3).
fn three_clouds(anthropic: &str, bedrock: &str, vertex: &str, key: &str) -> String {
    format!(
        "[[channels]]\nname = \"anthropic\"\nprovider = \"anthropic\"\nbase_url = \"{anthropic}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [{{ name = \"claude\", upstream = \"claude-sonnet-4-5\" }}]\n\
         priority = 1\ntimeout_ms = 1000\nfirst_token_timeout_ms = 1000\n\n\
         [[channels]]\nname = \"bedrock\"\nprovider = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{bedrock}\"\n\
         aws = {{ access_key_id = \"{AK}\", secret_access_key = \"{SK}\" }}\n\
         models = [{{ name = \"claude\", upstream = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\" }}]\npriority = 2\n\n\
         [[channels]]\nname = \"vertex\"\nprovider = \"vertex\"\nproject = \"p\"\nlocation = \"us-east5\"\n\
         base_url = \"{vertex}/v1\"\ncredentials_file = \"{key}\"\n\
         models = [{{ name = \"claude\", upstream = \"claude-sonnet-4-5@20250929\" }}]\npriority = 3\n"
    )
}
