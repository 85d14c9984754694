//! JSON Schemas cross protocols whole: a Gemini client's `parametersJsonSchema` (what Gemini CLI
//! and the google-genai SDK send for MCP tools) and `parameters`, and the shape it asks the
//! answer to take (`responseJsonSchema`, `responseSchema`, `responseMimeType`), reach OpenAI
//! and Anthropic channels in their own fields; OpenAI's `response_format` reaches Gemini and
//! Anthropic channels.

use serde_json::{Value, json};

use crate::support::*;

fn channels(base: &str) -> String {
    let gemini = base.replace("/v1", "/v1beta");
    ["openai", "anthropic", "gemini"]
        .iter()
        .map(|k| {
            let b = if *k == "gemini" { &gemini } else { base };
            format!(
                "[[channels]]\nname = \"{k}\"\nprovider = \"{k}\"\nbase_url = \"{b}\"\n\
                 api_keys = [\"{UPSTREAM_KEY}\"]\nmodels = [\"via-{k}\"]\n\n"
            )
        })
        .collect()
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}},
        "required": ["path"], "additionalProperties": false})
}

/// What each upstream kind got as the tool's parameters and as the answer's schema.
fn upstream_schemas(kind: &str, body: &Value) -> (Value, Value) {
    match kind {
        "openai" => (
            body["tools"][0]["function"]["parameters"].clone(),
            body["response_format"]["json_schema"]["schema"].clone(),
        ),
        "anthropic" => (
            body["tools"][0]["input_schema"].clone(),
            body["output_config"]["format"]["schema"].clone(),
        ),
        _ => (
            body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"].clone(),
            body["generationConfig"]["responseJsonSchema"].clone(),
        ),
    }
}

#[tokio::test]
async fn a_gemini_clients_json_schemas_reach_openai_and_anthropic_channels() {
    let up = mock(text_spec(r#"{"path": "a.rs"}"#)).await;
    let gw = gateway(&channels(&up.base_url())).await;
    // Both spellings of a function's schema: JSON Schema, and Gemini's upper-case subset.
    let declarations = [
        json!({"name": "read", "parametersJsonSchema": schema()}),
        json!({"name": "read", "parameters": {"type": "OBJECT",
            "properties": {"path": {"type": "STRING"}}, "required": ["path"],
            "additionalProperties": false}}),
    ];
    for (i, decl) in declarations.into_iter().enumerate() {
        for kind in ["openai", "anthropic"] {
            let body = json!({"contents": [{"role": "user", "parts": [{"text": "Which file?"}]}],
                "tools": [{"functionDeclarations": [decl.clone()]}],
                "generationConfig": {"responseMimeType": "application/json",
                    "responseJsonSchema": schema()}});
            let path = format!("/v1beta/models/via-{kind}:generateContent");
            let resp = gw.post_as(&path, KEY, &[], body).await;
            assert_eq!(resp.status(), 200, "{kind}");
            // Nothing of the schemas stayed behind.
            assert_eq!(
                header(&resp, "x-switchyard-translation"),
                "lossless",
                "{kind}"
            );
            let got = up.received().last().unwrap().body.clone();
            let (params, answer) = upstream_schemas(kind, &got);
            assert_eq!(params, schema(), "{kind}, declaration {i}: {got}");
            assert_eq!(answer, schema(), "{kind}: {got}");
        }
    }
}

#[tokio::test]
async fn an_openai_clients_response_format_reaches_gemini_and_anthropic_channels() {
    let up = mock(text_spec(r#"{"path": "a.rs"}"#)).await;
    let gw = gateway(&channels(&up.base_url())).await;
    for kind in ["gemini", "anthropic"] {
        let body = json!({"model": format!("via-{kind}"),
            "messages": [{"role": "user", "content": "Which file?"}],
            "tools": [{"type": "function", "function": {"name": "read", "parameters": schema()}}],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema(), "strict": true}}});
        let resp = gw.chat(body).await;
        assert_eq!(resp.status(), 200, "{kind}");
        let translation = header(&resp, "x-switchyard-translation").to_string();
        assert!(
            !translation.contains("response_format"),
            "{kind}: {translation}"
        );
        let got = up.received().last().unwrap().body.clone();
        assert_eq!(
            upstream_schemas(kind, &got),
            (schema(), schema()),
            "{kind}: {got}"
        );
    }
    // JSON without a schema: Gemini has a mode for it, Anthropic does not (and says so).
    for (kind, carried) in [("gemini", true), ("anthropic", false)] {
        let body = json!({"model": format!("via-{kind}"),
            "messages": [{"role": "user", "content": "JSON please"}],
            "response_format": {"type": "json_object"}});
        let resp = gw.chat(body).await;
        let translation = header(&resp, "x-switchyard-translation").to_string();
        assert_eq!(
            !translation.contains("response_format"),
            carried,
            "{kind}: {translation}"
        );
        let got = up.received().last().unwrap().body.clone();
        if kind == "gemini" {
            assert_eq!(
                got["generationConfig"]["responseMimeType"],
                "application/json"
            );
        } else {
            assert!(got.get("output_config").is_none(), "{got}");
        }
    }
}

#[tokio::test]
async fn an_anthropic_clients_output_format_reaches_openai_and_gemini_channels() {
    let up = mock(text_spec(r#"{"path": "a.rs"}"#)).await;
    let gw = gateway(&channels(&up.base_url())).await;
    let user = json!([{"role": "user", "content": "Which file?"}]);
    // Today's `output_config.format`, and the older top-level `output_format`.
    let forms = [
        json!({"output_config": {"format": {"type": "json_schema", "schema": schema()}}}),
        json!({"output_format": {"type": "json_schema", "schema": schema()}}),
    ];
    for form in forms {
        for kind in ["openai", "gemini"] {
            let mut body = json!({"model": format!("via-{kind}"), "max_tokens": 50,
                "messages": user});
            body.as_object_mut()
                .unwrap()
                .extend(form.as_object().unwrap().clone());
            let resp = gw.post_as("/v1/messages", KEY, &[], body).await;
            assert_eq!(resp.status(), 200, "{kind}");
            let translation = header(&resp, "x-switchyard-translation").to_string();
            assert!(!translation.contains("output"), "{kind}: {translation}");
            let got = up.received().last().unwrap().body.clone();
            let answer = match kind {
                "openai" => got["response_format"]["json_schema"]["schema"].clone(),
                _ => got["generationConfig"]["responseJsonSchema"].clone(),
            };
            assert_eq!(answer, schema(), "{kind}: {got}");
        }
    }
}
