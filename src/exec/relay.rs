//! After the commit point: the serving channel never changes. The relay replays the chunks read
//! before commit, then passes the upstream on chunk by chunk (pull-driven, so the client's pace
//! is the upstream's pace: backpressure without a buffer of our own). A gap longer than the idle
//! timeout or an upstream fault ends the stream with a fault item, never a clean end.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

use super::{Committed, OutcomeClass, classify};
use crate::protocol::StreamChunk;
use crate::provider::ChunkStream;

#[derive(Debug)]
pub enum RelayItem {
    Chunk(Box<StreamChunk>),
    /// The stream broke after commit; the client gets an error frame and no `[DONE]`.
    Fault(OutcomeClass),
}

pub struct Relay {
    head: VecDeque<Box<StreamChunk>>,
    rest: ChunkStream,
    /// The credential's slot: released when the relay (and so the stream) is dropped.
    slot: crate::health::Slot,
    on_break: Option<super::BreakReport>,
    started: Instant,
    idle: Duration,
    /// When the stream is idle too long: moved on by every chunk, while the timer is only
    /// re-armed when it fires early (resetting a tokio timer per chunk takes the timer
    /// wheel's lock each event).
    deadline: Instant,
    timer: Pin<Box<Sleep>>,
    done: bool,
}

impl Relay {
    pub fn new(c: Committed, idle: Duration) -> Self {
        let started = Instant::now();
        Relay {
            head: c.head.into(),
            rest: c.rest,
            slot: c.slot,
            on_break: c.on_break,
            started,
            idle,
            deadline: started + idle,
            timer: Box::pin(tokio::time::sleep_until(started + idle)),
            done: false,
        }
    }
}

impl Relay {
    fn report_break(&mut self) {
        if let Some(r) = self.on_break.take() {
            r.record(self.started.elapsed());
        }
    }
}

impl Stream for Relay {
    type Item = RelayItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RelayItem>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(c) = self.head.pop_front() {
            return Poll::Ready(Some(RelayItem::Chunk(c)));
        }
        match self.rest.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(c))) => {
                self.deadline = Instant::now() + self.idle;
                // The stream's usage settles its credential's tpm charge when the slot drops.
                if let Some(u) = c.usage.as_ref() {
                    self.slot.settle(u);
                }
                Poll::Ready(Some(RelayItem::Chunk(c)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                self.report_break();
                Poll::Ready(Some(RelayItem::Fault(classify(e).class)))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => loop {
                std::task::ready!(self.timer.as_mut().poll(cx));
                let deadline = self.deadline;
                if Instant::now() < deadline {
                    // A chunk came since the timer was set: wait out the rest.
                    self.timer.as_mut().reset(deadline);
                    continue;
                }
                self.done = true;
                self.report_break();
                return Poll::Ready(Some(RelayItem::Fault(OutcomeClass::Timeout)));
            },
        }
    }
}
