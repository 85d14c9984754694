//! Every replica follows the store: the config version is read every half second, and when
//! it has moved the store's entries are read and compiled with the file, as an admin write's
//! own replica does at once. A poll is one indexed read, and works the same on SQLite and
//! PostgreSQL (and through any proxy in front of either).

use std::sync::Arc;
use std::time::Duration;

use crate::server::AppState;
use crate::store::Store;

const EVERY: Duration = Duration::from_millis(500);

pub async fn follow(state: AppState, store: Arc<Store>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        match store.db.version().await {
            Ok(v) => {
                if failing {
                    tracing::info!("the store answers again");
                    failing = false;
                }
                if v != state.live.store_version() {
                    crate::server::refresh(&state, &store).await;
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
