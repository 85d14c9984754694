//! The series behind `/metrics`: a family maps label values to a cell of atomics. Observing is
//! one hash of borrowed strings, a read lock and relaxed atomic adds: no allocation once a
//! series exists, no lock held across anything. Label values only ever come from the config
//! (or fixed words), so the number of series is bounded by what the config names.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use hashbrown::{DefaultHashBuilder, Equivalent, HashMap};

/// A series' label values, in the family's label order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels<const N: usize>(pub [Arc<str>; N]);

impl<const N: usize> Hash for Labels<N> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for v in &self.0 {
            v.as_ref().hash(h);
        }
    }
}

/// Label values borrowed for a lookup; hashes as [`Labels`] does.
struct Lookup<'a, const N: usize>(&'a [&'a str; N]);

impl<const N: usize> Hash for Lookup<'_, N> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for v in self.0 {
            v.hash(h);
        }
    }
}

impl<const N: usize> Equivalent<Labels<N>> for Lookup<'_, N> {
    fn equivalent(&self, key: &Labels<N>) -> bool {
        self.0.iter().zip(key.0.iter()).all(|(a, b)| *a == &**b)
    }
}

/// Series of one metric, by label values.
pub struct Family<const N: usize, C> {
    pub names: [&'static str; N],
    series: RwLock<HashMap<Labels<N>, Arc<C>>>,
    make: fn() -> C,
}

impl<const N: usize, C> Family<N, C> {
    pub fn new(names: [&'static str; N], make: fn() -> C) -> Self {
        Family {
            names,
            series: RwLock::new(HashMap::with_hasher(DefaultHashBuilder::default())),
            make,
        }
    }

    /// The series for `values`, made on first use.
    pub fn with<R>(&self, values: [&str; N], f: impl FnOnce(&C) -> R) -> R {
        let key = Lookup(&values);
        {
            let map = self.series.read().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = map.get(&key) {
                return f(c);
            }
        }
        let cell = {
            let mut map = self.series.write().unwrap_or_else(|p| p.into_inner());
            map.entry(Labels(values.map(Arc::<str>::from)))
                .or_insert_with(|| Arc::new((self.make)()))
                .clone()
        };
        f(&cell)
    }

    /// Every series, for a scrape (cloned out, so the lock is not held while encoding).
    pub fn series(&self) -> Vec<(Labels<N>, Arc<C>)> {
        let map = self.series.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        all.sort_by(|a, b| a.0.0.cmp(&b.0.0));
        all
    }

    /// Drops the series `keep` says no to (names gone from the config).
    pub fn retain(&self, keep: impl Fn(&Labels<N>) -> bool) {
        let mut map = self.series.write().unwrap_or_else(|p| p.into_inner());
        map.retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.series.read().map_or(0, |m| m.len())
    }
}

/// A monotonic count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bucket bounds in integer units (nanoseconds, tokens), and how many of them make the
/// metric's base unit (1e9 nanoseconds a second).
pub struct Buckets {
    pub bounds: &'static [u64],
    pub per_unit: f64,
}

/// A histogram of integer observations: one count per bucket (the last is +Inf) and the sum.
pub struct Histogram {
    buckets: &'static Buckets,
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    pub fn new(buckets: &'static Buckets) -> Histogram {
        Histogram {
            buckets,
            counts: (0..=buckets.bounds.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: u64) {
        let i = self.buckets.bounds.partition_point(|b| *b < v);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Sum, count and each bucket's own count (not cumulative), in the metric's base unit.
    pub fn read(&self) -> (f64, u64, Vec<(f64, u64)>) {
        // Divided, not multiplied by 1e-9: 0.06 prints as 0.06, not 0.060000000000000008.
        let per_unit = self.buckets.per_unit;
        let mut count = 0;
        let buckets = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let n = c.load(Ordering::Relaxed);
                count += n;
                let le = self
                    .buckets
                    .bounds
                    .get(i)
                    .map_or(f64::INFINITY, |b| *b as f64 / per_unit);
                (le, n)
            })
            .collect();
        let sum = self.sum.load(Ordering::Relaxed) as f64 / per_unit;
        (sum, count, buckets)
    }
}

/// Seconds, observed in nanoseconds.
const NS: f64 = 1e9;

/// `gen_ai.client.operation.duration`'s advisory buckets (seconds).
pub static OPERATION: Buckets = Buckets {
    bounds: &[
        10_000_000,
        20_000_000,
        40_000_000,
        80_000_000,
        160_000_000,
        320_000_000,
        640_000_000,
        1_280_000_000,
        2_560_000_000,
        5_120_000_000,
        10_240_000_000,
        20_480_000_000,
        40_960_000_000,
        81_920_000_000,
    ],
    per_unit: NS,
};

/// `gen_ai.client.token.usage`'s advisory buckets (tokens).
pub static TOKENS: Buckets = Buckets {
    bounds: &[
        1, 4, 16, 64, 256, 1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304, 16_777_216,
        67_108_864,
    ],
    per_unit: 1.0,
};

/// `gen_ai.server.time_to_first_token`'s advisory buckets (seconds).
pub static FIRST_TOKEN: Buckets = Buckets {
    bounds: &[
        1_000_000,
        5_000_000,
        10_000_000,
        20_000_000,
        40_000_000,
        60_000_000,
        80_000_000,
        100_000_000,
        250_000_000,
        500_000_000,
        750_000_000,
        1_000_000_000,
        2_500_000_000,
        5_000_000_000,
        7_500_000_000,
        10_000_000_000,
    ],
    per_unit: NS,
};

/// `gen_ai.server.time_per_output_token`'s advisory buckets (seconds).
pub static PER_TOKEN: Buckets = Buckets {
    bounds: &[
        10_000_000,
        25_000_000,
        50_000_000,
        75_000_000,
        100_000_000,
        150_000_000,
        200_000_000,
        300_000_000,
        400_000_000,
        500_000_000,
        750_000_000,
        1_000_000_000,
        2_500_000_000,
    ],
    per_unit: NS,
};

/// The gateway's own time per request: tens of microseconds up to the odd slow millisecond.
pub static OVERHEAD: Buckets = Buckets {
    bounds: &[
        10_000,
        25_000,
        50_000,
        100_000,
        250_000,
        500_000,
        1_000_000,
        2_500_000,
        5_000_000,
        10_000_000,
        25_000_000,
        100_000_000,
    ],
    per_unit: NS,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_finds_a_series_by_borrowed_values() {
        let f: Family<2, Counter> = Family::new(["a", "b"], Counter::default);
        f.with(["x", "y"], |c| c.add(1));
        f.with(["x", "y"], |c| c.add(2));
        f.with(["x", "z"], |c| c.add(5));
        let all = f.series();
        assert_eq!(all.len(), 2);
        assert_eq!(&*all[0].0.0[1], "y");
        assert_eq!(all[0].1.get(), 3);
        assert_eq!(all[1].1.get(), 5);
        f.retain(|l| &*l.0[1] != "z");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn a_histogram_counts_each_value_in_the_first_bucket_it_fits() {
        static B: Buckets = Buckets {
            bounds: &[10, 100],
            per_unit: 2.0,
        };
        let h = Histogram::new(&B);
        for v in [1, 10, 11, 100, 1000] {
            h.observe(v);
        }
        let (sum, count, buckets) = h.read();
        assert_eq!(count, 5);
        assert_eq!(sum, 1122.0 * 0.5);
        assert_eq!(buckets, vec![(5.0, 2), (50.0, 2), (f64::INFINITY, 1)]);
    }
}
