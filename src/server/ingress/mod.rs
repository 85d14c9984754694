//! The client protocols: each is one [`Codec`] value that reads its requests into the
//! canonical form and writes answers, streams and errors in its own wire format, so the
//! pipeline is one generic function over it. The registry of routes is `server::handlers`.
//!
//! Adding a client protocol: a module here implementing `Codec`, `Encode` and `Envelope`
//! (its translation functions in `protocol::<name>`), and its route(s) in `server::handlers`.

pub mod anthropic;
pub mod gemini;
pub mod openai;
pub mod responses;

use axum::body::Bytes;
use serde_json::Value;

use super::AppState;
use super::continuation::{Keep, Keeping};
use super::ctx::Ctx;
pub use super::envelope::{Envelope, ErrorView};
use super::error::ApiError;
use crate::config::Channel;
use crate::exec::{Committed, OutcomeClass};
use crate::protocol::chain::ChainSpec;
use crate::protocol::{ChatRequest, ChatResponse, StreamChunk};

/// A request as a protocol read it.
pub struct Parsed<X> {
    pub req: ChatRequest,
    /// The caller's chain (`models`, `fallback_models`), where the protocol carries one.
    pub spec: ChainSpec,
    /// What the protocol keeps from reading to answering.
    pub extra: X,
}

/// What every answer is written with.
pub struct Answer<'a> {
    /// The model as the client asked for it.
    pub model: &'a str,
    /// The failover report's body extension, when something moved the request.
    pub ext: Option<Value>,
    /// The serving channel got the client's request as sent (no translation either way).
    pub as_sent: bool,
}

/// A written answer, and what it leaves to keep for a later turn.
pub struct Rendered {
    pub body: Bytes,
    pub keep: Option<Keep>,
}

/// A committed stream about to be written.
pub struct StreamStart<'a> {
    pub state: &'a AppState,
    pub ctx: &'a Ctx,
    pub committed: &'a Committed,
    pub answer: Answer<'a>,
    /// The client asked for a usage chunk at the end.
    pub include_usage: bool,
}

/// One client protocol.
pub trait Codec: Send + Sync + 'static {
    /// What the protocol keeps from reading a request to answering it.
    type Extra: Send + Sync;
    type Encoder: Encode;
    /// The request log's name for the endpoint.
    const ENDPOINT: &'static str;
    /// The protocol the client speaks (where it names its end user).
    const PROTOCOL: crate::protocol::Protocol;
    /// Requests may continue a kept response (`previous_response_id`).
    const CONTINUES: bool = false;

    fn envelope(&self) -> &'static dyn Envelope;

    /// The model and stream flag, for a protocol whose path names them (Gemini's): known, and
    /// logged, even when the body never arrives.
    fn path_target(&self) -> Option<(&str, bool)> {
        None
    }

    /// The body → the canonical request, the caller's chain and what the answer needs.
    fn parse(&self, body: Value) -> Result<Parsed<Self::Extra>, ApiError>;

    /// Whether the serving channel gets this protocol's requests as sent.
    fn as_sent(&self, _channel: &Channel) -> bool {
        false
    }

    /// The gateway keeps this request's answer for a later turn (a Responses `store`): it is
    /// never answered from the response cache.
    fn kept(&self, _extra: &Self::Extra) -> bool {
        false
    }

    /// What reading the request dropped, beyond what translating it for the channel loses.
    fn read_losses(&self, _extra: &Self::Extra) -> Vec<String> {
        Vec::new()
    }

    /// The whole answer in the client's wire format.
    fn render(&self, resp: ChatResponse, extra: &Self::Extra, a: &Answer) -> Rendered;

    /// The encoder of a committed stream, and what its opening leaves to keep.
    fn encoder(&self, extra: Self::Extra, s: StreamStart) -> (Self::Encoder, Option<Keep>);
}

/// Writes a committed stream in a client protocol, one canonical chunk at a time.
pub trait Encode: Send + Unpin + 'static {
    fn chunk(&mut self, c: &mut StreamChunk, out: &mut Vec<u8>);
    /// The stream broke after commit: the protocol's error event, and no clean end.
    fn fault(&mut self, class: OutcomeClass, out: &mut Vec<u8>);
    /// The stream completed; anything to await before its last frames go out.
    fn done(&mut self, out: &mut Vec<u8>) -> Option<Keeping>;
}

/// The code and message of a post-commit fault, the same for every protocol.
pub fn fault_message(class: OutcomeClass) -> (&'static str, &'static str) {
    match class {
        OutcomeClass::Timeout => (
            "stream_timeout",
            "the upstream stopped sending for longer than the idle timeout after the response began",
        ),
        _ => (
            "stream_interrupted",
            "the upstream stream failed after the response began",
        ),
    }
}
