//! Where time-dependent logic (health windows, cooldowns, bindings' TTLs) reads the time, so
//! tests drive it with a [`ManualClock`] instead of sleeping.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where health reads the time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// Milliseconds since the Unix epoch (0 if the system clock is before it): what the request
/// log, the store and request ids record.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (tests).
pub struct ManualClock {
    base: Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            base: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    pub fn advance(&self, d: Duration) {
        if let Ok(mut o) = self.offset.lock() {
            *o += d;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + self.offset.lock().map_or(Duration::ZERO, |o| *o)
    }
}
