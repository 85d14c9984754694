//! A server's answer as the gateway reads it: one message, a stream of them (an event
//! stream's, or a request's messages on a kept connection), or 202.

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;

use super::link::Failure;
use crate::provider::Frames;

/// A server's answer to a POST.
pub enum Reply {
    Message(Value),
    Stream(Messages),
    Accepted,
}

impl Reply {
    /// The answer to request `id`, read past what comes before it in a stream (at most
    /// `within`).
    pub async fn answer(self, id: &Value, within: std::time::Duration) -> Result<Value, Failure> {
        match self {
            Reply::Message(v) => Ok(v),
            Reply::Accepted => Err(Failure::Malformed("no answer to a request".into())),
            Reply::Stream(mut s) => {
                let read = async {
                    while let Some(m) = s.next().await? {
                        if m.get("id") == Some(id) && m.get("method").is_none() {
                            return Ok(m);
                        }
                    }
                    Err(Failure::Malformed(
                        "the stream ended without the answer".into(),
                    ))
                };
                tokio::time::timeout(within, read)
                    .await
                    .map_err(|_| Failure::Timeout)?
            }
        }
    }
}

/// Messages of an event stream, as they arrive.
pub struct Messages(Inner);

enum Inner {
    Http {
        body: BoxStream<'static, reqwest::Result<Bytes>>,
        frames: Frames,
        ended: bool,
    },
    /// A request's messages on a connection (the older transports).
    Waiting(super::conn::Waiting),
    /// What a connection's server sends on its own.
    Heard(tokio::sync::broadcast::Receiver<Value>),
}

impl Messages {
    pub fn of(resp: reqwest::Response) -> Messages {
        Messages(Inner::Http {
            body: resp.bytes_stream().boxed(),
            frames: Frames::default(),
            ended: false,
        })
    }

    pub fn waiting(w: super::conn::Waiting) -> Messages {
        Messages(Inner::Waiting(w))
    }

    pub fn heard(rx: tokio::sync::broadcast::Receiver<Value>) -> Messages {
        Messages(Inner::Heard(rx))
    }

    /// The next message; `None` when the stream ended. Events that are not JSON are skipped
    /// (a server's keep-alive or priming events carry no message).
    pub async fn next(&mut self) -> Result<Option<Value>, Failure> {
        use tokio::sync::broadcast::error::RecvError;
        let (body, frames, ended) = match &mut self.0 {
            Inner::Http {
                body,
                frames,
                ended,
            } => (body, frames, ended),
            Inner::Waiting(w) => {
                return match w.rx.recv().await {
                    Some(v) => Ok(Some(v)),
                    None => Err(Failure::Connect("the server's connection ended".into())),
                };
            }
            Inner::Heard(rx) => loop {
                match rx.recv().await {
                    Ok(v) => return Ok(Some(v)),
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return Ok(None),
                }
            },
        };
        loop {
            match frames.next(*ended) {
                Ok(Some(f)) => match serde_json::from_str::<Value>(&f.data) {
                    Ok(v) if v.is_object() => return Ok(Some(v)),
                    _ => continue,
                },
                Ok(None) if *ended => return Ok(None),
                Ok(None) => {}
                Err(e) => return Err(Failure::Malformed(e.to_string())),
            }
            match body.next().await {
                Some(Ok(b)) => frames.push(&b),
                Some(Err(e)) => {
                    return Err(Failure::Connect(crate::provider::redact_url(
                        &e.to_string(),
                    )));
                }
                None => *ended = true,
            }
        }
    }
}
