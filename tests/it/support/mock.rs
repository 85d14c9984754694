//! Upstreams for the gateway to call: the crate's standalone mock server with the specs and
//! faults tests give it, and small hand-made upstreams (fixed bytes, a fixed status, nothing
//! listening) for what the mock does not play.

use serde_json::Value;
use switchyard::provider::mock::{Fault, MockServer, MockSpec};

pub async fn mock(spec: MockSpec) -> MockServer {
    MockServer::start(spec).await.expect("mock starts")
}

pub fn text_spec(text: &str) -> MockSpec {
    MockSpec {
        text: text.into(),
        chunks: 3,
        ..MockSpec::default()
    }
}

/// `text` streamed as `chunks` chunks, `chunk_ms` apart.
pub fn paced(text: &str, chunks: u32, chunk_ms: u64) -> MockSpec {
    MockSpec {
        chunks,
        chunk_ms,
        ..text_spec(text)
    }
}

pub fn faulty(text: &str, fault: Fault) -> MockSpec {
    MockSpec {
        fault: Some(fault),
        ..text_spec(text)
    }
}

/// "AAAABBBBCCCCDDDD" streamed as four chunks, with a fault after `n` of them: a stream cut
/// (`cut`) or stalled (`!cut`) past its commit point.
pub fn after_chunks(n: u32, cut: bool) -> MockSpec {
    let fault = if cut {
        Fault {
            cut_after: Some(n),
            ..Fault::default()
        }
    } else {
        Fault {
            stall_after: Some(n),
            ..Fault::default()
        }
    };
    MockSpec {
        chunks: 4,
        ..faulty("AAAABBBBCCCCDDDD", fault)
    }
}

pub fn status(code: u16) -> Fault {
    Fault {
        status: Some(code),
        ..Fault::default()
    }
}

/// An upstream of any protocol that answers every POST with fixed bytes, as a real provider
/// would send them: `stream` (SSE) when asked for a stream (`"stream": true`, or Gemini's
/// `:streamGenerateContent`), `body` otherwise.
pub async fn canned_upstream(stream: &'static str, body: Value) -> std::net::SocketAddr {
    canned_bytes(stream, body.to_string().leak()).await
}

/// [`canned_upstream`] with the answer's JSON bytes exactly as given (spacing, field order).
pub async fn canned_bytes(stream: &'static str, body: &'static str) -> std::net::SocketAddr {
    use axum::{Json, Router, extract::State, http::Uri, http::header, response::IntoResponse};
    async fn answer(
        State((stream, body)): State<(&'static str, &'static str)>,
        uri: Uri,
        Json(req): Json<Value>,
    ) -> axum::response::Response {
        let sse = req["stream"] == true || uri.path().ends_with(":streamGenerateContent");
        let (kind, bytes) = if sse {
            ("text/event-stream", stream)
        } else {
            ("application/json", body)
        };
        ([(header::CONTENT_TYPE, kind)], bytes).into_response()
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = Router::new()
        .fallback(axum::routing::post(answer))
        .with_state((stream, body));
    tokio::spawn(async move { axum::serve(l, app).await });
    addr
}

/// An upstream that answers every request with this status and JSON body.
pub async fn answering(status: u16, body: Value) -> std::net::SocketAddr {
    use axum::{Json, Router, http::StatusCode, response::IntoResponse};
    let code = StatusCode::from_u16(status).expect("status");
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = Router::new().fallback(move || {
        let body = body.clone();
        async move { (code, Json(body)).into_response() }
    });
    tokio::spawn(async move { axum::serve(l, app).await });
    addr
}

/// A base URL where nothing listens: connection refused.
pub async fn refused_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}/v1")
}

/// Waits for a mock to reach a state, failing the test (not hanging it) after 10 s.
pub async fn eventually(m: &MockServer, what: &str, pred: impl Fn(&MockServer) -> bool) {
    tokio::time::timeout(std::time::Duration::from_secs(10), m.wait_until(pred))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for: {what}"));
}

/// Asserts a mock does not reach a state for `within`, failing the test with `what` the moment
/// it does. The one wait that lasts its whole window, because it waits on an absence: nothing
/// signals that something did not happen, so `within` is the time a faulty gateway would need
/// to make it happen.
pub async fn never_within(
    m: &MockServer,
    what: &str,
    within: std::time::Duration,
    pred: impl Fn(&MockServer) -> bool,
) {
    let reached = tokio::time::timeout(within, m.wait_until(pred)).await;
    assert!(reached.is_err(), "{what}");
}

/// What an [`endless_stream`] upstream saw of its one connection.
pub struct Endless {
    pub addr: std::net::SocketAddr,
    /// Bytes written to the gateway so far.
    pub written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Resolves when the gateway closed the connection (a write failed).
    pub closed: tokio::sync::oneshot::Receiver<()>,
}

/// An upstream that answers its first connection with an OpenAI stream that never ends: 1 KiB
/// content events written as fast as the gateway takes them, until it hangs up.
pub async fn endless_stream() -> Endless {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (tx, closed) = tokio::sync::oneshot::channel();
    let count = written.clone();
    tokio::spawn(async move {
        let Ok((mut tcp, _)) = l.accept().await else {
            return;
        };
        // The request: its head and body arrive in the first reads; what they say is not needed.
        let mut buf = vec![0u8; 64 * 1024];
        let _ = tcp.read(&mut buf).await;
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let event = format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\
             \"finish_reason\":null}}]}}\n\n",
            "x".repeat(1024)
        );
        let mut out = head.as_bytes().to_vec();
        while tcp.write_all(&out).await.is_ok() {
            count.fetch_add(out.len() as u64, Ordering::Relaxed);
            out = event.repeat(16).into_bytes();
        }
        let _ = tx.send(());
    });
    Endless {
        addr,
        written,
        closed,
    }
}

/// What a [`raw_upstream`] has done so far.
pub struct Raw {
    pub addr: std::net::SocketAddr,
    /// Connections accepted, and answers written to their end.
    pub accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub answered: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Raw {
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until more than `n` answers are written to their end (and, closing, closed).
    pub async fn answered_past(&self, n: u64) {
        let done = &self.answered;
        super::wait::until(
            "the upstream finished its answer",
            std::time::Duration::from_secs(5),
            async || done.load(std::sync::atomic::Ordering::SeqCst) > n,
        )
        .await;
    }
}

/// An upstream that answers each request with `parts` (a whole HTTP/1.1 response between
/// them), written one by one `gap` apart. With `close` it then closes the connection `gap`
/// later, though the answer looked reusable (a length, no `connection: close`): the gateway
/// has kept it by then. Else it waits for the connection's next request.
pub async fn raw_upstream(parts: Vec<String>, gap: std::time::Duration, close: bool) -> Raw {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (a, done) = (accepted.clone(), answered.clone());
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let (parts, done) = (parts.clone(), done.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while read_request(&mut tcp, &mut buf).await {
                    for (i, part) in parts.iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(gap).await;
                        }
                        if tcp.write_all(part.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    if close {
                        tokio::time::sleep(gap).await;
                        let _ = tcp.shutdown().await;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    if close {
                        return;
                    }
                }
            });
        }
    });
    Raw {
        addr,
        accepted,
        answered,
    }
}

/// Reads one whole request (its head, then as many bytes as its length says) off `buf` and
/// the connection; `false` when the connection ends first.
async fn read_request(tcp: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> bool {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(buf).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return true;
            }
        }
        match tcp.read(&mut chunk).await {
            Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
}
