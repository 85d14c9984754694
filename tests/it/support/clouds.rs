//! The clouds' mocks (`tests/mocks/*.py`), run by the Python of the SDK tests
//! (`SWITCHYARD_PY`, with `tests/sdk/requirements.txt`): Bedrock's checks every SigV4
//! signature with botocore, Vertex's every token and JWT assertion with google-auth. Without
//! that Python a test says so and passes, except under `CI`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::binary::Proc;
use super::gateway::{KEY, client};

/// The Python that has the mocks' modules, if there is one.
pub fn python() -> Option<String> {
    python_with(
        "SWITCHYARD_PY",
        "botocore, google.auth, cryptography",
        "tests/sdk/requirements.txt",
    )
}

/// The Python `var` names (else `python3`) if it can import `modules`; without them a test
/// says so and passes, except under `CI` or when `var` is set.
pub fn python_with(var: &str, modules: &str, requirements: &str) -> Option<String> {
    let py = std::env::var(var).unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err() && std::env::var(var).is_err(),
            "{py} must import {modules} ({requirements})"
        );
        eprintln!("SKIPPED: {py} lacks {modules} (pip install -r {requirements})");
        return None;
    }
    Some(py)
}

/// A running cloud mock and where it listens.
pub struct CloudMock {
    pub url: String,
    _proc: Proc,
}

impl CloudMock {
    /// Starts `tests/mocks/<name>.py` with `args`; `None` without the Python it needs.
    pub async fn start(name: &str, args: &[&str]) -> Option<CloudMock> {
        let py = python()?;
        let script = format!("{}/tests/mocks/{name}.py", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new(py)
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the mock runs");
        let stdout = child.stdout.take().expect("stdout");
        let proc = Proc(child);
        let marker = format!("{name} mock listening on ");
        let read = tokio::task::spawn_blocking(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.ok()?;
                if let Some(rest) = line.split(&marker).nth(1) {
                    return Some(rest.trim().to_string());
                }
            }
            None
        });
        let url = tokio::time::timeout(std::time::Duration::from_secs(30), read)
            .await
            .expect("the mock starts within 30 s")
            .expect("the mock's output")
            .expect("the mock prints where it listens");
        Some(CloudMock { url, _proc: proc })
    }

    /// The faults the next requests get, in order (`null`: a normal answer).
    pub async fn script(&self, faults: Value) {
        let r = client()
            .post(format!("{}/_mock/script", self.url))
            .json(&serde_json::json!({ "faults": faults }))
            .send()
            .await
            .expect("the mock answers");
        assert!(r.status().is_success());
    }

    /// `GET /_mock/{what}` as JSON (`requests`, `stats`).
    pub async fn get(&self, what: &str) -> Value {
        client()
            .get(format!("{}/_mock/{what}", self.url))
            .send()
            .await
            .expect("the mock answers")
            .json()
            .await
            .expect("JSON")
    }

    /// Every request the mock got, as it recorded it.
    pub async fn requests(&self) -> Vec<Value> {
        self.get("requests")
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// A chat request in `proto` (`openai`, `responses`, `anthropic`, `gemini`) for `model`: its
/// path, the key's header and the body.
pub fn ask(proto: &str, model: &str, stream: bool) -> (String, Vec<(&'static str, String)>, Value) {
    let msg = json!([{"role": "user", "content": "hi"}]);
    match proto {
        "anthropic" => (
            "/v1/messages".into(),
            vec![("x-api-key", KEY.into())],
            json!({"model": model, "max_tokens": 64, "stream": stream, "messages": msg}),
        ),
        "gemini" => {
            let action = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            (
                format!("/v1beta/models/{model}:{action}"),
                vec![("x-goog-api-key", KEY.into())],
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            )
        }
        "responses" => (
            "/v1/responses".into(),
            vec![("authorization", format!("Bearer {KEY}"))],
            json!({"model": model, "stream": stream, "input": "hi"}),
        ),
        _ => (
            "/v1/chat/completions".into(),
            vec![("authorization", format!("Bearer {KEY}"))],
            json!({"model": model, "stream": stream, "messages": msg}),
        ),
    }
}

/// The answer's text in any protocol, whole or streamed.
pub fn answer_text(proto: &str, body: &str, stream: bool) -> String {
    let pick = |v: &Value| -> Option<String> {
        match proto {
            "anthropic" if stream => v["delta"]["text"].as_str(),
            "anthropic" => v["content"][0]["text"].as_str(),
            "gemini" => v["candidates"][0]["content"]["parts"][0]["text"].as_str(),
            "responses" if stream => (v["type"] == "response.output_text.delta")
                .then(|| v["delta"].as_str())
                .flatten(),
            "responses" => v["output"][0]["content"][0]["text"].as_str(),
            _ if stream => v["choices"][0]["delta"]["content"].as_str(),
            _ => v["choices"][0]["message"]["content"].as_str(),
        }
        .map(str::to_string)
    };
    if !stream {
        return serde_json::from_str(body)
            .ok()
            .as_ref()
            .and_then(pick)
            .unwrap_or_default();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| pick(&v))
        .collect()
}

/// POSTs `body` to `path` of the gateway at `url` with `headers`.
pub async fn post_in(
    url: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Value,
) -> reqwest::Response {
    let mut rb = client().post(format!("{url}{path}")).json(&body);
    for (k, v) in headers {
        rb = rb.header(*k, v);
    }
    rb.send().await.expect("gateway reachable")
}
