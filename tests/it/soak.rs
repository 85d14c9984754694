//! The soak: two replicas (`switchyard serve` processes) sharing a Redis of the test's own and a
//! PostgreSQL store, a round-robin client over all four client protocols (streams and not,
//! sessions on a third), and a primary upstream that faults 20 % of its answers in mixed ways
//! (500, 429 with Retry-After, reset, hang) before commit. Meanwhile one replica is killed
//! with SIGKILL and restarted, Redis is restarted and the config reloaded twice. Counted: client
//! failures outside the killed replica's in-flight requests (0), streams that do not end
//! cleanly (0), bindings made before the kill and not honoured after it (0), answered requests
//! without exactly one log row and its ledger rows (0: the killed replica's queued rows come
//! back from its journal), and the surviving replica's memory growth.
//! CI sends 5,000 requests; `scripts/soak.sh` 100,000.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

const PRIMARY: &str = "alpha beta gamma delta";
const BACKUP: &str = "one two three four";

/// 20 % of the primary's answers faulted, seeded: all before commit, so each one a failover
/// could hide.
fn faulty_script(n: usize) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(22);
    (0..n)
        .map(|_| match rng.u8(0..40) {
            // 500: 7.5 %.
            0..=2 => status(500),
            // 429 with Retry-After: 2.5 % (each one cools the channel for a second).
            3 => Fault {
                status: Some(429),
                retry_after_seconds: Some(1),
                ..Fault::default()
            },
            // A reset before any byte: 5 %.
            4 | 5 => Fault {
                cut_after: Some(0),
                ..Fault::default()
            },
            // A hang past the first-token timeout: 5 %.
            6 | 7 => Fault {
                hang: true,
                ..Fault::default()
            },
            _ => Fault {
                ok: true,
                ..Fault::default()
            },
        })
        .collect()
}

fn config(dir: &std::path::Path, pg: &str, redis: &str, primary: &str, backup: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\
         stream_idle_timeout_ms = 5000\n\n\
         [log]\nsqlite_path = \"{}\"\n\n\
         [store]\nurl = \"{pg}\"\nmaster_key = \"{}\"\n\n\
         [state]\nurl = \"{redis}\"\nprefix = \"soak\"\n\n\
         [[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n\n{}{}",
        dir.join("log.db").display(),
        master_key(9),
        models_channel(
            "primary",
            primary,
            &["m"],
            // The breaker off: every request meets the primary's faults, none is spared by
            // an open circuit.
            "priority = 1\nfirst_token_timeout_ms = 300\ntimeout_ms = 2000\n\
             circuit_breaker = { enabled = false }"
        ),
        models_channel("backup", backup, &["m"], "priority = 2"),
    )
}

/// Whether request `i` is streamed: every protocol both ways (the protocol is `i % 4`).
fn streamed(i: usize) -> bool {
    (i / 4) % 2 == 1
}

/// One client request: its protocol by `i % 4`, streamed or not, in a session on every third.
fn request(http: &reqwest::Client, base: &str, i: usize) -> reqwest::RequestBuilder {
    let stream = streamed(i);
    let msgs = json!([{"role": "user", "content": format!("question {i}")}]);
    let rb = match i % 4 {
        0 => http
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"model": "m", "stream": stream, "messages": msgs})),
        1 => http
            .post(format!("{base}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "m", "max_tokens": 64, "stream": stream, "messages": msgs})),
        2 => {
            let action = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            http.post(format!("{base}/v1beta/models/m:{action}"))
                .json(&json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}))
        }
        _ => http
            .post(format!("{base}/v1/responses"))
            .json(&json!({"model": "m", "stream": stream, "input": "hi", "store": false})),
    };
    let rb = rb.bearer_auth(KEY).header("x-goog-api-key", KEY);
    if i.is_multiple_of(3) {
        rb.header("x-session-id", format!("soak-session-{}", i % 60))
    } else {
        rb
    }
}

/// A streamed answer ended as its protocol ends a complete one, with no error event.
fn ended_cleanly(i: usize, body: &str) -> bool {
    let done = match i % 4 {
        0 => body.contains("data: [DONE]"),
        1 => body.contains("event: message_stop"),
        2 => body.contains("\"finishReason\""),
        _ => body.contains("event: response.completed"),
    };
    let failed = body.contains("\"error\":{")
        || body.contains("event: error")
        || body.contains("response.failed");
    done && !failed
}

/// What one request came to.
struct Outcome {
    i: usize,
    replica: usize,
    status: Option<u16>,
    clean: bool,
    request_id: String,
    channel: String,
    affinity: String,
}

#[derive(Default)]
struct Replicas {
    urls: Vec<Option<String>>,
    next: usize,
    /// Requests in flight on each replica.
    in_flight: Vec<HashSet<usize>>,
}

impl Replicas {
    fn pick(&mut self, i: usize) -> (usize, String) {
        loop {
            self.next = (self.next + 1) % self.urls.len();
            if let Some(u) = &self.urls[self.next] {
                self.in_flight[self.next].insert(i);
                return (self.next, u.clone());
            }
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_under_faults_kills_and_restarts_lose_nothing() {
    let n: usize = std::env::var("SWITCHYARD_SOAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let started = Instant::now();
    let redis_port = free_port();
    let mut redis = Some(OwnRedis::start(redis_port));
    redis.as_ref().expect("redis").wait_ready().await;
    let redis_url = format!("redis://127.0.0.1:{redis_port}");
    let pg = Postgres::fresh("soak").await;
    let primary = mock(MockSpec {
        text: PRIMARY.into(),
        script: faulty_script(2 * n),
        ..MockSpec::default()
    })
    .await;
    let backup = mock(text_spec(BACKUP)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("switchyard.toml");
    let text = config(
        dir.path(),
        &pg.url,
        &redis_url,
        &primary.base_url(),
        &backup.base_url(),
    );
    std::fs::write(&path, text).expect("config");
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).expect("dir");
    std::fs::create_dir_all(&dir_b).expect("dir");
    let (proc_a, url_a) = spawn_serve(&path, &dir_a).await;
    let (proc_b, url_b) = spawn_serve(&path, &dir_b).await;
    let mut procs = [Some(proc_a), Some(proc_b)];
    let pid_a = procs[0].as_ref().map(|p| p.0.id()).unwrap_or(0);
    let replicas = Arc::new(Mutex::new(Replicas {
        urls: vec![Some(url_a.clone()), Some(url_b)],
        in_flight: vec![HashSet::new(), HashSet::new()],
        next: 0,
    }));
    switchyard::provider::install_crypto_provider();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");

    let mut outcomes: Vec<Outcome> = Vec::with_capacity(n);
    let mut lost_on_kill: HashSet<usize> = HashSet::new();
    let (mut warm_rss, mut killed_at) = (0u64, None);
    let mut set = tokio::task::JoinSet::new();
    let mut i = 0;
    while i < n || !set.is_empty() {
        // 16 requests in flight; the faults and restarts happen at fixed points of the run.
        while i < n && set.len() < 16 {
            if i == n / 5 {
                // SIGKILL replica B: what it had in flight is lost to its clients.
                let mut r = replicas.lock().expect("lock");
                r.urls[1] = None;
                lost_on_kill = r.in_flight[1].clone();
                drop(r);
                procs[1] = None;
                killed_at = Some(outcomes.len());
            }
            if i == 3 * n / 10 {
                let (p, u) = spawn_serve(&path, &dir_b).await;
                procs[1] = Some(p);
                replicas.lock().expect("lock").urls[1] = Some(u);
            }
            if i == n / 2 {
                drop(redis.take());
                let again = OwnRedis::start(redis_port);
                again.wait_ready().await;
                redis = Some(again);
            }
            if i == 6 * n / 10 || i == 7 * n / 10 {
                let urls = replicas.lock().expect("lock").urls.clone();
                for u in urls.into_iter().flatten() {
                    let r = client()
                        .post(format!("{u}/admin/reload"))
                        .bearer_auth(ADMIN)
                        .send()
                        .await
                        .expect("reload");
                    assert_eq!(r.status(), 200, "reload at request {i}");
                }
            }
            // After warm-up: the highest RSS read through the second quarter. One reading
            // swung 57-73 MiB between runs (threads, the allocator's pages); a leak still
            // shows, as the end above the highest of them.
            if (n / 4..n / 2).contains(&i) && i.is_multiple_of(50) {
                warm_rss = warm_rss.max(rss_kib(pid_a));
            }
            let (replica, base) = replicas.lock().expect("lock").pick(i);
            let rb = request(&http, &base, i);
            let reps = replicas.clone();
            set.spawn(async move {
                let got = rb.send().await;
                let out = match got {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let h = |name: &str| header(&resp, name).to_string();
                        let (request_id, channel, affinity) = (
                            h("x-request-id"),
                            h("x-switchyard-channel"),
                            h("x-switchyard-affinity"),
                        );
                        let body = resp.text().await.unwrap_or_default();
                        let one_upstream = !(streamed(i) && i % 4 == 0)
                            || [PRIMARY, BACKUP].contains(&sse_text(&body).as_str());
                        let clean = (!streamed(i) || ended_cleanly(i, &body)) && one_upstream;
                        Outcome {
                            i,
                            replica,
                            status: Some(status),
                            clean,
                            request_id,
                            channel,
                            affinity,
                        }
                    }
                    Err(_) => Outcome {
                        i,
                        replica,
                        status: None,
                        clean: false,
                        request_id: String::new(),
                        channel: String::new(),
                        affinity: String::new(),
                    },
                };
                reps.lock().expect("lock").in_flight[replica].remove(&i);
                out
            });
            i += 1;
        }
        if let Some(done) = set.join_next().await {
            outcomes.push(done.expect("request task"));
        }
    }
    let end_rss = rss_kib(pid_a);
    drop(redis);

    // Failures: anything but a clean 200, outside what was in flight on the killed replica.
    let failed: Vec<(usize, Option<u16>)> = outcomes
        .iter()
        .filter(|o| o.status != Some(200) || !o.clean)
        .filter(|o| !lost_on_kill.contains(&o.i))
        .map(|o| (o.i, o.status))
        .collect();
    // Bindings: a session's channel before the kill is the one that serves it after the
    // restart, until Redis is restarted (which forgets them: it keeps nothing on disk).
    let kill = killed_at.unwrap_or(0);
    let mut bound: HashMap<usize, String> = HashMap::new();
    for o in outcomes[..kill]
        .iter()
        .filter(|o| o.i.is_multiple_of(3) && o.status == Some(200))
    {
        bound.insert(o.i % 60, o.channel.clone());
    }
    let broken: Vec<usize> = outcomes
        .iter()
        .filter(|o| o.i.is_multiple_of(3) && o.i >= 3 * n / 10 + 50 && o.i < n / 2 - 50)
        .filter(|o| o.status == Some(200) && o.affinity == "new")
        .filter(|o| bound.contains_key(&(o.i % 60)))
        .map(|o| o.i)
        .collect();
    // Every answered request has its log row and at least one ledger row, in PostgreSQL.
    // Answered: in full. A stream in flight on the killed replica had its 200 and then lost
    // its end with the process, and its row, which is made as the stream ends.
    let answered = |o: &&Outcome| o.status == Some(200) && o.clean;
    let ids: Vec<String> = outcomes
        .iter()
        .filter(answered)
        .filter(|o| !o.request_id.is_empty())
        .map(|o| o.request_id.clone())
        .collect();
    // One row per request: no two requests, on either replica, share an id.
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "request ids given twice");
    let pool = sqlx::postgres::PgPool::connect(&pg.url).await.expect("pg");
    // Rows are written in batches every 50 ms; those the killed replica had queued come back
    // from its journal (written by the other replica, or by itself once restarted).
    let deadline = Instant::now() + Duration::from_secs(30);
    let found: Vec<String> = loop {
        let found: Vec<String> = sqlx::query_scalar("SELECT id FROM requests WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&pool)
            .await
            .expect("log query");
        if found.len() == ids.len() || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let found: HashSet<&str> = found.iter().map(String::as_str).collect();
    // (request, replica, protocol, streamed) of each answered request without its row.
    let missing: Vec<(usize, usize, usize, bool)> = outcomes
        .iter()
        .filter(answered)
        .filter(|o| !found.contains(o.request_id.as_str()))
        .map(|o| (o.i, o.replica, o.i % 4, streamed(o.i)))
        .collect();
    if !missing.is_empty() {
        for r in ["a", "b"] {
            let log = std::fs::read_to_string(dir.path().join(r).join("stderr.log"));
            eprintln!("replica {r} said:\n{}", log.unwrap_or_default());
        }
    }
    let logged: Vec<String> = found.iter().map(|s| s.to_string()).collect();
    let unledgered: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM unnest($1::text[]) AS r(id) \
         WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.request_id = r.id)",
    )
    .bind(&logged)
    .fetch_one(&pool)
    .await
    .expect("ledger query");
    pool.close().await;

    let growth = end_rss as f64 / warm_rss.max(1) as f64;
    // The faults the primary's answers carried (its script, in the order it was called).
    let injected = faulty_script(2 * n)
        .iter()
        .take(primary.requests() as usize)
        .filter(|f| !f.ok)
        .count();
    eprintln!(
        "soak: {n} requests in {:.1} s | primary {} calls ({injected} faulted), backup {} | lost on the killed replica {} | \
         failures {} | unclean streams counted in failures | bindings broken {} | answered without a log row {} | \
         without ledger rows {} | replica A RSS {} -> {} KiB ({:.2}x)",
        started.elapsed().as_secs_f64(),
        primary.requests(),
        backup.requests(),
        lost_on_kill.len(),
        failed.len(),
        broken.len(),
        missing.len(),
        unledgered,
        warm_rss,
        end_rss,
        growth
    );
    assert!(failed.is_empty(), "client-visible failures: {failed:?}");
    assert!(
        broken.is_empty(),
        "bindings not honoured after the kill: {broken:?}"
    );
    assert!(
        missing.is_empty(),
        "answered without a log row: {missing:?}"
    );
    assert_eq!(unledgered, 0, "answered requests without ledger rows");
    // The faults were met: a 429's cooldown keeps the primary aside for a second each time.
    assert!(injected >= 20, "only {injected} faults injected");
    assert!(
        growth <= 1.10,
        "replica A grew {growth:.2}x from warm-up to the end"
    );
}
