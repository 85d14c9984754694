//! OpenAI's Responses API (`POST /v1/responses`): read into a chat request, served by any
//! channel (a channel that speaks the API gets it as sent), answered as a Response object or
//! its event stream; answers are kept for `previous_response_id`.

use serde_json::Value;

use super::openai::{OpenAiEnvelope, take_chain};
use super::{Answer, Codec, Encode, Envelope, Parsed, Rendered, StreamStart};
use crate::config::Channel;
use crate::exec::OutcomeClass;
use crate::protocol::responses::{
    Echo, Kept, StreamEncoder, request_from_value, response_to_value,
};
use crate::protocol::{ChatResponse, Protocol, StreamChunk};
use crate::server::continuation::{self, Keep, Keeper, Keeping};
use crate::server::error::ApiError;

pub struct Responses;

impl Codec for Responses {
    /// What the answer repeats of the request, and what reading it dropped.
    type Extra = Box<Echo>;
    type Encoder = ResponsesEncoder;
    const ENDPOINT: &'static str = "responses";
    const PROTOCOL: crate::protocol::Protocol = crate::protocol::Protocol::OpenAiResponses;
    const CONTINUES: bool = true;

    fn envelope(&self) -> &'static dyn Envelope {
        &OpenAiEnvelope
    }

    fn parse(&self, mut body: Value) -> Result<Parsed<Box<Echo>>, ApiError> {
        let spec = take_chain(&mut body)?;
        let (req, echo) = request_from_value(body)?;
        Ok(Parsed {
            req,
            spec,
            extra: Box::new(echo),
        })
    }

    fn as_sent(&self, channel: &Channel) -> bool {
        channel.responses
    }

    /// Hosted tools and the like, which a chat request cannot carry.
    fn read_losses(&self, echo: &Box<Echo>) -> Vec<String> {
        echo.losses.clone()
    }

    /// A response the API keeps (`store`, true unless the client says `false`) is its own,
    /// continued by its id: never replayed from the cache.
    fn kept(&self, echo: &Box<Echo>) -> bool {
        echo.store
    }

    fn render(&self, resp: ChatResponse, echo: &Box<Echo>, a: &Answer) -> Rendered {
        let (mut v, keep) = match resp.raw {
            // From an upstream that speaks it: its own Response, as it came.
            Some(raw) if raw.protocol == Protocol::OpenAiResponses => {
                let id = raw.body["id"].as_str().map(str::to_string);
                (
                    raw.body,
                    Keep {
                        id,
                        kept: Kept::default(),
                        store: echo.store,
                    },
                )
            }
            _ => {
                let v = response_to_value(&resp, echo, a.model);
                let keep = Keep {
                    id: Some(echo.id.clone()),
                    kept: echo.kept(&v),
                    store: echo.store,
                };
                (v, keep)
            }
        };
        if let (Some(ext), Some(obj)) = (a.ext.clone(), v.as_object_mut()) {
            obj.insert("switchyard".into(), ext);
        }
        Rendered {
            body: serde_json::to_vec(&v).unwrap_or_default().into(),
            keep: Some(keep),
        }
    }

    fn encoder(&self, echo: Box<Echo>, s: StreamStart) -> (ResponsesEncoder, Option<Keep>) {
        // An upstream that speaks the API named its response before the first content: kept
        // now. A translated one is kept when its stream completes.
        let keep = s.answer.as_sent.then(|| Keep {
            id: s.committed.head.iter().find_map(|c| c.id.clone()),
            kept: Kept::default(),
            store: echo.store,
        });
        let keeper = continuation::keeper(s.state, s.ctx, echo.store);
        let enc = ResponsesEncoder {
            enc: StreamEncoder::new(*echo, s.answer.model.to_string()),
            keeper,
        };
        (enc, keep)
    }
}

/// Responses API events; `keeper`: where the conversation goes when the stream completes.
pub struct ResponsesEncoder {
    enc: StreamEncoder,
    keeper: Option<Keeper>,
}

impl Encode for ResponsesEncoder {
    fn chunk(&mut self, c: &mut StreamChunk, out: &mut Vec<u8>) {
        self.enc.chunk(c, out);
    }

    fn fault(&mut self, class: OutcomeClass, out: &mut Vec<u8>) {
        let (code, message) = super::fault_message(class);
        self.enc.fault(code, message, out);
    }

    fn done(&mut self, out: &mut Vec<u8>) -> Option<Keeping> {
        self.enc.done(out);
        let keeper = self.keeper.take()?;
        let (id, kept) = self.enc.completed()?;
        kept.items.as_ref()?;
        Some(keeper.keep(&id, kept))
    }
}
