//! `[[routers]]` as written: a virtual model whose instances describe, by examples, the prompts
//! they serve. A threshold or the margin is a number or `"auto"` (derived from the examples
//! when they are embedded: `semantic/rule.rs`).

use std::num::NonZeroU64;

use serde::Deserialize;

use super::file::NonEmpty;

/// `[[routers]]`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    pub model: String,
    /// Cosine similarity the best instance must reach (its own `threshold` wins); `"auto"`:
    /// each instance's own, from its examples against the others'.
    #[serde(default)]
    pub threshold: Threshold,
    /// How far the best instance must lead the runner-up to win below its threshold, and the
    /// lead under which two instances are too close to call; `"auto"` from the examples.
    #[serde(default)]
    pub margin: Threshold,
    #[serde(default)]
    pub expose_scores: bool,
    #[serde(default)]
    pub failover: RouterFailover,
    pub embedder: Option<EmbedderConfig>,
    /// The longest a request waits for its prompt's embedding before the catchall serves.
    #[serde(default = "default_embed_timeout")]
    pub timeout_ms: NonZeroU64,
    pub instances: NonEmpty<InstanceConfig>,
}

fn default_embed_timeout() -> NonZeroU64 {
    NonZeroU64::new(2_000).unwrap_or(NonZeroU64::MIN)
}

/// A similarity level: a number in [-1, 1], or `"auto"`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Threshold {
    #[default]
    Auto,
    Fixed(f64),
}

impl schemars::JsonSchema for Threshold {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Threshold".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A similarity level: a number in [-1, 1], or \"auto\".",
            "anyOf": [{"type": "number", "minimum": -1, "maximum": 1}, {"const": "auto"}]
        })
    }
}

impl serde::Serialize for Threshold {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Threshold::Auto => s.serialize_str("auto"),
            Threshold::Fixed(n) => s.serialize_f64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(f64),
            Word(String),
        }
        match Written::deserialize(d) {
            Ok(Written::Number(n)) => Ok(Threshold::Fixed(n)),
            Ok(Written::Word(w)) if w == "auto" => Ok(Threshold::Auto),
            _ => Err(serde::de::Error::custom(
                "expected a number in [-1, 1] or \"auto\"",
            )),
        }
    }
}

/// What a semantic decision becomes: `ranked` = the winner, the other instances that cleared
/// their thresholds (or are too close to call) by score, then the catchall; `catchall` = the
/// winner then the catchall; `none` = the winner alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RouterFailover {
    #[default]
    Ranked,
    Catchall,
    None,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum EmbedderConfig {
    /// A sentence-embedding model run in-process.
    Local { model_dir: String },
    /// Any channel that serves OpenAI `/v1/embeddings`.
    Channel { channel: String, model: String },
    /// Hashed character n-grams: deterministic and weak; the fallback when nothing is set.
    Hashed,
}

/// One instance: the model it routes to and examples of its prompts. The catchall serves when
/// no instance wins; with examples of its own it can also win by similarity.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    pub name: String,
    pub model: String,
    #[serde(default)]
    pub examples: Vec<String>,
    pub threshold: Option<Threshold>,
    #[serde(default)]
    pub catchall: bool,
}
