//! Upstream HTTP/1.1 connections kept here and driven by the task that uses them.
//!
//! hyper-util's pooled client runs every connection on a task of its own: the request reaches
//! it through a channel, and the answer's body comes back one chunk per hop between the two
//! tasks (a one-slot channel). A 20-event stream read from the upstream in one `read` took 20
//! task switches, and its frames reached the client in two or three writes. Here the request's
//! own task polls the connection: while waiting for the answer's head, and before each read of
//! its body. A burst read at once is handed over without leaving the task, and written to the
//! client at once. HTTP/2 (one connection shared by many requests) stays on hyper-util.
//!
//! An idle connection is polled by no one. Taken again, its first poll reads what the peer did
//! meanwhile (from the readiness the reactor recorded): a peer that closed it gives the request
//! back unsent, and it goes on another connection (as hyper-util does). One idle longer than
//! [`IDLE`] is closed by a sweep.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, Parts, Scheme};
use http::{HeaderValue, Request, Uri};
use http_body_util::Full;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::{TrySendError, http1};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection is kept idle (as hyper-util's pool was set).
const IDLE: Duration = Duration::from_secs(90);
/// How often idle connections past [`IDLE`] are closed.
const SWEEP: Duration = Duration::from_secs(30);

type Connector = Within<HttpsConnector<HttpConnector>>;
type Io = MaybeHttpsStream<TokioIo<TcpStream>>;
type Shared = hyper_util::client::legacy::Client<Connector, Full<Bytes>>;

/// The upstream client: HTTP/1.1 connections driven inline, or hyper-util's client for HTTP/2.
pub struct Client {
    how: How,
}

enum How {
    Inline(Arc<Pool>),
    Shared(Box<Shared>),
}

impl Client {
    pub fn inline(connector: Connector) -> Client {
        let pool = Arc::new(Pool {
            connector,
            hosts: Mutex::new(Vec::new()),
        });
        sweep_later(Arc::downgrade(&pool));
        Client {
            how: How::Inline(pool),
        }
    }

    pub fn shared(client: Shared) -> Client {
        Client {
            how: How::Shared(Box::new(client)),
        }
    }

    /// Sends `req` (an absolute URI) and gives the answer's head, its body still to read.
    pub async fn request(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<http::Response<Body>, BoxError> {
        match &self.how {
            How::Shared(c) => Ok(c.request(req).await?.map(Body::plain)),
            How::Inline(pool) => pool.request(req).await,
        }
    }
}

/// An answer's body. Reading it drives its connection, which goes back to the pool when the
/// body has been read to its end. A body dropped before that is read on for a moment by a
/// task of its own (see [`Drop`](#impl-Drop-for-Body)); past that its connection is closed.
pub struct Body {
    /// Always there but while a drop hands it to the draining task.
    inner: Option<Incoming>,
    lease: Option<Box<Lease>>,
}

/// A body left unread is read on at most this long, and this far, to keep its connection.
const DRAIN_WITHIN: Duration = Duration::from_millis(250);
const DRAIN_BYTES: usize = 16 * 1024;

impl Body {
    fn plain(inner: Incoming) -> Body {
        Body {
            inner: Some(inner),
            lease: None,
        }
    }

    /// The answer is read: the connection reads past its end and, when it can take another
    /// request, is kept.
    fn release(&mut self) {
        let Some(mut lease) = self.lease.take() else {
            return;
        };
        // Mostly the poll that read the end has already made the connection ask for the next
        // request; else one more (a no-op waker: from here on no task waits on it).
        if !lease.send.is_ready() {
            lease.drive(&mut Context::from_waker(Waker::noop()));
        }
        if lease.conn.is_none() || !lease.send.is_ready() {
            return;
        }
        if let Some(pool) = lease.pool.upgrade() {
            pool.put(lease);
        }
    }

    /// Whether the rest of the body, read now without waiting, is its end (the connection is
    /// then kept).
    fn ends_now(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        while let (Some(lease), Some(inner)) = (self.lease.as_mut(), self.inner.as_mut()) {
            lease.drive(&mut cx);
            match Pin::new(inner).poll_frame(&mut cx) {
                Poll::Ready(None) => self.release(),
                Poll::Ready(Some(Ok(f))) if f.data_ref().is_some_and(|d| d.is_empty()) => {}
                _ => return false,
            }
        }
        true
    }
}

impl Drop for Body {
    /// A reader that stopped at its protocol's own end (`[DONE]`, `message_stop`) leaves the
    /// body's own end unread: often it is already here; else it is read by a short-lived task
    /// (the upstream writes it a moment later), so a stream's connection is kept too. A
    /// reader that left half way (a client gone) costs the upstream at most [`DRAIN_BYTES`]
    /// more before its connection is closed.
    fn drop(&mut self) {
        if self.lease.is_none() || self.ends_now() {
            return;
        }
        let (Some(inner), Some(lease)) = (self.inner.take(), self.lease.take()) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let mut body = Body {
                inner: Some(inner),
                lease: Some(lease),
            };
            let mut read = 0;
            let _ = tokio::time::timeout(DRAIN_WITHIN, async {
                while let Some(Ok(f)) = http_body_util::BodyExt::frame(&mut body).await {
                    read += f.data_ref().map_or(0, Bytes::len);
                    if read > DRAIN_BYTES {
                        return;
                    }
                }
            })
            .await;
            // Not kept by now: its connection closes here, not drained again.
            body.lease = None;
        });
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(lease) = this.lease.as_mut() {
            lease.drive(cx);
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if inner.is_end_stream() => this.release(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

/// One HTTP/1.1 connection: the side requests go in by, and the connection itself, polled by
/// whoever holds the lease.
struct Lease {
    send: http1::SendRequest<Full<Bytes>>,
    /// `None` once the connection has finished (closed, or failed). It is dropped then, as
    /// a connection task ends: a request queued on it but never sent comes back through its
    /// callback with the request (`TrySendError`), and the body's sender is gone.
    conn: Option<http1::Connection<Io, Full<Bytes>>>,
    host: usize,
    idle_since: Instant,
    pool: Weak<Pool>,
}

impl Lease {
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = self.conn.as_mut()
            && Pin::new(conn).poll(cx).is_ready()
        {
            self.conn = None;
        }
    }
}

/// The connections kept, by upstream host.
struct Pool {
    connector: Connector,
    /// Few hosts per pool (one per upstream): a short list compared by authority, no hashing.
    /// A host once seen keeps its index, which its leases carry.
    hosts: Mutex<Vec<Host>>,
}

struct Host {
    https: bool,
    authority: Authority,
    /// Where to connect (scheme and authority) and the `Host` header, made once.
    dst: Uri,
    header: HeaderValue,
    /// Boxed: a lease moves between the pool and answers' bodies without copying.
    #[allow(clippy::vec_box)]
    idle: Vec<Box<Lease>>,
}

impl Pool {
    async fn request(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<http::Response<Body>, BoxError> {
        let (host, header, mut kept) = self.checkout(req.uri())?;
        req.headers_mut().entry(HOST).or_insert(header);
        origin_form(req.uri_mut());
        loop {
            let (mut lease, reused) = match kept.take() {
                Some(lease) => (lease, true),
                None => (self.connect(host).await?, false),
            };
            match exchange(&mut lease, req).await {
                Ok(resp) => {
                    return Ok(resp.map(|inner| Body {
                        inner: Some(inner),
                        lease: Some(lease),
                    }));
                }
                // A kept connection the peer had closed before the request went out: the
                // request goes again on a new one. A new connection's failure is the answer.
                Err(mut e) => match e.take_message() {
                    Some(back) if reused => {
                        req = back;
                        kept = self.take(host);
                    }
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// The host's index, its `Host` header and the connection it used last (the warmest), in
    /// one look at the pool. A kept connection is not probed: one the peer has closed gives
    /// its request back unsent, which then goes on another.
    fn checkout(&self, uri: &Uri) -> Result<(usize, HeaderValue, Option<Box<Lease>>), BoxError> {
        let authority = uri.authority().ok_or("the upstream URI has no host")?;
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let mut hosts = self.hosts.lock().map_err(|_| "connection pool poisoned")?;
        if let Some(i) = hosts
            .iter()
            .position(|h| h.https == https && h.authority == *authority)
        {
            let h = &mut hosts[i];
            return Ok((i, h.header.clone(), h.idle.pop()));
        }
        let scheme = if https { Scheme::HTTPS } else { Scheme::HTTP };
        let dst = Uri::builder()
            .scheme(scheme)
            .authority(authority.clone())
            .path_and_query("/")
            .build()?;
        // The port only when it is not the scheme's own (as hyper-util writes it).
        let default = if https { 443 } else { 80 };
        let header = match authority.port_u16() {
            Some(p) if p != default => HeaderValue::from_str(&format!("{}:{p}", authority.host())),
            _ => HeaderValue::from_str(authority.host()),
        }?;
        let index = hosts.len();
        hosts.push(Host {
            https,
            authority: authority.clone(),
            dst,
            header: header.clone(),
            idle: Vec::new(),
        });
        Ok((index, header, None))
    }

    /// Another kept connection to `host`, after one that had been closed.
    fn take(&self, host: usize) -> Option<Box<Lease>> {
        self.hosts.lock().ok()?.get_mut(host)?.idle.pop()
    }

    fn put(&self, mut lease: Box<Lease>) {
        lease.idle_since = Instant::now();
        if let Ok(mut hosts) = self.hosts.lock()
            && let Some(h) = hosts.get_mut(lease.host)
        {
            h.idle.push(lease);
        }
    }

    async fn connect(self: &Arc<Self>, host: usize) -> Result<Box<Lease>, BoxError> {
        let dst = {
            let hosts = self.hosts.lock().map_err(|_| "connection pool poisoned")?;
            hosts.get(host).ok_or("no such host")?.dst.clone()
        };
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
        let io = connector.call(dst).await?;
        let (send, conn) = http1::Builder::new().handshake(io).await?;
        Ok(Box::new(Lease {
            send,
            conn: Some(conn),
            host,
            idle_since: Instant::now(),
            pool: Arc::downgrade(self),
        }))
    }

    /// Closes the connections idle past [`IDLE`].
    fn sweep(&self) {
        let Ok(mut hosts) = self.hosts.lock() else {
            return;
        };
        for h in hosts.iter_mut() {
            h.idle.retain(|l| l.idle_since.elapsed() <= IDLE);
        }
    }
}

/// Sends the request on the lease's connection, polling the connection until the answer's head
/// is in.
async fn exchange(
    lease: &mut Lease,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<Incoming>, TrySendError<Request<Full<Bytes>>>> {
    let mut answer = std::pin::pin!(lease.send.try_send_request(req));
    std::future::poll_fn(|cx| {
        lease.drive(cx);
        answer.as_mut().poll(cx)
    })
    .await
}

/// The request line's target as HTTP/1.1 to an origin writes it: the path and query only.
fn origin_form(uri: &mut Uri) {
    let mut parts = Parts::default();
    parts.path_and_query = uri.path_and_query().cloned();
    *uri = Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"));
}

/// A task that closes idle connections past their time, for as long as the pool lives.
fn sweep_later(pool: Weak<Pool>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let mut every = tokio::time::interval(SWEEP);
        every.tick().await;
        loop {
            every.tick().await;
            match pool.upgrade() {
                Some(p) => p.sweep(),
                None => return,
            }
        }
    });
}

/// A connector whose whole connection (TCP and TLS) is bounded by `limit`.
#[derive(Clone)]
pub struct Within<C> {
    pub inner: C,
    pub limit: Duration,
}

impl<C> tower_service::Service<Uri> for Within<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let (connecting, limit) = (self.inner.call(dst), self.limit);
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err("connection (TCP and TLS) timed out".into()),
            }
        })
    }
}
