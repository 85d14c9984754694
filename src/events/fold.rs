//! Folding failover storms: the first `model.failover` per (requested model, served channel,
//! reason) goes out at once and opens a window of `fold_seconds`; the others in that window are
//! listed but not sent, and when it ends one summary carries their `count` and (at most 100)
//! `request_ids`. Other types are never folded. Pure: time comes in with each call.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Event, new_id};

/// Request ids a summary names at most (its `count` is always whole).
pub const MAX_IDS: usize = 100;

type Key = (String, String, String);

struct Window {
    ends_ms: i64,
    started_ms: i64,
    summary_id: String,
    count: u64,
    request_ids: Vec<String>,
}

pub struct Folder {
    window_ms: i64,
    open: HashMap<Key, Window>,
    /// Summaries of windows that ended, not yet taken by [`Folder::due`].
    ready: Vec<Event>,
}

fn key(ev: &Event) -> Option<Key> {
    if ev.kind != "model.failover" {
        return None;
    }
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    Some((
        s(&ev.data["requested_model"]),
        s(&ev.data["served_channel"]),
        s(&ev.data["attempts"][0]["reason"]),
    ))
}

impl Folder {
    /// Folds within windows of `window_ms` (0: never folds).
    pub fn new(window_ms: i64) -> Folder {
        Folder {
            window_ms,
            open: HashMap::new(),
            ready: Vec::new(),
        }
    }

    pub fn set_window(&mut self, window_ms: i64) {
        self.window_ms = window_ms;
    }

    /// Takes an event; it comes back to be recorded, with `folded_into` set when it is one of
    /// a window's later events (listed, not sent). Windows that ended before it are closed
    /// first, so an event after its key's window opens the next one.
    pub fn offer(&mut self, mut ev: Event) -> Event {
        self.close(ev.at_ms);
        let Some(k) = key(&ev).filter(|_| self.window_ms > 0) else {
            return ev;
        };
        match self.open.get_mut(&k) {
            Some(w) => {
                w.count += 1;
                if w.request_ids.len() < MAX_IDS
                    && let Some(id) = ev.data["request_id"].as_str()
                {
                    w.request_ids.push(id.to_string());
                }
                ev.folded_into = Some(w.summary_id.clone());
            }
            None => {
                let window = Window {
                    ends_ms: ev.at_ms + self.window_ms,
                    started_ms: ev.at_ms,
                    summary_id: new_id(ev.at_ms + self.window_ms),
                    count: 0,
                    request_ids: Vec::new(),
                };
                self.open.insert(k, window);
            }
        }
        ev
    }

    /// The summaries of windows ended by `now_ms` that folded anything.
    pub fn due(&mut self, now_ms: i64) -> Vec<Event> {
        self.close(now_ms);
        std::mem::take(&mut self.ready)
    }

    /// Ends the windows whose time is up by `now_ms`, keeping a summary of each that folded.
    fn close(&mut self, now_ms: i64) {
        let ended: Vec<Key> = self
            .open
            .iter()
            .filter(|(_, w)| w.ends_ms <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ended {
            let Some(w) = self.open.remove(&k).filter(|w| w.count > 0) else {
                continue;
            };
            let data = json!({
                "folded": true,
                "count": w.count,
                "request_ids": w.request_ids,
                "requested_model": k.0,
                "served_channel": (!k.1.is_empty()).then_some(&k.1),
                "reason": k.2,
                "window_start": super::rfc3339(w.started_ms),
                "window_end": super::rfc3339(w.ends_ms),
            });
            self.ready.push(Event {
                id: w.summary_id,
                kind: "model.failover",
                at_ms: w.ends_ms,
                data,
                folded_into: None,
            });
        }
    }

    /// When the next window ends, if one is open.
    pub fn next_due(&self) -> Option<i64> {
        self.open.values().map(|w| w.ends_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failover(at: i64, id: &str, channel: &str, reason: &str) -> Event {
        Event::at(
            "model.failover",
            json!({"request_id": id, "requested_model": "m", "served_channel": channel,
                   "attempts": [{"reason": reason}]}),
            at,
        )
    }

    #[test]
    fn a_storm_is_its_first_event_then_one_summary_per_window_and_key() {
        let mut f = Folder::new(10_000);
        let mut sent = Vec::new();
        for i in 0..1000 {
            let ev = f.offer(failover(i * 10, &format!("req{i}"), "b", "server_error"));
            if ev.folded_into.is_none() {
                sent.push(ev);
            }
        }
        // Another key is its own window; a circuit event is never folded.
        assert!(
            f.offer(failover(5, "x", "c", "server_error"))
                .folded_into
                .is_none()
        );
        let circuit = Event::at("circuit.opened", json!({}), 6);
        assert!(f.offer(circuit).folded_into.is_none());
        assert_eq!(sent.len(), 1);
        assert!(f.due(9_999).is_empty());
        let due = f.due(10_000);
        assert_eq!(due.len(), 1, "the other key folded nothing");
        assert_eq!(due[0].data["count"], 999);
        assert_eq!(
            due[0].data["request_ids"].as_array().unwrap().len(),
            MAX_IDS
        );
        assert_eq!(due[0].data["request_ids"][0], "req1");
        assert!(
            f.due(10_005).is_empty(),
            "the other key's window folded nothing"
        );
        assert_eq!(f.next_due(), None);
        // After the window, the next one is sent at once again.
        assert!(
            f.offer(failover(20_000, "late", "b", "server_error"))
                .folded_into
                .is_none()
        );
    }

    #[test]
    fn a_window_ended_before_the_next_event_is_summarised_when_that_event_opens_the_next() {
        let mut f = Folder::new(1000);
        f.offer(failover(0, "a", "b", "timeout"));
        assert!(
            f.offer(failover(10, "b", "b", "timeout"))
                .folded_into
                .is_some()
        );
        f.offer(failover(5000, "c", "b", "timeout"));
        let due = f.due(5000);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].data["reason"], "timeout");
        assert_eq!(due[0].data["count"], 1);
        assert_eq!(
            Folder::new(0).offer(failover(0, "a", "b", "x")).folded_into,
            None
        );
    }
}
