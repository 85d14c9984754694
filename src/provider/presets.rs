//! OpenAI-compatible providers by name (`provider = "groq"`, `"mistral"`...): their default
//! base URL and the request differences `presets.toml` lists, applied to the JSON body an
//! `openai` channel of that provider sends. Data, not code: a new provider or difference is a
//! table entry (and the test that shows it).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One provider's differences from OpenAI, as `presets.toml` writes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    pub base_url: String,
    pub provider_name: String,
    #[serde(default)]
    pub drop: Vec<String>,
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    #[serde(default)]
    pub drop_message_fields: Vec<String>,
    #[serde(default = "yes")]
    pub stream_usage: bool,
    #[serde(default)]
    pub tool_choice: BTreeMap<String, String>,
    #[serde(default = "yes")]
    pub json_schema: bool,
    pub tool_call_ids: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "yes")]
    pub key_required: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct Table {
    preset: Vec<Preset>,
}

/// The table, read once (embedded, and checked by a test: never absent at run time).
static PRESETS: LazyLock<Vec<Preset>> =
    LazyLock::new(
        || match toml::from_str::<Table>(include_str!("presets.toml")) {
            Ok(t) => t.preset,
            Err(e) => {
                tracing::error!(error = %e, "the built-in provider presets do not parse");
                Vec::new()
            }
        },
    );

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Every preset, for `switchyard check` and the docs test.
pub fn all() -> &'static [Preset] {
    &PRESETS
}

impl Preset {
    /// The provider's request, from OpenAI's: fields left out or renamed, messages' fields
    /// left out, tool choices and response formats written its way, tool call ids made valid.
    pub fn apply(&self, body: &mut Value) {
        let Some(o) = body.as_object_mut() else {
            return;
        };
        for f in &self.drop {
            o.remove(f);
        }
        for (from, to) in &self.rename {
            if let Some(v) = o.remove(from) {
                o.entry(to.clone()).or_insert(v);
            }
        }
        if let Some(Value::String(s)) = o.get("tool_choice")
            && let Some(mapped) = self.tool_choice.get(s)
        {
            o.insert("tool_choice".into(), mapped.clone().into());
        }
        let schema = o
            .get("response_format")
            .and_then(|r| r.get("type"))
            .is_some_and(|t| t == "json_schema");
        if !self.json_schema && schema {
            o.insert(
                "response_format".into(),
                serde_json::json!({"type": "json_object"}),
            );
        }
        let alnum9 = self.tool_call_ids.as_deref() == Some("alnum9");
        if let Some(Value::Array(messages)) = o.get_mut("messages") {
            for m in messages.iter_mut().filter_map(Value::as_object_mut) {
                for f in &self.drop_message_fields {
                    m.remove(f);
                }
                if alnum9 {
                    valid_ids(m);
                }
            }
        }
    }
}

/// A message's tool call ids (its calls', or the one its result answers) made 9 letters and
/// digits, the same for the same id (so a call and its result still pair).
fn valid_ids(m: &mut Map<String, Value>) {
    if let Some(Value::String(id)) = m.get_mut("tool_call_id") {
        *id = alnum9(id);
    }
    if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
        for c in calls {
            if let Some(Value::String(id)) = c.get_mut("id") {
                *id = alnum9(id);
            }
        }
    }
}

/// `id` if it is already 9 letters and digits, else 9 drawn from its hash.
pub fn alnum9(id: &str) -> String {
    if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return id.to_string();
    }
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    let mut n = u64::from_be_bytes(digest.as_ref()[..8].try_into().unwrap_or([0; 8]));
    let mut out = String::with_capacity(9);
    for _ in 0..9 {
        out.push(ALPHABET[(n % 62) as usize] as char);
        n /= 62;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_parses_and_names_each_provider_once() {
        let names: Vec<&str> = all().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names.len(), 12, "{names:?}");
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        for p in all() {
            assert!(p.base_url.starts_with("http"), "{}", p.name);
        }
    }

    #[test]
    fn mistral_gets_its_field_names_choice_and_ids() {
        let mut body = json!({"model": "m", "max_completion_tokens": 9, "seed": 1, "store": true,
            "stream_options": {"include_usage": true}, "tool_choice": "required",
            "messages": [
                {"role": "assistant", "content": null, "reasoning_content": "r",
                 "tool_calls": [{"id": "call_abc_123", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_abc_123", "content": "x"}]});
        preset("mistral").unwrap().apply(&mut body);
        assert_eq!(body["max_tokens"], 9);
        assert_eq!(body["random_seed"], 1);
        assert!(body.get("store").is_none() && body.get("stream_options").is_none());
        assert_eq!(body["tool_choice"], "any");
        let call_id = body["messages"][0]["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(call_id.len(), 9);
        assert_eq!(
            body["messages"][1]["tool_call_id"], call_id,
            "a call and its result still pair"
        );
        assert!(body["messages"][0].get("reasoning_content").is_none());
        assert_eq!(alnum9("Ab3dE6gh9"), "Ab3dE6gh9");
    }
}
