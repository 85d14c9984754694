//! What requests cost: a ledger row per upstream attempt, priced by the serving channel's
//! rates, explained by `/admin/usage/requests/{id}` and summed by `/admin/usage`.

use serde_json::Value;

use crate::support::*;

const CHEAP: &str = "price = { input = 1, output = 2 }";
const DEAR: &str = "price = { input = 10, output = 20 }";

async fn usage_of(gw: &Gateway, id: &str) -> Value {
    gw.flush_log().await;
    get_json(
        &format!("{}/admin/usage/requests/{id}", gw.url),
        Some(ADMIN),
    )
    .await
}

fn n(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} is not a count in {v}"))
}

#[tokio::test]
async fn a_failover_is_charged_at_the_backups_price_with_a_row_per_attempt() {
    let cheap = mock(faulty("x", status(500))).await;
    let dear = mock(text_spec("served by the dear backup")).await;
    let gw = gateway(&format!(
        "{}{}",
        openai_channel("cheap", &cheap.base_url(), 1, CHEAP),
        openai_channel("dear", &dear.base_url(), 2, DEAR)
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-request-id").to_string();
    let cost: u64 = header(&resp, "x-switchyard-cost-micros").parse().unwrap();
    let body: Value = resp.json().await.unwrap();
    let (p, c) = (
        n(&body, "/usage/prompt_tokens"),
        n(&body, "/usage/completion_tokens"),
    );
    // $10 and $20 per 1M tokens are 10 and 20 micro-dollars a token.
    assert_eq!(cost, 10 * p + 20 * c);
    let u = usage_of(&gw, &id).await;
    assert_eq!(n(&u, "/cost_micros"), cost, "{u}");
    let a = u["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2, "{u}");
    assert_eq!(a[0]["channel"], "cheap");
    assert_eq!(a[0]["outcome"], "server_error");
    assert_eq!(n(&a[0], "/cost_micros"), 0);
    assert_eq!(a[1]["channel"], "dear");
    assert_eq!(
        (n(&a[1], "/tokens/input"), n(&a[1], "/tokens/output")),
        (p, c)
    );
    assert_eq!(a[1]["price"]["input"], 10.0);
    assert_eq!(a[1]["price_version"].as_str().unwrap().len(), 8);
    assert_ne!(a[0]["price_version"], a[1]["price_version"]);
    assert_eq!(a[1]["estimated"], false);
    assert_eq!(n(&u, "/failover/first_choice_micros"), p + 2 * c);
    assert_eq!(
        u["failover"]["extra_micros"].as_i64(),
        Some((cost - (p + 2 * c)) as i64)
    );
    // The request log row carries the same cost.
    let rows = gw.admin_requests().await;
    let row = rows.iter().find(|r| r["id"] == id.as_str()).unwrap();
    assert_eq!(row["cost_micros"].as_u64(), Some(cost));
    // And the sums by channel count both attempts of one request.
    let sums = get_json(
        &format!("{}/admin/usage?group_by=channel", gw.url),
        Some(ADMIN),
    )
    .await;
    let dear = sums["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["channel"] == "dear")
        .unwrap();
    assert_eq!(n(dear, "/cost_micros"), cost);
    assert_eq!(n(&sums, "/total/requests"), 1);
    assert_eq!(n(&sums, "/total/attempts"), 2);
}

#[tokio::test]
async fn a_stream_cut_after_commit_is_charged_for_what_it_delivered() {
    let cut = mock(after_chunks(2, true)).await;
    let gw = gateway(&openai_channel("cut", &cut.base_url(), 1, DEAR)).await;
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-request-id").to_string();
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "AAAABBBB");
    let u = usage_of(&gw, &id).await;
    let a = &u["attempts"][0];
    // No usage came: the two delivered chunks are counted, and the row says so.
    assert_eq!(a["estimated"], true, "{u}");
    assert_eq!(n(a, "/tokens/output"), 2);
    assert!(a["outcome"].as_str().unwrap().starts_with("stream_"), "{a}");
    let input = n(a, "/tokens/input");
    assert!(input > 0);
    assert_eq!(n(&u, "/cost_micros"), 10 * input + 20 * 2);
}

#[tokio::test]
async fn a_streams_cost_rides_on_its_usage_chunk() {
    let up = mock(text_spec("four chunks of text")).await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, DEAR)).await;
    let mut b = chat_body(true);
    b["stream_options"] = serde_json::json!({"include_usage": true});
    let resp = gw.chat(b).await;
    let id = header(&resp, "x-request-id").to_string();
    let body = resp.text().await.unwrap();
    let chunks: Vec<Value> = sse_data(&body)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let last = chunks
        .iter()
        .rev()
        .find(|c| c["usage"].is_object())
        .unwrap();
    let cost = n(last, "/switchyard/cost_micros");
    let (p, c) = (
        n(last, "/usage/prompt_tokens"),
        n(last, "/usage/completion_tokens"),
    );
    assert_eq!(cost, 10 * p + 20 * c);
    let u = usage_of(&gw, &id).await;
    assert_eq!(n(&u, "/cost_micros"), cost);
    assert_eq!(u["attempts"][0]["estimated"], false);
}

#[tokio::test]
async fn usage_queries_refuse_what_they_cannot_read() {
    let up = mock(text_spec("hi")).await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let cases = [
        ("/admin/usage?group_by=colour", 400, "invalid_value"),
        ("/admin/usage?from=yesterday", 400, "invalid_value"),
        (
            "/admin/usage?from=2026-12-02&to=2026-12-01",
            400,
            "invalid_value",
        ),
        ("/admin/usage/requests/req_nothing", 404, "not_found"),
    ];
    for (path, want, code) in cases {
        let resp = client()
            .get(format!("{}{path}", gw.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), want, "{path}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{path}: {v}");
    }
    // A model with no known price is served and charged 0, not refused.
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-cost-micros"), "0");
    // The day the ledger groups the request under: its own, in UTC.
    let ts = gw.admin_requests().await[0]["ts_ms"].as_u64().unwrap();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ts);
    let today = humantime::format_rfc3339(at).to_string()[..10].to_string();
    for (by, name) in [("day", today.as_str()), ("model", "m")] {
        let v = get_json(
            &format!("{}/admin/usage?group_by={by}", gw.url),
            Some(ADMIN),
        )
        .await;
        assert_eq!(v["group_by"], by);
        assert_eq!(v["rows"][0][by], name, "{v}");
        assert_eq!(
            (n(&v, "/rows/0/requests"), n(&v, "/rows/0/cost_micros")),
            (1, 0)
        );
    }
}

#[tokio::test]
async fn answers_without_usage_and_embeddings_are_charged_too() {
    // An upstream that answers without usage: the gateway counts, and says so.
    let bare = answering(
        200,
        serde_json::json!({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "twelve chars"}}]}),
    )
    .await;
    let gw = gateway(&openai_channel(
        "bare",
        &format!("http://{bare}/v1"),
        1,
        DEAR,
    ))
    .await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-request-id").to_string();
    let cost: u64 = header(&resp, "x-switchyard-cost-micros").parse().unwrap();
    let u = usage_of(&gw, &id).await;
    let a = &u["attempts"][0];
    assert_eq!(a["estimated"], true, "{u}");
    // "twelve chars" is 12 characters: 3 tokens at about 4 a token.
    assert_eq!(n(a, "/tokens/output"), 3);
    assert_eq!(cost, 10 * n(a, "/tokens/input") + 20 * 3);

    // Embeddings are priced by their model's price, input only.
    let up = mock(text_spec("v")).await;
    let gw = gateway(&openai_channel("e", &up.base_url(), 1, DEAR)).await;
    let resp = gw
        .post_as(
            "/v1/embeddings",
            KEY,
            &[],
            serde_json::json!({"model": "e", "input": "some text to embed"}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let cost: u64 = header(&resp, "x-switchyard-cost-micros").parse().unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(cost, 10 * n(&v, "/usage/prompt_tokens"));
}

/// A streamed request of client protocol `proto` for model `m`.
fn stream_request(gw: &Gateway, proto: &str) -> reqwest::RequestBuilder {
    let msgs = serde_json::json!([{"role": "user", "content": "what does it cost"}]);
    let (path, body) = match proto {
        "openai" => (
            "/v1/chat/completions".to_string(),
            serde_json::json!({"model": "m", "stream": true, "messages": msgs,
                "stream_options": {"include_usage": true}}),
        ),
        "anthropic" => (
            "/v1/messages".into(),
            serde_json::json!({"model": "m", "max_tokens": 64, "stream": true, "messages": msgs}),
        ),
        "gemini" => (
            "/v1beta/models/m:streamGenerateContent?alt=sse".into(),
            serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "what does it cost"}]}]}),
        ),
        _ => (
            "/v1/responses".into(),
            serde_json::json!({"model": "m", "stream": true, "input": "what does it cost", "store": false}),
        ),
    };
    client()
        .post(format!("{}{path}", gw.url))
        .bearer_auth(KEY)
        .header("x-goog-api-key", KEY)
        .json(&body)
}

/// (event name, data) of each event of an SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|ev| {
            let name = ev.lines().find_map(|l| l.strip_prefix("event: "));
            let data = ev.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((
                name.unwrap_or("").to_string(),
                serde_json::from_str(data).ok()?,
            ))
        })
        .collect()
}

/// Where each client protocol's stream carries its cost: beside the usage of the event that
/// ends it (Chat's usage chunk, Anthropic's `message_delta`, Gemini's last chunk, Responses'
/// `response.completed` response). The event, and the cost.
fn cost_in(proto: &str, evs: &[(String, Value)]) -> Option<(Value, u64)> {
    let (ev, path) = match proto {
        "openai" => (
            evs.iter().rev().find(|(_, v)| v["usage"].is_object())?,
            "/switchyard/cost_micros",
        ),
        "anthropic" => (
            evs.iter().find(|(n, _)| n == "message_delta")?,
            "/switchyard/cost_micros",
        ),
        "gemini" => (evs.last()?, "/switchyard/cost_micros"),
        _ => (
            evs.iter().find(|(n, _)| n == "response.completed")?,
            "/response/switchyard/cost_micros",
        ),
    };
    Some((ev.1.clone(), ev.1.pointer(path)?.as_u64()?))
}

#[tokio::test]
async fn every_client_protocols_stream_carries_its_cost_beside_the_final_usage() {
    let up = mock(text_spec("four chunks of text")).await;
    let root = up.base_url().trim_end_matches("/v1").to_string();
    // Each client protocol from an OpenAI channel (translated) and from a channel of its own
    // protocol (the upstream's events as they came).
    for proto in ["openai", "anthropic", "gemini", "responses"] {
        for upstream in ["openai", proto] {
            let (provider, base, more) = match upstream {
                "gemini" => ("gemini", format!("{root}/v1beta"), ""),
                "responses" => ("openai", up.base_url(), "responses = true\n"),
                other => (other, up.base_url(), ""),
            };
            let gw = gateway(&format!(
                "[[channels]]\nname = \"up\"\nprovider = \"{provider}\"\nbase_url = \"{base}\"\n\
                 api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\n{more}{DEAR}\n\n"
            ))
            .await;
            let resp = stream_request(&gw, proto).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{proto} from {upstream}");
            let id = header(&resp, "x-request-id").to_string();
            let body = resp.text().await.unwrap();
            let evs = events(&body);
            let (ev, cost) = cost_in(proto, &evs)
                .unwrap_or_else(|| panic!("{proto} from {upstream}: no cost in\n{body}"));
            let u = usage_of(&gw, &id).await;
            assert!(cost > 0, "{proto} from {upstream}: {ev}");
            assert_eq!(n(&u, "/cost_micros"), cost, "{proto} from {upstream}: {ev}");
            if proto == "gemini" {
                assert!(ev["usageMetadata"].is_object(), "{ev}");
            }
        }
    }
}
