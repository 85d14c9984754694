//! Replicas sharing state through Redis: the shared test Redis, a key prefix per test, and
//! waits for a replica to reach Redis and for a change made through one replica to reach another.

use super::gateway::{ADMIN, Gateway, get_json};

/// The Redis every Redis test shares (`.ci/run` starts it); each test keeps to its own prefix.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// A unique key prefix for one test, so tests share one Redis in parallel.
pub fn redis_prefix(test: &str) -> String {
    format!("sy-test-{test}-{:08x}", fastrand::u32(..))
}

/// A `[state]` table for the shared Redis under a fresh prefix.
pub fn redis_state(test: &str) -> String {
    format!(
        "[state]\nurl = \"{REDIS_URL}\"\nprefix = \"{}\"\n",
        redis_prefix(test)
    )
}

/// Waits (10 s at most) until the gateway's `/readyz` says Redis is (or is not) connected.
pub async fn wait_connected(gw: &Gateway, connected: bool) {
    let url = format!("{}/readyz", gw.url);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = get_json(&url, None).await;
        // Connected means subscribed to the other replicas' changes too.
        let subscribed = v["state"]["events_subscribed"] == true;
        if v["state"]["connected"] == connected && (!connected || subscribed) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redis connected never became {connected}: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until the gateway at `base` shows `channel`'s circuit open in `/admin/health`, failing
/// the test past `within`; returns how long it took. A bound checked by waiting on the change.
pub async fn wait_circuit_open(
    base: &str,
    channel: &str,
    within: std::time::Duration,
) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    loop {
        let v = get_json(&format!("{base}/admin/health"), Some(ADMIN)).await;
        let open = v["data"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["channel"] == channel && r["circuit"] == "open")
        });
        if open {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < within, "{channel} never showed open: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
