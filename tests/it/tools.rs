//! Tool calls through the gateway: what coding agents depend on most.

use serde_json::{Value, json};
use switchyard::provider::mock::{Fault, MockSpec, MockToolCall};

use crate::support::*;

fn tool_spec() -> MockSpec {
    MockSpec {
        chunks: 4,
        tool_call: Some(MockToolCall {
            name: "read_file".into(),
            arguments: r#"{"path": "src/main.rs", "lines": [1, 40]}"#.into(),
        }),
        ..MockSpec::default()
    }
}

fn tool_request(stream: bool) -> Value {
    json!({
        "model": "m",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Open main.rs"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_0", "content": "src/\nCargo.toml"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "array"}},
                "required": ["path"]},
            "strict": true
        }}],
        "tool_choice": "auto",
        "parallel_tool_calls": false
    })
}

#[tokio::test]
async fn tool_definitions_and_history_reach_the_upstream_intact() {
    let up = mock(tool_spec()).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let req = tool_request(false);
    let resp = gw.chat(req.clone()).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read_file");
    assert_eq!(
        call["function"]["arguments"],
        r#"{"path": "src/main.rs", "lines": [1, 40]}"#
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let got = &up.received()[0].body;
    for field in ["messages", "tools", "tool_choice", "parallel_tool_calls"] {
        assert_eq!(got[field], req[field], "{field}");
    }
}

#[tokio::test]
async fn streamed_tool_calls_commit_on_the_first_delta_and_reassemble() {
    let (_hang, _up, gw) = two_tiers(
        (
            "hang",
            MockSpec {
                fault: Some(Fault {
                    hang: true,
                    ..Fault::default()
                }),
                ..tool_spec()
            },
            "first_token_timeout_ms = 300",
        ),
        ("up", tool_spec()),
    )
    .await;
    let resp = gw.chat(tool_request(true)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "up");
    let body = resp.text().await.unwrap();
    let mut name = String::new();
    let mut args = String::new();
    let mut id = String::new();
    let mut finish = String::new();
    for d in sse_data(&body) {
        let Ok(v) = serde_json::from_str::<Value>(&d) else {
            continue;
        };
        let choice = &v["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(call["index"], 0);
            id.push_str(call["id"].as_str().unwrap_or(""));
            name.push_str(call["function"]["name"].as_str().unwrap_or(""));
            args.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    assert_eq!(id, "call_mock_0");
    assert_eq!(name, "read_file");
    assert_eq!(args, r#"{"path": "src/main.rs", "lines": [1, 40]}"#);
    assert_eq!(finish, "tool_calls");
    assert!(body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn the_mock_ends_an_agents_round_trip_once_the_tool_result_comes_back() {
    let up = mock(MockSpec {
        text: "done".into(),
        tool_call: Some(MockToolCall {
            name: "shell".into(),
            arguments: r#"{"command":["ls"]}"#.into(),
        }),
        answer_tool_results: true,
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&openai_channel("a", &up.base_url(), 1, "")).await;
    let ask = json!({"model": "m", "messages": [{"role": "user", "content": "list"}]});
    let v: Value = gw.chat(ask).await.json().await.unwrap();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "shell");
    let back = json!({"model": "m", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "a.rs"}]});
    let v: Value = gw.chat(back).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "done");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}
