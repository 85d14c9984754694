//! The mock server's answer in each wire protocol it speaks: OpenAI chat completions, Anthropic
//! Messages, Gemini and Responses. All four answer from the same canonical reply; this file
//! only reads the request and writes the reply (whole, streamed, or a fault) in its protocol.

use bytes::Bytes;
use serde_json::Value;

use crate::protocol::openai::{ChunkBody, ResponseBody};
use crate::protocol::{
    ChatRequest, ChatResponse, InvalidRequest, StreamChunk, anthropic, gemini, openai, responses,
};

/// The protocol a mock request speaks (Gemini carries model and stream in its URL).
pub(super) enum Proto {
    OpenAi,
    Anthropic,
    Gemini { model: String, stream: bool },
    Responses,
}

impl Proto {
    /// The route a received request is recorded under.
    pub(super) fn path(&self) -> &'static str {
        match self {
            Proto::Anthropic => "/messages",
            Proto::Gemini { .. } => "/generateContent",
            Proto::OpenAi => "/chat/completions",
            Proto::Responses => "/responses",
        }
    }

    /// The canonical request, and what its answer needs to be written back.
    pub(super) fn parse(self, v: Value) -> Result<(ChatRequest, Wire), InvalidRequest> {
        match self {
            Proto::OpenAi => Ok((openai::request_from_value(v)?, Wire::OpenAi)),
            Proto::Anthropic => Ok((anthropic::request_from_value(v)?, Wire::Anthropic)),
            Proto::Gemini { model, stream } => {
                Ok((gemini::request_from_value(v, &model, stream)?, Wire::Gemini))
            }
            Proto::Responses => {
                responses::request_from_value(v).map(|(r, echo)| (r, Wire::Responses(echo)))
            }
        }
    }
}

/// The protocol of a parsed request; a Responses answer echoes parts of its request.
pub(super) enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
    Responses(responses::Echo),
}

impl Wire {
    /// A fault's body in this protocol's error envelope, when it is not OpenAI's (which
    /// `status_response` already wrote).
    pub(super) fn error_body(&self, status: u16) -> Option<Value> {
        let message = format!("mock fault: HTTP {status}");
        match self {
            Wire::Anthropic => Some(anthropic::error_body(status, &message)),
            Wire::Gemini => Some(gemini::error_body(status, &message)),
            Wire::OpenAi | Wire::Responses(_) => None,
        }
    }

    /// A whole (not streamed) answer as this protocol's JSON.
    pub(super) fn object(&self, resp: &ChatResponse, model: &str) -> Vec<u8> {
        match self {
            Wire::OpenAi => serde_json::to_vec(&ResponseBody { resp, report: None }),
            Wire::Anthropic => serde_json::to_vec(&anthropic::response_to_value(resp, model)),
            Wire::Gemini => serde_json::to_vec(&gemini::response_to_value(resp, model)),
            Wire::Responses(echo) => {
                serde_json::to_vec(&responses::response_to_value(resp, echo, model))
            }
        }
        .unwrap_or_default()
    }

    /// Whether a stream ends with a usage chunk: OpenAI's only when the client asked for it;
    /// the others always report usage as their message ends.
    pub(super) fn include_usage(&self, req: &ChatRequest) -> bool {
        req.stream_include_usage || !matches!(self, Wire::OpenAi)
    }

    /// The encoder of a stream in this protocol.
    pub(super) fn frames(self, model: String, include_usage: bool) -> Frames {
        match self {
            Wire::OpenAi => Frames::OpenAi { include_usage },
            Wire::Anthropic => Frames::Anthropic {
                enc: anthropic::StreamEncoder::default(),
                model,
            },
            Wire::Gemini => Frames::Gemini {
                enc: gemini::StreamEncoder::default(),
                model,
            },
            Wire::Responses(echo) => {
                Frames::Responses(Box::new(responses::StreamEncoder::new(echo, model)))
            }
        }
    }
}

/// Writes a stream's canonical chunks in one protocol's events.
pub(super) enum Frames {
    OpenAi {
        include_usage: bool,
    },
    Anthropic {
        enc: anthropic::StreamEncoder,
        model: String,
    },
    Gemini {
        enc: gemini::StreamEncoder,
        model: String,
    },
    // Boxed: over twice the size of any other variant.
    Responses(Box<responses::StreamEncoder>),
}

impl Frames {
    /// The events for one chunk. The usage chunk is the last: the others' message ends with it.
    pub(super) fn frame(&mut self, c: &StreamChunk) -> Bytes {
        let mut out = Vec::new();
        match self {
            Frames::OpenAi { include_usage } => {
                out.extend_from_slice(b"data: ");
                out.extend(
                    serde_json::to_vec(&ChunkBody {
                        chunk: c,
                        usage_null: *include_usage,
                    })
                    .unwrap_or_default(),
                );
                out.extend_from_slice(b"\n\n");
            }
            Frames::Anthropic { enc, model } => {
                enc.chunk(c, model, &mut out);
                if c.is_usage_only() {
                    enc.done(&mut out);
                }
            }
            Frames::Gemini { enc, model } => {
                enc.chunk(c, model, &mut out);
                if c.is_usage_only() {
                    enc.done(model, &mut out);
                }
            }
            Frames::Responses(enc) => {
                enc.chunk(c, &mut out);
                if c.is_usage_only() {
                    enc.done(&mut out);
                }
            }
        }
        Bytes::from(out)
    }

    /// What follows the last chunk of a stream that ended cleanly (OpenAI's `[DONE]`).
    pub(super) fn end(&self) -> Option<Bytes> {
        matches!(self, Frames::OpenAi { .. }).then(|| Bytes::from_static(b"data: [DONE]\n\n"))
    }
}
