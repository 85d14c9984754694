//! Prices and cost: what an attempt's tokens cost, in integer micro-dollars (no floats in any
//! sum). A [`Price`] holds rates per 1M tokens by kind, with tiers by prompt length where the
//! provider has them, and a version (a hash of its rates) that every charge records. Prices come
//! from the built-in families (`context/families.toml`), `[[models]] price`, and `[[channels]]
//! price`; `config` decides which applies.

use std::fmt::Write as _;

use serde::Deserialize;

use crate::protocol::Usage;

/// Rates in micro-dollars per 1M tokens (so $2.50 per 1M is 2_500_000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Rates {
    pub input: u64,
    pub output: u64,
    /// Prompt tokens read from the provider's cache (default: the input rate).
    pub cached_input: u64,
    /// Prompt tokens written to the provider's cache (default: the input rate).
    pub cache_write: u64,
    /// Output tokens spent reasoning (default: the output rate).
    pub reasoning: u64,
}

/// One price set: base rates, then tiers for longer prompts (ascending by `above`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Price {
    pub base: Rates,
    /// `(above, rates)`: a prompt of more than `above` tokens is priced at `rates`.
    pub tiers: Vec<(u64, Rates)>,
    /// 8 hex digits of a SHA-256 over the rates: the same rates always have the same version.
    pub version: String,
}

/// An attempt's tokens by kind. `input` counts every prompt token (cached ones too) and
/// `output` every generated one (reasoning too), as OpenAI reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub cached_input: u64,
    pub cache_write: u64,
    pub output: u64,
    pub reasoning: u64,
}

impl Tokens {
    /// The tokens of an upstream's usage.
    pub fn of(u: &Usage) -> Tokens {
        let cache_write = u.cache_write_tokens.unwrap_or(0);
        let input = u.input_tokens.unwrap_or(0);
        let output = u.output_tokens.unwrap_or(0);
        Tokens {
            input,
            cached_input: u.cached_tokens.unwrap_or(0).min(input),
            cache_write: cache_write.min(input),
            output,
            reasoning: u.reasoning_tokens.unwrap_or(0).min(output),
        }
    }
}

/// Tokens × rate per 1M, rounded up: a charge is never under what the provider would bill.
fn times(tokens: u64, per_million: u64) -> u64 {
    (u128::from(tokens) * u128::from(per_million))
        .div_ceil(1_000_000)
        .try_into()
        .unwrap_or(u64::MAX)
}

impl Price {
    pub fn new(base: Rates, mut tiers: Vec<(u64, Rates)>) -> Price {
        tiers.sort_by_key(|(above, _)| *above);
        let mut text = String::new();
        for (above, r) in std::iter::once((0, &base)).chain(tiers.iter().map(|(a, r)| (*a, r))) {
            let _ = write!(
                text,
                "{above}:{}/{}/{}/{}/{};",
                r.input, r.output, r.cached_input, r.cache_write, r.reasoning
            );
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        let version = crate::secret::hex(&digest.as_ref()[..4]);
        Price {
            base,
            tiers,
            version,
        }
    }

    /// The rates a prompt of `prompt` tokens is priced at.
    pub fn rates(&self, prompt: u64) -> &Rates {
        self.tiers
            .iter()
            .rev()
            .find(|(above, _)| prompt > *above)
            .map_or(&self.base, |(_, r)| r)
    }

    /// What `t` costs, in micro-dollars.
    pub fn cost(&self, t: &Tokens) -> u64 {
        let r = self.rates(t.input);
        let cached = t.cached_input.min(t.input);
        let written = t.cache_write.min(t.input - cached);
        let plain_in = t.input - cached - written;
        let reasoning = t.reasoning.min(t.output);
        [
            times(plain_in, r.input),
            times(cached, r.cached_input),
            times(written, r.cache_write),
            times(t.output - reasoning, r.output),
            times(reasoning, r.reasoning),
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// The most a request of `prompt` tokens reserving `output` for the reply can cost: the
    /// reservation a budget holds before the first attempt.
    pub fn worst_case(&self, prompt: u64, output: u64) -> u64 {
        let r = self.rates(prompt);
        let out = r.output.max(r.reasoning);
        let inp = r.input.max(r.cache_write);
        times(prompt, inp).saturating_add(times(output, out))
    }
}

/// `price = { input, output, cached_input, cache_write, reasoning, tiers }` as written: USD per
/// 1M tokens.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub input: f64,
    pub output: f64,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
    pub reasoning: Option<f64>,
    #[serde(default)]
    pub tiers: Vec<TierConfig>,
}

/// `{ above = 200_000, input, output, ... }`: the rates for prompts longer than `above` tokens.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    pub above: u64,
    pub input: f64,
    pub output: f64,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
    pub reasoning: Option<f64>,
}

/// A price that is not a price: the field and why.
pub type PriceError = (String, String);

/// USD per 1M tokens → micro-dollars per 1M tokens; at most $100,000 per 1M.
fn micros(field: &str, usd: f64) -> Result<u64, PriceError> {
    if !usd.is_finite() || !(0.0..=100_000.0).contains(&usd) {
        return Err((
            field.into(),
            format!("must be a price in USD per 1M tokens between 0 and 100000, not {usd}"),
        ));
    }
    Ok((usd * 1_000_000.0).round() as u64)
}

#[allow(clippy::too_many_arguments)]
fn rates(
    at: &str,
    input: f64,
    output: f64,
    cached: Option<f64>,
    write: Option<f64>,
    reasoning: Option<f64>,
) -> Result<Rates, PriceError> {
    let f = |name: &str| format!("{at}{name}");
    let input = micros(&f("input"), input)?;
    let output = micros(&f("output"), output)?;
    Ok(Rates {
        input,
        output,
        cached_input: cached.map_or(Ok(input), |v| micros(&f("cached_input"), v))?,
        cache_write: write.map_or(Ok(input), |v| micros(&f("cache_write"), v))?,
        reasoning: reasoning.map_or(Ok(output), |v| micros(&f("reasoning"), v))?,
    })
}

impl PriceConfig {
    /// The price, or the field (under `at`, such as `models[0].price.`) that is wrong.
    pub fn compile(&self, at: &str) -> Result<Price, PriceError> {
        let base = rates(
            at,
            self.input,
            self.output,
            self.cached_input,
            self.cache_write,
            self.reasoning,
        )?;
        let mut tiers = Vec::with_capacity(self.tiers.len());
        for (i, t) in self.tiers.iter().enumerate() {
            let at = format!("{at}tiers[{i}].");
            if tiers.iter().any(|(above, _)| *above == t.above) {
                return Err((format!("{at}above"), "is given twice".into()));
            }
            let r = rates(
                &at,
                t.input,
                t.output,
                t.cached_input,
                t.cache_write,
                t.reasoning,
            )?;
            tiers.push((t.above, r));
        }
        Ok(Price::new(base, tiers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(toml_text: &str) -> Result<Price, PriceError> {
        toml::from_str::<PriceConfig>(toml_text)
            .map_err(|e| ("toml".into(), e.to_string()))?
            .compile("price.")
    }

    #[test]
    fn cost_is_integer_micros_by_kind_rounded_up() {
        let p = price("input = 2.5\noutput = 10\ncached_input = 1.25").unwrap();
        let t = Tokens {
            input: 1_000,
            cached_input: 400,
            output: 100,
            ..Tokens::default()
        };
        // 600 × 2.5 + 400 × 1.25 + 100 × 10 micro-dollars.
        assert_eq!(p.cost(&t), 1_500 + 500 + 1_000);
        // One token at $0.15 per 1M is 0.15 µ$: charged as 1, never 0.
        let cheap = price("input = 0.15\noutput = 0.6").unwrap();
        let one = Tokens {
            input: 1,
            ..Tokens::default()
        };
        assert_eq!(cheap.cost(&one), 1);
        assert_eq!(cheap.cost(&Tokens::default()), 0);
    }

    #[test]
    fn reasoning_and_cache_writes_have_their_own_rates_and_default_to_the_base() {
        let p = price("input = 1\noutput = 4\nreasoning = 8\ncache_write = 2").unwrap();
        let t = Tokens {
            input: 1_000,
            cache_write: 1_000,
            output: 1_000,
            reasoning: 500,
            ..Tokens::default()
        };
        assert_eq!(p.cost(&t), 2_000 + 500 * 4 + 500 * 8);
        let d = price("input = 1\noutput = 4").unwrap();
        assert_eq!(d.base.reasoning, 4_000_000);
        assert_eq!(d.base.cached_input, 1_000_000);
    }

    #[test]
    fn tiers_price_long_prompts_and_versions_follow_the_rates() {
        let p = price(
            "input = 1.25\noutput = 10\ntiers = [{ above = 200000, input = 2.5, output = 15 }]",
        )
        .unwrap();
        let at = |input| Tokens {
            input,
            output: 1_000,
            ..Tokens::default()
        };
        assert_eq!(p.cost(&at(200_000)), 250_000 + 10_000);
        assert_eq!(p.cost(&at(200_001)), 500_003 + 15_000);
        let same = price(
            "input = 1.25\noutput = 10\ntiers = [{ above = 200000, input = 2.5, output = 15 }]",
        )
        .unwrap();
        let other = price("input = 1.25\noutput = 10").unwrap();
        assert_eq!(p.version, same.version);
        assert_ne!(p.version, other.version);
        assert_eq!(p.version.len(), 8);
        assert_eq!(p.worst_case(1_000, 1_000), 1_250 + 10_000);
    }

    #[test]
    fn bad_prices_name_their_field() {
        let cases = [
            ("input = -1\noutput = 1", "price.input"),
            ("input = 1\noutput = 1\nreasoning = 1e9", "price.reasoning"),
            (
                "input = 1\noutput = 1\ntiers = [{ above = 5, input = 1, output = 1 }, { above = 5, input = 2, output = 2 }]",
                "price.tiers[1].above",
            ),
            (
                "input = 1\noutput = 1\ntiers = [{ above = 5, input = nan, output = 1 }]",
                "price.tiers[0].input",
            ),
        ];
        for (text, field) in cases {
            assert_eq!(price(text).unwrap_err().0, field, "{text}");
        }
    }

    #[test]
    fn tokens_of_usage_read_every_kind_and_stay_within_their_totals() {
        let u = Usage {
            input_tokens: Some(100),
            output_tokens: Some(50),
            cached_tokens: Some(500),
            reasoning_tokens: Some(20),
            cache_write_tokens: Some(30),
            ..Usage::default()
        };
        let t = Tokens::of(&u);
        assert_eq!(
            t,
            Tokens {
                input: 100,
                cached_input: 100,
                cache_write: 30,
                output: 50,
                reasoning: 20
            }
        );
    }
}
