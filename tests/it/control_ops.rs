//! The control plane as an operator runs it, on both stores: no secret made through the API is
//! ever in the database, a dump, the logs or an answer; a master-key rotation under load fails
//! no request; a kill -9 in a burst of admin writes loses no acknowledged write; and the audit
//! chain verifies (and a tampered row is found) with `switchyard audit verify`.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::support::*;

/// A config for the binary: the test key, the store, and `rest`.
fn binary_config(dir: &std::path::Path, store_url: &str, rest: &str) -> std::path::PathBuf {
    let path = dir.join("switchyard.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\n\
         [log]\nsqlite_path = \"{}\"\n\n[[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n\
         [store]\nurl = \"{store_url}\"\n\n{rest}",
        dir.join("log.db").display()
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// Every byte of the files in `dir` whose name starts with `prefix` (a database and its WAL).
fn file_bytes(dir: &std::path::Path, prefix: &str) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            all.extend(std::fs::read(e.path()).unwrap_or_default());
        }
    }
    all
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn pg_dump(url: &str) -> Vec<u8> {
    let out = Command::new("pg_dump")
        .arg(url)
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

async fn call(url: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = client()
        .request(m, format!("{url}{path}"))
        .bearer_auth(ADMIN);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await.expect("reachable");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// A POST that may find the gateway gone: its status, or 0.
async fn try_post(url: &str, path: &str, body: Value) -> u16 {
    let rb = client()
        .post(format!("{url}{path}"))
        .bearer_auth(ADMIN)
        .json(&body);
    rb.send().await.map_or(0, |r| r.status().as_u16())
}

#[tokio::test]
async fn secrets_made_through_the_api_are_in_no_file_dump_log_or_answer() {
    const UPSTREAM: &str = "sk-upstream-only-in-memory-7f3a";
    const GIVEN: &str = "sk-gateway-given-secret-5c1d";
    // Cloud secrets: AWS's secret key and session token, a service account's private key.
    const AWS_SECRET: &str = "aws-secret-access-key-only-in-memory-91c2";
    const AWS_TOKEN: &str = "aws-session-token-only-in-memory-5d8e";
    let sa_pem = include_str!("../fixtures/google/test-service-account-key.pem");
    // A line from the middle of the key: what a leak of it would show.
    let key_line = sa_pem.lines().nth(5).unwrap().to_string();
    let sa_json = json!({"type": "service_account", "client_email": "t@p.iam.gserviceaccount.com",
        "private_key": sa_pem, "token_uri": "http://127.0.0.1:9/token"})
    .to_string();
    let stores = Stores::new("ops_secrets").await;
    let m = master_key(7);
    for url in stores.urls() {
        let dir = tempfile::tempdir().unwrap();
        let up = mock(text_spec("ok")).await;
        let cfg = binary_config(dir.path(), &url, "");
        let env = [
            ("SWITCHYARD_MASTER_KEY", m.as_str()),
            ("SWITCHYARD_LOG", "debug"),
        ];
        let (p, gw) = spawn_listening_env(
            &["serve", "-c", cfg.to_str().unwrap()],
            dir.path(),
            "switchyard listening on ",
            &env,
        )
        .await;
        let channel = json!({"name": "api-a", "provider": "openai", "base_url": up.base_url(),
            "credentials": [{"key": UPSTREAM, "label": "primary"}], "models": ["m"]});
        let mut answers = vec![call(&gw, "POST", "/admin/channels", Some(channel)).await];
        assert_eq!(answers[0].0, 201, "{url}: {}", answers[0].1);
        let clouds = [
            json!({"name": "api-bedrock", "provider": "bedrock", "region": "us-east-1",
                "aws": {"access_key_id": "AKIAEXAMPLEID", "secret_access_key": AWS_SECRET,
                        "session_token": AWS_TOKEN}, "models": ["b"]}),
            json!({"name": "api-vertex", "provider": "vertex", "project": "p", "location": "global",
                "credentials_json": sa_json, "models": ["gemini-2.5-flash"]}),
        ];
        for c in clouds {
            let made = call(&gw, "POST", "/admin/channels", Some(c)).await;
            assert_eq!(made.0, 201, "{url}: {}", made.1);
            answers.push(made);
        }
        answers.push(
            call(
                &gw,
                "POST",
                "/admin/keys",
                Some(json!({"name": "given", "key": GIVEN})),
            )
            .await,
        );
        let (s, made) = call(&gw, "POST", "/admin/keys", Some(json!({"name": "made"}))).await;
        assert_eq!(s, 201, "{made}");
        let generated = serde_json::from_str::<Value>(&made).unwrap()["key"]
            .as_str()
            .unwrap()
            .to_string();
        // Used, so the upstream key goes out and both gateway keys come in.
        for key in [GIVEN, generated.as_str()] {
            assert_eq!(chat_status(&gw, key).await, 200, "{url}");
        }
        assert!(
            up.received()
                .iter()
                .all(|r| r.headers["authorization"] == format!("Bearer {UPSTREAM}"))
        );
        as_patch_and_read(&gw, &mut answers).await;
        drop(p);
        let secrets = [
            UPSTREAM,
            GIVEN,
            generated.as_str(),
            AWS_SECRET,
            AWS_TOKEN,
            key_line.as_str(),
        ];
        let mut places: Vec<(&str, Vec<u8>)> = vec![
            (
                "the log",
                std::fs::read(dir.path().join("stderr.log")).unwrap(),
            ),
            (
                "the answers",
                answers
                    .iter()
                    .map(|(_, b)| b.as_str())
                    .collect::<String>()
                    .into_bytes(),
            ),
        ];
        if url.starts_with("sqlite") {
            places.push(("the SQLite file", file_bytes(stores.dir.path(), "store.db")));
            places.push(("the request log", file_bytes(dir.path(), "log.db")));
        } else {
            // The request log's rows are in PostgreSQL too.
            places.push(("pg_dump", pg_dump(&url)));
        }
        // With a PostgreSQL store the request log is there, and the binary says so once.
        let log = String::from_utf8_lossy(&places[0].1).into_owned();
        let ignored = log.matches("sqlite_path is ignored").count();
        assert_eq!(
            ignored,
            usize::from(url.starts_with("postgres")),
            "{url}: {log}"
        );
        for (place, bytes) in &places {
            assert!(!bytes.is_empty(), "{place} is empty: nothing was checked");
            for s in secrets {
                assert!(!contains(bytes, s), "{url}: {s} is in {place}");
            }
        }
        // The store does hold them, sealed: the sealing's marker is there.
        let store_bytes = &places[2].1;
        assert!(
            contains(store_bytes, "v1:"),
            "{url}: no sealed value in the store"
        );
    }
}

/// Every answer an admin reads after the writes, kept for the grep.
async fn as_patch_and_read(gw: &str, answers: &mut Vec<(u16, String)>) {
    answers.push(
        call(
            gw,
            "PATCH",
            "/admin/channels/api-a",
            Some(json!({"weight": 2})),
        )
        .await,
    );
    for path in [
        "/admin/channels",
        "/admin/channels/api-a",
        "/admin/keys",
        "/admin/keys/given",
        "/admin/config",
        "/admin/audit",
        "/admin/requests",
        "/admin/health",
    ] {
        let (s, body) = call(gw, "GET", path, None).await;
        assert_eq!(s, 200, "{path}: {body}");
        answers.push((s, body));
    }
}

#[tokio::test]
async fn rotating_the_master_key_under_load_fails_no_request() {
    let stores = Stores::new("ops_rotate").await;
    let (old, new) = (master_key(8), master_key(9));
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let gw = Arc::new(on_store(&url, Some(&old), "").await);
        let channel = json!({"name": "api-a", "provider": "openai", "base_url": up.base_url(),
            "api_keys": [UPSTREAM_KEY], "models": ["m"]});
        assert_eq!(
            as_admin(&gw, "POST", "/admin/channels", Some(channel))
                .await
                .0,
            201
        );
        let h = [("idempotency-key", "k1")];
        let (_, made) = admin_with(
            &gw,
            "POST",
            "/admin/keys",
            ADMIN,
            Some(json!({"name": "svc"})),
            &h,
        )
        .await;
        let key = made["key"].as_str().unwrap().to_string();
        // Load through the rotation: four clients, until it has finished.
        let (stop, sent, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(std::sync::Mutex::new(Vec::<String>::new())),
        );
        let mut load = Vec::new();
        for _ in 0..4 {
            let (gw, key, stop, sent, failed) = (
                gw.clone(),
                key.clone(),
                stop.clone(),
                sent.clone(),
                failed.clone(),
            );
            load.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let resp = gw
                        .post_as("/v1/chat/completions", &key, &[], chat_body(false))
                        .await;
                    if resp.status() != 200 {
                        let status = resp.status();
                        let body = resp.text().await.unwrap_or_default();
                        failed.lock().unwrap().push(format!("{status} {body}"));
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        until(
            "load is running",
            std::time::Duration::from_secs(5),
            async || sent.load(Ordering::Relaxed) >= 20,
        )
        .await;
        let cfg = gw.config_path.clone();
        let new_key = new.clone();
        let out = tokio::task::spawn_blocking(move || {
            let cfg = cfg.to_str().unwrap();
            run_bin(
                &["rotate-master-key", "-c", cfg],
                &[("SWITCHYARD_NEW_MASTER_KEY", &new_key)],
            )
        })
        .await
        .unwrap();
        let during = sent.load(Ordering::Relaxed);
        until(
            "more requests after the rotation",
            std::time::Duration::from_secs(5),
            async || sent.load(Ordering::Relaxed) >= during + 20,
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        for t in load {
            t.await.unwrap();
        }
        assert!(out.ok, "{url}: {} {}", out.out, out.err);
        assert!(
            out.out.contains("re-sealed 1 objects and the pepper"),
            "{}",
            out.out
        );
        // Run again, it finds nothing left under the old key.
        let cfg = gw.config_path.clone();
        let args = ["rotate-master-key", "-c", cfg.to_str().unwrap()];
        let twice = run_bin(&args, &[("SWITCHYARD_NEW_MASTER_KEY", &new)]);
        assert!(
            twice.ok && twice.out.contains("re-sealed 0 objects;"),
            "{}",
            twice.out
        );
        let failed = failed.lock().unwrap().clone();
        assert!(
            failed.is_empty(),
            "{url}: requests failed during the rotation: {failed:?}"
        );
        // Afterwards the new key alone opens everything, and hashes keys as before; the old no
        // longer opens the channel's key.
        use switchyard::store::{MasterEnv, Store};
        let only = |k: &str| MasterEnv {
            current: Some(k.to_string()),
            next: None,
        };
        let s = switchyard::config::StoreSettings {
            url: switchyard::secret::Secret::new(url.as_str()),
            retention: std::time::Duration::from_secs(86_400),
            ledger_retention: std::time::Duration::from_secs(400 * 86_400),
            master_key: None,
            poll_interval: std::time::Duration::from_millis(500),
        };
        let store = Store::open(&s, only(&new))
            .await
            .expect("the new key opens the store");
        let ov = store
            .overlay()
            .await
            .expect("every secret opens under the new key");
        assert_eq!(ov.entries["channels"][0]["api_keys"][0], UPSTREAM_KEY);
        assert_eq!(
            store.pepper().unwrap().hash(&key),
            ov.entries["keys"][0]["key_hash"].as_str().unwrap()
        );
        assert!(
            Store::open(&s, only(&old)).await.is_err(),
            "{url}: the old key still opens the pepper"
        );
        // A gateway started on the new key alone serves the API channel to the API key.
        let after = on_store(&url, Some(&new), "").await;
        assert_eq!(
            after
                .post_as("/v1/chat/completions", &key, &[], chat_body(false))
                .await
                .status(),
            200
        );
        // The kept answer still replays (it never held the key).
        let again = admin_with(
            &after,
            "POST",
            "/admin/keys",
            ADMIN,
            Some(json!({"name": "svc"})),
            &h,
        )
        .await;
        assert_eq!(
            (again.0, again.1.get("key")),
            (201, None),
            "{url}: {}",
            again.1
        );
        let verify = run_bin(
            &["audit", "verify", "-c", gw.config_path.to_str().unwrap()],
            &[],
        );
        assert!(
            verify.ok && verify.out.contains("audit chain OK: 4 rows"),
            "{}",
            verify.out
        );
    }
}

#[tokio::test]
async fn a_kill_9_in_a_burst_of_admin_writes_loses_no_acknowledged_write() {
    let stores = Stores::new("ops_kill").await;
    let m = master_key(10);
    for url in stores.urls() {
        let dir = tempfile::tempdir().unwrap();
        let up = mock(text_spec("ok")).await;
        let cfg = binary_config(dir.path(), &url, "");
        let env = [("SWITCHYARD_MASTER_KEY", m.as_str())];
        let args = ["serve", "-c", cfg.to_str().unwrap()];
        let (mut p, gw) =
            spawn_listening_env(&args, dir.path(), "switchyard listening on ", &env).await;
        let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let mut writers = Vec::new();
        for w in 0..4 {
            let (gw, acked, base) = (gw.clone(), acked.clone(), up.base_url());
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("c-{w}-{i}");
                    let body = json!({"name": name, "provider": "openai", "base_url": base, "api_keys": [format!("sk-upstream-{w}-{i}-secret")], "models": ["m"]});
                    match try_post(&gw, "/admin/channels", body).await {
                        201 => acked.lock().unwrap().push(name),
                        _ => break, // The gateway is gone.
                    }
                }
            }));
        }
        until(
            "a burst of acknowledged writes",
            std::time::Duration::from_secs(20),
            async || acked.lock().unwrap().len() >= 30,
        )
        .await;
        let pid = p.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-9", &pid])
                .status()
                .unwrap()
                .success()
        );
        let _ = p.0.wait();
        for w in writers {
            w.await.unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        // Restarted on what the store holds: every acknowledged channel, each whole.
        let (_p2, gw2) =
            spawn_listening_env(&args, dir.path(), "switchyard listening on ", &env).await;
        let (_, listed) = call(&gw2, "GET", "/admin/channels", None).await;
        let listed: Value = serde_json::from_str(&listed).unwrap();
        let rows = listed["data"].as_array().unwrap();
        for name in &acked {
            let row = rows.iter().find(|r| r["name"] == name.as_str());
            let row = row.unwrap_or_else(|| panic!("{url}: acknowledged {name} was lost"));
            assert_eq!(row["api_keys"].as_array().map(Vec::len), Some(1), "{row}");
            assert_eq!(row["base_url"], up.base_url().as_str());
        }
        // Nothing half-applied: each object has its audit row, the chain verifies.
        let (_, audit) = call(&gw2, "GET", "/admin/audit?limit=1000", None).await;
        let audit: Value = serde_json::from_str(&audit).unwrap();
        assert_eq!(audit["data"].as_array().unwrap().len(), rows.len(), "{url}");
        assert_eq!(
            chat_status(&gw2, KEY).await,
            200,
            "{url}: the restarted gateway serves what it holds"
        );
        let verify_args = ["audit", "verify", "-c", cfg.to_str().unwrap()];
        let verify = run_bin(&verify_args, &[]);
        assert!(verify.ok, "{}", verify.err);
        // A row changed afterwards breaks the chain, and verify says where.
        tamper(&url).await;
        let verify = run_bin(&verify_args, &[]);
        assert!(
            !verify.ok && verify.err.contains("breaks at row"),
            "{}",
            verify.err
        );
    }
}

async fn tamper(url: &str) {
    let db = switchyard::store::Db::connect(url).await.unwrap();
    let sql = "UPDATE audit SET admin = 'mallory' WHERE id = (SELECT MIN(id) FROM audit)";
    match &db {
        switchyard::store::Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        switchyard::store::Db::Postgres(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
    }
    .unwrap();
}
