//! The served demo (`serve` without `--config`): the console its banner opens, the store that
//! takes its writes, and the traffic it sends itself on start.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// The token the banner's console URL carries.
fn token_of(console: &str) -> &str {
    console
        .split_once("#token=")
        .map(|(_, t)| t)
        .expect("the URL carries the token")
}

/// The demo's request log through the admin API, with the demo's admin token.
async fn log_rows(url: &str, token: &str) -> Vec<Value> {
    let v = get_json(&format!("{url}/admin/requests?limit=100"), Some(token)).await;
    v["data"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_demo_sends_itself_traffic_with_a_failover_and_streams_in_every_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, url, console) = spawn_demo_with(dir.path(), &[]).await;
    assert!(
        console.starts_with(&format!("{url}/console#token=sy-demo-")),
        "{console}"
    );
    let token = token_of(&console);
    // 3 rounds: 6 requests, the failover, 6 again.
    let rows = until(
        "the demo traffic in the log",
        Duration::from_secs(30),
        async || {
            let rows = log_rows(&url, token).await;
            if rows.len() >= 13 {
                Ok(rows)
            } else {
                Err(rows.len())
            }
        },
    )
    .await;
    assert!(rows.iter().all(|r| r["status"] == 200), "{rows:?}");
    let failover: Vec<&Value> = rows
        .iter()
        .filter(|r| r["requested_model"] == "demo-failover")
        .collect();
    assert_eq!(failover.len(), 1, "{rows:?}");
    let tried: Vec<(String, String)> = failover[0]["attempts"]
        .as_array()
        .expect("the attempts, as JSON")
        .iter()
        .map(|a| {
            (
                a["channel"].as_str().unwrap_or_default().to_string(),
                a["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert_eq!(
        (
            tried[0].0.as_str(),
            tried[1].0.as_str(),
            tried[1].1.as_str()
        ),
        ("demo-primary", "demo-backup", "ok")
    );
    assert_ne!(tried[0].1, "ok");
    let endpoints: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r["endpoint"].as_str()).collect();
    for e in [
        "chat.completions",
        "messages",
        "generateContent",
        "responses",
        "embeddings",
    ] {
        assert!(
            endpoints.iter().any(|x| x.contains(e)),
            "{e} in {endpoints:?}"
        );
    }
    assert!(rows.iter().any(|r| r["stream"] == true), "a stream");

    // Another start, another token; the first is no admin there.
    let other = tempfile::tempdir().unwrap();
    let (_q, url2, console2) = spawn_demo_with(other.path(), &["--no-demo-traffic"]).await;
    let token2 = token_of(&console2);
    assert_ne!(token, token2);
    let refused = client()
        .get(format!("{url2}/admin/requests"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
}

#[tokio::test]
async fn without_demo_traffic_the_log_holds_only_what_clients_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, url, console) = spawn_demo_with(dir.path(), &["--no-demo-traffic"]).await;
    let token = token_of(&console);
    // Two requests, the second sent once the first is in the log: by then demo traffic, which
    // starts at once and sends a request every 150 ms, would have rows of its own.
    let mut ours = Vec::new();
    for _ in 0..2 {
        let resp = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("sk-switchyard-demo")
            .json(&serde_json::json!({"model": "demo",
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        ours.push(header(&resp, "x-request-id").to_string());
        let id = ours.last().cloned().unwrap_or_default();
        until(
            "our request in the log",
            Duration::from_secs(10),
            async || {
                log_rows(&url, token)
                    .await
                    .iter()
                    .any(|r| r["id"] == id.as_str())
            },
        )
        .await;
    }
    let rows = log_rows(&url, token).await;
    let ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), 2, "{rows:?}");
    assert!(ours.iter().all(|o| ids.contains(&o.as_str())), "{rows:?}");
}

/// Needs the Python with Playwright (`SWITCHYARD_PY`) and `/usr/bin/chromium`; without them it
/// says so and passes, except under `CI` or `SWITCHYARD_BROWSER_REQUIRED`.
#[tokio::test]
async fn the_demos_console_opens_from_the_banner_in_a_browser() {
    let Some(py) = browser_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_p, url, console) = spawn_demo_with(dir.path(), &[]).await;
    let token = token_of(&console);
    let env = [
        ("SY_CONSOLE", console.as_str()),
        ("SY_TOKEN", token),
        ("SY_BASE", url.as_str()),
    ];
    let (ok, stdout, text) = run_browser_script(&py, "demo.py", 120, &env).await;
    assert!(ok, "browser run failed:\n{text}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(last["ok"], true, "{text}");
    assert_eq!(last["steps"].as_array().map(Vec::len), Some(4), "{text}");
}
