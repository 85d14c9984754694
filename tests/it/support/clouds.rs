//! The clouds' mocks (`tests/mocks/*.py`), run by the Python of the SDK tests
//! (`SWITCHYARD_PY`, with `tests/sdk/requirements.txt`): Bedrock's checks every SigV4
//! signature with botocore, Vertex's every token and JWT assertion with google-auth. Without
//! that Python a test says so and passes, except under `CI`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::binary::Proc;
use super::gateway::client;

/// The Python that has the mocks' modules, if there is one.
pub fn python() -> Option<String> {
    let py = std::env::var("SWITCHYARD_PY").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import botocore, google.auth, cryptography"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err() && std::env::var("SWITCHYARD_PY").is_err(),
            "{py} must have botocore, google-auth and cryptography (tests/sdk/requirements.txt)"
        );
        eprintln!(
            "SKIPPED: {py} lacks botocore / google-auth (pip install -r tests/sdk/requirements.txt)"
        );
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
