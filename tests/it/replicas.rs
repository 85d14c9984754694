//! Replicas sharing state through a real Redis: session bindings kept across replicas and
//! restarts with their TTLs set and refreshed in Redis, circuit openings, cooled credentials and
//! rate counters honoured by the other replica, a Redis that goes away and comes back, and Redis
//! over TLS.

use std::process::{Command, Stdio};
use std::time::Duration;

use redis::AsyncCommands;
use switchyard::provider::mock::MockServer;

use crate::support::*;

/// Two tiers serving `m`: `first` (priority 1, breaker opens on one failure) and `second`.
fn tiers(first: &MockServer, second: &MockServer) -> String {
    format!(
        "{}{}",
        models_channel(
            "first",
            &first.base_url(),
            &["m"],
            "priority = 1\n[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600"
        ),
        models_channel("second", &second.base_url(), &["m"], "priority = 2"),
    )
}

/// A replica: a gateway on the shared Redis under `prefix`, in front of `channels`.
async fn replica(url: &str, prefix: &str, channels: &str) -> Gateway {
    let gw = gateway_full(
        "",
        "",
        &format!("[state]\nurl = \"{url}\"\nprefix = \"{prefix}\"\n\n{channels}"),
    )
    .await;
    wait_connected(&gw, true).await;
    gw
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("test Redis reachable")
}

async fn binding_keys(url: &str, prefix: &str) -> Vec<String> {
    let mut c = redis_conn(url).await;
    c.keys(format!("{prefix}:bind:*")).await.unwrap()
}

#[tokio::test]
async fn bindings_live_in_redis_with_their_ttl_refreshed_on_use() {
    let (a, b) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let prefix = redis_prefix("ttl");
    let gw = replica(
        REDIS_URL,
        &prefix,
        &format!("[affinity]\nttl_seconds = 90\n\n{}", tiers(&a, &b)),
    )
    .await;
    assert_eq!(session_turn(&gw, "s").await.2, "new");
    let keys = binding_keys(REDIS_URL, &prefix).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    // The key is a hash: the session id appears nowhere.
    assert!(!keys[0].contains(":s") || keys[0].len() > prefix.len() + 10);
    let mut c = redis_conn(REDIS_URL).await;
    // The channel, and the credential that served (its provider's prompt cache is per key).
    let bound: String = c.get(&keys[0]).await.unwrap();
    let (channel, credential) = bound.split_once('\u{1f}').expect("channel and credential");
    assert_eq!(channel, "first");
    assert!(credential.starts_with("key-"), "{bound:?}");
    assert!(!bound.contains(UPSTREAM_KEY), "a label, never the key");
    let ttl: i64 = c.pttl(&keys[0]).await.unwrap();
    assert!((88_000..=90_000).contains(&ttl), "{ttl}");
    // Shorten it by hand; a use sets it back to the full TTL.
    let _: () = c.pexpire(&keys[0], 5_000).await.unwrap();
    assert_eq!(session_turn(&gw, "s").await.2, "kept");
    let ttl: i64 = c.pttl(&keys[0]).await.unwrap();
    assert!(ttl > 80_000, "{ttl}");
    // Let it run out: Redis drops the key, and the next turn starts a new binding.
    let _: () = c.pexpire(&keys[0], 1).await.unwrap();
    until(
        "Redis to drop the expired binding",
        Duration::from_secs(5),
        async || !c.exists::<_, bool>(&keys[0]).await.unwrap(),
    )
    .await;
    assert_eq!(session_turn(&gw, "s").await.2, "new");
}

#[tokio::test]
async fn two_replicas_share_bindings_and_circuits_and_a_restart_keeps_bindings() {
    let x = mock(text_spec("x")).await;
    let y = mock(text_spec("y")).await;
    let z = mock(text_spec("z")).await;
    // Three equal channels: without the shared binding, B would pick at random.
    let equal: String = [("x", &x), ("y", &y), ("z", &z)]
        .iter()
        .map(|(n, m)| {
            models_channel(
                n,
                &m.base_url(),
                &["m"],
                "[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600",
            )
        })
        .collect();
    let prefix = redis_prefix("replicas");
    let ra = replica(REDIS_URL, &prefix, &equal).await;
    let rb = replica(REDIS_URL, &prefix, &equal).await;
    let (_, bound, aff) = session_turn(&ra, "agent-1").await;
    assert_eq!(aff, "new");
    for _ in 0..6 {
        assert_eq!(
            session_turn(&rb, "agent-1").await,
            (200, bound.clone(), "kept".into())
        );
    }

    // A circuit opened by failures through A is skipped by B without B calling it.
    let mocks = [("x", &x), ("y", &y), ("z", &z)];
    let (_, bad) = mocks.iter().find(|(n, _)| *n == bound).unwrap();
    bad.set_spec(faulty("down", status(500)));
    let (st, ch, _) = session_turn(&ra, "agent-1").await;
    assert_eq!(st, 200);
    assert_ne!(ch, bound);
    let honoured_after = wait_circuit(&rb.url, &bound, "open", Duration::from_secs(1)).await;
    let calls = bad.requests();
    let (st, ch, aff) = session_turn(&rb, "agent-1").await;
    assert_eq!(st, 200);
    assert_ne!(ch, bound);
    assert_eq!(aff, "moved");
    assert_eq!(
        bad.requests(),
        calls,
        "B called a channel whose circuit A opened"
    );
    assert!(
        honoured_after < Duration::from_secs(1),
        "{honoured_after:?}"
    );
    // A replica that starts now (after the message went out) honours the opening too.
    let rc = replica(REDIS_URL, &prefix, &equal).await;
    let health = rc.admin_health().await;
    assert!(
        health
            .iter()
            .any(|r| r["channel"] == *bound && r["circuit"] == "open"),
        "{health:?}"
    );
    drop(rc);

    // Both replicas restart: the binding (now on `ch`) is still there.
    drop(ra);
    drop(rb);
    let ra2 = replica(REDIS_URL, &prefix, &equal).await;
    let rb2 = replica(REDIS_URL, &prefix, &equal).await;
    assert_eq!(
        session_turn(&ra2, "agent-1").await,
        (200, ch.clone(), "kept".into())
    );
    assert_eq!(
        session_turn(&rb2, "agent-1").await,
        (200, ch, "kept".into())
    );
}

impl OwnRedis {
    /// With TLS only (a self-signed certificate made for it), on `port`.
    fn start_tls(port: u16, dir: &std::path::Path) -> OwnRedis {
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl is installed");
        assert!(made.success());
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        OwnRedis { child, port }
    }
}

#[tokio::test]
async fn redis_lost_mid_test_requests_still_succeed_and_sharing_resumes() {
    let port = free_port();
    let own = OwnRedis::start(port);
    own.wait_ready().await;
    let url = own.url();
    let (a, b) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let prefix = redis_prefix("lost");
    let gw = replica(&url, &prefix, &tiers(&a, &b)).await;
    let other = replica(&url, &prefix, &tiers(&a, &b)).await;
    assert_eq!(session_turn(&gw, "before").await.2, "new");
    assert_eq!(binding_keys(&url, &prefix).await.len(), 1);

    drop(own);
    // Every request still succeeds, on local state, and the loss is reported.
    for i in 0..5 {
        let (st, _, _) = session_turn(&gw, &format!("during-{i}")).await;
        assert_eq!(st, 200);
    }
    wait_connected(&gw, false).await;
    let v = get_json(&format!("{}/readyz", gw.url), None).await;
    assert_eq!(v["status"], "ready", "{v}");
    assert_eq!(v["state"]["kind"], "redis");
    let health = get_json(&format!("{}/admin/health", gw.url), Some(ADMIN)).await;
    assert_eq!(health["state"]["connected"], false);
    // A binding made meanwhile holds on this replica.
    assert_eq!(session_turn(&gw, "during-0").await.2, "kept");

    // Redis back (empty, on the same port): the replica uses it again.
    let again = OwnRedis::start(port);
    again.wait_ready().await;
    wait_connected(&gw, true).await;
    assert_eq!(session_turn(&gw, "after").await.2, "new");
    assert_eq!(binding_keys(&url, &prefix).await.len(), 1);
    // Changes flow between replicas again: a circuit opened through one reaches the other.
    wait_connected(&other, true).await;
    a.set_spec(faulty("down", status(500)));
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    wait_circuit(&other.url, "first", "open", Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_credential_cooled_through_one_replica_is_skipped_by_the_other() {
    let limited = mock(faulty(
        "limited",
        switchyard::provider::mock::Fault {
            status: Some(429),
            retry_after_seconds: Some(600),
            ..Default::default()
        },
    ))
    .await;
    let spare = mock(text_spec("spare")).await;
    let chans = format!(
        "[[channels]]\nname = \"keyed\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         credentials = [{{ key = \"{UPSTREAM_KEY}\", label = \"k1\" }}]\nmodels = [\"m\"]\npriority = 1\n\n{}",
        limited.base_url(),
        models_channel("spare", &spare.base_url(), &["m"], "priority = 2"),
    );
    let prefix = redis_prefix("cred");
    let ra = replica(REDIS_URL, &prefix, &chans).await;
    let rb = replica(REDIS_URL, &prefix, &chans).await;
    // Through A: the key answers 429 for 10 minutes; A cools it and publishes that.
    let resp = ra.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "spare");
    assert_eq!(limited.requests(), 1);
    until(
        "B to see the key cool",
        Duration::from_secs(1),
        async || {
            let health = rb.admin_health().await;
            let cooling = health.iter().any(|r| {
                r["channel"] == "keyed"
                    && r["credentials"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c["label"] == "k1"
                                && c["cooling_seconds_left"]
                                    .as_f64()
                                    .is_some_and(|s| s > 500.0)
                        })
                    })
            });
            if cooling {
                Ok(())
            } else {
                Err(serde_json::Value::from(health))
            }
        },
    )
    .await;
    // Through B: the cooled key is not tried at all; the spare is B's only call.
    let resp = rb.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "spare");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(limited.requests(), 1, "B called a key A had cooled");
}

#[tokio::test]
async fn a_keys_rpm_is_counted_across_replicas() {
    let keyed = mock(text_spec("keyed")).await;
    let spare = mock(text_spec("spare")).await;
    let chans = format!(
        "[[channels]]\nname = \"keyed\"\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         credentials = [{{ key = \"{UPSTREAM_KEY}\", label = \"k1\", rpm = 2 }}]\nmodels = [\"m\"]\npriority = 1\n\n{}",
        keyed.base_url(),
        models_channel("spare", &spare.base_url(), &["m"], "priority = 2"),
    );
    let prefix = redis_prefix("rpm");
    let ra = replica(REDIS_URL, &prefix, &chans).await;
    let rb = replica(REDIS_URL, &prefix, &chans).await;
    // Two requests a minute for the key, in all: one through each replica...
    for gw in [&ra, &rb] {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(header(&resp, "x-switchyard-channel"), "keyed");
    }
    // ...and the third, through A (whose own bucket still holds a token), goes elsewhere.
    let resp = ra.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "spare");
    let _ = resp.bytes().await;
    let rows = ra.admin_requests().await;
    assert_eq!(
        reasons(&rows[0]["attempts"]),
        ["no_credential_headroom", "ok"],
        "{}",
        rows[0]
    );
    assert_eq!(keyed.requests(), 2);
}

#[tokio::test]
async fn replicas_share_state_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let tls = OwnRedis::start_tls(free_port(), dir.path());
    tls.wait_ready().await;
    // A self-signed test certificate: verification off (`#insecure`); the link is TLS still.
    let url = format!("rediss://127.0.0.1:{}/#insecure", tls.port);
    let (a, b) = (mock(text_spec("a")).await, mock(text_spec("b")).await);
    let channels = tiers(&a, &b);
    let prefix = redis_prefix("tls");
    let one = replica(&url, &prefix, &channels).await;
    let two = replica(&url, &prefix, &channels).await;
    let (_, ch, aff) = session_turn(&one, "over-tls").await;
    assert_eq!(aff, "new");
    // The other replica finds the binding the first one made, through the TLS link.
    assert_eq!(
        session_turn(&two, "over-tls").await,
        (200, ch, "kept".into())
    );
    // A plain-text client is refused by the TLS-only server: the state really went over TLS.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{}", tls.port)).unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(2),
        plain.get_multiplexed_async_connection(),
    )
    .await;
    assert!(!matches!(refused, Ok(Ok(_))), "a plain connection worked");
}
