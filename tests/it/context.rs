//! Context windows end to end: trimming per key, per model route and per request in all three
//! ingress protocols, the 400 when even the minimum does not fit, and context fallbacks (by our
//! count and by the upstream's own context error).

use serde_json::{Value, json};
use switchyard::provider::mock::MockSpec;

use crate::support::*;

/// `[[models]]` entries: `tight` and `roomy` differ only in size.
const CATALOG: &str = r#"
[[models]]
name = "big"
context_window = 100000
max_output_tokens = 1000

[[models]]
name = "tight"
context_window = 2000
max_output_tokens = 200

[[models]]
name = "roomy"
context_window = 4000
max_output_tokens = 200
"#;

/// `small` trims nothing by itself but falls back to `big`.
const SMALL: &str = r#"
[[models]]
name = "small"
context_window = 2000
max_output_tokens = 200
context_fallbacks = ["big"]
"#;

/// About 70 tokens of filler.
fn filler(i: usize) -> String {
    format!(
        "turn {i}: {}",
        "the quick brown fox jumps over the lazy dog ".repeat(7)
    )
}

/// An OpenAI history of `turns` user/assistant pairs (~140 tokens each), then the latest turn.
fn openai_history(model: &str, turns: usize) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": filler(i)}));
        messages.push(json!({"role": "assistant", "content": filler(i)}));
    }
    messages.push(json!({"role": "user", "content": "the latest question"}));
    json!({"model": model, "messages": messages})
}

/// An Anthropic agent history: the task, then `steps` tool exchanges whose results carry the
/// filler (results come back in user turns, as Claude Code sends them).
fn anthropic_agent(model: &str, steps: usize, stream: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "refactor the parser"})];
    for i in 0..steps {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": format!("toolu_{i}"), "name": "read", "input": {"path": format!("f{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": filler(i)}]}));
    }
    json!({"model": model, "max_tokens": 200, "stream": stream, "system": "You are an agent.",
        "tools": [{"name": "read", "description": "Read a file",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "messages": messages})
}

/// A Gemini history of `turns` user/model pairs, then the latest turn.
fn gemini_history(turns: usize) -> Value {
    let mut contents = Vec::new();
    for i in 0..turns {
        contents.push(json!({"role": "user", "parts": [{"text": filler(i)}]}));
        contents.push(json!({"role": "model", "parts": [{"text": filler(i)}]}));
    }
    contents.push(json!({"role": "user", "parts": [{"text": "the latest question"}]}));
    json!({"systemInstruction": {"parts": [{"text": "You are terse."}]}, "contents": contents})
}

fn anthropic_channel(name: &str, base: &str, models: &[&str]) -> String {
    let list: Vec<String> = models.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"anthropic\"\nbase_url = \"{base}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [{}]\n\n",
        list.join(", ")
    )
}

fn trim_header() -> [(&'static str, &'static str); 1] {
    [("x-switchyard-trim", "auto")]
}

fn num(resp: &reqwest::Response, name: &str) -> u64 {
    header(resp, name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} missing"))
}

#[tokio::test]
async fn an_openai_request_is_trimmed_only_when_asked_and_keeps_system_and_latest_turn() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{}{CATALOG}",
        models_channel("a", &up.base_url(), &["tight"], "")
    ))
    .await;
    let body = openai_history("tight", 30);

    // Not asked: sent whole, not even counted.
    let resp = gw
        .post_as("/v1/chat/completions", KEY, &[], body.clone())
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-trimmed-turns"), "");
    assert_eq!(
        up.received()[0].body["messages"].as_array().unwrap().len(),
        62
    );

    let resp = gw
        .post_as("/v1/chat/completions", KEY, &trim_header(), body)
        .await;
    assert_eq!(resp.status(), 200);
    let turns = num(&resp, "x-switchyard-trimmed-turns");
    let tokens = num(&resp, "x-switchyard-prompt-tokens");
    // Down to trim_to (80 %) of the window less the reply's reservation, not to the edge.
    assert!(tokens <= 1600 - 200, "{tokens}");
    assert!(tokens > 1000, "trimmed far more than needed: {tokens}");
    let sent = up.received()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(sent.len() as u64, 62 - 2 * turns);
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent[1]["role"], "user");
    assert_eq!(sent.last().unwrap()["content"], "the latest question");
    // Oldest first: what is left is the newest history, in order.
    let expect = format!("turn {}: ", 30 - (sent.len() - 2) / 2);
    assert!(
        sent[1]["content"].as_str().unwrap().starts_with(&expect),
        "{}",
        sent[1]["content"]
    );
    assert_eq!(
        resp.json::<Value>().await.unwrap()["choices"][0]["message"]["content"],
        "ok"
    );
    // The log keeps what was sent: counted and trimmed for the second request only.
    let rows = gw.admin_requests().await;
    assert_eq!(rows[0]["trimmed_turns"], turns);
    assert_eq!(rows[0]["prompt_tokens"], tokens);
    assert!(rows[1]["trimmed_turns"].is_null());
    // `switchyard_trimmed_requests_total` counts the trimmed one only.
    assert_eq!(gw.running.state.telemetry.metrics.trimmed.get(), 1);

    // A bad value is the client's mistake, in its envelope.
    let resp = gw
        .post_as(
            "/v1/chat/completions",
            KEY,
            &[("x-switchyard-trim", "maybe")],
            openai_history("tight", 1),
        )
        .await;
    let e = error_envelope(resp, 400).await;
    assert_eq!(e["code"], "invalid_header");
}

#[tokio::test]
async fn an_anthropic_agent_stream_is_trimmed_by_its_key_without_splitting_a_tool_exchange() {
    let up = mock(text_spec("done")).await;
    // The key trims everything it sends; the Anthropic channel gets the client's raw body, cut.
    let gw = gateway_full(
        "",
        "trim = true",
        &format!(
            "{}{CATALOG}",
            anthropic_channel("claude", &up.base_url(), &["tight"])
        ),
    )
    .await;
    let resp = gw
        .post_as("/v1/messages", KEY, &[], anthropic_agent("tight", 25, true))
        .await;
    assert_eq!(resp.status(), 200);
    assert!(num(&resp, "x-switchyard-trimmed-turns") > 0);
    let text = resp.text().await.unwrap();
    assert!(text.contains("message_stop"), "{text}");
    let got = &up.received()[0].body;
    let sent = got["messages"].as_array().unwrap();
    assert!(sent.len() < 51, "{}", sent.len());
    // The system prompt and tools stay; the task opens the history; the last exchange ends it.
    assert_eq!(got["system"], "You are an agent.");
    assert_eq!(got["tools"][0]["name"], "read");
    assert_eq!(sent[0]["content"], "refactor the parser");
    assert_eq!(
        sent.last().unwrap()["content"][0]["tool_use_id"],
        "toolu_24"
    );
    // Every result still follows the call that asked for it, and the oldest went first.
    for (i, m) in sent.iter().enumerate().skip(1) {
        if m["role"] == "user" {
            let id = &m["content"][0]["tool_use_id"];
            assert_eq!(&sent[i - 1]["content"][1]["id"], id, "{i}");
        }
    }
    let first_kept = sent[1]["content"][1]["id"].as_str().unwrap();
    let kept_from: usize = first_kept.trim_start_matches("toolu_").parse().unwrap();
    assert_eq!(kept_from, 25 - (sent.len() - 1) / 2);
    // `x-switchyard-trim: off` sends this request whole, over the key's setting.
    let resp = gw
        .post_as(
            "/v1/messages",
            KEY,
            &[("x-switchyard-trim", "off")],
            anthropic_agent("tight", 25, false),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-trimmed-turns"), "");
    assert_eq!(
        up.received()[1].body["messages"].as_array().unwrap().len(),
        51
    );
}

#[tokio::test]
async fn a_gemini_request_is_trimmed_by_its_model_route_across_protocols() {
    let up = mock(text_spec("fine")).await;
    let gw = gateway(&format!(
        "{}{CATALOG}\n[[models]]\nname = \"gem-*\"\ncontext_window = 2000\nmax_output_tokens = 200\ntrim = true\n",
        models_channel("a", &up.base_url(), &["gem-small"], "")
    ))
    .await;
    let resp = gw
        .post_as(
            "/v1beta/models/gem-small:generateContent",
            KEY,
            &[],
            gemini_history(30),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let turns = num(&resp, "x-switchyard-trimmed-turns");
    assert!(turns > 0);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "fine");
    // Translated to OpenAI for the channel: system first, the newest history, the latest turn.
    let sent = up.received()[0].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(sent.len() as u64, 62 - 2 * turns);
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent.last().unwrap()["content"], "the latest question");
    // `off` overrides the route for one request.
    let resp = gw
        .post_as(
            "/v1beta/models/gem-small:generateContent",
            KEY,
            &[("x-switchyard-trim", "off")],
            gemini_history(30),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        up.received()[1].body["messages"].as_array().unwrap().len(),
        62
    );
}

#[tokio::test]
async fn when_even_the_minimum_does_not_fit_the_answer_is_400_in_each_envelope() {
    let up = mock(text_spec("never")).await;
    let gw = gateway_full(
        "",
        "trim = true",
        &format!(
            "{}{CATALOG}",
            models_channel("a", &up.base_url(), &["tight"], "")
        ),
    )
    .await;
    let huge = "word ".repeat(3000);
    let body = json!({"model": "tight", "max_tokens": 100,
        "messages": [{"role": "system", "content": huge}, {"role": "user", "content": "hi"}]});
    let e = error_envelope(
        gw.post_as("/v1/chat/completions", KEY, &[], body.clone())
            .await,
        400,
    )
    .await;
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["type"], "invalid_request_error");
    let c = &e["context"];
    assert_eq!(c["model"], "tight");
    assert_eq!(c["context_window"], 2000);
    assert_eq!(c["reserved_output_tokens"], 100);
    assert!(
        c["prompt_tokens_minimum"].as_u64().unwrap() > c["prompt_tokens_budget"].as_u64().unwrap()
    );
    assert!(e["message"].as_str().unwrap().contains("2000"));

    let anthropic = json!({"model": "tight", "max_tokens": 100, "system": huge,
        "messages": [{"role": "user", "content": "hi"}]});
    let resp = gw.post_as("/v1/messages", KEY, &[], anthropic).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context window")
    );

    let gemini = json!({"systemInstruction": {"parts": [{"text": huge}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let resp = gw
        .post_as("/v1beta/models/tight:generateContent", KEY, &[], gemini)
        .await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    // Nothing was sent upstream: the gateway knew.
    assert_eq!(up.requests(), 0);
}

#[tokio::test]
async fn a_request_too_long_for_its_model_goes_to_the_first_larger_fallback() {
    let small = mock(text_spec("small")).await;
    let big = mock(text_spec("big")).await;
    let gw = gateway(&format!(
        "{}{}{CATALOG}{SMALL}",
        models_channel("s", &small.base_url(), &["small"], ""),
        models_channel("b", &big.base_url(), &["big"], ""),
    ))
    .await;
    // Short: fits `small`, served there, counted (its route has a fallback).
    let resp = gw.chat(openai_history("small", 2)).await;
    assert_eq!(header(&resp, "x-switchyard-model"), "small");
    assert!(num(&resp, "x-switchyard-prompt-tokens") > 100);
    // Long: `small` is passed over without a call, recorded as a context_window failover.
    let resp = gw.chat(openai_history("small", 30)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "big");
    assert_eq!(header(&resp, "x-switchyard-trimmed-turns"), "0");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "big");
    let attempts = &v["switchyard"]["failover"]["attempts"];
    assert_eq!(reasons(attempts), ["context_window", "ok"]);
    assert_eq!(attempts[0]["model"], "small");
    assert!(attempts[0]["channel"].is_null());
    assert_eq!(small.requests(), 1);
    assert_eq!(big.requests(), 1);
    // The route preview says so without calling anyone.
    let plan: Value = gw
        .post_as("/v1/route/explain", KEY, &[], openai_history("small", 30))
        .await
        .json()
        .await
        .unwrap();
    let c = &plan["chain"][0]["context"];
    assert_eq!(c["action"], "context_fallback", "{plan}");
    assert_eq!(c["fallback"], "big");
    assert_eq!(c["context_window"], 2000);
    assert!(c["prompt_tokens"].as_u64().unwrap() > c["prompt_tokens_budget"].as_u64().unwrap());
    let plan: Value = gw
        .post_as("/v1/route/explain", KEY, &[], openai_history("small", 2))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(plan["chain"][0]["context"]["action"], "as_is", "{plan}");
    assert_eq!(big.requests(), 1);
    assert_eq!(
        big.received()[0].body["messages"].as_array().unwrap().len(),
        62
    );
}

#[tokio::test]
async fn an_upstream_context_error_moves_to_the_fallback_and_otherwise_reaches_the_client() {
    // Each provider's own way of saying it: OpenAI by code; Anthropic and Gemini, which have
    // no code for it, by their documented messages.
    let cases = [
        (
            "openai",
            json!({"error": {"message": "This model's maximum context length is 2000 tokens.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        ),
        (
            "anthropic",
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "prompt is too long: 2300 tokens > 2000 maximum"}}),
        ),
        (
            "gemini",
            json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "The input token count (2300) exceeds the maximum number of tokens allowed (2000)."}}),
        ),
    ];
    for (provider, overflow) in cases {
        let small = answering(400, overflow.clone()).await;
        let big = mock(text_spec("big")).await;
        // Our count says it fits `small` (2 turns); the upstream disagrees.
        let gw = gateway(&format!(
            "[[channels]]\nname = \"s\"\nprovider = \"{provider}\"\nbase_url = \"http://{small}/v1\"\n\
             api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"small\", \"tight\"]\n\n{}{CATALOG}{SMALL}",
            models_channel("b", &big.base_url(), &["big"], ""),
        ))
        .await;
        let resp = gw.chat(openai_history("small", 2)).await;
        assert_eq!(resp.status(), 200, "{provider}");
        assert_eq!(header(&resp, "x-switchyard-model"), "big");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            reasons(&v["switchyard"]["failover"]["attempts"]),
            ["context_window", "ok"],
            "{provider}"
        );
        // A route without fallbacks: the upstream's answer is the client's, its message kept.
        let resp = gw.chat(openai_history("tight", 2)).await;
        assert_eq!(resp.status(), 400, "{provider}");
        let v: Value = resp.json().await.unwrap();
        // In the client's envelope, with the code OpenAI SDKs and agents act on.
        assert_eq!(
            v["error"]["message"], overflow["error"]["message"],
            "{provider}"
        );
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{provider}");
        // An Anthropic client (Claude Code) is told in Anthropic's words.
        let resp = gw
            .post_as(
                "/v1/messages",
                KEY,
                &[],
                json!({"model": "tight", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await;
        assert_eq!(resp.status(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{provider}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.starts_with("prompt is too long"), "{provider}: {m}");
    }
}

#[tokio::test]
async fn each_attempt_is_trimmed_for_its_own_model() {
    // `tight` fails (500), the chain moves to `roomy`, whose request keeps more history.
    let tight = mock(faulty("x", status(500))).await;
    let roomy = mock(MockSpec {
        text: "roomy".into(),
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&format!(
        "{}{}{CATALOG}",
        models_channel("t", &tight.base_url(), &["tight"], ""),
        models_channel("r", &roomy.base_url(), &["roomy"], ""),
    ))
    .await;
    let mut body = openai_history("tight", 30);
    body["models"] = json!(["tight", "roomy"]);
    let resp = gw
        .post_as("/v1/chat/completions", KEY, &trim_header(), body)
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "roomy");
    let to_tight = tight.received()[0].body["messages"]
        .as_array()
        .unwrap()
        .len();
    let to_roomy = roomy.received()[0].body["messages"]
        .as_array()
        .unwrap()
        .len();
    assert!(to_tight < to_roomy, "{to_tight} vs {to_roomy}");
    assert!(to_roomy < 62);
    // The headers describe what the serving attempt was sent.
    assert_eq!(
        num(&resp, "x-switchyard-trimmed-turns"),
        (62 - to_roomy as u64) / 2
    );
}

#[tokio::test]
async fn a_fallback_must_have_a_known_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[channels]]\nname = \"a\"\nprovider = \"mock\"\nmodels = [\"x\", \"y\"]\n\n\
         [[models]]\nname = \"x\"\ncontext_window = 1000\ncontext_fallbacks = [\"y\"]\n",
    )
    .unwrap();
    let err = switchyard::config::load_file(&path, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("models[0].context_fallbacks[0]"), "{err}");
    assert!(err.contains("[[models]]"), "{err}");
}

#[tokio::test]
async fn after_a_context_fallback_fails_the_chain_goes_on_and_fallbacks_stay_within_the_keys_groups()
 {
    let overflow = json!({"error": {"message": "This model's maximum context length is 2000 tokens.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    let small = answering(400, overflow.clone()).await;
    let big = mock(faulty("x", status(503))).await;
    let other = mock(text_spec("other")).await;
    let channels = format!(
        "{}{}{}{CATALOG}{SMALL}",
        models_channel("s", &format!("http://{small}/v1"), &["small"], ""),
        models_channel("b", &big.base_url(), &["big"], "groups = [\"premium\"]"),
        models_channel("o", &other.base_url(), &["other"], ""),
    );
    // `small` overflows upstream, its fallback `big` fails, the chain's next model serves.
    let gw = gateway(&channels).await;
    let mut body = openai_history("small", 2);
    body["models"] = json!(["small", "other"]);
    let resp = gw.chat(body.clone()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "other");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        reasons(&v["switchyard"]["failover"]["attempts"]),
        ["context_window", "server_error", "ok"]
    );
    // A key that cannot use `big` gets no fallback: the upstream's answer, not a 404 for a
    // model it never named.
    let gw = gateway_full("", "groups = [\"default\"]", &channels).await;
    let resp = gw.chat(openai_history("small", 2)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v, overflow);
}

#[tokio::test]
async fn a_request_too_long_for_the_first_model_of_a_chain_is_served_by_a_larger_one() {
    let tight = mock(text_spec("tight")).await;
    let big = mock(text_spec("big")).await;
    let gw = gateway_full(
        "",
        "trim = true",
        &format!(
            "{}{}{CATALOG}",
            models_channel("t", &tight.base_url(), &["tight"], ""),
            models_channel("b", &big.base_url(), &["big"], ""),
        ),
    )
    .await;
    let huge = "word ".repeat(3000);
    let body = json!({"models": ["tight", "big"], "max_tokens": 100,
        "messages": [{"role": "system", "content": huge}, {"role": "user", "content": "hi"}]});
    let resp = gw.chat(body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "big");
    assert_eq!(tight.requests(), 0);
    // Alone, the same request is refused in the client's terms.
    let body = json!({"model": "tight", "max_tokens": 100,
        "messages": [{"role": "system", "content": huge}, {"role": "user", "content": "hi"}]});
    let e = error_envelope(gw.chat(body).await, 400).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long: "),
        "{e}"
    );
}
