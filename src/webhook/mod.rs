//! What happens to events after they are emitted: a writer folds failover storms and writes
//! every event, with an outbox row for each webhook that wants it, to the store in one
//! transaction; a deliverer leases due outbox rows (one replica per row), signs and POSTs them,
//! records each attempt and retries with backoff for a day; a pruner keeps the tables to
//! `[events] retention_days`. None of it is on a request's path: requests only emit.
//! Without a store, events are kept in memory (the last [`RECENT`]) for `GET /admin/events`,
//! and no webhook may be configured.

pub mod deliver;
pub mod sign;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::config::Live;
use crate::events::fold::Folder;
use crate::events::{Emitter, Event};
use crate::store::Store;
use crate::store::events::{Attempt, Fate, Leased, NewEvent, StoredEvent};
use deliver::{Outcome, Sender};

/// Events kept in memory when there is no store.
pub const RECENT: usize = 10_000;
/// Outbox rows one replica leases at a time, and how long it holds them: past the 5 s timeout
/// and the attempt's record (a lease only runs out when its replica died mid-delivery), short
/// enough that another replica, or a restart, takes such a row over soon.
const BATCH: i64 = 32;
const LEASE: Duration = Duration::from_secs(15);
/// How often idle deliverers look for rows other replicas wrote or retries come due.
const POLL: Duration = Duration::from_millis(500);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// The longest a failing webhook's rows wait for its next try, whatever their own schedule.
const MAX_PAUSE: Duration = Duration::from_secs(300);
/// How long the writer gathers events after the first before writing them: one transaction per
/// tick under a storm, not one per event (listed well within the second promised).
const LINGER: Duration = Duration::from_millis(50);
const EVENTS_KEPT: Duration = Duration::from_secs(30 * 86_400);

/// The events side of the gateway: where to emit, and what readers need.
pub struct Events {
    pub emitter: Emitter,
    /// Without a store: the latest events, newest last.
    recent: Mutex<VecDeque<StoredEvent>>,
    /// Wakes the deliverer when rows were written.
    wake: Notify,
    /// This process, as delivery attempts and leases name it.
    pub replica: String,
    /// Webhooks a day of failures disabled (read from the store).
    disabled: Mutex<HashSet<String>>,
    /// Webhooks failing now: their failures in a row, and until when none of their rows is
    /// leased (so a dead receiver costs an attempt per backoff step, not one per event).
    paused: Mutex<HashMap<String, (i64, i64)>>,
}

impl Events {
    /// A gateway's events, and the queue its writer reads.
    pub fn new(capacity: usize) -> (Arc<Events>, mpsc::Receiver<Event>) {
        let (emitter, rx) = Emitter::bounded(capacity);
        let rand: String = std::iter::repeat_with(fastrand::alphanumeric)
            .take(6)
            .collect();
        let ev = Events {
            emitter,
            recent: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            replica: format!("r{}-{rand}", std::process::id()),
            disabled: Mutex::default(),
            paused: Mutex::default(),
        };
        (Arc::new(ev), rx)
    }

    /// Events kept in memory (no store), newest first, as the store would list them.
    pub fn recent(&self, kind: Option<&str>, since_ms: i64, limit: usize) -> Vec<StoredEvent> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent
            .iter()
            .rev()
            .filter(|e| e.ts_ms >= since_ms)
            .filter(|e| kind.is_none_or(|k| crate::events::matches(k, &e.kind)))
            .take(limit)
            .cloned()
            .collect()
    }

    fn keep(&self, events: &[Event]) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(stored(e));
        }
    }

    /// Whether a day of failures disabled `webhook`.
    pub fn is_disabled(&self, webhook: &str) -> bool {
        let d = self.disabled.lock().unwrap_or_else(|p| p.into_inner());
        d.contains(webhook)
    }

    /// Whether `webhook` is paused at `now_ms`.
    fn is_paused(&self, webhook: &str, now_ms: i64) -> bool {
        let p = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        p.get(webhook).is_some_and(|(_, until)| *until > now_ms)
    }

    /// A delivery to `webhook` succeeded (the pause ends) or failed (it backs off further).
    fn pace(&self, webhook: &str, ok: bool, now_ms: i64) {
        let mut p = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            p.remove(webhook);
            return;
        }
        let e = p.entry(webhook.to_string()).or_insert((0, 0));
        e.0 += 1;
        let wait = deliver::backoff(e.0).min(MAX_PAUSE);
        e.1 = now_ms + wait.as_millis() as i64;
    }

    /// Asks the deliverer to look at the outbox now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

fn stored(e: &Event) -> StoredEvent {
    StoredEvent {
        id: e.id.clone(),
        kind: e.kind.to_string(),
        ts_ms: e.at_ms,
        folded_into: e.folded_into.clone(),
        payload: e.payload(),
    }
}

/// Starts the writer, the deliverer and the pruner.
pub fn spawn(
    events: Arc<Events>,
    rx: mpsc::Receiver<Event>,
    live: Arc<Live>,
    store: Option<Arc<Store>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(write(
        events.clone(),
        rx,
        live.clone(),
        store.clone(),
    ))];
    if let Some(store) = store {
        match Sender::new() {
            Ok(sender) => tasks.push(tokio::spawn(deliver_loop(
                events.clone(),
                live.clone(),
                store.clone(),
                sender,
            ))),
            Err(e) => tracing::error!(error = %e, "webhooks cannot be delivered: no HTTP client"),
        }
        tasks.push(tokio::spawn(prune_loop(live, store)));
    }
    tasks
}

/// Events as the store takes them: each with the webhooks that want it (folded ones: none).
fn rows<'a>(
    batch: &'a [Event],
    snap: &'a crate::config::Snapshot,
    ev: &Events,
) -> Vec<NewEvent<'a>> {
    batch
        .iter()
        .map(|e| NewEvent {
            id: &e.id,
            kind: e.kind,
            ts_ms: e.at_ms,
            request_id: e.data["request_id"].as_str(),
            folded_into: e.folded_into.as_deref(),
            payload: e.payload().to_string(),
            webhooks: if e.folded_into.is_some() {
                Vec::new()
            } else {
                snap.webhooks
                    .iter()
                    .filter(|w| w.wants(e.kind) && !ev.is_disabled(&w.name))
                    .map(|w| &*w.name)
                    .collect()
            },
        })
        .collect()
}

/// Folds and writes events as they come, and each window's summary when it ends.
async fn write(
    events: Arc<Events>,
    mut rx: mpsc::Receiver<Event>,
    live: Arc<Live>,
    store: Option<Arc<Store>>,
) {
    let mut folder = Folder::new(0);
    let mut batch: Vec<Event> = Vec::new();
    loop {
        let due = folder.next_due().map(|ms| {
            let wait = (ms - crate::clock::unix_ms()).max(0) as u64;
            tokio::time::Instant::now() + Duration::from_millis(wait)
        });
        tokio::select! {
            got = rx.recv() => match got {
                Some(e) => {
                    batch.push(e);
                    tokio::time::sleep(LINGER).await;
                    while batch.len() < 4096 && let Ok(e) = rx.try_recv() {
                        batch.push(e);
                    }
                }
                // Every emitter is gone (shutdown): the open windows' summaries, then stop.
                None => {
                    let out = folder.due(i64::MAX);
                    persist(&events, store.as_deref(), &live.load(), &out, false).await;
                    return;
                }
            },
            _ = sleep_until(due) => {}
        }
        // The config as it is now: a webhook made while this task waited is in it.
        let snap = live.load();
        folder.set_window(snap.events.fold.as_millis() as i64);
        let mut out: Vec<Event> = batch.drain(..).map(|e| folder.offer(e)).collect();
        out.extend(folder.due(crate::clock::unix_ms()));
        if !out.is_empty() {
            persist(&events, store.as_deref(), &snap, &out, true).await;
        }
    }
}

/// Writes events where they are kept: the store (with their outbox rows, the deliverer woken),
/// retried until it takes them when `retry` (meanwhile new events wait in the queue and, past
/// its capacity, are dropped and counted); else memory.
async fn persist(
    events: &Events,
    store: Option<&Store>,
    snap: &crate::config::Snapshot,
    out: &[Event],
    retry: bool,
) {
    let Some(store) = store else {
        events.keep(out);
        return;
    };
    let rows = rows(out, snap, events);
    let mut wait = Duration::from_millis(200);
    while let Err(e) = store.db.write_events(&rows).await {
        tracing::error!(error = %e, events = out.len(), "events could not be written");
        if !retry {
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(10));
    }
    events.wake();
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Leases due rows and delivers them, for the life of the gateway.
async fn deliver_loop(events: Arc<Events>, live: Arc<Live>, store: Arc<Store>, sender: Sender) {
    let sender = Arc::new(sender);
    loop {
        refresh_disabled(&events, &store).await;
        let rows = lease(&events, &live.load(), &store).await;
        if rows.is_empty() {
            let _ = tokio::time::timeout(POLL, events.wake.notified()).await;
            continue;
        }
        let jobs = rows.into_iter().map(|row| {
            let (events, live, store, sender) =
                (events.clone(), live.clone(), store.clone(), sender.clone());
            async move { deliver_one(&events, &live, &store, &sender, row).await }
        });
        futures_util::future::join_all(jobs).await;
    }
}

/// Due rows of each webhook that may be sent to now: enabled, not disabled by failures, not
/// paused (a paused one's backlog waits in the store, never read).
async fn lease(events: &Events, snap: &crate::config::Snapshot, store: &Store) -> Vec<Leased> {
    let now = crate::clock::unix_ms();
    let until = now + LEASE.as_millis() as i64;
    let mut rows = Vec::new();
    for w in &snap.webhooks {
        if !w.enabled || events.is_disabled(&w.name) || events.is_paused(&w.name, now) {
            continue;
        }
        match store
            .db
            .lease(&events.replica, &w.name, now, until, BATCH)
            .await
        {
            Ok(r) => rows.extend(r),
            Err(e) => tracing::warn!(error = %e, "the webhook outbox could not be read"),
        }
    }
    rows
}

async fn refresh_disabled(events: &Events, store: &Store) {
    if let Ok(rows) = store.db.webhook_state().await {
        let set: HashSet<String> = rows
            .into_iter()
            .filter(|(_, _, disabled)| disabled.is_some())
            .map(|(name, _, _)| name)
            .collect();
        *events.disabled.lock().unwrap_or_else(|p| p.into_inner()) = set;
    }
}

/// Sends one leased row and records what became of it.
async fn deliver_one(events: &Events, live: &Live, store: &Store, sender: &Sender, row: Leased) {
    let snap = live.load();
    let hook = snap.webhooks.iter().find(|w| *w.name == row.webhook);
    // Gone since the lease (a reload): the lease runs out and the row waits for it to return,
    // or expires with the day.
    let Some(hook) = hook else {
        return;
    };
    let (outcome, took) = sender
        .send(
            hook,
            snap.events.allow_private_targets,
            &row.event_id,
            &row.payload,
        )
        .await;
    let now = crate::clock::unix_ms();
    events.pace(&hook.name, !matches!(outcome, Outcome::Retry(..)), now);
    let fate = match &outcome {
        Outcome::Delivered(_) => Fate::Delivered,
        Outcome::Refused(_) => Fate::Failed,
        Outcome::Retry(..) if now - row.created_ms >= deliver::GIVE_UP.as_millis() as i64 => {
            Fate::Expired
        }
        Outcome::Retry(..) => {
            Fate::Retry(now + deliver::backoff(row.attempts + 1).as_millis() as i64)
        }
    };
    let error = match &outcome {
        Outcome::Retry(_, e) => Some(e.as_str()),
        _ => None,
    };
    let attempt = Attempt {
        row: &row,
        now_ms: now,
        status: outcome.status(),
        latency_ms: took.as_millis() as i64,
        error,
        replica: &events.replica,
        fate,
    };
    match store.db.finish_attempt(&attempt).await {
        Ok(true) => {}
        // Another replica took the row over: its attempt is the one recorded.
        Ok(false) => return,
        Err(e) => {
            // The lease runs out and the row is sent again: at least once, never lost.
            tracing::warn!(error = %e, "a delivery attempt could not be recorded");
            return;
        }
    }
    streak(events, store, hook, &outcome, now).await;
}

/// Keeps a webhook's failing streak: a success ends it; a day of failures disables the webhook
/// and records `webhook.disabled`.
async fn streak(
    events: &Events,
    store: &Store,
    hook: &crate::config::webhooks::Webhook,
    outcome: &Outcome,
    now: i64,
) {
    if matches!(outcome, Outcome::Delivered(_)) {
        let _ = store.db.webhook_ok(&hook.name).await;
        return;
    }
    let Ok(since) = store.db.webhook_failed(&hook.name, now).await else {
        return;
    };
    if now - since < deliver::GIVE_UP.as_millis() as i64 {
        return;
    }
    if let Ok(true) = store.db.webhook_disable(&hook.name, now).await {
        tracing::error!(
            webhook = &*hook.name,
            "webhook disabled: every delivery failed for 24 h"
        );
        events.emitter.emit(
            "webhook.disabled",
            json!({"webhook": &*hook.name, "failing_since": crate::events::rfc3339(since)}),
        );
    }
}

/// Sends a `webhook.test` event to one webhook now (written to the outbox like any other).
pub async fn test(
    events: &Events,
    store: &Store,
    webhook: &str,
) -> Result<Value, crate::store::DbError> {
    let ev = Event::new(
        "webhook.test",
        json!({"webhook": webhook, "message": "a test event from Switchyard"}),
    );
    let row = NewEvent {
        id: &ev.id,
        kind: ev.kind,
        ts_ms: ev.at_ms,
        request_id: None,
        folded_into: None,
        payload: ev.payload().to_string(),
        webhooks: vec![webhook],
    };
    store.db.write_events(&[row]).await?;
    // An operator testing a webhook a day of failures disabled is bringing it back.
    store.db.webhook_ok(webhook).await?;
    events
        .disabled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(webhook);
    events.pace(webhook, true, 0);
    events.wake();
    Ok(json!({"id": ev.id, "type": ev.kind, "queued": true}))
}

/// Expires rows pending past the day of retries (a removed or disabled webhook's), prunes outbox
/// and delivery rows past `[events] retention_days`, events past 30 days; hourly.
async fn prune_loop(live: Arc<Live>, store: Arc<Store>) {
    loop {
        let now = crate::clock::unix_ms();
        let keep = live.load().events.retention.as_millis() as i64;
        match store
            .db
            .prune_events(
                now - deliver::GIVE_UP.as_millis() as i64,
                now - keep,
                now - EVENTS_KEPT.as_millis() as i64,
            )
            .await
        {
            Ok(n) if n > 0 => tracing::info!(rows = n, "pruned old events and deliveries"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "pruning events failed"),
        }
        tokio::time::sleep(PRUNE_EVERY).await;
    }
}
