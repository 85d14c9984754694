//! What routing measures of the requests it serves, for the measured strategies: each
//! (channel, model)'s latency, to the first token for streams and to the whole answer
//! otherwise, as a peak-sensitive decaying average (peak-EWMA, as Finagle and Linkerd balance:
//! a slower sample raises the figure at once, faster ones bring it down with a half-life);
//! the share of the prompt its cache served lately; and each channel's requests in flight,
//! this replica's counted here and the other replicas' as they last published them. Recorded
//! only while some model routes by a measured strategy: otherwise nothing here runs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::clock::Clock;

/// What routing knows of a channel for the model, from the requests it already served.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signal {
    /// Expected seconds to the first token (streams) or to the whole answer (a peak-sensitive
    /// decaying average); `None`: no sample yet.
    pub latency: Option<f64>,
    /// Requests in flight on the channel (this replica's, plus what the others last published).
    pub in_flight: u32,
    /// The share of prompt tokens the channel's prompt cache served lately, which `cost` prices
    /// at the cached rate.
    pub cached_share: f64,
}

/// A peak-EWMA figure: its value and when it was last moved.
#[derive(Debug, Clone, Copy)]
struct Ewma {
    value: f64,
    at: Instant,
}

impl Ewma {
    /// Takes a sample: a higher one at once, a lower one weighted by the time since the last
    /// (w = 2^(−Δt / half-life)), so the figure's fall does not depend on the request rate.
    fn sample(slot: &mut Option<Ewma>, x: f64, now: Instant, half_life: Duration, peak: bool) {
        let Some(e) = slot else {
            *slot = Some(Ewma { value: x, at: now });
            return;
        };
        if peak && x > e.value {
            e.value = x;
        } else {
            let dt = now.saturating_duration_since(e.at).as_secs_f64();
            let w = (-dt / half_life.as_secs_f64().max(1e-3)).exp2();
            e.value = e.value * w + x * (1.0 - w);
        }
        e.at = now;
    }
}

/// One (channel, model)'s figures.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    /// Seconds to the first token of a stream.
    first: Option<Ewma>,
    /// Seconds to a whole answer.
    whole: Option<Ewma>,
    /// Share of prompt tokens read from the provider's cache.
    cached: Option<Ewma>,
}

/// A request in flight on a channel: counted while it lives; under `cost`, its usage feeds
/// the channel's cache figure.
pub struct Busy {
    counter: Arc<AtomicU32>,
    cache: Option<CacheFeed>,
}

/// Where an answer's cache share goes (only models routed by `cost` read it).
struct CacheFeed {
    signals: Arc<Signals>,
    channel: Arc<str>,
    model: Arc<str>,
    half_life: Duration,
}

impl Busy {
    /// The answer's usage: `cached` of `input` prompt tokens were read from the cache.
    pub fn usage(&self, input: u64, cached: u64) {
        if let Some(c) = &self.cache {
            c.signals
                .cached(&c.channel, &c.model, input, cached, c.half_life);
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An attempt's outcome as latency reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    Answered,
    /// The channel's own failure: counted as at least twice the figure (a timeout as its
    /// timeout), so failing fast never looks fast.
    Failed,
}

/// Requests in flight by channel.
pub type Counts = hashbrown::HashMap<Arc<str>, u32>;

/// Each model's channels' figures. `hashbrown`'s default (foldhash): these maps are read on
/// every measured request, where SipHash cost more than the strategy itself.
type ByModel = hashbrown::HashMap<Arc<str>, hashbrown::HashMap<Arc<str>, Figures>>;

pub struct Signals {
    clock: Arc<dyn Clock>,
    /// Model → channel → figures (looked up by `&str`, no key built per request).
    figures: Mutex<ByModel>,
    /// Each channel's counter: read without a lock, a new channel's added by copy (rare).
    busy: ArcSwap<hashbrown::HashMap<Arc<str>, Arc<AtomicU32>>>,
    /// The other replicas' in-flight counts, summed, as last read from shared state.
    remote: ArcSwap<Counts>,
}

impl Signals {
    pub fn new(clock: Arc<dyn Clock>) -> Signals {
        Signals {
            clock,
            figures: Mutex::new(ByModel::default()),
            busy: ArcSwap::from_pointee(hashbrown::HashMap::new()),
            remote: ArcSwap::from_pointee(Counts::new()),
        }
    }

    fn figures(&self) -> MutexGuard<'_, ByModel> {
        // Plain numbers: a panic elsewhere leaves nothing half-written worth refusing.
        self.figures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An attempt took `took` (a stream: to its first token).
    pub fn latency(
        &self,
        channel: &Arc<str>,
        model: &Arc<str>,
        stream: bool,
        took: Duration,
        sample: Sample,
        half_life: Duration,
    ) {
        let now = self.clock.now();
        let mut map = self.figures();
        let f = entry(&mut map, model, channel);
        let slot = if stream { &mut f.first } else { &mut f.whole };
        let mut x = took.as_secs_f64();
        if sample == Sample::Failed {
            x = x.max(2.0 * slot.map_or(0.0, |e| e.value));
        }
        Ewma::sample(slot, x, now, half_life, true);
    }

    /// An answer's usage: `cached` of `input` prompt tokens came from the provider's cache.
    pub fn cached(
        &self,
        channel: &Arc<str>,
        model: &Arc<str>,
        input: u64,
        cached: u64,
        half_life: Duration,
    ) {
        if input == 0 {
            return;
        }
        let now = self.clock.now();
        let share = cached.min(input) as f64 / input as f64;
        let mut map = self.figures();
        let f = entry(&mut map, model, channel);
        Ewma::sample(&mut f.cached, share, now, half_life, false);
    }

    /// Counts a request in flight on `channel` (serving `model`) until the guard drops.
    /// With `feed_cache` (the model is routed by `cost`), the answer's usage records the
    /// channel's cache share.
    pub fn busy(
        self: &Arc<Self>,
        channel: &Arc<str>,
        model: &Arc<str>,
        half_life: Duration,
        feed_cache: bool,
    ) -> Busy {
        let found = self.busy.load().get(channel).cloned();
        let counter = found.unwrap_or_else(|| {
            // The first request on this channel: add its counter (another may race to it:
            // whichever is stored first is the one both use).
            self.busy.rcu(|m| {
                let mut m = (**m).clone();
                m.entry(channel.clone()).or_default();
                m
            });
            self.busy.load().get(channel).cloned().unwrap_or_default()
        });
        counter.fetch_add(1, Ordering::Relaxed);
        Busy {
            counter,
            cache: feed_cache.then(|| CacheFeed {
                signals: self.clone(),
                channel: channel.clone(),
                model: model.clone(),
                half_life,
            }),
        }
    }

    /// This replica's in-flight counts, for publishing to the others.
    pub fn local(&self) -> Vec<(Arc<str>, u32)> {
        self.busy
            .load()
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect()
    }

    /// The other replicas' counts, summed per channel.
    pub fn set_remote(&self, counts: Counts) {
        self.remote.store(Arc::new(counts));
    }

    /// What a strategy reads of each channel, for `model` (`stream`: time to first token).
    pub fn view<'a>(
        &'a self,
        channels: &'a [crate::config::Channel],
        model: &'a str,
        stream: bool,
    ) -> impl Fn(usize) -> Signal + 'a {
        let remote = self.remote.load_full();
        let busy = self.busy.load_full();
        move |i| {
            let Some(ch) = channels.get(i) else {
                return Signal::default();
            };
            let f = self
                .figures()
                .get(model)
                .and_then(|m| m.get(&ch.name))
                .copied()
                .unwrap_or_default();
            let here = busy.get(&ch.name).map_or(0, |c| c.load(Ordering::Relaxed));
            let there = if remote.is_empty() {
                0
            } else {
                remote.get(&ch.name).copied().unwrap_or(0)
            };
            Signal {
                latency: if stream { f.first } else { f.whole }.map(|e| e.value),
                in_flight: here + there,
                cached_share: f.cached.map_or(0.0, |e| e.value),
            }
        }
    }
}

/// The figures of (`model`, `channel`), made on first use.
fn entry<'m>(map: &'m mut ByModel, model: &str, channel: &str) -> &'m mut Figures {
    // Looked up by `&str`: a key is made only the first time.
    map.entry_ref(model)
        .or_default()
        .entry_ref(channel)
        .or_default()
}
