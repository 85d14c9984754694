//! Golden fixtures for every translation pair: `tests/fixtures/<pair>/<case>/input.json` goes
//! through one translation and must equal `expected.json` (or, for streams, `expected.sse`).
//! `SWITCHYARD_BLESS=1 cargo test golden` rewrites the expected files after a deliberate change.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::openai::{ChunkBody, RequestBody, ResponseBody, chunk_from_value, response_from_value};
use super::{anthropic, gemini};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A canonical chunk as an OpenAI SSE frame.
fn chat_sse(out: &mut String, c: &super::StreamChunk) {
    let body = ChunkBody {
        chunk: c,
        usage_null: false,
    };
    out.push_str(&format!(
        "data: {}\n\n",
        serde_json::to_string(&body).unwrap_or_default()
    ));
}

/// Runs one pair's translation on an input; the output is JSON text or SSE text.
fn translate(pair: &str, input: Value) -> String {
    if pair.ends_with("-stream") {
        stream(pair, input)
    } else if pair.ends_with("-response") {
        response(pair, input)
    } else {
        request(pair, input)
    }
}

/// A JSON output as the fixtures hold it: pretty, with a final newline.
fn json(v: Value) -> String {
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// A request pair: a client's request read, then written for another protocol's upstream.
fn request(pair: &str, input: Value) -> String {
    match pair {
        "anthropic-to-openai-request" => {
            let req = anthropic::request_from_value(input).expect("valid fixture");
            json(
                serde_json::to_value(RequestBody {
                    req: &req,
                    model: "gpt-x",
                    force_usage: true,
                })
                .unwrap_or_default(),
            )
        }
        "gemini-to-openai-request" => {
            let req = gemini::request_from_value(input, "gemini-x", false).expect("valid fixture");
            json(
                serde_json::to_value(RequestBody {
                    req: &req,
                    model: "gpt-x",
                    force_usage: false,
                })
                .unwrap_or_default(),
            )
        }
        "openai-to-anthropic-request" => {
            let req = super::openai::request_from_value(input).expect("valid fixture");
            json(anthropic::request_to_value(&req, "claude-x"))
        }
        "openai-to-gemini-request" => {
            let req = super::openai::request_from_value(input).expect("valid fixture");
            json(gemini::request_to_value(&req))
        }
        "responses-to-openai-request" => {
            let (req, _) = super::responses::request_from_value(input).expect("valid fixture");
            json(
                serde_json::to_value(RequestBody {
                    req: &req,
                    model: "gpt-x",
                    force_usage: false,
                })
                .unwrap_or_default(),
            )
        }
        other => panic!("no translation for fixture pair {other}"),
    }
}

/// A response pair: an upstream's answer read, then written for another protocol's client.
fn response(pair: &str, input: Value) -> String {
    match pair {
        "openai-to-anthropic-response" => {
            let resp = response_from_value(input).expect("valid fixture");
            json(anthropic::response_to_value(&resp, "m"))
        }
        "openai-to-gemini-response" => {
            let resp = response_from_value(input).expect("valid fixture");
            json(gemini::response_to_value(&resp, "m"))
        }
        "anthropic-to-openai-response" => {
            let resp = anthropic::response_from_value(&input).expect("valid fixture");
            json(
                serde_json::to_value(ResponseBody {
                    resp: &resp,
                    report: None,
                })
                .unwrap_or_default(),
            )
        }
        "gemini-to-openai-response" => {
            let resp = gemini::response_from_value(&input).expect("valid fixture");
            json(
                serde_json::to_value(ResponseBody {
                    resp: &resp,
                    report: None,
                })
                .unwrap_or_default(),
            )
        }
        "openai-to-responses-response" => {
            let resp = response_from_value(input).expect("valid fixture");
            json(super::responses::response_to_value(&resp, &echo(), "m"))
        }
        "responses-to-openai-response" => {
            let mut resp = super::responses::response_from_value(input).expect("valid fixture");
            resp.raw = None;
            json(
                serde_json::to_value(ResponseBody {
                    resp: &resp,
                    report: None,
                })
                .unwrap_or_default(),
            )
        }
        other => panic!("no translation for fixture pair {other}"),
    }
}

/// A stream pair: the input is a JSON array of OpenAI chunks (or upstream events).
fn stream(pair: &str, input: Value) -> String {
    match pair {
        "openai-to-anthropic-stream" => {
            let mut enc = anthropic::StreamEncoder::default();
            let mut out = Vec::new();
            for c in input.as_array().into_iter().flatten() {
                enc.chunk(
                    &chunk_from_value(c.clone()).expect("valid chunk"),
                    "m",
                    &mut out,
                );
            }
            enc.done(&mut out);
            String::from_utf8(out).unwrap_or_default()
        }
        "openai-to-gemini-stream" => {
            let mut enc = gemini::StreamEncoder::default();
            let mut out = Vec::new();
            for c in input.as_array().into_iter().flatten() {
                enc.chunk(
                    &chunk_from_value(c.clone()).expect("valid chunk"),
                    "m",
                    &mut out,
                );
            }
            enc.done("m", &mut out);
            String::from_utf8(out).unwrap_or_default()
        }
        "anthropic-to-openai-stream" => {
            let mut dec = anthropic::StreamDecoder::default();
            let mut out = String::new();
            for e in input.as_array().into_iter().flatten() {
                if let anthropic::Decoded::Chunk(c) = dec.event(e) {
                    chat_sse(&mut out, &c);
                }
            }
            out
        }
        "gemini-to-openai-stream" => {
            let mut dec = gemini::StreamDecoder::default();
            let mut out = String::new();
            for e in input.as_array().into_iter().flatten() {
                let c = dec.event(e);
                chat_sse(&mut out, &c);
            }
            out
        }
        "openai-to-responses-stream" => {
            let mut enc = super::responses::StreamEncoder::new(echo(), "m".into());
            let mut out = Vec::new();
            for c in input.as_array().into_iter().flatten() {
                enc.chunk(&chunk_from_value(c.clone()).expect("valid chunk"), &mut out);
            }
            enc.done(&mut out);
            String::from_utf8(out).unwrap_or_default()
        }
        "responses-to-openai-stream" => {
            let mut dec = super::responses::StreamDecoder::default();
            let mut out = String::new();
            for e in input.as_array().into_iter().flatten() {
                let name = e["type"].as_str().unwrap_or_default();
                if let super::Decoded::Chunk(c) | super::Decoded::Last(c) = dec.event(name, e) {
                    chat_sse(&mut out, &c);
                }
            }
            out
        }
        other => panic!("no translation for fixture pair {other}"),
    }
}

/// A Responses request's echo with a fixed id and time, so answers are the same every run.
fn echo() -> super::responses::Echo {
    let (_, mut e) = super::responses::request_from_value(serde_json::json!({
        "model": "m", "input": "hi", "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    }))
    .expect("valid request");
    e.id = "resp_sy0000000000000000000000000000".into();
    e.created_at = 1_700_000_000;
    e
}

#[test]
fn golden_fixtures_match() {
    let bless = std::env::var_os("SWITCHYARD_BLESS").is_some();
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut pairs: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("fixtures dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    pairs.sort();
    for pair in pairs.iter().filter(|p| p.is_dir()) {
        let pair_name = pair
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let mut cases: Vec<PathBuf> = std::fs::read_dir(pair)
            .expect("pair dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        cases.sort();
        for case in cases.iter().filter(|p| p.is_dir()) {
            let input: Value = serde_json::from_str(
                &std::fs::read_to_string(case.join("input.json")).expect("input.json"),
            )
            .expect("input.json is JSON");
            let got = translate(&pair_name, input);
            let file = case.join(if pair_name.ends_with("-stream") {
                "expected.sse"
            } else {
                "expected.json"
            });
            if bless {
                std::fs::write(&file, &got).expect("write expected");
            }
            let want = std::fs::read_to_string(&file).unwrap_or_default();
            if got != want {
                failures.push(format!(
                    "{}:\n--- expected\n{want}\n--- got\n{got}",
                    case.display()
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} fixtures found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
