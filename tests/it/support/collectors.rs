//! Real observability backends the gateway reports to, started by the test on 127.0.0.1:
//! Prometheus (Debian's `prometheus`) scraping the gateway, and Arize Phoenix (PyPI
//! `arize-phoenix`) receiving its OTLP traces. Neither is ours; both are queried over their
//! own HTTP APIs. Without them a test says so and passes, except under `CI`.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::binary::Proc;
use super::gateway::client;
use super::wait::until;

/// A port nothing listens on now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The program in `var`, else `default` on the PATH; `None` (the test is skipped) when it is
/// not installed and this is not CI.
pub fn program(var: &str, default: &str, hint: &str) -> Option<String> {
    let bin = std::env::var(var).unwrap_or_else(|_| default.into());
    let found = Command::new(&bin)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "{bin} must be installed in CI"
        );
        eprintln!("SKIPPED: {bin} not found ({hint})");
        return None;
    }
    Some(bin)
}

/// `GET url?params` as JSON, or what went wrong.
pub async fn fetch(url: &str, params: &[(&str, &str)]) -> Result<Value, String> {
    let url = reqwest::Url::parse_with_params(url, params).map_err(|e| e.to_string())?;
    let r = client().get(url).send().await.map_err(|e| e.to_string())?;
    r.json().await.map_err(|e| e.to_string())
}

/// Waits until `url` answers 200.
async fn answers(url: &str, within: Duration) {
    let http = client();
    until(&format!("{url} to answer"), within, async || {
        match http.get(url).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

pub struct Prometheus {
    _proc: Proc,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `target` (`host:port`) every second, with `token` as its bearer when given.
    pub async fn scraping(target: &str, token: Option<&str>) -> Option<Prometheus> {
        let bin = program(
            "SWITCHYARD_PROMETHEUS",
            "prometheus",
            "apt-get install prometheus",
        )?;
        let dir = tempfile::tempdir().expect("tempdir");
        let auth = token.map_or(String::new(), |t| {
            format!("    authorization:\n      credentials: {t}\n")
        });
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: switchyard\n    static_configs:\n      - targets: ['{target}']\n{auth}"
        );
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).expect("write prometheus.yml");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(bin)
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus runs");
        let p = Prometheus {
            _proc: Proc(child),
            url: format!("http://{addr}"),
            _dir: dir,
        };
        answers(&format!("{}/-/ready", p.url), Duration::from_secs(30)).await;
        Some(p)
    }

    /// An instant query: each series' labels and value.
    pub async fn query(&self, expr: &str) -> Result<Vec<(Value, f64)>, String> {
        let v = fetch(&format!("{}/api/v1/query", self.url), &[("query", expr)]).await?;
        if v["status"] != "success" {
            return Err(v.to_string());
        }
        let rows = v["data"]["result"].as_array().cloned().unwrap_or_default();
        Ok(rows
            .into_iter()
            .map(|r| {
                let n = r["value"][1].as_str().and_then(|s| s.parse().ok());
                (r["metric"].clone(), n.unwrap_or(f64::NAN))
            })
            .collect())
    }

    /// Waits until `expr` sums to `want` (Prometheus scrapes every second).
    pub async fn expect(&self, expr: &str, want: f64) {
        until(
            &format!("{expr} == {want}"),
            Duration::from_secs(20),
            async || {
                let rows = self.query(expr).await?;
                let sum: f64 = rows.iter().map(|r| r.1).sum();
                if !rows.is_empty() && (sum - want).abs() < 1e-9 {
                    Ok(())
                } else {
                    Err(format!("{rows:?}"))
                }
            },
        )
        .await;
    }
}

pub struct Phoenix {
    _proc: Proc,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Phoenix {
    /// `phoenix serve` with its own database, its UI and OTLP/HTTP on one free port.
    pub async fn start() -> Option<Phoenix> {
        let bin = program(
            "SWITCHYARD_PHOENIX",
            "phoenix",
            "pip install arize-phoenix==20.26.1",
        )?;
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let child = Command::new(bin)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("phoenix.log")).expect("log file"))
            .spawn()
            .expect("phoenix runs");
        let p = Phoenix {
            _proc: Proc(child),
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        answers(&format!("{}/healthz", p.url), Duration::from_secs(90)).await;
        Some(p)
    }

    /// The spans Phoenix holds of one trace (OTLP JSON), in `project`.
    pub async fn spans(&self, project: &str, trace_id: &str) -> Result<Vec<Value>, String> {
        let url = format!("{}/v1/projects/{project}/spans/otlpv1", self.url);
        let v = fetch(&url, &[("trace_id", trace_id), ("limit", "100")]).await?;
        v["data"].as_array().cloned().ok_or_else(|| v.to_string())
    }

    /// Waits until Phoenix holds `n` spans of the trace.
    pub async fn trace(&self, project: &str, trace_id: &str, n: usize) -> Vec<Value> {
        until(
            &format!("{n} spans of trace {trace_id}"),
            Duration::from_secs(30),
            async || {
                let spans = self.spans(project, trace_id).await?;
                if spans.len() >= n {
                    Ok(spans)
                } else {
                    Err(format!("{} spans: {spans:?}", spans.len()))
                }
            },
        )
        .await
    }
}

/// An OTLP JSON span's attribute, as JSON: whichever of its typed values is set (Phoenix
/// writes them `string_value`, `int_value`, ..., the others null).
pub fn attr(span: &Value, key: &str) -> Value {
    span["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
        .and_then(|kv| kv["value"].as_object())
        .and_then(|v| v.values().find(|x| !x.is_null()).cloned())
        .unwrap_or(Value::Null)
}
