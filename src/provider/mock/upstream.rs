//! The in-process mock (`provider = "mock"`): answers as an upstream would, without HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;

use super::reply::{
    Paced, embeddings_reply, error_json, paced, pause, reply, reply_chunks, schedule,
};
use super::spec::{Behaviour, MockSpec};
use crate::protocol::{ChatRequest, ChatResponse, EmbeddingsRequest};
use crate::provider::{ChunkStream, UpstreamError, Waited};

#[derive(Debug)]
pub struct MockUpstream {
    spec: MockSpec,
    seen: AtomicU64,
}

impl MockUpstream {
    pub fn new(spec: MockSpec) -> Self {
        MockUpstream {
            spec,
            seen: AtomicU64::new(0),
        }
    }

    /// The request's number and behaviour; `model` (the upstream's name) picks `per_model`.
    fn next(&self, model: &str) -> (u64, Behaviour) {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        (n, self.spec.behaviour_for(n, None, model))
    }

    fn status_error(status: u16, retry_after: Option<u64>) -> UpstreamError {
        UpstreamError::Status {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            body: Bytes::from(error_json(status).to_string()),
            content_type: Some("application/json".into()),
        }
    }

    /// `waited`: the mock's pauses are the upstream's time, as a real upstream's would be.
    pub async fn chat(
        &self,
        req: &ChatRequest,
        model: &str,
        waited: &Waited,
    ) -> Result<ChatResponse, UpstreamError> {
        let _waiting = waited.start();
        let (n, b) = self.next(model);
        let (spec, b) = self.spec.applying(b);
        match b {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang => std::future::pending().await,
            Behaviour::CutAfter(_) => {
                pause(Duration::from_millis(spec.ttft_ms)).await;
                Err(UpstreamError::Broken("mock cut the connection".into()))
            }
            Behaviour::StallAfter(_) => std::future::pending().await,
            Behaviour::Empty => {
                let mut r = reply(&spec, model, req, n);
                r.choices.clear();
                Ok(r)
            }
            Behaviour::Malformed => {
                pause(spec.total_time()).await;
                Err(garbled())
            }
            Behaviour::Normal | Behaviour::SlowFirst(_) => {
                pause(spec.total_time()).await;
                Ok(reply(&spec, model, req, n))
            }
        }
    }

    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        model: &str,
    ) -> Result<ChunkStream, UpstreamError> {
        let (n, b) = self.next(model);
        let (spec, b) = self.spec.applying(b);
        if let Behaviour::Status(s, ra) = b {
            return Err(Self::status_error(s, ra));
        }
        let items = schedule(&spec, b, reply_chunks(&spec, model, req, n));
        Ok(Box::pin(paced(items).filter_map(|item| async move {
            match item {
                Paced::Chunk(c) => Some(Ok(c)),
                Paced::Garbage => Some(Err(garbled())),
                Paced::Break => Some(Err(UpstreamError::Broken("mock cut the stream".into()))),
            }
        })))
    }

    pub async fn models(&self) -> Result<(), UpstreamError> {
        match self.next("").1 {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang | Behaviour::StallAfter(_) => std::future::pending().await,
            _ => Ok(()),
        }
    }

    pub async fn embeddings(
        &self,
        req: &EmbeddingsRequest,
        model: &str,
        waited: &Waited,
    ) -> Result<Value, UpstreamError> {
        let _waiting = waited.start();
        let (_, b) = self.next(model);
        match b {
            Behaviour::Status(s, ra) => Err(Self::status_error(s, ra)),
            Behaviour::Hang => std::future::pending().await,
            Behaviour::CutAfter(_) => Err(UpstreamError::Broken("mock cut the connection".into())),
            Behaviour::StallAfter(_) => std::future::pending().await,
            Behaviour::Empty
            | Behaviour::Normal
            | Behaviour::Malformed
            | Behaviour::SlowFirst(_) => {
                pause(Duration::from_millis(self.spec.ttft_ms)).await;
                Ok(embeddings_reply(&self.spec, model, &req.input))
            }
        }
    }
}

/// What a `malformed` answer comes to without HTTP: a body the protocol cannot read.
fn garbled() -> UpstreamError {
    UpstreamError::Invalid(crate::protocol::InvalidUpstream {
        what: "answer",
        message: "the mock sent a body that is not JSON".into(),
    })
}
