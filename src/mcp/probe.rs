//! The pings that test a server replica whose circuit is open (or which scores low): health
//! says when one is due, as it does for channels; a probe opens a session, pings, and closes it.
//! Healthy replicas are never probed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::Mcp;
use super::upstream::Target;
use crate::config::mcp::McpServer;
use crate::health::Key;
use crate::server::AppState;

pub async fn run(app: AppState, mcp: Arc<Mcp>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let snap = app.live.load();
        for server in &snap.mcp.servers {
            for (i, r) in server.replicas.iter().enumerate() {
                let key = Key {
                    channel: r.health.clone(),
                    model: None,
                };
                if app
                    .health
                    .claim_probe(&key, &snap.health, &server.breaker)
                    .is_none()
                {
                    continue;
                }
                let (app, mcp, snap) = (app.clone(), mcp.clone(), snap.clone());
                let name = server.name.clone();
                tokio::spawn(async move {
                    let Some(server) = snap.mcp.server(&name) else {
                        app.health.release_probe(&key);
                        return;
                    };
                    let started = Instant::now();
                    let ok = ping(&mcp, server, i).await;
                    app.health.probe_result(
                        &key,
                        &snap.health,
                        &server.breaker,
                        ok,
                        started.elapsed(),
                    );
                });
            }
        }
    }
}

async fn ping(mcp: &Mcp, server: &McpServer, replica: usize) -> bool {
    let Ok(o) = mcp.client.open(server, replica, &json!({})).await else {
        return false;
    };
    let t = Target {
        server,
        replica,
        session: o.session.as_deref(),
        version: &o.version,
    };
    let ping = json!({"jsonrpc": "2.0", "id": super::relay::fresh_id(), "method": "ping"});
    let ok = mcp
        .client
        .answer(&t, &ping)
        .await
        .is_ok_and(|(v, _)| v.get("result").is_some());
    mcp.client.close(&t).await;
    ok
}
