//! A request that must fit several levels at once (an end user, its key, the key's team up to
//! the organisation): every level checked and held in one atomic step of the backend, or none
//! held; and settled in one step.

use std::sync::Arc;
use std::time::Duration;

use super::{Ask, Backend, Hold, Meter, Refusal};
use crate::config::quota::Quota;

/// The levels one request must fit.
#[derive(Debug)]
pub struct Levels<'a> {
    /// The hash tag every level's counters share: the organisation's scope.
    pub tag: Arc<str>,
    /// From the narrowest (an end user, or the key) up to the organisation.
    pub levels: Vec<(Arc<str>, &'a Quota)>,
    /// `levels[0]` is an end user, one of at most `.1` that team `.0` counts.
    pub user: Option<(&'a Arc<str>, u64)>,
}

impl Levels<'_> {
    /// Whether a level refuses when the shared counter does not answer.
    fn fails_closed(&self) -> bool {
        self.levels.iter().any(|(_, q)| q.fails_closed())
    }
}

/// The levels' verdict on one ask.
#[derive(Debug)]
pub enum Admission {
    /// One hold per level, in the levels' order.
    Held(Vec<Hold>),
    Refused(Refusal),
    /// The shared counter did not answer and a level fails closed.
    Unavailable,
}

impl Meter {
    /// Checks `ask` against every level and, if all have room, takes it at all of them.
    pub async fn admit_levels(&self, l: &Levels<'_>, ask: Ask, ttl: Duration) -> Admission {
        let now = crate::clock::unix_ms();
        let (shared, local) = match &self.backend {
            Backend::Memory(m) => (Some(m.admit_levels(l, ask, ttl, now)), None),
            Backend::Redis(r) => (Box::pin(r.admit_levels(l, ask, ttl)).await, Some(r.local())),
            Backend::Postgres(p) => (
                Box::pin(p.admit_levels(l, ask, ttl, now)).await,
                Some(p.local()),
            ),
        };
        let verdict = match (shared, local) {
            (Some(v), _) => v,
            (None, Some(local)) if !l.fails_closed() => {
                local.admit_levels(l, ask, ttl, now).map(|mut holds| {
                    holds.iter_mut().for_each(|h| h.local = true);
                    holds
                })
            }
            (None, _) => return Admission::Unavailable,
        };
        match verdict {
            Ok(mut holds) => {
                for (h, (_, q)) in holds.iter_mut().zip(&l.levels) {
                    h.cap = q.budget.map_or(0, |b| b.micros);
                }
                Admission::Held(holds)
            }
            Err(r) => {
                if let Some((_, q)) = l.levels.iter().find(|(s, _)| *s == r.scope) {
                    self.refused_event(&r, q, now);
                }
                Admission::Refused(r)
            }
        }
    }

    /// Settles one admission's holds (every level of it) in one step of the shared counter.
    pub(super) async fn settle_levels(&self, holds: &[Hold], cost: u64, tokens: u64) {
        // In process, `Holds` settled them before any task (`Meter::settle_here`).
        if let Backend::Memory(_) = &self.backend {
            return;
        }
        for h in holds {
            self.seen_settled(h, cost);
        }
        let after = match &self.backend {
            Backend::Memory(_) => return,
            Backend::Redis(r) => {
                settle_local(r.local(), holds, cost, tokens);
                Box::pin(r.settle_levels(holds, cost, tokens)).await
            }
            Backend::Postgres(p) => {
                settle_local(p.local(), holds, cost, tokens);
                Box::pin(p.settle_levels(holds, cost, tokens)).await
            }
        };
        for (h, a) in holds.iter().zip(after) {
            self.crossed(h, cost, a);
        }
    }
}

/// Holds taken from this replica's own meters (the shared counter was down) settle there too.
fn settle_local(local: &super::MemoryMeters, holds: &[Hold], cost: u64, tokens: u64) {
    for h in holds.iter().filter(|h| h.local) {
        local.settle(h, cost, tokens);
    }
}
