//! A provider's prompt cache, simulated (`prompt_cache = true`): per caller key (providers
//! cache per organisation or account), the prefixes of every prompt seen, message by message
//! (tools first); a request's cached tokens are those of its longest prefix seen before under
//! the same key. What routing experiments measure cache hits against.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::protocol::{ChatRequest, Content, Tool};

#[derive(Default)]
pub(super) struct PromptCache(Mutex<HashMap<String, HashSet<u64>>>);

impl PromptCache {
    /// The tokens of `req`'s longest prefix this key sent before; remembers its prefixes.
    pub(super) fn hit(&self, key: &str, req: &ChatRequest) -> u64 {
        let mut h = DefaultHasher::new();
        for t in &req.tools {
            match t {
                Tool::Function { name, .. } => name.hash(&mut h),
                Tool::Other(v) => v.to_string().hash(&mut h),
            }
        }
        // (hash of the prefix through message i, its tokens), as the mock's usage counts them.
        let mut prefixes = Vec::with_capacity(req.messages.len());
        let mut tokens = 0u64;
        for m in &req.messages {
            format!("{:?}", m.role).hash(&mut h);
            let text = m.content.as_ref().map(Content::text).unwrap_or_default();
            text.hash(&mut h);
            tokens += (text.len() as u64).div_ceil(4) + 3;
            prefixes.push((h.finish(), tokens));
        }
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let seen = map.entry(key.to_string()).or_default();
        let cached = prefixes
            .iter()
            .rev()
            .find(|(p, _)| seen.contains(p))
            .map_or(0, |(_, t)| *t);
        seen.extend(prefixes.iter().map(|(p, _)| *p));
        cached
    }
}
