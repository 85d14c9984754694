//! Secrets as admin answers, the audit and `GET /admin/config` show them: an upstream key as its
//! last four characters, a gateway key, token or master key not at all, a URL's password starred.

use serde_json::{Map, Value};

/// `…abcd`: enough to tell keys apart, nothing to use.
pub fn tail(s: &str) -> String {
    let n = s.chars().count();
    if n < 12 {
        return "***".into();
    }
    let last: String = s.chars().skip(n - 4).collect();
    format!("…{last}")
}

/// A URL with its password starred (`postgres://user:***@host/db`).
pub fn url(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.to_string();
    };
    match rest.split_once('@') {
        Some((auth, host)) => match auth.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => s.to_string(),
    }
}

/// An entry of `section` as answered.
pub fn entry(section: &str, v: &Value) -> Value {
    let mut v = v.clone();
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    match section {
        "channels" => channel(obj),
        "keys" => {
            obj.remove("key");
            obj.remove("key_hash");
        }
        // An MCP server's token and headers (which carry keys) not at all: names only.
        "mcp_servers" => {
            if obj.contains_key("bearer") {
                obj.insert("bearer".into(), Value::String("***".into()));
            }
            for field in ["headers", "env"] {
                if let Some(Value::Object(h)) = obj.get_mut(field) {
                    for v in h.values_mut() {
                        *v = Value::String("***".into());
                    }
                }
            }
        }
        // A signing secret is shown once, when made; never again, not even in part.
        "webhooks" => {
            for field in ["secret", "previous_secret"] {
                if obj.contains_key(field) {
                    obj.insert(field.into(), Value::String("***".into()));
                }
            }
        }
        _ => {}
    }
    v
}

fn channel(obj: &mut Map<String, Value>) {
    if let Some(Value::Array(keys)) = obj.get_mut("api_keys") {
        for k in keys.iter_mut() {
            if let Value::String(s) = k {
                *s = tail(s);
            }
        }
    }
    if let Some(Value::Array(creds)) = obj.get_mut("credentials") {
        for c in creds.iter_mut() {
            if let Some(Value::String(s)) = c.get_mut("key") {
                *s = tail(s);
            }
        }
    }
    // A cloud's secrets: the secret key as its tail (to tell rotations apart), the session
    // token and a service account's key not at all.
    if let Some(aws) = obj.get_mut("aws").and_then(Value::as_object_mut) {
        if let Some(Value::String(s)) = aws.get_mut("secret_access_key") {
            *s = tail(s);
        }
        if aws.contains_key("session_token") {
            aws.insert("session_token".into(), Value::String("***".into()));
        }
    }
    if obj.contains_key("credentials_json") {
        obj.insert("credentials_json".into(), Value::String("***".into()));
    }
}

/// The whole config document as `GET /admin/config` shows it.
pub fn document(raw: &Value) -> Value {
    let mut doc = raw.clone();
    let Some(obj) = doc.as_object_mut() else {
        return doc;
    };
    for (section, _) in crate::config::overlay::SECTIONS {
        if let Some(Value::Array(items)) = obj.get_mut(section) {
            for i in items.iter_mut() {
                *i = entry(section, i);
            }
        }
    }
    let star = |v: &mut Value| *v = Value::String("***".into());
    if let Some(t) = obj.get_mut("server").and_then(|s| s.get_mut("admin_token")) {
        star(t);
    }
    if let Some(Value::Array(admins)) = obj.get_mut("admins") {
        for a in admins {
            if let Some(t) = a.get_mut("token") {
                star(t);
            }
        }
    }
    for section in ["store", "state"] {
        if let Some(s) = obj.get_mut(section) {
            if let Some(Value::String(u)) = s.get_mut("url") {
                *u = url(u);
            }
            if let Some(k) = s.get_mut("master_key") {
                star(k);
            }
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_everywhere_they_can_be() {
        assert_eq!(tail("sk-upstream-secret-key"), "…-key");
        assert_eq!(tail("short"), "***");
        assert_eq!(
            url("postgres://sy:hunter2@db:5432/x"),
            "postgres://sy:***@db:5432/x"
        );
        assert_eq!(url("sqlite://store.db"), "sqlite://store.db");
        let doc = json!({
            "server": {"admin_token": "admin-token-0123456789"},
            "admins": [{"name": "v", "token": "viewer-token-0123456789", "role": "viewer"}],
            "store": {"url": "postgres://u:pw@h/d", "master_key": "AAAA"},
            "mcp_servers": [{"name": "gh", "url": "http://h/mcp", "bearer": "ghp_secret_token_1",
                "headers": {"X-Api-Key": "hdr-secret-2"}}],
            "channels": [{"name": "a", "api_keys": ["sk-upstream-secret-key"],
                          "credentials": [{"key": "sk-other-upstream-key", "label": "k"}]}],
            "keys": [{"name": "k", "key": "sk-gateway-key-plain"}, {"name": "h", "key_hash": "ab"}],
        });
        let text = document(&doc).to_string();
        for secret in [
            "admin-token-0123456789",
            "viewer-token-0123456789",
            "pw@",
            "AAAA",
            "sk-upstream-secret-key",
            "sk-other-upstream-key",
            "sk-gateway-key-plain",
            "\"ab\"",
            "ghp_secret_token_1",
            "hdr-secret-2",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("…-key"), "{text}");
    }
}
