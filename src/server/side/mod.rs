//! The calls SDKs and agents make beside chat: token counting (`count.rs`), model lists and
//! retrieval in each protocol's shape (`models.rs`), and the Responses the gateway keeps
//! (`kept.rs`). Each is authenticated by the gateway key and held to its `rpm` (nothing else:
//! they cost nothing), answered in the client's protocol (errors in its envelope), logged under
//! its own endpoint and counted in the metrics, never charged in the ledger.

pub mod count;
pub mod kept;
pub mod models;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::ctx::Ctx;
use super::ctx::served;
use super::headers::json_response;
use super::{ApiError, AppState, admission};
use crate::config::{GatewayKey, Snapshot};
use crate::exec;
use crate::provider::{TraceContext, Waited};
use crate::telemetry::Answered;

/// A side call without a body (a list, a read, a delete): the key authenticated and its `rpm`
/// held.
async fn admit(state: &AppState, headers: &HeaderMap, ctx: &mut Ctx) -> Result<(), ApiError> {
    ctx.authenticate(headers).await?;
    admit_key(state, ctx).await
}

/// The authenticated key's `rpm` held for this call.
async fn admit_key(state: &AppState, ctx: &mut Ctx) -> Result<(), ApiError> {
    let snap = ctx.snap.clone();
    let key = ctx.gateway_key(&snap).ok_or(ApiError::Unauthorized)?;
    admission::admit_request(&state.meter, &snap, key, ctx).await
}

/// A side call's JSON answer: its row logged (no charge; a count's tokens as the prompt's)
/// and the report headers.
fn answered(ctx: &mut Ctx, body: &Value, counted: Option<u64>) -> Response {
    let mut row = ctx.take_row(200, "ok");
    row.prompt_tokens = counted;
    ctx.record(row, Answered::default());
    served(
        json_response(serde_json::to_vec(body).unwrap_or_default()),
        ctx,
    )
}

/// What a side call's attempts read besides its route: no tokens estimated, reserved or held.
struct Run {
    waited: Waited,
    trace: Option<TraceContext>,
    deadline: tokio::time::Instant,
}

impl Run {
    fn of(ctx: &Ctx) -> Run {
        Run {
            waited: Waited::default(),
            trace: ctx.trace.as_ref().map(|t| t.ctx.clone()),
            deadline: ctx.deadline(),
        }
    }

    fn job<'a>(
        &'a self,
        state: &'a AppState,
        snap: &'a Snapshot,
        route: exec::Route<'a>,
    ) -> exec::Job<'a> {
        exec::Job {
            snap,
            health: &state.health,
            route,
            estimate: 0,
            deadline: self.deadline,
            spend: exec::ChannelSpend::new(&state.meter, 0, 0, snap.server.hold_ttl),
            trace: self.trace.as_ref(),
            waited: &self.waited,
            stream: false,
        }
    }
}

/// The route of a call that one model's channels serve, as `key` sees them.
fn route<'a>(
    state: &'a AppState,
    key: &'a GatewayKey,
    chain: &'a crate::router::Chain,
) -> exec::Route<'a> {
    exec::Route {
        key,
        chain,
        bound: None,
        bound_credential: None,
        shared: Some(&state.state),
        trim: None,
        only: None,
        counting: None,
    }
}
