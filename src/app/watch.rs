//! Every replica follows the store: on PostgreSQL a `LISTEN` on the channel every write
//! notifies wakes it at once, and on both backends the config version is read every
//! `[store] poll_interval_ms` (500 ms) as well, the fallback when a notification is lost or the
//! listening connection is down. When the version has moved, the store's entries are read and
//! compiled with the file, as an admin write's own replica does at once. A version that failed
//! to compile is not tried again until the store moves on.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::server::AppState;
use crate::store::{Db, Store};

pub async fn follow(state: AppState, store: Arc<Store>, every: Duration) {
    let woken = Arc::new(Notify::new());
    let listener = match &store.db {
        Db::Postgres(pool) => Some(tokio::spawn(listen(pool.clone(), woken.clone()))),
        Db::Sqlite(_) => None,
    };
    let _stop = AbortOnDrop(listener);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let mut pruned: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = woken.notified() => {}
        }
        if pruned.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
            pruned = Some(std::time::Instant::now());
            prune_answers(&store).await;
        }
        match store.db.version().await {
            Ok(v) => {
                if failing {
                    tracing::info!("the store answers again");
                    failing = false;
                }
                // A version this replica could not load is not tried again until the store moves.
                if v != state.live.store_version() && store.behind() != Some(v) {
                    crate::admin::refresh(&state, &store).await;
                }
            }
            Err(e) if !failing => {
                // Once per outage: the gateway keeps serving its snapshot meanwhile.
                tracing::warn!(error = %e, "the store does not answer; serving the config held");
                failing = true;
            }
            Err(_) => {}
        }
    }
}

/// How long an Idempotency-Key's answer is kept, and how often old ones are swept.
const KEEP_ANSWERS: Duration = Duration::from_secs(24 * 3600);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

async fn prune_answers(store: &Store) {
    let keep = i64::try_from(KEEP_ANSWERS.as_millis()).unwrap_or(i64::MAX);
    let cutoff = crate::clock::unix_ms().saturating_sub(keep);
    if let Err(e) = store.db.prune_answers(cutoff).await {
        tracing::warn!(error = %e, "forgetting old Idempotency-Key answers failed");
    }
}

/// Wakes the follower on every `switchyard_config` notification; reconnects when the
/// connection drops (the poll covers the gap).
async fn listen(pool: sqlx::PgPool, woken: Arc<Notify>) {
    loop {
        let listening = async {
            let mut l = sqlx::postgres::PgListener::connect_with(&pool).await?;
            l.listen("switchyard_config").await?;
            // A change made before this connection listened is read now, not at the next poll.
            woken.notify_one();
            loop {
                l.recv().await?;
                woken.notify_one();
            }
        };
        let err: Result<(), sqlx::Error> = listening.await;
        if let Err(e) = err {
            tracing::debug!(error = %e, "the store's notifications stopped; listening again");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}
