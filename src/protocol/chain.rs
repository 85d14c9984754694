//! The chain a caller asks for in the body (`models`, `fallback_models`, `redundancy`), on OpenAI
//! and Anthropic ingress. Taken out of the body before the protocol parse, so these fields never
//! reach an upstream.

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::InvalidRequest;

/// Distinct models a caller may write in one chain.
pub const MAX_MODELS: usize = 3;
/// `timeout_ms`: one non-streaming attempt.
pub const TIMEOUT_MS: RangeInclusive<u64> = 1_000..=300_000;
/// `first_token_timeout_ms`: a streaming attempt, to its first content.
pub const FIRST_TOKEN_MS: RangeInclusive<u64> = 500..=60_000;

/// The failure classes that move a chain on to its next model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailOn {
    ConnectionError,
    ServerError,
    RateLimit,
    Timeout,
}

impl FailOn {
    pub const ALL: [FailOn; 4] = [
        FailOn::ConnectionError,
        FailOn::ServerError,
        FailOn::RateLimit,
        FailOn::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailOn::ConnectionError => "connection_error",
            FailOn::ServerError => "server_error",
            FailOn::RateLimit => "rate_limit",
            FailOn::Timeout => "timeout",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`FailOn`] classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnSet(u8);

impl OnSet {
    pub const ALL: OnSet = OnSet(0b1111);

    pub fn of(items: &[FailOn]) -> OnSet {
        OnSet(items.iter().fold(0, |acc, f| acc | f.bit()))
    }

    pub fn contains(self, f: FailOn) -> bool {
        self.0 & f.bit() != 0
    }

    pub fn names(self) -> Vec<&'static str> {
        FailOn::ALL
            .iter()
            .filter(|f| self.contains(**f))
            .map(|f| f.as_str())
            .collect()
    }
}

/// One model of a chain, with its own attempt timeouts if the caller gave any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainEntry {
    pub model: String,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
}

/// What the caller wrote. `entries` empty = the caller named one model (the key's
/// `failover_defaults` may then supply a chain).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainSpec {
    pub entries: Vec<ChainEntry>,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
    pub on: Option<OnSet>,
}

/// Takes `models`, `fallback_models` and `redundancy` out of a request body and validates them.
/// With `models`, the body's `model` becomes the chain's first model.
pub fn take(body: &mut Map<String, Value>) -> Result<ChainSpec, InvalidRequest> {
    // Most bodies name none: a scan of the few top-level keys is cheaper than three hashed
    // lookups.
    if !body
        .keys()
        .any(|k| matches!(k.as_str(), "models" | "fallback_models" | "redundancy"))
    {
        return Ok(ChainSpec::default());
    }
    let models = body.shift_remove("models").filter(|v| !v.is_null());
    let fallback = body
        .shift_remove("fallback_models")
        .filter(|v| !v.is_null());
    let redundancy = body.shift_remove("redundancy").filter(|v| !v.is_null());
    let mut spec = ChainSpec::default();
    if let Some(r) = redundancy {
        let Value::Object(r) = r else {
            return Err(InvalidRequest::new("redundancy", "expected an object"));
        };
        for (k, v) in &r {
            match k.as_str() {
                "timeout_ms" => {
                    spec.timeout_ms = Some(ranged(v, "redundancy.timeout_ms", &TIMEOUT_MS)?)
                }
                "first_token_timeout_ms" => {
                    spec.first_token_timeout_ms = Some(ranged(
                        v,
                        "redundancy.first_token_timeout_ms",
                        &FIRST_TOKEN_MS,
                    )?)
                }
                "on" => spec.on = Some(on_set(v, "redundancy.on")?),
                other => {
                    return Err(InvalidRequest::new(
                        format!("redundancy.{other}"),
                        "unknown field; expected timeout_ms, first_token_timeout_ms or on",
                    ));
                }
            }
        }
    }
    let entries = match (models, fallback) {
        (Some(_), Some(_)) => {
            return Err(InvalidRequest::new(
                "fallback_models",
                "give either `models` (the whole chain) or `fallback_models` (after `model`), not both",
            ));
        }
        (Some(list), None) => {
            let entries = entry_list(list, "models")?;
            if entries.is_empty() {
                return Err(InvalidRequest::new(
                    "models",
                    "must name at least one model",
                ));
            }
            body.insert("model".into(), Value::String(entries[0].model.clone()));
            entries
        }
        (None, Some(list)) => {
            let first = match body.get("model") {
                Some(Value::String(m)) if !m.is_empty() => m.clone(),
                _ => {
                    return Err(InvalidRequest::new(
                        "model",
                        "is required with `fallback_models`",
                    ));
                }
            };
            let mut entries = vec![ChainEntry {
                model: first,
                ..ChainEntry::default()
            }];
            entries.extend(entry_list(list, "fallback_models")?);
            entries
        }
        (None, None) => return Ok(spec),
    };
    spec.entries = dedupe(entries)?;
    Ok(spec)
}

/// Duplicates collapsed (the first keeps its place and timeouts), then the cap.
pub fn dedupe(entries: Vec<ChainEntry>) -> Result<Vec<ChainEntry>, InvalidRequest> {
    let mut out: Vec<ChainEntry> = Vec::with_capacity(entries.len());
    for e in entries {
        if !out.iter().any(|o| o.model == e.model) {
            out.push(e);
        }
    }
    if out.len() > MAX_MODELS {
        return Err(InvalidRequest::new(
            "models",
            format!(
                "a chain may name at most {MAX_MODELS} distinct models, got {}",
                out.len()
            ),
        ));
    }
    Ok(out)
}

fn entry_list(v: Value, field: &str) -> Result<Vec<ChainEntry>, InvalidRequest> {
    let Value::Array(items) = v else {
        return Err(InvalidRequest::new(field, "expected an array of models"));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| entry(item, &format!("{field}[{i}]")))
        .collect()
}

fn entry(v: Value, at: &str) -> Result<ChainEntry, InvalidRequest> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(ChainEntry {
            model: s,
            ..ChainEntry::default()
        }),
        Value::Object(o) => {
            let mut e = ChainEntry::default();
            for (k, v) in &o {
                match k.as_str() {
                    "model" => match v {
                        Value::String(s) if !s.is_empty() => e.model = s.clone(),
                        _ => {
                            return Err(InvalidRequest::new(
                                format!("{at}.model"),
                                "expected a non-empty model name",
                            ));
                        }
                    },
                    "timeout_ms" => {
                        e.timeout_ms = Some(ranged(v, &format!("{at}.timeout_ms"), &TIMEOUT_MS)?)
                    }
                    "first_token_timeout_ms" => {
                        e.first_token_timeout_ms = Some(ranged(
                            v,
                            &format!("{at}.first_token_timeout_ms"),
                            &FIRST_TOKEN_MS,
                        )?)
                    }
                    other => {
                        return Err(InvalidRequest::new(
                            format!("{at}.{other}"),
                            "unknown field; expected model, timeout_ms or first_token_timeout_ms",
                        ));
                    }
                }
            }
            if e.model.is_empty() {
                return Err(InvalidRequest::new(format!("{at}.model"), "is required"));
            }
            Ok(e)
        }
        _ => Err(InvalidRequest::new(
            at,
            "expected a model name or { \"model\": ..., \"timeout_ms\": ..., \"first_token_timeout_ms\": ... }",
        )),
    }
}

fn ranged(v: &Value, at: &str, range: &RangeInclusive<u64>) -> Result<u64, InvalidRequest> {
    match v.as_u64() {
        Some(n) if range.contains(&n) => Ok(n),
        _ => Err(InvalidRequest::new(
            at,
            format!(
                "expected an integer from {} to {} (milliseconds)",
                range.start(),
                range.end()
            ),
        )),
    }
}

fn on_set(v: &Value, at: &str) -> Result<OnSet, InvalidRequest> {
    let items = match v {
        Value::Array(items) if !items.is_empty() => items,
        _ => {
            return Err(InvalidRequest::new(
                at,
                "expected a non-empty array of failure classes",
            ));
        }
    };
    let mut set = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let f = item
            .as_str()
            .and_then(|s| FailOn::ALL.into_iter().find(|f| f.as_str() == s))
            .ok_or_else(|| {
                InvalidRequest::new(
                    format!("{at}[{i}]"),
                    "expected one of connection_error, server_error, rate_limit, timeout",
                )
            })?;
        set.push(f);
    }
    Ok(OnSet::of(&set))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn take_from(v: Value) -> Result<(ChainSpec, Map<String, Value>), InvalidRequest> {
        let Value::Object(mut m) = v else {
            unreachable!()
        };
        take(&mut m).map(|s| (s, m))
    }

    fn names(s: &ChainSpec) -> Vec<&str> {
        s.entries.iter().map(|e| e.model.as_str()).collect()
    }

    #[test]
    fn models_is_the_chain_and_sets_model() {
        let (s, body) = take_from(
            json!({"model": "x", "models": ["a", {"model": "b", "timeout_ms": 2000}, "a"]}),
        )
        .unwrap();
        assert_eq!(names(&s), ["a", "b"]);
        assert_eq!(s.entries[1].timeout_ms, Some(2000));
        assert_eq!(body["model"], "a");
        assert!(body.get("models").is_none());
    }

    #[test]
    fn fallback_follows_model_and_the_cap_counts_distinct_models() {
        let (s, _) = take_from(json!({"model": "a", "fallback_models": ["b", "c", "a"]})).unwrap();
        assert_eq!(names(&s), ["a", "b", "c"]);
        let e = take_from(json!({"model": "a", "fallback_models": ["b", "c", "d"]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("models"));
        let e = take_from(json!({"models": ["a"], "fallback_models": ["b"]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("fallback_models"));
        let (s, _) = take_from(json!({"model": "a"})).unwrap();
        assert!(s.entries.is_empty());
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let cases = [
            (
                json!({"model": "a", "redundancy": {"timeout_ms": 999}}),
                "redundancy.timeout_ms",
            ),
            (
                json!({"model": "a", "redundancy": {"first_token_timeout_ms": 60001}}),
                "redundancy.first_token_timeout_ms",
            ),
            (
                json!({"model": "a", "redundancy": {"on": ["timeout", "client_error"]}}),
                "redundancy.on[1]",
            ),
            (
                json!({"model": "a", "redundancy": {"on": []}}),
                "redundancy.on",
            ),
            (
                json!({"models": ["a", {"model": "b", "timeout_ms": 300001}]}),
                "models[1].timeout_ms",
            ),
            (
                json!({"models": ["a", {"timeout_ms": 2000}]}),
                "models[1].model",
            ),
            (json!({"models": []}), "models"),
            (json!({"fallback_models": ["b"]}), "model"),
        ];
        for (body, field) in cases {
            let e = take_from(body).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{}", e.message);
        }
        let (s, _) = take_from(
            json!({"model": "a", "redundancy": {"timeout_ms": 1000, "on": ["rate_limit"]}}),
        )
        .unwrap();
        assert_eq!(s.timeout_ms, Some(1000));
        let on = s.on.unwrap();
        assert!(on.contains(FailOn::RateLimit) && !on.contains(FailOn::Timeout));
    }
}
