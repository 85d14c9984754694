//! `POST /admin/route/explain`: the route preview for a key named in the body (`key`), as
//! `POST /v1/route/explain` answers it to the key's holder: the console's playground uses it.
//! Calls no upstream and logs nothing.

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{Admin, ControlError};
use crate::protocol::InvalidRequest;
use crate::server::ApiError;
use crate::server::ctx::Ctx;
use crate::server::ingress::openai::OpenAiEnvelope;

pub async fn explain(admin: Admin, headers: HeaderMap, body: Bytes) -> Response {
    let mut ctx = Ctx::new(&admin.state, "route.explain", &OpenAiEnvelope);
    // A preview is not traffic: it is not logged.
    ctx.logged = true;
    let mut value: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return ApiError::Invalid(InvalidRequest::new("body", "expected a JSON object"))
                .into_response();
        }
    };
    let key = value
        .as_object_mut()
        .and_then(|o| o.remove("key"))
        .and_then(|k| k.as_str().map(str::to_string))
        .filter(|k| !k.is_empty());
    let Some(key) = key else {
        return ApiError::Invalid(InvalidRequest::new(
            "key",
            "is required: a gateway key's name",
        ))
        .into_response();
    };
    // A key the caller may not see is answered as one that does not exist.
    let seen = admin
        .snap
        .key_named(&key)
        .is_some_and(|k| admin.sees_key(k));
    if !seen || !ctx.act_as(&key) {
        let missing = ControlError::Missing {
            section: "keys".into(),
            id: key,
        };
        return ApiError::from(missing).into_response();
    }
    match crate::server::explain::plan(&admin.state, &headers, &mut ctx, value).await {
        Ok(plan) => axum::Json(plan).into_response(),
        Err(e) => ctx.fail(e),
    }
}
