//! The servers' lists (tools, prompts, resources, resource templates): kept per server for
//! its `list_ttl_seconds` or until it says one changed, merged for a key (each item renamed
//! `{server}{separator}{name}`, only what the key may reach) and paged with the gateway's
//! own cursor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::names::{Cursor, gateway_name};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Tools, Kind::Prompts, Kind::Resources, Kind::Templates];

    pub fn of_method(method: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.method() == method)
    }

    pub fn method(self) -> &'static str {
        match self {
            Kind::Tools => "tools/list",
            Kind::Prompts => "prompts/list",
            Kind::Resources => "resources/list",
            Kind::Templates => "resources/templates/list",
        }
    }

    /// The field of the answer that holds the items.
    pub fn field(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources => "resources",
            Kind::Templates => "resourceTemplates",
        }
    }

    /// The lists a `notifications/*/list_changed` method says changed.
    pub fn changed_by(method: &str) -> &'static [Kind] {
        match method {
            "notifications/tools/list_changed" => &[Kind::Tools],
            "notifications/prompts/list_changed" => &[Kind::Prompts],
            "notifications/resources/list_changed" => &[Kind::Resources, Kind::Templates],
            _ => &[],
        }
    }
}

type Items = Arc<Vec<Value>>;
type Kept = HashMap<(Arc<str>, Kind), (Items, Instant)>;

/// The lists as last read, per server.
#[derive(Default)]
pub struct Lists {
    kept: Mutex<Kept>,
}

impl Lists {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's list, if read less than `ttl` ago.
    pub fn fresh(&self, server: &Arc<str>, kind: Kind, ttl: Duration) -> Option<Items> {
        let map = self.lock();
        let (items, at) = map.get(&(server.clone(), kind))?;
        (at.elapsed() < ttl).then(|| items.clone())
    }

    pub fn keep(&self, server: &Arc<str>, kind: Kind, items: Vec<Value>) -> Items {
        let items = Arc::new(items);
        self.lock()
            .insert((server.clone(), kind), (items.clone(), Instant::now()));
        items
    }

    /// Forgets what a `list_changed` says changed (or all of the server's lists).
    pub fn forget(&self, server: &str, kinds: &[Kind]) {
        self.lock()
            .retain(|(s, k), _| &**s != server || !(kinds.is_empty() || kinds.contains(k)));
    }

    /// Whether the server last listed the tool and, if so, whether it says calling it again
    /// is safe (annotated `readOnlyHint` or `idempotentHint`).
    pub fn tool(&self, server: &Arc<str>, name: &str) -> Option<bool> {
        let map = self.lock();
        let (items, _) = map.get(&(server.clone(), Kind::Tools))?;
        let t = items
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))?;
        let a = t.get("annotations");
        let hint = |h: &str| a.and_then(|a| a.get(h)).and_then(Value::as_bool) == Some(true);
        Some(hint("readOnlyHint") || hint("idempotentHint"))
    }

    /// The server whose listed resource has this URI, or whose template matches it.
    pub fn resource_owner<'a>(&self, servers: &[&'a Arc<str>], uri: &str) -> Option<&'a Arc<str>> {
        let map = self.lock();
        let listed = |s: &Arc<str>, kind: Kind, field: &str, hit: &dyn Fn(&str) -> bool| {
            map.get(&(s.clone(), kind)).is_some_and(|(items, _)| {
                items
                    .iter()
                    .any(|r| r.get(field).and_then(Value::as_str).is_some_and(hit))
            })
        };
        servers
            .iter()
            .find(|s| listed(s, Kind::Resources, "uri", &|u| u == uri))
            .or_else(|| {
                servers.iter().find(|s| {
                    listed(s, Kind::Templates, "uriTemplate", &|t| {
                        template_matches(t, uri)
                    })
                })
            })
            .copied()
    }
}

/// Whether `uri` is one a URI template (RFC 6570, level 1: `{var}` stands for one or more
/// characters other than `/`) can make.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex_lite::escape(&rest[..open]));
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        pattern.push_str("[^/]+");
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex_lite::escape(rest));
    pattern.push('$');
    regex_lite::Regex::new(&pattern).is_ok_and(|re| re.is_match(uri))
}

/// The key's merged list: each server's items in the gateway's server order, renamed, only
/// those `allow` lets through (by server and the item's own name).
pub fn merge(
    parts: &[(&str, &[Value])],
    separator: &str,
    allow: impl Fn(&str, &str) -> bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (server, items) in parts {
        for item in *items {
            let Some(name) = item.get("name").and_then(Value::as_str) else {
                continue;
            };
            if !allow(server, name) {
                continue;
            }
            let mut item = item.clone();
            item["name"] = Value::String(gateway_name(server, separator, name));
            out.push(item);
        }
    }
    out
}

/// A cursor the gateway did not give (the spec's invalid params).
#[derive(Debug, PartialEq, Eq)]
pub struct BadCursor;

/// One page of a merged list, from the client's cursor.
pub fn page(
    mut items: Vec<Value>,
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<Value>, Option<String>), BadCursor> {
    let start = match cursor {
        None => 0,
        Some(c) => Cursor::decode(c).ok_or(BadCursor)?.offset,
    };
    if start > items.len() {
        return Err(BadCursor);
    }
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| Cursor { offset: end }.encode());
    Ok((items.drain(start..end).collect(), next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merged_lists_are_renamed_filtered_and_paged() {
        let gh = [
            json!({"name": "create_issue"}),
            json!({"name": "delete_repo"}),
        ];
        let fs = [json!({"name": "read_file", "annotations": {"readOnlyHint": true}})];
        let all = merge(&[("github", &gh), ("fs", &fs)], "__", |s, n| {
            !(s == "github" && n.starts_with("delete_"))
        });
        let names: Vec<&str> = all.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["github__create_issue", "fs__read_file"]);
        assert_eq!(all[1]["annotations"]["readOnlyHint"], true);

        let (first, next) = page(all.clone(), None, 1).unwrap();
        assert_eq!(first[0]["name"], "github__create_issue");
        let (second, end) = page(all.clone(), next.as_deref(), 1).unwrap();
        assert_eq!(second[0]["name"], "fs__read_file");
        assert_eq!(end, None);
        assert!(page(all, Some("bogus"), 1).is_err());
    }

    #[test]
    fn templates_match_one_segment_per_variable() {
        let cases = [
            ("file:///{path}", "file:///notes", true),
            ("file:///{path}", "file:///a/b", false),
            ("users://{id}/profile", "users://42/profile", true),
            ("users://{id}/profile", "users://42/posts", false),
            ("plain://x", "plain://x", true),
        ];
        for (t, uri, want) in cases {
            assert_eq!(template_matches(t, uri), want, "{t} {uri}");
        }
    }
}
