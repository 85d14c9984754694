//! Traces, the request's side: the sampler's decision when a request arrives (the client's
//! `traceparent` continued), what the answer said, and, when the request ends, its record
//! handed to the span thread (`spans.rs`), which builds the spans and gives them to the SDK's
//! batch processor. The request pays for a copy of its record, never for a span.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderName};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SamplingDecision, ShouldSample};

use super::metrics::Finished;
use super::spans::{self, Job, Msg};
use crate::provider::TraceContext;

/// A request's trace: its context (what each call continues), its own span, and its parent.
#[derive(Debug, Clone)]
pub struct RequestTrace {
    pub ctx: TraceContext,
    pub span_id: u64,
    /// The client's span, when it sent `traceparent`.
    pub parent: Option<u64>,
    pub started_at: SystemTime,
}

/// What the answer said, for the served call's span (read only for sampled requests).
#[derive(Debug, Default)]
pub struct Answered {
    pub id: Option<String>,
    pub model: Option<String>,
    pub finish_reasons: Vec<String>,
    /// With `[telemetry] capture_content`: the prompt and the completion, as JSON.
    pub input: Option<String>,
    pub output: Option<String>,
    /// When a stream's first content went to the client.
    pub committed: Option<std::time::Instant>,
}

/// Spans handed to the processor, exports that failed, requests whose spans were dropped (the
/// span thread's queue was full): the counters behind `/metrics`.
#[derive(Debug, Default)]
pub struct TraceCounts {
    pub spans: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// The W3C headers a request may carry (names made once: looking one up by `&str` parses it).
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Requests waiting for their spans to be built, at most; more are dropped and counted.
const QUEUE: usize = 4096;

pub struct Tracer {
    tx: SyncSender<Msg>,
    sampler: Box<dyn ShouldSample>,
    propagator: TraceContextPropagator,
    pub capture_content: bool,
    pub counts: Arc<TraceCounts>,
}

/// The span name of an endpoint: `POST` and its route (a template: bounded like the routes).
pub fn span_name(endpoint: &str) -> &'static str {
    match endpoint {
        "chat.completions" => "POST /v1/chat/completions",
        "messages" => "POST /v1/messages",
        "responses" => "POST /v1/responses",
        "generateContent" => "POST /v1beta/models/{model}:generateContent",
        "embeddings" => "POST /v1/embeddings",
        "messages.count_tokens" => "POST /v1/messages/count_tokens",
        "countTokens" => "POST /v1beta/models/{model}:countTokens",
        "responses.input_tokens" => "POST /v1/responses/input_tokens",
        "responses.retrieve" => "GET /v1/responses/{id}",
        "responses.delete" => "DELETE /v1/responses/{id}",
        "responses.input_items" => "GET /v1/responses/{id}/input_items",
        "mcp.tools/call" => "POST /mcp",
        _ => "POST",
    }
}

impl Tracer {
    /// Starts the span thread, which owns `processor`.
    pub fn new(
        processor: BatchSpanProcessor,
        sampler: Box<dyn ShouldSample>,
        capture_content: bool,
        counts: Arc<TraceCounts>,
    ) -> std::io::Result<Tracer> {
        let tx = spans::spawn(processor, counts.clone(), QUEUE)?;
        Ok(Tracer {
            tx,
            sampler,
            propagator: TraceContextPropagator::new(),
            capture_content,
            counts,
        })
    }

    /// A request's trace: the client's `traceparent` continued (else a new trace), and the
    /// sampler's decision (`OTEL_TRACES_SAMPLER`), made once, here.
    pub fn start(&self, headers: &HeaderMap, endpoint: &str) -> RequestTrace {
        let name = span_name(endpoint);
        let decide = |parent: Option<&opentelemetry::Context>, trace_id| {
            let r = self
                .sampler
                .should_sample(parent, trace_id, name, &SpanKind::Server, &[], &[]);
            r.decision == SamplingDecision::RecordAndSample
        };
        // Most requests carry no trace: no context to extract, a root decision.
        let (trace_id, parent, sampled) = if headers.contains_key(&TRACEPARENT) {
            let cx = self
                .propagator
                .extract(&opentelemetry_http::HeaderExtractor(headers));
            let sc = cx.span().span_context().clone();
            if sc.is_valid() {
                let parent = u64::from_be_bytes(sc.span_id().to_bytes());
                (
                    sc.trace_id(),
                    Some(parent),
                    decide(Some(&cx), sc.trace_id()),
                )
            } else {
                let id = TraceId::from(fastrand::u128(1..));
                (id, None, decide(None, id))
            }
        } else {
            let id = TraceId::from(fastrand::u128(1..));
            (id, None, decide(None, id))
        };
        RequestTrace {
            ctx: TraceContext {
                trace_id: u128::from_be_bytes(trace_id.to_bytes()),
                sampled,
                tracestate: headers.get(&TRACESTATE).cloned(),
            },
            span_id: fastrand::u64(1..),
            parent,
            started_at: SystemTime::now(),
        }
    }

    /// A sampled request has ended: its record goes to the span thread (never waited on; a
    /// full queue drops it and counts it).
    pub fn finish(&self, f: &Finished<'_>, t: &RequestTrace, answer: Answered) {
        if !t.ctx.sampled {
            return;
        }
        let job = Box::new(Job::of(f, t.clone(), answer));
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Job(job))
        {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Builds and exports what is queued, waiting at most `within` (shutdown, tests).
    pub fn flush(&self, within: Duration) {
        let (ack, done) = std::sync::mpsc::sync_channel(1);
        if self.tx.send(Msg::Flush(ack)).is_ok() {
            let _ = done.recv_timeout(within);
        }
    }
}

impl Answered {
    /// A whole answer's facts; with `capture`, the prompt and completion as the GenAI
    /// conventions write messages (`[{"role", "parts": [{"type": "text", "content"}]}]`).
    pub fn of_response(
        resp: &crate::protocol::ChatResponse,
        req: &crate::protocol::ChatRequest,
        capture: bool,
    ) -> Answered {
        Answered {
            id: resp.id.clone(),
            model: resp.model.clone(),
            finish_reasons: resp
                .choices
                .iter()
                .filter_map(|c| c.finish_reason.clone())
                .collect(),
            input: capture.then(|| messages(req)),
            output: capture.then(|| {
                let texts = resp.choices.iter().map(|c| {
                    c.message
                        .content
                        .as_ref()
                        .map(|t| t.text())
                        .unwrap_or_default()
                });
                output_messages(texts)
            }),
            committed: None,
        }
    }

    /// A stream's facts, before its chunks: the prompt, when content is captured.
    pub fn of_stream(req: &crate::protocol::ChatRequest, capture: bool) -> Answered {
        Answered {
            input: capture.then(|| messages(req)),
            output: capture.then(String::new),
            ..Answered::default()
        }
    }

    /// One streamed chunk's facts: the first id and model, finish reasons, captured text.
    pub fn observe(&mut self, c: &crate::protocol::StreamChunk) {
        if self.id.is_none() {
            self.id.clone_from(&c.id);
        }
        if self.model.is_none() {
            self.model.clone_from(&c.model);
        }
        for choice in &c.choices {
            if let Some(r) = &choice.finish_reason {
                self.finish_reasons.push(r.clone());
            }
            if let (Some(out), Some(t)) = (self.output.as_mut(), &choice.delta.content) {
                out.push_str(t);
            }
        }
    }

    /// A streamed completion's text, as an output message (once, when the stream ends).
    pub fn close(&mut self) {
        if let Some(text) = self.output.take() {
            self.output = Some(output_messages(std::iter::once(text)));
        }
    }
}

fn messages(req: &crate::protocol::ChatRequest) -> String {
    let v: Vec<serde_json::Value> = req
        .messages
        .iter()
        .map(|m| {
            let text = m.content.as_ref().map(|c| c.text()).unwrap_or_default();
            serde_json::json!({"role": m.role.as_str(), "parts": [{"type": "text", "content": text}]})
        })
        .collect();
    serde_json::Value::Array(v).to_string()
}

fn output_messages(texts: impl Iterator<Item = String>) -> String {
    let v: Vec<serde_json::Value> = texts
        .map(
            |t| serde_json::json!({"role": "assistant", "parts": [{"type": "text", "content": t}]}),
        )
        .collect();
    serde_json::Value::Array(v).to_string()
}
