//! The admin API's errors: `ControlError` (kept beside `ApiError` in `server/control.rs`), and
//! one answer for a query string no handler could read.

pub use crate::server::ControlError;

/// A query string a handler's `Query` could not read: 400 `invalid_request`, `param: query`,
/// the message naming the parameter at fault (one answer for every admin route).
pub fn unreadable_query(r: axum::extract::rejection::QueryRejection) -> axum::response::Response {
    use axum::response::IntoResponse;
    let e = crate::protocol::InvalidRequest::new("query", r.body_text());
    crate::server::ApiError::Invalid(e).into_response()
}
