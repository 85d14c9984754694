//! The client side of a committed stream: OpenAI SSE framing, usage stripping, the error frame
//! after a mid-stream fault, and the request-log row written when the stream ends (completed,
//! broken, or abandoned by the client).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::{Stream, StreamExt};

use crate::exec::{Committed, OutcomeClass, Relay, RelayItem};
use crate::protocol::StreamChunk;
use crate::protocol::openai::{ChunkBody, error_body};
use crate::protocol::{anthropic, gemini, responses};
use crate::store::{LogRow, RequestLog};

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
    started: Instant,
    ttfb: Duration,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    content_chunks: u64,
    end: End,
}

impl StreamLog {
    pub fn new(log: Arc<RequestLog>, row: LogRow, started: Instant, ttfb: Duration) -> Self {
        StreamLog {
            log,
            row,
            started,
            ttfb,
            input_tokens: None,
            output_tokens: None,
            content_chunks: 0,
            end: End::Running,
        }
    }

    fn observe(&mut self, c: &StreamChunk) {
        if let Some(u) = &c.usage {
            self.input_tokens = u.input_tokens.or(self.input_tokens);
            self.output_tokens = u.output_tokens.or(self.output_tokens);
        }
        if c.has_content() {
            self.content_chunks += 1;
        }
    }
}

impl Drop for StreamLog {
    fn drop(&mut self) {
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
        self.log.record(row);
    }
}

/// The client's stream format.
pub enum Wire {
    OpenAi,
    /// Anthropic events; `model` is what the client asked for (used when the upstream is silent).
    Anthropic {
        enc: Box<anthropic::StreamEncoder>,
        model: String,
    },
    /// Gemini partial responses.
    Gemini {
        enc: Box<gemini::StreamEncoder>,
        model: String,
    },
    /// Responses API events; `keep`: where the conversation goes when the stream completes.
    Responses {
        enc: Box<responses::StreamEncoder>,
        keep: Option<Keeper>,
    },
}

/// Keeps a translated Responses stream's conversation once it completed, for continuations.
pub struct Keeper {
    pub state: Arc<crate::state::State>,
    pub key: Arc<str>,
    pub channel: Arc<str>,
    pub ttl: Duration,
}

impl Keeper {
    /// Writing the conversation: awaited before the stream's last frame goes out, so a client
    /// that continues the response at once finds it.
    fn keep(self, enc: &responses::StreamEncoder) -> Option<Keeping> {
        let Some((id, Some(items))) = enc.completed() else {
            return None;
        };
        let stored = crate::state::StoredResponse {
            channel: self.channel,
            upstream_keeps: false,
            items: Some(items.into()),
        };
        let key = super::affinity::response_key(&self.key, &id);
        Some(Box::pin(async move {
            self.state.keep_response(&key, &stored, self.ttl).await;
        }))
    }
}

type Keeping = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

struct SseBody {
    relay: Relay,
    wire: Wire,
    /// The failover report, added to the first chunk when failover occurred.
    report: Option<serde_json::Value>,
    include_usage: bool,
    log: StreamLog,
    finished: bool,
    /// A completed Responses stream's conversation being kept, and the last frames held until
    /// it is.
    keeping: Option<Keeping>,
    held: Vec<u8>,
}

/// The code and message of a post-commit fault.
fn fault_message(class: OutcomeClass) -> (&'static str, &'static str) {
    match class {
        OutcomeClass::Timeout => (
            "stream_timeout",
            "the upstream stopped sending for longer than the idle timeout after the response began",
        ),
        _ => (
            "stream_interrupted",
            "the upstream stream failed after the response began",
        ),
    }
}

fn error_frame(class: OutcomeClass) -> Vec<u8> {
    let (code, message) = fault_message(class);
    format!(
        "data: {}\n\n",
        error_body(message, "server_error", code, None, None)
    )
    .into_bytes()
}

/// Frames already available are written together, up to this size: one syscall and one TCP
/// segment instead of one per event, with no waiting (a frame is never held back).
const COALESCE_BYTES: usize = 16 * 1024;

impl SseBody {
    /// The frames for one relay item, in the client's protocol.
    fn encode(&mut self, item: Option<RelayItem>, out: &mut Vec<u8>) {
        match item {
            Some(RelayItem::Chunk(mut c)) => {
                self.log.observe(&c);
                match &mut self.wire {
                    Wire::OpenAi => {
                        if c.is_raw_only() {
                            return;
                        }
                        if let Some(r) = self.report.take() {
                            c.extra.insert("switchyard".into(), r);
                        }
                        if !self.include_usage {
                            // We asked the upstream for usage for the log; the client did not.
                            if c.is_usage_only() {
                                return;
                            }
                            c.usage = None;
                        }
                        out.extend_from_slice(b"data: ");
                        // Serialising our own types into a Vec cannot fail; on the impossible
                        // error the frame is left empty rather than the stream broken.
                        let body = ChunkBody {
                            chunk: &c,
                            usage_null: self.include_usage,
                        };
                        let _ = serde_json::to_writer(&mut *out, &body);
                        out.extend_from_slice(b"\n\n");
                    }
                    Wire::Anthropic { enc, model } => enc.chunk(&c, model, out),
                    Wire::Gemini { enc, model } => enc.chunk(&c, model, out),
                    Wire::Responses { enc, .. } => enc.chunk(&c, out),
                }
            }
            Some(RelayItem::Fault(class)) => {
                self.log.end = End::Fault(class);
                self.finished = true;
                match &mut self.wire {
                    Wire::OpenAi => out.extend_from_slice(&error_frame(class)),
                    Wire::Anthropic { enc, .. } => enc.fault(fault_message(class).1, out),
                    Wire::Gemini { enc, .. } => enc.fault(fault_message(class).1, out),
                    Wire::Responses { enc, .. } => {
                        let (code, message) = fault_message(class);
                        enc.fault(code, message, out);
                    }
                }
            }
            None => {
                self.log.end = End::Completed;
                self.finished = true;
                match &mut self.wire {
                    Wire::OpenAi => out.extend_from_slice(b"data: [DONE]\n\n"),
                    Wire::Anthropic { enc, .. } => enc.done(out),
                    Wire::Gemini { enc, model } => enc.done(model, out),
                    Wire::Responses { enc, keep } => {
                        enc.done(out);
                        self.keeping = keep.take().and_then(|k| k.keep(enc));
                    }
                }
            }
        }
    }
}

impl Stream for SseBody {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(k) = self.keeping.as_mut() {
            std::task::ready!(k.as_mut().poll(cx));
            self.keeping = None;
            let held = std::mem::take(&mut self.held);
            return Poll::Ready((!held.is_empty()).then(|| Ok(Bytes::from(held))));
        }
        let mut out = Vec::new();
        while !self.finished && out.len() < COALESCE_BYTES {
            match self.relay.poll_next_unpin(cx) {
                Poll::Ready(item) => self.encode(item, &mut out),
                Poll::Pending if out.is_empty() => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        if self.keeping.is_some() {
            self.held = out;
            return self.poll_next(cx);
        }
        if out.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Bytes::from(out))))
    }
}

pub fn response(
    committed: Committed,
    idle: Duration,
    wire: Wire,
    include_usage: bool,
    report: Option<serde_json::Value>,
    log: StreamLog,
) -> Response {
    let body = SseBody {
        relay: Relay::new(committed, idle),
        wire,
        report,
        include_usage,
        log,
        finished: false,
        keeping: None,
        held: Vec::new(),
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
