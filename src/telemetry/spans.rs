//! The span thread: builds a finished request's spans from its record (one SERVER span, one
//! CLIENT span per upstream call, with the ids that went upstream in `traceparent`) and hands
//! them to the SDK's batch processor, which exports them over OTLP/HTTP from its own thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

use super::metrics::{Finished, operation, provider_name};
use super::trace::{Answered, RequestTrace, TraceCounts, span_name};
use crate::config::Snapshot;
use crate::exec::AttemptRecord;

/// How often the span thread drains its queue.
const TICK: Duration = Duration::from_millis(50);

pub enum Msg {
    Job(Box<Job>),
    /// Build and export everything before it, then answer.
    Flush(SyncSender<()>),
}

/// A finished, sampled request as its spans need it: owned, so the request is done with it.
pub struct Job {
    trace: RequestTrace,
    snap: Arc<Snapshot>,
    row: Row,
    attempts: Vec<AttemptRecord>,
    semantic: Option<(String, String)>,
    started: Instant,
    ended: Instant,
    answer: Answered,
}

/// What the request's span says of its log row.
struct Row {
    id: String,
    endpoint: std::borrow::Cow<'static, str>,
    status: u16,
    outcome: String,
    stream: bool,
    key: Option<String>,
    requested_model: Option<String>,
    channel: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    route_reason: Option<String>,
    cache: Option<String>,
}

impl Job {
    pub fn of(f: &Finished<'_>, trace: RequestTrace, answer: Answered) -> Job {
        let r = f.row;
        Job {
            trace,
            snap: f.snap.clone(),
            row: Row {
                id: r.id.clone(),
                endpoint: r.endpoint.clone(),
                status: r.status,
                outcome: r.outcome.clone(),
                stream: r.stream,
                key: r.key_name.clone(),
                requested_model: r.requested_model.clone(),
                channel: r.channel.clone(),
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                route_reason: r.route_reason.as_deref().map(str::to_string),
                cache: r.cache.as_deref().map(str::to_string),
            },
            attempts: f.attempts.to_vec(),
            semantic: f.semantic.map(|(r, i)| (r.to_string(), i.to_string())),
            started: f.started,
            ended: f.ended,
            answer,
        }
    }

    /// When `i` happened, on the wall clock.
    fn at(&self, i: Instant) -> SystemTime {
        self.trace.started_at + i.saturating_duration_since(self.started)
    }
}

/// Starts the span thread; it owns `processor` and ends when every sender is gone.
pub fn spawn(
    processor: BatchSpanProcessor,
    counts: Arc<TraceCounts>,
    queue: usize,
) -> std::io::Result<SyncSender<Msg>> {
    let (tx, rx) = sync_channel(queue);
    let builder = Builder {
        processor,
        scope: InstrumentationScope::builder("switchyard")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
        counts,
    };
    std::thread::Builder::new()
        .name("switchyard-spans".into())
        .spawn(move || builder.run(rx))?;
    Ok(tx)
}

struct Builder {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
    counts: Arc<TraceCounts>,
}

impl Builder {
    /// Wakes every tick and drains the queue: a request never wakes this thread (waking it
    /// per request would cost a syscall each).
    fn run(self, rx: Receiver<Msg>) {
        loop {
            std::thread::sleep(TICK);
            loop {
                match rx.try_recv() {
                    Ok(Msg::Job(job)) => self.spans(&job),
                    Ok(Msg::Flush(ack)) => {
                        let _ = self.processor.force_flush();
                        let _ = ack.send(());
                    }
                    Err(TryRecvError::Empty) => break,
                    // Every sender is gone: the processor exports what it holds as it drops.
                    Err(TryRecvError::Disconnected) => return,
                }
            }
        }
    }

    fn send(&self, span: SpanData) {
        self.counts.spans.fetch_add(1, Ordering::Relaxed);
        self.processor.on_end(span);
    }

    /// The request's SERVER span and a CLIENT span per call (an MCP tool call: its
    /// `execute_tool` span).
    fn spans(&self, job: &Job) {
        if job.row.endpoint == "mcp.tools/call" {
            self.send(self.tool_span(job));
        }
        let mut n = 0;
        for (i, a) in job.attempts.iter().enumerate() {
            if a.timing.is_none() {
                continue;
            }
            n += 1;
            // A failed call followed by another record: the request moved on from it.
            let moved_on = a.class.is_some() && i + 1 < job.attempts.len();
            self.send(self.call_span(job, a, (n, moved_on)));
        }
        self.send(self.server_span(job));
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

    fn server_span(&self, job: &Job) -> SpanData {
        let row = &job.row;
        let mut attrs = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", route(&row.endpoint)),
            KeyValue::new("http.response.status_code", i64::from(row.status)),
            KeyValue::new("switchyard.request_id", row.id.clone()),
            KeyValue::new("switchyard.outcome", row.outcome.clone()),
            KeyValue::new("switchyard.stream", row.stream),
        ];
        for (key, v) in [
            ("switchyard.key", &row.key),
            ("switchyard.requested_model", &row.requested_model),
            ("switchyard.channel", &row.channel),
            ("switchyard.route.reason", &row.route_reason),
            ("switchyard.cache", &row.cache),
        ] {
            if let Some(v) = v {
                attrs.push(KeyValue::new(key, v.clone()));
            }
        }
        // The HTTP conventions: a server span is an error for a 5xx only.
        let status = if row.status >= 500 {
            attrs.push(KeyValue::new("error.type", row.outcome.clone()));
            Status::error(row.outcome.clone())
        } else {
            Status::Unset
        };
        let t = &job.trace;
        self.span(SpanParts {
            context: self.context(t, t.span_id),
            parent: t.parent.unwrap_or(0),
            remote_parent: t.parent.is_some(),
            kind: SpanKind::Server,
            name: span_name(&row.endpoint).into(),
            start: t.started_at,
            end: job.at(job.ended),
            attrs,
            events: server_events(job),
            status,
        })
    }

    /// An MCP tool call as the GenAI conventions name it: `execute_tool {gen_ai.tool.name}`,
    /// under the request's span, for the time the call took.
    fn tool_span(&self, job: &Job) -> SpanData {
        let row = &job.row;
        let tool = row.requested_model.clone().unwrap_or_default();
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.clone()),
            KeyValue::new("gen_ai.tool.type", "extension"),
            KeyValue::new("switchyard.outcome", row.outcome.clone()),
        ];
        if let Some(server) = &row.channel {
            attrs.push(KeyValue::new("switchyard.mcp.server", server.clone()));
        }
        let ok = matches!(row.outcome.as_str(), "ok");
        let status = if ok {
            Status::Unset
        } else {
            attrs.push(KeyValue::new("error.type", row.outcome.clone()));
            Status::error(row.outcome.clone())
        };
        let t = &job.trace;
        self.span(SpanParts {
            context: self.context(t, t.span_id ^ 0x5f5f_7431),
            parent: t.span_id,
            remote_parent: false,
            kind: SpanKind::Internal,
            name: format!("execute_tool {tool}").into(),
            start: t.started_at,
            end: job.at(job.ended),
            attrs,
            events: Vec::new(),
            status,
        })
    }

    fn call_span(&self, job: &Job, a: &AttemptRecord, (n, moved_on): (i64, bool)) -> SpanData {
        let timing = a.timing.unwrap_or(crate::exec::Timing {
            started: job.started,
            took: Duration::ZERO,
            waited: Duration::ZERO,
            span_id: 0,
        });
        let served = a.class.is_none();
        let op = operation(&job.row.endpoint, a.provider);
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
        if let Some(ch) = job.snap.channels.iter().find(|c| c.name == a.channel)
            && let Some((host, port)) = ch.upstream.address()
        {
            attrs.push(KeyValue::new("server.address", host));
            attrs.push(KeyValue::new("server.port", i64::from(port)));
        }
        let end = if served && job.row.stream {
            job.ended
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
                served_attributes(&mut attrs, job, upstream);
                Status::Unset
            }
        };
        self.span(SpanParts {
            context: self.context(&job.trace, timing.span_id),
            parent: job.trace.span_id,
            remote_parent: false,
            kind: SpanKind::Client,
            name: format!("{op} {}", a.model).into(),
            start: job.at(timing.started),
            end: job.at(end),
            attrs,
            events: Vec::new(),
            status,
        })
    }

    fn span(&self, p: SpanParts) -> SpanData {
        let mut events = SpanEvents::default();
        events.events = p.events;
        SpanData {
            span_context: p.context,
            parent_span_id: SpanId::from(p.parent),
            parent_span_is_remote: p.remote_parent,
            span_kind: p.kind,
            name: p.name,
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
}

/// `http.route` of an endpoint.
fn route(endpoint: &str) -> &'static str {
    span_name(endpoint).trim_start_matches("POST ")
}

/// The request span's events: the stream's commit, the semantic pick, channels passed over.
fn server_events(job: &Job) -> Vec<Event> {
    let t = &job.trace;
    let mut events = Vec::new();
    if let Some((router, instance)) = &job.semantic {
        events.push(Event::new(
            "switchyard.semantic.decision",
            t.started_at,
            vec![
                KeyValue::new("switchyard.router", router.clone()),
                KeyValue::new("switchyard.instance", instance.clone()),
            ],
            0,
        ));
    }
    if let Some(c) = job.answer.committed {
        let channel = job.row.channel.clone().unwrap_or_default();
        events.push(Event::new(
            "switchyard.stream.commit",
            job.at(c),
            vec![KeyValue::new("switchyard.channel", channel)],
            0,
        ));
    }
    for a in job.attempts.iter().filter(|a| a.skip.is_some()) {
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
    events
}

/// What only the call that served knows: the answer's id, model, finish reasons, usage, and
/// (when asked for) the content.
fn served_attributes(attrs: &mut Vec<KeyValue>, job: &Job, upstream: Arc<str>) {
    let answer = &job.answer;
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
        ("gen_ai.usage.input_tokens", job.row.input_tokens),
        ("gen_ai.usage.output_tokens", job.row.output_tokens),
    ] {
        if let Some(n) = n {
            attrs.push(KeyValue::new(key, i64::try_from(n).unwrap_or(i64::MAX)));
        }
    }
    // Present only when `[telemetry] capture_content` asked for them (`Answered` has them).
    for (key, v) in [
        ("gen_ai.input.messages", &answer.input),
        ("gen_ai.output.messages", &answer.output),
    ] {
        if let Some(v) = v {
            attrs.push(KeyValue::new(key, v.clone()));
        }
    }
}

struct SpanParts {
    context: SpanContext,
    parent: u64,
    remote_parent: bool,
    kind: SpanKind,
    name: std::borrow::Cow<'static, str>,
    start: SystemTime,
    end: SystemTime,
    attrs: Vec<KeyValue>,
    events: Vec<Event>,
    status: Status,
}
