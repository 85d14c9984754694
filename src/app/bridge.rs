//! The bridge between channel health and the state other replicas share: this replica's
//! circuit openings and cooldowns go out as [`Change`]s; theirs come in and are applied to
//! this replica's health, matched by name against its own config (never created).

use std::sync::Arc;

use crate::config::Live;
use crate::health::{Health, Key, Shared};
use crate::state::{Change, ChangeKind, Redis};

/// Publishes this replica's health changes for as long as health emits them.
pub async fn publish(redis: Arc<Redis>, mut rx: tokio::sync::mpsc::Receiver<Shared>) {
    while let Some(ev) = rx.recv().await {
        redis.share(&outgoing(ev)).await;
    }
}

/// Applies the other replicas' changes to this replica's health, for the life of the gateway.
pub async fn subscribe(redis: Arc<Redis>, health: Arc<Health>, live: Arc<Live>) {
    redis
        .subscribe(move |change| incoming(change, &health, &live))
        .await;
}

/// How often this replica's in-flight counts go out and the others' come in.
const BUSY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Trades requests-in-flight counts with the other replicas while some model routes by a
/// measured strategy, for the life of the gateway. While Redis is down the others' last
/// counts are dropped: the replica balances on its own.
pub async fn exchange_busy(redis: Arc<Redis>, health: Arc<Health>, live: Arc<Live>) {
    let mut tick = tokio::time::interval(BUSY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if !live.load().routing.measured {
            continue;
        }
        let mine = health.signals.local();
        let others = redis.exchange_busy(&mine).await.unwrap_or_default();
        health.signals.set_remote(others);
    }
}

fn outgoing(ev: Shared) -> Change {
    match ev {
        Shared::CircuitOpened { key, cooldown } => Change {
            kind: ChangeKind::CircuitOpened,
            channel: key.channel,
            label: None,
            model: key.model,
            cooldown,
        },
        Shared::ChannelCooled { key, cooldown } => Change {
            kind: ChangeKind::ChannelCooled,
            channel: key.channel,
            label: None,
            model: key.model,
            cooldown,
        },
        Shared::CredentialCooled {
            channel,
            label,
            model,
            cooldown,
        } => Change {
            kind: ChangeKind::CredentialCooled,
            channel,
            label: Some(label),
            model,
            cooldown,
        },
    }
}

/// One change from another replica, applied if this replica's config knows its channel (and,
/// for a credential, its label).
fn incoming(change: Change, health: &Health, live: &Live) {
    let snap = live.load();
    let Some(ch) = snap.channels.iter().find(|c| c.name == change.channel) else {
        return;
    };
    let key = || Key {
        channel: ch.name.clone(),
        model: change.model.clone(),
    };
    let ev = match change.kind {
        ChangeKind::CircuitOpened => Shared::CircuitOpened {
            key: key(),
            cooldown: change.cooldown,
        },
        ChangeKind::ChannelCooled => Shared::ChannelCooled {
            key: key(),
            cooldown: change.cooldown,
        },
        ChangeKind::CredentialCooled => {
            let Some((label, _)) = change
                .label
                .as_deref()
                .and_then(|l| ch.credentials.iter().find(|(x, _)| &**x == l))
            else {
                return;
            };
            Shared::CredentialCooled {
                channel: ch.name.clone(),
                label: label.clone(),
                model: change.model.clone(),
                cooldown: change.cooldown,
            }
        }
    };
    health.apply(&ev, &ch.breaker);
}
