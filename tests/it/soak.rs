//! The soak: two replicas (`switchyard serve` processes) sharing a Redis of the test's own and a
//! PostgreSQL store, a round-robin client over all four client protocols (streams and not,
//! sessions on a third), and a primary upstream that faults 20 % of its answers in mixed ways:
//! before the commit point (500, 429 with Retry-After, reset, hang) and after it (a stream cut
//! mid-way, a stall past the idle timeout after the first token, a 200 whose body or event is
//! not JSON), besides slow first tokens that still arrive in time. Meanwhile one replica is
//! killed with SIGKILL and restarted, Redis is restarted and the config reloaded twice.
//! Counted: client failures outside the killed replica's in-flight requests and the streams a
//! post-commit fault struck (0); of those streams, any that ends cleanly or without its
//! protocol's error frame, or whose log row does not say `stream_*` (0); slow first tokens
//! failed over (0); bindings made before the kill and not honoured after it (0); acknowledged
//! requests without exactly one log row and its ledger rows (0: the killed replica's queued rows
//! come back from its journal); and the surviving replica's memory growth.
//! CI sends 5,000 requests; `scripts/soak.sh` 100,000.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard::provider::mock::{Fault, MockServer, MockSpec};

use crate::support::*;

const PRIMARY: &str = "alpha beta gamma delta";
const BACKUP: &str = "one two three four";

/// 20 % of the primary's answers faulted, seeded, and 2.5 % slow to their first token. Each
/// fault strikes before the commit point (a failover hides it) unless it is one of the three
/// that a stream meets after its first token.
fn faulty_script(n: usize) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(22);
    (0..n)
        .map(|_| match rng.u16(0..400) {
            // 500: 7.5 %.
            0..30 => status(500),
            // 429 with Retry-After: 0.25 % (each one keeps the primary aside for a second, and
            // so from a second's requests: more would leave few to meet the other faults).
            30 => Fault {
                status: Some(429),
                retry_after_seconds: Some(1),
                ..Fault::default()
            },
            // A reset before any byte: 2.5 %.
            31..41 => Fault {
                cut_after: Some(0),
                ..Fault::default()
            },
            // A hang past the first-token timeout: 2.5 %.
            41..51 => Fault {
                hang: true,
                ..Fault::default()
            },
            // After commit when streamed: cut after two content chunks, 2.5 %; silent after
            // one, past the idle timeout, 2.5 %; one chunk then an event that is not JSON (a
            // whole body that is not JSON when not streamed), 2.5 %.
            51..61 => Fault {
                cut_after: Some(2),
                ..Fault::default()
            },
            61..71 => Fault {
                stall_after: Some(1),
                ..Fault::default()
            },
            71..81 => Fault {
                malformed: true,
                ..Fault::default()
            },
            // Slow, but well inside the 1 s first-token timeout (a busy machine adds delays of
            // its own): 2.5 %, never failed over.
            81..91 => Fault {
                slow_first_token_ms: Some(150),
                ..Fault::default()
            },
            _ => Fault {
                ok: true,
                ..Fault::default()
            },
        })
        .collect()
}

/// What one of the primary's answers was to the request that met it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Met {
    Fine,
    Slow,
    BeforeCommit,
    AfterCommit,
}

fn met(f: &Fault, streamed: bool) -> Met {
    let mid_stream = f.cut_after.is_some_and(|k| k > 0) || f.stall_after.is_some() || f.malformed;
    if f.ok {
        Met::Fine
    } else if f.slow_first_token_ms.is_some() {
        Met::Slow
    } else if mid_stream && streamed {
        Met::AfterCommit
    } else {
        Met::BeforeCommit
    }
}

/// What each request met at the primary, by request: the primary's calls carry the request's
/// number in its question, and each call's place in the script is the fault it met.
fn met_by_request(primary: &MockServer, script: &[Fault]) -> HashMap<usize, Vec<Met>> {
    let mut by: HashMap<usize, Vec<Met>> = HashMap::new();
    for r in primary.received() {
        let text = r.body.to_string();
        let Some(i) = text
            .split("question ")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|d| d.parse::<usize>().ok())
        else {
            continue;
        };
        let f = &script[r.call as usize];
        by.entry(i).or_default().push(met(f, streamed(i)));
    }
    by
}

fn config(dir: &std::path::Path, pg: &str, redis: &str, primary: &str, backup: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\
         stream_idle_timeout_ms = 1000\n\n\
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
            "priority = 1\nfirst_token_timeout_ms = 1000\ntimeout_ms = 2000\n\
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
    // Each protocol's question carries `i`: the primary's record says what request met which
    // of its faults.
    let q = format!("question {i}");
    let msgs = json!([{"role": "user", "content": q}]);
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
                .json(&json!({"contents": [{"role": "user", "parts": [{"text": q}]}]}))
        }
        _ => http
            .post(format!("{base}/v1/responses"))
            .json(&json!({"model": "m", "stream": stream, "input": q, "store": false})),
    };
    let rb = rb.bearer_auth(KEY).header("x-goog-api-key", KEY);
    if i.is_multiple_of(3) {
        rb.header("x-session-id", format!("soak-session-{}", i % 60))
    } else {
        rb
    }
}

/// How a streamed answer ended: as its protocol ends a complete one, and with its protocol's
/// error frame (a post-commit fault must give the second and never the first).
fn stream_end(i: usize, body: &str) -> (bool, bool) {
    let (done, error) = match i % 4 {
        0 => ("data: [DONE]", "data: {\"error\":{"),
        1 => ("event: message_stop", "event: error"),
        2 => ("\"finishReason\"", "data: {\"error\":{"),
        _ => ("event: response.completed", "event: response.failed"),
    };
    (body.contains(done), body.contains(error))
}

/// What one request came to.
struct Outcome {
    i: usize,
    replica: usize,
    status: Option<u16>,
    /// Ended as a complete answer ends (not streamed: read whole), with no error frame, from
    /// one upstream.
    clean: bool,
    /// Streamed, and ended with its protocol's error frame and no clean end.
    broke_right: bool,
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
                        let (done, error) = stream_end(i, &body);
                        let clean = (!streamed(i) || (done && !error)) && one_upstream;
                        Outcome {
                            i,
                            replica,
                            status: Some(status),
                            clean,
                            broke_right: streamed(i) && error && !done,
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
                        broke_right: false,
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

    let script = faulty_script(2 * n);
    let met = met_by_request(&primary, &script);
    let v = judge(&outcomes, &lost_on_kill, &met);
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
    let rows = logged_rows(&pg.url, &v.acknowledged).await;
    // (request, replica, protocol, streamed) of each acknowledged request without its row.
    let missing: Vec<(usize, usize, usize, bool)> = v
        .acknowledged
        .iter()
        .filter(|o| !rows.outcomes.contains_key(o.request_id.as_str()))
        .map(|o| (o.i, o.replica, o.i % 4, streamed(o.i)))
        .collect();
    if !missing.is_empty() {
        for r in ["a", "b"] {
            let log = std::fs::read_to_string(dir.path().join(r).join("stderr.log"));
            eprintln!("replica {r} said:\n{}", log.unwrap_or_default());
        }
    }
    // The log row says which: `stream_*` for a stream a fault struck after commit, and only
    // for those.
    let misread: Vec<(usize, String)> = v
        .acknowledged
        .iter()
        .filter_map(|o| {
            let outcome = rows.outcomes.get(o.request_id.as_str())?;
            let struck = v.struck.contains(&o.i);
            (outcome.starts_with("stream_") != struck).then(|| (o.i, outcome.clone()))
        })
        .collect();

    let growth = end_rss as f64 / warm_rss.max(1) as f64;
    // The faults the primary's answers carried (its script, in the order it was called).
    let injected = script
        .iter()
        .take(primary.requests() as usize)
        .filter(|f| !f.ok && f.slow_first_token_ms.is_none())
        .count();
    eprintln!(
        "soak: {n} requests in {:.1} s | primary {} calls ({injected} faulted), backup {} | \
         requests meeting a fault {} ({:.1} %): after commit {}, slow first token {} | \
         lost on the killed replica {} | failures {} | struck streams ended wrong {} | \
         slow failed over {} | bindings broken {} | acknowledged without a log row {} | \
         log row misread {} | without ledger rows {} | replica A RSS {} -> {} KiB ({:.2}x)",
        started.elapsed().as_secs_f64(),
        primary.requests(),
        backup.requests(),
        v.faulted,
        100.0 * v.faulted as f64 / n as f64,
        v.struck.len(),
        v.slow,
        lost_on_kill.len(),
        v.failed.len(),
        v.ended_wrong.len(),
        v.slow_failed_over.len(),
        broken.len(),
        missing.len(),
        misread.len(),
        rows.unledgered,
        warm_rss,
        end_rss,
        growth
    );
    assert!(
        v.failed.is_empty(),
        "client-visible failures: {:?}",
        v.failed
    );
    assert!(
        v.ended_wrong.is_empty(),
        "streams struck after commit that ended cleanly or without the error frame: {:?}",
        v.ended_wrong
    );
    assert!(
        v.slow_failed_over.is_empty(),
        "slow first tokens failed over: {:?}",
        v.slow_failed_over
    );
    assert!(
        broken.is_empty(),
        "bindings not honoured after the kill: {broken:?}"
    );
    assert!(
        missing.is_empty(),
        "acknowledged without a log row: {missing:?}"
    );
    assert!(misread.is_empty(), "log rows misread: {misread:?}");
    assert_eq!(rows.unledgered, 0, "answered requests without ledger rows");
    // The faults were met, at 5 % of requests or more, some of them after commit.
    assert!(
        v.faulted * 20 >= n,
        "only {} of {n} requests met a fault",
        v.faulted
    );
    assert!(
        v.struck.len() * 200 >= n,
        "only {} streams struck after commit",
        v.struck.len()
    );
    assert!(v.slow * 400 >= n, "only {} slow first tokens", v.slow);
    assert!(
        growth <= 1.10,
        "replica A grew {growth:.2}x from warm-up to the end"
    );
}

/// The requests judged against what each met at the primary.
struct Verdict<'a> {
    /// Anything but a clean 200, outside what was in flight on the killed replica and the
    /// streams a fault struck after commit: (request, status).
    failed: Vec<(usize, Option<u16>)>,
    /// Streams a fault struck after commit (outside the killed replica's).
    struck: HashSet<usize>,
    /// Of those, any that ended cleanly or without its protocol's error frame.
    ended_wrong: Vec<usize>,
    /// Requests whose primary answer was slow, and of them, any not answered by it.
    slow: usize,
    slow_failed_over: Vec<usize>,
    /// Requests that met a fault at the primary.
    faulted: usize,
    /// What the client was answered, whole or ended by a fault after commit: each must have
    /// its log row.
    acknowledged: Vec<&'a Outcome>,
}

fn judge<'a>(
    outcomes: &'a [Outcome],
    lost: &HashSet<usize>,
    met: &HashMap<usize, Vec<Met>>,
) -> Verdict<'a> {
    let met_any = |i: usize, m: Met| met.get(&i).is_some_and(|all| all.contains(&m));
    let kept: Vec<&Outcome> = outcomes.iter().filter(|o| !lost.contains(&o.i)).collect();
    let struck: HashSet<usize> = kept
        .iter()
        .filter(|o| met_any(o.i, Met::AfterCommit))
        .map(|o| o.i)
        .collect();
    let failed = kept
        .iter()
        .filter(|o| !struck.contains(&o.i))
        .filter(|o| o.status != Some(200) || !o.clean)
        .map(|o| (o.i, o.status))
        .collect();
    let ended_wrong = kept
        .iter()
        .filter(|o| struck.contains(&o.i))
        .filter(|o| o.status != Some(200) || !o.broke_right)
        .map(|o| o.i)
        .collect();
    let slow: Vec<&&Outcome> = kept.iter().filter(|o| met_any(o.i, Met::Slow)).collect();
    let slow_failed_over = slow
        .iter()
        .filter(|o| o.channel != "primary")
        .map(|o| o.i)
        .collect();
    let faulted = met
        .values()
        .filter(|m| {
            m.iter()
                .any(|x| matches!(x, Met::BeforeCommit | Met::AfterCommit))
        })
        .count();
    let acknowledged = kept
        .iter()
        .filter(|o| o.status == Some(200) && !o.request_id.is_empty())
        .filter(|o| o.clean || (struck.contains(&o.i) && o.broke_right))
        .copied()
        .collect();
    Verdict {
        failed,
        struck,
        ended_wrong,
        slow: slow.len(),
        slow_failed_over,
        faulted,
        acknowledged,
    }
}

/// The log rows of `acknowledged` in PostgreSQL (request id to outcome), waited for, and how
/// many of them have no ledger row.
struct Rows {
    outcomes: HashMap<String, String>,
    unledgered: i64,
}

async fn logged_rows(pg: &str, acknowledged: &[&Outcome]) -> Rows {
    let ids: Vec<String> = acknowledged.iter().map(|o| o.request_id.clone()).collect();
    // One row per request: no two requests, on either replica, share an id.
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "request ids given twice");
    let pool = sqlx::postgres::PgPool::connect(pg).await.expect("pg");
    // Rows are written in batches every 50 ms; those the killed replica had queued come back
    // from its journal (written by the other replica, or by itself once restarted).
    let deadline = Instant::now() + Duration::from_secs(30);
    let found: Vec<(String, String)> = loop {
        let found: Vec<(String, String)> =
            sqlx::query_as("SELECT id, outcome FROM requests WHERE id = ANY($1)")
                .bind(&ids)
                .fetch_all(&pool)
                .await
                .expect("log query");
        if found.len() == ids.len() || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let logged: Vec<String> = found.iter().map(|(id, _)| id.clone()).collect();
    let unledgered: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM unnest($1::text[]) AS r(id) \
         WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.request_id = r.id)",
    )
    .bind(&logged)
    .fetch_one(&pool)
    .await
    .expect("ledger query");
    pool.close().await;
    Rows {
        outcomes: found.into_iter().collect(),
        unledgered,
    }
}
