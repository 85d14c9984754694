//! OpenAI Chat Completions (`POST /v1/chat/completions`): the canonical form's own shape,
//! so reading and writing are direct; its error envelope is shared by the Responses API.

use serde_json::Value;

pub use super::super::envelope::OpenAiEnvelope;
use super::{Answer, Codec, Encode, Envelope, Parsed, Rendered, StreamStart};
use crate::exec::OutcomeClass;
use crate::protocol::chain::{self, ChainSpec};
use crate::protocol::openai::{ChunkBody, ResponseBody, error_body, request_from_value};
use crate::protocol::ours::{append_switchyard, data_frame, edited, merge_switchyard};
use crate::protocol::{ChatRequest, ChatResponse, InvalidRequest, Protocol, RawEvent, StreamChunk};
use crate::server::continuation::{Keep, Keeping};
use crate::server::error::ApiError;

pub struct OpenAiChat;

/// The caller's chain fields (`models`, `fallback_models`, `redundancy`) taken out of a body
/// that carries them at the top level (OpenAI, Anthropic and Responses bodies).
pub fn take_chain(body: &mut Value) -> Result<ChainSpec, ApiError> {
    Ok(match body.as_object_mut() {
        Some(m) => chain::take(m)?,
        None => ChainSpec::default(),
    })
}

/// A body that carries the caller's chain at its top level, read by `read` once the chain
/// fields are out of it.
pub fn chat_parse(
    mut body: Value,
    read: fn(Value) -> Result<ChatRequest, InvalidRequest>,
) -> Result<Parsed<()>, ApiError> {
    let spec = take_chain(&mut body)?;
    Ok(Parsed {
        req: read(body)?,
        spec,
        extra: (),
    })
}

impl Codec for OpenAiChat {
    type Extra = ();
    type Encoder = OpenAiEncoder;
    const ENDPOINT: &'static str = "chat.completions";
    const PROTOCOL: crate::protocol::Protocol = crate::protocol::Protocol::OpenAiChat;

    fn envelope(&self) -> &'static dyn Envelope {
        &OpenAiEnvelope
    }

    fn parse(&self, body: Value) -> Result<Parsed<()>, ApiError> {
        chat_parse(body, request_from_value)
    }

    fn render(&self, resp: ChatResponse, _: &(), a: &Answer) -> Rendered {
        if let Some(bytes) = resp.as_sent {
            // An upstream's answer as it came; with a failover report, the report is its
            // `switchyard` field (the only field the gateway writes into a passed answer).
            let body = match &a.ext {
                None => bytes,
                Some(r) => edited(&bytes, |m| {
                    m.insert("switchyard".into(), r.clone());
                })
                .map_or(bytes, Into::into),
            };
            return Rendered { body, keep: None };
        }
        let body = serde_json::to_vec(&ResponseBody {
            resp: &resp,
            report: a.ext.as_ref(),
        });
        Rendered {
            body: body.unwrap_or_default().into(),
            keep: None,
        }
    }

    fn encoder(&self, _: (), s: StreamStart) -> (OpenAiEncoder, Option<Keep>) {
        let enc = OpenAiEncoder {
            report: s.answer.ext,
            include_usage: s.include_usage,
        };
        (enc, None)
    }
}

/// `"usage"` as a key: what a passed event holds when the upstream answered our usage request.
static USAGE_KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));

/// Chat Completions chunks as `data:` frames, ended by `[DONE]`.
pub struct OpenAiEncoder {
    /// The failover report, added to the first chunk when something moved the request.
    report: Option<Value>,
    include_usage: bool,
}

impl Encode for OpenAiEncoder {
    fn chunk(&mut self, c: &mut StreamChunk, out: &mut Vec<u8>) {
        if c.is_raw_only() {
            return;
        }
        if let Some(raw) = c.raw.take().filter(|r| r.protocol == Protocol::OpenAiChat) {
            return self.pass(c, &raw, out);
        }
        if let Some(r) = self.report.take() {
            c.extra.insert("switchyard".into(), r);
        }
        if !self.include_usage {
            // We asked the upstream for usage for the log; the client did not.
            if c.is_usage_only() {
                return;
            }
            c.usage = None;
        }
        out.extend_from_slice(b"data: ");
        // Serialising our own types into a Vec cannot fail; on the impossible error the frame
        // is left empty rather than the stream broken.
        let body = ChunkBody {
            chunk: c,
            usage_null: self.include_usage,
        };
        let _ = serde_json::to_writer(&mut *out, &body);
        out.extend_from_slice(b"\n\n");
    }

    fn fault(&mut self, class: OutcomeClass, out: &mut Vec<u8>) {
        let (code, message) = super::fault_message(class);
        let e = error_body(message, "server_error", code, None, None);
        out.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }

    fn done(&mut self, out: &mut Vec<u8>) -> Option<Keeping> {
        out.extend_from_slice(b"data: [DONE]\n\n");
        None
    }
}

impl OpenAiEncoder {
    /// An upstream Chat Completions event, written as it came, except where the gateway has
    /// its own to say: the failover report (first chunk), usage the client did not ask for
    /// (dropped), the stream's cost beside the usage (`switchyard.cost_micros`). Only those
    /// few events are parsed and written again.
    fn pass(&mut self, c: &StreamChunk, raw: &RawEvent, out: &mut Vec<u8>) {
        if self.report.is_none() && c.usage.is_none() {
            // `"usage": null` on each chunk answers the usage we asked for, not the client.
            if self.include_usage || USAGE_KEY.find(raw.data.as_bytes()).is_none() {
                return raw.write(out);
            }
            // OpenAI writes it last: cut it there without reading the event.
            if let Some(kept) = raw
                .data
                .strip_suffix(",\"usage\":null}")
                .filter(|k| !k.contains('\n'))
            {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(kept.as_bytes());
                out.extend_from_slice(b"}\n\n");
                return;
            }
        }
        if !self.include_usage && c.is_usage_only() {
            return;
        }
        // The usage event the client asked for: the cost goes in as the event's last member,
        // without reading the event (it is read and written again only to merge with an
        // upstream `switchyard` of its own).
        if self.report.is_none()
            && self.include_usage
            && let Some(ours) = c.extra.get("switchyard")
            && append_switchyard(&raw.data, ours, out)
        {
            return;
        }
        let (report, include_usage) = (self.report.take(), self.include_usage);
        let written = edited(raw.data.as_bytes(), |m| {
            if let Some(r) = report {
                m.insert("switchyard".into(), r);
            }
            if !include_usage {
                m.shift_remove("usage");
            }
            // The gateway's own fields (the cost) join the upstream's `switchyard` object.
            if let Some(ours) = c.extra.get("switchyard") {
                merge_switchyard(m, ours);
            }
        });
        match written {
            Some(json) => data_frame(&json, out),
            None => raw.write(out),
        }
    }
}
