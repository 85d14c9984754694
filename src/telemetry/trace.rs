//! Traces by the OpenTelemetry GenAI conventions: one SERVER span per request and one CLIENT
//! span per upstream call, built when the request ends from what it recorded (each call's
//! start, length and span id, which went upstream in `traceparent`), and handed to the SDK's
//! batch processor, which exports them off the request path over OTLP/HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SamplingDecision, ShouldSample, SpanData, SpanEvents, SpanLinks,
    SpanProcessor,
};

use super::metrics::{Finished, operation, provider_name};
use crate::exec::AttemptRecord;
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

/// Spans handed to the processor and exports that failed: the counters behind `/metrics`.
#[derive(Debug, Default)]
pub struct TraceCounts {
    pub spans: AtomicU64,
    pub failed: AtomicU64,
}

pub struct Tracer {
    processor: BatchSpanProcessor,
    sampler: Box<dyn ShouldSample>,
    propagator: TraceContextPropagator,
    scope: InstrumentationScope,
    pub capture_content: bool,
    pub counts: Arc<TraceCounts>,
}

/// The span name and `http.route` of an endpoint (a template: bounded like the routes).
pub fn route(endpoint: &str) -> &'static str {
    match endpoint {
        "chat.completions" => "/v1/chat/completions",
        "messages" => "/v1/messages",
        "responses" => "/v1/responses",
        "generateContent" => "/v1beta/models/{model}:generateContent",
        "embeddings" => "/v1/embeddings",
        _ => "/",
    }
}

fn span_name(endpoint: &str) -> String {
    format!("POST {}", route(endpoint))
}

fn nonzero_u64() -> u64 {
    fastrand::u64(1..)
}

impl Tracer {
    pub fn new(
        processor: BatchSpanProcessor,
        sampler: Box<dyn ShouldSample>,
        capture_content: bool,
        counts: Arc<TraceCounts>,
    ) -> Tracer {
        Tracer {
            processor,
            sampler,
            propagator: TraceContextPropagator::new(),
            scope: InstrumentationScope::builder("switchyard")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            capture_content,
            counts,
        }
    }

    /// A request's trace: the client's `traceparent` continued (else a new trace), and the
    /// sampler's decision (`OTEL_TRACES_SAMPLER`), made once, here.
    pub fn start(&self, headers: &HeaderMap, endpoint: &str) -> RequestTrace {
        let parent_cx = self
            .propagator
            .extract(&opentelemetry_http::HeaderExtractor(headers));
        let parent = parent_cx.span().span_context().clone();
        let trace_id = if parent.is_valid() {
            parent.trace_id()
        } else {
            TraceId::from(fastrand::u128(1..))
        };
        let decision = self
            .sampler
            .should_sample(
                Some(&parent_cx),
                trace_id,
                &span_name(endpoint),
                &SpanKind::Server,
                &[],
                &[],
            )
            .decision;
        RequestTrace {
            ctx: TraceContext {
                trace_id: u128::from_be_bytes(trace_id.to_bytes()),
                sampled: decision == SamplingDecision::RecordAndSample,
                tracestate: headers.get("tracestate").cloned(),
            },
            span_id: nonzero_u64(),
            parent: parent
                .is_valid()
                .then(|| u64::from_be_bytes(parent.span_id().to_bytes())),
            started_at: SystemTime::now(),
        }
    }

    /// The request's spans, when it is sampled: its SERVER span and a CLIENT span per call.
    pub fn finish(&self, f: &Finished<'_>, t: &RequestTrace, answer: &Answered) {
        if !t.ctx.sampled {
            return;
        }
        let at = |i: std::time::Instant| t.started_at + i.saturating_duration_since(f.started);
        let mut n = 0;
        for (i, a) in f.attempts.iter().enumerate() {
            if a.timing.is_none() {
                continue;
            }
            n += 1;
            // A failed call followed by another record: the request moved on from it.
            let moved_on = a.class.is_some() && i + 1 < f.attempts.len();
            self.send(self.call_span(f, t, a, (n, moved_on), answer, &at));
        }
        self.send(self.server_span(f, t, answer, &at));
    }

    fn send(&self, span: SpanData) {
        self.counts.spans.fetch_add(1, Ordering::Relaxed);
        self.processor.on_end(span);
    }

    fn context(&self, t: &RequestTrace, span_id: u64) -> SpanContext {
        SpanContext::new(
            TraceId::from(t.ctx.trace_id),
            SpanId::from(span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    }

    fn server_span(
        &self,
        f: &Finished<'_>,
        t: &RequestTrace,
        answer: &Answered,
        at: &dyn Fn(std::time::Instant) -> SystemTime,
    ) -> SpanData {
        let row = f.row;
        let mut attrs = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", route(row.endpoint)),
            KeyValue::new("http.response.status_code", i64::from(row.status)),
            KeyValue::new("switchyard.request_id", row.id.clone()),
            KeyValue::new("switchyard.outcome", row.outcome.clone()),
            KeyValue::new("switchyard.stream", row.stream),
        ];
        if let Some(k) = &row.key_name {
            attrs.push(KeyValue::new("switchyard.key", k.clone()));
        }
        if let Some(m) = &row.requested_model {
            attrs.push(KeyValue::new("switchyard.requested_model", m.clone()));
        }
        if let Some(c) = &row.channel {
            attrs.push(KeyValue::new("switchyard.channel", c.clone()));
        }
        // The HTTP conventions: a server span is an error for a 5xx only.
        let status = if row.status >= 500 {
            attrs.push(KeyValue::new("error.type", row.outcome.clone()));
            Status::error(row.outcome.clone())
        } else {
            Status::Unset
        };
        let mut events = Vec::new();
        if let Some((router, instance)) = f.semantic {
            events.push(Event::new(
                "switchyard.semantic.decision",
                t.started_at,
                vec![
                    KeyValue::new("switchyard.router", router.to_string()),
                    KeyValue::new("switchyard.instance", instance.to_string()),
                ],
                0,
            ));
        }
        if let Some(c) = answer.committed {
            events.push(Event::new(
                "switchyard.stream.commit",
                at(c),
                vec![KeyValue::new(
                    "switchyard.channel",
                    Value::from(row.channel.clone().unwrap_or_default()),
                )],
                0,
            ));
        }
        for a in f.attempts.iter().filter(|a| a.skip.is_some()) {
            events.push(Event::new(
                "switchyard.channel.skipped",
                t.started_at,
                vec![
                    KeyValue::new("switchyard.channel", Value::from(a.channel.clone())),
                    KeyValue::new("switchyard.skip_reason", a.skip.map_or("", |s| s.as_str())),
                ],
                0,
            ));
        }
        self.span(SpanParts {
            context: self.context(t, t.span_id),
            parent: t.parent.unwrap_or(0),
            remote_parent: t.parent.is_some(),
            kind: SpanKind::Server,
            name: span_name(row.endpoint),
            start: t.started_at,
            end: at(f.ended),
            attrs,
            events,
            status,
        })
    }

    fn call_span(
        &self,
        f: &Finished<'_>,
        t: &RequestTrace,
        a: &AttemptRecord,
        (n, moved_on): (i64, bool),
        answer: &Answered,
        at: &dyn Fn(std::time::Instant) -> SystemTime,
    ) -> SpanData {
        let timing = a.timing.unwrap_or(crate::exec::Timing {
            started: f.started,
            took: Duration::ZERO,
            waited: Duration::ZERO,
            span_id: 0,
        });
        let served = a.class.is_none();
        let op = operation(f.row.endpoint, a.provider);
        let upstream = a.upstream_model.clone().unwrap_or_else(|| a.model.clone());
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", op),
            KeyValue::new("gen_ai.provider.name", provider_name(a.provider)),
            KeyValue::new("gen_ai.request.model", Value::from(a.model.clone())),
            KeyValue::new("switchyard.channel", Value::from(a.channel.clone())),
            KeyValue::new("switchyard.upstream_model", Value::from(upstream.clone())),
            KeyValue::new("switchyard.attempt", n),
            KeyValue::new(
                "switchyard.outcome_class",
                a.class.map_or("ok", |c| c.as_str()),
            ),
        ];
        if let Some(s) = a.status {
            attrs.push(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        if let Some(ch) = f.snap.channels.iter().find(|c| c.name == a.channel)
            && let Some((host, port)) = ch.upstream.address()
        {
            attrs.push(KeyValue::new("server.address", host));
            attrs.push(KeyValue::new("server.port", i64::from(port)));
        }
        let end = if served && f.row.stream {
            f.ended
        } else {
            timing.started + timing.took
        };
        let status = match a.class {
            Some(class) => {
                attrs.push(KeyValue::new("error.type", class.as_str()));
                if moved_on {
                    attrs.push(KeyValue::new("switchyard.failover_reason", class.as_str()));
                }
                Status::error(class.as_str())
            }
            None => {
                self.served_attributes(&mut attrs, f, answer, upstream);
                Status::Unset
            }
        };
        self.span(SpanParts {
            context: self.context(t, timing.span_id),
            parent: t.span_id,
            remote_parent: false,
            kind: SpanKind::Client,
            name: format!("{op} {}", a.model),
            start: at(timing.started),
            end: at(end),
            attrs,
            events: Vec::new(),
            status,
        })
    }

    /// What only the call that served knows: the answer's id, model, finish reasons, usage,
    /// and (when asked for) the content.
    fn served_attributes(
        &self,
        attrs: &mut Vec<KeyValue>,
        f: &Finished<'_>,
        answer: &Answered,
        upstream: Arc<str>,
    ) {
        let model = answer
            .model
            .clone()
            .map_or(Value::from(upstream), Value::from);
        attrs.push(KeyValue::new("gen_ai.response.model", model));
        if let Some(id) = &answer.id {
            attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        if !answer.finish_reasons.is_empty() {
            let reasons = answer
                .finish_reasons
                .iter()
                .map(|r| r.clone().into())
                .collect();
            attrs.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(opentelemetry::Array::String(reasons)),
            ));
        }
        for (key, n) in [
            ("gen_ai.usage.input_tokens", f.row.input_tokens),
            ("gen_ai.usage.output_tokens", f.row.output_tokens),
        ] {
            if let Some(n) = n {
                attrs.push(KeyValue::new(key, i64::try_from(n).unwrap_or(i64::MAX)));
            }
        }
        if self.capture_content {
            for (key, v) in [
                ("gen_ai.input.messages", &answer.input),
                ("gen_ai.output.messages", &answer.output),
            ] {
                if let Some(v) = v {
                    attrs.push(KeyValue::new(key, v.clone()));
                }
            }
        }
    }

    fn span(&self, p: SpanParts) -> SpanData {
        let mut events = SpanEvents::default();
        events.events = p.events;
        SpanData {
            span_context: p.context,
            parent_span_id: SpanId::from(p.parent),
            parent_span_is_remote: p.remote_parent,
            span_kind: p.kind,
            name: p.name.into(),
            start_time: p.start,
            end_time: p.end,
            attributes: p.attrs,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: p.status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    /// Exports what is queued, waiting at most the processor's flush timeout (shutdown, tests).
    pub fn flush(&self) {
        let _ = self.processor.force_flush();
    }
}

struct SpanParts {
    context: SpanContext,
    parent: u64,
    remote_parent: bool,
    kind: SpanKind,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attrs: Vec<KeyValue>,
    events: Vec<Event>,
    status: Status,
}
