//! Frames of one upstream burst written together. An HTTP/1.1 upstream's connection is driven by
//! the stream's own task (`provider::pool`), so a burst read at once is all there in one poll;
//! but hyper's HTTP/2 client (and a burst split over reads) hands events over one chunk at a
//! time (a one-slot channel from the connection's task), a scheduler pass or more apart.
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
    /// for it), else the frames to write now (the caller then calls [`Gather::written`]).
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
        Some(out)
    }

    /// The frames made are being written (the burst ended, or the stream did, or they filled
    /// a write): the next hold starts afresh.
    pub fn written(&mut self, brought: bool, now: Instant) {
        if brought {
            self.last = Some(now);
        }
        self.since = None;
        self.misses = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: &[u8] = b"data: {}\n\n";

    /// One poll, `at` after `start`, that made a frame (none with `brought` false) and then
    /// found the upstream not ready: `None` when the frames are held, else how many are written.
    fn poll(g: &mut Gather, start: Instant, at: u64, brought: bool) -> Option<usize> {
        let mut out = g.take();
        if brought {
            out.extend_from_slice(FRAME);
        }
        let cx = Context::from_waker(std::task::Waker::noop());
        let now = start + Duration::from_micros(at);
        let written = g.hold(out, brought, now, &cx)?;
        g.written(brought, now);
        Some(written.len() / FRAME.len())
    }

    #[test]
    fn the_first_event_and_one_after_a_quiet_gap_are_written_at_once() {
        let (mut g, t) = (Gather::default(), Instant::now());
        assert_eq!(poll(&mut g, t, 0, true), Some(1), "the stream's first");
        assert_eq!(poll(&mut g, t, 10, true), None, "10 µs on: a burst, held");
        while poll(&mut g, t, 20, false).is_none() {}
        assert_eq!(poll(&mut g, t, 5_000, true), Some(1), "after a 5 ms gap");
    }

    #[test]
    fn a_burst_is_held_until_passes_bring_nothing() {
        let (mut g, t) = (Gather::default(), Instant::now());
        poll(&mut g, t, 0, true);
        assert_eq!(poll(&mut g, t, 10, true), None);
        assert_eq!(
            poll(&mut g, t, 20, true),
            None,
            "each pass brought one more"
        );
        for n in 1..u64::from(MAX_MISSES) {
            assert_eq!(poll(&mut g, t, 20 + 10 * n, false), None, "miss {n}");
        }
        assert_eq!(
            poll(&mut g, t, 100, false),
            Some(2),
            "the last miss writes both"
        );
    }

    #[test]
    fn a_frame_is_held_no_longer_than_max_hold() {
        let (mut g, t) = (Gather::default(), Instant::now());
        poll(&mut g, t, 0, true);
        // Events keep coming 500 µs apart: each one is part of a burst.
        let mut at = 500;
        assert_eq!(poll(&mut g, t, at, true), None);
        let mut written = None;
        while written.is_none() && at < 100_000 {
            at += 500;
            written = poll(&mut g, t, at, true);
        }
        let written = written.expect("written within 100 ms");
        let held = Duration::from_micros(at - 500);
        assert!(held >= MAX_HOLD && held < MAX_HOLD + BURST_GAP, "{held:?}");
        assert_eq!(
            written,
            1 + (at as usize - 500) / 500,
            "every event since 500 µs"
        );
    }
}
