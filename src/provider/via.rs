//! What one upstream call carries besides the request: the reserved credential, the attempt's
//! trace context, and where the time spent waiting on the upstream adds up (what the gateway
//! subtracts to tell its own overhead from the upstream's time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ::http::header::HeaderValue;

#[derive(Clone, Copy)]
pub struct Via<'a> {
    /// The reserved credential's index (`None`: the channel has no key).
    pub cred: Option<usize>,
    /// `traceparent` (and the client's `tracestate`) for the upstream, when the request is traced.
    pub trace: Option<&'a TraceHeaders>,
    pub waited: &'a Waited,
}

impl Via<'static> {
    /// A call outside any client request (probes, a router's embeddings): its credential only.
    pub fn bare(cred: Option<usize>) -> Via<'static> {
        Via {
            cred,
            trace: None,
            waited: &UNCOUNTED,
        }
    }
}

/// Where the waits of calls no request accounts for go.
static UNCOUNTED: Waited = Waited(AtomicU64::new(0));

/// W3C Trace Context headers naming the attempt's span.
#[derive(Debug, Clone)]
pub struct TraceHeaders {
    pub traceparent: HeaderValue,
    pub tracestate: Option<HeaderValue>,
}

/// Time spent waiting on an upstream, summed over a call's waits. A wait is counted when its
/// guard drops, so a wait cut short (a timeout, the client leaving) still counts.
#[derive(Debug, Default)]
pub struct Waited(AtomicU64);

impl Waited {
    /// Starts a wait; it ends when the guard drops.
    pub fn start(&self) -> Waiting<'_> {
        Waiting {
            waited: self,
            since: Instant::now(),
        }
    }

    pub fn add(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

pub struct Waiting<'a> {
    waited: &'a Waited,
    since: Instant,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waited.add(self.since.elapsed());
    }
}

/// A traced request's context, which each of its calls continues with a span of its own.
#[derive(Debug, Clone)]
pub struct TraceContext {
    pub trace_id: u128,
    pub sampled: bool,
    /// The client's `tracestate`, passed on unchanged.
    pub tracestate: Option<HeaderValue>,
}

impl TraceContext {
    /// The headers naming `span_id` (one call's span) as the upstream's parent:
    /// `00-<trace id>-<span id>-<flags>`, in lowercase hex, written straight into its 55 bytes
    /// (a call's header on every traced call, so no formatter).
    pub fn headers(&self, span_id: u64) -> Option<TraceHeaders> {
        let mut v = *b"00-00000000000000000000000000000000-0000000000000000-00";
        hex_into(&mut v[3..35], self.trace_id);
        hex_into(&mut v[36..52], u128::from(span_id));
        hex_into(&mut v[53..55], u128::from(self.sampled));
        Some(TraceHeaders {
            traceparent: HeaderValue::from_bytes(&v).ok()?,
            tracestate: self.tracestate.clone(),
        })
    }
}

/// Writes the low `out.len()` hex digits of `n` into `out`, most significant first.
fn hex_into(out: &mut [u8], mut n: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = DIGITS[(n & 0xf) as usize];
        n >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_the_w3c_form() {
        let t = TraceContext {
            trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            sampled: true,
            tracestate: None,
        };
        let h = t.headers(0x00f067aa0ba902b7).unwrap();
        assert_eq!(
            h.traceparent.to_str().unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let t = TraceContext {
            trace_id: 1,
            sampled: false,
            tracestate: None,
        };
        assert_eq!(
            t.headers(u64::MAX).unwrap().traceparent.to_str().unwrap(),
            "00-00000000000000000000000000000001-ffffffffffffffff-00"
        );
    }
}
