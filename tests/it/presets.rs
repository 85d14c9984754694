//! Named OpenAI-compatible providers (`provider = "groq"`, `"mistral"`...): each against a mock
//! told to refuse what that provider refuses (stated here, apart from the preset table), which
//! a plain `openai` channel's request fails and the preset's passes; Mistral's tool call ids,
//! DeepSeek's reasoning both ways, OpenRouter's attribution headers, local servers without keys.

use serde_json::{Value, json};
use switchyard::provider::mock::{MockServer, MockSpec, Refuse};

use crate::support::*;

/// What each provider refuses (its documented 400s and 422s), as the mock plays it.
fn refusals(provider: &str) -> Refuse {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    match provider {
        "groq" => Refuse {
            fields: s(&["logprobs", "top_logprobs", "logit_bias", "n", "store"]),
            message_fields: s(&["name", "reasoning_content"]),
            ..Refuse::default()
        },
        "together" => Refuse {
            fields: s(&["store", "reasoning_effort", "max_completion_tokens"]),
            ..Refuse::default()
        },
        "fireworks" => Refuse {
            fields: s(&["store", "parallel_tool_calls", "max_completion_tokens"]),
            ..Refuse::default()
        },
        "deepseek" => Refuse {
            fields: s(&[
                "store",
                "parallel_tool_calls",
                "logit_bias",
                "reasoning_effort",
                "max_completion_tokens",
            ]),
            response_format: s(&["json_schema"]),
            ..Refuse::default()
        },
        "mistral" => Refuse {
            fields: s(&[
                "store",
                "stream_options",
                "logit_bias",
                "logprobs",
                "top_logprobs",
                "user",
                "reasoning_effort",
                "service_tier",
                "metadata",
                "max_completion_tokens",
                "seed",
            ]),
            message_fields: s(&["reasoning_content"]),
            tool_choice: s(&["required"]),
            tool_call_ids_alnum9: true,
            ..Refuse::default()
        },
        "xai" => Refuse {
            fields: s(&["store", "logit_bias"]),
            ..Refuse::default()
        },
        "openrouter" => Refuse {
            require_headers: s(&["http-referer", "x-title"]),
            ..Refuse::default()
        },
        "cerebras" => Refuse {
            fields: s(&[
                "frequency_penalty",
                "presence_penalty",
                "logit_bias",
                "store",
                "parallel_tool_calls",
                "service_tier",
            ]),
            message_fields: s(&["name", "reasoning_content"]),
            ..Refuse::default()
        },
        "perplexity" => Refuse {
            fields: s(&[
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "store",
                "logit_bias",
                "logprobs",
                "top_logprobs",
                "n",
                "stream_options",
                "reasoning_effort",
            ]),
            message_fields: s(&["name", "reasoning_content"]),
            ..Refuse::default()
        },
        _ => Refuse {
            fields: s(&["store"]),
            ..Refuse::default()
        },
    }
}

const PROVIDERS: [&str; 12] = [
    "groq",
    "together",
    "fireworks",
    "deepseek",
    "mistral",
    "xai",
    "openrouter",
    "cerebras",
    "perplexity",
    "ollama",
    "vllm",
    "lmstudio",
];

/// A request carrying everything some provider refuses, as an OpenAI client sends it.
fn everything(stream: bool) -> Value {
    let mut v = json!({"model": "m", "stream": stream,
        "max_completion_tokens": 64, "seed": 7, "store": true, "user": "u-1", "n": 1,
        "logprobs": false, "top_logprobs": 0, "logit_bias": {"50256": -100}, "metadata": {"k": "v"},
        "service_tier": "auto", "reasoning_effort": "low", "parallel_tool_calls": false,
        "frequency_penalty": 0.1, "presence_penalty": 0.1,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
        "messages": [
            {"role": "user", "name": "alice", "content": "weather?"},
            {"role": "assistant", "content": null, "reasoning_content": "Think.",
             "tool_calls": [{"id": "call_Xy_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_Xy_1", "content": "sunny"}]});
    if stream {
        v["stream_options"] = json!({"include_usage": true});
    }
    v
}

fn strict(provider: &str) -> MockSpec {
    MockSpec {
        refuse: Some(refusals(provider)),
        ..text_spec("ok")
    }
}

fn channel(name: &str, provider: &str, up: &MockServer, extra: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nprovider = \"{provider}\"\nbase_url = \"{}\"\n\
         api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"m\"]\n{extra}\n\n",
        up.base_url()
    )
}

#[tokio::test]
async fn each_provider_gets_a_request_it_takes_where_a_plain_openai_one_is_refused() {
    for provider in PROVIDERS {
        let up = mock(strict(provider)).await;
        let plain = gateway(&channel("plain", "openai", &up, "")).await;
        let named = gateway(&channel("named", provider, &up, "")).await;
        for stream in [false, true] {
            let resp = plain.chat(everything(stream)).await;
            let refused = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert_eq!(
                refused, 400,
                "{provider}: the mock must refuse OpenAI's request: {text}"
            );
            let resp = named.chat(everything(stream)).await;
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert_eq!(status, 200, "{provider} (stream {stream}): {text}");
            let answer = if stream {
                sse_text(&text)
            } else {
                serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            assert_eq!(answer, "ok", "{provider}: {text}");
        }
    }
}

#[tokio::test]
async fn the_renamed_fields_arrive_under_the_providers_names() {
    let up = mock(strict("mistral")).await;
    let gw = gateway(&channel("mistral", "mistral", &up, "")).await;
    assert_eq!(gw.chat(everything(false)).await.status(), 200);
    let sent = &up.received()[0].body;
    assert_eq!(
        (&sent["max_tokens"], &sent["random_seed"]),
        (&json!(64), &json!(7)),
        "{sent}"
    );
    assert_eq!(sent["tool_choice"], "any");
    let call_id = sent["messages"][1]["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(
        sent["messages"][2]["tool_call_id"], call_id,
        "a call and its result still pair"
    );
    // DeepSeek takes no schema: JSON still, as a JSON object.
    let up = mock(strict("deepseek")).await;
    let gw = gateway(&channel("deepseek", "deepseek", &up, "")).await;
    assert_eq!(gw.chat(everything(false)).await.status(), 200);
    assert_eq!(
        up.received()[0].body["response_format"],
        json!({"type": "json_object"})
    );
}

#[tokio::test]
async fn deepseeks_reasoning_reaches_an_anthropic_client_as_thinking_and_goes_back_as_reasoning_content()
 {
    let up = mock(MockSpec {
        reasoning: Some("Let me think.".into()),
        ..text_spec("Answer.")
    })
    .await;
    let gw = gateway(&channel("deepseek", "deepseek", &up, "")).await;
    let ask =
        json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    let v: Value = gw
        .post_as("/v1/messages", KEY, &[], ask)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["content"][0],
        json!({"type": "thinking", "thinking": "Let me think.", "signature": ""}),
        "{v}"
    );
    // The next turn sends it back, as DeepSeek's thinking mode wants.
    let next = json!({"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": v["content"]},
        {"role": "user", "content": "and?"}]});
    assert_eq!(
        gw.post_as("/v1/messages", KEY, &[], next).await.status(),
        200
    );
    let sent = &up.received()[1].body;
    assert_eq!(
        sent["messages"][1]["reasoning_content"], "Let me think.",
        "{sent}"
    );
}

#[tokio::test]
async fn openrouter_gets_attribution_headers_and_a_channel_sets_its_own() {
    let up = mock(strict("openrouter")).await;
    let gw = gateway(&format!(
        "{}{}",
        channel("default-attribution", "openrouter", &up, "priority = 1"),
        channel(
            "own",
            "openrouter",
            &up,
            "priority = 2\nheaders = { \"X-Title\" = \"My App\" }"
        )
        .replace("models = [\"m\"]", "models = [\"own\"]"),
    ))
    .await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    let ask = json!({"model": "own", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(gw.chat(ask).await.status(), 200);
    let got = up.received();
    assert_eq!(got[0].headers["x-title"], "Switchyard");
    assert!(
        got[0].headers["http-referer"]
            .to_str()
            .unwrap()
            .starts_with("https://")
    );
    assert_eq!(got[1].headers["x-title"], "My App");
}

#[tokio::test]
async fn local_servers_need_no_key_and_hosted_ones_do() {
    let up = mock(text_spec("ok")).await;
    for local in ["ollama", "vllm", "lmstudio"] {
        let gw = gateway(&format!(
            "[[channels]]\nname = \"{local}\"\nprovider = \"{local}\"\nbase_url = \"{}\"\nmodels = [\"m\"]\n\n",
            up.base_url()
        ))
        .await;
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200, "{local}");
        assert!(
            up.received()
                .last()
                .unwrap()
                .headers
                .get("authorization")
                .is_none()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(
        &path,
        "[[keys]]\nname = \"k\"\nkey = \"sk-a-key-long-enough\"\n\n[[channels]]\nname = \"g\"\nprovider = \"groq\"\nmodels = [\"m\"]\n",
    )
    .unwrap();
    let out = run_bin(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(!out.ok);
    assert!(
        out.err.contains("channels[0].api_keys") && out.err.contains("groq"),
        "{}",
        out.err
    );
}

/// docs/providers.md's table says what the preset table does, provider by provider.
#[test]
fn the_documented_table_is_the_preset_table() {
    let doc = include_str!("../../docs/providers.md");
    for p in switchyard::provider::presets::all() {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", p.name)))
            .unwrap_or_else(|| panic!("no row for {}", p.name));
        assert!(row.contains(&format!("`{}`", p.base_url)), "{row}");
        assert_eq!(row.contains("not needed"), !p.key_required, "{row}");
        let named = p
            .drop
            .iter()
            .chain(&p.drop_message_fields)
            .chain(p.rename.keys())
            .chain(p.headers.keys());
        for field in named {
            assert!(row.contains(&format!("`{field}`")), "{field} in {row}");
        }
    }
}
