//! The gateway's own `switchyard` member (a failover report, a stream's cost) written into an
//! upstream's JSON as it came: appended as the object's last member without reading it where it
//! can be, else read, merged and written again.

use serde_json::{Map, Value};

use super::RawEvent;

/// An upstream's JSON object with the gateway's own fields written into it: parsed, edited,
/// written again (`None`: not an object, left as it came).
pub fn edited(json: &[u8], edit: impl FnOnce(&mut Map<String, Value>)) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(json) else {
        return None;
    };
    edit(&mut m);
    serde_json::to_vec(&m).ok()
}

/// `data`, a JSON object, written as a `data:` frame with `"switchyard": ours` added as its
/// last member; false (nothing written) when it has a `switchyard` of its own, or spans lines.
pub fn append_switchyard(data: &str, ours: &Value, out: &mut Vec<u8>) -> bool {
    let Some(open) = data.trim_end().strip_suffix('}') else {
        return false;
    };
    if open.contains('\n') || SWITCHYARD_KEY.find(open.as_bytes()).is_some() {
        return false;
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(open.as_bytes());
    // Valid JSON ends an object's last member with a quote, a digit, a letter, `]` or `}`:
    // only an empty object ends in `{`.
    if !open.trim_end().ends_with('{') {
        out.push(b',');
    }
    out.extend_from_slice(b"\"switchyard\":");
    let _ = serde_json::to_writer(&mut *out, ours);
    out.extend_from_slice(b"}\n\n");
    true
}

/// `ours`' members joined to `m`'s own `switchyard` object (made if it has none).
pub fn merge_switchyard(m: &mut Map<String, Value>, ours: &Value) {
    let Value::Object(ours) = ours else {
        return;
    };
    let entry = m
        .entry("switchyard")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(theirs) = entry {
        theirs.extend(ours.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// An upstream event written as it came but with `ours` in its `switchyard` member: at the
/// top level, or inside the object `inner` names (`response` in a Responses event).
pub fn write_with_switchyard(raw: &RawEvent, inner: Option<&str>, ours: &Value, out: &mut Vec<u8>) {
    if let Some(name) = &raw.event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    if inner.is_none() && append_switchyard(&raw.data, ours, out) {
        return;
    }
    let written = edited(raw.data.as_bytes(), |m| match inner {
        None => merge_switchyard(m, ours),
        Some(k) => {
            if let Some(Value::Object(o)) = m.get_mut(k) {
                merge_switchyard(o, ours);
            }
        }
    });
    match written {
        Some(json) => data_frame(&json, out),
        None => {
            // Not an object: as it came (its event line is written already).
            let bare = RawEvent {
                event: None,
                ..raw.clone()
            };
            bare.write(out);
        }
    }
}

/// `json` as one `data:` frame.
pub fn data_frame(json: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

/// `"switchyard"` as a key: an upstream's own object of that name, which ours is merged into.
static SWITCHYARD_KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"switchyard\""));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use serde_json::json;

    fn raw(event: Option<&str>, data: &str) -> RawEvent {
        RawEvent {
            protocol: Protocol::AnthropicMessages,
            event: event.map(str::to_string),
            data: data.into(),
        }
    }

    #[test]
    fn ours_goes_last_at_the_top_or_inside_the_named_object() {
        let ours = json!({"cost_micros": 7});
        let cases = [
            (
                raw(
                    Some("message_delta"),
                    r#"{"type":"message_delta","usage":{"output_tokens":3}}"#,
                ),
                None,
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"switchyard\":{\"cost_micros\":7}}\n\n",
            ),
            (
                raw(None, r#"{"a":1,"switchyard":{"attempts":[]}}"#),
                None,
                "data: {\"a\":1,\"switchyard\":{\"attempts\":[],\"cost_micros\":7}}\n\n",
            ),
            (
                raw(
                    Some("response.completed"),
                    r#"{"type":"response.completed","response":{"id":"r"}}"#,
                ),
                Some("response"),
                "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"switchyard\":{\"cost_micros\":7}}}\n\n",
            ),
            (raw(None, "[1]"), None, "data: [1]\n\n"),
        ];
        for (r, inner, want) in cases {
            let mut out = Vec::new();
            write_with_switchyard(&r, inner, &ours, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
