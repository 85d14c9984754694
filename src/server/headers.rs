//! The failover report as response headers, written at the moment they are true (the commit
//! point, for streams), and the request id.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// Header names, made at compile time (`from_static` at run time parses the name on
/// every call, several times per request).
pub mod hdr {
    use axum::http::HeaderName;
    pub const CHANNEL: HeaderName = HeaderName::from_static("x-switchyard-channel");
    /// The request's end user, from any client (`protocol::end_user::HEADER`).
    pub const USER: HeaderName = HeaderName::from_static("x-switchyard-user");
    pub const MODEL: HeaderName = HeaderName::from_static("x-switchyard-model");
    pub const UPSTREAM_MODEL: HeaderName = HeaderName::from_static("x-switchyard-upstream-model");
    pub const REQUESTED_MODEL: HeaderName = HeaderName::from_static("x-switchyard-requested-model");
    pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
    pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    /// Marks a request as test traffic in the log (`1` or `true`).
    pub const TEST: HeaderName = HeaderName::from_static("x-switchyard-test");
    pub const TRANSLATION: HeaderName = HeaderName::from_static("x-switchyard-translation");
    pub const AFFINITY: HeaderName = HeaderName::from_static("x-switchyard-affinity");
    pub const SEMANTIC_ROUTE: HeaderName = HeaderName::from_static("x-switchyard-semantic-route");
    pub const SEMANTIC_SCORES: HeaderName = HeaderName::from_static("x-switchyard-semantic-scores");
    pub const TRIM: HeaderName = HeaderName::from_static("x-switchyard-trim");
    pub const PROMPT_TOKENS: HeaderName = HeaderName::from_static("x-switchyard-prompt-tokens");
    pub const TRIMMED_TURNS: HeaderName = HeaderName::from_static("x-switchyard-trimmed-turns");
    pub const COST: HeaderName = HeaderName::from_static("x-switchyard-cost-micros");
    /// Who counted a token-counting request's tokens: `upstream` or `local`.
    pub const COUNT: HeaderName = HeaderName::from_static("x-switchyard-count");
    /// How the first try was chosen (`latency.fastest`), for keys with `expose_route`.
    pub const ROUTE: HeaderName = HeaderName::from_static("x-switchyard-route");
    /// What the response cache did: `hit`, `miss`, `bypass`.
    pub const CACHE: HeaderName = HeaderName::from_static("x-switchyard-cache");
    /// Why a request was not cached (`n_above_1`, `no_store`...).
    pub const CACHE_BYPASS: HeaderName = HeaderName::from_static("x-switchyard-cache-bypass");
    pub const CACHE_SIMILARITY: HeaderName =
        HeaderName::from_static("x-switchyard-cache-similarity");
}

pub fn set_header(resp: &mut Response, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

pub fn json_response(body: impl Into<axum::body::Bytes>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.into(),
    )
        .into_response()
}

#[cfg(test)]
mod user_header {
    #[test]
    fn the_end_user_header_is_the_one_the_protocol_names() {
        assert_eq!(super::hdr::USER.as_str(), crate::protocol::end_user::HEADER);
    }
}
