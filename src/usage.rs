//! What a request cost: a charge per upstream attempt, priced by the channel's, the model's or
//! the family's price (`Snapshot::price`). Taken when the attempts end ([`Pending::of`]),
//! finished when the answer's usage is known (at once, or when a stream ends).

use std::sync::Arc;

use crate::exec::Report;
use crate::pricing::{Price, Tokens};
use crate::spend::Holds;
use crate::store::{Charge, LogRow};

/// A request's charges before its usage is known: every call's row (0 for a failed call), the
/// serving call's price, and the first choice's (what a failover is compared with).
#[derive(Debug, Default)]
pub struct Pending {
    charges: Vec<Charge>,
    /// The last call served (its price, if one is known).
    serving: bool,
    served: Option<Arc<Price>>,
    first: Option<Arc<Price>>,
    /// The request's prompt as the gateway counts it: the input charged when the upstream
    /// reports no usage.
    pub prompt_estimate: u64,
    /// Its budget and limit holds, settled to its cost when it is finished.
    pub holds: Option<Holds>,
}

/// The tokens a served answer used: as the upstream reported them, or counted by the gateway.
#[derive(Debug, Clone, Copy)]
pub struct Used {
    pub tokens: Tokens,
    pub estimated: bool,
}

impl Used {
    /// A whole answer's tokens: its usage, else counted (the prompt as estimated, the reply's
    /// text at about 4 characters a token).
    pub fn of_answer(resp: &crate::protocol::ChatResponse, prompt_estimate: u64) -> Used {
        if let Some(u) = &resp.usage {
            return Used {
                tokens: Tokens::of(u),
                estimated: false,
            };
        }
        let chars: usize = resp
            .choices
            .iter()
            .map(|c| c.message.content.as_ref().map_or(0, |t| t.text_len()))
            .sum();
        Used::estimated(prompt_estimate, (chars as u64).div_ceil(4))
    }

    pub fn estimated(input: u64, output: u64) -> Used {
        Used {
            tokens: Tokens {
                input,
                output,
                ..Tokens::default()
            },
            estimated: true,
        }
    }
}

impl Pending {
    /// What `tokens` cost at the serving call's price (the stream's running cost).
    pub fn cost_of(&self, tokens: &Tokens) -> u64 {
        self.served.as_ref().map_or(0, |p| p.cost(tokens))
    }

    /// A response-cache hit's one ledger row: no upstream call, what the answer cost when it
    /// was made as what the hit saved (channel `cache`, outcome `cache_hit`), and that cost
    /// charged only when `charged` (`[cache] charge_hits`, for resellers).
    pub fn cache_hit(
        model: Arc<str>,
        saved_micros: u64,
        prompt_estimate: u64,
        charged: bool,
    ) -> Pending {
        Pending {
            charges: vec![Charge {
                attempt: 1,
                channel: "cache".into(),
                credential: None,
                model: model.clone(),
                upstream_model: model,
                tokens: Tokens::default(),
                cost_micros: if charged { saved_micros } else { 0 },
                price: None,
                outcome: "cache_hit".into(),
                estimated: false,
                first_choice_micros: None,
                cache_saved_micros: i64::try_from(saved_micros).unwrap_or(i64::MAX),
            }],
            // Not a served call: its tokens were paid for once, by the answer it replays, and
            // `finish` leaves the row as made here.
            serving: false,
            prompt_estimate,
            ..Pending::default()
        }
    }

    /// The charges of `report`'s upstream calls (channels skipped are not calls).
    pub fn of(report: &Report, prompt_estimate: u64) -> Pending {
        let mut p = Pending {
            prompt_estimate,
            ..Pending::default()
        };
        let calls = report.attempts.iter().filter(|a| a.skip.is_none());
        for (i, a) in calls.enumerate() {
            let upstream = a.upstream_model.clone().unwrap_or_else(|| a.model.clone());
            let priced = a.price.clone();
            if i == 0 {
                p.first = priced.clone();
            }
            p.charges.push(Charge {
                attempt: i as u32 + 1,
                channel: a.channel.clone(),
                credential: a.credential.clone(),
                model: a.model.clone(),
                upstream_model: upstream,
                tokens: Tokens::default(),
                cost_micros: 0,
                price: priced,
                outcome: a.class.map_or("ok", |c| c.as_str()).into(),
                estimated: false,
                first_choice_micros: None,
                cache_saved_micros: 0,
            });
        }
        if report.served.is_some() && p.called() {
            p.serving = true;
            p.served = p.charges.last().and_then(|c| c.price.clone());
        }
        p
    }

    /// Whether any upstream call was made.
    pub fn called(&self) -> bool {
        !self.charges.is_empty()
    }

    /// Prices the serving call's tokens (`None`: nothing was served) and writes the charges and
    /// their sum into `row`; returns the sum. A stream that broke after commit is charged for
    /// what it delivered, its row's outcome naming the break.
    pub fn finish(mut self, used: Option<Used>, broke: Option<&str>, row: &mut LogRow) -> u64 {
        let calls = self.charges.len();
        if let (Some(u), Some(last), true) = (used, self.charges.last_mut(), self.serving) {
            last.tokens = u.tokens;
            last.estimated = u.estimated;
            last.cost_micros = self.served.as_ref().map_or(0, |p| p.cost(&u.tokens));
            // A response-cache hit keeps what it saved: the answer's cost when it was made.
            if let Some(p) = self.served.as_ref() {
                let uncached = Tokens {
                    cached_input: 0,
                    cache_write: 0,
                    ..u.tokens
                };
                last.cache_saved_micros = p.cost(&uncached) as i64 - last.cost_micros as i64;
            }
            if calls > 1 {
                last.first_choice_micros = self.first.as_ref().map(|p| p.cost(&u.tokens));
            }
            if let Some(b) = broke {
                last.outcome = b.to_string().into();
            }
        }
        let total = self
            .charges
            .iter()
            .fold(0u64, |a, c| a.saturating_add(c.cost_micros));
        row.cost_micros = self.called().then_some(total);
        row.charges = std::mem::take(&mut self.charges);
        if let Some(h) = self.holds.take() {
            let tokens = used.map_or(0, |u| u.tokens.input.saturating_add(u.tokens.output));
            h.settle(total, tokens);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Snapshot;
    use crate::exec::{AttemptRecord, OutcomeClass, Served};
    use crate::provider::HttpClients;

    fn snap() -> Snapshot {
        let text = r#"
            [[channels]]
            name = "cheap"
            provider = "mock"
            models = ["m"]
            price = { input = 1, output = 2 }
            [[channels]]
            name = "dear"
            provider = "mock"
            models = ["m"]
            priority = 2
            price = { input = 10, output = 20 }
        "#;
        crate::config::load_str(text, "t.toml", &|_| None, &HttpClients::default()).unwrap()
    }

    fn call(snap: &Snapshot, channel: &str, class: Option<OutcomeClass>) -> AttemptRecord {
        let ch = snap.channels.iter().position(|c| &*c.name == channel);
        let route = snap.models["m"].iter().find(|r| Some(r.channel) == ch);
        AttemptRecord {
            price: route.and_then(|r| r.price.clone()),
            channel: channel.into(),
            model: "m".into(),
            status: Some(if class.is_some() { 500 } else { 200 }),
            class,
            latency_ms: 1,
            skip: None,
            upstream_model: Some("m-up".into()),
            credential: Some("k1".into()),
            provider: None,
            timing: None,
        }
    }

    #[test]
    fn a_failover_is_charged_at_the_backups_price_with_a_row_per_call() {
        let snap = snap();
        let mut report = Report::new("m");
        report.attempts = vec![
            call(&snap, "cheap", Some(OutcomeClass::ServerError)),
            AttemptRecord {
                skip: Some(crate::health::Skip::CircuitOpen),
                ..call(&snap, "other", None)
            },
            call(&snap, "dear", None),
        ];
        report.served = Some(Served {
            channel: "dear".into(),
            model: "m".into(),
            upstream_model: "m-up".into(),
        });
        let mut row = LogRow::default();
        let used = Used {
            tokens: Tokens {
                input: 1_000,
                output: 100,
                ..Tokens::default()
            },
            estimated: false,
        };
        let total = Pending::of(&report, 0).finish(Some(used), None, &mut row);
        // 1000 × $10 + 100 × $20 per 1M = 10_000 + 2_000 µ$.
        assert_eq!(total, 12_000);
        assert_eq!(row.cost_micros, Some(12_000));
        let c = &row.charges;
        assert_eq!(c.len(), 2, "the skipped channel is not a call");
        assert_eq!(
            (c[0].attempt, c[0].cost_micros, &*c[0].outcome),
            (1, 0, "server_error")
        );
        assert_eq!(
            (c[1].attempt, &*c[1].channel, &*c[1].outcome),
            (2, "dear", "ok")
        );
        assert_eq!(c[1].first_choice_micros, Some(1_200));
        assert_eq!(c[1].credential.as_deref(), Some("k1"));
        assert_ne!(
            c[0].price.as_ref().unwrap().version,
            c[1].price.as_ref().unwrap().version
        );
    }

    #[test]
    fn nothing_served_costs_nothing_and_no_call_leaves_no_cost() {
        let snap = snap();
        let mut report = Report::new("m");
        report.attempts = vec![call(&snap, "cheap", Some(OutcomeClass::Timeout))];
        let mut row = LogRow::default();
        assert_eq!(Pending::of(&report, 5).finish(None, None, &mut row), 0);
        assert_eq!((row.cost_micros, row.charges.len()), (Some(0), 1));
        let mut row = LogRow::default();
        Pending::of(&Report::new("m"), 5).finish(None, None, &mut row);
        assert_eq!((row.cost_micros, row.charges.len()), (None, 0));
    }
}
