//! Malformed and odd requests, generated from a fixed seed, against every ingress with trimming
//! and context fallbacks on: each must get an answer or a 4xx in the client's envelope, never a
//! 5xx and never a dropped connection (a panic in a handler drops it).

use serde_json::{Value, json};

use crate::support::*;

const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "delta", "{", "\"", "é", "日本"];

fn text(rng: &mut fastrand::Rng) -> String {
    (0..rng.usize(0..40))
        .map(|_| WORDS[rng.usize(..WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A value of any shape, sometimes of the wrong type on purpose.
fn any(rng: &mut fastrand::Rng, depth: u32) -> Value {
    match rng.u8(0..10) {
        0 => Value::Null,
        1 => json!(rng.bool()),
        2 => json!(rng.i64(-5..5)),
        3 | 4 => json!(text(rng)),
        5 | 6 if depth < 3 => {
            Value::Array((0..rng.usize(0..3)).map(|_| any(rng, depth + 1)).collect())
        }
        7 | 8 if depth < 3 => {
            let keys = [
                "type",
                "role",
                "content",
                "text",
                "call_id",
                "name",
                "arguments",
                "output",
                "id",
                "input",
            ];
            let mut m = serde_json::Map::new();
            for _ in 0..rng.usize(0..4) {
                m.insert(keys[rng.usize(..keys.len())].into(), any(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!("x"),
    }
}

fn pick<'a>(rng: &mut fastrand::Rng, from: &[&'a str]) -> &'a str {
    from[rng.usize(..from.len())]
}

/// One request body for `kind`, mostly well-formed in shape, with random content and holes.
fn body(rng: &mut fastrand::Rng, kind: &str, model: &str) -> Value {
    let mut items = Vec::new();
    for i in 0..rng.usize(0..10) {
        let mut item = match kind {
            "chat" => {
                let role = pick(
                    rng,
                    &["user", "assistant", "tool", "system", "developer", "robot"],
                );
                let mut m = json!({"role": role, "content": text(rng)});
                if role == "assistant" && rng.bool() {
                    m["tool_calls"] = json!([{"id": format!("c{}", rng.u8(0..3)), "type": "function",
                        "function": {"name": "f", "arguments": "{}"}}]);
                }
                if role == "tool" {
                    m["tool_call_id"] = json!(format!("c{}", rng.u8(0..3)));
                }
                m
            }
            "messages" => {
                let block = match rng.u8(0..5) {
                    0 => {
                        json!({"type": "tool_use", "id": format!("t{}", rng.u8(0..3)), "name": "f", "input": {}})
                    }
                    1 => {
                        json!({"type": "tool_result", "tool_use_id": format!("t{}", rng.u8(0..3)), "content": text(rng)})
                    }
                    2 => json!({"type": "thinking", "thinking": text(rng), "signature": "s"}),
                    _ => json!({"type": "text", "text": text(rng)}),
                };
                json!({"role": pick(rng, &["user", "assistant", "system"]), "content": [block]})
            }
            "gemini" => {
                let part = match rng.u8(0..3) {
                    0 => json!({"functionCall": {"name": "f", "args": {}}}),
                    1 => json!({"functionResponse": {"name": "f", "response": {"r": text(rng)}}}),
                    _ => json!({"text": text(rng)}),
                };
                json!({"role": pick(rng, &["user", "model"]), "parts": [part]})
            }
            _ => match rng.u8(0..4) {
                0 => {
                    json!({"type": "function_call", "call_id": format!("c{}", rng.u8(0..3)), "name": "f", "arguments": "{}"})
                }
                1 => {
                    json!({"type": "function_call_output", "call_id": format!("c{}", rng.u8(0..3)), "output": text(rng)})
                }
                2 => json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": []}),
                _ => {
                    json!({"role": pick(rng, &["user", "assistant", "developer"]), "content": text(rng)})
                }
            },
        };
        // Holes and wrong types, now and then.
        if rng.u8(0..5) == 0
            && let Some(o) = item.as_object_mut()
        {
            let k = o.keys().nth(rng.usize(..o.len().max(1))).cloned();
            match k {
                Some(k) if rng.bool() => {
                    o.remove(&k);
                }
                Some(k) => {
                    o.insert(k, any(rng, 1));
                }
                None => {}
            }
        }
        items.push(item);
    }
    let stream = rng.bool();
    let mut b = match kind {
        "chat" => json!({"model": model, "messages": items, "stream": stream}),
        "messages" => {
            json!({"model": model, "max_tokens": rng.u32(1..400), "system": text(rng), "messages": items, "stream": stream})
        }
        "gemini" => json!({"contents": items}),
        _ => json!({"model": model, "input": items, "stream": stream, "instructions": text(rng)}),
    };
    if rng.u8(0..6) == 0 {
        let k = pick(
            rng,
            &[
                "tools",
                "tool_choice",
                "temperature",
                "stop",
                "max_tokens",
                "text",
                "models",
            ],
        );
        b[k] = any(rng, 0);
    }
    b
}

#[tokio::test]
async fn random_requests_get_an_answer_or_a_4xx_never_a_5xx() {
    let gw = gateway_full(
        "",
        "trim = true",
        "[[channels]]\nname = \"m\"\nprovider = \"mock\"\nmodels = [\"tight\", \"roomy\"]\n\n\
         [[models]]\nname = \"tight\"\ncontext_window = 400\nmax_output_tokens = 40\ncontext_fallbacks = [\"roomy\"]\n\n\
         [[models]]\nname = \"roomy\"\ncontext_window = 900\nmax_output_tokens = 40\n",
    )
    .await;
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut answered = 0;
    for i in 0..400 {
        let kind = pick(&mut rng, &["chat", "messages", "gemini", "responses"]);
        let model = pick(&mut rng, &["tight", "roomy"]);
        let b = body(&mut rng, kind, model);
        let path = match kind {
            "chat" => "/v1/chat/completions".to_string(),
            "messages" => "/v1/messages".to_string(),
            "gemini" if rng.bool() => {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            }
            "gemini" => format!("/v1beta/models/{model}:generateContent"),
            _ => "/v1/responses".to_string(),
        };
        let resp = gw.post_as(&path, KEY, &[], b.clone()).await;
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("the whole answer arrives");
        assert!(status < 500, "#{i} {path} -> {status}: {text}\n{b}");
        if status == 200 {
            answered += 1;
        } else {
            // The client's own envelope, with a message.
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            assert!(
                v["error"]["message"].is_string(),
                "#{i} {path} -> {status}: {text}"
            );
        }
    }
    assert!(
        answered > 100,
        "only {answered} answered: the generator makes too few valid requests"
    );
}
