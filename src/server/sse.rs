//! The client side of a committed stream: the relay's items written by the client protocol's
//! encoder, frames coalesced, and the request-log row written when the stream ends (completed,
//! broken, or abandoned by the client).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::{Stream, StreamExt};

use super::continuation::Keeping;
use super::ctx::Trail;
use super::gather::Gather;
use super::ingress::Encode;
use crate::exec::{Committed, OutcomeClass, Relay, RelayItem};
use crate::pricing::Tokens;
use crate::protocol::StreamChunk;
use crate::store::{LogRow, RequestLog};
use crate::usage::{Pending, Used};

/// How the stream ended, for the log.
enum End {
    Running,
    Completed,
    Fault(OutcomeClass),
}

/// Writes the stream's log row when dropped, whatever ended it.
pub struct StreamLog {
    log: Arc<RequestLog>,
    row: LogRow,
    /// The stream's charges, priced when it ends.
    pending: Pending,
    /// The tokens the upstream's usage reported, when it did.
    tokens: Option<Tokens>,
    started: Instant,
    ttfb: Duration,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    content_chunks: u64,
    end: End,
    /// What telemetry reads when the stream ends, and the gateway's own time since commit
    /// (the time spent inside the body's polls: reading, translating, writing events).
    trail: Trail,
    busy: Duration,
    closed: bool,
    /// A cached request's answer, kept if the stream completes.
    keep: Option<super::cache::KeepStream>,
}

impl StreamLog {
    /// The stream's answer kept in the response cache if it completes whole.
    pub fn keeping(mut self, keep: Option<super::cache::KeepStream>) -> Self {
        self.keep = keep;
        self
    }

    /// `at`: when the request arrived, and how long until its commit point.
    pub fn new(
        log: Arc<RequestLog>,
        row: LogRow,
        pending: Pending,
        (started, ttfb): (Instant, Duration),
        trail: Trail,
    ) -> Self {
        StreamLog {
            log,
            row,
            pending,
            tokens: None,
            started,
            ttfb,
            input_tokens: None,
            output_tokens: None,
            content_chunks: 0,
            end: End::Running,
            trail,
            busy: Duration::ZERO,
            closed: false,
            keep: None,
        }
    }

    fn observe(&mut self, c: &StreamChunk) {
        if let Some(k) = self.keep.as_mut() {
            k.collect.push(c);
        }
        if let Some(a) = self.trail.answered.as_mut() {
            a.observe(c);
        }
        if let Some(u) = &c.usage {
            self.input_tokens = u.input_tokens.or(self.input_tokens);
            self.output_tokens = u.output_tokens.or(self.output_tokens);
            let mut t = Tokens::of(u);
            // A later usage event may leave out the prompt an earlier one counted.
            if u.input_tokens.is_none()
                && let Some(before) = self.tokens
            {
                (t.input, t.cached_input, t.cache_write) =
                    (before.input, before.cached_input, before.cache_write);
            }
            self.tokens = Some(t);
        }
        if c.has_content() {
            self.content_chunks += 1;
        }
    }
}

impl Drop for StreamLog {
    fn drop(&mut self) {
        if !self.closed {
            self.close();
        }
    }
}

impl StreamLog {
    /// Records the row: when the stream's last frames are made, before they are written (so
    /// the row is journaled before the answer ends), or when the body is dropped early.
    fn close(&mut self) {
        self.closed = true;
        let total = self.started.elapsed();
        let mut row = std::mem::take(&mut self.row);
        row.total_ms = total.as_millis() as u64;
        row.ttfb_ms = Some(self.ttfb.as_millis() as u64);
        row.input_tokens = self.input_tokens;
        // Without an upstream usage chunk, content chunks are the best count we have.
        let out = self.output_tokens.unwrap_or(self.content_chunks);
        row.output_tokens = Some(out);
        let visible = total.saturating_sub(self.ttfb).as_secs_f64();
        row.tokens_per_s = (visible > 0.0).then(|| out as f64 / visible);
        match self.end {
            End::Completed => {}
            End::Fault(class) => {
                row.outcome = format!("stream_{}", class.as_str());
            }
            End::Running => {
                // nginx's convention for "client closed the request".
                row.status = 499;
                row.outcome = "client_closed".into();
            }
        }
        // What was delivered is charged, counted by the gateway if the upstream never said.
        let pending = std::mem::take(&mut self.pending);
        let used = match self.tokens {
            Some(tokens) => Used {
                tokens,
                estimated: false,
            },
            None => Used::estimated(pending.prompt_estimate, out),
        };
        let broke = (!matches!(self.end, End::Completed)).then(|| row.outcome.clone());
        let cost = pending.finish(Some(used), broke.as_deref(), &mut row);
        if let Some(k) = self.keep.take().filter(|_| broke.is_none()) {
            k.keep(cost);
        }
        if let Some(a) = self.trail.answered.as_mut() {
            a.committed = Some(self.started + self.ttfb);
            a.close();
        }
        // A client that left has no overhead to speak of: the stream stopped half way.
        let overhead = match self.end {
            End::Running => None,
            _ => Some(self.trail.before_commit + self.busy),
        };
        self.trail
            .finish(&row, self.started, self.started + total, overhead);
        self.log.record(row);
    }
}

struct SseBody<E> {
    relay: Relay,
    enc: E,
    log: StreamLog,
    finished: bool,
    /// A completed stream's conversation being kept, and the last frames held until it is.
    keeping: Option<Keeping>,
    held: Vec<u8>,
    /// Frames made and held while the upstream's burst goes on.
    gather: Gather,
}

/// Frames already available are written together, up to this size: one syscall and one TCP
/// segment instead of one per event.
const COALESCE_BYTES: usize = 16 * 1024;

impl<E: Encode> SseBody<E> {
    /// The frames for one relay item, in the client's protocol.
    fn encode(&mut self, item: Option<RelayItem>, out: &mut Vec<u8>) {
        match item {
            Some(RelayItem::Chunk(mut c)) => {
                self.log.observe(&c);
                if c.usage.is_some()
                    && let Some(t) = &self.log.tokens
                {
                    // Headers are gone by now: the cost rides on the usage chunk.
                    let cost = self.log.pending.cost_of(t);
                    cost_extension(&mut c, cost);
                }
                self.enc.chunk(&mut c, out);
            }
            Some(RelayItem::Fault(class)) => {
                self.log.end = End::Fault(class);
                self.finished = true;
                self.enc.fault(class, out);
            }
            None => {
                self.log.end = End::Completed;
                self.finished = true;
                self.keeping = self.enc.done(out);
            }
        }
    }
}

impl<E: Encode> Stream for SseBody<E> {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Everything inside a poll is the gateway's own work: it never blocks.
        let since = Instant::now();
        let polled = self.as_mut().poll_frames(cx, since);
        self.log.busy += since.elapsed();
        polled
    }
}

impl<E: Encode> SseBody<E> {
    fn poll_frames(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        now: Instant,
    ) -> Poll<Option<Result<Bytes, std::convert::Infallible>>> {
        if let Some(k) = self.keeping.as_mut() {
            std::task::ready!(k.as_mut().poll(cx));
            self.keeping = None;
            self.log.close();
            let held = std::mem::take(&mut self.held);
            return Poll::Ready((!held.is_empty()).then(|| Ok(Bytes::from(held))));
        }
        let mut out = self.gather.take();
        let mut brought = false;
        while !self.finished && out.len() < COALESCE_BYTES {
            match self.relay.poll_next_unpin(cx) {
                Poll::Ready(item) => {
                    brought = true;
                    self.encode(item, &mut out);
                }
                Poll::Pending if out.is_empty() => return Poll::Pending,
                Poll::Pending => match self.gather.hold(out, brought, now, cx) {
                    None => return Poll::Pending,
                    Some(all) => {
                        out = all;
                        break;
                    }
                },
            }
        }
        self.gather.written(brought, now);
        if self.keeping.is_some() {
            self.held = out;
            return self.poll_frames(cx, now);
        }
        if self.finished && !self.log.closed {
            self.log.close();
        }
        if out.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Bytes::from(out))))
    }
}

/// `switchyard.cost_micros` on a chunk, beside any report already there.
fn cost_extension(c: &mut StreamChunk, cost: u64) {
    let ext = c
        .extra
        .entry("switchyard")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if let Some(o) = ext.as_object_mut() {
        o.insert("cost_micros".into(), cost.into());
    }
}

/// The response of a committed stream, written by `enc`.
pub fn response<E: Encode>(
    committed: Committed,
    idle: Duration,
    enc: E,
    log: StreamLog,
) -> Response {
    let body = SseBody {
        relay: Relay::new(committed, idle),
        enc,
        log,
        finished: false,
        keeping: None,
        held: Vec::new(),
        gather: Gather::default(),
    };
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}
