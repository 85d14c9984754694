//! Replicas sharing state through Redis: the shared test Redis, a key prefix per test, and the
//! wait for a replica to reach (or lose) Redis.

use std::time::Duration;

use super::gateway::{Gateway, get_json};
use super::wait::until;

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
    wait_connected_at(&gw.url, connected).await;
}

/// As [`wait_connected`], for a gateway at `base` (a `switchyard serve` process, say).
pub async fn wait_connected_at(base: &str, connected: bool) {
    let url = format!("{base}/readyz");
    let what = format!("{base}: Redis connected = {connected}");
    until(&what, Duration::from_secs(10), async || {
        let v = get_json(&url, None).await;
        // Connected means subscribed to the other replicas' changes too.
        let subscribed = v["state"]["events_subscribed"] == true;
        if v["state"]["connected"] == connected && (!connected || subscribed) {
            Ok(())
        } else {
            Err(v)
        }
    })
    .await;
}

/// A redis-server of this test's own on a free port, killed on drop.
pub struct OwnRedis {
    pub child: std::process::Child,
    pub port: u16,
}

impl OwnRedis {
    pub fn start(port: u16) -> OwnRedis {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        OwnRedis { child, port }
    }

    /// A redis-server that keeps what it holds in `dir` (an append-only file, written on every
    /// change): killed and started again on the same port and dir, it has lost nothing.
    pub fn start_kept(port: u16, dir: &std::path::Path) -> OwnRedis {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        OwnRedis { child, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn wait_ready(&self) {
        until(
            "redis-server to listen",
            Duration::from_secs(10),
            async || tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await,
        )
        .await;
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
