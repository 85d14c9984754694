//! The accept loop: HTTP/1.1 connections served by hyper with the limits a hostile client
//! meets (`[server]` `max_connections`, `header_read_timeout_ms`, `idle_timeout_ms`,
//! `client_write_timeout_ms`), and a graceful stop that lets requests in flight finish.
//!
//! hyper's own header timeout starts when it begins to wait for a head, which would also close
//! idle keep-alive connections; ours starts at the head's first byte and is not reset by
//! trickled bytes. The connection's clock is shared by the socket (which notes that first
//! byte) and the timer hyper is given (which reads it).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::config::ConnLimits;

/// Serves `app` on `listener` until `stop` resolves, then waits for open connections to
/// finish their requests (each is told to close once its current request is answered).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Each connection holds a receiver: the sender sees them all gone when every one closed.
    let (closing, closed) = watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            a = accept(&listener, &slots) => a,
        };
        let Some((tcp, peer, slot)) = accepted else {
            continue;
        };
        let (app, closed) = (app.clone(), closed.clone());
        tokio::spawn(async move {
            serve_connection(tcp, peer, app, limits, closed).await;
            drop(slot);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    drop(closed);
    closing.closed().await;
}

/// The next connection, once a slot is free; `None` after an accept error (logged; the loop
/// goes on, as a full file table or a reset before accept is not the listener's end).
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, tokio::sync::OwnedSemaphorePermit)> {
    let slot = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((tcp, peer)) => {
            // Without TCP_NODELAY each small SSE write waits for the client's delayed ACK.
            let _ = tcp.set_nodelay(true);
            Some((tcp, peer, slot))
        }
        Err(e) => {
            tracing::warn!(error = %e, "accept failed");
            // Out of file descriptors: give connections a moment to close before retrying.
            tokio::time::sleep(Duration::from_millis(20)).await;
            None
        }
    }
}

/// Serves one client connection until it closes, or until `closed` says the server stops (then
/// once its request in flight, if any, is answered).
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: ConnLimits,
    mut closed: watch::Receiver<bool>,
) {
    let clock = Arc::new(ConnClock::default());
    let io = Guarded {
        tcp,
        clock: clock.clone(),
        write_timeout: limits.client_write_timeout,
        stalled: None,
    };
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        // A Router is always ready: no poll_ready first.
        tower_service::Service::call(&mut app.clone(), req.map(axum::body::Body::new))
    });
    let mut b = http1::Builder::new();
    b.timer(HeadTimer { clock, limits })
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(MAX_HEAD_BYTES);
    let mut conn = std::pin::pin!(b.serve_connection(TokioIo::new(io), service));
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        _ = closed.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "client connection ended");
    }
}

/// The largest request head taken (a larger one, like more than 100 headers, is a 431).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// When the head being read got its first byte (microseconds since `EPOCH`, 0: not yet).
#[derive(Default)]
struct ConnClock {
    first_byte: AtomicU64,
}

static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

fn micros_now() -> u64 {
    // 1 so that "now" is never mistaken for "not yet".
    (EPOCH.elapsed().as_micros() as u64).max(1)
}

impl ConnClock {
    fn bytes_arrived(&self) {
        if self.first_byte.load(Ordering::Relaxed) == 0 {
            self.first_byte.store(micros_now(), Ordering::Relaxed);
        }
    }

    /// A new head is awaited: its clock starts at its own first byte.
    fn rearm(&self) {
        self.first_byte.store(0, Ordering::Relaxed);
    }

    fn first_byte(&self) -> Option<Instant> {
        match self.first_byte.load(Ordering::Relaxed) {
            0 => None,
            t => Some(*EPOCH + Duration::from_micros(t)),
        }
    }
}

/// The timer hyper is given: its only use on an HTTP/1 server connection is the wait for a
/// request head, which this turns into "idle timeout, or header timeout from the first byte".
struct HeadTimer {
    clock: Arc<ConnClock>,
    limits: ConnLimits,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, _deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.clock.rearm();
        Box::pin(HeadWait {
            clock: self.clock.clone(),
            idle_until: Instant::now() + self.limits.idle_timeout,
            header_timeout: self.limits.header_read_timeout,
            sleep: None,
        })
    }
}

/// Resolves when the head's time is up: `header_timeout` after its first byte, or the idle
/// timeout when no byte came.
struct HeadWait {
    clock: Arc<ConnClock>,
    idle_until: Instant,
    header_timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::rt::Sleep for HeadWait {}

impl Future for HeadWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let deadline = match this.clock.first_byte() {
            Some(t) => t + this.header_timeout,
            None => this.idle_until,
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut this.sleep {
            Some(s) if s.deadline() == deadline => {}
            Some(s) => s.as_mut().reset(deadline),
            None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        match &mut this.sleep {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// The client's socket: notes each head's first byte, and fails a write the client has not
/// taken for `write_timeout` (hyper then drops the connection, and with it the response body
/// and the upstream call behind it).
struct Guarded {
    tcp: TcpStream,
    clock: Arc<ConnClock>,
    write_timeout: Duration,
    /// Since when a write has waited on the client (dropped, and its timer with it, when the
    /// write goes through).
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Guarded {
    /// A write that made no progress: starts (or checks) the stall clock.
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.write_timeout;
        let s = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(s.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client took no bytes within client_write_timeout_ms",
        ))
    }

    fn progress<T>(&mut self, p: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match p {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stall(cx).map(Err),
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.clock.bytes_arrived();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.tcp).poll_write(cx, b);
        this.progress(p, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.progress(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.tcp).poll_flush(cx);
        this.progress(p, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.tcp).poll_shutdown(cx);
        this.progress(p, cx)
    }
}
