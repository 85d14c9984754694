//! Ids across the gateway. A request the gateway sends a server carries an id of its own (a
//! client's ids are only unique in the client's session, and the gateway asks servers things
//! too); the server's answer is given back under the client's id. A request a server sends the
//! client (sampling, elicitation, roots) is relayed under an id that names the server and
//! holds the server's id, so the client's answer finds its way back on any replica.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use ring::rand::SecureRandom as _;
use serde_json::Value;

use super::jsonrpc::Id;

static TAG: LazyLock<String> = LazyLock::new(|| {
    let mut b = [0u8; 4];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    crate::secret::hex(&b)
});
static NEXT: AtomicU64 = AtomicU64::new(1);

/// An id for a request the gateway sends a server.
pub fn fresh_id() -> Value {
    Value::String(format!(
        "sy-{}-{}",
        *TAG,
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The gateway's id for a client's request in a session: the same on every replica (so a
/// cancellation can name it from any), unique among the session's calls in flight as the
/// client's ids are, and never one of [`fresh_id`]'s.
pub fn call_id(session: &str, client_id: &Value) -> Value {
    let d = ring::digest::digest(&ring::digest::SHA256, session.as_bytes());
    Value::String(format!(
        "sc-{}-{client_id}",
        crate::secret::hex(&d.as_ref()[..6])
    ))
}

/// A server's request as the client is sent it: the id names the server (`#` is not in a
/// server's name).
pub fn outward_id(server: &str, id: &Value) -> Value {
    Value::String(format!("{server}#{id}"))
}

/// The server and its own id of a relayed request the client answers.
pub fn inward_id(id: &Id) -> Option<(&str, Value)> {
    let Id::Str(s) = id else {
        return None;
    };
    let (server, rest) = s.split_once('#')?;
    let inner: Value = serde_json::from_str(rest).ok()?;
    (inner.is_string() || inner.is_i64()).then_some((server, inner))
}

/// One message as an SSE event.
pub fn event(msg: &Value) -> Bytes {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"event: message\ndata: ");
    let _ = serde_json::to_writer(&mut out, msg);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_relayed_id_comes_back_to_its_server() {
        for inner in [json!(7), json!("abc#1")] {
            let out = outward_id("github", &inner);
            let Value::String(s) = out else { panic!() };
            let id = Id::Str(s.clone());
            let (server, back) = inward_id(&id).unwrap();
            assert_eq!((server, back), ("github", inner));
        }
        assert_eq!(inward_id(&Id::Int(3)), None);
        assert_eq!(inward_id(&Id::Str("no-hash".into())), None);
        assert_eq!(inward_id(&Id::Str("s#{\"a\":1}".into())), None);
        assert_ne!(fresh_id(), fresh_id());
        // A client's id is the same call on every replica, another session's is not.
        assert_eq!(call_id("s1", &json!(4)), call_id("s1", &json!(4)));
        assert_ne!(call_id("s1", &json!(4)), call_id("s2", &json!(4)));
        assert_ne!(call_id("s1", &json!(4)), call_id("s1", &json!("4")));
    }
}
