//! Bedrock's streams: AWS event-stream messages (`application/vnd.amazon.eventstream`), cut by
//! AWS's own decoder (`aws-smithy-eventstream`, which checks both CRCs), as the events the
//! shared stream adapter reads. ConverseStream's messages are named by `:event-type`;
//! InvokeModelWithResponseStream's `chunk` messages carry an Anthropic event, base64 in
//! `bytes`, unwrapped here into the event it is (so an Anthropic client gets Anthropic's own
//! events). An `exception` message is named `:exception`: an error event.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use base64::Engine as _;
use bytes::BytesMut;

use crate::protocol::{Decoded, anthropic, bedrock};
use crate::provider::sse::{Decoder, Frame, Framing, json};

/// The event name an exception message becomes.
pub const EXCEPTION: &str = ":exception";

/// Event-stream bytes in, events out.
pub struct AwsFrames {
    buf: BytesMut,
    decoder: MessageFrameDecoder,
    /// InvokeModel's `chunk` messages: their payload's `bytes` is the event.
    unwrap_chunks: bool,
}

impl AwsFrames {
    pub fn new(unwrap_chunks: bool) -> Self {
        AwsFrames {
            buf: BytesMut::new(),
            decoder: MessageFrameDecoder::new(),
            unwrap_chunks,
        }
    }

    fn header<'m>(m: &'m Message, name: &str) -> Option<&'m str> {
        m.headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| match h.value() {
                HeaderValue::String(s) => Some(s.as_str()),
                _ => None,
            })
    }

    /// A message as an event: its name, and its payload as text.
    fn event(&self, m: &Message) -> Result<Frame, String> {
        let text = |b: &[u8]| {
            String::from_utf8(b.to_vec())
                .map_err(|_| "an event-stream payload is not UTF-8".to_string())
        };
        if Self::header(m, ":message-type") == Some("exception") {
            return Ok(Frame {
                name: Some(EXCEPTION.into()),
                data: text(m.payload())?,
            });
        }
        let kind = Self::header(m, ":event-type").unwrap_or_default();
        if self.unwrap_chunks && kind == "chunk" {
            let v: serde_json::Value = serde_json::from_slice(m.payload())
                .map_err(|_| "a chunk's payload is not JSON".to_string())?;
            let inner = base64::engine::general_purpose::STANDARD
                .decode(v["bytes"].as_str().unwrap_or_default())
                .map_err(|_| "a chunk's bytes are not base64".to_string())?;
            let data = text(&inner)?;
            let name = serde_json::from_str::<serde_json::Value>(&data)
                .ok()
                .and_then(|e| e["type"].as_str().map(str::to_string));
            return Ok(Frame { name, data });
        }
        Ok(Frame {
            name: Some(kind.to_string()),
            data: text(m.payload())?,
        })
    }
}

impl Framing for AwsFrames {
    type Error = String;

    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn next(&mut self, _ended: bool) -> Result<Option<Frame>, String> {
        match self.decoder.decode_frame(&mut self.buf) {
            Ok(DecodedFrame::Complete(m)) => self.event(&m).map(Some),
            Ok(DecodedFrame::Incomplete) => Ok(None),
            Err(e) => Err(format!("a broken event-stream message: {e}")),
        }
    }
}

/// ConverseStream's events through the Converse decoder.
#[derive(Default)]
pub struct ConverseEvents(bedrock::StreamDecoder);

impl Decoder for ConverseEvents {
    fn decode(&mut self, event: &str, data: &str) -> Decoded {
        if event == EXCEPTION {
            return Decoded::Error;
        }
        json(data).map_or(Decoded::Skip, |v| self.0.event(event, &v))
    }

    fn at_end(&self) -> Result<(), &'static str> {
        if self.0.complete() {
            Ok(())
        } else {
            Err("stream ended before messageStop")
        }
    }
}

/// InvokeModelWithResponseStream's Anthropic events through Anthropic's decoder.
#[derive(Default)]
pub struct InvokeEvents(anthropic::StreamDecoder);

impl Decoder for InvokeEvents {
    fn decode(&mut self, event: &str, data: &str) -> Decoded {
        if event == EXCEPTION {
            return Decoded::Error;
        }
        json(data).map_or(Decoded::Skip, |v| self.0.event(&v))
    }

    fn at_end(&self) -> Result<(), &'static str> {
        Err("stream ended before message_stop")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::Header;

    fn message(kind: &str, headers: &[(&str, &str)], payload: &str) -> Vec<u8> {
        let mut m = Message::new(payload.as_bytes().to_vec()).add_header(Header::new(
            ":message-type",
            HeaderValue::String(kind.to_string().into()),
        ));
        for (k, v) in headers {
            m = m.add_header(Header::new(
                k.to_string(),
                HeaderValue::String(v.to_string().into()),
            ));
        }
        let mut out = Vec::new();
        write_message_to(&m, &mut out).unwrap();
        out
    }

    #[test]
    fn messages_split_anywhere_come_out_whole_and_a_bad_crc_is_refused() {
        let mut bytes = message(
            "event",
            &[(":event-type", "messageStart")],
            r#"{"role":"assistant"}"#,
        );
        bytes.extend(message(
            "exception",
            &[(":exception-type", "ThrottlingException")],
            r#"{"message":"slow down"}"#,
        ));
        let mut f = AwsFrames::new(false);
        let mut got = Vec::new();
        for b in bytes.chunks(7) {
            f.push(b);
            while let Some(ev) = f.next(false).unwrap() {
                got.push((ev.name.unwrap(), ev.data));
            }
        }
        assert_eq!(
            got[0],
            ("messageStart".into(), r#"{"role":"assistant"}"#.into())
        );
        assert_eq!(got[1].0, EXCEPTION);
        let mut broken = message("event", &[(":event-type", "messageStart")], "{}");
        let last = broken.len() - 1;
        broken[last] ^= 0xff;
        let mut f = AwsFrames::new(false);
        f.push(&broken);
        assert!(f.next(false).is_err(), "a message whose CRC does not match");
    }

    #[test]
    fn an_invoke_chunk_is_the_anthropic_event_it_carries() {
        let event =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#;
        let b64 = base64::engine::general_purpose::STANDARD.encode(event);
        let bytes = message(
            "event",
            &[(":event-type", "chunk")],
            &format!(r#"{{"bytes":"{b64}"}}"#),
        );
        let mut f = AwsFrames::new(true);
        f.push(&bytes);
        let ev = f.next(false).unwrap().unwrap();
        assert_eq!(
            (ev.name.as_deref(), ev.data.as_str()),
            (Some("content_block_delta"), event)
        );
    }
}
