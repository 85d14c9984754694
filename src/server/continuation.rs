//! Kept Responses, over `state`: a request naming `previous_response_id` continues the
//! conversation kept here (any channel may serve, the one that made it first) or, when the
//! upstream keeps it, only on that channel; and a served Responses answer is kept for the
//! next turn (scoped to the gateway key, with the binding's TTL).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::affinity::response_key;
use super::ctx::Ctx;
use super::{ApiError, AppState};
use crate::exec::ExecError;
use crate::protocol::responses::{self, Kept};
use crate::state::{State, StoredResponse};

/// Where a `previous_response_id` takes the request: its channel, and whether only that one
/// may serve. Kept items are put back into the body. An id this key never got → 404.
pub async fn resolve(
    state: &AppState,
    ctx: &Ctx,
    body: &mut Value,
) -> Result<Option<(Arc<str>, bool)>, ApiError> {
    let Some(id) = responses::previous_response_id(body).map(str::to_string) else {
        return Ok(None);
    };
    let key = ctx.key.as_deref().unwrap_or_default();
    let kept = Box::pin(state.state.response(&response_key(key, &id)))
        .await
        .ok_or_else(|| ApiError::PreviousResponseNotFound(id.clone()))?;
    if let Some(items) = &kept.items {
        responses::continue_from(body, items)?;
        return Ok(Some((kept.channel, false)));
    }
    if !kept.upstream_keeps {
        return Err(ApiError::PreviousResponseNotFound(id));
    }
    // Only that channel has the conversation, and only as long as it speaks the API.
    let speaks = ctx
        .snap
        .channels
        .iter()
        .any(|c| c.name == kept.channel && c.responses);
    if !speaks {
        return Err(ctx.exec_error(ExecError::PreviousResponseUnavailable(
            kept.channel.to_string(),
        )));
    }
    Ok(Some((kept.channel, true)))
}

/// What a served Responses answer leaves to keep.
pub struct Keep {
    /// The response's id: the upstream's own, or this gateway's.
    pub id: Option<String>,
    /// The conversation up to it and the response itself, for a translated answer.
    pub kept: Kept,
    /// The client let it be stored (`store` is not false).
    pub store: bool,
}

/// Keeps a served Responses answer for continuations: the upstream's own id when the channel
/// speaks the API (it keeps the conversation, if the client let it), else this gateway's, with
/// the conversation (unless `store: false` or too large: then nothing can continue it).
pub async fn keep(state: &AppState, ctx: &Ctx, keep: Keep) {
    let (Some(served), Some(key)) = (&ctx.report.served, ctx.key.as_deref()) else {
        return;
    };
    let upstream_keeps = served_as_sent(ctx);
    let kept = if upstream_keeps {
        keep.store
    } else {
        keep.kept.items.is_some()
    };
    let Some(id) = keep.id.filter(|_| kept) else {
        return;
    };
    let ours = if upstream_keeps {
        Kept::default()
    } else {
        keep.kept
    };
    let stored = StoredResponse {
        channel: served.channel.clone(),
        upstream_keeps,
        items: ours.items.map(Into::into),
        response: ours.response.map(Into::into),
    };
    let ttl = ctx.snap.affinity.ttl;
    Box::pin(
        state
            .state
            .keep_response(&response_key(key, &id), &stored, ttl),
    )
    .await;
}

/// The channel that served speaks the Responses API: it got the request as sent.
pub fn served_as_sent(ctx: &Ctx) -> bool {
    ctx.report.served.as_ref().is_some_and(|s| {
        ctx.snap
            .channels
            .iter()
            .any(|c| c.name == s.channel && c.responses)
    })
}

/// For a translated Responses stream the client lets be kept: where its conversation goes
/// when the stream completes.
pub fn keeper(state: &AppState, ctx: &Ctx, store: bool) -> Option<Keeper> {
    let served = ctx.report.served.as_ref()?;
    (store && !served_as_sent(ctx)).then(|| Keeper {
        state: state.state.clone(),
        key: ctx.key.clone().unwrap_or_else(|| "".into()),
        channel: served.channel.clone(),
        ttl: ctx.snap.affinity.ttl,
    })
}

/// Keeps a translated Responses stream's conversation once it completed.
pub struct Keeper {
    state: Arc<State>,
    key: Arc<str>,
    channel: Arc<str>,
    ttl: Duration,
}

/// Writing a completed stream's conversation: awaited before the stream's last frame goes out,
/// so a client that continues the response at once finds it.
pub type Keeping = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Keeper {
    pub fn keep(self, id: &str, kept: Kept) -> Keeping {
        let stored = StoredResponse {
            channel: self.channel,
            upstream_keeps: false,
            items: kept.items.map(Into::into),
            response: kept.response.map(Into::into),
        };
        let key = response_key(&self.key, id);
        Box::pin(async move {
            self.state.keep_response(&key, &stored, self.ttl).await;
        })
    }
}
