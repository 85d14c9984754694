//! The mock server's calls beside chat: token counting in Anthropic's, Gemini's and the
//! Responses API's shapes (the spec's `count_tokens`, else the prompt as its usage counts it),
//! and the Responses API's kept responses read, listed and deleted. The mock keeps nothing: any
//! id is answered, as the spec's reply under that id, so a test sees what was forwarded.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::exchange::{Incoming, MockState, bad_request, begin, status_response};
use super::reply::{estimate_prompt_tokens, reply};
use super::spec::Behaviour;
use crate::protocol::{Protocol, count, responses};

fn json_answer(v: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// A count in protocol `p` (Gemini's model from its path).
pub(super) async fn count_in(
    state: &MockState,
    incoming: Incoming,
    p: Protocol,
    model: &str,
) -> Response {
    let (n, spec, v) = match begin(state, "/count_tokens", incoming) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    if let Behaviour::Status(s, ra) = spec.behaviour(n) {
        return status_response(s, ra);
    }
    let model = v.get("model").and_then(Value::as_str).unwrap_or(model);
    let req = match count::request(p, &v, model) {
        Ok(r) => r,
        Err(e) => return bad_request(&e.message),
    };
    let tokens = spec
        .count_tokens
        .unwrap_or_else(|| estimate_prompt_tokens(&req));
    json_answer(&count::answer(p, tokens))
}

pub(super) async fn anthropic_count(
    State(state): State<Arc<MockState>>,
    incoming: Incoming,
) -> Response {
    count_in(&state, incoming, Protocol::AnthropicMessages, "mock").await
}

pub(super) async fn responses_count(
    State(state): State<Arc<MockState>>,
    incoming: Incoming,
) -> Response {
    count_in(&state, incoming, Protocol::OpenAiResponses, "mock").await
}

/// `GET`, `DELETE /responses/{id}` and `GET /responses/{id}/input_items`, recorded under
/// `/responses/{what}`.
async fn kept(state: &MockState, incoming: Incoming, what: &str, id: &str) -> Response {
    let (n, spec, _) = match begin(state, &format!("/responses/{what}"), incoming.bodiless()) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    if let Behaviour::Status(s, ra) = spec.behaviour(n) {
        return status_response(s, ra);
    }
    match what {
        "delete" => json_answer(&json!({"id": id, "object": "response", "deleted": true})),
        "input_items" => {
            let item = json!({"type": "message", "id": "msg_mock_input", "status": "completed",
                "role": "user", "content": [{"type": "input_text", "text": "."}]});
            json_answer(&json!({"object": "list", "data": [item],
                "first_id": "msg_mock_input", "last_id": "msg_mock_input", "has_more": false}))
        }
        _ => {
            let Ok((req, echo)) =
                responses::request_from_value(json!({"model": "mock", "input": "."}))
            else {
                return bad_request("the mock could not make a response");
            };
            let mut v = responses::response_to_value(&reply(&spec, "mock", &req, n), &echo, "mock");
            v["id"] = id.into();
            json_answer(&v)
        }
    }
}

pub(super) async fn get_response(
    State(state): State<Arc<MockState>>,
    Path(id): Path<String>,
    incoming: Incoming,
) -> Response {
    kept(&state, incoming, "retrieve", &id).await
}

pub(super) async fn delete_response(
    State(state): State<Arc<MockState>>,
    Path(id): Path<String>,
    incoming: Incoming,
) -> Response {
    kept(&state, incoming, "delete", &id).await
}

pub(super) async fn input_items(
    State(state): State<Arc<MockState>>,
    Path(id): Path<String>,
    incoming: Incoming,
) -> Response {
    kept(&state, incoming, "input_items", &id).await
}
