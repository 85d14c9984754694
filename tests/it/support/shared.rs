//! Counters that replicas share: in Redis, or in a PostgreSQL store; each test runs once on
//! each.

use super::{Postgres, REDIS_URL, master_key, redis_prefix, store_section};

/// Where the replicas' counters are shared.
pub enum Shared {
    Redis(String),
    Postgres(Postgres),
}

impl Shared {
    pub async fn each(test: &str) -> [Shared; 2] {
        [
            Shared::Redis(redis_prefix(test)),
            Shared::Postgres(Postgres::fresh(test).await),
        ]
    }

    pub fn name(&self) -> &'static str {
        match self {
            Shared::Redis(_) => "redis",
            Shared::Postgres(_) => "postgres",
        }
    }

    /// The config table that shares them (after the keys' tables).
    pub fn section(&self) -> String {
        match self {
            Shared::Redis(prefix) => {
                format!("\n[state]\nurl = \"{REDIS_URL}\"\nprefix = \"{prefix}\"\n")
            }
            Shared::Postgres(pg) => store_section(&pg.url, Some(&master_key(7))),
        }
    }

    /// Whether both replicas write one request log (a PostgreSQL store holds it).
    pub fn one_log(&self) -> bool {
        matches!(self, Shared::Postgres(_))
    }
}

/// One request's fate, as its client saw it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub key: String,
    pub started: std::time::Instant,
    pub ended: std::time::Instant,
    pub status: u16,
    pub code: String,
    pub param: String,
    pub cost: u64,
}

impl Sent {
    /// The answer to a request `key` sent at `started`, read to its end.
    pub async fn of(key: &str, started: std::time::Instant, resp: reqwest::Response) -> Sent {
        let status = resp.status().as_u16();
        let cost = super::header(&resp, "x-switchyard-cost-micros")
            .parse()
            .unwrap_or(0);
        let v: serde_json::Value = resp.json().await.unwrap_or_default();
        let text = |p: &str| {
            v.pointer(p)
                .and_then(|s| s.as_str())
                .unwrap_or("")
                .to_string()
        };
        Sent {
            key: key.to_string(),
            started,
            ended: std::time::Instant::now(),
            status,
            code: text("/error/code"),
            param: text("/error/param"),
            cost,
        }
    }
}

/// Clients racing two replicas: worker `w` sends as `keys[w % keys.len()]` through the
/// replicas in turn, and stops `after` requests past its first refusal, or at `most`.
pub struct Race<'a> {
    pub workers: usize,
    pub keys: &'a [&'static str],
    pub after: usize,
    pub most: usize,
}

impl Race<'_> {
    pub async fn run(&self, gws: &[super::Gateway; 2], body: &serde_json::Value) -> Vec<Sent> {
        let mut tasks = Vec::new();
        for w in 0..self.workers {
            let urls = [gws[0].url.clone(), gws[1].url.clone()];
            let (key, body, after, most) = (
                self.keys[w % self.keys.len()],
                body.clone(),
                self.after,
                self.most,
            );
            tasks.push(tokio::spawn(async move {
                let http = super::client();
                let (mut out, mut refused) = (Vec::new(), 0);
                for i in 0..most {
                    let started = std::time::Instant::now();
                    let resp = http
                        .post(format!("{}/v1/chat/completions", urls[(w + i) % 2]))
                        .bearer_auth(key)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    let sent = Sent::of(key, started, resp).await;
                    refused += usize::from(sent.status != 200);
                    out.push(sent);
                    if refused > after {
                        break;
                    }
                }
                out
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    }
}

/// The ledger's cost of the group `name` by `by` (`key`, `team`...), over both replicas' logs
/// when each keeps one.
pub async fn ledger_cost(gws: &[super::Gateway; 2], one_log: bool, by: &str, name: &str) -> u64 {
    let mut total = 0;
    for gw in gws.iter().take(if one_log { 1 } else { 2 }) {
        gw.flush_log().await;
        let url = format!("{}/admin/usage?group_by={by}", gw.url);
        let v = super::get_json(&url, Some(super::ADMIN)).await;
        let rows = v["rows"].as_array().unwrap();
        let row = rows.iter().find(|r| r[by] == name);
        total += row.map_or(0, |r| r["cost_micros"].as_u64().unwrap());
    }
    total
}
