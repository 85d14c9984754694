//! The SSE wire format (the WHATWG "event stream" grammar) cut into events, byte by byte as it
//! arrives. Written here rather than taken from `eventsource-stream`: that crate parsed each
//! line character by character with nom and re-allocated its buffer per line, ~8k
//! instructions an event, the largest single cost of a relayed stream (docs/benchmarks.md).
//! This one finds line ends with `memchr` and copies each event's data once.

use bytes::{Buf, BytesMut};

/// One event as sent: its `event:` name (`None` for the default `message`) and its `data:`
/// lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub name: Option<String>,
    pub data: String,
}

/// Bytes in, events out. Lines end at CRLF, LF or CR; a blank line ends an event; comments
/// (`:`…), `id:`, `retry:` and unknown fields are read and dropped; an event with no `data:`
/// line is no event. What follows the last blank line when the bytes end is an incomplete
/// event and is dropped, as the grammar says.
#[derive(Debug, Default)]
pub struct Frames {
    buf: BytesMut,
    name: Option<String>,
    data: Vec<u8>,
    /// The stream's first bytes have been looked at (for a byte-order mark).
    started: bool,
}

/// The bytes of an event were not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stream event is not valid UTF-8")]
pub struct NotUtf8;

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Frames {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if !self.started && self.buf.len() >= BOM.len() {
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.buf.advance(BOM.len());
            }
        }
    }

    /// The next complete event in the bytes pushed so far. `ended`: no more bytes will come
    /// (a CR at the very end is then a line end, not maybe the first half of a CRLF).
    pub fn next(&mut self, ended: bool) -> Result<Option<Frame>, NotUtf8> {
        loop {
            let Some(i) = memchr::memchr2(b'\n', b'\r', &self.buf) else {
                return Ok(None);
            };
            let mut end = i + 1;
            if self.buf[i] == b'\r' {
                match self.buf.get(end) {
                    Some(b'\n') => end += 1,
                    Some(_) => {}
                    None if ended => {}
                    None => return Ok(None),
                }
            }
            let frame = if i == 0 {
                self.dispatch()?
            } else {
                self.field(i);
                None
            };
            self.buf.advance(end);
            if frame.is_some() {
                return Ok(frame);
            }
        }
    }

    /// One non-blank line, the first `len` bytes of the buffer.
    fn field(&mut self, len: usize) {
        let line = &self.buf[..len];
        let (field, value) = match memchr::memchr(b':', line) {
            Some(0) => return, // a comment
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                // A name that is not UTF-8 names no event we know: the data still counts.
                self.name = std::str::from_utf8(value).ok().map(str::to_string);
            }
            _ => {}
        }
    }

    /// A blank line: the event so far, if it had data.
    fn dispatch(&mut self) -> Result<Option<Frame>, NotUtf8> {
        let name = self.name.take();
        if self.data.is_empty() {
            return Ok(None);
        }
        self.data.pop(); // the last data line's `\n`
        let data = String::from_utf8(std::mem::take(&mut self.data)).map_err(|_| NotUtf8)?;
        let name = name.filter(|n| !n.is_empty() && n != "message");
        Ok(Some(Frame { name, data }))
    }
}
