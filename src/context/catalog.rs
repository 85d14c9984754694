//! The model catalog: each model's context window and default output budget, plus the trimming
//! and context-fallback settings of its route. `[[models]]` entries come first (exact names or
//! globs); built-in defaults for well-known model families fill the rest.

use std::sync::Arc;

use crate::pricing::{Price, PriceConfig};

/// One model's limits and context settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// As configured (a name or a glob), or the built-in family.
    pub name: Arc<str>,
    pub context_window: u64,
    /// Reserved for the reply when the request sets no `max_tokens`.
    pub max_output_tokens: u64,
    /// Trim every request routed to this model.
    pub trim: bool,
    /// When trimming is needed, trim down to this share of the window.
    pub trim_to: f64,
    /// Larger models to route to when a request does not fit this one (and is not trimmed).
    pub context_fallbacks: Vec<Arc<str>>,
    /// What its tokens cost (`None`: no price known; such attempts are charged 0).
    pub price: Option<Arc<Price>>,
}

/// The share of the window trimming aims for by default: below the limit, so that the next
/// turns reuse the same cut and the provider's prompt cache keeps hitting.
pub const DEFAULT_TRIM_TO: f64 = 0.8;

impl ModelInfo {
    pub fn new(name: &str, context_window: u64, max_output_tokens: u64) -> Self {
        ModelInfo {
            name: name.into(),
            context_window,
            max_output_tokens,
            trim: false,
            trim_to: DEFAULT_TRIM_TO,
            context_fallbacks: Vec::new(),
            price: None,
        }
    }

    /// The most prompt tokens a request reserving `output` tokens for the reply may carry:
    /// the window less the output and a safety margin of 2 % (the provider's framing of tools
    /// and images is not published to the token).
    pub fn budget(&self, output: u64) -> u64 {
        self.context_window
            .saturating_sub(output)
            .saturating_sub(self.context_window / 50)
    }

    /// What trimming aims for: `trim_to` of the window, less the output, within the budget.
    pub fn target(&self, output: u64) -> u64 {
        let share = (self.context_window as f64 * self.trim_to) as u64;
        share.saturating_sub(output).min(self.budget(output))
    }
}

/// Who publishes a model on Bedrock: the dotted segment of its id before the model's name
/// (after an optional region segment such as `us.` or `global.`).
const BEDROCK_PUBLISHERS: &[&str] = &[
    "anthropic",
    "amazon",
    "meta",
    "mistral",
    "cohere",
    "ai21",
    "deepseek",
    "openai",
    "qwen",
    "writer",
];

/// A model's name as its family is named: a router's prefix (`openai/`), Bedrock's region and
/// publisher prefixes and version suffix (`-v1:0`), Vertex's version (`@20250929`) left off.
/// Runs on every priced request: byte scans only (a substring search's setup cost 7k
/// instructions a request here).
pub(crate) fn bare_name(model: &str) -> &str {
    let m = model.rsplit('/').next().unwrap_or(model);
    // The rest after the first dotted segment that names a publisher.
    let mut start = 0;
    let mut bare = m;
    for (i, b) in m.bytes().enumerate() {
        if b == b'.' {
            if BEDROCK_PUBLISHERS.contains(&&m[start..i]) {
                bare = &m[i + 1..];
                break;
            }
            start = i + 1;
        }
    }
    let m = bare.split('@').next().unwrap_or(bare);
    // `-v1:0`, `-v2`: Bedrock's model version.
    let version = m.as_bytes().windows(2).rposition(|w| w == b"-v");
    match version {
        Some(i)
            if m[i + 2..]
                .split(':')
                .all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
        {
            &m[..i]
        }
        _ => m,
    }
}

/// Built-in families, as their vendors publish them (`families.toml`).
const FAMILIES: &str = include_str!("families.toml");

#[derive(serde::Deserialize)]
struct Families {
    family: Vec<Family>,
}

#[derive(serde::Deserialize)]
struct Family {
    name: String,
    context_window: u64,
    max_output_tokens: u64,
    price: Option<PriceConfig>,
}

/// The families of `families.toml` (embedded, so checked by a test, never absent at run time).
fn families() -> Vec<ModelInfo> {
    match toml::from_str::<Families>(FAMILIES) {
        Ok(f) => f
            .family
            .iter()
            .map(|m| {
                let mut info = ModelInfo::new(&m.name, m.context_window, m.max_output_tokens);
                info.price = m.price.as_ref().and_then(|p| match p.compile("price.") {
                    Ok(p) => Some(Arc::new(p)),
                    Err((field, why)) => {
                        tracing::error!(family = m.name, field, why, "built-in price unreadable");
                        None
                    }
                });
                info
            })
            .collect(),
        Err(e) => {
            tracing::error!(error = %e, "built-in model families unreadable");
            Vec::new()
        }
    }
}

/// A configured entry's name: exact, or a glob compiled to an anchored regex.
#[derive(Debug)]
pub enum NameMatch {
    Exact,
    Pattern(regex_lite::Regex),
}

impl NameMatch {
    pub fn matches(&self, name: &str, model: &str) -> bool {
        match self {
            NameMatch::Exact => name == model,
            NameMatch::Pattern(re) => re.is_match(model),
        }
    }
}

#[derive(Debug, Default)]
pub struct Catalog {
    configured: Vec<(NameMatch, ModelInfo)>,
    builtin: Vec<ModelInfo>,
    /// `[[models]]` entries that only price a model (no window known).
    prices: Vec<(NameMatch, Arc<str>, Arc<Price>)>,
    /// Some configured entry trims or names context fallbacks (read on every chat request).
    context_settings: bool,
}

impl Catalog {
    /// The built-in families only, longest first so the first family match is the best.
    pub fn builtin() -> Self {
        let mut builtin = families();
        builtin.sort_by_key(|m| std::cmp::Reverse(m.name.len()));
        Catalog {
            configured: Vec::new(),
            builtin,
            prices: Vec::new(),
            context_settings: false,
        }
    }

    /// Adds an entry that only prices a model.
    pub fn push_price(&mut self, matcher: NameMatch, name: Arc<str>, price: Arc<Price>) {
        self.prices.push((matcher, name, price));
    }

    /// What `model`'s tokens cost: the first configured entry that prices it (in file order,
    /// price-only entries after those with a window), else its built-in family's.
    pub fn price(&self, model: &str) -> Option<&Arc<Price>> {
        let configured = self
            .configured
            .iter()
            .filter(|(m, info)| m.matches(&info.name, model))
            .find_map(|(_, info)| info.price.as_ref());
        configured
            .or_else(|| {
                self.prices
                    .iter()
                    .find(|(m, name, _)| m.matches(name, model))
                    .map(|(_, _, p)| p)
            })
            .or_else(|| self.family(model)?.price.as_ref())
    }

    /// Adds a configured entry; configured entries are looked up first, in order.
    pub fn push(&mut self, matcher: NameMatch, info: ModelInfo) {
        self.context_settings |= info.trim || !info.context_fallbacks.is_empty();
        self.configured.push((matcher, info));
    }

    /// The entry for `model`: the first configured one that matches, else its built-in family.
    pub fn lookup(&self, model: &str) -> Option<&ModelInfo> {
        self.configured
            .iter()
            .find(|(m, info)| m.matches(&info.name, model))
            .map(|(_, info)| info)
            .or_else(|| self.family(model))
    }

    /// The built-in family of `model` (`openai/gpt-4o` counts as `gpt-4o`, Bedrock's
    /// `us.anthropic.claude-sonnet-4-5-20250929-v1:0` and Vertex's `claude-sonnet-4-5@20250929`
    /// as `claude-sonnet-4-5…`): the longest family name it starts with.
    pub fn family(&self, model: &str) -> Option<&ModelInfo> {
        let bare = bare_name(model);
        self.builtin
            .iter()
            .filter(|m| {
                bare.strip_prefix(&*m.name)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
            })
            .max_by_key(|m| m.name.len())
    }

    /// Whether any configured entry trims or names context fallbacks: when none does and no
    /// key or request asks for trimming, requests are not even counted.
    pub fn any_context_settings(&self) -> bool {
        self.context_settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_families_all_load() {
        let f = families();
        assert_eq!(f.len(), FAMILIES.matches("[[family]]").count());
        assert!(f.len() >= 20);
        assert!(
            f.iter()
                .all(|m| m.max_output_tokens < m.context_window || m.name.as_ref() == "gpt-4")
        );
        // Every written price compiles (an unreadable one would be logged and dropped).
        let written = FAMILIES.matches("\nprice = ").count();
        assert_eq!(f.iter().filter(|m| m.price.is_some()).count(), written);
        assert!(written >= 25, "{written}");
    }

    #[test]
    fn built_in_prices_follow_the_longest_family_and_their_tiers() {
        let c = Catalog::builtin();
        let price = |m: &str| c.lookup(m).and_then(|i| i.price.clone()).unwrap();
        // $2.50 / $10 per 1M for gpt-4o; $0.15 / $0.60 for gpt-4o-mini.
        assert_eq!(price("gpt-4o-2024-08-06").base.input, 2_500_000);
        assert_eq!(price("gpt-4o-mini").base.output, 600_000);
        let sonnet = price("claude-sonnet-4-5-20250929");
        assert_eq!(sonnet.rates(200_001).input, 6_000_000);
        assert_eq!(sonnet.base.cache_write, 3_750_000);
        assert!(c.lookup("claude-3-opus-20240229").unwrap().price.is_none());
    }

    #[test]
    fn a_clouds_id_for_a_model_is_priced_and_sized_as_its_family() {
        let c = Catalog::builtin();
        for id in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "claude-sonnet-4-5@20250929",
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            let info = c.lookup(id).unwrap_or_else(|| panic!("{id}"));
            assert_eq!(info.context_window, 200_000, "{id}");
            assert_eq!(info.price.as_ref().unwrap().base.input, 3_000_000, "{id}");
        }
        assert_eq!(
            bare_name("gemini-2.5-flash-lite@001"),
            "gemini-2.5-flash-lite"
        );
        assert_eq!(
            c.lookup("gemini-2.5-flash-lite").unwrap().name.as_ref(),
            "gemini-2.5-flash-lite"
        );
        assert_eq!(bare_name("gpt-4.1"), "gpt-4.1");
        assert_eq!(bare_name("amazon.nova-pro-v1:0"), "nova-pro");
    }

    #[test]
    fn families_match_dated_and_prefixed_names_longest_first() {
        let c = Catalog::builtin();
        let w = |m: &str| c.lookup(m).map(|i| (i.name.to_string(), i.context_window));
        assert_eq!(
            w("gpt-4o-mini-2024-07-18"),
            Some(("gpt-4o-mini".into(), 128_000))
        );
        assert_eq!(w("gpt-4-0613"), Some(("gpt-4".into(), 8_192)));
        assert_eq!(w("gpt-4.1-nano"), Some(("gpt-4.1-nano".into(), 1_047_576)));
        assert_eq!(w("gpt-4.1-2025-04-14"), Some(("gpt-4.1".into(), 1_047_576)));
        assert_eq!(w("openai/gpt-4o"), Some(("gpt-4o".into(), 128_000)));
        assert_eq!(
            w("claude-sonnet-4-5-20250929"),
            Some(("claude-sonnet-4".into(), 200_000))
        );
        // A family continues only after a dash: `gpt-4o` is not `gpt-4`.
        assert_eq!(w("gpt-4o").unwrap().0, "gpt-4o");
        assert_eq!(w("gpt-40"), None);
        assert_eq!(w("demo"), None);
    }

    #[test]
    fn configured_entries_come_first_and_globs_match() {
        let mut c = Catalog::builtin();
        c.push(NameMatch::Exact, ModelInfo::new("gpt-4o", 1_000, 100));
        c.push(
            NameMatch::Pattern(regex_lite::Regex::new("^(?:local-.*)$").unwrap()),
            ModelInfo::new("local-*", 4_096, 512),
        );
        assert_eq!(c.lookup("gpt-4o").unwrap().context_window, 1_000);
        assert_eq!(
            c.lookup("gpt-4o-2024-08-06").unwrap().context_window,
            128_000
        );
        assert_eq!(c.lookup("local-llama").unwrap().context_window, 4_096);
    }

    #[test]
    fn the_budget_leaves_room_for_the_reply_and_a_margin() {
        let m = ModelInfo::new("m", 10_000, 1_000);
        assert_eq!(m.budget(1_000), 10_000 - 1_000 - 200);
        assert_eq!(m.target(1_000), 8_000 - 1_000);
        // A reply reservation larger than the window leaves nothing.
        assert_eq!(m.budget(20_000), 0);
    }
}
