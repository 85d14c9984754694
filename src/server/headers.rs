//! The failover report as response headers, written at the moment they are true (the commit
//! point, for streams), and the request id.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::ctx::Ctx;

/// Header names, made at compile time (`from_static` at run time parses the name on
/// every call, several times per request).
pub mod hdr {
    use axum::http::HeaderName;
    pub const CHANNEL: HeaderName = HeaderName::from_static("x-switchyard-channel");
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

/// A served response with the failover report headers and the request id.
pub fn served(mut resp: Response, ctx: &Ctx) -> Response {
    if let Some(s) = &ctx.report.served {
        set_header(&mut resp, hdr::CHANNEL, &s.channel);
        set_header(&mut resp, hdr::MODEL, &s.model);
        set_header(&mut resp, hdr::UPSTREAM_MODEL, &s.upstream_model);
    }
    if !ctx.report.requested_model.is_empty() {
        set_header(&mut resp, hdr::REQUESTED_MODEL, &ctx.report.requested_model);
    }
    if let Some(a) = ctx.affinity {
        set_header(&mut resp, hdr::AFFINITY, a);
    }
    // Counted only when trimming or a context fallback needed it.
    if let Some(n) = &ctx.report.context {
        let h = resp.headers_mut();
        h.insert(hdr::PROMPT_TOKENS, HeaderValue::from(n.prompt_tokens));
        h.insert(hdr::TRIMMED_TURNS, HeaderValue::from(n.trimmed_turns));
    }
    // Debugging headers, when the router exposes them and the embedding worked.
    if let Some(d) = &ctx.semantic
        && (!d.scores.is_empty() || d.kept)
        && ctx
            .snap
            .router(&d.router)
            .is_some_and(|(_, r)| r.expose_scores)
    {
        set_header(
            &mut resp,
            hdr::SEMANTIC_ROUTE,
            d.winner.as_deref().unwrap_or("fallback"),
        );
        if !d.scores.is_empty() {
            set_header(&mut resp, hdr::SEMANTIC_SCORES, &d.scores_text());
        }
    }
    if ctx.gateway_key(&ctx.snap).is_some_and(|k| k.expose_route)
        && let Some(reason) = ctx.report.route_reason()
    {
        resp.headers_mut()
            .insert(hdr::ROUTE, HeaderValue::from_static(reason));
    }
    if let Some(c) = ctx.cache {
        let h = resp.headers_mut();
        h.insert(hdr::CACHE, HeaderValue::from_static(c));
        if let Some(age) = ctx.cache_age {
            h.insert(header::AGE, HeaderValue::from(age));
        }
        if let Some(why) = ctx.cache_bypass {
            h.insert(hdr::CACHE_BYPASS, HeaderValue::from_static(why));
        }
        if let Some(sim) = ctx.cache_similarity
            && let Ok(v) = HeaderValue::from_str(&format!("{sim:.4}"))
        {
            h.insert(hdr::CACHE_SIMILARITY, v);
        }
    }
    let attempts = ctx.report.tried().to_string();
    set_header(&mut resp, hdr::ATTEMPTS, &attempts);
    set_header(&mut resp, hdr::REQUEST_ID, &ctx.id);
    resp
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
