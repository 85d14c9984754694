//! Reading OpenAI JSON, for a client's request and an upstream's answer alike: field readers
//! that name the field's path in their error, and the message reader both directions use.

use serde_json::{Map, Value};

use crate::protocol::{Content, InvalidRequest, Message, Part, Role, ToolCall};

/// A field-path error while reading JSON; the caller decides whose mistake it is.
#[derive(Debug)]
pub struct ReadError {
    pub path: String,
    pub message: String,
}

impl From<ReadError> for InvalidRequest {
    fn from(e: ReadError) -> Self {
        InvalidRequest::new(e.path, e.message)
    }
}

pub(super) type Read<T> = Result<T, ReadError>;

pub(super) fn bad<T>(path: impl Into<String>, message: impl Into<String>) -> Read<T> {
    Err(ReadError {
        path: path.into(),
        message: message.into(),
    })
}

use crate::protocol::json_kind as kind;

pub(super) fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

pub(super) fn object(v: Value, path: &str) -> Read<Map<String, Value>> {
    match v {
        Value::Object(m) => Ok(m),
        other => bad(path, format!("expected an object, got {}", kind(&other))),
    }
}

pub(super) fn opt_string(
    m: &mut Map<String, Value>,
    key: &str,
    base: &str,
) -> Read<Option<String>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => bad(
            join(base, key),
            format!("expected a string, got {}", kind(&other)),
        ),
    }
}

pub(super) fn req_string(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<String> {
    opt_string(m, key, base)?.map_or_else(|| bad(join(base, key), "is required"), Ok)
}

pub(super) fn opt_bool(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<bool>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(other) => bad(
            join(base, key),
            format!("expected a boolean, got {}", kind(&other)),
        ),
    }
}

pub(super) fn opt_number(
    m: &mut Map<String, Value>,
    key: &str,
    base: &str,
) -> Read<Option<serde_json::Number>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n)),
        Some(other) => bad(
            join(base, key),
            format!("expected a number, got {}", kind(&other)),
        ),
    }
}

pub(super) fn opt_u64(m: &mut Map<String, Value>, key: &str, base: &str) -> Read<Option<u64>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => bad(
            join(base, key),
            format!("expected a non-negative integer, got {}", kind(&other)),
        ),
    }
}

pub(super) fn opt_array(
    m: &mut Map<String, Value>,
    key: &str,
    base: &str,
) -> Read<Option<Vec<Value>>> {
    match m.shift_remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => bad(
            join(base, key),
            format!("expected an array, got {}", kind(&other)),
        ),
    }
}

/// `default_role`: upstream answers may omit the role (it can only be the assistant's).
pub(super) fn message_from_value(
    v: Value,
    path: &str,
    default_role: Option<Role>,
) -> Read<Message> {
    let mut m = object(v, path)?;
    let role = match (opt_string(&mut m, "role", path)?, default_role) {
        (Some(r), _) => Role::parse(r),
        (None, Some(r)) => r,
        (None, None) => return bad(join(path, "role"), "is required"),
    };
    let content = match m.shift_remove("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Content::Text(s)),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (i, p) in parts.into_iter().enumerate() {
                out.push(part_from_value(p, &format!("{path}.content[{i}]"))?);
            }
            Some(Content::Parts(out))
        }
        Some(other) => {
            return bad(
                join(path, "content"),
                format!(
                    "expected a string or an array of parts, got {}",
                    kind(&other)
                ),
            );
        }
    };
    let name = opt_string(&mut m, "name", path)?;
    let tool_calls = match opt_array(&mut m, "tool_calls", path)? {
        None => Vec::new(),
        Some(a) => a
            .into_iter()
            .enumerate()
            .map(|(i, v)| tool_call_from_value(v, &format!("{path}.tool_calls[{i}]")))
            .collect::<Read<_>>()?,
    };
    let tool_call_id = opt_string(&mut m, "tool_call_id", path)?;
    let reasoning = opt_string(&mut m, "reasoning_content", path)?;
    Ok(Message {
        role,
        content,
        name,
        tool_calls,
        tool_call_id,
        reasoning,
        extra: m,
        source: None,
    })
}

fn part_from_value(v: Value, path: &str) -> Read<Part> {
    let mut m = object(v, path)?;
    match m.get("type").and_then(Value::as_str) {
        Some("text") => {
            m.shift_remove("type");
            let text = req_string(&mut m, "text", path)?;
            Ok(Part::Text { text, extra: m })
        }
        // The string form of `image_url` some clients send is kept as is (Other).
        Some("image_url") if m.get("image_url").is_some_and(Value::is_object) => {
            m.shift_remove("type");
            let p = join(path, "image_url");
            let mut img = match m.shift_remove("image_url") {
                Some(v) => object(v, &p)?,
                None => return bad(p, "is required"),
            };
            let url = req_string(&mut img, "url", &p)?;
            let detail = opt_string(&mut img, "detail", &p)?;
            // Unknown fields inside image_url are rare; keep them by falling back to Other.
            if !img.is_empty() {
                img.insert("url".into(), Value::String(url));
                if let Some(d) = detail {
                    img.insert("detail".into(), Value::String(d));
                }
                m.insert("type".into(), Value::String("image_url".into()));
                m.insert("image_url".into(), Value::Object(img));
                return Ok(Part::Other(Value::Object(m)));
            }
            Ok(Part::Image {
                url,
                detail,
                extra: m,
            })
        }
        Some(_) => Ok(Part::Other(Value::Object(m))),
        None => bad(join(path, "type"), "is required"),
    }
}

/// A plain function call becomes `ToolCall::Function`; anything else (other types, a missing
/// `type`, non-string arguments, extra keys in `function`) is kept exactly as sent.
fn tool_call_from_value(v: Value, path: &str) -> Read<ToolCall> {
    let mut m = object(v, path)?;
    let plain = m.get("type").and_then(Value::as_str) == Some("function")
        && m.get("id").is_none_or(Value::is_string)
        && matches!(m.get("function"), Some(Value::Object(f))
            if f.get("name").is_some_and(Value::is_string)
                && f.get("arguments").is_none_or(Value::is_string)
                && f.keys().all(|k| k == "name" || k == "arguments"));
    if !plain {
        return Ok(ToolCall::Other(Value::Object(m)));
    }
    m.shift_remove("type");
    let p = join(path, "function");
    let mut f = match m.shift_remove("function") {
        Some(v) => object(v, &p)?,
        None => return bad(p, "is required"),
    };
    let id = opt_string(&mut m, "id", path)?;
    let name = req_string(&mut f, "name", &p)?;
    let arguments = opt_string(&mut f, "arguments", &p)?;
    Ok(ToolCall::Function {
        id,
        name,
        arguments,
        extra: m,
    })
}
