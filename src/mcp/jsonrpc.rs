//! Reading one JSON-RPC 2.0 message as MCP's Streamable HTTP transport carries it in a POST
//! body: a request (`method` and `id`), a notification (`method`, no `id`) or a response to a
//! request the gateway sent (`id` with `result` or `error`). Revisions 2025-06-18 and later
//! carry one message per body: a batch (an array) is refused, as is anything that is not
//! JSON-RPC 2.0. A refusal is the spec's error object with its code, and the request's `id`
//! when one could be read, so the client can match it; never a panic.

use serde_json::{Map, Value, json};

/// The JSON-RPC error codes the reader answers with.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;

/// A request's or a response's id: a string or an integer (never null for a request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    Str(String),
    Int(i64),
}

impl Id {
    fn read(v: &Value) -> Option<Id> {
        match v {
            Value::String(s) => Some(Id::Str(s.clone())),
            Value::Number(n) => n.as_i64().map(Id::Int),
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Id::Str(s) => Value::String(s.clone()),
            Id::Int(i) => Value::from(*i),
        }
    }
}

/// One message, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// An answer to a request the gateway relayed to the client (sampling, elicitation,
    /// roots): its `result`, or its `error` object.
    Response {
        id: Id,
        outcome: Result<Value, Value>,
    },
}

/// Why a body is not one message, as the spec's error object (and the id, when known).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
    pub id: Option<Id>,
}

impl Refusal {
    fn new(code: i64, message: impl Into<String>, id: Option<Id>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            id,
        }
    }

    /// The error response the client is sent.
    pub fn to_value(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id.as_ref().map_or(Value::Null, Id::to_value),
            "error": {"code": self.code, "message": self.message},
        })
    }
}

/// Reads `body` as one JSON-RPC message.
pub fn read(body: &[u8]) -> Result<Message, Refusal> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Refusal::new(PARSE_ERROR, format!("not JSON: {e}"), None))?;
    let mut m = match v {
        Value::Object(m) => m,
        Value::Array(_) => {
            return Err(Refusal::new(
                INVALID_REQUEST,
                "batches are not part of this protocol revision: send one message per request",
                None,
            ));
        }
        _ => {
            return Err(Refusal::new(
                INVALID_REQUEST,
                "not a JSON-RPC message",
                None,
            ));
        }
    };
    let id = m.get("id").and_then(Id::read);
    let bad = |why: &str| Refusal::new(INVALID_REQUEST, why, id.clone());
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("\"jsonrpc\" must be \"2.0\""));
    }
    if m.get("id").is_some_and(|v| Id::read(v).is_none()) {
        return Err(bad("\"id\" must be a string or an integer"));
    }
    if let Some(method) = m.remove("method") {
        let Value::String(method) = method else {
            return Err(bad("\"method\" must be a string"));
        };
        let params = params(&mut m).map_err(&bad)?;
        return Ok(match id.clone() {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }
    let Some(rid) = id.clone() else {
        return Err(bad(
            "neither a request (\"method\") nor a response (\"id\")",
        ));
    };
    match (m.remove("result"), m.remove("error")) {
        (Some(r), None) => Ok(Message::Response {
            id: rid,
            outcome: Ok(r),
        }),
        (None, Some(e @ Value::Object(_))) => Ok(Message::Response {
            id: rid,
            outcome: Err(e),
        }),
        _ => Err(bad(
            "a response carries exactly one of \"result\" and an \"error\" object",
        )),
    }
}

/// `params`, which must be an object or an array when present.
fn params(m: &mut Map<String, Value>) -> Result<Option<Value>, &'static str> {
    match m.remove("params") {
        None => Ok(None),
        Some(p @ (Value::Object(_) | Value::Array(_))) => Ok(Some(p)),
        Some(_) => Err("\"params\" must be an object or an array"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_message_is_read() {
        let req = read(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#);
        assert_eq!(
            req,
            Ok(Message::Request {
                id: Id::Int(7),
                method: "tools/list".into(),
                params: Some(json!({}))
            })
        );
        let note = read(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(note, Ok(Message::Notification { .. })));
        let ok = read(br#"{"jsonrpc":"2.0","id":"s-1","result":{"roots":[]}}"#);
        assert!(matches!(ok, Ok(Message::Response { outcome: Ok(_), .. })));
        let err = read(br#"{"jsonrpc":"2.0","id":"s-1","error":{"code":-1,"message":"no"}}"#);
        assert!(matches!(
            err,
            Ok(Message::Response {
                outcome: Err(_),
                ..
            })
        ));
    }

    #[test]
    fn what_is_not_one_message_is_refused_with_the_specs_code() {
        // (body, code, the id echoed)
        let cases: [(&[u8], i64, Option<Id>); 9] = [
            (b"{not json", PARSE_ERROR, None),
            (b"[]", INVALID_REQUEST, None),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                INVALID_REQUEST,
                None,
            ),
            (b"42", INVALID_REQUEST, None),
            (
                br#"{"id":1,"method":"ping"}"#,
                INVALID_REQUEST,
                Some(Id::Int(1)),
            ),
            (
                br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
                INVALID_REQUEST,
                None,
            ),
            (
                br#"{"jsonrpc":"2.0","id":"a","method":3}"#,
                INVALID_REQUEST,
                Some(Id::Str("a".into())),
            ),
            (
                br#"{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}"#,
                INVALID_REQUEST,
                Some(Id::Int(2)),
            ),
            (
                br#"{"jsonrpc":"2.0","id":3,"result":1,"error":{}}"#,
                INVALID_REQUEST,
                Some(Id::Int(3)),
            ),
        ];
        for (body, code, id) in cases {
            let r = read(body).expect_err(&String::from_utf8_lossy(body));
            assert_eq!(
                (r.code, r.id.clone()),
                (code, id),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(r.to_value()["error"]["code"], code);
        }
    }
}
