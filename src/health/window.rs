//! A channel's sliding window of verdicts, with running sums, so that its score (read on every
//! request that routes to the channel) costs no pass over the window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::HealthSettings;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    ok: bool,
    /// The latency score (0–1) in millionths, for a success: integers, so adding and removing
    /// them keeps the sum exact.
    micros: u64,
    latency: Duration,
}

#[derive(Debug, Default)]
pub(super) struct Window {
    samples: VecDeque<Sample>,
    ok: usize,
    latency_micros: u64,
    /// The latency bounds the scores were taken with: a reload that moves them rescores.
    bounds: (Duration, Duration),
}

const MICROS: f64 = 1_000_000.0;

impl Window {
    pub fn push(&mut self, at: Instant, ok: bool, latency: Duration, s: &HealthSettings) {
        if self.bounds != (s.latency_good, s.latency_bad) {
            self.rescore(s);
        }
        let micros = if ok {
            (latency_score(latency, s) * MICROS) as u64
        } else {
            0
        };
        self.ok += usize::from(ok);
        self.latency_micros += micros;
        self.samples.push_back(Sample {
            at,
            ok,
            micros,
            latency,
        });
    }

    /// Drops verdicts older than `window` and beyond `size`.
    pub fn prune(&mut self, now: Instant, window: Duration, size: usize) {
        while let Some(first) = self.samples.front()
            && (now.duration_since(first.at) > window || self.samples.len() > size)
        {
            self.ok -= usize::from(first.ok);
            self.latency_micros -= first.micros;
            self.samples.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn successes(&self) -> usize {
        self.ok
    }

    /// 0.7 × success rate + 0.3 × mean latency score of the successes, 0–100; 100 with no
    /// verdicts yet.
    pub fn score(&self, s: &HealthSettings) -> f64 {
        if self.samples.is_empty() {
            return 100.0;
        }
        let success = self.ok as f64 / self.samples.len() as f64;
        let latency = match self.ok {
            0 => 0.0,
            n if self.bounds == (s.latency_good, s.latency_bad) => {
                self.latency_micros as f64 / MICROS / n as f64
            }
            // Settings moved since the scores were taken (a reload): scored afresh.
            n => {
                let ok = self.samples.iter().filter(|x| x.ok);
                ok.map(|x| latency_score(x.latency, s)).sum::<f64>() / n as f64
            }
        };
        100.0 * (0.7 * success + 0.3 * latency)
    }

    fn rescore(&mut self, s: &HealthSettings) {
        self.bounds = (s.latency_good, s.latency_bad);
        self.latency_micros = 0;
        for x in self.samples.iter_mut().filter(|x| x.ok) {
            x.micros = (latency_score(x.latency, s) * MICROS) as u64;
            self.latency_micros += x.micros;
        }
    }
}

/// 1 at or below `latency_good`, 0 at or above `latency_bad`, linear between.
fn latency_score(l: Duration, s: &HealthSettings) -> f64 {
    if l <= s.latency_good {
        return 1.0;
    }
    if l >= s.latency_bad {
        return 0.0;
    }
    let span = (s.latency_bad - s.latency_good).as_secs_f64();
    1.0 - (l - s.latency_good).as_secs_f64() / span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_score_equals_a_fresh_pass_through_pushes_prunes_and_reloads() {
        let mut s = HealthSettings::default();
        let t0 = Instant::now();
        let mut w = Window::default();
        let ms = Duration::from_millis;
        for i in 0..250u64 {
            w.push(t0 + ms(i), i % 3 != 0, ms(500 + 37 * i), &s);
            w.prune(t0 + ms(i), Duration::from_secs(300), 100);
        }
        assert_eq!(w.len(), 100);
        let fresh = |w: &Window, s: &HealthSettings| {
            let ok: Vec<_> = w.samples.iter().filter(|x| x.ok).collect();
            let lat = ok.iter().map(|x| latency_score(x.latency, s)).sum::<f64>() / ok.len() as f64;
            100.0 * (0.7 * ok.len() as f64 / w.len() as f64 + 0.3 * lat)
        };
        assert!((w.score(&s) - fresh(&w, &s)).abs() < 1e-4);
        // New latency bounds from a reload: the window is scored by them.
        s.latency_bad = ms(5_000);
        assert!((w.score(&s) - fresh(&w, &s)).abs() < 1e-4);
        w.push(t0 + ms(300), true, ms(100), &s);
        assert!((w.score(&s) - fresh(&w, &s)).abs() < 1e-4);
        // Everything older than the window leaves it.
        w.prune(t0 + ms(300_290), Duration::from_secs(300), 100);
        assert_eq!((w.len(), w.successes()), (1, 1));
        assert_eq!(w.score(&s), 100.0);
    }
}
