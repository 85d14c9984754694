//! The streaming commit point: an attempt succeeds only when its upstream yields the first
//! content (or a finished empty answer) within `first_token_timeout_ms`. Everything before
//! that is invisible to the client, so any failure there just moves on to the next attempt;
//! after it, the serving channel never changes.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::{Instant, timeout_at};

use super::{Call, ExecError, Failure, Job, Limit, Report, chain, classify, fitter, judged};
use crate::config::{BreakerSettings, HealthSettings};
use crate::health::{Health, Key, Slot, Verdict};
use crate::protocol::{ChatRequest, StreamChunk};
use crate::provider::ChunkStream;

/// Chunks held before commit, at most: role-only or empty chunks past this commit the stream.
const MAX_HEAD_CHUNKS: usize = 64;

/// A stream past its commit point: the chunks read before commit (role-only chunks and the
/// first content), and the rest of the same upstream stream.
pub struct Committed {
    pub head: Vec<Box<StreamChunk>>,
    pub rest: ChunkStream,
    /// The credential's slot, held until the stream ends (or the client leaves).
    pub slot: Slot,
    /// Where a break after commit is reported, so it counts against the channel's health.
    pub on_break: Option<BreakReport>,
}

/// Tells health that a committed stream broke.
pub struct BreakReport {
    health: Arc<Health>,
    key: Key,
    settings: HealthSettings,
    breaker: BreakerSettings,
}

impl BreakReport {
    pub fn record(&self, latency: Duration) {
        self.health.record(
            &self.key,
            &self.settings,
            &self.breaker,
            Verdict::Failure { latency },
        );
    }
}

/// Opens the upstream stream and reads up to its first content: the attempt's success.
async fn open(c: Call<'_>, req: &ChatRequest) -> Result<Committed, Failure> {
    let ch = c.channel;
    let req = c.fitted.as_deref().unwrap_or(req);
    let limit = Limit::of(ch.first_token_timeout, c.limits.first_token_timeout);
    let first = async {
        let mut rest = ch
            .upstream
            .chat_stream(req, &c.upstream_model, c.via())
            .await
            .map_err(classify)?;
        let mut head = Vec::new();
        loop {
            // Until the first content, reading is waiting on the upstream.
            let next = {
                let _waiting = c.waited.start();
                rest.next().await
            };
            // `[DONE]` with neither content nor a finish reason is not an answer.
            let Some(item) = next else {
                return Err(Failure::empty_stream());
            };
            let chunk = item.map_err(classify)?;
            // A live upstream that keeps sending empty chunks commits at the cap: what is held
            // before commit stays bounded.
            let commit =
                chunk.has_content() || chunk.has_finish() || head.len() + 1 >= MAX_HEAD_CHUNKS;
            head.push(chunk);
            if commit {
                return Ok(Committed {
                    head,
                    rest,
                    slot: Slot::default(),
                    on_break: None,
                });
            }
        }
    };
    match timeout_at(Instant::now() + limit.within, first).await {
        Err(_) => Err(limit.expired("first token timeout")),
        Ok(r) => r.map_err(|f| judged(f, ch, &c.upstream_model, req)),
    }
}

/// Streaming chat, up to the commit point.
pub async fn chat_stream(
    job: &Job<'_>,
    req: &ChatRequest,
    report: &mut Report,
) -> Result<Committed, ExecError> {
    let snap = job.snap;
    let fitter = fitter(snap, &job.route, req);
    let (mut committed, slot) = chain::run(job, report, fitter, |c| open(c, req)).await?;
    committed.slot = slot;
    // After commit a broken stream is still the channel's failure: the relay reports it.
    let served = report.served.as_ref().and_then(|s| {
        let ch = snap.channels.iter().find(|c| c.name == s.channel)?;
        Some((ch, s.model.clone()))
    });
    if let Some((ch, model)) = served {
        committed.on_break = Some(BreakReport {
            health: job.health.clone(),
            key: Key::of(ch, &model),
            settings: snap.health,
            breaker: ch.breaker,
        });
    }
    Ok(committed)
}
