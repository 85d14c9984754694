//! The input items of a Response this gateway answered and kept (`GET
//! /v1/responses/{id}/input_items`): the kept conversation less the response's own output, each
//! as OpenAI lists it (a typed item with an id), paged by `after`, `limit` and `order`.

use serde_json::{Map, Value, json};

use crate::protocol::InvalidRequest;

/// The paging a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemsQuery {
    pub after: Option<String>,
    pub limit: usize,
    /// Newest first: OpenAI's default.
    pub desc: bool,
}

impl ItemsQuery {
    /// From the query's `after`, `limit` (1 to 100, default 20) and `order` (`asc` or `desc`,
    /// the default); anything else (`include[]`) changes nothing here.
    pub fn parse(pairs: &[(String, String)]) -> Result<ItemsQuery, InvalidRequest> {
        let mut q = ItemsQuery {
            after: None,
            limit: 20,
            desc: true,
        };
        for (k, v) in pairs {
            match k.as_str() {
                "after" => q.after = Some(v.clone()),
                "limit" => {
                    q.limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| InvalidRequest::new("limit", "must be 1 to 100"))?;
                }
                "order" => {
                    q.desc = match v.as_str() {
                        "asc" => false,
                        "desc" => true,
                        _ => return Err(InvalidRequest::new("order", "must be asc or desc")),
                    };
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// The response's input items: the kept conversation (JSON text) less its last `output_len`
/// items (the response's own output).
pub fn input_items(kept: &str, output_len: usize) -> Result<Vec<Value>, InvalidRequest> {
    let all: Vec<Value> = serde_json::from_str(kept).map_err(|_| InvalidRequest {
        param: None,
        message: "the kept conversation of this response could not be read".into(),
    })?;
    let n = all.len().saturating_sub(output_len);
    Ok(all
        .into_iter()
        .take(n)
        .enumerate()
        .map(|(i, v)| as_listed(v, i))
        .collect())
}

/// An input item as OpenAI lists it: typed (a bare `{role, content}` is a message, its text
/// content a part), with an id (one made here where the client sent none: `msg_sy…`, which
/// the gateway strips again if the item is ever sent upstream).
fn as_listed(v: Value, i: usize) -> Value {
    let Value::Object(mut o) = v else {
        return v;
    };
    if !o.contains_key("type") && o.contains_key("role") {
        o.insert("type".into(), "message".into());
    }
    if o.get("type").and_then(Value::as_str) == Some("message") {
        message_parts(&mut o);
    }
    if !o.get("id").is_some_and(Value::is_string) {
        o.insert("id".into(), format!("msg_sy{i:06}").into());
    }
    Value::Object(o)
}

fn message_parts(o: &mut Map<String, Value>) {
    let kind = if o.get("role").and_then(Value::as_str) == Some("assistant") {
        "output_text"
    } else {
        "input_text"
    };
    if let Some(Value::String(text)) = o.get("content") {
        let parts = json!([{"type": kind, "text": text}]);
        o.insert("content".into(), parts);
    }
    o.entry("status").or_insert_with(|| "completed".into());
}

/// One page of `items` (in conversation order) as OpenAI's list.
pub fn items_page(mut items: Vec<Value>, q: &ItemsQuery) -> Value {
    if q.desc {
        items.reverse();
    }
    let start = q.after.as_deref().map_or(0, |after| {
        items
            .iter()
            .position(|i| i["id"] == after)
            .map_or(items.len(), |p| p + 1)
    });
    let end = (start + q.limit).min(items.len());
    let page = &items[start.min(end)..end];
    json!({
        "object": "list",
        "data": page,
        "first_id": page.first().map(|i| &i["id"]),
        "last_id": page.last().map(|i| &i["id"]),
        "has_more": end < items.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(after: Option<&str>, limit: usize, desc: bool) -> ItemsQuery {
        ItemsQuery {
            after: after.map(str::to_string),
            limit,
            desc,
        }
    }

    #[test]
    fn the_input_is_the_conversation_less_the_output_listed_as_items() {
        let kept = json!([
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "id": "msg_up",
             "content": [{"type": "output_text", "text": "answer"}]},
        ])
        .to_string();
        let items = input_items(&kept, 1).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0],
            json!({"type": "message", "role": "user", "id": "msg_sy000000", "status": "completed",
                "content": [{"type": "input_text", "text": "hi"}]})
        );
        assert_eq!(items[1]["type"], "function_call_output");
        assert!(input_items("not json", 0).is_err());
    }

    #[test]
    fn pages_in_either_order_after_an_id() {
        let items: Vec<Value> = (0..5).map(|i| json!({"id": format!("i{i}")})).collect();
        let ids = |v: &Value| -> Vec<String> {
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string())
                .collect()
        };
        let p = items_page(items.clone(), &q(None, 2, true));
        assert_eq!(
            (ids(&p), &p["has_more"]),
            (vec!["i4".into(), "i3".into()], &json!(true))
        );
        let p = items_page(items.clone(), &q(Some("i3"), 9, true));
        assert_eq!(ids(&p), ["i2", "i1", "i0"]);
        assert_eq!(p["has_more"], false);
        let p = items_page(items.clone(), &q(Some("i1"), 2, false));
        assert_eq!(
            (ids(&p), &p["last_id"]),
            (vec!["i2".into(), "i3".into()], &json!("i3"))
        );
        let p = items_page(items, &q(Some("nope"), 2, false));
        assert!(ids(&p).is_empty());
    }

    #[test]
    fn the_query_is_checked() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let ok = ItemsQuery::parse(&pairs(&[
            ("limit", "5"),
            ("order", "asc"),
            ("include[]", "x"),
        ]));
        assert_eq!(ok.unwrap(), q(None, 5, false));
        for bad in [
            ("limit", "0"),
            ("limit", "101"),
            ("limit", "x"),
            ("order", "up"),
        ] {
            assert!(ItemsQuery::parse(&pairs(&[bad])).is_err(), "{bad:?}");
        }
    }
}
