//! The one SSE adapter for every upstream kind: upstream events → canonical chunks, through
//! a [`Decoder`] per protocol that says what each event means and whether an end of the bytes
//! is a complete answer or a broken one. With `raw`, every event also goes on as it came, for
//! a client that speaks the upstream's protocol.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use hyper::body::Body;

use super::UpstreamError;
use super::http::error_chain;
use crate::protocol::{Decoded, Protocol, RawEvent, StreamChunk};

mod frames;
pub use frames::{Frame, Frames, NotUtf8};

/// A protocol's stream decoder: one SSE event (its name and data as sent) at a time.
pub trait Decoder: Send + Unpin {
    fn decode(&mut self, event: &str, data: &str) -> Decoded;
    /// The bytes ended: `Ok` if what came is a complete answer, else why it is broken.
    fn at_end(&self) -> Result<(), &'static str>;
}

/// How a body's bytes are cut into events: SSE's grammar ([`Frames`]), or another framing
/// whose messages carry an event name and a text payload (AWS's event stream).
pub trait Framing: Send + Unpin {
    type Error: std::fmt::Display;
    fn push(&mut self, bytes: &[u8]);
    /// The next whole event, if one is in; `ended`: no more bytes will come.
    fn next(&mut self, ended: bool) -> Result<Option<Frame>, Self::Error>;
}

impl Framing for Frames {
    type Error = NotUtf8;

    fn push(&mut self, bytes: &[u8]) {
        Frames::push(self, bytes);
    }

    fn next(&mut self, ended: bool) -> Result<Option<Frame>, NotUtf8> {
        Frames::next(self, ended)
    }
}

/// A decoder's events over an upstream body ([`super::pool::Body`] in the gateway; any body of bytes for
/// the fuzz targets, which drive this very code), cut by `F` (SSE unless said).
pub struct Events<D, B = super::pool::Body, F = Frames> {
    body: B,
    frames: F,
    /// The upstream's bytes ended.
    ended: bool,
    decoder: D,
    raw: Option<Protocol>,
    done: bool,
    /// The upstream's error event went on (for a same-protocol client); the error follows.
    failing: bool,
}

impl<D: Decoder> Events<D> {
    pub fn new(resp: super::http::Response, decoder: D, raw: Option<Protocol>) -> Self {
        Events::over(resp.into_body(), decoder, raw)
    }
}

impl<D: Decoder, B> Events<D, B> {
    pub fn over(body: B, decoder: D, raw: Option<Protocol>) -> Self {
        Events::framed(body, Frames::default(), decoder, raw)
    }
}

impl<D: Decoder, B, F: Framing> Events<D, B, F> {
    /// Events cut from `body` by `frames`.
    pub fn framed(body: B, frames: F, decoder: D, raw: Option<Protocol>) -> Self {
        Events {
            body,
            frames,
            ended: false,
            decoder,
            raw,
            done: false,
            failing: false,
        }
    }

    fn end(
        &mut self,
        item: Option<Result<Box<StreamChunk>, UpstreamError>>,
    ) -> Poll<Option<Result<Box<StreamChunk>, UpstreamError>>> {
        self.done = true;
        Poll::Ready(item)
    }
}

impl<D: Decoder, B, F: Framing> Stream for Events<D, B, F>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    type Item = Result<Box<StreamChunk>, UpstreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failing {
            self.failing = false;
            return self.end(Some(Err(UpstreamError::StreamError)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            let ended = self.ended;
            let ev = match self.frames.next(ended) {
                Ok(Some(ev)) => ev,
                Err(e) => return self.end(Some(Err(UpstreamError::Broken(e.to_string())))),
                Ok(None) if ended => {
                    let end = self.decoder.at_end();
                    return self.end(end.err().map(|why| Err(UpstreamError::Broken(why.into()))));
                }
                Ok(None) => {
                    match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                        Some(Ok(f)) => {
                            if let Some(b) = f.data_ref() {
                                self.frames.push(b);
                            }
                        }
                        Some(Err(e)) => {
                            let msg = error_chain(&e);
                            return self.end(Some(Err(UpstreamError::Broken(msg))));
                        }
                        None => self.ended = true,
                    }
                    continue;
                }
            };
            let decoded = self
                .decoder
                .decode(ev.name.as_deref().unwrap_or("message"), &ev.data);
            // An unnamed event is a `message` one: written back unnamed, as it came.
            let raw = self.raw.map(|protocol| RawEvent {
                protocol,
                event: ev.name,
                data: ev.data,
            });
            let chunk = |mut c: Box<StreamChunk>, raw| {
                c.raw = raw;
                Poll::Ready(Some(Ok(c)))
            };
            match (decoded, raw) {
                (Decoded::Chunk(c), raw) => return chunk(c, raw),
                (Decoded::Last(c), raw) => {
                    self.done = true;
                    return chunk(c, raw);
                }
                (Decoded::Nothing, Some(raw)) => {
                    return Poll::Ready(Some(Ok(Box::new(StreamChunk::raw_only(raw)))));
                }
                (Decoded::Nothing, None) | (Decoded::Skip, _) => continue,
                (Decoded::End, _) => return self.end(None),
                // The upstream's own words first, for a client that speaks them (after commit it
                // sees them; before, the attempt fails over either way).
                (Decoded::Error, Some(raw)) => {
                    self.failing = true;
                    return Poll::Ready(Some(Ok(Box::new(StreamChunk::raw_only(raw)))));
                }
                (Decoded::Error, None) => return self.end(Some(Err(UpstreamError::StreamError))),
                (Decoded::Invalid(e), _) => return self.end(Some(Err(e.into()))),
            }
        }
    }
}

/// For decoders of protocols whose events are JSON: the data parsed, or `None` for a
/// keep-alive or blank event (skipped).
pub fn json(data: &str) -> Option<serde_json::Value> {
    serde_json::from_str(data).ok()
}

/// Every item `decoder` makes of a body that arrives in `pieces`, polled exactly as a live
/// stream is (the fuzz targets and their corpus replay; every piece is ready at once).
pub fn collect<D: Decoder>(
    decoder: D,
    raw: Option<Protocol>,
    pieces: &[&[u8]],
) -> Vec<Result<Box<StreamChunk>, UpstreamError>> {
    collect_framed(Frames::default(), decoder, raw, pieces)
}

/// As [`collect`], for events cut by other `frames` than SSE's (Bedrock's event stream).
pub fn collect_framed<F: Framing, D: Decoder>(
    frames: F,
    decoder: D,
    raw: Option<Protocol>,
    pieces: &[&[u8]],
) -> Vec<Result<Box<StreamChunk>, UpstreamError>> {
    let data = pieces.iter().map(|p| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(
            p,
        )))
    });
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(data));
    let mut events = Events::framed(body, frames, decoder, raw);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut out = Vec::new();
    while let Poll::Ready(Some(item)) = Pin::new(&mut events).poll_next(&mut cx) {
        out.push(item);
    }
    out
}
