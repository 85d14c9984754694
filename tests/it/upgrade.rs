//! A rolling upgrade: the previous release's binary and this one serve one store at once (an
//! SQLite file, then a PostgreSQL database) under load. The previous release starts first and
//! makes the store its own; this one starts beside it and migrates the store forward (expand
//! only) while the other serves; both take admin writes and each serves what the other wrote;
//! then the previous one stops. No request fails, no acknowledged write is lost.
//!
//! The previous binary comes from `SWITCHYARD_PREVIOUS_BIN`, which `scripts/upgrade.sh` builds
//! from the last release (the last tag, else the commit before the last store migration). Without
//! it the test says it skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn config(dir: &std::path::Path, store: &str) -> std::path::PathBuf {
    let path = dir.join("switchyard.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n\
         [store]\nurl = \"{store}\"\nmaster_key = \"{}\"\n",
        master_key(12)
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// A replica of `bin` on `cfg`, in a directory of its own.
async fn replica(
    bin: &std::path::Path,
    cfg: &std::path::Path,
    dir: &std::path::Path,
) -> (Proc, String) {
    std::fs::create_dir_all(dir).expect("dir");
    let args = ["serve", "--config", cfg.to_str().expect("utf-8")];
    spawn_bin_listening(bin, &args, dir, "switchyard listening on ", &[]).await
}

/// An admin write: `(status, body)`.
async fn admin(url: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut rb = client()
        .request(method.parse().expect("method"), format!("{url}{path}"))
        .bearer_auth(ADMIN);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await.expect("admin call");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A key made through the admin API at `url`: its secret.
async fn make_key(url: &str, name: &str) -> String {
    let (st, v) = admin(url, "POST", "/admin/keys", Some(json!({"name": name}))).await;
    assert_eq!(st, 201, "{name} at {url}: {v}");
    v["key"].as_str().expect("the key, once").to_string()
}

/// Waits until the replica at `url` serves `key` (it learns the store's changes by polling).
async fn serves(url: &str, key: &str) {
    until(
        &format!("{url} to serve a key made elsewhere"),
        Duration::from_secs(15),
        async || chat_status(url, key).await == 200,
    )
    .await;
}

/// SIGTERM, as an orchestrator stops a replica: what it has in flight finishes first.
async fn stop_gracefully(mut p: Proc) {
    let pid = p.0.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM {pid}");
    until(
        "the previous release to exit",
        Duration::from_secs(30),
        async || p.0.try_wait().ok().flatten().is_some(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_release_and_this_one_serve_one_store_at_once() {
    let Some(old) = std::env::var_os("SWITCHYARD_PREVIOUS_BIN") else {
        eprintln!("skipped: SWITCHYARD_PREVIOUS_BIN is not set (scripts/upgrade.sh sets it)");
        return;
    };
    let old = std::path::PathBuf::from(old);
    let stores = Stores::new("upgrade").await;
    for store in stores.urls() {
        rolling(&old, &store).await;
    }
}

async fn rolling(old_bin: &std::path::Path, store: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let up = mock(text_spec("ok")).await;
    let cfg = config(dir.path(), store);
    let (old, old_url) = replica(old_bin, &cfg, &dir.path().join("old")).await;
    // The channel made through the admin API on the previous release: its store's.
    let channel = json!({"name": "a", "provider": "openai", "base_url": up.base_url(),
        "api_keys": ["sk-upstream-key-1"], "models": ["m"]});
    let (st, v) = admin(&old_url, "POST", "/admin/channels", Some(channel)).await;
    assert_eq!(st, 201, "{v}");
    let before = make_key(&old_url, "before").await;
    serves(&old_url, &before).await;

    // Load on whichever replicas are up, all through the upgrade.
    let urls = Arc::new(std::sync::Mutex::new(vec![old_url.clone()]));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for w in 0..4 {
        let (urls, sent, failed, stop) = (urls.clone(), sent.clone(), failed.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                let url = {
                    let u = urls.lock().expect("lock");
                    u[i % u.len()].clone()
                };
                i += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                let st = chat_status(&url, KEY).await;
                if st != 200 {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("upgrade: {st} from {url}");
                }
            }
        }));
    }

    // This release beside it: it migrates the store forward while the other serves.
    let (_new, new_url) = replica(std::path::Path::new(BIN), &cfg, &dir.path().join("new")).await;
    urls.lock().expect("lock").push(new_url.clone());
    serves(&new_url, &before).await;
    // Writes on each, served by the other: the previous release refuses nothing this one wrote.
    let by_new = make_key(&new_url, "by-new").await;
    let by_old = make_key(&old_url, "by-old").await;
    serves(&old_url, &by_new).await;
    serves(&new_url, &by_old).await;
    let (st, v) = admin(&old_url, "GET", "/admin/keys", None).await;
    assert_eq!(st, 200, "{v}");
    let names: Vec<&str> = v["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|k| k["name"].as_str()).collect())
        .unwrap_or_default();
    for k in ["before", "by-new", "by-old"] {
        assert!(names.contains(&k), "the previous release lists {names:?}");
    }

    // The previous release leaves, as a rolling upgrade's last step: the load goes on.
    let served_before = sent.load(Ordering::Relaxed);
    urls.lock().expect("lock").retain(|u| *u != old_url);
    until(
        "the load to move to the new replica",
        Duration::from_secs(10),
        async || sent.load(Ordering::Relaxed) > served_before + 20,
    )
    .await;
    stop_gracefully(old).await;
    for key in [KEY, before.as_str(), by_new.as_str(), by_old.as_str()] {
        assert_eq!(chat_status(&new_url, key).await, 200);
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "upgrade on {}: {sent} requests, {failed} failed",
        store.split(':').next().unwrap_or("")
    );
    assert!(sent > 100, "only {sent} requests");
    assert_eq!(failed, 0, "requests failed during the upgrade");
}
