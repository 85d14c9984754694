//! What a gateway key or a channel may spend and how fast: `budget = { usd, period, ... }`,
//! `rpm`, `tpm`, `max_concurrency`, as written and compiled into a [`Quota`]. Admission against
//! it is the `spend` module's.

use std::num::{NonZeroU32, NonZeroU64};

use serde::Deserialize;

/// The window a budget's spend is summed over (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Week,
    #[default]
    Month,
    Total,
}

impl Period {
    /// The period `now_ms` falls in, as a stable id (`d20261202`, `w20261130` for the week
    /// starting Monday 30 November, `m202612`, `total`), and when it ends (ms since the epoch).
    pub fn at(self, now_ms: i64) -> (String, i64) {
        const DAY: i64 = 86_400_000;
        let days = now_ms.div_euclid(DAY);
        let (y, m, d) = civil(days);
        match self {
            Period::Day => (format!("d{y:04}{m:02}{d:02}"), (days + 1) * DAY),
            Period::Week => {
                // 1970-01-01 was a Thursday: Monday is 3 days before it.
                let monday = days - (days + 3).rem_euclid(7);
                let (y, m, d) = civil(monday);
                (format!("w{y:04}{m:02}{d:02}"), (monday + 7) * DAY)
            }
            Period::Month => {
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (format!("m{y:04}{m:02}"), days_from_civil(ny, nm, 1) * DAY)
            }
            Period::Total => ("total".into(), i64::MAX),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Total => "total",
        }
    }
}

/// Days since the epoch → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What happens when the counter every replica shares cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fail {
    /// Refuse (503 `budget_unavailable`): the default for money.
    Closed,
    /// Admit on this replica's own count and settle later: the default for rates.
    #[default]
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    #[default]
    Block,
}

/// `budget = { usd, period = "day" | "week" | "month" | "total", on_exhausted = "block",
/// soft, fail }`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub usd: f64,
    #[serde(default)]
    pub period: Period,
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// Channels only: past this share of the budget the channel ranks after its peers.
    pub soft: Option<f64>,
    pub fail: Option<Fail>,
}

/// A scope's limits, compiled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quota {
    pub budget: Option<Budget>,
    /// Requests admitted in any 60 s window, across every replica.
    pub rpm: Option<u32>,
    /// Tokens (estimated at admission, settled to the real count) in any 60 s window.
    pub tpm: Option<u64>,
    /// Requests in flight at once.
    pub max_concurrency: Option<u32>,
    /// For `rpm`, `tpm` and `max_concurrency` when the shared counter is unreachable.
    pub rate_fail: Fail,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub micros: u64,
    pub period: Period,
    pub soft: Option<f64>,
    pub fail: Fail,
}

impl Budget {
    /// Whether `ask` fits beside `used` (spent and held): even a free request needs room left.
    /// The Redis script and `switchyard_admit` say the same in their languages.
    pub fn admits(&self, used: u64, ask: u64) -> bool {
        used.saturating_add(ask.max(1)) <= self.micros
    }
}

impl Quota {
    /// Whether it refuses while the shared counter does not answer: a budget that fails
    /// closed, or rate limits that do.
    pub fn fails_closed(&self) -> bool {
        let rates = self.rpm.is_some() || self.tpm.is_some() || self.max_concurrency.is_some();
        self.budget.is_some_and(|b| b.fail == Fail::Closed)
            || (rates && self.rate_fail == Fail::Closed)
    }

    pub fn is_empty(&self) -> bool {
        self.budget.is_none()
            && self.rpm.is_none()
            && self.tpm.is_none()
            && self.max_concurrency.is_none()
    }
}

/// The limit fields of a key or a channel as written.
pub struct QuotaFields<'a> {
    pub budget: Option<&'a BudgetConfig>,
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    pub limits_fail: Option<Fail>,
    /// `soft` is a channel's (a key has no peers to rank after).
    pub channel: bool,
}

/// The quota, or the field (relative to the entry) and why it is wrong.
pub fn compile(f: QuotaFields) -> Result<Quota, (&'static str, String)> {
    let budget = match f.budget {
        None => None,
        Some(b) => {
            if !b.usd.is_finite() || !(0.0..=1e9).contains(&b.usd) {
                return Err((
                    "budget.usd",
                    format!("must be an amount in USD between 0 and 1e9, not {}", b.usd),
                ));
            }
            if let Some(s) = b.soft {
                if !f.channel {
                    return Err((
                        "budget.soft",
                        "is for channels: it ranks a channel near its budget after its peers"
                            .into(),
                    ));
                }
                if !(s > 0.0 && s < 1.0) {
                    return Err(("budget.soft", format!("must be in (0, 1), not {s}")));
                }
            }
            Some(Budget {
                micros: (b.usd * 1_000_000.0).round() as u64,
                period: b.period,
                soft: b.soft,
                fail: b.fail.unwrap_or(Fail::Closed),
            })
        }
    };
    Ok(Quota {
        budget,
        rpm: f.rpm.map(NonZeroU32::get),
        tpm: f.tpm.map(NonZeroU64::get),
        max_concurrency: f.max_concurrency.map(NonZeroU32::get),
        rate_fail: f.limits_fail.unwrap_or(Fail::Open),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_have_stable_ids_and_end_at_the_next_boundary() {
        // 2026-12-02T13:00:00Z, a Wednesday.
        let t = 1_796_216_400_000;
        assert_eq!(Period::Day.at(t).0, "d20261202");
        assert_eq!(Period::Week.at(t).0, "w20261130");
        assert_eq!(Period::Month.at(t).0, "m202612");
        assert_eq!(Period::Total.at(t), ("total".into(), i64::MAX));
        let (_, end) = Period::Month.at(t);
        assert_eq!(Period::Month.at(end).0, "m202701");
        assert_eq!(Period::Month.at(end - 1).0, "m202612");
        let (_, end) = Period::Week.at(t);
        assert_eq!(Period::Week.at(end).0, "w20261207");
        assert_eq!(Period::Day.at(0).0, "d19700101");
        // A leap day.
        assert_eq!(Period::Day.at(1_709_164_800_000).0, "d20240229");
    }

    #[test]
    fn bad_budgets_name_their_field() {
        let b = |usd, soft| BudgetConfig {
            usd,
            period: Period::Day,
            on_exhausted: OnExhausted::Block,
            soft,
            fail: None,
        };
        let check = |budget: BudgetConfig, channel: bool| {
            compile(QuotaFields {
                budget: Some(&budget),
                rpm: None,
                tpm: None,
                max_concurrency: None,
                limits_fail: None,
                channel,
            })
        };
        assert_eq!(check(b(-1.0, None), false).unwrap_err().0, "budget.usd");
        assert_eq!(
            check(b(1.0, Some(0.8)), false).unwrap_err().0,
            "budget.soft"
        );
        assert_eq!(check(b(1.0, Some(1.5)), true).unwrap_err().0, "budget.soft");
        let q = check(b(0.25, Some(0.8)), true).unwrap();
        let budget = q.budget.unwrap();
        assert_eq!((budget.micros, budget.fail), (250_000, Fail::Closed));
        assert_eq!(q.rate_fail, Fail::Open);
    }
}
