//! The calls SDKs and agents make beside chat: token counting (forwarded to a channel that
//! counts in the client's protocol, failed over, else counted here), model lists and retrieval
//! in each protocol's shape, and kept Responses; each logged, held to the key's rpm, never
//! charged, and an unknown route logged as a 404.

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec};

use crate::support::*;

/// What the mock's counting endpoints answer.
const COUNTED: u64 = 4242;

fn counting(text: &str) -> MockSpec {
    MockSpec {
        count_tokens: Some(COUNTED),
        ..text_spec(text)
    }
}

/// A channel of `kind` (`openai`, `anthropic`, `gemini`, or `responses`: an OpenAI channel
/// that serves the Responses API) in front of the mock at `up`, serving `models` (TOML).
fn channel(name: &str, kind: &str, up: &MockServer, models: &str, extra: &str) -> String {
    let root = up.base_url().trim_end_matches("/v1").to_string();
    let (provider, base, more) = match kind {
        "gemini" => ("gemini", format!("{root}/v1beta"), ""),
        "responses" => ("openai", up.base_url(), "responses = true\n"),
        other => (other, up.base_url(), ""),
    };
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"{provider}\"\nbase_url = \"{base}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = {models}\n{more}{extra}\n\n"
    )
}

/// The client protocols that count tokens.
const PROTOCOLS: [&str; 3] = ["anthropic", "gemini", "responses"];

/// A count request of `proto` for `model`: its path and body (`messages` in the client's
/// shape: text, or the protocol's parts).
fn count_request(proto: &str, model: &str, content: Value) -> (String, Value) {
    match proto {
        "anthropic" => (
            "/v1/messages/count_tokens".into(),
            json!({"model": model, "messages": [{"role": "user", "content": content}]}),
        ),
        "gemini" => {
            let parts = match content {
                Value::String(s) => json!([{"text": s}]),
                parts => parts,
            };
            (
                format!("/v1beta/models/{model}:countTokens"),
                json!({"contents": [{"role": "user", "parts": parts}]}),
            )
        }
        _ => {
            let input = match content {
                Value::String(s) => json!(s),
                parts => json!([{"role": "user", "content": parts}]),
            };
            (
                "/v1/responses/input_tokens".into(),
                json!({"model": model, "input": input}),
            )
        }
    }
}

/// The count an answer of `proto` carries.
fn tokens(proto: &str, v: &Value) -> u64 {
    let field = if proto == "gemini" {
        "totalTokens"
    } else {
        "input_tokens"
    };
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no count in {v}"))
}

/// Posts a count; returns the status, `x-switchyard-count` and the body.
async fn count(gw: &Gateway, path: &str, body: Value) -> (u16, String, Value) {
    let resp = gw.post_as(path, KEY, &[], body).await;
    let status = resp.status().as_u16();
    assert!(
        header(&resp, "x-request-id").starts_with("req_"),
        "{status}"
    );
    let who = header(&resp, "x-switchyard-count").to_string();
    (status, who, resp.json().await.expect("JSON answer"))
}

#[tokio::test]
async fn a_count_goes_to_a_channel_that_counts_in_the_clients_protocol_else_it_is_counted_here() {
    let up = mock(counting("ok")).await;
    let gw = gateway(&format!(
        "{}{}{}{}",
        channel(
            "claude",
            "anthropic",
            &up,
            "[{ name = \"same-anthropic\", upstream = \"up-claude\" }]",
            ""
        ),
        channel(
            "gem",
            "gemini",
            &up,
            "[{ name = \"same-gemini\", upstream = \"up-gemini\" }]",
            ""
        ),
        channel(
            "resp",
            "responses",
            &up,
            "[{ name = \"same-responses\", upstream = \"up-resp\" }]",
            ""
        ),
        channel("plain", "openai", &up, "[\"cross\"]", ""),
    ))
    .await;
    for proto in PROTOCOLS {
        let before = up.received().len();
        let (path, body) = count_request(proto, &format!("same-{proto}"), json!("Hello there"));
        let (status, who, v) = count(&gw, &path, body).await;
        assert_eq!(
            (status, who.as_str(), tokens(proto, &v)),
            (200, "upstream", COUNTED),
            "{proto}: {v}"
        );
        let got = &up.received()[before..];
        assert_eq!(got.len(), 1, "{proto}: one call upstream");
        assert_eq!(got[0].path, "/count_tokens");
        // The upstream's own model name, in the body or (Gemini) the path.
        let upstream = match proto {
            "anthropic" => "up-claude",
            "gemini" => "up-gemini",
            _ => "up-resp",
        };
        let named = got[0].body["model"] == upstream
            || got[0]
                .uri
                .ends_with(&format!("/models/{upstream}:countTokens"));
        assert!(named, "{proto}: {:?} {}", got[0].uri, got[0].body);
        assert_eq!(got[0].body["contents"].is_array(), proto == "gemini");

        // The same request for a model only an OpenAI chat channel serves: counted here.
        let (path, body) = count_request(proto, "cross", json!("Hello there"));
        let (status, who, v) = count(&gw, &path, body).await;
        assert_eq!((status, who.as_str()), (200, "local"), "{proto}: {v}");
        let n = tokens(proto, &v);
        assert!(n > 0 && n != COUNTED, "{proto}: {n}");
        assert_eq!(
            up.received().len(),
            before + 1,
            "{proto}: nothing more upstream"
        );
    }
    // No count is charged, though calls were made.
    let rows = gw.admin_requests().await;
    let counts: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            [
                "messages.count_tokens",
                "countTokens",
                "responses.input_tokens",
            ]
            .contains(&r["endpoint"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(counts.len(), 6, "{rows:?}");
    // Each row has its count as the prompt's tokens: the three forwarded ones the mock's.
    let forwarded = counts
        .iter()
        .filter(|r| r["prompt_tokens"] == COUNTED)
        .count();
    assert_eq!(forwarded, 3, "{counts:?}");
    for r in &counts {
        assert!(r["prompt_tokens"].as_u64().is_some_and(|n| n > 0), "{r}");
        assert_eq!(r["status"], 200, "{r}");
        assert!(r["cost_micros"].as_u64().unwrap_or(0) == 0, "{r}");
        let charges = client()
            .get(format!(
                "{}/admin/usage/requests/{}",
                gw.url,
                r["id"].as_str().unwrap()
            ))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(charges.status(), 404, "no ledger rows for {r}");
    }
}

#[tokio::test]
async fn a_count_fails_over_between_channels_that_count_and_is_counted_here_when_none_can() {
    let sick = mock(faulty("x", status(500))).await;
    let well = mock(counting("ok")).await;
    let both_sick = format!(
        "{}{}",
        channel("a1", "anthropic", &sick, "[\"m\"]", "priority = 1"),
        channel("a2", "anthropic", &well, "[\"m\"]", "priority = 2"),
    );
    let gw = gateway(&format!(
        "{both_sick}{}{}",
        channel("b1", "anthropic", &sick, "[\"n\"]", "priority = 1"),
        channel("b2", "openai", &well, "[\"n\"]", "priority = 2"),
    ))
    .await;
    let (path, body) = count_request("anthropic", "m", json!("Hello"));
    let resp = gw.post_as(&path, KEY, &[], body).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "a2");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    assert_eq!(header(&resp, "x-switchyard-count"), "upstream");
    assert_eq!(tokens("anthropic", &resp.json().await.unwrap()), COUNTED);

    // The only channel that counts fails: the count is made here, the failure in the log.
    let (path, body) = count_request("anthropic", "n", json!("Hello"));
    let (code, who, v) = count(&gw, &path, body).await;
    assert_eq!((code, who.as_str()), (200, "local"), "{v}");
    assert_ne!(tokens("anthropic", &v), COUNTED);
    let rows = gw.admin_requests().await;
    let row = rows
        .iter()
        .find(|r| r["requested_model"] == "n")
        .expect("the count's row");
    assert_eq!(row["attempts"][0]["channel"], "b1", "{row}");
    assert_eq!(row["attempts"][0]["reason"], "server_error", "{row}");

    // The request's own mistake comes back as the upstream said it.
    let bad = mock(faulty("x", status(400))).await;
    let gw = gateway(&channel("strict", "anthropic", &bad, "[\"m\"]", "")).await;
    let (path, body) = count_request("anthropic", "m", json!("Hello"));
    let (code, _, v) = count(&gw, &path, body).await;
    assert_eq!((code, &v["type"]), (400, &json!("error")), "{v}");

    // A mock told no count answers its own estimate of the prompt (11 characters: 3 tokens,
    // and 3 for the message).
    let plain = mock(text_spec("x")).await;
    let gw = gateway(&channel("est", "anthropic", &plain, "[\"m\"]", "")).await;
    let (path, body) = count_request("anthropic", "m", json!("Hello there"));
    let (code, who, v) = count(&gw, &path, body).await;
    assert_eq!(
        (code, who.as_str(), tokens("anthropic", &v)),
        (200, "upstream", 6),
        "{v}"
    );
}

/// A text of the token fixtures with its count by a family's own tokenizer.
fn fixture(kind: &str, family: &str) -> (String, u64) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokens/estimates.json"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let t = v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == kind && t[family].as_u64().unwrap() > 300)
        .unwrap_or_else(|| panic!("a {kind} text"));
    (
        t["text"].as_str().unwrap().to_string(),
        t[family].as_u64().unwrap(),
    )
}

/// A tool and an image in each protocol's shape.
fn with_tool(proto: &str, body: &mut Value) {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "description": "The city to look up"}}});
    match proto {
        "anthropic" => {
            body["tools"] = json!([{"name": "weather", "description": "Current weather", "input_schema": schema}])
        }
        "gemini" => {
            let contents = body["contents"].take();
            *body = json!({"generateContentRequest": {"contents": contents,
                "tools": [{"functionDeclarations": [{"name": "weather", "description": "Current weather", "parameters": schema}]}]}});
        }
        _ => {
            body["tools"] = json!([{"type": "function", "name": "weather", "description": "Current weather", "parameters": schema}])
        }
    }
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A one-page PDF's first bytes, base64: what matters is that it is a document part.
const PDF: &str = "JVBERi0xLjQKMSAwIG9iago8PCAvVHlwZSAvQ2F0YWxvZyA+PgplbmRvYmoKdHJhaWxlcgo8PCAvUm9vdCAxIDAgUiA+PgolJUVPRgo=";

fn document_parts(proto: &str, text: &str) -> Value {
    match proto {
        "anthropic" => json!([{"type": "text", "text": text},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]),
        "gemini" => {
            json!([{"text": text}, {"inlineData": {"mimeType": "application/pdf", "data": PDF}}])
        }
        _ => json!([{"type": "input_text", "text": text},
            {"type": "input_file", "filename": "a.pdf", "file_data": format!("data:application/pdf;base64,{PDF}")}]),
    }
}

fn image_parts(proto: &str, text: &str) -> Value {
    match proto {
        "anthropic" => json!([{"type": "text", "text": text},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]),
        "gemini" => json!([{"text": text}, {"inlineData": {"mimeType": "image/png", "data": PNG}}]),
        _ => json!([{"type": "input_text", "text": text},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")}]),
    }
}

#[tokio::test]
async fn a_local_count_is_the_model_familys_within_ten_percent_and_counts_tools_images_documents() {
    let up = mock(text_spec("ok")).await;
    let models = "[\"claude-sonnet-4-5\", \"gemini-2.5-flash\", \"gpt-4o\"]";
    let gw = gateway(&channel("plain", "openai", &up, models, "")).await;
    // Each family's tokenizer on a fixed text of a kind its calibration fits: Claude's on code,
    // Gemini's (Gemma 3's vocabulary) on logs, OpenAI's own BPE on prose.
    let table = [
        ("anthropic", "claude-sonnet-4-5", "code-rust", "claude"),
        ("gemini", "gemini-2.5-flash", "log", "gemini"),
        ("responses", "gpt-4o", "prose-en", "o200k_base"),
    ];
    for (proto, model, kind, family) in table {
        let (text, reference) = fixture(kind, family);
        let (path, body) = count_request(proto, model, json!(text));
        let (status, who, v) = count(&gw, &path, body.clone()).await;
        assert_eq!((status, who.as_str()), (200, "local"), "{proto}: {v}");
        let n = tokens(proto, &v);
        let off = n.abs_diff(reference) as f64 / reference as f64;
        assert!(
            off <= 0.10,
            "{proto}: {n} against {family}'s {reference} ({:.1} %)",
            off * 100.0
        );

        let longer = count_request(proto, model, json!(format!("{text}\n{text}"))).1;
        let mut tooled = body.clone();
        with_tool(proto, &mut tooled);
        let imaged = count_request(proto, model, image_parts(proto, &text)).1;
        let documented = count_request(proto, model, document_parts(proto, &text)).1;
        for (what, more) in [
            ("a longer text", longer),
            ("a tool", tooled),
            ("an image", imaged),
            ("a document", documented),
        ] {
            let (status, _, w) = count(&gw, &path, more).await;
            assert_eq!(status, 200, "{proto} with {what}: {w}");
            assert!(
                tokens(proto, &w) > n,
                "{proto}: {what} counts ({} <= {n})",
                tokens(proto, &w)
            );
        }
    }
    assert_eq!(up.requests(), 0, "nothing was asked upstream");
}

#[tokio::test]
async fn side_calls_are_held_to_the_keys_rpm_logged_and_counted_in_the_metrics() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_full(
        "[metrics]\nenabled = true",
        "rpm = 3",
        &channel("plain", "openai", &up, "[\"m\"]", ""),
    )
    .await;
    let (path, body) = count_request("anthropic", "m", json!("Hello"));
    for _ in 0..2 {
        assert_eq!(count(&gw, &path, body.clone()).await.0, 200);
    }
    let models = client()
        .get(format!("{}/v1/models", gw.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    // The fourth in the minute, whatever it asks, is refused in the client's envelope.
    let (status, _, v) = count(&gw, &path, body).await;
    assert_eq!(
        (status, &v["type"], &v["error"]["code"]),
        (429, &json!("error"), &json!("rate_limit_exceeded")),
        "{v}"
    );
    let rows = gw.admin_requests().await;
    let seen: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["endpoint"].as_str().unwrap().to_string(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [
        ("messages.count_tokens", 200),
        ("models", 200),
        ("messages.count_tokens", 429),
    ] {
        assert!(
            seen.contains(&(want.0.into(), want.1)),
            "{want:?} in {seen:?}"
        );
    }
    let text = client()
        .get(format!("{}/metrics", gw.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "switchyard_requests_total{ingress=\"anthropic.count_tokens\",model=\"m\",outcome=\"ok\"} 2",
        "switchyard_requests_total{ingress=\"models\",model=\"other\",outcome=\"ok\"} 1",
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
}

/// Model ids of a list in any of the three shapes.
fn listed(v: &Value) -> Vec<String> {
    let items = v["data"].as_array().or_else(|| v["models"].as_array());
    items
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|m| {
            m["id"]
                .as_str()
                .or_else(|| m["name"].as_str().and_then(|n| n.strip_prefix("models/")))
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A GET in the shape `shape` (`openai`, `anthropic`, `gemini`) as the key `key`.
async fn get_as(gw: &Gateway, shape: &str, path: &str, key: &str) -> (u16, Value) {
    let rb = client().get(format!("{}{path}", gw.url));
    let rb = match shape {
        "anthropic" => rb
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        "gemini" => rb.header("x-goog-api-key", key),
        _ => rb.bearer_auth(key),
    };
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    // Answers and refusals alike name their row in the log.
    if status != 401 {
        assert!(
            header(&resp, "x-request-id").starts_with("req_"),
            "{status} {path}"
        );
    }
    (status, resp.json().await.unwrap())
}

const NARROW: &str = "sk-narrow-key-000001";

async fn listing_gateway() -> (MockServer, Gateway) {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_full(
        "",
        &format!("\n[[keys]]\nname = \"narrow\"\nkey = \"{NARROW}\"\ngroups = [\"narrow\"]\n"),
        &format!(
            "{}{}\n[[redirects]]\nfrom = \"sonnet\"\nto = \"claude-sonnet-4-5\"\n",
            channel(
                "wide",
                "openai",
                &up,
                "[\"alpha\", \"beta\", \"claude-sonnet-4-5\"]",
                ""
            ),
            channel(
                "narrow",
                "openai",
                &up,
                "[\"gamma\"]",
                "groups = [\"narrow\"]"
            ),
        ),
    )
    .await;
    (up, gw)
}

#[tokio::test]
async fn model_lists_answer_in_each_protocols_shape_with_what_the_key_may_use() {
    let (_up, gw) = listing_gateway().await;
    let all = ["alpha", "beta", "claude-sonnet-4-5", "gamma"];
    for (shape, path) in [
        ("openai", "/v1/models"),
        ("anthropic", "/v1/models"),
        ("gemini", "/v1beta/models"),
        ("gemini", "/v1/models"),
    ] {
        let (status, v) = get_as(&gw, shape, path, KEY).await;
        assert_eq!(
            (status, listed(&v)),
            (200, all.map(String::from).to_vec()),
            "{shape} {path}: {v}"
        );
        let (_, v) = get_as(&gw, shape, path, NARROW).await;
        assert_eq!(
            listed(&v),
            ["gamma"],
            "{shape} {path}: groups filter the list"
        );
    }
    let (_, v) = get_as(&gw, "openai", "/v1/models", KEY).await;
    assert_eq!(
        (&v["object"], &v["data"][0]["object"]),
        (&json!("list"), &json!("model"))
    );
    let (_, v) = get_as(&gw, "anthropic", "/v1/models", KEY).await;
    let m = &v["data"][2];
    assert_eq!(
        (&m["type"], &m["display_name"], &m["created_at"]),
        (
            &json!("model"),
            &json!("claude-sonnet-4-5"),
            &json!("1970-01-01T00:00:00Z")
        )
    );
    assert_eq!(m["max_input_tokens"], 200_000, "{m}");

    // Anthropic's pages: has_more, first_id, last_id, after_id, before_id.
    let (_, p1) = get_as(&gw, "anthropic", "/v1/models?limit=2", KEY).await;
    assert_eq!(
        (listed(&p1), &p1["has_more"], &p1["last_id"]),
        (
            vec!["alpha".into(), "beta".into()],
            &json!(true),
            &json!("beta")
        )
    );
    let (_, p2) = get_as(&gw, "anthropic", "/v1/models?limit=2&after_id=beta", KEY).await;
    assert_eq!(
        (listed(&p2), &p2["has_more"]),
        (
            vec!["claude-sonnet-4-5".into(), "gamma".into()],
            &json!(false)
        )
    );
    let (_, back) = get_as(&gw, "anthropic", "/v1/models?limit=1&before_id=beta", KEY).await;
    assert_eq!(listed(&back), ["alpha"]);
    let (status, v) = get_as(&gw, "anthropic", "/v1/models?limit=0", KEY).await;
    assert_eq!(
        (status, &v["error"]["type"]),
        (400, &json!("invalid_request_error")),
        "{v}"
    );

    // Gemini's pages: pageSize and nextPageToken, with the key as a query parameter too.
    let (_, g1) = get_as(
        &gw,
        "none",
        &format!("/v1beta/models?pageSize=3&key={KEY}"),
        "",
    )
    .await;
    let token = g1["nextPageToken"]
        .as_str()
        .expect("a next page")
        .to_string();
    let (_, g2) = get_as(
        &gw,
        "gemini",
        &format!("/v1beta/models?pageSize=3&pageToken={token}"),
        KEY,
    )
    .await;
    assert_eq!(
        [listed(&g1), listed(&g2)].concat(),
        all.map(String::from).to_vec()
    );
    assert!(g2.get("nextPageToken").is_none(), "{g2}");
    let g = &g1["models"][2];
    assert_eq!(
        (&g["name"], g["inputTokenLimit"].as_u64()),
        (&json!("models/claude-sonnet-4-5"), Some(200_000))
    );
    assert!(
        g["supportedGenerationMethods"]
            .as_array()
            .unwrap()
            .contains(&json!("countTokens"))
    );
}

#[tokio::test]
async fn a_model_is_retrieved_in_each_shape_and_an_unknown_one_is_the_protocols_404() {
    let (_up, gw) = listing_gateway().await;
    let table = [
        (
            "openai",
            "/v1/models/claude-sonnet-4-5",
            "id",
            "claude-sonnet-4-5",
        ),
        ("anthropic", "/v1/models/claude-sonnet-4-5", "type", "model"),
        (
            "gemini",
            "/v1beta/models/claude-sonnet-4-5",
            "name",
            "models/claude-sonnet-4-5",
        ),
        // Through a redirect: named as asked.
        ("openai", "/v1/models/sonnet", "id", "sonnet"),
    ];
    for (shape, path, field, want) in table {
        let (status, v) = get_as(&gw, shape, path, KEY).await;
        assert_eq!(
            (status, v[field].as_str()),
            (200, Some(want)),
            "{shape} {path}: {v}"
        );
    }
    // Not the narrow key's, or no model at all: the protocol's own 404.
    for path in ["/v1/models/alpha", "/v1/models/nope"] {
        let (status, v) = get_as(&gw, "openai", path, NARROW).await;
        assert_eq!(
            (status, &v["error"]["code"]),
            (404, &json!("model_not_found")),
            "{v}"
        );
        let (status, v) = get_as(&gw, "anthropic", path, NARROW).await;
        assert_eq!(
            (status, &v["type"], &v["error"]["type"]),
            (404, &json!("error"), &json!("not_found_error")),
            "{v}"
        );
        let gemini = path.replace("/v1/", "/v1beta/");
        let (status, v) = get_as(&gw, "gemini", &gemini, NARROW).await;
        assert_eq!(
            (status, &v["error"]["status"]),
            (404, &json!("NOT_FOUND")),
            "{v}"
        );
    }
    // No key: 401 in the shape asked.
    let (status, v) = get_as(&gw, "anthropic", "/v1/models", "sk-wrong").await;
    assert_eq!(
        (status, &v["error"]["type"]),
        (401, &json!("authentication_error")),
        "{v}"
    );
}

/// Creates a Responses answer on `model`; returns its id.
async fn respond(gw: &Gateway, model: &str) -> String {
    let resp = gw
        .post_as(
            "/v1/responses",
            KEY,
            &[],
            json!({"model": model, "input": "What is kept?"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    v["id"].as_str().unwrap().to_string()
}

async fn call(gw: &Gateway, method: reqwest::Method, path: &str, key: &str) -> (u16, Value) {
    let resp = client()
        .request(method, format!("{}{path}", gw.url))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn a_response_the_gateway_answered_is_read_listed_and_deleted_by_its_key_only() {
    let up = mock(text_spec("Kept answer")).await;
    let gw = gateway_full(
        "",
        &format!("\n[[keys]]\nname = \"other\"\nkey = \"{NARROW}\"\n"),
        &channel("plain", "openai", &up, "[\"m\"]", ""),
    )
    .await;
    let id = respond(&gw, "m").await;
    let get = reqwest::Method::GET;
    let (status, v) = call(&gw, get.clone(), &format!("/v1/responses/{id}"), KEY).await;
    assert_eq!(
        (status, &v["id"], &v["status"]),
        (200, &json!(id), &json!("completed")),
        "{v}"
    );
    assert_eq!(v["output"][0]["content"][0]["text"], "Kept answer", "{v}");
    let (status, items) = call(
        &gw,
        get.clone(),
        &format!("/v1/responses/{id}/input_items"),
        KEY,
    )
    .await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(
        items["data"][0]["content"][0],
        json!({"type": "input_text", "text": "What is kept?"})
    );
    assert_eq!(
        (items["data"].as_array().unwrap().len(), &items["has_more"]),
        (1, &json!(false))
    );
    let (status, v) = call(
        &gw,
        get.clone(),
        &format!("/v1/responses/{id}/input_items?limit=0"),
        KEY,
    )
    .await;
    assert_eq!(
        (status, &v["error"]["param"]),
        (400, &json!("limit")),
        "{v}"
    );

    // Another key never sees it.
    let (status, v) = call(&gw, get.clone(), &format!("/v1/responses/{id}"), NARROW).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("response_not_found")),
        "{v}"
    );

    let (status, v) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
        KEY,
    )
    .await;
    assert_eq!((status, &v["deleted"]), (200, &json!(true)), "{v}");
    let (status, _) = call(&gw, get, &format!("/v1/responses/{id}"), KEY).await;
    assert_eq!(status, 404);
    // Deleted means it can no longer be continued either.
    let resp = gw
        .post_as(
            "/v1/responses",
            KEY,
            &[],
            json!({"model": "m", "input": "and?", "previous_response_id": id}),
        )
        .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(
        up.requests(),
        1,
        "reading and deleting asked nothing upstream"
    );
}

#[tokio::test]
async fn a_response_its_upstream_keeps_is_asked_of_that_channel_only() {
    let keeper = mock(text_spec("Upstream kept")).await;
    let other = mock(text_spec("other")).await;
    let gw = gateway(&format!(
        "{}{}",
        channel("keeper", "responses", &keeper, "[\"m\"]", "priority = 1"),
        channel("other", "responses", &other, "[\"m\"]", "priority = 2"),
    ))
    .await;
    let id = respond(&gw, "m").await;
    let get = reqwest::Method::GET;
    let (status, v) = call(&gw, get.clone(), &format!("/v1/responses/{id}"), KEY).await;
    assert_eq!((status, &v["id"]), (200, &json!(id)), "{v}");
    let (status, v) = call(
        &gw,
        get.clone(),
        &format!("/v1/responses/{id}/input_items?limit=5&order=asc&junk=1"),
        KEY,
    )
    .await;
    assert_eq!((status, &v["object"]), (200, &json!("list")), "{v}");
    let (status, v) = call(
        &gw,
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
        KEY,
    )
    .await;
    assert_eq!((status, &v["deleted"]), (200, &json!(true)), "{v}");
    let got: Vec<(String, String)> = keeper
        .received()
        .iter()
        .filter(|r| r.path.starts_with("/responses/"))
        .map(|r| (r.path.clone(), r.uri.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("/responses/retrieve".into(), format!("/v1/responses/{id}")),
            (
                "/responses/input_items".into(),
                format!("/v1/responses/{id}/input_items?limit=5&order=asc")
            ),
            ("/responses/delete".into(), format!("/v1/responses/{id}")),
        ]
    );
    let auth = keeper.received().last().unwrap().headers["authorization"].clone();
    assert_eq!(auth, format!("Bearer {UPSTREAM_KEY}"));
    assert_eq!(other.requests(), 0, "no other channel is asked");
    // Deleted here too: the next read does not reach the upstream.
    let seen = keeper.requests();
    let (status, _) = call(&gw, get, &format!("/v1/responses/{id}"), KEY).await;
    assert_eq!((status, keeper.requests()), (404, seen));
}

#[tokio::test]
async fn an_unknown_route_is_logged_for_a_valid_key_only() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&channel("plain", "openai", &up, "[\"m\"]", "")).await;
    let (status, v) = call(&gw, reqwest::Method::GET, "/v1/nowhere", KEY).await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("not_found")),
        "{v}"
    );
    let (status, _) = call(&gw, reqwest::Method::GET, "/v1/elsewhere", "sk-wrong").await;
    assert_eq!(status, 404);
    let rows = gw.admin_requests().await;
    let unknown: Vec<&Value> = rows
        .iter()
        .filter(|r| r["endpoint"] == "unknown_route")
        .collect();
    assert_eq!(unknown.len(), 1, "{rows:?}");
    assert_eq!(
        (&unknown[0]["status"], &unknown[0]["key_name"]),
        (&json!(404), &json!("team-a"))
    );
}
