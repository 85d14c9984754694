//! The per-process retry budget: calls to a channel a request has already called (in-channel
//! retries, the channel's next key, the next model of a chain on the same channel) are allowed
//! while they stay under `max(ratio × requests, min_per_second × window)` over a sliding window
//! of one-second buckets. When an upstream fails, this keeps the gateway from multiplying the
//! load on it. A failover to a channel the request has not called spends nothing: it is one
//! call to another upstream (Linkerd's budget guards one service against its own retries).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::clock::Clock;
use crate::config::BudgetSettings;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    second: u64,
    requests: u64,
    retries: u64,
}

pub struct RetryBudget {
    clock: Arc<dyn Clock>,
    base: Instant,
    buckets: Mutex<VecDeque<Bucket>>,
}

/// Retries the window allows after `requests`: the ratio, or the floor when that is more.
fn limit(s: &BudgetSettings, requests: u64) -> f64 {
    let floor = u64::from(s.min_per_second) * s.window.as_secs().max(1);
    (s.ratio * requests as f64).max(floor as f64)
}

impl RetryBudget {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        RetryBudget {
            base: clock.now(),
            clock,
            buckets: Mutex::new(VecDeque::new()),
        }
    }

    /// Counts a request that reached the attempt loop.
    pub fn request(&self, s: &BudgetSettings) {
        self.with_current(s, |b| b.requests += 1);
    }

    /// Takes one retry from the budget, if there is one left.
    pub fn try_retry(&self, s: &BudgetSettings) -> bool {
        let mut allowed = false;
        // Prunes the window and makes sure the current second has a bucket.
        self.with_current(s, |_| {});
        let mut q = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (requests, retries) = q
            .iter()
            .fold((0u64, 0u64), |(a, b), x| (a + x.requests, b + x.retries));
        if (retries as f64) < limit(s, requests)
            && let Some(cur) = q.back_mut()
        {
            cur.retries += 1;
            allowed = true;
        }
        allowed
    }

    /// The window as it stands: requests, retries taken and the limit on retries (for the
    /// admin API; takes nothing).
    pub fn standing(&self, s: &BudgetSettings) -> (u64, u64, u64) {
        self.with_current(s, |_| {});
        let q = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (requests, retries) = q
            .iter()
            .fold((0u64, 0u64), |(a, b), x| (a + x.requests, b + x.retries));
        (requests, retries, limit(s, requests) as u64)
    }

    fn with_current(&self, s: &BudgetSettings, f: impl FnOnce(&mut Bucket)) {
        let now = self
            .clock
            .now()
            .saturating_duration_since(self.base)
            .as_secs();
        let window = s.window.as_secs().max(1);
        let mut q = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        while q.front().is_some_and(|b| b.second + window <= now) {
            q.pop_front();
        }
        if q.back().is_none_or(|b| b.second != now) {
            q.push_back(Bucket {
                second: now,
                requests: 0,
                retries: 0,
            });
        }
        if let Some(b) = q.back_mut() {
            f(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn retries_stay_under_the_ratio_and_the_window_slides() {
        let clock = ManualClock::new();
        let b = RetryBudget::new(clock.clone());
        let s = BudgetSettings {
            ratio: 0.2,
            min_per_second: 0,
            window: Duration::from_secs(10),
        };
        for _ in 0..10 {
            b.request(&s);
        }
        assert!(b.try_retry(&s));
        assert!(b.try_retry(&s));
        assert!(!b.try_retry(&s), "2 of 10 requests is the budget");
        clock.advance(Duration::from_secs(11));
        // The old requests left the window with their retries.
        assert!(!b.try_retry(&s));
        for _ in 0..5 {
            b.request(&s);
        }
        assert!(b.try_retry(&s));
        assert!(!b.try_retry(&s));
    }

    #[test]
    fn the_floor_allows_retries_at_low_traffic() {
        let b = RetryBudget::new(ManualClock::new());
        let s = BudgetSettings {
            ratio: 0.0,
            min_per_second: 1,
            window: Duration::from_secs(3),
        };
        assert!((0..3).all(|_| b.try_retry(&s)));
        assert!(!b.try_retry(&s));
    }
}
