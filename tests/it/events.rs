//! Routing events and signed webhooks, against a real receiver on 127.0.0.1: one
//! `model.failover` per failover, verified by the snippet `docs/events.md` gives; retries after
//! 5xx; delivery resumed after a kill -9; two replicas delivering each event once; a storm
//! folded with whole counts; circuit, credential, budget and admin events; SSRF refusals.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

/// The receiver-side check `docs/events.md` documents, run as written (python3, stdlib only):
/// "valid" or "invalid" for a delivery under `secret`.
fn python_verifies(secret: &str, r: &Received) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md"))
        .expect("docs/events.md");
    let snippet = doc
        .split("```python\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("docs/events.md has a python snippet");
    let driver = "\nimport json, sys\nd = json.load(sys.stdin)\n\
        print('valid' if verify(d['secret'], d['headers'], d['body'].encode()) else 'invalid')\n";
    let input = json!({
        "secret": secret,
        "headers": {"webhook-id": r.id, "webhook-timestamp": r.timestamp,
                    "webhook-signature": r.signature},
        "body": r.body,
    });
    let mut child = std::process::Command::new("python3")
        .args(["-c", &format!("{snippet}{driver}")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Tier 1 answers 500 (its breaker off, so every request fails over the same way), tier 2 ok.
async fn failing_then_ok() -> (MockServer, MockServer, String) {
    let bad = mock(faulty("x", status(500))).await;
    let good = mock(text_spec("ok")).await;
    let channels = format!(
        "{}{}",
        openai_channel(
            "a",
            &bad.base_url(),
            1,
            "[channels.circuit_breaker]\nenabled = false"
        ),
        openai_channel("b", &good.base_url(), 2, "")
    );
    (bad, good, channels)
}

use switchyard::provider::mock::MockServer;

/// A webhook's delivery log once `done` holds of it.
async fn log_when(url: &str, webhook: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let path = format!("{url}/admin/webhooks/{webhook}/deliveries");
    until(what, Duration::from_secs(10), async || {
        let d = get_json(&path, Some(ADMIN)).await;
        if done(&d) { Ok(d) } else { Err(d) }
    })
    .await
}

/// A webhook's delivery log once `n` attempts are recorded and the newest is final (the
/// receiver sees a delivery a moment before the gateway records it).
async fn recorded(url: &str, webhook: &str, n: usize) -> Value {
    log_when(url, webhook, "the attempts are recorded", |d| {
        d["data"].as_array().map_or(0, Vec::len) >= n && d["data"][0]["state"] != "pending"
    })
    .await
}

/// The events `/admin/events` lists (`query` after `?`).
async fn events(url: &str, query: &str) -> Vec<Value> {
    let v = get_json(&format!("{url}/admin/events?{query}"), Some(ADMIN)).await;
    v["data"].as_array().cloned().unwrap_or_default()
}

fn sqlite_store(dir: &tempfile::TempDir) -> String {
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    store_section(&url, Some(&master_key(3)))
}

#[tokio::test]
async fn a_failover_is_one_signed_event_the_documented_snippet_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    let secret = whsec(7);
    let (_bad, _good, channels) = failing_then_ok().await;
    let hooks = webhook_config("ops", &rx.url, &secret, "\"model.failover\"", 10);
    let gw = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir)), &channels).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-request-id").to_string();
    // Listed within a second of the answer.
    let listed = until(
        "the failover is listed",
        Duration::from_secs(1),
        async || {
            let list = events(&gw.url, "type=model.failover").await;
            (list.len() == 1).then(|| list[0].clone())
        },
    )
    .await;
    assert_eq!(listed["data"]["request_id"], id.as_str());
    until("it is delivered", Duration::from_secs(10), async || {
        rx.delivered().len() == 1
    })
    .await;
    let got = &rx.got()[0];
    let body = got.json();
    assert_eq!(body["type"], "model.failover");
    assert!(body["timestamp"].as_str().unwrap().ends_with('Z'), "{body}");
    let data = &body["data"];
    assert_eq!(data["request_id"], id.as_str());
    assert_eq!(data["key"], "team-a");
    assert_eq!(
        (&data["requested_model"], &data["served_channel"]),
        (&json!("m"), &json!("b"))
    );
    assert_eq!(data["outcome"], "served");
    assert_eq!(data["stream"], false);
    let first = &data["attempts"][0];
    assert_eq!(
        (&first["channel"], &first["reason"], &first["status"]),
        (&json!("a"), &json!("server_error"), &json!(500))
    );
    assert!(first["latency_ms"].is_u64(), "{first}");
    assert_eq!(got.id, listed["id"].as_str().unwrap());
    assert!(got.id.starts_with("msg_") && got.signature.starts_with("v1,"));
    assert_eq!(python_verifies(&secret, got), "valid");
    let tampered = Received {
        body: got.body.replace("server_error", "timeout"),
        ..got.clone()
    };
    assert_eq!(python_verifies(&secret, &tampered), "invalid");
    assert_eq!(python_verifies(&whsec(8), got), "invalid");
    // Exactly one: the delivery log says so, and a served request without failover adds none.
    let d = recorded(&gw.url, "ops", 1).await;
    assert_eq!(d["data"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["data"][0]["state"], "delivered");
    assert_eq!(d["data"][0]["status"], 200);
    assert_eq!(rx.got().len(), 1);
}

#[tokio::test]
async fn a_receiver_failing_three_times_gets_the_event_after_each_failure_then_it_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[500, 503, 429]).await;
    let (_bad, _good, channels) = failing_then_ok().await;
    let hooks = webhook_config("ops", &rx.url, &whsec(1), "\"model.*\"", 10);
    let gw = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir)), &channels).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    until(
        "delivered after three failures",
        Duration::from_secs(30),
        async || rx.delivered().len() == 1,
    )
    .await;
    let got = rx.got();
    assert_eq!(got.len(), 4, "once more after each failure");
    assert!(
        got.iter()
            .all(|r| r.id == got[0].id && r.body == got[0].body)
    );
    let d = recorded(&gw.url, "ops", 4).await;
    let rows = d["data"].as_array().unwrap();
    let statuses: Vec<i64> = rows
        .iter()
        .rev()
        .map(|r| r["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 503, 429, 200]);
    assert!(rows.iter().all(|r| r["state"] == "delivered"), "{d}");
    // Backed off 1 s, 2 s, 4 s (±20 %) between attempts.
    let ts: Vec<i64> = rows
        .iter()
        .rev()
        .map(|r| r["ts_ms"].as_i64().unwrap())
        .collect();
    for (i, want) in [1000, 2000, 4000].iter().enumerate() {
        let gap = ts[i + 1] - ts[i];
        assert!(gap >= want * 8 / 10, "gap {i}: {gap} ms, want about {want}");
    }
    // A 4xx other than 408/429 is not retried.
    let refusing = receiver(&[]).await;
    refusing.answer(410);
    let dir2 = tempfile::tempdir().unwrap();
    let hooks = webhook_config("gone", &refusing.url, &whsec(2), "\"*\"", 10);
    let (_b, _g, channels) = failing_then_ok().await;
    let gw2 = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir2)), &channels).await;
    assert_eq!(gw2.chat(chat_body(false)).await.status(), 200);
    let d = log_when(&gw2.url, "gone", "the refusal is recorded", |d| {
        d["data"][0]["state"] == "failed"
    })
    .await;
    assert_eq!(d["data"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(refusing.got().len(), 1);
}

fn binary_config(
    dir: &std::path::Path,
    rx: &Receiver,
    bad: &str,
    good: &str,
) -> std::path::PathBuf {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\n\
         [log]\nsqlite_path = \"{}\"\n\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n{}{}\n{}{}",
        dir.join("log.db").display(),
        store_section(
            &format!("sqlite://{}", dir.join("store.db").display()),
            None
        ),
        webhook_config("ops", &rx.url, &whsec(4), "\"model.failover\"", 10),
        openai_channel("a", bad, 1, "[channels.circuit_breaker]\nenabled = false"),
        openai_channel("b", good, 2, ""),
    );
    let path = dir.join("switchyard.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn a_gateway_killed_with_undelivered_events_delivers_them_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    rx.answer(503);
    let bad = mock(faulty("x", status(500))).await;
    let good = mock(text_spec("ok")).await;
    let config = binary_config(dir.path(), &rx, &bad.base_url(), &good.base_url());
    let (mut proc, url) = spawn_serve(&config, dir.path()).await;
    let resp = client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Killed once a failed attempt is on record (possibly during the next: then the row's
    // 15 s lease runs out first).
    log_when(&url, "ops", "a failed attempt is recorded", |d| {
        d["data"][0]["status"] == 503
    })
    .await;
    let health = get_json(&format!("{url}/admin/health"), Some(ADMIN)).await;
    assert_eq!(health["events"]["outbox_pending"], 1, "{health}");
    let id = rx.got()[0].id.clone();
    proc.0.kill().unwrap();
    proc.0.wait().unwrap();
    rx.answer(200);
    let (_proc, _url) = spawn_serve(&config, dir.path()).await;
    until(
        "delivered after the restart",
        Duration::from_secs(40),
        async || rx.delivered().len() == 1,
    )
    .await;
    assert_eq!(rx.delivered()[0].id, id, "the same webhook-id");
}

#[tokio::test]
async fn two_replicas_on_one_store_deliver_each_event_once() {
    let pg = Postgres::fresh("events_replicas").await;
    let rx = receiver(&[]).await;
    let (_bad, _good, channels) = failing_then_ok().await;
    let hooks = webhook_config("ops", &rx.url, &whsec(5), "\"model.failover\"", 0);
    let keys = format!("{}{hooks}", store_section(&pg.url, Some(&master_key(5))));
    let a = gateway_full("", &keys, &channels).await;
    let b = gateway_full("", &keys, &channels).await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let gw_url = if i % 2 == 0 {
            a.chat_url()
        } else {
            b.chat_url()
        };
        tasks.push(tokio::spawn(async move {
            client()
                .post(gw_url)
                .bearer_auth(KEY)
                .json(&chat_body(false))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    until("30 events delivered", Duration::from_secs(20), async || {
        rx.delivered().len() >= 30
    })
    .await;
    let listed = events(&a.url, "type=model.failover&limit=1000").await;
    assert_eq!(listed.len(), 30);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in rx.got() {
        *seen.entry(r.id).or_default() += 1;
    }
    assert!(
        seen.values().all(|n| *n == 1),
        "each webhook-id once: {seen:?}"
    );
    for e in &listed {
        assert!(seen.contains_key(e["id"].as_str().unwrap()), "{e}");
    }
}

#[tokio::test]
async fn a_storm_of_a_thousand_failovers_is_folded_with_whole_counts() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    // Tier 1's breaker opens soon (the default): the storm is its failures, then its skips.
    let bad = mock(faulty("x", status(500))).await;
    let good = mock(text_spec("ok")).await;
    let channels = format!(
        "{}{}",
        openai_channel("a", &bad.base_url(), 1, ""),
        openai_channel("b", &good.base_url(), 2, "")
    );
    let hooks = webhook_config(
        "ops",
        &rx.url,
        &whsec(6),
        "\"model.failover\", \"circuit.*\"",
        10,
    );
    let gw = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir)), &channels).await;
    let started = std::time::Instant::now();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (url, sem) = (gw.chat_url(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let r = client()
                .post(url)
                .bearer_auth(KEY)
                .json(&chat_body(false))
                .send()
                .await;
            r.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let took = started.elapsed();
    // Every failover is counted once: by its own delivery or in a summary's count.
    let total = |got: &[Received]| -> u64 {
        got.iter()
            .map(Received::json)
            .filter(|v| v["type"] == "model.failover")
            .map(|v| v["data"]["count"].as_u64().unwrap_or(1))
            .sum()
    };

    until(
        "every failover delivered or counted",
        Duration::from_secs(30),
        async || total(&rx.delivered()) == 1000,
    )
    .await;
    let delivered: Vec<Received> = rx
        .delivered()
        .into_iter()
        .filter(|r| r.json()["type"] == "model.failover")
        .collect();
    assert!(
        rx.delivered()
            .iter()
            .any(|r| r.json()["type"] == "circuit.opened")
    );
    let summaries: Vec<Value> = delivered
        .iter()
        .map(Received::json)
        .filter(|v| v["data"]["folded"] == true)
        .collect();
    assert!(!summaries.is_empty());
    // One at once, then a summary per window ended: a few deliveries, not a thousand.
    let windows = took.as_secs() / 10 + 2;
    assert!(
        delivered.len() as u64 <= 2 * windows,
        "{} deliveries in {took:?}",
        delivered.len()
    );
    for s in &summaries {
        let ids = s["data"]["request_ids"].as_array().unwrap();
        let count = s["data"]["count"].as_u64().unwrap();
        assert_eq!(ids.len() as u64, count.min(100), "{s}");
        let reason = s["data"]["reason"].as_str().unwrap();
        assert!(["server_error", "circuit_open"].contains(&reason), "{s}");
    }
    // Every one of the thousand is listed, folded ones naming their summary.
    let mut listed = Vec::new();
    let mut before = String::new();
    loop {
        let page = events(
            &gw.url,
            &format!("type=model.failover&limit=1000&before={before}"),
        )
        .await;
        let Some(last) = page.last() else { break };
        before = last["id"].as_str().unwrap().to_string();
        listed.extend(page);
    }
    let raw = listed
        .iter()
        .filter(|e| e["data"]["folded"] != true)
        .count();
    assert_eq!(raw, 1000);
    let folded = listed
        .iter()
        .filter(|e| e["folded_into"].is_string())
        .count() as u64;
    let counted: u64 = summaries
        .iter()
        .map(|s| s["data"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(folded, counted);
}

#[tokio::test]
async fn circuits_and_credentials_are_events_without_a_store_and_never_name_the_key() {
    let bad = mock(faulty("x", status(500))).await;
    // The pool's first key is refused (401), its third rate-limited (429), its second serves.
    let refused = Fault {
        status: Some(401),
        ..Fault::default()
    };
    let limited = Fault {
        status: Some(429),
        retry_after_seconds: Some(30),
        ..Fault::default()
    };
    let pool = mock(MockSpec {
        per_key: [
            ("sk-aaaa-1111".to_string(), refused),
            ("sk-cccc-3333".to_string(), limited),
        ]
        .into_iter()
        .collect(),
        ..text_spec("ok")
    })
    .await;
    let channels = format!(
        "{}[[channels]]\nname = \"pool\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         models = [\"m\"]\npriority = 2\ncredentials = [{{ label = \"first\", key = \"sk-aaaa-1111\" }}, \
         {{ label = \"second\", key = \"sk-bbbb-2222\" }}, {{ label = \"third\", key = \"sk-cccc-3333\" }}]\n\n",
        openai_channel(
            "a",
            &bad.base_url(),
            1,
            "[channels.circuit_breaker]\nfailure_threshold = 2\nprobe = { enabled = false }"
        ),
        pool.base_url()
    );
    let gw = gateway(&channels).await;
    for _ in 0..4 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let opened = until(
        "circuit.opened is listed",
        Duration::from_secs(2),
        async || {
            let list = events(&gw.url, "type=circuit.*").await;
            list.into_iter().find(|e| e["type"] == "circuit.opened")
        },
    )
    .await;
    assert_eq!(opened["data"]["channel"], "a");
    assert_eq!(opened["data"]["failures"], 2);
    assert!(opened["data"]["cooldown_seconds"].as_f64().unwrap() > 0.0);
    let disabled = until(
        "credential.disabled is listed",
        Duration::from_secs(2),
        async || {
            events(&gw.url, "type=credential.disabled")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(disabled["data"]["channel"], "pool");
    assert_eq!(disabled["data"]["label"], "first");
    let cooling = events(&gw.url, "type=credential.cooling").await;
    assert_eq!(cooling.len(), 1, "{cooling:?}");
    assert_eq!(
        (&cooling[0]["data"]["label"], &cooling[0]["data"]["status"]),
        (&json!("third"), &json!(429))
    );
    assert_eq!(cooling[0]["data"]["cooldown_seconds"], 30.0);
    // The upstream recovers; after the cooldown the trial succeeds and the circuit closes.
    bad.set_spec(text_spec("back"));
    gw.clock.advance(Duration::from_secs(61));
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    let closed = until(
        "circuit.closed is listed",
        Duration::from_secs(2),
        async || {
            events(&gw.url, "type=circuit.closed")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(closed["data"]["channel"], "a");
    assert_eq!(closed["data"]["model"], Value::Null);
    let all = get_json(&format!("{}/admin/events", gw.url), Some(ADMIN)).await;
    assert!(!all.to_string().contains("sk-aaaa"), "{all}");
    assert_eq!(all["dropped"], 0);
    let ready = get_json(&format!("{}/readyz", gw.url), None).await;
    assert_eq!(ready["events"]["dropped"], 0, "{ready}");
    // A type that names nothing is the caller's mistake.
    let bad_type = client()
        .get(format!("{}/admin/events?type=circuits.*", gw.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_type.status(), 400);
}

#[tokio::test]
async fn a_budget_crossing_each_threshold_is_one_event_and_exhaustion_one_more() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway_full(
        "",
        "budget = { usd = 0.0002 }",
        &openai_channel("a", &up.base_url(), 1, "price = { input = 1, output = 1 }"),
    )
    .await;
    let body = json!({"model": "m", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "Say something short."}]});
    let mut refused = 0;
    for _ in 0..200 {
        let s = gw.chat(body.clone()).await.status().as_u16();
        if s == 429 {
            refused += 1;
            if refused == 3 {
                break;
            }
        }
    }
    assert_eq!(refused, 3, "the budget ran out");
    let th = until(
        "the 50 and 80 % thresholds",
        Duration::from_secs(2),
        async || {
            let list = events(&gw.url, "type=budget.threshold").await;
            (list.len() >= 2).then_some(list)
        },
    )
    .await;
    let mut pcts: Vec<u64> = th
        .iter()
        .map(|e| e["data"]["percent"].as_u64().unwrap())
        .collect();
    pcts.sort();
    pcts.dedup();
    assert_eq!(pcts.len(), th.len(), "each threshold once: {th:?}");
    assert!(pcts.starts_with(&[50, 80]), "{pcts:?}");
    assert!(th.iter().all(|e| e["data"]["scope"] == "key:team-a"));
    let ex = events(&gw.url, "type=budget.exhausted").await;
    assert_eq!(ex.len(), 1, "three refusals, one event: {ex:?}");
    assert_eq!(ex[0]["data"]["budget_micros"], 200);
}

#[tokio::test]
async fn webhooks_made_through_the_api_show_their_secret_once_and_get_admin_events() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    let up = mock(text_spec("ok")).await;
    let extra = format!(
        "{}\n[events]\nallow_private_targets = true\n",
        sqlite_store(&dir)
    );
    let gw = gateway_full("", &extra, &openai_channel("a", &up.base_url(), 1, "")).await;
    let made = as_admin(
        &gw,
        "POST",
        "/admin/webhooks",
        Some(json!({"name": "ops", "url": rx.url, "events": ["key.*", "webhook.test"]})),
    )
    .await;
    assert_eq!(made.0, 201, "{:?}", made.1);
    let secret = made.1["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let read = as_admin(&gw, "GET", "/admin/webhooks/ops", None).await;
    assert_eq!(read.1["secret"], "***");
    let stored = std::fs::read(dir.path().join("store.db")).unwrap();
    let needle = secret.as_bytes();
    assert!(
        !stored.windows(needle.len()).any(|w| w == needle),
        "sealed at rest"
    );
    let key = as_admin(&gw, "POST", "/admin/keys", Some(json!({"name": "ci"}))).await;
    assert_eq!(key.0, 201);
    assert_eq!(as_admin(&gw, "DELETE", "/admin/keys/ci", None).await.0, 200);
    // A channel changed through the API is an event too, its diff masked as the audit's.
    let ch = json!({"name": "c2", "provider": "openai", "base_url": up.base_url(),
                    "api_keys": ["sk-upstream-secret-key-xyz"], "models": ["m"]});
    assert_eq!(
        as_admin(&gw, "POST", "/admin/channels", Some(ch)).await.0,
        201
    );
    let changed = until(
        "channel.changed is listed",
        Duration::from_secs(2),
        async || {
            events(&gw.url, "type=channel.changed")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(changed["data"]["channel"], "c2");
    assert_eq!(changed["data"]["action"], "create");
    assert!(!changed.to_string().contains("secret-key-xyz"), "{changed}");
    let test = as_admin(&gw, "POST", "/admin/webhooks/ops/test", None).await;
    assert_eq!(test.0, 202, "{:?}", test.1);
    until(
        "three events delivered",
        Duration::from_secs(10),
        async || rx.delivered().len() == 3,
    )
    .await;
    let mut types: Vec<String> = rx
        .delivered()
        .iter()
        .map(|r| r.json()["type"].as_str().unwrap().to_string())
        .collect();
    types.sort();
    assert_eq!(types, ["key.created", "key.revoked", "webhook.test"]);
    assert!(
        rx.delivered()
            .iter()
            .all(|r| python_verifies(&secret, r) == "valid")
    );
    // The audit with events: admin rows and routing events in one list, each saying which.
    let audit = get_json(
        &format!("{}/admin/audit?include=events", gw.url),
        Some(ADMIN),
    )
    .await;
    let entries: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["entry"].as_str().unwrap())
        .collect();
    assert!(
        entries.contains(&"admin") && entries.contains(&"event"),
        "{audit}"
    );
    let plain = get_json(&format!("{}/admin/audit", gw.url), Some(ADMIN)).await;
    assert!(
        plain["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["hash"].is_string())
    );
    // Unknown webhooks are 404; a private target without allow_private_targets is refused.
    assert_eq!(
        code(&as_admin(&gw, "POST", "/admin/webhooks/nope/test", None).await).0,
        404
    );
    let dir2 = tempfile::tempdir().unwrap();
    let strict = gateway_full(
        "",
        &sqlite_store(&dir2),
        &openai_channel("a", &up.base_url(), 1, ""),
    )
    .await;
    for url in [
        "http://127.0.0.1:9/x",
        "http://169.254.169.254/",
        "ftp://example.com/",
        "https://u:p@example.com/",
    ] {
        let r = as_admin(
            &strict,
            "POST",
            "/admin/webhooks",
            Some(json!({"name": "x", "url": url, "events": ["*"]})),
        )
        .await;
        assert_eq!(code(&r), (400, "invalid_value"), "{url}: {:?}", r.1);
        assert!(
            r.1["error"]["message"].as_str().unwrap().contains("url"),
            "{:?}",
            r.1
        );
    }
    // A name that passes as text but resolves to loopback is refused when delivering.
    let sneaky = format!("{}/", rx.url.replace("127.0.0.1", "localhost"));
    let r = as_admin(
        &strict,
        "POST",
        "/admin/webhooks",
        Some(json!({"name": "dns", "url": sneaky, "events": ["*"]})),
    )
    .await;
    assert_eq!(r.0, 201, "{:?}", r.1);
    assert_eq!(
        as_admin(&strict, "POST", "/admin/webhooks/dns/test", None)
            .await
            .0,
        202
    );
    let d = log_when(&strict.url, "dns", "the refusal is recorded", |d| {
        d["data"][0]["error"].is_string()
    })
    .await;
    let d = d["data"][0]["error"].as_str().unwrap_or_default();
    assert!(d.contains("private"), "{d}");
    assert_eq!(
        rx.got().len(),
        3,
        "the receiver was never reached through the name"
    );
}

/// Runs `sql` on a store (test setup: ages rows as a day passing would).
async fn on_db(db: &switchyard::store::Db, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    let done = match db {
        switchyard::store::Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        switchyard::store::Db::Postgres(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
    };
    done.unwrap();
}

#[tokio::test]
async fn the_outbox_leases_each_row_once_and_prunes_alike_on_both_backends() {
    use switchyard::store::events::{Attempt, Fate, Leased, NewEvent};
    let stores = Stores::new("events_outbox").await;
    for url in stores.urls() {
        let db = switchyard::store::Db::open(&url).await.unwrap();
        let now = 1_800_000_000_000;
        let day = 86_400_000;
        let rows: Vec<NewEvent> = (0..3)
            .map(|i| NewEvent {
                id: ["msg_a", "msg_b", "msg_c"][i],
                kind: "model.failover",
                ts_ms: now - [40 * day, 0, 0][i],
                request_id: Some("req_1"),
                folded_into: None,
                payload: format!("{{\"n\":{i}}}"),
                webhooks: vec!["ops", "audit"],
            })
            .collect();
        db.write_events(&rows).await.unwrap();
        // Writing again (a retried batch) adds nothing.
        db.write_events(&rows).await.unwrap();
        assert_eq!(db.outbox_pending().await.unwrap(), 6, "{url}");
        // Rows are leased per webhook; both webhooks' here.
        let lease = async |replica: &str, at: i64, until: i64, n: i64| {
            let mut got = db.lease(replica, "ops", at, until, n).await.unwrap();
            got.extend(db.lease(replica, "audit", at, until, n).await.unwrap());
            got
        };
        // Two replicas lease at once, two rows a webhook each: every row goes to one of them.
        let (a, b) = tokio::join!(
            lease("r1", now, now + 60_000, 2),
            lease("r2", now, now + 60_000, 2)
        );
        assert_eq!(a.len() + b.len(), 6, "{url}");
        let mut keys: Vec<_> = a
            .iter()
            .chain(&b)
            .map(|l| (l.event_id.clone(), l.webhook.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 6, "{url}: no row leased twice");
        assert!(a.iter().chain(&b).all(|l| l.payload.starts_with("{\"n\":")));
        // Leased rows are not leased again until their lease runs out.
        assert!(lease("r3", now + 1, now + 60_000, 10).await.is_empty());
        let expired = lease("r3", now + 60_001, now + 120_000, 10).await;
        assert_eq!(
            expired.len(),
            6,
            "{url}: a dead replica's leases are taken over"
        );
        // Only the lease holder records a fate; a retry comes due again at its time.
        let retried = |l: &Leased| {
            (l.event_id.as_str(), l.webhook.as_str()) == ("msg_a", "ops")
                || (l.event_id.as_str(), l.webhook.as_str()) == ("msg_c", "audit")
        };
        for row in &expired {
            let fate = if retried(row) {
                Fate::Retry(now + 200_000)
            } else {
                Fate::Delivered
            };
            let attempt = |replica| Attempt {
                row,
                now_ms: now + 60_002,
                status: Some(200),
                latency_ms: 3,
                error: None,
                replica,
                fate,
            };
            assert!(!db.finish_attempt(&attempt("r1")).await.unwrap());
            assert!(db.finish_attempt(&attempt("r3")).await.unwrap());
        }
        assert_eq!(db.outbox_pending().await.unwrap(), 2, "{url}");
        assert!(
            lease("r3", now + 199_999, now + 300_000, 10)
                .await
                .is_empty()
        );
        let again = lease("r3", now + 200_000, now + 300_000, 10).await;
        assert_eq!(again.len(), 2, "{url}");
        assert!(again.iter().all(|l| retried(l) && l.attempts == 1), "{url}");
        let d = db.deliveries("ops", 10).await.unwrap();
        assert!(d.iter().all(|x| x.replica == "r3"), "{url}: {d:?}");
        // Retention: a row pending past the day expires (msg_a's, 40 days old); done rows and
        // attempts past retention go, and events past 30 days.
        on_db(
            &db,
            &format!("UPDATE deliveries SET ts_ms = {}", now - 8 * day),
        )
        .await;
        let n = db
            .prune_events(now - day, now - 7 * day, now - 30 * day)
            .await
            .unwrap();
        assert!(n >= 3, "{url}: {n}");
        assert_eq!(
            db.outbox_pending().await.unwrap(),
            1,
            "{url}: msg_c's retry waits"
        );
        let left = db.events(None, 0, None, 10).await.unwrap();
        let ids: Vec<&str> = left.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["msg_c", "msg_b"], "{url}");
        assert!(db.deliveries("ops", 10).await.unwrap().is_empty(), "{url}");
    }
}

#[tokio::test]
async fn a_webhook_failing_for_a_day_is_disabled_and_a_test_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    rx.answer(500);
    let (_bad, _good, channels) = failing_then_ok().await;
    let hooks = webhook_config("ops", &rx.url, &whsec(9), "\"*\"", 0);
    let gw = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir)), &channels).await;
    let store = gw.running.state.store.clone().unwrap();
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    log_when(&gw.url, "ops", "a failed attempt is recorded", |d| {
        d["data"][0]["status"] == 500
    })
    .await;
    // A day passes: the streak began 25 h ago (kept: a streak's start is never moved later)
    // and the row was made then.
    let day_ago = switchyard::clock::unix_ms() - 25 * 3_600_000;
    on_db(
        &store.db,
        &format!(
            "INSERT INTO webhook_state (name, failing_since_ms) VALUES ('ops', {day_ago})
             ON CONFLICT (name) DO UPDATE SET failing_since_ms = {day_ago}"
        ),
    )
    .await;
    on_db(
        &store.db,
        &format!("UPDATE outbox SET created_ms = {day_ago}, next_ms = 0"),
    )
    .await;
    let disabled = until(
        "webhook.disabled is listed",
        Duration::from_secs(20),
        async || {
            events(&gw.url, "type=webhook.disabled")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(disabled["data"]["webhook"], "ops");
    let d = log_when(&gw.url, "ops", "the row expired", |d| {
        d["data"][0]["state"] == "expired" && d["disabled"] == true
    })
    .await;
    assert_eq!(d["data"][0]["status"], 500);
    // Disabled: a new failover is listed but not sent.
    let sent = rx.got().len();
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    until(
        "the failover is listed",
        Duration::from_secs(2),
        async || events(&gw.url, "type=model.failover").await.len() == 2,
    )
    .await;
    let health = get_json(&format!("{}/admin/health", gw.url), Some(ADMIN)).await;
    assert_eq!(
        health["events"]["webhooks"][0]["disabled_by_failures"], true,
        "{health}"
    );
    assert_eq!(
        health["events"]["outbox_pending"], 0,
        "nothing queued: {health}"
    );
    // A test (the receiver fixed) enables it again and is delivered.
    rx.answer(200);
    assert_eq!(
        as_admin(&gw, "POST", "/admin/webhooks/ops/test", None)
            .await
            .0,
        202
    );
    until(
        "the test is delivered",
        Duration::from_secs(10),
        async || {
            rx.delivered()
                .iter()
                .any(|r| r.json()["type"] == "webhook.test")
        },
    )
    .await;
    assert!(
        rx.got()[sent..]
            .iter()
            .all(|r| r.json()["type"] != "model.failover"),
        "nothing was queued while disabled"
    );
}

#[tokio::test]
async fn while_a_secret_rotates_each_delivery_carries_a_signature_under_both() {
    let dir = tempfile::tempdir().unwrap();
    let rx = receiver(&[]).await;
    let (old, new) = (whsec(11), whsec(12));
    let (_bad, _good, channels) = failing_then_ok().await;
    let hooks = format!(
        "{}previous_secret = \"{old}\"\n",
        webhook_config("ops", &rx.url, &new, "\"model.failover\"", 10)
    );
    let gw = gateway_full("", &format!("{}{hooks}", sqlite_store(&dir)), &channels).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    until("delivered", Duration::from_secs(10), async || {
        rx.delivered().len() == 1
    })
    .await;
    let got = &rx.got()[0];
    assert_eq!(got.signature.split(' ').count(), 2, "{}", got.signature);
    assert_eq!(python_verifies(&new, got), "valid");
    assert_eq!(python_verifies(&old, got), "valid");
    assert_eq!(python_verifies(&whsec(13), got), "invalid");
}
