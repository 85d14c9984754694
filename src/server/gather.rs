//! Frames of one upstream burst written together. hyper's client hands a response body over
//! one chunk at a time (a one-slot channel from the connection's task), so events the gateway
//! read from the upstream in one `read` still reach the stream a scheduler pass or more apart.
//! Written as they came, a 20-event answer read at once took 20 `writev`s and as many wake-ups
//! of the client (`bench/instructions.sh` cannot see it: it is system time). Within a burst,
//! frames wait while passes keep bringing events; an event after a quiet gap (a model's next
//! token) is written at once, and so is the stream's first.

use std::task::Context;
use std::time::{Duration, Instant};

/// Events closer together than this are one burst.
const BURST_GAP: Duration = Duration::from_millis(1);
/// The longest a frame is held for the rest of its burst.
const MAX_HOLD: Duration = Duration::from_millis(3);
/// Polls in a row that bring no event before the held frames are written. hyper polls a body
/// twice a pass when it returns pending, so this is two passes of the scheduler.
const MAX_MISSES: u8 = 4;

#[derive(Default)]
pub struct Gather {
    held: Vec<u8>,
    /// When the last event came, and when the frames now held were first held.
    last: Option<Instant>,
    since: Option<Instant>,
    misses: u8,
}

impl Gather {
    /// The frames held from earlier polls, to add this poll's to.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// After a poll that made frames (`brought` this poll or held from before) and then found
    /// the upstream not ready: `None` when they are held for one more pass (the task is woken
    /// for it), else the frames to write now.
    pub fn hold(
        &mut self,
        out: Vec<u8>,
        brought: bool,
        now: Instant,
        cx: &Context<'_>,
    ) -> Option<Vec<u8>> {
        let burst = self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < BURST_GAP);
        if brought {
            self.last = Some(now);
            self.misses = 0;
        } else {
            self.misses += 1;
        }
        let since = *self.since.get_or_insert(now);
        if burst && self.misses < MAX_MISSES && now.saturating_duration_since(since) < MAX_HOLD {
            self.held = out;
            // Back of the run queue: the upstream connection's task, woken when its last
            // chunk was taken, hands over the next one first.
            cx.waker().wake_by_ref();
            return None;
        }
        self.written(false, now);
        Some(out)
    }

    /// The frames made are being written (the burst ended, or the stream did, or they filled
    /// a write).
    pub fn written(&mut self, brought: bool, now: Instant) {
        if brought {
            self.last = Some(now);
        }
        self.since = None;
        self.misses = 0;
    }
}
